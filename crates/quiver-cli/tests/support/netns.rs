//! Two network namespaces for the launcher tests (root only): `NAME-a` and `NAME-b`
//! joined by one veth pair `link0`, 10.77.0.1/24 in a and 10.77.0.2/24 in b, loopback up
//! in both. The layout of link 0 of the lab's `quiver-bench testbed`, without its rate
//! limits and loss: the launcher tests need only the link, and this crate's tests cannot
//! run the lab's binary (it depends on this crate, not the other way round).
//!
//! Dropping the guard deletes the namespaces (which removes the link); a detached shell
//! started with them deletes them too if the test process is killed.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Two namespaces joined by one link; dropping it removes them.
pub(crate) struct Testbed {
    namespaces: [String; 2],
}

impl Testbed {
    /// Builds the namespaces and the link, with a name unique to this process and call.
    ///
    /// # Errors
    /// The `ip` command that failed and its stderr.
    pub(crate) fn up() -> Result<Testbed, String> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "ql{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        // From here on the guard owns whatever was built, even if a step fails.
        let testbed = Testbed {
            namespaces: [format!("{name}-a"), format!("{name}-b")],
        };
        let [a, b] = testbed.namespaces();
        for namespace in [&a, &b] {
            ip(&["netns", "add", namespace])?;
            ip(&["-n", namespace, "link", "set", "lo", "up"])?;
        }
        watch_owner(&a, &b)?;
        ip(&[
            "link", "add", "link0", "netns", &a, "type", "veth", "peer", "name", "link0", "netns",
            &b,
        ])?;
        for (namespace, address) in [(&a, "10.77.0.1/24"), (&b, "10.77.0.2/24")] {
            ip(&["-n", namespace, "addr", "add", address, "dev", "link0"])?;
            ip(&["-n", namespace, "link", "set", "link0", "up"])?;
        }
        Ok(testbed)
    }

    /// Namespace of side `a` (10.77.0.1) and side `b` (10.77.0.2).
    pub(crate) fn namespaces(&self) -> [String; 2] {
        self.namespaces.clone()
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        for namespace in &self.namespaces {
            if let Err(error) = ip(&["netns", "del", namespace]) {
                eprintln!("warning: removing namespace {namespace}: {error}");
            }
        }
    }
}

/// Runs `ip ARGUMENTS`.
fn ip(arguments: &[&str]) -> Result<(), String> {
    let output = Command::new("ip")
        .args(arguments)
        .output()
        .map_err(|error| format!("running ip: {error}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {} failed ({}): {}",
            arguments.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Starts a detached shell that deletes the two namespaces once this test process has
/// exited, however it exits (a guard's drop does not run when the process is killed).
fn watch_owner(a: &str, b: &str) -> Result<(), String> {
    let script = format!(
        "while kill -0 {} 2>/dev/null; do sleep 0.2; done; ip netns del {a} 2>/dev/null; ip netns del {b} 2>/dev/null",
        std::process::id()
    );
    Command::new("setsid")
        .args(["sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(drop)
        .map_err(|error| format!("starting the namespaces' watcher: {error}"))
}

/// Whether this process runs as root (network namespaces need it).
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid cannot fail and has no side effects.
    unsafe { libc::geteuid() == 0 }
}

/// The `quiver` binary under test.
pub(crate) fn quiver() -> Command {
    Command::new(env!("CARGO_BIN_EXE_quiver"))
}
