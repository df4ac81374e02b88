//! The machine's floors for `quiver bench`, measured in the same run as the transports.
//!
//! - **Cache-line hand-off**: two threads pinned to two different CPUs ping-pong a counter
//!   in one 128-byte-aligned `AtomicU64` (128 bytes so that the adjacent-line prefetcher
//!   pulls in nothing else). Each side spins on plain loads (no `pause`, which costs tens of
//!   nanoseconds on recent x86 and would flatter every ratio against this floor). Time is
//!   read once per batch of [`HANDOFF_ROUND_TRIPS_PER_BATCH`] round trips, so the clock's
//!   own cost stays out of the figure; one way = batch time / round trips / 2, and the floor
//!   is the median over batches.
//! - **memcpy bandwidth per size**: one thread, pinned, copies a warm source buffer into a
//!   warm destination buffer of the given size, many times per timed batch;
//!   `std::hint::black_box` keeps every copy. The figure is the median over batches (the
//!   best batch is reported too), at the fastest of a few relative alignments of the
//!   two buffers (`MEMCPY_DESTINATION_OFFSETS`).
//!
//! - **trivial system call**: `getppid` through `syscall(2)` (glibc does not cache it),
//!   timed in batches on one pinned thread: the price of entering the kernel at all, which
//!   every socket operation pays and shared-memory polling does not.
//! - **cross-core wake-up**: two pinned threads take turns sleeping and waking each other,
//!   once with an eventfd slept on in `poll` (quiver's doorbell) and once with a futex;
//!   one way = round trip / 2, median over round trips. What a transport pays when the
//!   receiver sleeps instead of polling.
//! - **cross-memory attach bandwidth per size**: `process_vm_readv` of this process's own
//!   memory (one kernel copy, page pinning included), median over batches: the copy at
//!   the heart of shm rendezvous.
//!
//! The last three are the *extended* floors ([`measure_extended`]): the `floor` test and
//! the lab's cost model and suites measure them; the other tests need only the first two.
//!
//! Also holds [`pin_current_thread`] (`sched_setaffinity` for one thread).

use std::hint::black_box;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Instant;

use super::stats;

/// Round trips timed together in one hand-off batch.
pub const HANDOFF_ROUND_TRIPS_PER_BATCH: u64 = 64;
/// Timed hand-off batches (the median is taken over these).
const HANDOFF_BATCHES: usize = 2_000;
/// Untimed hand-off round trips before the timed ones.
const HANDOFF_WARMUP_ROUND_TRIPS: u64 = 20_000;
/// Bytes copied per timed memcpy batch (at least one copy, at most
/// [`MEMCPY_MAX_COPIES_PER_BATCH`] copies per batch).
const MEMCPY_BYTES_PER_BATCH: u64 = 16 << 20;
/// Most copies per timed memcpy batch (keeps tiny sizes from taking seconds).
const MEMCPY_MAX_COPIES_PER_BATCH: u64 = 100_000;
/// Timed memcpy batches per size.
const MEMCPY_BATCHES: usize = 25;
/// Untimed memcpy batches per size before the timed ones.
const MEMCPY_WARMUP_BATCHES: usize = 3;
/// Destination offsets from a page boundary tried for memcpy (the source is page-aligned);
/// the floor is the fastest. Some CPUs copy many times slower at unlucky relative
/// alignments (e.g. AMD Zen 3 `rep movsb` when destination - source is 16 mod 4096),
/// and a floor should be what the machine can do, not what one allocation happened to get.
const MEMCPY_DESTINATION_OFFSETS: [usize; 3] = [0, 64, 2048];
/// Page size assumed for alignment (4 KiB on x86-64 and most other targets).
const PAGE_BYTES: usize = 4096;

/// Core-to-core cache-line hand-off latency, one way.
#[derive(Debug, Clone, Copy)]
pub struct HandoffFloor {
    /// CPU of the thread that starts each round trip.
    pub cpu_a: usize,
    /// CPU of the thread that answers.
    pub cpu_b: usize,
    /// Median over batches of the mean one-way hand-off, in microseconds (the floor).
    pub one_way_median_us: f64,
    /// 99th percentile (nearest rank) over batches of the mean one-way hand-off, in µs.
    pub one_way_p99_us: f64,
    /// Round trips timed in all.
    pub round_trips: u64,
}

/// Single-core memcpy bandwidth at one size.
#[derive(Debug, Clone, Copy)]
pub struct MemcpyFloor {
    /// Bytes per copy.
    pub size_bytes: u64,
    /// Median over batches, in MB/s (10^6 bytes per second): the floor.
    pub median_mbps: f64,
    /// Best batch, in MB/s.
    pub best_mbps: f64,
    /// Copies timed in all.
    pub copies: u64,
}

/// All floors of one run.
#[derive(Debug, Clone)]
pub struct Floors {
    /// The cache-line hand-off between the two CPUs the ranks run on.
    pub handoff: HandoffFloor,
    /// memcpy bandwidth per size, ascending by size.
    pub memcpy: Vec<MemcpyFloor>,
    /// The extended floors, when this run measured them.
    pub extended: Option<ExtendedFloors>,
}

/// A latency floor: median and p99 over samples, in µs.
#[derive(Debug, Clone, Copy)]
pub struct LatencyFloor {
    /// Median, in µs.
    pub median_us: f64,
    /// 99th percentile (nearest rank), in µs.
    pub p99_us: f64,
    /// Operations timed in all.
    pub count: u64,
}

/// Floors beyond the hand-off and memcpy: kernel entry, wake-up, cross-memory attach.
#[derive(Debug, Clone)]
pub struct ExtendedFloors {
    /// One trivial system call (`getppid`), per call.
    pub syscall: LatencyFloor,
    /// One-way cross-core wake-up through an eventfd slept on in `poll`.
    pub wakeup_eventfd: LatencyFloor,
    /// One-way cross-core wake-up through a futex.
    pub wakeup_futex: LatencyFloor,
    /// `process_vm_readv` bandwidth per size (same shape as memcpy), ascending by size.
    pub cma: Vec<MemcpyFloor>,
}

impl Floors {
    /// The memcpy floor measured at exactly `size_bytes`, if any.
    pub fn memcpy_at(&self, size_bytes: u64) -> Option<&MemcpyFloor> {
        self.memcpy
            .iter()
            .find(|floor| floor.size_bytes == size_bytes)
    }
}

/// Measures the hand-off between `cpu_a` and `cpu_b` and memcpy (on `cpu_a`) at each size.
///
/// # Errors
/// If a measuring thread cannot be started or pinned.
pub fn measure(cpu_a: usize, cpu_b: usize, sizes: &[u64]) -> io::Result<Floors> {
    let handoff = measure_handoff(cpu_a, cpu_b)?;
    let memcpy = std::thread::scope(|scope| {
        scope
            .spawn(|| -> io::Result<Vec<MemcpyFloor>> {
                pin_current_thread(cpu_a)?;
                Ok(sizes.iter().map(|&size| measure_memcpy(size)).collect())
            })
            .join()
            .map_err(|_| io::Error::other("the memcpy measuring thread panicked"))?
    })?;
    Ok(Floors {
        handoff,
        memcpy,
        extended: None,
    })
}

/// Measures the extended floors: a trivial syscall and cross-memory attach per size on
/// `cpu_a`, wake-ups between `cpu_a` and `cpu_b`.
///
/// # Errors
/// If a measuring thread cannot be started or pinned, or a system call fails.
pub fn measure_extended(cpu_a: usize, cpu_b: usize, sizes: &[u64]) -> io::Result<ExtendedFloors> {
    let (syscall, cma) = std::thread::scope(|scope| {
        scope
            .spawn(|| -> io::Result<(LatencyFloor, Vec<MemcpyFloor>)> {
                pin_current_thread(cpu_a)?;
                let syscall = measure_syscall();
                let cma = sizes
                    .iter()
                    .map(|&size| measure_cma(size))
                    .collect::<io::Result<Vec<_>>>()?;
                Ok((syscall, cma))
            })
            .join()
            .map_err(|_| io::Error::other("the syscall measuring thread panicked"))?
    })?;
    let wakeup_eventfd = measure_wakeup(cpu_a, cpu_b, WakeMechanism::EventfdPoll)?;
    let wakeup_futex = measure_wakeup(cpu_a, cpu_b, WakeMechanism::Futex)?;
    Ok(ExtendedFloors {
        syscall,
        wakeup_eventfd,
        wakeup_futex,
        cma,
    })
}

/// Calls per timed syscall batch, and timed batches.
const SYSCALL_CALLS_PER_BATCH: u64 = 1_000;
const SYSCALL_BATCHES: usize = 200;
/// Wake-up round trips timed (each one timed alone: they take microseconds), and untimed.
const WAKEUP_ROUND_TRIPS: usize = 2_000;
const WAKEUP_WARMUP_ROUND_TRIPS: usize = 200;

/// Times `getppid` through `syscall(2)` in batches; per call, median over batches.
fn measure_syscall() -> LatencyFloor {
    let mut per_call_us = Vec::with_capacity(SYSCALL_BATCHES);
    for batch in 0..SYSCALL_BATCHES + 10 {
        let start = Instant::now();
        for _ in 0..SYSCALL_CALLS_PER_BATCH {
            // SAFETY: getppid takes no arguments, touches no memory and cannot fail.
            black_box(unsafe { libc::syscall(libc::SYS_getppid) });
        }
        let elapsed_us = start.elapsed().as_secs_f64() * 1e6;
        if batch >= 10 {
            per_call_us.push(elapsed_us / SYSCALL_CALLS_PER_BATCH as f64);
        }
    }
    latency_floor(
        per_call_us,
        SYSCALL_BATCHES as u64 * SYSCALL_CALLS_PER_BATCH,
    )
}

fn latency_floor(mut samples_us: Vec<f64>, count: u64) -> LatencyFloor {
    stats::sort_samples(&mut samples_us);
    LatencyFloor {
        // The callers always take at least one sample.
        median_us: stats::median(&samples_us).unwrap_or(0.0),
        p99_us: stats::percentile(&samples_us, 99.0).unwrap_or(0.0),
        count,
    }
}

/// `process_vm_readv` from this process's own memory, `size_bytes` per call, timed like
/// memcpy (median MB/s over batches, best batch too).
fn measure_cma(size_bytes: u64) -> io::Result<MemcpyFloor> {
    let length = size_bytes as usize;
    let source: Vec<u8> = (0..length).map(|index| index as u8).collect();
    let mut destination = vec![0u8; length];
    let pid = quiver_transport::sys::getpid();
    let remote = source.as_ptr() as u64;
    let copies_per_batch =
        (MEMCPY_BYTES_PER_BATCH / size_bytes).clamp(1, MEMCPY_MAX_COPIES_PER_BATCH / 10);
    let mut batch_mbps = Vec::with_capacity(MEMCPY_BATCHES);
    for batch in 0..MEMCPY_WARMUP_BATCHES + MEMCPY_BATCHES {
        let start = Instant::now();
        for _ in 0..copies_per_batch {
            let copied =
                quiver_transport::sys::process_vm_read(pid, black_box(&mut destination), remote)?;
            if copied != length {
                return Err(io::Error::other(format!(
                    "process_vm_readv copied {copied} of {length} bytes"
                )));
            }
        }
        let batch_us = start.elapsed().as_secs_f64() * 1e6;
        if batch >= MEMCPY_WARMUP_BATCHES {
            batch_mbps.push((copies_per_batch * size_bytes) as f64 / batch_us.max(1e-3));
        }
    }
    black_box(&source);
    stats::sort_samples(&mut batch_mbps);
    Ok(MemcpyFloor {
        size_bytes,
        median_mbps: stats::median(&batch_mbps).unwrap_or(0.0),
        best_mbps: batch_mbps.last().copied().unwrap_or(0.0),
        copies: copies_per_batch * MEMCPY_BATCHES as u64,
    })
}

/// How a sleeping thread is woken in [`measure_wakeup`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WakeMechanism {
    /// Sleep in `poll` on an eventfd; wake by writing it (quiver's doorbell).
    EventfdPoll,
    /// Sleep in `FUTEX_WAIT`; wake with `FUTEX_WAKE`.
    Futex,
}

/// A one-shot signal between two threads that sleeps in the kernel until raised.
struct Sleeper {
    mechanism: WakeMechanism,
    eventfd: std::os::fd::OwnedFd,
    word: std::sync::atomic::AtomicU32,
}

impl Sleeper {
    fn new(mechanism: WakeMechanism) -> io::Result<Sleeper> {
        Ok(Sleeper {
            mechanism,
            eventfd: quiver_transport::sys::eventfd()?,
            word: std::sync::atomic::AtomicU32::new(0),
        })
    }

    /// Sleeps until [`Sleeper::raise`] was called (consumes the signal).
    fn sleep(&self) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        match self.mechanism {
            WakeMechanism::EventfdPoll => loop {
                let mut fds = [libc::pollfd {
                    fd: self.eventfd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                }];
                quiver_transport::sys::poll(&mut fds, None)?;
                if fds[0].revents & libc::POLLIN != 0 {
                    quiver_transport::sys::eventfd_drain(self.eventfd.as_raw_fd());
                    return Ok(());
                }
            },
            WakeMechanism::Futex => {
                while self.word.swap(0, Ordering::Acquire) == 0 {
                    quiver_transport::sys::futex_wait(
                        &self.word,
                        0,
                        std::time::Duration::from_secs(1),
                    );
                }
                Ok(())
            }
        }
    }

    /// Wakes the thread sleeping in (or about to call) [`Sleeper::sleep`].
    fn raise(&self) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        match self.mechanism {
            WakeMechanism::EventfdPoll => {
                quiver_transport::sys::eventfd_signal(self.eventfd.as_raw_fd())
            }
            WakeMechanism::Futex => {
                self.word.store(1, Ordering::Release);
                quiver_transport::sys::futex_wake(&self.word);
                Ok(())
            }
        }
    }
}

/// Two threads pinned to `cpu_a` and `cpu_b` wake each other in turn; one way = round trip
/// / 2, each round trip timed on its own (they take microseconds, the clock ~30 ns).
fn measure_wakeup(
    cpu_a: usize,
    cpu_b: usize,
    mechanism: WakeMechanism,
) -> io::Result<LatencyFloor> {
    let to_b = Sleeper::new(mechanism)?;
    let to_a = Sleeper::new(mechanism)?;
    let total = WAKEUP_WARMUP_ROUND_TRIPS + WAKEUP_ROUND_TRIPS;
    let pinned_a = AtomicBool::new(false);
    let pinned_b = AtomicBool::new(false);
    let start_line = Barrier::new(2);
    let (result_a, result_b) = std::thread::scope(|scope| {
        let responder = scope.spawn(|| -> io::Result<()> {
            let pin_result = pin_current_thread(cpu_b);
            pinned_b.store(pin_result.is_ok(), Ordering::SeqCst);
            start_line.wait();
            pin_result?;
            if !pinned_a.load(Ordering::SeqCst) {
                return Ok(()); // The initiator reports its own error.
            }
            for _ in 0..total {
                to_b.sleep()?;
                to_a.raise()?;
            }
            Ok(())
        });
        let initiator = scope.spawn(|| -> io::Result<Vec<f64>> {
            let pin_result = pin_current_thread(cpu_a);
            pinned_a.store(pin_result.is_ok(), Ordering::SeqCst);
            start_line.wait();
            pin_result?;
            if !pinned_b.load(Ordering::SeqCst) {
                return Ok(Vec::new()); // The responder reports its own error.
            }
            let mut one_way_us = Vec::with_capacity(WAKEUP_ROUND_TRIPS);
            for round_trip in 0..total {
                let start = Instant::now();
                to_b.raise()?;
                to_a.sleep()?;
                if round_trip >= WAKEUP_WARMUP_ROUND_TRIPS {
                    one_way_us.push(start.elapsed().as_secs_f64() * 1e6 / 2.0);
                }
            }
            Ok(one_way_us)
        });
        (initiator.join(), responder.join())
    });
    let panicked = || io::Error::other("a wake-up measuring thread panicked");
    let one_way_us = result_a.map_err(|_| panicked())??;
    result_b.map_err(|_| panicked())??;
    Ok(latency_floor(one_way_us, WAKEUP_ROUND_TRIPS as u64))
}

/// Pins the calling thread to one CPU.
///
/// # Errors
/// If the CPU number is out of range or `sched_setaffinity` fails (e.g. not an allowed CPU).
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CPU {cpu} is out of range"),
        ));
    }
    // SAFETY: cpu_set_t is a plain bit array; all-zero is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` was checked to be below the set's capacity just above.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size we pass; pid 0 = the calling thread.
    let result =
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if result != 0 {
        let error = io::Error::last_os_error();
        return Err(io::Error::new(
            error.kind(),
            format!("cannot pin to CPU {cpu}: {error}"),
        ));
    }
    Ok(())
}

/// One `AtomicU64` alone in a 128-byte block (two cache lines: no prefetcher neighbour).
#[repr(align(128))]
struct PaddedCounter(AtomicU64);

/// Measures the one-way cache-line hand-off between threads pinned to `cpu_a` and `cpu_b`.
///
/// # Errors
/// If a measuring thread cannot be started or pinned.
pub fn measure_handoff(cpu_a: usize, cpu_b: usize) -> io::Result<HandoffFloor> {
    let counter = PaddedCounter(AtomicU64::new(0));
    let pinned_a = AtomicBool::new(false);
    let pinned_b = AtomicBool::new(false);
    let start_line = Barrier::new(2);
    let timed_round_trips = HANDOFF_BATCHES as u64 * HANDOFF_ROUND_TRIPS_PER_BATCH;
    let total_round_trips = HANDOFF_WARMUP_ROUND_TRIPS + timed_round_trips;

    let (result_a, result_b) = std::thread::scope(|scope| {
        let responder = scope.spawn(|| -> io::Result<()> {
            let pin_result = pin_current_thread(cpu_b);
            pinned_b.store(pin_result.is_ok(), Ordering::SeqCst);
            start_line.wait();
            pin_result?;
            if !pinned_a.load(Ordering::SeqCst) {
                return Ok(()); // The initiator reports its own error.
            }
            for round_trip in 0..total_round_trips {
                let ping = 2 * round_trip + 1;
                while counter.0.load(Ordering::Acquire) != ping {}
                counter.0.store(ping + 1, Ordering::Release);
            }
            Ok(())
        });
        let initiator = scope.spawn(|| -> io::Result<Vec<f64>> {
            let pin_result = pin_current_thread(cpu_a);
            pinned_a.store(pin_result.is_ok(), Ordering::SeqCst);
            start_line.wait();
            pin_result?;
            if !pinned_b.load(Ordering::SeqCst) {
                return Ok(Vec::new()); // The responder reports its own error.
            }
            let mut one_way_us = Vec::with_capacity(HANDOFF_BATCHES);
            let round_trip = |index: u64| {
                let ping = 2 * index + 1;
                counter.0.store(ping, Ordering::Release);
                while counter.0.load(Ordering::Acquire) != ping + 1 {}
            };
            for index in 0..HANDOFF_WARMUP_ROUND_TRIPS {
                round_trip(index);
            }
            let mut index = HANDOFF_WARMUP_ROUND_TRIPS;
            for _ in 0..HANDOFF_BATCHES {
                let batch_start = Instant::now();
                for _ in 0..HANDOFF_ROUND_TRIPS_PER_BATCH {
                    round_trip(index);
                    index += 1;
                }
                let batch_us = batch_start.elapsed().as_secs_f64() * 1e6;
                one_way_us.push(batch_us / HANDOFF_ROUND_TRIPS_PER_BATCH as f64 / 2.0);
            }
            Ok(one_way_us)
        });
        (initiator.join(), responder.join())
    });
    let panicked = || io::Error::other("a hand-off measuring thread panicked");
    result_b.map_err(|_| panicked())??;
    let mut one_way_us = result_a.map_err(|_| panicked())??;
    stats::sort_samples(&mut one_way_us);
    let (Some(median), Some(p99)) = (
        stats::median(&one_way_us),
        stats::percentile(&one_way_us, 99.0),
    ) else {
        return Err(io::Error::other("no hand-off samples were taken"));
    };
    Ok(HandoffFloor {
        cpu_a,
        cpu_b,
        one_way_median_us: median,
        one_way_p99_us: p99,
        round_trips: timed_round_trips,
    })
}

fn measure_memcpy(size_bytes: u64) -> MemcpyFloor {
    MEMCPY_DESTINATION_OFFSETS
        .iter()
        .map(|&offset| measure_memcpy_at_offset(size_bytes, offset))
        .max_by(|left, right| left.median_mbps.total_cmp(&right.median_mbps))
        // MEMCPY_DESTINATION_OFFSETS is a non-empty constant array.
        .unwrap_or_else(|| measure_memcpy_at_offset(size_bytes, 0))
}

/// Copies between a page-aligned source and a destination `destination_offset` bytes past
/// a page boundary.
fn measure_memcpy_at_offset(size_bytes: u64, destination_offset: usize) -> MemcpyFloor {
    let length = size_bytes as usize;
    let mut source_storage: Vec<u8> = (0..length + 2 * PAGE_BYTES)
        .map(|index| index as u8)
        .collect();
    let mut destination_storage = vec![0u8; length + 2 * PAGE_BYTES];
    let source_start = page_alignment_offset(&source_storage);
    let destination_start = page_alignment_offset(&destination_storage) + destination_offset;
    let source = &mut source_storage[source_start..source_start + length];
    let destination = &mut destination_storage[destination_start..destination_start + length];

    let copies_per_batch =
        (MEMCPY_BYTES_PER_BATCH / size_bytes).clamp(1, MEMCPY_MAX_COPIES_PER_BATCH);
    let mut batch_mbps = Vec::with_capacity(MEMCPY_BATCHES);
    for batch in 0..MEMCPY_WARMUP_BATCHES + MEMCPY_BATCHES {
        let batch_start = Instant::now();
        for _ in 0..copies_per_batch {
            black_box(&mut *destination).copy_from_slice(black_box(&*source));
        }
        black_box(&mut *destination);
        let batch_us = batch_start.elapsed().as_secs_f64() * 1e6;
        if batch >= MEMCPY_WARMUP_BATCHES {
            // bytes per microsecond = 10^6 bytes per second = MB/s.
            batch_mbps.push((copies_per_batch * size_bytes) as f64 / batch_us.max(1e-3));
        }
    }
    stats::sort_samples(&mut batch_mbps);
    MemcpyFloor {
        size_bytes,
        // The batch list is non-empty (MEMCPY_BATCHES > 0), so both statistics exist.
        median_mbps: stats::median(&batch_mbps).unwrap_or(0.0),
        best_mbps: batch_mbps.last().copied().unwrap_or(0.0),
        copies: copies_per_batch * MEMCPY_BATCHES as u64,
    }
}

/// Bytes from the start of `buffer` to its first page boundary.
fn page_alignment_offset(buffer: &[u8]) -> usize {
    (PAGE_BYTES - buffer.as_ptr() as usize % PAGE_BYTES) % PAGE_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_cpus_are_not_empty_and_pinnable() {
        let cpus = crate::launch::allowed_cpus().expect("sched_getaffinity");
        assert!(!cpus.is_empty());
        std::thread::spawn(move || pin_current_thread(cpus[0]))
            .join()
            .expect("thread")
            .expect("pin to an allowed CPU");
    }

    #[test]
    fn extended_floors_are_positive() {
        let cpus = crate::launch::allowed_cpus().expect("sched_getaffinity");
        let (a, b) = (cpus[0], *cpus.last().expect("one CPU"));
        let floors = measure_extended(a, b, &[4096]).expect("extended floors");
        assert!(
            floors.syscall.median_us > 0.0 && floors.syscall.p99_us >= floors.syscall.median_us
        );
        assert!(floors.wakeup_eventfd.median_us > 0.0);
        assert!(floors.wakeup_futex.median_us > 0.0);
        assert_eq!(floors.cma.len(), 1);
        assert!(floors.cma[0].median_mbps > 0.0);
    }

    #[test]
    fn pinning_out_of_range_fails() {
        assert!(pin_current_thread(1 << 20).is_err());
    }

    #[test]
    fn memcpy_floor_reports_positive_bandwidth() {
        let floor = measure_memcpy(4096);
        assert_eq!(floor.size_bytes, 4096);
        assert!(floor.median_mbps > 0.0 && floor.best_mbps >= floor.median_mbps);
        assert!(floor.copies > 0);
    }

    #[test]
    fn page_alignment_offset_reaches_a_page_boundary() {
        let buffer = vec![0u8; 3 * PAGE_BYTES];
        for start in [0, 1, 17, 4095] {
            let offset = page_alignment_offset(&buffer[start..]);
            assert!(offset < PAGE_BYTES);
            assert_eq!((buffer[start..].as_ptr() as usize + offset) % PAGE_BYTES, 0);
        }
    }
}
