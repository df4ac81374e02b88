//! The reliable datagram protocol: a sans-IO connection that carries messages of any size
//! over an unreliable datagram service (UDP, the in-memory transport, the simulator)
//! (`docs/protocol.md`, section "Datagram frames (udp / in-memory)"; frame layout in
//! `quiver_wire::frame`).
//!
//! What it does:
//! - proves job membership with the existing key handshake (`crate::handshake`), its four
//!   messages carried as payloads of Handshake frames and retransmitted on timeout;
//! - numbers Data and Close frames with packet numbers; a retransmission reuses the packet
//!   number and bytes of the original (duplicates are recognised by packet number), or,
//!   when the datagram size was lowered since and the frame no longer fits, its number with
//!   the bytes that fit, the rest in new frames (`send/resend.rs`, decision 0081);
//! - acknowledges with a cumulative ack plus SACK ranges, delayed (every second frame at
//!   once, otherwise within `ack_delay_ns`) and piggybacked on every frame it sends;
//! - measures RTT (RFC 6298, Karn's rule) for the retransmission timeout, with exponential
//!   backoff and the configured clamp; retransmits fast after 3 duplicate acks or when 3
//!   later transmissions were acknowledged (SACK);
//! - flow control driven by the receiver: every frame carries a credit, the stream offset up
//!   to which the receiver has buffer; a sender never sends beyond it, so a slow reader holds
//!   the sender back and nothing is dropped for lack of buffer;
//! - fragments messages of any size into frames and reassembles them through the fixed
//!   receive window, so memory does not grow with message size;
//! - pings idle connections, reports [`Event::PeerUnreachable`] after `idle_timeout_ns`
//!   without a datagram from the peer or `max_retransmits` timeouts in a row without
//!   progress, and closes gracefully;
//! - stripes one connection over `path_count` paths (links): every datagram arrives on a
//!   path and every [`Transmit`] names the path to send it on; each path has its own RTT,
//!   delivery rate, congestion window, loss detection and retransmission timer, goes down
//!   when it stops working (its frames move to the others) and rejoins when a probe is
//!   answered (`paths.rs`, `docs/striping.md`).
//!
//! What it does not do: congestion control beyond each path's window (it follows the
//! measured delivery rate and ignores random loss; there is no fairness between
//! connections), I/O, clocks, randomness. Frames are authenticated (decision 0067): each
//! direction's key comes from the handshake (installed as the connection is established),
//! a frame whose tag fails is dropped as corrupt, and a frame taken before (a data frame, a
//! plain Ack by its number, a Ping by its counter) is refused before anything in it is
//! used.
//!
//! The answer first: the acknowledgement fields of a Data frame that brings the
//! application a whole message are processed only after the first frame of the answer is
//! built (the next [`ReliableConnection::poll_transmit`]), or at the next input, whichever
//! comes first: a request's answer then leaves without waiting for the bookkeeping of the
//! ack it carried (in a udp ping-pong over loopback, the time from a request's arrival to
//! its frame being handled went from 0.67-0.86 µs to 0.32-0.54 µs). Such an ack counts as
//! it would have on arrival (its time, the frames sent by then).
//!
//! Sending in place: instead of copying a message into the send buffer
//! ([`ReliableConnection::write_message`]), the application may lend its bytes
//! ([`ReliableConnection::lend_message`]): their room in the send buffer is reserved, frames
//! of them take their payload from the application's message (passed to
//! [`ReliableConnection::poll_transmit_lent`]), and before the application reuses its
//! message it copies what is still unacknowledged into the send buffer
//! ([`ReliableConnection::adopt_lent`]). Retransmission, the memory bound and close work as
//! for written bytes; acknowledged lent bytes are never copied (1 MiB messages over
//! loopback udp went 6-13% faster than copied ones, paired in the same runs).
//!
//! Several messages in place: each message may be lent under a token the application
//! chooses ([`ReliableConnection::lend_message_as`]), and many may be lent at once (a
//! queue of lent ranges, one per message). Frames of lent bytes take their payload from a
//! lookup the application passes ([`ReliableConnection::poll_transmit_lending`]: token to
//! the whole message), retransmissions included; once every byte of a message is
//! acknowledged its token comes back from [`ReliableConnection::poll_released`], after which
//! the connection never asks for it again. A failed connection releases every token.
//!
//! Deterministic: no clock, no randomness (ids and nonces are arguments), no hash-order
//! dependence. Same inputs, same outputs, byte for byte.
//!
//! Files: `config.rs` (the limits), `connection.rs` (the connection, its creation and
//! its accessors), `handshaking.rs` (the key handshake in Handshake frames), `input.rs`
//! (datagrams in; `input/in_order.rs`), `output.rs` (datagrams out, and the Reset for
//! unknown ids), `timers.rs` (retransmission, keepalive, idle and handshake timers),
//! `writing.rs` and `reading.rs` (the application's side of sending and receiving),
//! `memory.rs` (the memory bound),
//! `events.rs`, `stats.rs`, `posted.rs`, `time.rs` (types), `fast_path.rs` (the short
//! routes of a request-response exchange, and their switch for tests), and below them
//! `send.rs` (with `send/resend.rs`: what is resent, re-cut for a lowered datagram size;
//! `send/lends.rs`: lent bytes; `send/short_routes.rs`), `recv.rs` (with
//! `recv/in_order.rs`), `paths.rs`, `rtt.rs`, `stream_ring.rs` and `recut.rs` (the
//! sender's and receiver's state, the paths, the RTT estimator, the byte ring, the
//! re-cut's data).

mod config;
mod connection;
mod events;
mod fast_path;
mod handshaking;
mod input;
mod memory;
mod output;
mod paths;
mod posted;
mod reading;
mod recut;
mod recv;
mod rtt;
mod send;
mod stats;
mod stream_ring;
#[cfg(test)]
mod tests;
mod time;
mod timers;
mod writing;

pub use config::{ConfigError, ReliableConfig, IDENTITY_LEN};
pub use connection::{AcceptError, ReliableConnection};
pub use events::{Event, FailReason, State};
pub use output::{reset_for, Transmit};
pub use paths::{PathState, PathStats, MAX_PATHS};
pub use posted::{NoBuffers, PostedBuffers, PostedRead};
pub use recv::MAX_POSTED_READERS;
pub use send::LEND_MESSAGE_TOKEN;
pub use stats::ReliableStats;
pub use time::Nanos;
pub use writing::SendError;
