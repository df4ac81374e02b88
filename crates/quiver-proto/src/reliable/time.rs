//! Time as the protocol sees it: nanoseconds the caller supplies.
//!
//! Layer: sans-IO, inside [`crate::reliable`]; the bottom of its modules. No clock: every
//! time is an argument.

/// Monotonic time in nanoseconds, supplied by the caller on every call that needs time.
pub type Nanos = u64;

/// The earlier of two optional deadlines (`None`: no deadline).
pub(super) fn earliest(left: Option<Nanos>, right: Option<Nanos>) -> Option<Nanos> {
    match (left, right) {
        (Some(left), Some(right)) => Some(left.min(right)),
        (left, None) => left,
        (None, right) => right,
    }
}
