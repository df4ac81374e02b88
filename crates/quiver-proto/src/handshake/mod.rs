//! The connection handshake: sans-IO state machines that prove both ends of a connection hold
//! the job's secret key (`docs/protocol.md`, section "Handshake"; byte layouts in
//! `quiver_wire::handshake`).
//!
//! ```text
//!  Initiator (connector)                              Responder (endpoint connected to)
//!  new(key, request, nonce_i) ── Hello ──────────────▶ handle_hello → ConnectRequest
//!                                                     accept(params_r) | reject(reason)
//!  handle_challenge(params_i) ◀──────── Challenge ──
//!    → params_r                ── Proof ──────────────▶ handle_proof → params_i
//!  handle_verdict            ◀──────────── Verdict ──
//! ```
//!
//! Both sides prove knowledge of the key with a keyed BLAKE3 MAC over the whole transcript so
//! far, each under its own label so that one side's MAC is never valid as the other's:
//!
//! - `mac_h = MAC(key, "quiver-hs-helo" ‖ hello without mac_h)`: checked by
//!   [`verify_hello`] before a responder keeps anything, so a stranger's Hello costs one MAC
//!   and no state; its answer is a refusal (`WrongKey`) shorter than the Hello
//! - `mac_r = MAC(key, "quiver-hs-resp" ‖ hello ‖ challenge without mac_r)`
//! - `mac_i = MAC(key, "quiver-hs-init" ‖ hello ‖ challenge without mac_r ‖ proof without mac_i)`
//! - `mac_v = MAC(key, "quiver-hs-verd" ‖ hello ‖ challenge without mac_r ‖ proof without mac_i
//!   ‖ verdict without mac_v)`
//!
//! `mac_v` confirms to the initiator that the Verdict is the responder's answer to this very
//! Proof, so an initiator only reaches "established" if its responder did too.
//!
//! The Hello carries `nonce_i` and the Challenge `nonce_r`, both fresh random values supplied
//! by the caller, so a recorded Challenge or Proof does not verify in any other handshake.
//! The key never leaves the process. The `params` fields let the transport carry its own
//! parameters (ring sizes, …) covered by the MACs.
//!
//! A recorded Hello replayed later verifies again (it carries no time); a responder answers
//! it with a Challenge shorter than the Hello, and the replayer cannot produce the Proof.
//!
//! What it does not do: rejections (a Challenge with a status other than `Ok`) carry no MAC,
//! so an attacker on the path can refuse a connection (but not open one). Every rank of a job
//! holds the same key, so a member can claim any rank in its Hello. Data sent after the
//! handshake is not authenticated by it.
//!
//!
//! Files: `key.rs` (the job key and the MACs), `request.rs` (who connects to whom, why a
//! responder refuses), `error.rs` (what went wrong), `outbox.rs` (the one message waiting
//! to be sent), `initiator.rs` and `responder.rs` (the two state machines).

mod error;
mod initiator;
mod key;
mod outbox;
mod request;
mod responder;
#[cfg(test)]
mod tests;

pub use error::HandshakeError;
pub use initiator::Initiator;
pub use key::{constant_time_eq, job_frame_key, session_frame_keys, JobKey, KEY_LEN};
pub use request::{ConnectRequest, RejectReason};
pub use responder::{hello_refusal, verify_hello, Responder};
