//! Integration tests of `quiver run`, the local launcher: real processes, real signals.
//!
//! Every rank program is `sh -c '...'`. Tests that start sleepers record the pids in a
//! private temporary directory, and the fixture kills whatever is still alive when it is
//! dropped, so a failing test leaves no processes behind either.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// Upper bound for anything that should be quick; sleepers sleep 30 s, so a launcher that
/// waits for them instead of killing them fails this.
const QUICK: Duration = Duration::from_secs(10);

fn quiver() -> Command {
    Command::new(env!("CARGO_BIN_EXE_quiver"))
}

/// `quiver run ARGS... -- sh -c SCRIPT`, run to completion with output captured.
fn run_script(args: &[&str], script: &str) -> Output {
    quiver()
        .arg("run")
        .args(args)
        .args(["--", "sh", "-c", script])
        .output()
        .expect("start quiver")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Splits `[rank] rest` lines into (rank, rest); panics on any other line.
fn prefixed_lines(output: &[u8]) -> Vec<(u32, String)> {
    text(output)
        .lines()
        .map(|line| {
            let (prefix, rest) = line
                .split_once("] ")
                .unwrap_or_else(|| panic!("unprefixed line {line:?}"));
            let rank = prefix
                .strip_prefix('[')
                .and_then(|rank| rank.parse().ok())
                .unwrap_or_else(|| panic!("bad prefix in {line:?}"));
            (rank, rest.to_owned())
        })
        .collect()
}

fn is_lower_hex(text: &str, digits: usize) -> bool {
    text.len() == digits
        && text
            .bytes()
            .all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
}

/// A private temporary directory for pid files; on drop, kills every process whose pid
/// is recorded there (only relevant when a test failed) and removes the directory.
struct Scratch {
    path: PathBuf,
}

impl Scratch {
    fn new(name: &str) -> Self {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "quiver-run-test-{name}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&path).expect("create scratch dir");
        Self { path }
    }

    fn path(&self) -> &str {
        self.path.to_str().expect("temp dir is UTF-8")
    }

    /// Waits until `count` files named `*.pids` exist, and returns all pids in them.
    fn wait_for_pids(&self, count: usize) -> Vec<i32> {
        let deadline = Instant::now() + QUICK;
        loop {
            let pids = self.recorded_pids();
            if pids.len() >= count {
                return pids.into_values().flatten().collect();
            }
            assert!(Instant::now() < deadline, "ranks did not record their pids");
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Pid files (renamed into place atomically by the ranks) and the pids in them.
    fn recorded_pids(&self) -> BTreeMap<String, Vec<i32>> {
        let mut pids = BTreeMap::new();
        for entry in fs::read_dir(&self.path).expect("read scratch dir") {
            let path = entry.expect("dir entry").path();
            if path
                .extension()
                .is_some_and(|extension| extension == "pids")
            {
                let content = fs::read_to_string(&path).unwrap_or_default();
                let list = content
                    .split_whitespace()
                    .filter_map(|pid| pid.parse().ok())
                    .collect();
                pids.insert(path.display().to_string(), list);
            }
        }
        pids
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for pid in self.recorded_pids().into_values().flatten() {
            if process_is_alive(pid) {
                // SAFETY: kill takes plain integers; the pid was recorded by our own test.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// Shell snippet: writes "$$ $!" (the rank's shell and its background sleeper) to
/// DIR/RANK.pids atomically.
fn record_pids(dir: &str) -> String {
    format!(
        "echo \"$$ $!\" > {dir}/$QUIVER_RANK.tmp && mv {dir}/$QUIVER_RANK.tmp {dir}/$QUIVER_RANK.pids"
    )
}

/// True if `pid` names a process that has not exited (a zombie counts as exited).
fn process_is_alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .unwrap_or("?");
            state != "Z" && state != "X"
        }
    }
}

/// Asserts that none of `pids` is alive, allowing a moment for SIGKILLed processes to go.
fn assert_all_gone(pids: &[i32]) {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let alive: Vec<i32> = pids
            .iter()
            .copied()
            .filter(|&pid| process_is_alive(pid))
            .collect();
        if alive.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "processes left behind: {alive:?}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for `child` at most `limit`, killing it (and failing) if it takes longer.
fn wait_with_limit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait for quiver") {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("quiver run did not exit within {limit:?}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Parses a kernel CPU list such as `0-3,8,10-11`.
fn parse_cpu_list(list: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for part in list.trim().split(',') {
        match part.split_once('-') {
            Some((first, last)) => {
                let first: usize = first.parse().expect("cpu number");
                let last: usize = last.parse().expect("cpu number");
                cpus.extend(first..=last);
            }
            None => cpus.push(part.parse().expect("cpu number")),
        }
    }
    cpus
}

fn own_allowed_cpus() -> Vec<usize> {
    let status = fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let list = status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list present");
    parse_cpu_list(list)
}

#[test]
fn every_rank_gets_the_job_environment() {
    let script =
        "echo \"$QUIVER_RANK $QUIVER_SIZE $QUIVER_JOB_ID $QUIVER_JOB_KEY $QUIVER_LAUNCHER\"";
    let output = run_script(&["-n", "4"], script);
    assert!(output.status.success(), "stderr: {}", text(&output.stderr));
    let lines = prefixed_lines(&output.stdout);
    assert_eq!(lines.len(), 4, "{lines:?}");
    let mut ranks_seen = Vec::new();
    let mut job_ids = Vec::new();
    let mut job_keys = Vec::new();
    for (prefix_rank, rest) in &lines {
        let fields: Vec<&str> = rest.split(' ').collect();
        assert_eq!(fields.len(), 5, "{rest:?}");
        assert_eq!(
            fields[0],
            prefix_rank.to_string(),
            "prefix matches QUIVER_RANK"
        );
        assert_eq!(fields[1], "4");
        assert!(is_lower_hex(fields[2], 16), "job id {:?}", fields[2]);
        assert!(is_lower_hex(fields[3], 64), "job key {:?}", fields[3]);
        assert_eq!(fields[4], "quiver-run");
        ranks_seen.push(*prefix_rank);
        job_ids.push(fields[2].to_owned());
        job_keys.push(fields[3].to_owned());
    }
    ranks_seen.sort_unstable();
    assert_eq!(ranks_seen, [0, 1, 2, 3]);
    job_ids.dedup();
    job_keys.dedup();
    assert_eq!(job_ids.len(), 1, "one job id for all ranks");
    assert_eq!(job_keys.len(), 1, "one job key for all ranks");

    let again = run_script(&["-n", "1"], "echo $QUIVER_JOB_ID $QUIVER_JOB_KEY");
    let (_, identity) = &prefixed_lines(&again.stdout)[0];
    assert_ne!(
        identity,
        &format!("{} {}", job_ids[0], job_keys[0]),
        "each job gets a fresh identity"
    );
}

#[test]
fn output_is_prefixed_per_rank_and_per_stream() {
    let script = "echo out$QUIVER_RANK; echo err$QUIVER_RANK >&2; printf tail$QUIVER_RANK";
    let output = run_script(&["-n", "2"], script);
    assert!(output.status.success(), "stderr: {}", text(&output.stderr));
    let mut stdout = prefixed_lines(&output.stdout);
    stdout.sort();
    let expected_stdout: Vec<(u32, String)> = vec![
        (0, "out0".into()),
        (0, "tail0".into()),
        (1, "out1".into()),
        (1, "tail1".into()),
    ];
    assert_eq!(stdout, expected_stdout);
    let mut stderr = prefixed_lines(&output.stderr);
    stderr.sort();
    assert_eq!(stderr, vec![(0, "err0".into()), (1, "err1".into())]);
}

#[test]
fn no_prefix_forwards_whole_lines_as_they_are() {
    let script = "echo out$QUIVER_RANK; echo err$QUIVER_RANK >&2; printf tail$QUIVER_RANK";
    let output = run_script(&["-n", "2", "--no-prefix"], script);
    assert!(output.status.success(), "stderr: {}", text(&output.stderr));
    let mut stdout: Vec<String> = text(&output.stdout).lines().map(String::from).collect();
    stdout.sort();
    assert_eq!(stdout, ["out0", "out1", "tail0", "tail1"]);
    let mut stderr: Vec<String> = text(&output.stderr).lines().map(String::from).collect();
    stderr.sort();
    assert_eq!(stderr, ["err0", "err1"]);
}

#[test]
fn lines_of_concurrent_ranks_never_mix() {
    // Two ranks each print 3000 long lines as fast as they can.
    let script = "i=0; while [ $i -lt 3000 ]; do \
                  echo \"rank$QUIVER_RANK line$i xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"; \
                  i=$((i+1)); done";
    let output = run_script(&["-n", "2"], script);
    assert!(output.status.success(), "stderr: {}", text(&output.stderr));
    let lines = prefixed_lines(&output.stdout);
    assert_eq!(lines.len(), 6000);
    let mut next_line = [0_u32; 2];
    for (rank, rest) in lines {
        let expected = format!(
            "rank{rank} line{} {}",
            next_line[rank as usize],
            "x".repeat(67)
        );
        assert_eq!(rest, expected, "whole lines, in order per rank");
        next_line[rank as usize] += 1;
    }
}

#[test]
fn failing_rank_stops_the_job_and_sets_the_exit_status() {
    let scratch = Scratch::new("exit");
    let dir = scratch.path();
    // Ranks 0 and 2 sleep (in the background of their shell, so the launcher must kill
    // grandchildren too); rank 1 fails once both have recorded their pids.
    let script = format!(
        "if [ \"$QUIVER_RANK\" = 1 ]; then \
           while [ ! -e {dir}/0.pids ] || [ ! -e {dir}/2.pids ]; do sleep 0.02; done; \
           exit 3; \
         fi; \
         sleep 30 & {record}; wait",
        record = record_pids(dir)
    );
    let started = Instant::now();
    let output = run_script(&["-n", "3"], &script);
    let elapsed = started.elapsed();
    assert_eq!(
        output.status.code(),
        Some(3),
        "stderr: {}",
        text(&output.stderr)
    );
    assert!(
        elapsed < QUICK,
        "took {elapsed:?}: sleepers were not killed"
    );
    assert!(
        text(&output.stderr).contains("quiver run: rank 1 exited with status 3"),
        "stderr: {}",
        text(&output.stderr)
    );
    let pids = scratch.wait_for_pids(2);
    assert_eq!(pids.len(), 4, "two shells and two sleepers: {pids:?}");
    assert_all_gone(&pids);
}

#[test]
fn rank_killed_by_a_signal_gives_128_plus_the_signal() {
    let script = "if [ \"$QUIVER_RANK\" = 0 ]; then kill -9 $$; fi; exec sleep 30";
    let started = Instant::now();
    let output = run_script(&["-n", "2"], script);
    assert!(started.elapsed() < QUICK, "took {:?}", started.elapsed());
    assert_eq!(output.status.code(), Some(128 + 9));
    assert!(
        text(&output.stderr).contains("quiver run: rank 0 killed by signal 9 (SIGKILL)"),
        "stderr: {}",
        text(&output.stderr)
    );
}

#[test]
fn interrupting_the_launcher_tears_the_job_down() {
    for (signal, expected_status) in [(libc::SIGINT, 130), (libc::SIGTERM, 143)] {
        let scratch = Scratch::new("signal");
        let script = format!("sleep 30 & {}; wait", record_pids(scratch.path()));
        let mut launcher = quiver()
            .args(["run", "-n", "3", "--", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start quiver");
        let pids = scratch.wait_for_pids(3);
        assert_eq!(pids.len(), 6, "three shells and three sleepers: {pids:?}");
        let launcher_pid = i32::try_from(launcher.id()).expect("pid fits");
        // SAFETY: kill takes plain integers; the pid is our own unreaped child.
        assert_eq!(unsafe { libc::kill(launcher_pid, signal) }, 0);
        let status = wait_with_limit(&mut launcher, QUICK);
        assert_eq!(status.code(), Some(expected_status), "signal {signal}");
        assert_all_gone(&pids);
        let mut stderr = String::new();
        std::io::Read::read_to_string(launcher.stderr.as_mut().expect("piped stderr"), &mut stderr)
            .expect("read stderr");
        assert!(stderr.contains("stopped all ranks"), "stderr: {stderr}");
    }
}

#[test]
fn timeout_stops_the_job_with_124() {
    let started = Instant::now();
    let output = run_script(&["-n", "2", "--timeout", "0.5"], "exec sleep 30");
    let elapsed = started.elapsed();
    assert_eq!(
        output.status.code(),
        Some(124),
        "stderr: {}",
        text(&output.stderr)
    );
    assert!(
        elapsed >= Duration::from_millis(500),
        "stopped early: {elapsed:?}"
    );
    assert!(elapsed < QUICK, "took {elapsed:?}");
    assert!(
        text(&output.stderr).contains("--timeout"),
        "stderr: {}",
        text(&output.stderr)
    );
}

#[test]
fn bind_core_pins_each_rank_to_one_allowed_cpu() {
    let allowed = own_allowed_cpus();
    // One more rank than CPUs, so the assignment must wrap around.
    let ranks = allowed.len() + 1;
    let script = "grep Cpus_allowed_list /proc/self/status";
    let output = run_script(&["-n", &ranks.to_string(), "--bind", "core"], script);
    assert!(output.status.success(), "stderr: {}", text(&output.stderr));
    let lines = prefixed_lines(&output.stdout);
    assert_eq!(lines.len(), ranks);
    for (rank, rest) in lines {
        let list = rest
            .strip_prefix("Cpus_allowed_list:")
            .expect("status line");
        let expected = allowed[rank as usize % allowed.len()];
        assert_eq!(parse_cpu_list(list), [expected], "rank {rank}");
    }

    let unbound = run_script(&["-n", "2", "--bind", "none"], script);
    assert!(unbound.status.success());
    for (rank, rest) in prefixed_lines(&unbound.stdout) {
        let list = rest
            .strip_prefix("Cpus_allowed_list:")
            .expect("status line");
        assert_eq!(
            parse_cpu_list(list),
            allowed,
            "rank {rank} keeps the full set"
        );
    }
}

#[test]
fn bad_input_exits_2_with_a_message() {
    let cases: [(&[&str], &str); 5] = [
        (&["run", "-n", "0", "--", "true"], "at least 1 rank"),
        (&["run", "-n", "2"], "PROGRAM"),
        (&["run", "--", "true"], "--ranks"),
        (
            &["run", "-n", "1", "--bind", "socket", "--", "true"],
            "socket",
        ),
        (
            &["run", "-n", "2", "--", "quiver-test-no-such-program"],
            "quiver run: cannot start 'quiver-test-no-such-program': No such file or directory",
        ),
    ];
    for (args, message) in cases {
        let output = quiver().args(args).output().expect("start quiver");
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(
            text(&output.stderr).contains(message),
            "{args:?}: stderr {}",
            text(&output.stderr)
        );
    }
}

#[test]
fn help_and_version() {
    let help = quiver().arg("--help").output().expect("start quiver");
    assert!(help.status.success());
    let help = text(&help.stdout);
    for command in ["run", "bench", "info"] {
        let listed = help
            .lines()
            .any(|line| line.trim_start().starts_with(&format!("{command} ")));
        assert!(listed, "--help lists {command}: {help}");
    }
    let version = quiver().arg("--version").output().expect("start quiver");
    assert!(version.status.success());
    assert!(text(&version.stdout).contains(env!("CARGO_PKG_VERSION")));
    let run_help = quiver()
        .args(["run", "--help"])
        .output()
        .expect("start quiver");
    assert!(run_help.status.success());
    assert!(text(&run_help.stdout).contains("QUIVER_JOB_KEY"));
}

#[test]
fn successful_job_exits_0_and_leaves_no_background_processes() {
    let scratch = Scratch::new("leftover");
    // Each rank leaves a background sleeper behind and exits 0 at once.
    let script = format!("sleep 30 & {}", record_pids(scratch.path()));
    let started = Instant::now();
    let output = run_script(&["-n", "2"], &script);
    assert!(output.status.success(), "stderr: {}", text(&output.stderr));
    assert!(started.elapsed() < QUICK, "took {:?}", started.elapsed());
    let pids = scratch.wait_for_pids(2);
    assert_all_gone(&pids);
}

#[test]
fn ranks_ignoring_sigterm_are_killed_after_the_grace_period() {
    let scratch = Scratch::new("stubborn");
    let dir = scratch.path();
    // Rank 0 ignores SIGTERM (the disposition survives exec); rank 1 fails.
    let script = format!(
        "if [ \"$QUIVER_RANK\" = 1 ]; then \
           while [ ! -e {dir}/0.pids ]; do sleep 0.02; done; exit 5; \
         fi; \
         trap '' TERM; echo $$ > {dir}/0.tmp && mv {dir}/0.tmp {dir}/0.pids; exec sleep 30"
    );
    let started = Instant::now();
    let output = run_script(&["-n", "2"], &script);
    let elapsed = started.elapsed();
    assert_eq!(
        output.status.code(),
        Some(5),
        "stderr: {}",
        text(&output.stderr)
    );
    assert!(elapsed < QUICK, "took {elapsed:?}");
    assert!(
        elapsed >= Duration::from_millis(400),
        "SIGTERM alone cannot have stopped rank 0 (took {elapsed:?})"
    );
    let pids = scratch.wait_for_pids(1);
    assert_all_gone(&pids);
}

#[test]
fn ranks_die_with_a_killed_launcher() {
    let scratch = Scratch::new("orphan");
    let dir = scratch.path();
    let script = format!(
        "echo $$ > {dir}/$QUIVER_RANK.tmp && mv {dir}/$QUIVER_RANK.tmp {dir}/$QUIVER_RANK.pids; \
         exec sleep 30"
    );
    let mut launcher = quiver()
        .args(["run", "-n", "2", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start quiver");
    let pids = scratch.wait_for_pids(2);
    // SIGKILL leaves the launcher no chance to clean up: PR_SET_PDEATHSIG must do it.
    launcher.kill().expect("kill quiver");
    launcher.wait().expect("reap quiver");
    assert_all_gone(&pids);
}
