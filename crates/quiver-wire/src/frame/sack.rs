//! SACK ranges as a frame header holds them: the range type, the inline list of up to
//! [`MAX_SACK_RANGES`], and the checks and decoding of their encoding.
//!
//! Layer: quiver-wire, the bottom. No allocation: the list is a fixed array.

use core::fmt;

use super::bytes::read_u32;
use super::error::FrameError;
use super::layout::MAX_SACK_RANGES;

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
    /// already held. Validity (ascending, gaps) is checked by
    /// [`FrameHeader::emit`](super::FrameHeader::emit).
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

/// The SACK range encoded at `bytes[at..at + 8]`, or `None` if it overflows.
pub(super) fn decode_range(cumulative_ack: u64, bytes: &[u8], at: usize) -> Option<SackRange> {
    let offset = u64::from(read_u32(bytes, at));
    let len = u64::from(read_u32(bytes, at + 4));
    let start = cumulative_ack.checked_add(offset)?;
    let end = start.checked_add(len)?;
    Some(SackRange { start, end })
}

pub(super) fn check_sack_ranges(
    cumulative_ack: u64,
    ranges: &[SackRange],
) -> Result<(), FrameError> {
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
