//! The target's side of a key request over shared memory: after the job-key handshake
//! asking for [`RMA_PORT`], the listener reads the peer's key, checks it against the rank's
//! live regions (`transport::regions`) and answers with a grant and, when granted, the
//! region's memory file (read-only for a read-only key). The initiator's side is
//! [`super::rma`].

use std::os::fd::{AsRawFd, OwnedFd};

use quiver_transport::sys;
use quiver_wire::rma::{GrantRepr, GrantStatus, KeyRepr, Rights};

use crate::transport::local::LocalRank;

/// Answers the key request `message` that rank `peer` sent on `sock` after the handshake:
/// the grant and, when granted, the region's descriptor.
pub(crate) fn answer_key(
    local: &LocalRank,
    sock: &OwnedFd,
    peer: u32,
    message: &[u8],
) -> std::result::Result<(), String> {
    let refusal = |status| GrantRepr {
        status,
        rights: Rights::Read,
        len: 0,
    };
    let key = match KeyRepr::parse(message) {
        Ok(key) => key,
        Err(e) => {
            local
                .regions
                .key_refused(peer, 0, &format!("not a key ({e})"));
            let grant = refusal(GrantStatus::UnknownKey).emit();
            return sys::send_datagram(sock, &grant).map_err(|e| e.to_string());
        }
    };
    match local.regions.grant(&key, (local.job_id, local.rank), peer) {
        Ok((fd, len)) => {
            let grant = GrantRepr {
                status: GrantStatus::Granted,
                rights: key.rights,
                len,
            }
            .emit();
            sys::send_with_fds(sock, &grant, &[fd.as_raw_fd()])
                .map_err(|e| format!("sending region {} to rank {peer}: {e}", key.region))
        }
        Err(status) => {
            let grant = refusal(status).emit();
            sys::send_datagram(sock, &grant).map_err(|e| e.to_string())
        }
    }
}
