//! Network namespaces for the xdp transport's tests (root only): a star of `hosts`
//! namespaces around a "switch" namespace with a bridge. Host i has one veth `x0` with
//! 10.88.0.(i+1)/24, whose other end is port `p{i}` of the bridge `br0` in the switch.
//! Each rank gets a namespace of its own, so each has its own interface for its AF_XDP
//! socket and XDP program (one per interface). Traffic stays inside these namespaces.
//!
//! The layout of the launcher tests' and the lab's testbeds (`ip netns`, veth pairs,
//! `/var/run/netns` names with this process's id), with their cleanup: dropping the guard
//! deletes the namespaces, and a detached shell started with them deletes them when this
//! test process exits however it exits (SIGKILL included).
#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// The star of namespaces; dropping it removes them.
pub(crate) struct XdpNet {
    switch: String,
    hosts: Vec<String>,
}

impl XdpNet {
    /// Builds the switch and `hosts` host namespaces, named after this process and call.
    ///
    /// # Errors
    /// The `ip` command that failed and its stderr.
    pub(crate) fn up(hosts: usize) -> Result<XdpNet, String> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "qx{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        // From here on the guard owns whatever was built, even if a step fails.
        let net = XdpNet {
            switch: format!("{name}-s"),
            hosts: (0..hosts).map(|i| format!("{name}-h{i}")).collect(),
        };
        for namespace in net.all() {
            ip(&["netns", "add", namespace])?;
            ip(&["-n", namespace, "link", "set", "lo", "up"])?;
        }
        net.watch_owner()?;
        let s = &net.switch;
        ip(&["-n", s, "link", "add", "br0", "type", "bridge"])?;
        // A plain switch: no netfilter on bridged frames (br_netfilter would check, and
        // drop, the malformed frames a test sends on purpose).
        let _ = Command::new("ip")
            .args(["netns", "exec", s, "sysctl", "-qw"])
            .args([
                "net.bridge.bridge-nf-call-iptables=0",
                "net.bridge.bridge-nf-call-ip6tables=0",
            ])
            .args(["net.bridge.bridge-nf-call-arptables=0"])
            .status();
        ip(&["-n", s, "link", "set", "br0", "up"])?;
        for (i, host) in net.hosts.iter().enumerate() {
            let port = format!("p{i}");
            ip(&[
                "link", "add", &port, "netns", s, "type", "veth", "peer", "name", "x0", "netns",
                host,
            ])?;
            ip(&["-n", s, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", s, "link", "set", &port, "up"])?;
            let address = format!("{}/24", net.ip(i));
            ip(&["-n", host, "addr", "add", &address, "dev", "x0"])?;
            ip(&["-n", host, "link", "set", "x0", "up"])?;
        }
        Ok(net)
    }

    /// Host `i`'s address.
    pub(crate) fn ip(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 88, 0, i as u8 + 1)
    }

    /// Host `i`'s address with `port`.
    pub(crate) fn address(&self, i: usize, port: u16) -> SocketAddr {
        SocketAddr::new(self.ip(i).into(), port)
    }

    /// Host `i`'s namespace.
    pub(crate) fn namespace(&self, i: usize) -> &str {
        &self.hosts[i]
    }

    /// Runs `f` on a thread inside host `i`'s namespace (sockets it opens live there).
    pub(crate) fn in_host<T: Send>(&self, i: usize, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/var/run/netns/{}", self.hosts[i]);
        std::thread::scope(|s| {
            s.spawn(move || {
                quiver_transport::netif::enter_network_namespace(Path::new(&path))
                    .expect("entering the host's namespace");
                f()
            })
            .join()
            .expect("thread in the host's namespace")
        })
    }

    /// Whether `ip link show x0` in host `i` shows an XDP program.
    pub(crate) fn xdp_attached(&self, i: usize) -> bool {
        let out = Command::new("ip")
            .args(["-n", &self.hosts[i], "link", "show", "x0"])
            .output()
            .expect("ip link show");
        String::from_utf8_lossy(&out.stdout).contains("xdp")
    }

    fn all(&self) -> impl Iterator<Item = &String> {
        std::iter::once(&self.switch).chain(&self.hosts)
    }

    /// Starts a detached shell that deletes the namespaces once this test process has
    /// exited, however it exits.
    fn watch_owner(&self) -> Result<(), String> {
        let deletions: Vec<String> = self
            .all()
            .map(|n| format!("ip netns del {n} 2>/dev/null"))
            .collect();
        let script = format!(
            "while kill -0 {} 2>/dev/null; do sleep 0.2; done; {}",
            std::process::id(),
            deletions.join("; ")
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
}

impl Drop for XdpNet {
    fn drop(&mut self) {
        for namespace in self.all() {
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

/// Whether this process runs as root (namespaces and AF_XDP need it).
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid cannot fail and has no side effects.
    unsafe { libc::geteuid() == 0 }
}
