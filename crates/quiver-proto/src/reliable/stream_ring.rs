//! The byte ring both halves of a connection keep their stream in: stream offset `o` lives
//! at `o % len`, and a range may wrap around the end.

use core::ops::{Deref, DerefMut};

/// A fixed-size ring of stream bytes (allocated once; pages are touched only when used).
#[derive(Debug)]
pub(super) struct StreamRing(Vec<u8>);

impl StreamRing {
    /// A ring of `len` bytes (at least 1, checked by config validation).
    pub(super) fn new(len: usize) -> StreamRing {
        StreamRing(vec![0; len])
    }

    /// Bytes of memory held.
    pub(super) fn capacity(&self) -> usize {
        self.0.capacity()
    }

    /// Where stream offset `offset` lives.
    pub(super) fn position(&self, offset: u64) -> usize {
        // Invariant: the ring is non-empty (config validation), so the result is < len.
        (offset % self.0.len() as u64) as usize
    }

    /// Copies `data` to stream offsets `offset..`, wrapping at the end.
    pub(super) fn copy_in(&mut self, offset: u64, data: &[u8]) {
        let start = self.position(offset);
        let first = data.len().min(self.0.len() - start);
        self.0[start..start + first].copy_from_slice(&data[..first]);
        let rest = data.len() - first;
        self.0[..rest].copy_from_slice(&data[first..]);
    }

    /// Copies stream offsets `offset..offset + out.len()` into `out`, wrapping at the end.
    pub(super) fn copy_out(&self, offset: u64, out: &mut [u8]) {
        let start = self.position(offset);
        let first = out.len().min(self.0.len() - start);
        out[..first].copy_from_slice(&self.0[start..start + first]);
        let rest = out.len() - first;
        out[first..].copy_from_slice(&self.0[..rest]);
    }
}

impl Deref for StreamRing {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl DerefMut for StreamRing {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}
