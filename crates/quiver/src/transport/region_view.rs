//! What a target's software path applies a one-sided request to ([`RegionView`]): a region
//! quiver allocated in a memory file, or memory a caller lent (`Context::register`). Both
//! check every access themselves (bounds, alignment, and for lent memory that its scope
//! has not ended); this only picks which.

use std::os::fd::BorrowedFd;
use std::sync::Arc;

use quiver_transport::caller::CallerMemory;
use quiver_transport::region::{AccessError, SharedRegion};

/// A live region of this rank, as a request reaches it.
#[derive(Debug, Clone)]
pub(crate) enum RegionView {
    /// Allocated by quiver in a memory file (`Context::alloc_region`).
    Shared(Arc<SharedRegion>),
    /// Lent by the caller for a scope (`Context::register`).
    Caller(Arc<CallerMemory>),
}

impl RegionView {
    /// The region's length in bytes.
    pub(crate) fn len(&self) -> usize {
        match self {
            RegionView::Shared(r) => r.len(),
            RegionView::Caller(m) => m.len(),
        }
    }

    /// Copies `data` into the region at `offset`.
    pub(crate) fn write(&self, offset: usize, data: &[u8]) -> Result<(), AccessError> {
        match self {
            RegionView::Shared(r) => r.write(offset, data),
            RegionView::Caller(m) => m.write(offset, data),
        }
    }

    /// Copies the region's bytes at `offset` into `buf`.
    pub(crate) fn read(&self, offset: usize, buf: &mut [u8]) -> Result<(), AccessError> {
        match self {
            RegionView::Shared(r) => r.read(offset, buf),
            RegionView::Caller(m) => m.read(offset, buf),
        }
    }

    /// Adds `value` to the word at `offset` atomically; the word before.
    pub(crate) fn fetch_add(&self, offset: usize, value: u64) -> Result<u64, AccessError> {
        match self {
            RegionView::Shared(r) => r.fetch_add(offset, value),
            RegionView::Caller(m) => m.fetch_add(offset, value),
        }
    }

    /// Replaces the word at `offset` with `new` if it holds `expected`; the word before.
    pub(crate) fn compare_swap(
        &self,
        offset: usize,
        expected: u64,
        new: u64,
    ) -> Result<u64, AccessError> {
        match self {
            RegionView::Shared(r) => r.compare_swap(offset, expected, new),
            RegionView::Caller(m) => m.compare_swap(offset, expected, new),
        }
    }

    /// Stores `value` in the word at `offset`; the word before.
    pub(crate) fn swap(&self, offset: usize, value: u64) -> Result<u64, AccessError> {
        match self {
            RegionView::Shared(r) => r.swap(offset, value),
            RegionView::Caller(m) => m.swap(offset, value),
        }
    }

    /// Receives at most `len` bytes from socket `fd` into the region at `offset`.
    pub(crate) fn recv_into(
        &self,
        fd: BorrowedFd<'_>,
        offset: usize,
        len: usize,
    ) -> std::io::Result<usize> {
        match self {
            RegionView::Shared(r) => r.recv_into(fd, offset, len),
            RegionView::Caller(m) => m.recv_into(fd, offset, len),
        }
    }

    /// Sends `head` then the region's bytes at `offset..offset + len` on socket `fd`,
    /// skipping the first `skip` bytes of the two.
    pub(crate) fn send_from(
        &self,
        fd: BorrowedFd<'_>,
        head: &[u8],
        span: (usize, usize),
        skip: usize,
    ) -> std::io::Result<usize> {
        match self {
            RegionView::Shared(r) => r.send_from(fd, head, span, skip),
            RegionView::Caller(m) => m.send_from(fd, head, span, skip),
        }
    }
}
