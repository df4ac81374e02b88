//! Flag bits of the `flags` byte of a full frame.
//!
//! Layer: quiver-wire, the bottom. Bit values only: which flags a frame type allows is
//! checked where frames are parsed and emitted.

/// The ack fields (`cumulative_ack`, SACK ranges, `credit`) are meaningful.
pub const ACK: u8 = 0x01;
/// The sender asks for an immediate ack (no delayed ack).
pub const ACK_REQUESTED: u8 = 0x02;
/// On an Ack: it answers the Ping whose `packet_number` it repeats, and was sent on the
/// path that Ping arrived on (how a path's liveness and RTT are probed).
pub const PING_REPLY: u8 = 0x04;
/// The SACK list leaves out ranges between its last two ranges (the receiver had more
/// than fit): the packets between them may or may not have arrived.
pub const SACK_TRUNCATED: u8 = 0x08;
/// All flag bits this version defines.
pub const ALL: u8 = ACK | ACK_REQUESTED | PING_REPLY | SACK_TRUNCATED;
