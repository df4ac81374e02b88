//! Fast paths for the common case of a small-message exchange, in the manner of TCP's
//! header prediction (Van Jacobson, 1988): an acknowledgement that newly covers the oldest
//! frame in flight and only that one, the next frame of new data when nothing is lent,
//! resent or re-cut (both in `send/short_routes.rs`), and a Data frame that is the next
//! expected one, in order, with nothing missing before it (`input/in_order.rs`,
//! `recv/in_order.rs`). Each checks its conditions first, changes nothing when one of them
//! fails, and then leaves the work to the general path; when they all hold it makes every
//! change the general path would, in fewer instructions.
//!
//! Layer: sans-IO, inside [`crate::reliable`]. What it owns: the switch that turns the fast
//! paths off, for tests only. With it off, a test drives the general path alone and
//! compares the connections' whole state and output with a run of the fast paths
//! (`tests/fast_paths.rs`); outside tests the fast paths are always on.

#[cfg(test)]
use std::cell::Cell;

#[cfg(test)]
thread_local! {
    /// Set by a test to force the general path (per thread: tests run in parallel).
    static GENERAL_ONLY: Cell<bool> = const { Cell::new(false) };
    /// Times a fast path was taken on this thread (a test checks it ran them).
    static TAKEN: Cell<u64> = const { Cell::new(0) };
}

/// Whether the fast paths may be taken.
#[cfg(not(test))]
#[inline(always)]
pub(super) fn enabled() -> bool {
    true
}

/// Whether the fast paths may be taken (not while a test forces the general path).
#[cfg(test)]
pub(super) fn enabled() -> bool {
    !GENERAL_ONLY.with(Cell::get)
}

/// Counts a fast path taken (tests only: nothing outside them).
#[inline(always)]
pub(super) fn note_taken() {
    #[cfg(test)]
    TAKEN.with(|taken| taken.set(taken.get() + 1));
}

/// Forces the general path on this thread (`true`) or allows the fast paths again.
#[cfg(test)]
pub(super) fn force_general(general_only: bool) {
    GENERAL_ONLY.with(|cell| cell.set(general_only));
}

/// Times a fast path was taken on this thread so far.
#[cfg(test)]
pub(super) fn taken() -> u64 {
    TAKEN.with(Cell::get)
}
