//! A `Testbed` guard for integration tests: builds a two-namespace testbed with the real
//! `quiver-bench testbed up` and removes it when dropped. `up` is given this test process as
//! the owner, so the testbed is removed even if the test process is killed (the watcher
//! that `quiver-bench testbed up --owner-pid` starts notices the exit).

#![allow(dead_code)]

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// A running testbed; dropping it removes it.
pub(crate) struct Testbed {
    name: String,
}

impl Testbed {
    /// Builds a testbed with a name unique to this process and call: `links` links at
    /// `rate` (e.g. "100mbit") with `loss_pct` percent loss per direction.
    ///
    /// # Errors
    /// `quiver-bench testbed up`'s exit status and stderr.
    pub(crate) fn up(links: u32, rate: &str, loss_pct: f64) -> Result<Testbed, String> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "qt{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        let output = quiver_bench()
            .args(["testbed", "up", "--name", &name, "--links"])
            .arg(links.to_string())
            .args(["--rate", rate, "--loss"])
            .arg(loss_pct.to_string())
            .arg("--owner-pid")
            .arg(std::process::id().to_string())
            .output()
            .map_err(|error| format!("running quiver-bench testbed up: {error}"))?;
        // From here on the guard owns whatever was built, even if `up` failed half-way.
        let testbed = Testbed { name };
        if output.status.success() {
            Ok(testbed)
        } else {
            Err(format!(
                "quiver-bench testbed up failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    }

    /// The testbed's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Namespace of side `a` (10.77.i.1) and side `b` (10.77.i.2).
    pub(crate) fn namespaces(&self) -> [String; 2] {
        [format!("{}-a", self.name), format!("{}-b", self.name)]
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let status = quiver_bench()
            .args(["testbed", "down", "--name", &self.name])
            .status();
        if !matches!(status, Ok(status) if status.success()) {
            eprintln!(
                "warning: quiver-bench testbed down --name {} failed: {status:?}",
                self.name
            );
        }
    }
}

/// The `quiver-bench` binary under test.
pub(crate) fn quiver_bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_quiver-bench"))
}

/// Whether this process runs as root (the testbed needs it).
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid cannot fail and has no side effects.
    unsafe { libc::geteuid() == 0 }
}

/// Names of the network namespaces that exist now.
pub(crate) fn namespace_list() -> Vec<String> {
    let output = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("run ip netns list");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next().map(str::to_string))
        .collect()
}

/// Runs `work` on a new thread that has entered network namespace `namespace`; sockets it
/// creates belong to that namespace and can be used from any thread afterwards.
pub(crate) fn in_namespace<T: Send + 'static>(
    namespace: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> T {
    spawn_in(namespace, work)
        .join()
        .expect("namespace thread panicked")
}

/// Starts `work` on a new thread inside network namespace `namespace` (everything the
/// thread opens, and the threads it starts, belong there); join the handle for its result.
pub(crate) fn spawn_in<T: Send + 'static>(
    namespace: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let path = format!("/run/netns/{namespace}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|error| panic!("{path}: {error}"));
        use std::os::fd::AsRawFd;
        // SAFETY: setns on a valid namespace descriptor; it changes only this thread's
        // network namespace (a thread of its own, which ends after `work`).
        let result = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(
            result,
            0,
            "setns {path}: {}",
            std::io::Error::last_os_error()
        );
        work()
    })
}
