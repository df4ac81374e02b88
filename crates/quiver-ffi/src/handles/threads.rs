//! The per-thread records behind endpoint leases: a thread that calls into the C API gets
//! a token (its record's index + 1) and says in its record which slot its outermost leased
//! call is inside; another thread that wants that slot makes the owner's pending stores
//! visible with `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` before it reads the record
//! (decision 0104).
//!
//! Tokens are handed out only when this process registered for those barriers; otherwise
//! (a kernel before 4.14, a seccomp profile that refuses the call, or miri) no thread gets
//! one and every call holds its slot with a compare-and-swap.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

/// The most threads that hold a token at once; later threads take every slot the
/// compare-and-swap way.
const RECORDS: usize = 1024;
/// `TOKEN` of a thread that has none and will not get one.
const NO_TOKEN: u32 = u32::MAX;

/// One thread's record. Aligned to its own cache lines: the owner writes `inside` on every
/// call, and other threads' records must not share the line.
#[repr(align(128))]
pub(crate) struct ThreadRecord {
    claimed: AtomicBool,
    /// The [`thread_id`] of the thread that claimed the record; 0 while nobody has it. A
    /// thread finds its own record from a slot's holder and this, with no thread-local
    /// read (in a shared library each costs a call of `__tls_get_addr`).
    pub(crate) thread: AtomicU64,
    /// The address of the slot this thread's outermost leased call is inside; 0 when none.
    pub(crate) inside: AtomicU64,
}

static THREADS: [ThreadRecord; RECORDS] = [const {
    ThreadRecord {
        claimed: AtomicBool::new(false),
        thread: AtomicU64::new(0),
        inside: AtomicU64::new(0),
    }
}; RECORDS];

thread_local! {
    // Read on every call: const-initialized and without a destructor, so reading it is a
    // plain thread-local load. 0 = not asked yet.
    static TOKEN: Cell<u32> = const { Cell::new(0) };
    // Gives the token back when the thread ends (touched once, when the token is claimed).
    static GIVE_BACK: GiveBack = const { GiveBack(Cell::new(0)) };
}

struct GiveBack(Cell<u32>);

impl Drop for GiveBack {
    fn drop(&mut self) {
        let token = self.0.get();
        if let Some(record) = record(token) {
            // Later destructors of this thread that call in must not use the freed token.
            let _ = TOKEN.try_with(|t| t.set(NO_TOKEN));
            record.thread.store(0, Ordering::Relaxed);
            record.claimed.store(false, Ordering::Release);
        }
    }
}

/// The record of token `token` (None for 0, `NO_TOKEN` or a number out of range).
#[inline]
pub(crate) fn record(token: u32) -> Option<&'static ThreadRecord> {
    THREADS.get((token as usize).wrapping_sub(1))
}

/// This thread's token if it has one already (0 otherwise).
#[inline]
pub(crate) fn current_token() -> u32 {
    TOKEN.try_with(Cell::get).unwrap_or(NO_TOKEN)
}

/// The record of token `token` if this thread claimed it: the fast path's way to know a
/// lease is its own. Threads alive at once have different [`thread_id`]s, and a record's
/// `thread` is its claimer's (cleared when the claimer ends), so a match is this thread's
/// record. (A thread that ended without running its destructors keeps its record; a new
/// thread with its thread pointer then uses that record as its own, which only it writes.)
#[inline]
pub(crate) fn own_record(token: u32) -> Option<&'static ThreadRecord> {
    record(token).filter(|r| r.thread.load(Ordering::Relaxed) == thread_id())
}

/// A number that no other thread alive has: the thread pointer, which the ABI keeps in a
/// register for the thread-local storage of each thread (its own control block's address).
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[inline(always)]
pub(crate) fn thread_id() -> u64 {
    let id: u64;
    // SAFETY: reads the first word of the thread control block, which the x86-64 ABI's
    // thread-local storage (TLS variant II) requires to hold the block's own address; it
    // is always mapped, and never changes for the life of the thread.
    unsafe {
        std::arch::asm!(
            "mov {id}, qword ptr fs:[0]",
            id = out(reg) id,
            options(nostack, readonly, preserves_flags, pure),
        );
    }
    id
}

/// A number that no other thread alive has: the thread pointer register.
#[cfg(all(target_arch = "aarch64", not(miri)))]
#[inline(always)]
pub(crate) fn thread_id() -> u64 {
    let id: u64;
    // SAFETY: reads the thread pointer register, which touches no memory.
    unsafe {
        std::arch::asm!(
            "mrs {id}, tpidr_el0",
            id = out(reg) id,
            options(nostack, nomem, preserves_flags, pure),
        );
    }
    id
}

/// A number that no other thread alive has: the address of one of its thread-locals.
#[cfg(any(not(any(target_arch = "x86_64", target_arch = "aarch64")), miri))]
#[inline]
pub(crate) fn thread_id() -> u64 {
    TOKEN.with(|t| std::ptr::from_ref(t).addr() as u64)
}

/// This thread's token, claimed on its first call; None when it has none (no barrier in
/// this process, every record taken, or the thread is ending).
pub(crate) fn token() -> Option<u32> {
    let now = current_token();
    if now != 0 {
        return (now != NO_TOKEN).then_some(now);
    }
    let claimed = if barrier_registered() { claim() } else { None };
    let _ = TOKEN.try_with(|t| t.set(claimed.unwrap_or(NO_TOKEN)));
    claimed
}

fn claim() -> Option<u32> {
    for (index, record) in THREADS.iter().enumerate() {
        if record
            .claimed
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            let token = index as u32 + 1;
            if GIVE_BACK.try_with(|g| g.0.set(token)).is_ok() {
                record.thread.store(thread_id(), Ordering::Relaxed);
                return Some(token);
            }
            record.claimed.store(false, Ordering::Release);
            return None;
        }
    }
    None
}

/// Runs a full memory barrier on every CPU that runs a thread of this process, so that
/// every store another thread made before it is visible after it. Only called once
/// [`barrier_registered`] said yes (a token exists).
///
/// Returns false if the kernel refused (then nothing is known about other threads). A
/// child process after `fork` starts unregistered, so a refusal registers again once.
pub(crate) fn heavy_barrier() -> bool {
    membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)
        || (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED)
            && membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED))
}

const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

/// Registers this process for private expedited barriers, once; whether that worked.
pub(crate) fn barrier_registered() -> bool {
    const UNKNOWN: u8 = 0;
    const YES: u8 = 1;
    const NO: u8 = 2;
    static REGISTERED: AtomicU8 = AtomicU8::new(UNKNOWN);
    match REGISTERED.load(Ordering::Acquire) {
        YES => true,
        NO => false,
        _ => {
            // Registering twice (two threads racing here) is harmless.
            let works = membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED)
                && membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED);
            REGISTERED.store(if works { YES } else { NO }, Ordering::Release);
            works
        }
    }
}

#[cfg(not(miri))]
fn membarrier(command: libc::c_int) -> bool {
    // SAFETY: a plain system call with integer arguments; it touches no memory of ours.
    unsafe { libc::syscall(libc::SYS_membarrier, command, 0, 0) == 0 }
}

#[cfg(miri)]
fn membarrier(_command: libc::c_int) -> bool {
    false
}
