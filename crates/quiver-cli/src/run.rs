//! `quiver run`: the local launcher. Starts N ranks of one program on this machine, forwards
//! their output line by line with a `[rank]` prefix, and stops the whole job as soon as one
//! rank fails, the launcher is interrupted, or the job runs past its timeout.
//!
//! Waiting uses the self-pipe pattern: a signal handler for SIGCHLD, SIGINT, SIGTERM and
//! SIGHUP writes one byte to a non-blocking pipe that the main thread `poll`s, so no child
//! exit and no interruption is missed between two checks. Output is forwarded by two
//! threads per rank (stdout and stderr); the main thread only supervises.
//!
//! A rank fails when it exits non-zero, is killed by a signal, or stays stopped by a signal
//! (SIGSTOP, SIGTSTP: seen with `waitid(WSTOPPED | WNOWAIT)`) for longer than
//! `--stop-timeout`. The launcher names the rank and the cause on stderr. By default it then
//! stops the job; with `--keep-going` the other ranks run on (they see typed errors on their
//! connections with the failed rank), each further failure is reported as it happens, and
//! the launcher exits once the others have ended.
//!
//! Exit status of the launcher: 0 when every rank exits 0; otherwise the status of the
//! first rank seen failing (128 + S for a rank killed, or left stopped, by signal S); 124 on
//! timeout; 128 + S when the launcher itself receives SIGINT, SIGTERM or SIGHUP; 2 for bad
//! input or a program that cannot be started; 1 for other failures of the launcher itself.

use std::ffi::OsString;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{mpsc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use quiver_cli::launch::{self, Bind, JobIdentity};

/// How long ranks get between SIGTERM and SIGKILL when the job is torn down.
const TEAR_DOWN_GRACE: Duration = Duration::from_millis(500);

/// How long the launcher waits, once the job's processes are gone, for the last output to
/// be forwarded. Only a process outside the job still holding a rank's pipe can make this
/// run out.
const FORWARDER_PATIENCE: Duration = Duration::from_secs(2);

/// Upper bound on one wait for an event, so that the job state is re-checked at least this
/// often even if a wake-up were somehow lost.
const MAX_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Longest line forwarded in one piece. A longer line is forwarded as several prefixed
/// pieces of this size, which bounds the launcher's memory per rank.
const MAX_LINE_BYTES: usize = 1 << 20;

/// Read buffer of each output forwarder.
const FORWARD_BUFFER_BYTES: usize = 64 * 1024;

/// Stack of each output forwarder thread: they only shuffle bytes.
const FORWARDER_STACK_BYTES: usize = 256 * 1024;

/// Exit status for bad command-line input or a program that cannot be started.
const EXIT_USAGE: i32 = 2;

/// Exit status when the launcher itself fails (random source, signal set-up, ...).
const EXIT_LAUNCHER_FAILURE: i32 = 1;

/// Exit status when the job exceeds `--timeout` (as in coreutils `timeout`).
const EXIT_TIMEOUT: i32 = 124;

/// Signals that make the launcher tear the job down and exit with 128 + signal.
const TERMINATION_SIGNALS: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Command-line arguments of `quiver run`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = AFTER_HELP)]
pub(crate) struct RunArgs {
    /// Number of ranks to start (at least 1)
    #[arg(short = 'n', long = "ranks", value_name = "N", value_parser = parse_rank_count)]
    ranks: u32,

    /// CPU binding: `core` pins rank i to the i-th CPU the launcher may use (wrapping
    /// around); `none` leaves the CPU set alone
    #[arg(long, value_enum, value_name = "POLICY", default_value_t = Bind::None)]
    bind: Bind,

    /// Stop the job and exit with status 124 if it runs longer than SECS seconds
    /// (fractions allowed)
    #[arg(long, value_name = "SECS", value_parser = parse_timeout)]
    timeout: Option<Duration>,

    /// When a rank fails, keep the other ranks running (they get errors on their
    /// connections with it) instead of stopping the job; exit non-zero naming the first
    /// failed rank once the others have ended
    #[arg(long)]
    keep_going: bool,

    /// A rank stopped by a signal (SIGSTOP, SIGTSTP) for longer than SECS seconds counts
    /// as failed
    #[arg(long, value_name = "SECS", value_parser = parse_timeout, default_value = "1")]
    stop_timeout: Duration,

    /// Forward the ranks' output lines as they are, without the `[RANK] ` prefix (lines
    /// still arrive whole, never mixed)
    #[arg(long)]
    no_prefix: bool,

    /// The program each rank runs, and its arguments
    #[arg(
        value_name = "PROGRAM",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    command: Vec<OsString>,
}

/// Extra text for `quiver run --help`.
const AFTER_HELP: &str = "\
Every rank gets QUIVER_RANK, QUIVER_SIZE, QUIVER_JOB_ID, QUIVER_JOB_KEY and
QUIVER_LAUNCHER in its environment. Each line a rank prints is forwarded as
`[RANK] line` (as it is with --no-prefix), stdout to stdout and stderr to stderr.
Rank 0 inherits stdin.

When a rank exits non-zero, is killed, or stays stopped (SIGSTOP) for longer than
--stop-timeout, the launcher names it and the cause; the other ranks get SIGTERM, then
SIGKILL after 500 ms, and the launcher exits with that rank's status (128+S for signal
S). With --keep-going the other ranks run on and the launcher exits with that status
once they have ended.
Ctrl-C or SIGTERM stops the whole job (exit 130 / 143); --timeout exits 124;
bad input or a program that cannot be started exits 2.

Example:
  quiver run -n 4 --bind core -- ./my-rank --size 1MiB";

/// Runs `quiver run` and returns the launcher's exit status.
pub(crate) fn main(args: RunArgs) -> i32 {
    let Some((program, program_args)) = args.command.split_first() else {
        report("missing program: usage is `quiver run -n N -- PROGRAM [ARGS...]`");
        return EXIT_USAGE;
    };
    let mut identity = match JobIdentity::generate() {
        Ok(identity) => identity,
        Err(error) => {
            report(&format!("cannot create the job key: {error}"));
            return EXIT_LAUNCHER_FAILURE;
        }
    };
    if let Err(error) = identity.assign_local_addrs(args.ranks) {
        report(&format!("cannot find free ports for the ranks: {error}"));
        return EXIT_LAUNCHER_FAILURE;
    }
    let signals = match SignalPipe::install() {
        Ok(signals) => signals,
        Err(error) => {
            report(&format!("cannot set up signal handling: {error}"));
            return EXIT_LAUNCHER_FAILURE;
        }
    };
    if let Err(error) = launch::become_child_subreaper() {
        report(&format!("cannot become a child subreaper: {error}"));
        return EXIT_LAUNCHER_FAILURE;
    }
    let deadline = args.timeout.map(|timeout| Instant::now() + timeout);
    let mut job = Job::new();
    for rank in 0..args.ranks {
        if let Err(failure) = job.start_rank(program, program_args, &identity, &args, rank) {
            job.finish();
            report(&failure.message);
            return failure.exit_status;
        }
    }
    let policy = Policy {
        deadline,
        keep_going: args.keep_going,
        stop_timeout: args.stop_timeout,
    };
    let outcome = supervise(&mut job.ranks, &signals, &policy);
    job.finish();
    drop(signals);
    report_outcome(&outcome, args.timeout, args.keep_going)
}

/// Why the job ended.
#[derive(Debug)]
enum Outcome {
    /// Every rank exited with status 0.
    Success,
    /// Rank `rank` was the first seen to exit non-zero or be killed.
    RankFailed { rank: usize, status: ExitStatus },
    /// Rank `rank` was the first to stay stopped by `signal` for the stop timeout (or, with
    /// `--keep-going`, was still stopped when every other rank had ended).
    RankStopped {
        rank: usize,
        signal: i32,
        stopped: Duration,
    },
    /// The launcher received this termination signal.
    Interrupted { signal: i32 },
    /// The job ran past `--timeout`.
    TimedOut,
    /// The launcher could not wait for rank `rank`.
    WaitFailed { rank: usize, error: io::Error },
}

/// A failure to start the job, with the launcher exit status it maps to.
struct StartFailure {
    message: String,
    exit_status: i32,
}

/// The running ranks and the threads forwarding their output.
struct Job {
    ranks: Vec<Child>,
    forwarders_started: usize,
    forwarder_done_tx: mpsc::Sender<()>,
    forwarder_done_rx: mpsc::Receiver<()>,
}

impl Job {
    fn new() -> Self {
        let (forwarder_done_tx, forwarder_done_rx) = mpsc::channel();
        Self {
            ranks: Vec::new(),
            forwarders_started: 0,
            forwarder_done_tx,
            forwarder_done_rx,
        }
    }

    /// Starts rank `rank` and the two threads forwarding its output.
    fn start_rank(
        &mut self,
        program: &OsString,
        program_args: &[OsString],
        identity: &JobIdentity,
        args: &RunArgs,
        rank: u32,
    ) -> Result<(), StartFailure> {
        let cpu = args.bind.cpu_for_rank(rank).map_err(|error| StartFailure {
            message: format!("cannot read the launcher's CPU set: {error}"),
            exit_status: EXIT_LAUNCHER_FAILURE,
        })?;
        let mut child = launch::spawn_rank(
            program,
            program_args,
            identity,
            rank,
            args.ranks,
            cpu,
            Stdio::piped(),
            Stdio::piped(),
        )
        .map_err(|error| StartFailure {
            message: format!(
                "cannot start '{}': {}",
                program.to_string_lossy(),
                describe_io_error(&error)
            ),
            exit_status: EXIT_USAGE,
        })?;
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        self.ranks.push(child);
        let prefix = if args.no_prefix {
            String::new()
        } else {
            format!("[{rank}] ")
        };
        if let Some(stdout) = stdout {
            self.start_forwarder(stdout, rank, prefix.clone(), OutputStream::Stdout)?;
        }
        if let Some(stderr) = stderr {
            self.start_forwarder(stderr, rank, prefix, OutputStream::Stderr)?;
        }
        Ok(())
    }

    fn start_forwarder(
        &mut self,
        source: impl Read + Send + 'static,
        rank: u32,
        prefix: String,
        stream: OutputStream,
    ) -> Result<(), StartFailure> {
        let done = self.forwarder_done_tx.clone();
        thread::Builder::new()
            .name(format!("rank-{rank}-{stream:?}"))
            .stack_size(FORWARDER_STACK_BYTES)
            .spawn(move || {
                forward_lines(source, &prefix, stream);
                // The receiver lives until the job is finished; if it is gone nobody waits.
                let _ = done.send(());
            })
            .map_err(|error| StartFailure {
                message: format!("cannot start an output thread: {error}"),
                exit_status: EXIT_LAUNCHER_FAILURE,
            })?;
        self.forwarders_started += 1;
        Ok(())
    }

    /// Stops every process of the job that is still running, then waits (boundedly) for
    /// the forwarders to pass on the last output.
    fn finish(&mut self) {
        launch::tear_down(&mut self.ranks, TEAR_DOWN_GRACE);
        let deadline = Instant::now() + FORWARDER_PATIENCE;
        for _ in 0..self.forwarders_started {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if self.forwarder_done_rx.recv_timeout(remaining).is_err() {
                break;
            }
        }
        self.forwarders_started = 0;
    }
}

/// How the supervisor treats failures.
struct Policy {
    deadline: Option<Instant>,
    keep_going: bool,
    stop_timeout: Duration,
}

/// What the supervisor knows of one rank.
#[derive(Default)]
struct RankWatch {
    /// Exited (successfully or not).
    ended: bool,
    /// Stopped by a signal since then (cleared when it runs again).
    stopped: Option<(Instant, i32)>,
    /// Its failure has been reported (with `--keep-going`).
    reported: bool,
}

/// How often the job is looked at while a rank is stopped (to time `--stop-timeout`).
const STOPPED_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Waits until the job succeeds, a rank fails (or, with `--keep-going`, every rank has
/// ended), a termination signal arrives or the deadline passes.
fn supervise(ranks: &mut [Child], signals: &SignalPipe, policy: &Policy) -> Outcome {
    let mut watch: Vec<RankWatch> = ranks.iter().map(|_| RankWatch::default()).collect();
    let mut first_failure: Option<Outcome> = None;
    loop {
        // Signals first: when Ctrl-C kills ranks too, the cause is the interruption.
        if let Some(signal) = signals.take_termination_signal() {
            return Outcome::Interrupted { signal };
        }
        let now = Instant::now();
        let mut running = 0;
        let mut any_stopped = false;
        for (rank, child) in ranks.iter_mut().enumerate() {
            let state = &mut watch[rank];
            if state.ended {
                continue;
            }
            let failure = match child.try_wait() {
                Ok(Some(status)) => {
                    state.ended = true;
                    state.stopped = None;
                    (!status.success()).then_some(Outcome::RankFailed { rank, status })
                }
                Ok(None) => match launch::stop_signal(child) {
                    Some(signal) => {
                        any_stopped = true;
                        let (since, _) = *state.stopped.get_or_insert((now, signal));
                        let stopped = now.saturating_duration_since(since);
                        (stopped >= policy.stop_timeout).then_some(Outcome::RankStopped {
                            rank,
                            signal,
                            stopped,
                        })
                    }
                    None => {
                        state.stopped = None;
                        running += 1;
                        None
                    }
                },
                Err(error) => return Outcome::WaitFailed { rank, error },
            };
            let Some(failure) = failure else {
                continue;
            };
            if !policy.keep_going {
                return failure;
            }
            if !state.reported {
                state.reported = true;
                report(&format!(
                    "{}; the other ranks keep running (--keep-going)",
                    describe_failure(&failure)
                ));
                first_failure.get_or_insert(failure);
            }
        }
        // Done when every rank has ended or failed; a rank stopped for less than the stop
        // timeout may still resume.
        if running == 0 && watch.iter().all(|w| w.ended || w.reported) {
            return first_failure.unwrap_or(Outcome::Success);
        }
        let mut wait = if any_stopped {
            STOPPED_POLL_INTERVAL
        } else {
            MAX_POLL_INTERVAL
        };
        if let Some(deadline) = policy.deadline {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Outcome::TimedOut;
            }
            wait = wait.min(remaining);
        }
        signals.wait(wait);
    }
}

/// One line naming a failed rank and the cause.
fn describe_failure(outcome: &Outcome) -> String {
    match outcome {
        Outcome::RankFailed { rank, status } => {
            if let Some(code) = status.code() {
                format!("rank {rank} exited with status {code}")
            } else if let Some(signal) = status.signal() {
                format!(
                    "rank {rank} killed by signal {signal} ({})",
                    launch::signal_name(signal)
                )
            } else {
                format!("rank {rank} ended abnormally: {status}")
            }
        }
        Outcome::RankStopped {
            rank,
            signal,
            stopped,
        } => format!(
            "rank {rank} stopped by signal {signal} ({}) for {:.1} s: counted as failed",
            launch::signal_name(*signal),
            stopped.as_secs_f64()
        ),
        _ => String::new(),
    }
}

/// Prints why the job ended (nothing on success) and returns the launcher's exit status.
fn report_outcome(outcome: &Outcome, timeout: Option<Duration>, keep_going: bool) -> i32 {
    let ending = if keep_going {
        "the other ranks have ended"
    } else {
        "stopped the job"
    };
    // (With --keep-going, the failure was already reported as it happened; this names it
    // again as the reason for the exit status.)
    match outcome {
        Outcome::Success => 0,
        Outcome::RankFailed { status, .. } => {
            report(&format!("{}; {ending}", describe_failure(outcome)));
            if let Some(code) = status.code() {
                code
            } else if let Some(signal) = status.signal() {
                128 + signal
            } else {
                EXIT_LAUNCHER_FAILURE
            }
        }
        Outcome::RankStopped { signal, .. } => {
            report(&format!("{}; {ending}", describe_failure(outcome)));
            128 + signal
        }
        Outcome::Interrupted { signal } => {
            report(&format!(
                "received {}, stopped all ranks",
                launch::signal_name(*signal)
            ));
            128 + signal
        }
        Outcome::TimedOut => {
            let seconds = timeout.map_or(0.0, |timeout| timeout.as_secs_f64());
            report(&format!(
                "job ran past --timeout {seconds} s, stopped all ranks"
            ));
            EXIT_TIMEOUT
        }
        Outcome::WaitFailed { rank, error } => {
            report(&format!("cannot wait for rank {rank}: {error}"));
            EXIT_LAUNCHER_FAILURE
        }
    }
}

/// Prints one `quiver run: ...` line on stderr without splitting any forwarded line.
fn report(message: &str) {
    let line = format!("quiver run: {message}\n");
    // Failing to print a diagnostic leaves nothing better to do.
    let _ = write_line(OutputStream::Stderr, line.as_bytes());
}

/// `error` as the OS describes it, without Rust's ` (os error N)` suffix.
fn describe_io_error(error: &io::Error) -> String {
    let text = error.to_string();
    match text.rsplit_once(" (os error ") {
        Some((description, _)) if error.raw_os_error().is_some() => description.to_owned(),
        _ => text,
    }
}

fn parse_rank_count(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(0) => Err("a job needs at least 1 rank".to_owned()),
        Ok(count) => Ok(count),
        Err(error) => Err(format!("expected a number of ranks: {error}")),
    }
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|error| format!("expected seconds: {error}"))?;
    if seconds.is_nan() || seconds <= 0.0 {
        return Err("the timeout must be more than 0 seconds".to_owned());
    }
    Duration::try_from_secs_f64(seconds).map_err(|error| format!("bad timeout: {error}"))
}

/// Which of the launcher's output streams a rank stream goes to.
#[derive(Clone, Copy, Debug)]
enum OutputStream {
    Stdout,
    Stderr,
}

/// Serialises all writes of whole lines, so that no two lines mix even when the
/// launcher's stdout and stderr are the same file.
static OUTPUT_LOCK: Mutex<()> = Mutex::new(());

/// Copies `source` to `stream` line by line, each line prefixed with `prefix` (`[rank] `,
/// or nothing with `--no-prefix`); a last line without a newline gets one. Keeps draining
/// `source` after the launcher's own output fails (closed pipe), so the rank never blocks
/// on a full pipe.
fn forward_lines(source: impl Read, prefix: &str, stream: OutputStream) {
    let mut reader = BufReader::with_capacity(FORWARD_BUFFER_BYTES, source);
    let mut line = prefix.as_bytes().to_vec();
    let mut sink_is_open = true;
    loop {
        line.truncate(prefix.len());
        match read_line_bounded(&mut reader, &mut line, prefix.len() + MAX_LINE_BYTES) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line.last() != Some(&b'\n') {
            line.push(b'\n');
        }
        if sink_is_open {
            sink_is_open = write_line(stream, &line).is_ok();
        }
    }
}

/// Appends bytes from `reader` to `line` up to and including the next newline, or until
/// `line` holds `limit_bytes` bytes, or until end of input. Returns how many bytes were
/// appended (0 at end of input).
fn read_line_bounded(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
    limit_bytes: usize,
) -> io::Result<usize> {
    let mut appended = 0;
    loop {
        let available = match reader.fill_buf() {
            Ok(available) => available,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        if available.is_empty() {
            return Ok(appended);
        }
        let room = limit_bytes.saturating_sub(line.len());
        let window = &available[..available.len().min(room)];
        let (taken, line_is_complete) = match window.iter().position(|&byte| byte == b'\n') {
            Some(newline) => (newline + 1, true),
            None => (window.len(), window.len() == room),
        };
        line.extend_from_slice(&window[..taken]);
        reader.consume(taken);
        appended += taken;
        if line_is_complete {
            return Ok(appended);
        }
    }
}

/// Writes one whole line to the launcher's `stream` in one go.
fn write_line(stream: OutputStream, line: &[u8]) -> io::Result<()> {
    let _serialised = OUTPUT_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    match stream {
        OutputStream::Stdout => {
            let mut stdout = io::stdout().lock();
            stdout.write_all(line)?;
            stdout.flush()
        }
        OutputStream::Stderr => io::stderr().lock().write_all(line),
    }
}

/// Write end of the installed signal pipe, or -1: the only state the handler reads.
static SIGNAL_PIPE_WRITE_FD: AtomicI32 = AtomicI32::new(-1);

/// First termination signal received since installation, or 0.
static TERMINATION_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// Signal handler: records a termination signal and wakes the main thread through the
/// pipe. Async-signal-safe: lock-free atomics and `write` only, errno preserved.
extern "C" fn on_signal(signal: libc::c_int) {
    // SAFETY: __errno_location returns the calling thread's errno slot, valid for the
    // thread's whole life.
    let errno = unsafe { libc::__errno_location() };
    // SAFETY: `errno` points to this thread's errno (see above).
    let saved_errno = unsafe { *errno };
    if TERMINATION_SIGNALS.contains(&signal) {
        // Keep the first one: that is what the launcher reports and exits with.
        let _ = TERMINATION_SIGNAL.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
    }
    let fd = SIGNAL_PIPE_WRITE_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        let byte = 1_u8;
        // SAFETY: write is async-signal-safe; `byte` is valid for one byte. The pipe is
        // non-blocking: when it is full a wake-up is already pending, so dropping is fine.
        unsafe { libc::write(fd, (&byte as *const u8).cast(), 1) };
    }
    // SAFETY: as above.
    unsafe { *errno = saved_errno };
}

/// The installed signal handlers and the pipe they write to. At most one exists at a time;
/// dropping it restores the previous handlers.
struct SignalPipe {
    read_end: OwnedFd,
    write_end: OwnedFd,
    previous_actions: Vec<(i32, libc::sigaction)>,
}

impl SignalPipe {
    /// Creates the pipe and installs the handler for SIGCHLD and the termination signals.
    fn install() -> io::Result<Self> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
        let (read_end, write_end) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        if SIGNAL_PIPE_WRITE_FD
            .compare_exchange(
                -1,
                write_end.as_raw_fd(),
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_err()
        {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "signal handling is already installed",
            ));
        }
        TERMINATION_SIGNAL.store(0, Ordering::SeqCst);
        let mut pipe = Self {
            read_end,
            write_end,
            previous_actions: Vec::new(),
        };
        for signal in [libc::SIGCHLD].into_iter().chain(TERMINATION_SIGNALS) {
            let previous = install_handler(signal)?;
            pipe.previous_actions.push((signal, previous));
        }
        Ok(pipe)
    }

    /// The first termination signal received so far, if any; also empties the pipe.
    fn take_termination_signal(&self) -> Option<i32> {
        let mut buffer = [0_u8; 64];
        loop {
            // SAFETY: `buffer` is valid for writes of its full length.
            let read = unsafe {
                libc::read(
                    self.read_end.as_raw_fd(),
                    buffer.as_mut_ptr().cast(),
                    buffer.len(),
                )
            };
            // Stops at EAGAIN (empty), at end of file (impossible: we hold the write end),
            // and on errors, after which poll reports readiness again anyway.
            if read <= 0 {
                break;
            }
        }
        match TERMINATION_SIGNAL.load(Ordering::SeqCst) {
            0 => None,
            signal => Some(signal),
        }
    }

    /// Sleeps until a signal arrives or `timeout` passes (rounded up to a millisecond).
    fn wait(&self, timeout: Duration) {
        let mut poll_fd = libc::pollfd {
            fd: self.read_end.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let rounded_up = timeout.saturating_add(Duration::from_nanos(999_999));
        let timeout_ms = libc::c_int::try_from(rounded_up.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: `poll_fd` is one valid pollfd. EINTR only means a signal came, which is
        // what we wait for; other errors are handled by the caller re-checking the job.
        unsafe { libc::poll(&mut poll_fd, 1, timeout_ms) };
    }
}

impl Drop for SignalPipe {
    fn drop(&mut self) {
        for (signal, previous) in &self.previous_actions {
            // SAFETY: `previous` is the action sigaction returned for this signal.
            unsafe { libc::sigaction(*signal, previous, std::ptr::null_mut()) };
        }
        // A handler already running in another thread may still write to the pipe: the
        // descriptors close only after this, and a stray byte in a closing pipe is harmless.
        let _ = SIGNAL_PIPE_WRITE_FD.compare_exchange(
            self.write_end.as_raw_fd(),
            -1,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }
}

/// Installs [`on_signal`] for `signal` and returns the previous action.
fn install_handler(signal: i32) -> io::Result<libc::sigaction> {
    // SAFETY: sigaction is plain data; all-zero is a valid value that we then fill in.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    let handler: extern "C" fn(libc::c_int) = on_signal;
    action.sa_sigaction = handler as libc::sighandler_t;
    // SA_RESTART keeps the forwarders' reads from failing with EINTR.
    // SIGCHLD also for stopped ranks (no SA_NOCLDSTOP): a stop wakes the supervisor.
    action.sa_flags = libc::SA_RESTART;
    // SAFETY: `action.sa_mask` is a valid sigset_t to initialise.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    // SAFETY: all-zero is a valid sigaction for the kernel to overwrite.
    let mut previous: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid; the handler only does async-signal-safe work.
    if unsafe { libc::sigaction(signal, &action, &mut previous) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(previous)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(input: &[u8], limit_bytes: usize) -> Vec<Vec<u8>> {
        let mut reader = BufReader::with_capacity(4, input);
        let mut lines = Vec::new();
        loop {
            let mut line = Vec::new();
            if read_line_bounded(&mut reader, &mut line, limit_bytes).expect("in memory") == 0 {
                return lines;
            }
            lines.push(line);
        }
    }

    #[test]
    fn lines_split_at_newlines_and_at_the_limit() {
        let lines = lines_of(b"ab\ncdefgh\n\nij", 4);
        let expected: Vec<&[u8]> = vec![b"ab\n", b"cdef", b"gh\n", b"\n", b"ij"];
        assert_eq!(lines, expected);
    }

    #[test]
    fn io_errors_lose_the_os_error_suffix() {
        let error = io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(describe_io_error(&error), "No such file or directory");
        let custom = io::Error::other("plain (os error 5)");
        assert_eq!(describe_io_error(&custom), "plain (os error 5)");
    }

    #[test]
    fn arguments_are_validated() {
        assert!(parse_rank_count("0").is_err());
        assert!(parse_rank_count("-1").is_err());
        assert_eq!(parse_rank_count("3"), Ok(3));
        assert!(parse_timeout("0").is_err());
        assert!(parse_timeout("nan").is_err());
        assert!(parse_timeout("-2").is_err());
        assert_eq!(parse_timeout("1.5"), Ok(Duration::from_millis(1500)));
    }
}
