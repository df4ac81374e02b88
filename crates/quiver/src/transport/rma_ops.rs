//! The one-sided operations a transport applies for the endpoint ([`RmaOp`]), and the
//! errors every transport reports the same way when one is refused before it touches its
//! target. A transport without one-sided operations answers
//! [`Error::RmaUnsupported`](crate::error::Error::RmaUnsupported) (see `edge.rs`).

use quiver_wire::rma::KeyRepr;

use crate::error::Error;
use crate::transport::local::LocalRank;

/// One operation on the region a remote key names, at a byte offset of that region.
#[derive(Debug)]
pub(crate) enum RmaOp<'a> {
    /// Copy `data` into the region.
    Put { data: &'a [u8], offset: u64 },
    /// Copy the region's bytes into `buf`.
    Get { buf: &'a mut [u8], offset: u64 },
    /// Add to the 64-bit word; the word before is the result.
    FetchAdd { offset: u64, value: u64 },
    /// Replace the word if it holds `expected`; the word before is the result.
    CompareSwap {
        offset: u64,
        expected: u64,
        new: u64,
    },
    /// Replace the word; the word before is the result.
    Swap { offset: u64, value: u64 },
}

impl RmaOp<'_> {
    /// The operation's name in errors.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            RmaOp::Put { .. } => "put",
            RmaOp::Get { .. } => "get",
            RmaOp::FetchAdd { .. } => "fetch_add",
            RmaOp::CompareSwap { .. } => "compare_swap",
            RmaOp::Swap { .. } => "swap",
        }
    }

    /// Whether the operation writes the region.
    pub(crate) fn writes(&self) -> bool {
        !matches!(self, RmaOp::Get { .. })
    }

    /// The bytes of the region the operation touches: offset and length.
    pub(crate) fn span(&self) -> (u64, u64) {
        match self {
            RmaOp::Put { data, offset } => (*offset, data.len() as u64),
            RmaOp::Get { buf, offset } => (*offset, buf.len() as u64),
            RmaOp::FetchAdd { offset, .. }
            | RmaOp::CompareSwap { offset, .. }
            | RmaOp::Swap { offset, .. } => (*offset, 8),
        }
    }

    /// Whether the operation is an atomic on a word.
    pub(crate) fn is_atomic(&self) -> bool {
        !matches!(self, RmaOp::Put { .. } | RmaOp::Get { .. })
    }
}

/// Checks `op` against what `key` says of its region (bounds, rights, alignment) before
/// any transport touches the target: the typed error, counted in `local`'s statistics.
pub(crate) fn check(local: &LocalRank, key: &KeyRepr, op: &RmaOp<'_>) -> Result<(), Error> {
    let (offset, len) = op.span();
    let error = if offset.checked_add(len).is_none_or(|end| end > key.len) {
        Error::RmaOutOfBounds {
            operation: op.name(),
            offset,
            len,
            region_len: key.len,
        }
    } else if op.writes() && !key.rights.writable() {
        Error::RmaRights {
            operation: op.name(),
            rights: key.rights.name(),
        }
    } else if op.is_atomic() && !offset.is_multiple_of(8) {
        Error::RmaMisaligned { offset }
    } else {
        return Ok(());
    };
    Err(refused(local, error))
}

/// Counts `error`, a refused one-sided operation of this rank, and returns it.
pub(crate) fn refused(local: &LocalRank, error: Error) -> Error {
    local.regions.access_refused(error.to_string());
    error
}
