//! Starting and stopping the ranks of a local job: shared by `quiver run` and `quiver bench`.
//!
//! Owns the launcher side of the environment contract (`QUIVER_RANK`, `QUIVER_SIZE`,
//! `QUIVER_JOB_ID`, `QUIVER_JOB_KEY`, `QUIVER_LAUNCHER`, `QUIVER_LOCAL_SIZE`,
//! `QUIVER_LOCAL_CPUS`, read by `quiver::Context::from_env`),
//! CPU binding, spawning one rank, and tearing a job down. It does no output forwarding and
//! no signal handling of its own: the callers decide how to wait and what to print.
//!
//! Process model: ranks stay in the launcher's process group (a terminal Ctrl-C reaches
//! them too), die with SIGKILL if the launcher thread that spawned them dies
//! (`PR_SET_PDEATHSIG`), and with [`become_child_subreaper`] their orphaned descendants are
//! re-parented to the launcher, so [`tear_down`] can find and kill every process of the job.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs;
use std::io;
use std::mem;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Value of `QUIVER_LAUNCHER` in every rank's environment (informational only).
pub const LAUNCHER_NAME: &str = "quiver-run";

/// How long [`tear_down`] keeps trying to SIGKILL a job that refuses to disappear (for
/// example a process stuck in uninterruptible sleep) before giving up on it.
const KILL_PATIENCE: Duration = Duration::from_secs(2);

/// How often [`tear_down`] re-checks whether the job's processes are gone.
const TEAR_DOWN_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// The identity every rank of one job shares: a random job id and a random secret key.
///
/// The key authenticates the ranks of this job to each other; it is only ever passed to the
/// ranks through their environment. `Debug` does not print it.
pub struct JobIdentity {
    /// Random id naming the job (`QUIVER_JOB_ID`, 16 lowercase hex digits).
    pub id: u64,
    /// The job's secret key (`QUIVER_JOB_KEY`, 64 lowercase hex digits).
    pub key: [u8; 32],
    /// Network address of every rank (`QUIVER_ADDRS`), empty when the job needs none.
    pub addrs: Vec<std::net::SocketAddr>,
    /// `QUIVER_TRANSPORTS` for the ranks, when the launcher decides it (the bench does).
    pub transports: Option<String>,
    /// How many CPUs the launcher may use (`QUIVER_LOCAL_CPUS`): every rank runs on this
    /// node within them, so a rank compares it with the job's size to tell whether it owns
    /// a core (its waiting policy). `None` when the launcher's CPU set cannot be read.
    pub local_cpus: Option<usize>,
}

impl JobIdentity {
    /// Draws a fresh job id and key from the operating system's random source.
    ///
    /// # Errors
    /// Fails if the OS random source is unavailable.
    pub fn generate() -> io::Result<Self> {
        let mut bytes = [0_u8; 8 + 32];
        getrandom::getrandom(&mut bytes).map_err(|error| {
            io::Error::other(format!("cannot read the OS random source: {error}"))
        })?;
        let (id_bytes, key_bytes) = bytes.split_at(8);
        let mut id = [0_u8; 8];
        id.copy_from_slice(id_bytes);
        let mut key = [0_u8; 32];
        key.copy_from_slice(key_bytes);
        Ok(Self {
            id: u64::from_le_bytes(id),
            key,
            addrs: Vec::new(),
            transports: None,
            local_cpus: allowed_cpus()
                .ok()
                .map(|cpus| cpus.len())
                .filter(|&n| n > 0),
        })
    }

    /// Gives every rank of a `size`-rank job a loopback address (a port free for both tcp
    /// and udp) when the environment asks for a network transport (`QUIVER_TRANSPORTS`)
    /// and does not name the addresses itself (`QUIVER_ADDRS`).
    ///
    /// # Errors
    /// No free port could be found.
    pub fn assign_local_addrs(&mut self, size: u32) -> io::Result<()> {
        if std::env::var_os("QUIVER_ADDRS").is_some() {
            return Ok(());
        }
        let wants_network = std::env::var("QUIVER_TRANSPORTS").is_ok_and(|list| {
            list.split(',')
                .any(|t| matches!(t.trim(), "udp" | "tcp" | "mem"))
        });
        if wants_network {
            self.addrs = local_addrs(size)?;
        }
        Ok(())
    }

    /// The environment of rank `rank` of a job of `size` ranks: exactly the variables of
    /// the launcher/rank contract, in a fixed order.
    pub fn env_vars(&self, rank: u32, size: u32) -> Vec<(String, String)> {
        let mut vars = vec![
            ("QUIVER_RANK".to_owned(), rank.to_string()),
            ("QUIVER_SIZE".to_owned(), size.to_string()),
            ("QUIVER_JOB_ID".to_owned(), format!("{:016x}", self.id)),
            ("QUIVER_JOB_KEY".to_owned(), lower_hex(&self.key)),
            ("QUIVER_LAUNCHER".to_owned(), LAUNCHER_NAME.to_owned()),
            // Every rank of a `quiver run` job runs on this node.
            ("QUIVER_LOCAL_SIZE".to_owned(), size.to_string()),
        ];
        if let Some(cpus) = self.local_cpus {
            vars.push(("QUIVER_LOCAL_CPUS".to_owned(), cpus.to_string()));
        }
        if !self.addrs.is_empty() {
            let list: Vec<String> = self.addrs.iter().map(|a| a.to_string()).collect();
            vars.push(("QUIVER_ADDRS".to_owned(), list.join(",")));
        }
        if let Some(list) = &self.transports {
            vars.push(("QUIVER_TRANSPORTS".to_owned(), list.clone()));
        }
        vars
    }
}

/// `size` loopback addresses whose ports are free for both tcp and udp right now (a rank
/// binds its own soon after; another process taking the port in between makes that rank
/// fail clearly with "address in use").
///
/// # Errors
/// Binding a probe socket failed.
pub fn local_addrs(size: u32) -> io::Result<Vec<std::net::SocketAddr>> {
    let mut held = Vec::new();
    let mut addrs = Vec::new();
    while addrs.len() < size as usize {
        let tcp = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))?;
        let addr = tcp.local_addr()?;
        if let Ok(udp) = std::net::UdpSocket::bind(addr) {
            // Hold both until every rank has its port, so no two ranks get the same one.
            held.push((tcp, udp));
            addrs.push(addr);
        }
    }
    Ok(addrs)
}

impl fmt::Debug for JobIdentity {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("JobIdentity")
            .field("id", &format_args!("{:016x}", self.id))
            .field("key", &"<secret>")
            .finish()
    }
}

/// Where each rank may run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Bind {
    /// No pinning: every rank inherits the launcher's CPU set.
    #[default]
    None,
    /// Rank i is pinned to one CPU: the i-th CPU of the launcher's allowed set, wrapping
    /// around when there are more ranks than CPUs.
    Core,
}

impl Bind {
    /// The CPU rank `rank` should be pinned to, or `None` when this policy does not pin.
    ///
    /// # Errors
    /// Fails if the launcher's own CPU set cannot be read.
    pub fn cpu_for_rank(self, rank: u32) -> io::Result<Option<usize>> {
        match self {
            Bind::None => Ok(None),
            Bind::Core => cpu_for_rank(rank).map(Some),
        }
    }
}

/// The CPU for rank `rank` under [`Bind::Core`]: the `rank`-th CPU (in increasing order) of
/// the calling process's allowed CPU set, modulo the number of allowed CPUs.
///
/// # Errors
/// Fails if `sched_getaffinity` fails.
pub fn cpu_for_rank(rank: u32) -> io::Result<usize> {
    let allowed = allowed_cpus()?;
    pick_cpu(&allowed, rank)
        .ok_or_else(|| io::Error::other("the launcher's allowed CPU set is empty"))
}

/// The CPUs the calling thread may run on, in increasing order (`sched_getaffinity`).
///
/// # Errors
/// Fails if `sched_getaffinity` fails.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is a plain bitmask; all-zero bytes are a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t and we pass its exact size.
    let result = unsafe { libc::sched_getaffinity(0, mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if result != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((0..cpu_set_capacity())
        // SAFETY: `cpu` is below the set's capacity in bits, so the access is in bounds.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// Starts rank `rank` of a job of `size` ranks: `program` with `args`, the job's
/// environment (see [`JobIdentity::env_vars`]) added to the launcher's own, optionally
/// pinned to `cpu`, with the given stdout and stderr. Rank 0 inherits the launcher's stdin;
/// the other ranks get an empty stdin.
///
/// The child stays in the launcher's process group and gets `PR_SET_PDEATHSIG = SIGKILL`.
/// The kernel sends that signal when the *thread* that spawned the child exits, so call
/// this from a thread that lives as long as the job (normally the main thread).
///
/// # Errors
/// Fails if `cpu` is beyond what a `cpu_set_t` can hold, or if the program cannot be
/// started (not found, not executable, pinning refused, ...). Nothing is left running then.
#[allow(clippy::too_many_arguments)] // the brief fixes this signature; each is one concern
pub fn spawn_rank(
    program: &OsStr,
    args: &[OsString],
    identity: &JobIdentity,
    rank: u32,
    size: u32,
    cpu: Option<usize>,
    stdout: Stdio,
    stderr: Stdio,
) -> io::Result<Child> {
    let cpu_set = cpu.map(single_cpu_set).transpose()?;
    let launcher_pid = std::process::id();
    let stdin = if rank == 0 {
        Stdio::inherit()
    } else {
        Stdio::null()
    };
    let mut command = Command::new(program);
    command
        .args(args)
        .envs(identity.env_vars(rank, size))
        .stdin(stdin)
        .stdout(stdout)
        .stderr(stderr);
    let before_exec = move || -> io::Result<()> {
        // SAFETY: prctl(PR_SET_PDEATHSIG) takes plain integers and touches no memory.
        if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // The launcher may have died between fork and prctl; then no signal would come.
        // SAFETY: getppid has no preconditions.
        if unsafe { libc::getppid() } as u32 != launcher_pid {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        if let Some(set) = &cpu_set {
            // SAFETY: `set` is a valid cpu_set_t and we pass its exact size.
            let result =
                unsafe { libc::sched_setaffinity(0, mem::size_of::<libc::cpu_set_t>(), set) };
            if result != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec, where only async-signal-safe
    // operations are allowed. It makes only raw syscalls (prctl, getppid,
    // sched_setaffinity), reads data captured by value before the fork, and builds
    // io::Error values from errno, which does not allocate. It takes no locks.
    unsafe { command.pre_exec(before_exec) };
    command.spawn()
}

/// Makes the calling process a child subreaper (`PR_SET_CHILD_SUBREAPER`): processes
/// orphaned anywhere below it are re-parented to it instead of to init, so [`tear_down`]
/// still finds (and reaps) them after the rank that started them has died.
///
/// # Errors
/// Fails if `prctl` fails.
pub fn become_child_subreaper() -> io::Result<()> {
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER) takes plain integers and touches no memory.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Stops a job: SIGTERM to every rank that is still running and to every live descendant
/// of the launcher, up to `grace` for them to exit, then SIGKILL to whatever is left
/// (retried for up to two seconds), and finally reaps the ranks and adopted orphans.
///
/// Ranks that have already exited are left alone; their statuses stay available through
/// `Child::try_wait`. Returns once every rank has been reaped and no descendant is left, or
/// when the processes still alive refuse to die even to SIGKILL.
///
/// Assumes the calling process's only children are the ranks and orphans it adopted as a
/// subreaper: it kills every descendant of the calling process.
pub fn tear_down(ranks: &mut [Child], grace: Duration) {
    let own_pid = std::process::id();
    let grace_deadline = Instant::now() + grace;
    signal_job(ranks, own_pid, libc::SIGTERM);
    // A stopped rank only acts on SIGTERM once it runs again.
    signal_job(ranks, own_pid, libc::SIGCONT);
    while !job_is_gone(ranks, own_pid) && Instant::now() < grace_deadline {
        thread::sleep(TEAR_DOWN_POLL_INTERVAL);
    }
    let kill_deadline = Instant::now() + KILL_PATIENCE;
    while !job_is_gone(ranks, own_pid) && Instant::now() < kill_deadline {
        signal_job(ranks, own_pid, libc::SIGKILL);
        thread::sleep(TEAR_DOWN_POLL_INTERVAL);
    }
    if ranks_have_exited(ranks) {
        reap_adopted_orphans(ranks, own_pid);
    }
}

/// The signal that keeps `child` stopped (SIGSTOP, SIGTSTP, ...), if it is stopped now.
///
/// Uses `waitid(WSTOPPED | WNOHANG | WNOWAIT)`, which neither reaps the child nor consumes
/// the stop report, so `Child::try_wait` keeps working; a child that was continued is no
/// longer reported.
pub fn stop_signal(child: &Child) -> Option<i32> {
    let pid = libc::id_t::from(child.id());
    // SAFETY: siginfo_t is plain data; all-zero is a valid value for waitid to fill.
    let mut info: libc::siginfo_t = unsafe { mem::zeroed() };
    // SAFETY: `info` is a valid, writable siginfo_t; WNOHANG makes this never block.
    let result = unsafe {
        libc::waitid(
            libc::P_PID,
            pid,
            &mut info,
            libc::WSTOPPED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: waitid filled `info` for a child event (si_pid 0 means no event).
    let (event_pid, status) = unsafe { (info.si_pid(), info.si_status()) };
    (result == 0 && event_pid != 0 && info.si_code == libc::CLD_STOPPED).then_some(status)
}

/// The conventional name of signal `signal` (`"SIGKILL"`), or `"unknown signal"`.
pub fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSTKFLT => "SIGSTKFLT",
        libc::SIGCHLD => "SIGCHLD",
        libc::SIGCONT => "SIGCONT",
        libc::SIGSTOP => "SIGSTOP",
        libc::SIGTSTP => "SIGTSTP",
        libc::SIGTTIN => "SIGTTIN",
        libc::SIGTTOU => "SIGTTOU",
        libc::SIGURG => "SIGURG",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGVTALRM => "SIGVTALRM",
        libc::SIGPROF => "SIGPROF",
        libc::SIGWINCH => "SIGWINCH",
        libc::SIGIO => "SIGIO",
        libc::SIGPWR => "SIGPWR",
        libc::SIGSYS => "SIGSYS",
        _ => "unknown signal",
    }
}

/// Lowercase hex of `bytes`, two digits per byte.
fn lower_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    text
}

/// The `rank`-th of `allowed` CPUs, wrapping around; `None` if `allowed` is empty.
fn pick_cpu(allowed: &[usize], rank: u32) -> Option<usize> {
    if allowed.is_empty() {
        return None;
    }
    // u32 -> usize never truncates on the 64-bit Linux targets quiver supports.
    allowed.get(rank as usize % allowed.len()).copied()
}

/// How many CPUs a `cpu_set_t` can name.
fn cpu_set_capacity() -> usize {
    mem::size_of::<libc::cpu_set_t>() * 8
}

/// A `cpu_set_t` holding only `cpu`.
fn single_cpu_set(cpu: usize) -> io::Result<libc::cpu_set_t> {
    if cpu >= cpu_set_capacity() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "CPU {cpu} is beyond the {} CPUs a cpu_set_t can name",
                cpu_set_capacity()
            ),
        ));
    }
    // SAFETY: cpu_set_t is a plain bitmask; all-zero bytes are a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { mem::zeroed() };
    // SAFETY: `cpu` was checked against the set's capacity above.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    Ok(set)
}

/// Sends `signal` to every rank still running and to every live descendant of `own_pid`.
fn signal_job(ranks: &mut [Child], own_pid: u32, signal: i32) {
    for rank in ranks.iter_mut() {
        // A rank not yet reaped cannot have had its pid reused, so signalling it is safe.
        if matches!(rank.try_wait(), Ok(None)) {
            signal_process(rank.id(), signal);
        }
    }
    let rank_pids: Vec<u32> = ranks.iter().map(Child::id).collect();
    for process in live_descendants(own_pid) {
        if !rank_pids.contains(&process) {
            signal_process(process, signal);
        }
    }
}

/// `kill(pid, signal)`, ignoring failures: the process may be gone already.
fn signal_process(pid: u32, signal: i32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill takes plain integers and touches no memory of ours.
    unsafe { libc::kill(pid, signal) };
}

/// True when every rank has exited and no live process is left below `own_pid`.
fn job_is_gone(ranks: &mut [Child], own_pid: u32) -> bool {
    ranks_have_exited(ranks) && live_descendants(own_pid).is_empty()
}

/// True when every rank has exited (reaping the ones that just did).
fn ranks_have_exited(ranks: &mut [Child]) -> bool {
    ranks
        .iter_mut()
        .all(|rank| !matches!(rank.try_wait(), Ok(None)))
}

/// Reaps the zombie children of `own_pid` that are not ranks: orphans adopted as a
/// subreaper. Only call once every rank has been reaped through its `Child`.
fn reap_adopted_orphans(ranks: &[Child], own_pid: u32) {
    let rank_pids: Vec<u32> = ranks.iter().map(Child::id).collect();
    let orphans = process_table()
        .into_iter()
        .filter(|entry| entry.parent_pid == own_pid && !rank_pids.contains(&entry.pid));
    for orphan in orphans {
        let Ok(pid) = libc::pid_t::try_from(orphan.pid) else {
            continue;
        };
        let mut status = 0;
        // SAFETY: `status` is a valid, writable int; WNOHANG makes this never block.
        unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    }
}

/// One line of the process table.
struct ProcessEntry {
    pid: u32,
    parent_pid: u32,
    is_zombie: bool,
}

/// The pids of all processes below `root` in the process tree that have not exited yet
/// (zombies excluded). Best effort: processes that appear or vanish during the scan may
/// be missed, so callers re-scan until the answer is stable.
fn live_descendants(root: u32) -> Vec<u32> {
    let table = process_table();
    let mut children_of: HashMap<u32, Vec<&ProcessEntry>> = HashMap::new();
    for entry in &table {
        children_of.entry(entry.parent_pid).or_default().push(entry);
    }
    let mut live = Vec::new();
    let mut pending = vec![root];
    while let Some(parent) = pending.pop() {
        for child in children_of.get(&parent).into_iter().flatten() {
            // A pid cycle is impossible in a consistent table; the root check guards
            // against an inconsistent one looping forever.
            if child.pid == root {
                continue;
            }
            if !child.is_zombie {
                live.push(child.pid);
            }
            pending.push(child.pid);
        }
    }
    live
}

/// Every process visible in /proc, with its parent and whether it is a zombie.
fn process_table() -> Vec<ProcessEntry> {
    let Ok(directory) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    directory
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = fs::read_to_string(entry.path().join("stat")).ok()?;
            parse_stat(pid, &stat)
        })
        .collect()
}

/// Parses `/proc/<pid>/stat`: `pid (comm) state ppid ...`, where comm may itself contain
/// spaces and parentheses, so fields are counted from the last `)`.
fn parse_stat(pid: u32, stat: &str) -> Option<ProcessEntry> {
    let after_command = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_command.split_whitespace();
    let state = fields.next()?;
    let parent_pid = fields.next()?.parse().ok()?;
    Some(ProcessEntry {
        pid,
        parent_pid,
        is_zombie: state == "Z" || state == "X",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_vars_follow_the_contract() {
        let identity = JobIdentity {
            id: 0x00ab_cdef_0123_4567,
            key: [0x5a; 32],
            addrs: Vec::new(),
            transports: None,
            local_cpus: Some(2),
        };
        let vars = identity.env_vars(3, 8);
        let mut expected = vec![
            ("QUIVER_RANK".to_owned(), "3".to_owned()),
            ("QUIVER_SIZE".to_owned(), "8".to_owned()),
            ("QUIVER_JOB_ID".to_owned(), "00abcdef01234567".to_owned()),
            ("QUIVER_JOB_KEY".to_owned(), "5a".repeat(32)),
            ("QUIVER_LAUNCHER".to_owned(), "quiver-run".to_owned()),
            ("QUIVER_LOCAL_SIZE".to_owned(), "8".to_owned()),
            ("QUIVER_LOCAL_CPUS".to_owned(), "2".to_owned()),
        ];
        assert_eq!(vars, expected);
        let unknown = JobIdentity {
            local_cpus: None,
            ..identity
        };
        expected.pop();
        assert_eq!(unknown.env_vars(3, 8), expected);
    }

    #[test]
    fn generated_identities_differ_and_debug_hides_the_key() {
        let first = JobIdentity::generate().expect("random source");
        let second = JobIdentity::generate().expect("random source");
        assert!(first.id != second.id || first.key != second.key);
        let debug = format!("{first:?}");
        assert!(!debug.contains(&lower_hex(&first.key)));
        assert!(debug.contains(&format!("{:016x}", first.id)));
    }

    #[test]
    fn cpus_wrap_around_the_allowed_set() {
        let allowed = [2, 5, 7];
        let picked: Vec<_> = (0..5).map(|rank| pick_cpu(&allowed, rank)).collect();
        assert_eq!(picked, [Some(2), Some(5), Some(7), Some(2), Some(5)]);
        assert_eq!(pick_cpu(&[], 0), None);
        let own = allowed_cpus().expect("sched_getaffinity");
        assert_eq!(cpu_for_rank(0).expect("cpu"), own[0]);
        assert_eq!(Bind::None.cpu_for_rank(0).expect("cpu"), None);
    }

    #[test]
    fn stat_lines_with_odd_command_names_parse() {
        let entry = parse_stat(42, "42 (a) b (c) S 17 42 42 0 -1").expect("parses");
        assert_eq!(
            (entry.pid, entry.parent_pid, entry.is_zombie),
            (42, 17, false)
        );
        let zombie = parse_stat(43, "43 (sleep) Z 1 43").expect("parses");
        assert!(zombie.is_zombie);
        assert!(parse_stat(44, "garbage").is_none());
    }

    #[test]
    fn out_of_range_cpu_is_rejected() {
        assert!(single_cpu_set(cpu_set_capacity()).is_err());
        assert!(single_cpu_set(0).is_ok());
    }
}
