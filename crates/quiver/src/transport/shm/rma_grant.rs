//! The target's side of a key request over shared memory: after the job-key handshake
//! asking for [`RMA_PORT`], the listener reads the peer's key, checks it against the rank's
//! live regions (`transport::regions`) and answers with a grant and, when granted, the
//! region's memory file (read-only for a read-only key), or for memory the caller lent its
//! control file and address, adopting the request stream that rode with the key. The
//! initiator's side is [`super::rma`].

use std::net::TcpStream;
use std::os::fd::{AsRawFd, OwnedFd};

use quiver_transport::sys;
use quiver_wire::rma::{CallerGrantRepr, GrantRepr, GrantStatus, KeyRepr, Rights};

use crate::transport::local::LocalRank;
use crate::transport::regions::Granted;
use crate::transport::rma_stream::StreamServed;

/// Answers the key request `message` that rank `peer` (process `pid`) sent on `sock` after
/// the handshake, with `fds` attached (a request stream's end): the grant and, when
/// granted, the region's descriptor (and for lent memory the caller grant; the stream is
/// then adopted by the rank's request service).
pub(crate) fn answer_key(
    local: &LocalRank,
    sock: &OwnedFd,
    (peer, pid): (u32, libc::pid_t),
    message: &[u8],
    fds: Vec<OwnedFd>,
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
    let sending = |e: std::io::Error| format!("sending region {} to rank {peer}: {e}", key.region);
    match local
        .regions
        .grant(&key, (local.job_id, local.rank), (peer, pid))
    {
        Ok(Granted::File { fd, len }) => {
            let grant = GrantRepr {
                status: GrantStatus::Granted,
                rights: key.rights,
                len,
            }
            .emit();
            sys::send_with_fds(sock, &grant, &[fd.as_raw_fd()]).map_err(sending)
        }
        Ok(Granted::Caller {
            control,
            len,
            addr,
            slot,
        }) => {
            let grant = GrantRepr {
                status: GrantStatus::GrantedCaller,
                rights: key.rights,
                len,
            }
            .emit();
            sys::send_with_fds(sock, &grant, &[control.as_raw_fd()]).map_err(sending)?;
            sys::send_datagram(sock, &CallerGrantRepr { slot, addr }.emit()).map_err(sending)?;
            // The request stream for atomics and for copies cross-memory attach refuses.
            if let Ok([stream]) = <[OwnedFd; 1]>::try_from(fds) {
                local.registry.accepted();
                local
                    .rma
                    .adopt(Box::new(StreamServed::new(TcpStream::from(stream), peer)));
                // A sleeping endpoint watches the request streams it knew of: wake it.
                local.registry.wake_all();
            }
            Ok(())
        }
        Err(status) => {
            let grant = refusal(status).emit();
            sys::send_datagram(sock, &grant).map_err(|e| e.to_string())
        }
    }
}
