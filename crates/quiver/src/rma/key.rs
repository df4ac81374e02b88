//! [`RemoteKey`]: the small opaque byte string that names a registered region, its owner
//! and rights, and carries the region's unguessable capability. A program sends it to its
//! peers in any message; the layout is `quiver_wire::rma`.

use quiver_wire::rma::{KeyRepr, Rights, KEY_LEN};

use crate::error::{Error, Result};

/// A remote key: what a peer needs to put into, get from, or apply atomics to a region of
/// another rank (see [`Region::key`](crate::Region::key)). Send [`as_bytes`](Self::as_bytes)
/// in a message; the peer makes it a key again with [`from_bytes`](Self::from_bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteKey {
    pub(crate) repr: KeyRepr,
    bytes: [u8; KEY_LEN],
}

impl RemoteKey {
    /// Length of a key's bytes.
    pub const LEN: usize = KEY_LEN;

    pub(crate) fn new(repr: KeyRepr) -> RemoteKey {
        RemoteKey {
            repr,
            bytes: repr.emit(),
        }
    }

    /// A key from the bytes a peer sent.
    ///
    /// # Errors
    /// [`Error::RmaKeyRefused`] when the bytes are not a key of this quiver version (the
    /// rank named is the one the bytes claim, or 0 when they are too short to say).
    pub fn from_bytes(bytes: &[u8]) -> Result<RemoteKey> {
        KeyRepr::parse(bytes)
            .map(RemoteKey::new)
            .map_err(|e| Error::RmaKeyRefused {
                rank: bytes
                    .get(4..8)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, u32::from_be_bytes),
                reason: format!("not a remote key: {e}"),
            })
    }

    /// The key's bytes, to send.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The rank that owns the region.
    pub fn rank(&self) -> u32 {
        self.repr.rank
    }

    /// The region's length in bytes.
    pub fn len(&self) -> u64 {
        self.repr.len
    }

    /// Whether the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.repr.len == 0
    }

    /// What the key allows.
    pub fn rights(&self) -> Rights {
        self.repr.rights
    }
}
