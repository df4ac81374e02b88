//! Checked views of received frames: [`Frame::parse`], [`Frame::parse_for`] and
//! [`parse_stream_split`], which verify everything before any accessor can be called.
//!
//! Layer: quiver-wire, the bottom. Reads only the bytes it is given; never panics on any
//! input (the module's no-panic contract in [`super`]); no allocation.

use super::bytes::{read_u32, read_u64};
use super::demux::{read_short_id, short_id};
use super::error::FrameError;
use super::field;
use super::flags;
use super::frame_type::FrameType;
use super::header::FrameHeader;
use super::integrity::{checksum, stream_checksum};
use super::layout::{
    check_magic_version, FIXED_HEADER_LEN, MAX_PAYLOAD_LEN, MAX_SACK_RANGES, SACK_RANGE_LEN,
    STREAM_HEADER_LEN, STREAM_TAG, VERSION,
};
use super::sack::{check_sack_ranges, SackRange, SackRanges};

/// A checked view of one received datagram: the header parsed and the checksum verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    header: FrameHeader,
    header_len: usize,
    payload: &'a [u8],
}

impl<'a> Frame<'a> {
    /// Parses and verifies a whole datagram that is not a Stream frame (see the `frame`
    /// module's no-panic contract); a Stream frame is [`FrameError::NeedsConnectionId`].
    ///
    /// # Errors
    /// Every [`FrameError`] variant except the emit-only ones and
    /// [`FrameError::WrongConnection`].
    pub fn parse(datagram: &'a [u8]) -> Result<Self, FrameError> {
        if datagram.first() == Some(&STREAM_TAG) {
            return Err(FrameError::NeedsConnectionId);
        }
        Self::parse_full(datagram)
    }

    /// Parses and verifies a whole datagram received by the connection whose id is
    /// `local_id`: a Stream frame is checked against that id (its short id must match, and
    /// the checksum covers the full id), any other frame as [`Frame::parse`] does.
    ///
    /// # Errors
    /// Every [`FrameError`] variant except the emit-only ones and
    /// [`FrameError::NeedsConnectionId`].
    pub fn parse_for(datagram: &'a [u8], local_id: u64) -> Result<Self, FrameError> {
        if datagram.first() != Some(&STREAM_TAG) {
            return Self::parse_full(datagram);
        }
        if datagram.len() < STREAM_HEADER_LEN {
            return Err(FrameError::Truncated {
                needed: STREAM_HEADER_LEN,
                actual: datagram.len(),
            });
        }
        let actual = read_short_id(datagram);
        if actual != short_id(local_id) {
            return Err(FrameError::WrongConnection {
                expected: short_id(local_id),
                actual,
            });
        }
        Self::parse_stream(datagram, local_id)
    }

    /// A full (non-Stream) frame, or a Stream frame of another version.
    fn parse_full(datagram: &'a [u8]) -> Result<Self, FrameError> {
        if let Some(&first) = datagram.first() {
            // 0xC0 | version is a Stream frame of that version (version 3 had one).
            if first & 0xF0 == STREAM_TAG & 0xF0 {
                return Err(FrameError::UnsupportedVersion {
                    expected: VERSION,
                    actual: first & 0x0F,
                });
            }
        }
        if datagram.len() < FIXED_HEADER_LEN {
            return Err(FrameError::Truncated {
                needed: FIXED_HEADER_LEN,
                actual: datagram.len(),
            });
        }
        check_magic_version(datagram)?;
        let type_code = datagram[field::TYPE];
        let frame_type =
            FrameType::from_code(type_code).ok_or(FrameError::UnknownType { actual: type_code })?;
        let flag_bits = datagram[field::FLAGS];
        if flag_bits & !flags::ALL != 0 {
            return Err(FrameError::UnknownFlags { actual: flag_bits });
        }
        let sack_count = usize::from(datagram[field::SACK_COUNT]);
        if sack_count > MAX_SACK_RANGES {
            return Err(FrameError::TooManySackRanges {
                actual: sack_count,
                max: MAX_SACK_RANGES,
            });
        }
        let header_len = FIXED_HEADER_LEN + sack_count * SACK_RANGE_LEN;
        let payload_len = usize::from(u16::from_le_bytes([datagram[6], datagram[7]]));
        if header_len + payload_len != datagram.len() {
            return Err(FrameError::LengthMismatch {
                declared: header_len + payload_len,
                actual: datagram.len(),
            });
        }
        let (header_bytes, payload) = datagram.split_at(header_len);
        let declared = read_u32(header_bytes, field::CHECKSUM.start);
        let computed = checksum(header_bytes, payload);
        if declared != computed {
            return Err(FrameError::ChecksumMismatch { declared, computed });
        }
        let cumulative_ack = read_u64(header_bytes, field::CUMULATIVE_ACK.start);
        let mut sack = SackRanges::new();
        for index in 0..sack_count {
            let at = FIXED_HEADER_LEN + index * SACK_RANGE_LEN;
            let offset = u64::from(read_u32(header_bytes, at));
            let len = u64::from(read_u32(header_bytes, at + 4));
            let start = cumulative_ack
                .checked_add(offset)
                .ok_or(FrameError::BadSackRange { index })?;
            let end = start
                .checked_add(len)
                .ok_or(FrameError::BadSackRange { index })?;
            sack.push(SackRange { start, end });
        }
        check_sack_ranges(cumulative_ack, sack.as_slice())?;
        let header = FrameHeader {
            frame_type,
            flags: flag_bits,
            dest_id: read_u64(header_bytes, field::DEST_ID.start),
            src_id: read_u64(header_bytes, field::SRC_ID.start),
            packet_number: read_u64(header_bytes, field::PACKET_NUMBER.start),
            cumulative_ack,
            credit: read_u64(header_bytes, field::CREDIT.start),
            message_id: read_u64(header_bytes, field::MESSAGE_ID.start),
            message_len: read_u64(header_bytes, field::MESSAGE_LEN.start),
            fragment_offset: read_u64(header_bytes, field::FRAGMENT_OFFSET.start),
            stream_offset: read_u64(header_bytes, field::STREAM_OFFSET.start),
            sack,
        };
        Ok(Self {
            header,
            header_len,
            payload,
        })
    }

    /// A Stream frame (tag and short id already checked; at least its header long), sent
    /// to the connection `dest_id`.
    fn parse_stream(datagram: &'a [u8], dest_id: u64) -> Result<Self, FrameError> {
        let (header_bytes, payload) = datagram.split_at(STREAM_HEADER_LEN);
        Ok(Self {
            header: stream_header_of(header_bytes, payload, dest_id)?,
            header_len: STREAM_HEADER_LEN,
            payload,
        })
    }
}

/// Parses and verifies a Stream frame received in two pieces, for the connection whose id
/// is `local_id`: its header (`header`, exactly [`STREAM_HEADER_LEN`] bytes) and its
/// payload (`payload`, wherever the receive put it: a scattering receive puts it straight
/// into the reader's buffer). Checks what [`Frame::parse_for`] checks of the same bytes
/// back to back, and returns the same header.
///
/// # Errors
/// [`FrameError::Truncated`] for a header of another length or a frame that is not a
/// Stream frame (`NeedsConnectionId` is never returned), and those of
/// [`Frame::parse_for`] for a Stream frame: `WrongConnection`, `LengthMismatch`,
/// `ChecksumMismatch`.
pub fn parse_stream_split(
    header: &[u8],
    payload: &[u8],
    local_id: u64,
) -> Result<FrameHeader, FrameError> {
    if header.len() != STREAM_HEADER_LEN || header[field::stream::TAG] != STREAM_TAG {
        return Err(FrameError::Truncated {
            needed: STREAM_HEADER_LEN,
            actual: header.len(),
        });
    }
    let actual = read_short_id(header);
    if actual != short_id(local_id) {
        return Err(FrameError::WrongConnection {
            expected: short_id(local_id),
            actual,
        });
    }
    stream_header_of(header, payload, local_id)
}

/// The header of a Stream frame (`header_bytes`, [`STREAM_HEADER_LEN`] of them, short id
/// already matched) to `dest_id`, once its payload's length and checksum are verified.
fn stream_header_of(
    header_bytes: &[u8],
    payload: &[u8],
    dest_id: u64,
) -> Result<FrameHeader, FrameError> {
    if payload.len() > MAX_PAYLOAD_LEN {
        return Err(FrameError::LengthMismatch {
            declared: STREAM_HEADER_LEN + MAX_PAYLOAD_LEN,
            actual: STREAM_HEADER_LEN + payload.len(),
        });
    }
    let declared = read_u32(header_bytes, field::stream::CHECKSUM.start);
    let computed = stream_checksum(dest_id, header_bytes, payload);
    if declared != computed {
        return Err(FrameError::ChecksumMismatch { declared, computed });
    }
    let mut header = FrameHeader::new(FrameType::Stream, dest_id, 0);
    header.packet_number = u64::from(read_u32(header_bytes, field::stream::PACKET_NUMBER.start));
    header.stream_offset = u64::from(read_u32(header_bytes, field::stream::STREAM_OFFSET.start));
    Ok(header)
}

impl<'a> Frame<'a> {
    /// The parsed header.
    pub fn header(&self) -> &FrameHeader {
        &self.header
    }

    /// Length of the header in bytes (where the payload starts).
    pub fn header_len(&self) -> usize {
        self.header_len
    }

    /// The payload bytes.
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }
}
