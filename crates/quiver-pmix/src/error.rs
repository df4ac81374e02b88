//! The error of a PMIx call, and the result type of the crate.
//!
//! Layer: quiver-pmix, a leaf crate. Plain data: which call failed and what PMIx said.

use std::fmt;

/// A failed PMIx call: which call, PMIx's status code (when PMIx returned one) and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PmixError {
    /// The call that failed, e.g. "PMIx_Fence".
    pub call: &'static str,
    /// PMIx's status code (negative), or None when the call never reached PMIx.
    pub status: Option<i32>,
    /// PMIx's description of the status, or why the call was not made.
    pub detail: String,
}

impl fmt::Display for PmixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            Some(status) => write!(f, "{} failed: {} (status {status})", self.call, self.detail),
            None => write!(f, "{}: {}", self.call, self.detail),
        }
    }
}

impl std::error::Error for PmixError {}

/// Result of a PMIx call.
pub type Result<T> = std::result::Result<T, PmixError>;
