//! The job's secret key and the keyed MACs of the handshake.
//!
//! Layer: sans-IO, inside [`crate::handshake`]. It owns the key (never printed), the labels
//! that keep each side's MAC from verifying as the other's, and the MAC computations. No
//! I/O, no randomness.

use quiver_wire::frame::{FrameKey, FRAME_SECRET_LEN};
use quiver_wire::handshake::MAC_LEN;

/// Length of the job key in bytes.
pub const KEY_LEN: usize = 32;

/// Label mixed into the initiator's Hello MAC.
pub(super) const LABEL_HELLO: &[u8; 14] = b"quiver-hs-helo";
/// Label mixed into the responder's MAC.
pub(super) const LABEL_RESPONDER: &[u8; 14] = b"quiver-hs-resp";
/// Label mixed into the initiator's MAC.
pub(super) const LABEL_INITIATOR: &[u8; 14] = b"quiver-hs-init";
/// Label mixed into the responder's Verdict MAC.
pub(super) const LABEL_VERDICT: &[u8; 14] = b"quiver-hs-verd";
/// Label of a connection's session secret (over the Hello and the Challenge, which carry
/// both nonces).
pub(super) const LABEL_SESSION: &[u8; 14] = b"quiver-fr-sess";
/// Label of the job's frame key (Resets).
const LABEL_FRAME_JOB: &[u8; 14] = b"quiver-fr-job_";
/// Context of the key of the frames the initiator sends.
const LABEL_INITIATOR_TO_RESPONDER: &[u8; 14] = b"quiver-fr-i2r_";
/// Context of the key of the frames the responder sends.
const LABEL_RESPONDER_TO_INITIATOR: &[u8; 14] = b"quiver-fr-r2i_";

/// The job's shared secret key (`QUIVER_JOB_KEY`). `Debug` does not print it.
/// No `PartialEq`: comparing secrets is not something callers should need.
#[derive(Clone)]
pub struct JobKey([u8; KEY_LEN]);

impl JobKey {
    /// Wraps the 32 key bytes.
    pub const fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        Self(bytes)
    }
}

impl core::fmt::Debug for JobKey {
    fn fmt(&self, formatter: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        formatter.write_str("JobKey(<redacted>)")
    }
}

/// The job's frame key: covers Reset frames (every member of the job can make it, nobody
/// else; decision 0067).
pub fn job_frame_key(key: &JobKey) -> FrameKey {
    FrameKey::new(&mac(key, LABEL_FRAME_JOB, &[]))
}

/// The frame keys of one connection's two directions from its session secret (a
/// handshake's, [`crate::handshake::Initiator::session_secret`]): `(sent by the
/// initiator, sent by the responder)`.
pub fn session_frame_keys(session: &[u8; MAC_LEN]) -> (FrameKey, FrameKey) {
    let direction = |label: &[u8]| -> FrameKey {
        let mut hasher = blake3::Hasher::new_keyed(session);
        hasher.update(label);
        let bytes: [u8; FRAME_SECRET_LEN] = hasher.finalize().into();
        FrameKey::new(&bytes)
    };
    (
        direction(LABEL_INITIATOR_TO_RESPONDER),
        direction(LABEL_RESPONDER_TO_INITIATOR),
    )
}

/// Compares two MACs in time independent of where they differ.
pub fn constant_time_eq(left: &[u8; MAC_LEN], right: &[u8; MAC_LEN]) -> bool {
    let mut difference = 0u8;
    for (a, b) in left.iter().zip(right.iter()) {
        difference |= a ^ b;
    }
    // Keeps the optimiser from turning the loop into an early-exit comparison.
    core::hint::black_box(difference) == 0
}

/// Keyed BLAKE3 over `label` followed by `parts`.
pub(super) fn mac(key: &JobKey, label: &[u8], parts: &[&[u8]]) -> [u8; MAC_LEN] {
    keyed_transcript(key, label, parts).finalize().into()
}

/// A keyed BLAKE3 state fed with `label` and `parts`, to be continued with later messages.
pub(super) fn keyed_transcript(key: &JobKey, label: &[u8], parts: &[&[u8]]) -> blake3::Hasher {
    let mut hasher = blake3::Hasher::new_keyed(&key.0);
    hasher.update(label);
    for part in parts {
        hasher.update(part);
    }
    hasher
}
