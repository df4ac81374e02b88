//! Asymmetric fences for the doorbell's store-then-load handshake.
//!
//! A sender publishes a record, then loads the receiver's `armed` flag; a receiver about to
//! sleep stores the flag, then re-checks its rings. Each side must order its store before
//! its load, or both may read the old values and the receiver sleeps on a record it missed.
//! A sequentially consistent fence on both sides does it, but on the sender it costs a
//! drain of the store buffer on every message, which waits for the ring's cache line to
//! come back from the polling receiver: the message rate then falls to one line hand-off
//! per message.
//!
//! The sides are not equally hot: a sender rings for every message, a receiver arms only
//! before it sleeps. So the sender orders its accesses with a compiler fence only, and the
//! receiver pays for both with `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)`, which runs a
//! full barrier on every CPU running a thread of a process registered for it (a thread not
//! running has passed a full barrier at its last context switch). Either the sender's load
//! came after the barrier on its CPU and sees the flag, or its record store came before it
//! and the receiver's re-check sees the record.
//!
//! The light side is used only when both halves hold: the sending process registered
//! ([`light_fence_allowed`]), and the receiver said, in its doorbell page, that it issues
//! the heavy barrier ([`heavy_fence_works`]). A kernel without `membarrier`, or a seccomp
//! profile that refuses it, leaves both sides on full fences.
//!
//! Layer: quiver-transport, the operating-system side of the shm transport.

use std::sync::atomic::{compiler_fence, fence, AtomicU8, Ordering};
use std::sync::OnceLock;

use crate::sys;

/// Whether this process registered for global expedited barriers (so that a receiver's
/// heavy fence reaches its threads).
static REGISTERED: OnceLock<bool> = OnceLock::new();

/// Whether a heavy fence issued by this process works: 0 unknown, 1 yes, 2 no.
static HEAVY: AtomicU8 = AtomicU8::new(0);

/// Whether this process may order a store before a load with a compiler fence alone
/// against a receiver that issues [`heavy_fence`]: registers the process for the
/// receivers' barriers on the first call.
pub fn light_fence_allowed() -> bool {
    *REGISTERED.get_or_init(|| {
        sys::membarrier_supported(sys::MEMBARRIER_CMD_GLOBAL_EXPEDITED)
            && sys::membarrier(sys::MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED).is_ok()
    })
}

/// Whether [`heavy_fence`] reaches the threads of registered processes (tried once: a
/// kernel without `membarrier`, or a seccomp profile that refuses it, says no).
pub fn heavy_fence_works() -> bool {
    match HEAVY.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let works = sys::membarrier_supported(sys::MEMBARRIER_CMD_GLOBAL_EXPEDITED)
                && sys::membarrier(sys::MEMBARRIER_CMD_GLOBAL_EXPEDITED).is_ok();
            HEAVY.store(if works { 1 } else { 2 }, Ordering::Relaxed);
            works
        }
    }
}

/// The light side's fence between its store and its load: a compiler fence when `light`
/// (both halves hold, see the module's documentation), else a full fence.
#[inline]
pub fn store_load_fence(light: bool) {
    if light {
        compiler_fence(Ordering::SeqCst);
    } else {
        fence(Ordering::SeqCst);
    }
}

/// The heavy side's fence between its store and its load: a full fence here and, when
/// [`heavy_fence_works`], on every CPU running a registered process's thread.
pub fn heavy_fence() {
    fence(Ordering::SeqCst);
    if heavy_fence_works() {
        // It worked when first tried, and the command has no failure of its own once it
        // has (its errors are an unknown command or a refusal by seccomp, both seen then).
        let _ = sys::membarrier(sys::MEMBARRIER_CMD_GLOBAL_EXPEDITED);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine's kernel has the barrier (the CI machines and this one do); both halves
    /// then hold, and calling them again changes nothing.
    #[test]
    fn both_halves_are_stable() {
        let light = light_fence_allowed();
        let heavy = heavy_fence_works();
        assert_eq!(light, light_fence_allowed());
        assert_eq!(heavy, heavy_fence_works());
        heavy_fence();
        store_load_fence(light && heavy);
    }
}
