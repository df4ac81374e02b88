//! Whom a datagram is for, as far as its bytes say before verification: the cheap peek a
//! receiver uses to pick the connection that then parses the frame.
//!
//! Layer: quiver-wire, the bottom. Never panics and verifies nothing but magic and
//! version (or the Stream tag); no allocation.

use super::bytes::read_u64;
use super::field;
use super::layout::{check_magic_version, SHORT_ID_BITS, STREAM_TAG};

/// The low [`SHORT_ID_BITS`] bits of a connection id: what a Stream frame carries of its
/// destination. A side chooses its connection ids so that these are unique among its
/// connections.
pub const fn short_id(id: u64) -> u32 {
    (id & ((1 << SHORT_ID_BITS) - 1)) as u32
}

/// Whom a datagram is for, as far as its bytes say before verification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Destination {
    /// A full frame's destination id (0: "whoever takes new connections").
    Id(u64),
    /// A Stream frame's [`short_id`] of its destination.
    Short(u32),
}

/// Cheap demultiplexing peek: whom a datagram is for, or `None` if it is too short or its
/// magic and version (or Stream tag) are wrong. Does not verify the checksum, so the
/// connection it names must still parse the frame ([`Frame::parse_for`](super::Frame::parse_for)).
pub fn destination(datagram: &[u8]) -> Option<Destination> {
    if datagram.first() == Some(&STREAM_TAG) {
        if datagram.len() < field::stream::SHORT_DEST_ID.end {
            return None;
        }
        return Some(Destination::Short(read_short_id(datagram)));
    }
    dest_id(datagram).map(Destination::Id)
}

/// Demultiplexing peek for a full frame: its destination connection id, or `None` if it is
/// too short, its magic or version is wrong, or it is a Stream frame (which carries only a
/// short id: see [`destination`]). Does not verify the checksum. 0 means "to whoever takes
/// new connections".
pub fn dest_id(datagram: &[u8]) -> Option<u64> {
    if datagram.len() < field::DEST_ID.end || check_magic_version(datagram).is_err() {
        return None;
    }
    Some(read_u64(datagram, field::DEST_ID.start))
}

/// The short destination id of a Stream frame at least 4 bytes long.
pub(super) fn read_short_id(datagram: &[u8]) -> u32 {
    let at = field::stream::SHORT_DEST_ID;
    u32::from_le_bytes([
        datagram[at.start],
        datagram[at.start + 1],
        datagram[at.start + 2],
        0,
    ])
}
