//! The endpoint's receive-buffer pool (the Token Buffer Pool idea): preallocated buffers
//! handed out with a received message and returned to the pool when dropped, so steady
//! receiving allocates nothing.

use std::ops::Deref;
use std::sync::{Arc, Mutex};

use crate::addr::Addr;

/// A bounded pool of byte buffers. Buffers keep their capacity across uses; the pool keeps at
/// most `max_buffers` buffers and at most `max_cached_bytes` of capacity in total.
#[derive(Debug)]
pub(crate) struct Pool {
    free: Mutex<Free>,
    max_buffers: usize,
    max_cached_bytes: usize,
}

/// The pool's buffers and their capacity in total (kept, not summed per call).
#[derive(Debug, Default)]
struct Free {
    buffers: Vec<Vec<u8>>,
    cached_bytes: usize,
}

impl Pool {
    /// A pool preloaded with `count` buffers of `bytes` capacity each.
    pub(crate) fn new(count: usize, bytes: usize, max_cached_bytes: usize) -> Arc<Pool> {
        let buffers: Vec<Vec<u8>> = (0..count).map(|_| Vec::with_capacity(bytes)).collect();
        let cached_bytes = buffers.iter().map(Vec::capacity).sum();
        Arc::new(Pool {
            free: Mutex::new(Free {
                buffers,
                cached_bytes,
            }),
            max_buffers: count.max(1),
            max_cached_bytes,
        })
    }

    /// A buffer of exactly `len` bytes (contents unspecified: old bytes are not cleared),
    /// from the pool when possible.
    pub(crate) fn take(&self, len: usize) -> Vec<u8> {
        let mut buf = {
            let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
            // Prefer a buffer that is already large enough.
            let taken = match free.buffers.iter().rposition(|b| b.capacity() >= len) {
                Some(i) => free.buffers.swap_remove(i),
                None => free.buffers.pop().unwrap_or_default(),
            };
            free.cached_bytes -= taken.capacity();
            taken
        };
        // Keep the old contents: only growth is zero-filled, so steady use costs no memset.
        buf.resize(len, 0);
        buf
    }

    /// Returns a buffer; it is dropped instead if the pool is full.
    pub(crate) fn give(&self, buf: Vec<u8>) {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if free.buffers.len() < self.max_buffers
            && free.cached_bytes + buf.capacity() <= self.max_cached_bytes
        {
            free.cached_bytes += buf.capacity();
            free.buffers.push(buf);
        }
    }
}

/// A received message in a pooled buffer. Dereferences to the message bytes; dropping it
/// returns the buffer to its endpoint's pool.
#[derive(Debug)]
pub struct PooledBuf {
    buf: Vec<u8>,
    src: Addr,
    pool: Arc<Pool>,
}

impl PooledBuf {
    pub(crate) fn new(buf: Vec<u8>, src: Addr, pool: Arc<Pool>) -> PooledBuf {
        PooledBuf { buf, src, pool }
    }

    /// The sender's address.
    pub fn src(&self) -> Addr {
        self.src
    }

    /// Takes the bytes out (the buffer then does not return to the pool).
    pub fn into_vec(mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }
}

impl Deref for PooledBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        if self.buf.capacity() > 0 {
            self.pool.give(std::mem::take(&mut self.buf));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_return_and_are_reused() {
        let pool = Pool::new(2, 1024, 1 << 20);
        let a = pool.take(100);
        let ptr = a.as_ptr();
        assert_eq!(a.len(), 100);
        let p = PooledBuf::new(a, Addr::new(1, 0), pool.clone());
        assert_eq!(p.len(), 100);
        drop(p);
        let b = pool.take(200);
        assert!(b.capacity() >= 1024);
        assert!(std::ptr::eq(b.as_ptr(), ptr) || pool.free.lock().unwrap().buffers.len() == 1);
    }

    #[test]
    fn pool_stays_bounded() {
        let pool = Pool::new(1, 16, 64);
        pool.give(vec![0; 10]);
        pool.give(vec![0; 1000]); // over the byte limit: dropped
        assert!(pool.free.lock().unwrap().buffers.len() <= 1);
    }
}
