//! Where a received message goes ([`Dest`]): a caller's slice, a growable buffer, or the
//! buffer of a posted receive. Every transport's receive path fills one.

use crate::error::{Error, Result};
use crate::slab::Key;

/// Where a received message goes.
pub(crate) enum Dest<'a> {
    Slice(&'a mut [u8]),
    Owned(&'a mut Vec<u8>),
    /// The buffer of posted receive `key` (its whole length is usable). A tcp edge may
    /// take the buffer to read a large message into it over several calls; it then sets
    /// `bound` and marks the request [`RecvState::Bound`].
    Posted {
        key: Key,
        buf: &'a mut Vec<u8>,
        bound: bool,
    },
}

impl Dest<'_> {
    /// Whether a `len`-byte message can go here: `BufferTooSmall` otherwise (an owned
    /// destination takes any length).
    pub(crate) fn fits(&self, len: u64) -> Result<()> {
        let capacity = match self {
            Dest::Slice(s) => s.len(),
            Dest::Posted { buf, .. } => buf.len(),
            Dest::Owned(_) => return Ok(()),
        };
        if len > capacity as u64 {
            return Err(Error::BufferTooSmall {
                message: len as usize,
                buffer: capacity,
            });
        }
        Ok(())
    }

    /// The first `len` bytes of the destination, which a look just filled with a message
    /// of that length.
    pub(crate) fn filled(&self, len: usize) -> &[u8] {
        match self {
            Dest::Slice(s) => &s[..len],
            Dest::Owned(v) => &v[..len],
            Dest::Posted { buf, .. } => &buf[..len],
        }
    }

    pub(crate) fn prepare(&mut self, len: u64) -> Result<&mut [u8]> {
        match self {
            Dest::Posted { buf, .. } => {
                if len > buf.len() as u64 {
                    return Err(Error::BufferTooSmall {
                        message: len as usize,
                        buffer: buf.len(),
                    });
                }
                Ok(&mut buf[..len as usize])
            }
            Dest::Slice(s) => {
                if len > s.len() as u64 {
                    return Err(Error::BufferTooSmall {
                        message: len as usize,
                        buffer: s.len(),
                    });
                }
                Ok(&mut s[..len as usize])
            }
            Dest::Owned(v) => {
                // A peer may announce any length: fail cleanly where memory runs out.
                let extra = (len as usize).saturating_sub(v.len());
                if usize::try_from(len).is_err() || v.try_reserve(extra).is_err() {
                    return Err(Error::io(
                        format!("allocating {len} bytes for a received message"),
                        std::io::ErrorKind::OutOfMemory.into(),
                    ));
                }
                // Reuse what the buffer holds: only growth is zero-filled.
                v.resize(len as usize, 0);
                Ok(&mut v[..])
            }
        }
    }
}
