//! The further SACK ranges an Ack frame carries in its payload, beyond the header's.
//!
//! Layer: quiver-wire, the bottom. Checks the whole list once in [`MoreSackRanges::parse`]
//! so that iterating cannot fail; no allocation.

use super::codec::SackRange;
use super::codec::{decode_range, FrameHeader};
use super::error::FrameError;
use super::frame_type::FrameType;
use super::layout::{MAX_ACK_RANGES, SACK_RANGE_LEN};

/// The further SACK ranges in the payload of an Ack frame, checked: they continue the
/// header's list (ascending, gaps between, above the cumulative ack, u32 offsets and lengths)
/// and the list holds at most [`MAX_ACK_RANGES`]. Built with [`MoreSackRanges::parse`],
/// which reads every range once; iterating cannot fail afterwards.
#[derive(Debug, Clone, Copy)]
pub struct MoreSackRanges<'a> {
    cumulative_ack: u64,
    bytes: &'a [u8],
}

impl<'a> MoreSackRanges<'a> {
    /// Checks `payload` (of an Ack frame whose header is `header`) as further SACK ranges.
    /// An empty payload, or a frame of another type, yields no ranges.
    ///
    /// # Errors
    /// [`FrameError::BadAckPayload`] (length), [`FrameError::BadSackRange`] (index counts
    /// the header's ranges first).
    pub fn parse(header: &FrameHeader, payload: &'a [u8]) -> Result<Self, FrameError> {
        if header.frame_type != FrameType::Ack || payload.is_empty() {
            return Ok(Self {
                cumulative_ack: header.cumulative_ack,
                bytes: &[],
            });
        }
        let count = payload.len() / SACK_RANGE_LEN;
        if !payload.len().is_multiple_of(SACK_RANGE_LEN)
            || header.sack.len() + count > MAX_ACK_RANGES
        {
            return Err(FrameError::BadAckPayload {
                len: payload.len(),
                max: MAX_ACK_RANGES,
            });
        }
        let cumulative_ack = header.cumulative_ack;
        let mut floor = match header.sack.as_slice().last() {
            Some(last) => last.end.checked_add(1),
            None => cumulative_ack.checked_add(1),
        };
        for index in 0..count {
            let bad = FrameError::BadSackRange {
                index: header.sack.len() + index,
            };
            let range = decode_range(cumulative_ack, payload, index * SACK_RANGE_LEN).ok_or(bad)?;
            match floor {
                Some(minimum) if range.start >= minimum && range.end > range.start => {}
                _ => return Err(bad),
            }
            floor = range.end.checked_add(1);
        }
        Ok(Self {
            cumulative_ack,
            bytes: payload,
        })
    }

    /// Number of ranges.
    pub fn len(&self) -> usize {
        self.bytes.len() / SACK_RANGE_LEN
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The ranges, ascending.
    pub fn iter(&self) -> impl Iterator<Item = SackRange> + 'a {
        let cumulative_ack = self.cumulative_ack;
        let bytes = self.bytes;
        (0..bytes.len() / SACK_RANGE_LEN).filter_map(move |index| {
            // Invariant: parse decoded every range successfully.
            decode_range(cumulative_ack, bytes, index * SACK_RANGE_LEN)
        })
    }

    /// Writes `ranges` (which must continue a header list ending at `previous_end`, or
    /// start above `cumulative_ack` when the header has none) into `out` as an Ack payload;
    /// returns the bytes written.
    ///
    /// # Errors
    /// [`FrameError::BufferTooSmall`], [`FrameError::BadSackRange`] (order, gaps, u32 fit).
    pub fn emit(
        cumulative_ack: u64,
        previous_end: Option<u64>,
        ranges: &[SackRange],
        out: &mut [u8],
    ) -> Result<usize, FrameError> {
        let needed = ranges.len() * SACK_RANGE_LEN;
        if out.len() < needed {
            return Err(FrameError::BufferTooSmall {
                needed,
                actual: out.len(),
            });
        }
        let mut floor = match previous_end {
            Some(end) => end.checked_add(1),
            None => cumulative_ack.checked_add(1),
        };
        for (index, range) in ranges.iter().enumerate() {
            let bad = FrameError::BadSackRange { index };
            let Some(minimum) = floor else {
                return Err(bad);
            };
            if range.start < minimum
                || range.end <= range.start
                || range.start - cumulative_ack > u64::from(u32::MAX)
                || range.end - range.start > u64::from(u32::MAX)
            {
                return Err(bad);
            }
            let at = index * SACK_RANGE_LEN;
            // Invariant: both fit a u32 (checked above).
            let offset = (range.start - cumulative_ack) as u32;
            let len = (range.end - range.start) as u32;
            out[at..at + 4].copy_from_slice(&offset.to_le_bytes());
            out[at + 4..at + 8].copy_from_slice(&len.to_le_bytes());
            floor = range.end.checked_add(1);
        }
        Ok(needed)
    }
}
