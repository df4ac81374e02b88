//! The limits this crate checks before a call reaches PMIx.
//!
//! Layer: quiver-pmix, a leaf crate. Numbers only.

/// Keys and values longer than this are refused before they reach PMIx (its own key limit
/// is 511 bytes; values here are short strings such as socket addresses).
pub const MAX_KEY_BYTES: usize = 500;
