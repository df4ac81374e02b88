//! The conformance suite's ranks: one thread per rank, and what happens when one panics.
//!
//! A rank that panics must fail its test at once, with its message, and never leave the
//! test hanging: its peers may be blocked on it (in a call whose deadline is the job's
//! minute-long `op_timeout`, or in a test's own polling loop, which has none). The
//! panicking rank's context is dropped as it unwinds (so peers that can tell see
//! `PeerClosed`); [`run_ranks`] then waits [`PANIC_GRACE`] for the other ranks, and
//! panics with the first rank's message when they are done. When they are not, it writes
//! the message, the ranks still running and the test's name straight to stderr (past the
//! test harness's capture) and ends the test process with status 101: the rank threads
//! are scoped, so nothing else could return from the test while they run.

use std::any::Any;
use std::cell::Cell;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Condvar, Mutex, Once};
use std::thread;
use std::time::{Duration, Instant};

/// How long the other ranks have to finish after one panicked.
pub(crate) const PANIC_GRACE: Duration = Duration::from_secs(10);

thread_local! {
    /// When this thread last panicked (set by the panic hook, before unwinding drops the
    /// rank's context and wakes its peers, which may then panic too: the first is the
    /// cause). The last one is the rank's own: a rank may catch panics of its own before.
    static PANICKED_AT: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Installs (once) a panic hook that notes the time of a panic on the thread, then runs
/// the hook there was (the default one prints the message).
fn note_panic_times() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICKED_AT.with(|at| at.set(Some(Instant::now())));
            previous(info);
        }));
    });
}

fn message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(a panic without a message)".into())
}

#[derive(Default)]
struct Ranks {
    running: Vec<u32>,
    /// (when, rank, message) of each rank that panicked.
    panics: Vec<(Instant, u32, String)>,
}

/// Runs `body(rank, item)` for every item (rank `i` gets `items[i]`) on a thread of its
/// own, and returns when all are done; panics with the first panicking rank's message.
/// If a rank panics and the others are not done [`PANIC_GRACE`] later, ends the process
/// (the module's doc).
pub(crate) fn run_ranks<T: Send>(items: Vec<T>, body: impl Fn(u32, T) + Send + Sync + Copy) {
    note_panic_times();
    let size = items.len() as u32;
    let state = Mutex::new(Ranks {
        running: (0..size).collect(),
        panics: Vec::new(),
    });
    let changed = Condvar::new();
    let (state, changed) = (&state, &changed);
    thread::scope(|s| {
        for (rank, item) in (0..size).zip(items) {
            s.spawn(move || {
                PANICKED_AT.with(|at| at.set(None));
                let outcome = catch_unwind(AssertUnwindSafe(|| body(rank, item)));
                let mut ranks = state.lock().unwrap_or_else(|e| e.into_inner());
                ranks.running.retain(|&r| r != rank);
                if let Err(payload) = outcome {
                    let at = PANICKED_AT.with(Cell::get).unwrap_or_else(Instant::now);
                    ranks.panics.push((at, rank, message(&*payload)));
                }
                changed.notify_all();
            });
        }
        let mut ranks = state.lock().unwrap_or_else(|e| e.into_inner());
        while !ranks.running.is_empty() {
            let Some(first) = ranks.panics.iter().map(|p| p.0).min() else {
                ranks = changed.wait(ranks).unwrap_or_else(|e| e.into_inner());
                continue;
            };
            let left = (first + PANIC_GRACE).saturating_duration_since(Instant::now());
            if left.is_zero() {
                give_up(&ranks);
            }
            ranks = changed
                .wait_timeout(ranks, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    });
    let mut ranks = state.lock().unwrap_or_else(|e| e.into_inner());
    ranks.panics.sort_by_key(|p| p.0);
    if let Some((_, rank, message)) = ranks.panics.first() {
        let others: Vec<u32> = ranks.panics[1..].iter().map(|p| p.1).collect();
        panic!("rank {rank} of {size} panicked: {message} (then ranks {others:?} too)");
    }
}

/// A rank panicked and others still run [`PANIC_GRACE`] later: says so past the test
/// harness's capture and ends the process.
fn give_up(ranks: &Ranks) -> ! {
    let (_, rank, message) = ranks.panics.iter().min_by_key(|p| p.0).expect("a panic");
    let test = thread::current().name().unwrap_or("?").to_string();
    let report = format!(
        "\n{test}: rank {rank} panicked: {message}\n{test}: ranks {:?} still running {} s \
         later (blocked on it): ending the test process\n",
        ranks.running,
        PANIC_GRACE.as_secs()
    );
    let _ = std::io::stderr().write_all(report.as_bytes());
    std::process::exit(101);
}

/// The variable that makes [`stuck_peer_probe`] act (in a child process of the test).
const PROBE: &str = "QUIVER_TEST_STUCK_PEER_PROBE";

/// A rank panics while its peer waits on it, and the peer then fails too: the run fails
/// at once with the first rank's message, not the peer's.
#[test]
fn a_panicking_rank_fails_the_run_with_its_message() {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let items = vec![(None, Some(rx)), (Some(tx), None)];
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        run_ranks(items, |rank, (tx, rx)| {
            if rank == 1 {
                let _keep = tx;
                panic!("rank 1 fails on purpose");
            }
            // Ends when rank 1's sender is dropped as it unwinds.
            rx.expect("rank 0's")
                .recv()
                .expect("rank 0 waits for rank 1");
        })
    }));
    let message = message(&*outcome.expect_err("the run fails"));
    assert!(
        message.starts_with("rank 1 of 2 panicked: rank 1 fails on purpose (then ranks [0]"),
        "{message}"
    );
}

/// A rank panics while its peer spins forever: the test process ends within the grace
/// period with the panicking rank's message and the rank still running (this test binary
/// run again, [`stuck_peer_probe`]).
#[test]
fn a_rank_stuck_on_a_panicked_one_ends_the_process() {
    let mut child = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "ranks::stuck_peer_probe", "--test-threads", "1"])
        .env(PROBE, "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the test binary runs");
    let deadline = Instant::now() + PANIC_GRACE + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "the probe still runs after {:?}",
                PANIC_GRACE + Duration::from_secs(60)
            );
        }
        thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("piped"), &mut stderr)
        .expect("stderr");
    assert_eq!(status.code(), Some(101), "{stderr}");
    assert!(
        stderr.contains("ranks::stuck_peer_probe: rank 1 panicked: rank 1 fails on purpose"),
        "{stderr}"
    );
    assert!(
        stderr.contains("ranks [0] still running 10 s later"),
        "{stderr}"
    );
}

/// [`a_rank_stuck_on_a_panicked_one_ends_the_process`]'s child: rank 1 panics, rank 0
/// waits for a message that never comes, with no deadline. Does nothing unless [`PROBE`]
/// is set.
#[test]
fn stuck_peer_probe() {
    if std::env::var_os(PROBE).is_none() {
        return;
    }
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let items = vec![(Some(tx), Some(rx)), (None, None)];
    run_ranks(items, |rank, (tx, rx)| {
        if rank == 1 {
            panic!("rank 1 fails on purpose");
        }
        let _never_dropped = tx;
        rx.expect("rank 0's").recv().expect("rank 0 waits forever");
    });
    unreachable!("the run ends the process");
}
