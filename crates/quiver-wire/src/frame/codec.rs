//! The bytes of a frame in both directions, on the path every datagram takes: the SACK
//! ranges a header holds, the header and its emission ([`FrameHeader::emit`]), the checked
//! views of received frames ([`Frame::parse`], [`Frame::parse_for`],
//! [`parse_stream_split`]), the demultiplexing peeks ([`destination`], [`dest_id`]), the
//! integrity check, and the checks and decoding of the SACK encoding.
//!
//! Why one module: the compiler puts a module's functions in one codegen unit, and that is
//! what lets it inline this path's helpers into their callers. With a module per part, the
//! parse and emit paths compiled to different machine code (the checksum kept a step of its
//! hash out of line, the parse its SACK check); in one module they compile to the same
//! instructions as the single-file layout did (compared function by function in the release
//! build).
//!
//! Layer: quiver-wire, the bottom. Never panics on any input (the no-panic contract of the
//! `frame` module); no I/O, no allocation.

use core::fmt;

use super::auth::{FrameKey, FrameKeys, SHORT_FRAME_BYTES};
use super::error::FrameError;
use super::field;
use super::flags;
use super::frame_type::FrameType;
use super::layout::{
    FIXED_HEADER_LEN, MAGIC, MAX_HEADER_LEN, MAX_PAYLOAD_LEN, MAX_SACK_RANGES, SACK_RANGE_LEN,
    SHORT_ID_BITS, STREAM_HEADER_LEN, STREAM_TAG, VERSION,
};

/// A selectively acknowledged range of packet numbers, `start..end` (end exclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SackRange {
    /// First packet number of the range.
    pub start: u64,
    /// One past the last packet number of the range.
    pub end: u64,
}

/// Up to [`MAX_SACK_RANGES`] SACK ranges, ascending, held inline (no allocation).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SackRanges {
    ranges: [SackRange; MAX_SACK_RANGES],
    len: u8,
}

impl SackRanges {
    /// No ranges.
    pub const fn new() -> Self {
        Self {
            ranges: [SackRange { start: 0, end: 0 }; MAX_SACK_RANGES],
            len: 0,
        }
    }

    /// Appends a range; returns false (and changes nothing) when [`MAX_SACK_RANGES`] are
    /// already held. Validity (ascending, gaps) is checked by [`FrameHeader::emit`].
    pub fn push(&mut self, range: SackRange) -> bool {
        let index = usize::from(self.len);
        if index >= MAX_SACK_RANGES {
            return false;
        }
        self.ranges[index] = range;
        self.len += 1;
        true
    }

    /// Removes every range.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// The ranges held.
    pub fn as_slice(&self) -> &[SackRange] {
        &self.ranges[..usize::from(self.len)]
    }

    /// Number of ranges held.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether no range is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl fmt::Debug for SackRanges {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_list()
            .entries(self.as_slice().iter().map(|range| range.start..range.end))
            .finish()
    }
}

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
    pub fn emit(
        &self,
        keys: FrameKeys<'_>,
        out: &mut [u8],
        payload: &[u8],
    ) -> Result<usize, FrameError> {
        let key = keys.for_type(self.frame_type)?;
        if self.frame_type == FrameType::Stream {
            return self.emit_stream(key, out, payload);
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
        let checksum = full_tag(key, out, payload);
        out[field::CHECKSUM].copy_from_slice(&checksum.to_le_bytes());
        Ok(header_len)
    }
}

impl FrameHeader {
    /// A Stream frame's header: flags must be 0 and there are no SACK ranges; only the low
    /// 24 bits of the destination id and the low 32 bits of the packet number and stream
    /// offset are written (the checksum covers the full id).
    fn emit_stream(
        &self,
        key: &FrameKey,
        out: &mut [u8],
        payload: &[u8],
    ) -> Result<usize, FrameError> {
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
        let checksum = stream_tag(key, self.dest_id, out, payload);
        out[field::stream::CHECKSUM].copy_from_slice(&checksum.to_le_bytes());
        Ok(STREAM_HEADER_LEN)
    }
}

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
    pub fn parse(datagram: &'a [u8], keys: FrameKeys<'_>) -> Result<Self, FrameError> {
        if datagram.first() == Some(&STREAM_TAG) {
            return Err(FrameError::NeedsConnectionId);
        }
        Self::parse_full(datagram, Some(keys))
    }

    /// Parses a whole datagram that is not a Stream frame without verifying its tag: only
    /// for answering a frame no key is at hand for (a Reset to an unknown connection id,
    /// which says nothing the sender can be hurt by). Every other check of
    /// [`Frame::parse`] applies.
    ///
    /// # Errors
    /// Those of [`Frame::parse`] except `ChecksumMismatch` and `NoKey`.
    pub fn parse_unauthenticated(datagram: &'a [u8]) -> Result<Self, FrameError> {
        if datagram.first() == Some(&STREAM_TAG) {
            return Err(FrameError::NeedsConnectionId);
        }
        Self::parse_full(datagram, None)
    }

    /// Parses and verifies a whole datagram received by the connection whose id is
    /// `local_id`: a Stream frame is checked against that id (its short id must match, and
    /// the checksum covers the full id), any other frame as [`Frame::parse`] does.
    ///
    /// # Errors
    /// Every [`FrameError`] variant except the emit-only ones and
    /// [`FrameError::NeedsConnectionId`].
    pub fn parse_for(
        datagram: &'a [u8],
        local_id: u64,
        keys: FrameKeys<'_>,
    ) -> Result<Self, FrameError> {
        if datagram.first() != Some(&STREAM_TAG) {
            return Self::parse_full(datagram, Some(keys));
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
        Self::parse_stream(datagram, local_id, keys.for_type(FrameType::Stream)?)
    }

    /// A full (non-Stream) frame, or a Stream frame of another version; its tag verified
    /// under `keys` (unless None: [`Frame::parse_unauthenticated`]).
    fn parse_full(datagram: &'a [u8], keys: Option<FrameKeys<'_>>) -> Result<Self, FrameError> {
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
        if let Some(keys) = keys {
            let declared = read_u32(header_bytes, field::CHECKSUM.start);
            let computed = full_tag(keys.for_type(frame_type)?, header_bytes, payload);
            if declared != computed {
                return Err(FrameError::ChecksumMismatch { declared, computed });
            }
        }
        let cumulative_ack = read_u64(header_bytes, field::CUMULATIVE_ACK.start);
        // The frame built once, its SACK ranges pushed into its header: not built apart and
        // copied in with a header around them (the ranges are most of the header's bytes).
        let mut frame = Self {
            header: FrameHeader {
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
                sack: SackRanges::new(),
            },
            header_len,
            payload,
        };
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
            frame.header.sack.push(SackRange { start, end });
        }
        check_sack_ranges(cumulative_ack, frame.header.sack.as_slice())?;
        Ok(frame)
    }

    /// A Stream frame (tag and short id already checked; at least its header long), sent
    /// to the connection `dest_id`.
    fn parse_stream(datagram: &'a [u8], dest_id: u64, key: &FrameKey) -> Result<Self, FrameError> {
        let (header_bytes, payload) = datagram.split_at(STREAM_HEADER_LEN);
        Ok(Self {
            header: stream_header_of(key, header_bytes, payload, dest_id)?,
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
    keys: FrameKeys<'_>,
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
    stream_header_of(keys.for_type(FrameType::Stream)?, header, payload, local_id)
}

/// The header of a Stream frame (`header_bytes`, [`STREAM_HEADER_LEN`] of them, short id
/// already matched) to `dest_id`, once its payload's length and checksum are verified.
fn stream_header_of(
    key: &FrameKey,
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
    let computed = stream_tag(key, dest_id, header_bytes, payload);
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

/// The SACK range encoded at `bytes[at..at + 8]`, or `None` if it overflows.
pub(super) fn decode_range(cumulative_ack: u64, bytes: &[u8], at: usize) -> Option<SackRange> {
    let offset = u64::from(read_u32(bytes, at));
    let len = u64::from(read_u32(bytes, at + 4));
    let start = cumulative_ack.checked_add(offset)?;
    let end = start.checked_add(len)?;
    Some(SackRange { start, end })
}

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
/// connection it names must still parse the frame ([`Frame::parse_for`]).
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
fn read_short_id(datagram: &[u8]) -> u32 {
    let at = field::stream::SHORT_DEST_ID;
    u32::from_le_bytes([
        datagram[at.start],
        datagram[at.start + 1],
        datagram[at.start + 2],
        0,
    ])
}

/// Layout byte of the authenticator's AES block for a full frame.
const LAYOUT_FULL: u8 = 1;
/// Layout byte of the authenticator's AES block for a Stream frame.
const LAYOUT_STREAM: u8 = 2;

/// The authenticator of a Stream frame sent to the connection `dest_id`, whose `header` is
/// at least [`STREAM_HEADER_LEN`] bytes long (the `frame` module's docs):
///
/// ```text
/// h   = CRC-64_P( u64_le(dest_id) || header[0..4] || header[8..16] || payload )
/// tag = low 32 bits of AES_K( h || header[8..12] || u16_le(payload length) || 7 || 2 )
/// ```
///
/// The full destination id enters as a pseudo header (it never travels), so a frame that
/// reaches another connection sharing its short id fails, as a forged one does.
#[inline]
fn stream_tag(key: &FrameKey, dest_id: u64, header: &[u8], payload: &[u8]) -> u32 {
    let mut head = [0u8; 20];
    head[..8].copy_from_slice(&dest_id.to_le_bytes());
    head[8..12].copy_from_slice(&header[..field::stream::CHECKSUM.start]);
    head[12..20].copy_from_slice(&header[field::stream::CHECKSUM.end..STREAM_HEADER_LEN]);
    let mut nonce = [0u8; 8];
    nonce[..4].copy_from_slice(&header[field::stream::PACKET_NUMBER]);
    // At most MAX_PAYLOAD_LEN (checked by both callers).
    nonce[4..6].copy_from_slice(&(payload.len() as u16).to_le_bytes());
    nonce[6] = FrameType::Stream.code();
    nonce[7] = LAYOUT_STREAM;
    key.tag(&head, payload, nonce)
}

/// The authenticator of a full frame whose `header` (at least [`FIXED_HEADER_LEN`] bytes,
/// exactly the header: its length is `header_len`) precedes `payload`:
///
/// ```text
/// h   = CRC-64_P( header[0..8] || header[12..header_len] || payload )
/// tag = low 32 bits of AES_K( h || header[28..32] || header[6..8] || header[3] || 1 )
/// ```
///
/// Every header byte but the tag itself is hashed; the AES block adds the packet number's
/// low 32 bits, the payload length and the type (decision 0067).
#[inline]
pub(super) fn full_tag(key: &FrameKey, header: &[u8], payload: &[u8]) -> u32 {
    let mut nonce = [0u8; 8];
    nonce[..4].copy_from_slice(&header[field::PACKET_NUMBER.start..field::PACKET_NUMBER.start + 4]);
    nonce[4..6].copy_from_slice(&header[field::PAYLOAD_LEN]);
    nonce[6] = header[field::TYPE];
    nonce[7] = LAYOUT_FULL;
    // The hashed bytes (the header less its checksum field, then the payload) are joined
    // once: whole for a short frame, hashed in one piece; the header alone otherwise.
    let rest = &header[field::CHECKSUM.end..];
    let head_len = field::CHECKSUM.start + rest.len();
    let total = head_len + payload.len();
    let mut joined = [0u8; JOINED_BYTES];
    joined[..field::CHECKSUM.start].copy_from_slice(&header[..field::CHECKSUM.start]);
    // The fixed header's bytes in a copy of constant length (inline moves, not a call),
    // then the SACK ranges, if any.
    joined[field::CHECKSUM.start..FIXED_HASHED_LEN]
        .copy_from_slice(&header[field::CHECKSUM.end..FIXED_HEADER_LEN]);
    let ranges = &header[FIXED_HEADER_LEN..];
    if !ranges.is_empty() {
        joined[FIXED_HASHED_LEN..head_len].copy_from_slice(ranges);
    }
    if total <= SHORT_FRAME_BYTES {
        joined[head_len..total].copy_from_slice(payload);
        return key.tag_joined(&joined[..total], nonce);
    }
    key.tag(&joined[..head_len], payload, nonce)
}

/// The hashed bytes of a fixed header: all of it but the tag.
const FIXED_HASHED_LEN: usize = FIXED_HEADER_LEN - (field::CHECKSUM.end - field::CHECKSUM.start);

/// The buffer `full_tag` joins a frame's hashed bytes in: a short frame whole, or any
/// header.
const JOINED_BYTES: usize = if SHORT_FRAME_BYTES > MAX_HEADER_LEN {
    SHORT_FRAME_BYTES
} else {
    MAX_HEADER_LEN
};

/// Checks magic and version of a buffer of at least 3 bytes.
fn check_magic_version(datagram: &[u8]) -> Result<(), FrameError> {
    let magic = [datagram[0], datagram[1]];
    if magic != MAGIC {
        return Err(FrameError::BadMagic { actual: magic });
    }
    if datagram[field::VERSION] != VERSION {
        return Err(FrameError::UnsupportedVersion {
            expected: VERSION,
            actual: datagram[field::VERSION],
        });
    }
    Ok(())
}

fn check_sack_ranges(cumulative_ack: u64, ranges: &[SackRange]) -> Result<(), FrameError> {
    if ranges.len() > MAX_SACK_RANGES {
        return Err(FrameError::TooManySackRanges {
            actual: ranges.len(),
            max: MAX_SACK_RANGES,
        });
    }
    // The first range must leave cumulative_ack itself out (it is missing by definition).
    let mut floor = cumulative_ack.checked_add(1);
    for (index, range) in ranges.iter().enumerate() {
        let bad = FrameError::BadSackRange { index };
        let Some(minimum) = floor else {
            return Err(bad);
        };
        if range.start < minimum || range.end <= range.start {
            return Err(bad);
        }
        if range.start - cumulative_ack > u64::from(u32::MAX)
            || range.end - range.start > u64::from(u32::MAX)
        {
            return Err(bad);
        }
        // Touching ranges would be one range: demand a gap of at least one packet.
        floor = range.end.checked_add(1);
    }
    Ok(())
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    let mut array = [0u8; 4];
    array.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(array)
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut array = [0u8; 8];
    array.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(array)
}

fn write_u64(bytes: &mut [u8], at: usize, value: u64) {
    bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
}
