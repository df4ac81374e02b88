//! The parsed header of a frame, and its emission (full frames and the compact Stream
//! layout).
//!
//! Layer: quiver-wire, the bottom. Writes into a caller's buffer, checks its inputs and
//! returns errors instead of panicking; no allocation.

use super::bytes::write_u64;
use super::demux::short_id;
use super::error::FrameError;
use super::field;
use super::flags;
use super::frame_type::FrameType;
use super::integrity::{checksum, stream_checksum};
use super::layout::{
    FIXED_HEADER_LEN, MAGIC, MAX_PAYLOAD_LEN, SACK_RANGE_LEN, STREAM_HEADER_LEN, STREAM_TAG,
    VERSION,
};
use super::sack::{check_sack_ranges, SackRanges};

/// The parsed header of a frame. Fields a frame type does not use are zero by convention
/// (the format does not require it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FrameHeader {
    /// What the frame carries.
    pub frame_type: FrameType,
    /// Bits of [`flags`].
    pub flags: u8,
    /// Connection id of the receiver (0: "whoever takes new connections").
    pub dest_id: u64,
    /// Connection id of the sender.
    pub src_id: u64,
    /// Packet number (Data, Close); a token on Ping, repeated by the Ack that answers it
    /// ([`flags::PING_REPLY`]); informational on other types.
    pub packet_number: u64,
    /// Next packet number the sender expects: every packet below it arrived.
    pub cumulative_ack: u64,
    /// Stream offset (exclusive) up to which the sender of this frame accepts data.
    pub credit: u64,
    /// Which message the payload belongs to (Data).
    pub message_id: u64,
    /// Total length of that message in bytes (Data).
    pub message_len: u64,
    /// Offset of the payload within the message (Data).
    pub fragment_offset: u64,
    /// Offset of the payload within the connection's byte stream (Data, Close).
    pub stream_offset: u64,
    /// Selective acks above `cumulative_ack`.
    pub sack: SackRanges,
}

impl FrameHeader {
    /// A header of `frame_type` between `src_id` and `dest_id` with every other field zero.
    pub const fn new(frame_type: FrameType, dest_id: u64, src_id: u64) -> Self {
        Self {
            frame_type,
            flags: 0,
            dest_id,
            src_id,
            packet_number: 0,
            cumulative_ack: 0,
            credit: 0,
            message_id: 0,
            message_len: 0,
            fragment_offset: 0,
            stream_offset: 0,
            sack: SackRanges::new(),
        }
    }

    /// Length of the encoded header in bytes.
    pub fn header_len(&self) -> usize {
        if self.frame_type == FrameType::Stream {
            return STREAM_HEADER_LEN;
        }
        FIXED_HEADER_LEN + self.sack.len() * SACK_RANGE_LEN
    }

    /// Writes the header into `out[..header_len()]`, with the checksum computed over the
    /// header and `payload`. Returns the header length; the datagram is the header followed
    /// by `payload`.
    ///
    /// # Errors
    /// [`FrameError::BufferTooSmall`], [`FrameError::PayloadTooLong`],
    /// [`FrameError::UnknownFlags`], [`FrameError::BadSackRange`] (ranges must ascend, be
    /// non-empty, start above `cumulative_ack`, leave gaps and fit u32 offsets/lengths).
    pub fn emit(&self, out: &mut [u8], payload: &[u8]) -> Result<usize, FrameError> {
        if self.frame_type == FrameType::Stream {
            return self.emit_stream(out, payload);
        }
        let header_len = self.header_len();
        let Some(out) = out.get_mut(..header_len) else {
            return Err(FrameError::BufferTooSmall {
                needed: header_len,
                actual: out.len(),
            });
        };
        let payload_len = u16::try_from(payload.len()).map_err(|_| FrameError::PayloadTooLong {
            actual: payload.len(),
            max: MAX_PAYLOAD_LEN,
        })?;
        if self.flags & !flags::ALL != 0 {
            return Err(FrameError::UnknownFlags { actual: self.flags });
        }
        check_sack_ranges(self.cumulative_ack, self.sack.as_slice())?;

        out[field::MAGIC].copy_from_slice(&MAGIC);
        out[field::VERSION] = VERSION;
        out[field::TYPE] = self.frame_type.code();
        out[field::FLAGS] = self.flags;
        // Invariant: the SackRanges type holds at most MAX_SACK_RANGES (16) ranges.
        out[field::SACK_COUNT] = self.sack.len() as u8;
        out[field::PAYLOAD_LEN].copy_from_slice(&payload_len.to_le_bytes());
        out[field::CHECKSUM].fill(0);
        write_u64(out, field::DEST_ID.start, self.dest_id);
        write_u64(out, field::SRC_ID.start, self.src_id);
        write_u64(out, field::PACKET_NUMBER.start, self.packet_number);
        write_u64(out, field::CUMULATIVE_ACK.start, self.cumulative_ack);
        write_u64(out, field::CREDIT.start, self.credit);
        write_u64(out, field::MESSAGE_ID.start, self.message_id);
        write_u64(out, field::MESSAGE_LEN.start, self.message_len);
        write_u64(out, field::FRAGMENT_OFFSET.start, self.fragment_offset);
        write_u64(out, field::STREAM_OFFSET.start, self.stream_offset);
        for (index, range) in self.sack.as_slice().iter().enumerate() {
            let at = FIXED_HEADER_LEN + index * SACK_RANGE_LEN;
            // Invariant: check_sack_ranges verified that both fit a u32.
            let offset = (range.start - self.cumulative_ack) as u32;
            let len = (range.end - range.start) as u32;
            out[at..at + 4].copy_from_slice(&offset.to_le_bytes());
            out[at + 4..at + 8].copy_from_slice(&len.to_le_bytes());
        }
        let checksum = checksum(out, payload);
        out[field::CHECKSUM].copy_from_slice(&checksum.to_le_bytes());
        Ok(header_len)
    }
}

impl FrameHeader {
    /// A Stream frame's header: flags must be 0 and there are no SACK ranges; only the low
    /// 24 bits of the destination id and the low 32 bits of the packet number and stream
    /// offset are written (the checksum covers the full id).
    fn emit_stream(&self, out: &mut [u8], payload: &[u8]) -> Result<usize, FrameError> {
        let Some(out) = out.get_mut(..STREAM_HEADER_LEN) else {
            return Err(FrameError::BufferTooSmall {
                needed: STREAM_HEADER_LEN,
                actual: out.len(),
            });
        };
        if payload.len() > MAX_PAYLOAD_LEN {
            return Err(FrameError::PayloadTooLong {
                actual: payload.len(),
                max: MAX_PAYLOAD_LEN,
            });
        }
        if self.flags != 0 {
            return Err(FrameError::UnknownFlags { actual: self.flags });
        }
        if !self.sack.is_empty() {
            return Err(FrameError::TooManySackRanges {
                actual: self.sack.len(),
                max: 0,
            });
        }
        out[field::stream::TAG] = STREAM_TAG;
        out[field::stream::SHORT_DEST_ID]
            .copy_from_slice(&short_id(self.dest_id).to_le_bytes()[..3]);
        // The low 32 bits, by design (see the docs of the `frame` module).
        out[field::stream::PACKET_NUMBER]
            .copy_from_slice(&(self.packet_number as u32).to_le_bytes());
        out[field::stream::STREAM_OFFSET]
            .copy_from_slice(&(self.stream_offset as u32).to_le_bytes());
        let checksum = stream_checksum(self.dest_id, out, payload);
        out[field::stream::CHECKSUM].copy_from_slice(&checksum.to_le_bytes());
        Ok(STREAM_HEADER_LEN)
    }
}
