//! Network namespaces for the xdp transport's tests (root only): a star of `hosts`
//! namespaces around a "switch" namespace with one bridge per link. On link l, host i has
//! a veth `x{l}` with 10.88.l.(i+1)/24, whose other end is port `p{i}l{l}` of the bridge
//! `br{l}` in the switch.
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
    links: usize,
}

impl XdpNet {
    /// Builds the switch and `hosts` host namespaces, named after this process and call.
    ///
    /// # Errors
    /// The `ip` command that failed and its stderr.
    pub(crate) fn up(hosts: usize) -> Result<XdpNet, String> {
        XdpNet::with_links(hosts, 1)
    }

    /// [`XdpNet::up`] with `links` links (interfaces) per host.
    ///
    /// # Errors
    /// The `ip` command that failed and its stderr.
    pub(crate) fn with_links(hosts: usize, links: usize) -> Result<XdpNet, String> {
        XdpNet::with_queues(hosts, links, 1)
    }

    /// [`XdpNet::with_links`] with `queues` receive and transmit queues on every veth
    /// (frames then reach a host's interface on any of them, as with a NIC's receive-side
    /// scaling).
    ///
    /// # Errors
    /// The `ip` command that failed and its stderr.
    pub(crate) fn with_queues(hosts: usize, links: usize, queues: usize) -> Result<XdpNet, String> {
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
            links,
        };
        for namespace in net.all() {
            ip(&["netns", "add", namespace])?;
            ip(&["-n", namespace, "link", "set", "lo", "up"])?;
        }
        net.watch_owner()?;
        let s = &net.switch;
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
        for link in 0..links {
            let bridge = format!("br{link}");
            ip(&["-n", s, "link", "add", &bridge, "type", "bridge"])?;
            ip(&["-n", s, "link", "set", &bridge, "up"])?;
            for (i, host) in net.hosts.iter().enumerate() {
                let (port, interface) = (format!("p{i}l{link}"), format!("x{link}"));
                let q = queues.to_string();
                ip(&[
                    "link",
                    "add",
                    &port,
                    "netns",
                    s,
                    "numtxqueues",
                    &q,
                    "numrxqueues",
                    &q,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    &interface,
                    "netns",
                    host,
                    "numtxqueues",
                    &q,
                    "numrxqueues",
                    &q,
                ])?;
                ip(&["-n", s, "link", "set", &port, "master", &bridge])?;
                ip(&["-n", s, "link", "set", &port, "up"])?;
                let address = format!("{}/24", net.link_ip(i, link));
                ip(&["-n", host, "addr", "add", &address, "dev", &interface])?;
                ip(&["-n", host, "link", "set", &interface, "up"])?;
            }
        }
        Ok(net)
    }

    /// Host `i`'s address (on link 0).
    pub(crate) fn ip(&self, i: usize) -> Ipv4Addr {
        self.link_ip(i, 0)
    }

    /// Host `i`'s address on link `link`.
    pub(crate) fn link_ip(&self, i: usize, link: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 88, link as u8, i as u8 + 1)
    }

    /// Every host's addresses with `port`, by link (for `ContextBuilder::links`).
    pub(crate) fn links(&self, port: u16) -> Vec<Vec<SocketAddr>> {
        (0..self.hosts.len())
            .map(|i| {
                (0..self.links)
                    .map(|l| SocketAddr::new(self.link_ip(i, l).into(), port))
                    .collect()
            })
            .collect()
    }

    /// Makes the switch send every frame to the hosts on transmit queue `queue` of its
    /// ports (transmit packet steering: every online CPU mapped to that queue), so frames reach
    /// the hosts' interfaces on receive queue `queue`.
    ///
    /// # Errors
    /// The shell command that failed.
    pub(crate) fn steer_to_queue(&self, queue: usize, queues: usize) -> Result<(), String> {
        // SAFETY: sysconf only reads a system value.
        let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.clamp(1, 63);
        let all = format!("{:x}", (1u64 << cpus) - 1);
        let mut script = String::new();
        for i in 0..self.hosts.len() {
            for link in 0..self.links {
                for q in 0..queues {
                    let mask = if q == queue { all.as_str() } else { "0" };
                    script.push_str(&format!(
                        "echo {mask} > /sys/class/net/p{i}l{link}/queues/tx-{q}/xps_cpus; "
                    ));
                }
            }
        }
        let status = Command::new("ip")
            .args(["netns", "exec", &self.switch, "sh", "-ec", &script])
            .status()
            .map_err(|e| format!("running ip netns exec: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!(
                "steering to queue {queue} failed ({status}): {script}"
            ))
        }
    }

    /// Makes the switch drop `loss_ppm` per million of the frames arriving on each of its
    /// ports (both directions of every link lose that much): an nftables `netdev` table
    /// with an ingress chain per port, as the lab's testbed does on its links. AF_XDP
    /// frames bypass the hosts' own netfilter hooks, so the loss lives in the switch.
    ///
    /// # Errors
    /// `nft`'s.
    pub(crate) fn set_loss(&self, loss_ppm: u32) -> Result<(), String> {
        let mut script = String::from("table netdev loss {\n");
        for i in 0..self.hosts.len() {
            for link in 0..self.links {
                script.push_str(&format!(
                    "  chain p{i}l{link} {{\n    type filter hook ingress device \"p{i}l{link}\" priority 0;\n    numgen random mod 1000000 < {loss_ppm} drop\n  }}\n"
                ));
            }
        }
        script.push_str("}\n");
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.switch, "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .map_err(|e| format!("running nft: {e}"))?;
        use std::io::Write as _;
        child
            .stdin
            .take()
            .expect("piped")
            .write_all(script.as_bytes())
            .map_err(|e| format!("writing to nft: {e}"))?;
        let status = child.wait().map_err(|e| format!("waiting for nft: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("nft failed ({status}) on:\n{script}"))
        }
    }

    /// Takes host `i`'s interface of link `link` down or up.
    pub(crate) fn set_link(&self, i: usize, link: usize, up: bool) -> Result<(), String> {
        let interface = format!("x{link}");
        let state = if up { "up" } else { "down" };
        ip(&["-n", &self.hosts[i], "link", "set", &interface, state])
    }

    /// Sets the MTU of host `i`'s interface of link `link` (the switch's side stays).
    ///
    /// # Errors
    /// The `ip` command that failed and its stderr.
    pub(crate) fn set_mtu(&self, i: usize, link: usize, mtu: u32) -> Result<(), String> {
        let interface = format!("x{link}");
        let mtu = mtu.to_string();
        ip(&["-n", &self.hosts[i], "link", "set", &interface, "mtu", &mtu])
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

    /// Whether `ip link show` in host `i` shows an XDP program on any interface.
    pub(crate) fn xdp_attached(&self, i: usize) -> bool {
        let out = Command::new("ip")
            .args(["-n", &self.hosts[i], "link", "show"])
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
