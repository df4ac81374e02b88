//! The environment checks of `quiver info`: what on this machine (or in this container)
//! limits quiver, each finding with what to change. Every check looks, or tries the thing on
//! this process; none needs privileges, and none changes anything.
//!
//! - cross-memory attach: `process_vm_readv` of this process's own memory (a seccomp
//!   profile that forbids it, such as Docker's default, refuses even that; shm then carries
//!   large messages through the ring);
//! - `kernel.yama.ptrace_scope`, which decides whether ranks may read each other's memory;
//! - `net.core.rmem_max`/`wmem_max` against the socket buffers quiver asks for;
//! - UDP segmentation and receive offload (GSO/GRO) on a loopback socket;
//! - io_uring for the udp transport (`QUIVER_UDP_IO=uring`): a ring with its multishot
//!   receive set up on a loopback socket;
//! - `membarrier(2)`, which lets shm senders skip a full fence per message;
//! - the locked-memory limit (`ulimit -l`);
//! - the spill directory of unexpected messages (`QUIVER_SPILL_DIR`): its file system, from
//!   `/proc/self/mountinfo` (on tmpfs spilled payloads stay in memory).

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;

use quiver_transport::udp::{UdpSocket, DEFAULT_SOCKET_BUFFER_BYTES};
use quiver_transport::uring::{UringOptions, UringUdpSocket, UringUnavailable};
use quiver_transport::{barrier, sys};
use serde::Serialize;

/// One finding.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Check {
    /// What was checked: "cross-memory attach", "ptrace scope", "socket buffers",
    /// "udp offloads", "io_uring", "membarrier", "locked memory", "spill directory".
    pub(crate) name: &'static str,
    /// "ok", "warning" (works, slower or limited) or "problem" (a feature is unavailable).
    pub(crate) status: &'static str,
    /// What was found, in one sentence.
    pub(crate) found: String,
    /// What to change, when the status is not "ok".
    pub(crate) fix: Option<String>,
}

impl Check {
    fn ok(name: &'static str, found: String) -> Check {
        Check {
            name,
            status: "ok",
            found,
            fix: None,
        }
    }

    fn not_ok(name: &'static str, status: &'static str, found: String, fix: &str) -> Check {
        Check {
            name,
            status,
            found,
            fix: Some(fix.to_string()),
        }
    }
}

/// Every check, in the order `quiver info` prints them; `spill_dir` is the configuration's
/// `QUIVER_SPILL_DIR`.
pub(crate) fn checks(spill_dir: &Path) -> Vec<Check> {
    vec![
        cross_memory_attach(sys::process_vm_read(
            sys::getpid(),
            &mut [0u8; 8],
            &PROBE as *const u64 as u64,
        )),
        ptrace_scope(
            read_number("/proc/sys/kernel/yama/ptrace_scope"),
            has_cap_sys_ptrace(),
        ),
        socket_buffers(
            read_number("/proc/sys/net/core/rmem_max"),
            read_number("/proc/sys/net/core/wmem_max"),
            is_root(),
        ),
        udp_offloads(),
        io_uring(
            UringUdpSocket::bind(
                SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
                UringOptions {
                    rx_buffers: 8,
                    rx_datagram_bytes: 2048,
                    ..UringOptions::default()
                },
            )
            .map(|_| ()),
        ),
        membarrier(barrier::heavy_fence_works(), barrier::light_fence_allowed()),
        locked_memory(),
        spill_directory(
            spill_dir,
            &std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default(),
        ),
    ]
}

/// What the cross-memory attach probe reads (its address in this process).
static PROBE: u64 = 0x7175_6976_6572;

const CMA: &str = "cross-memory attach";

/// What shm does where cross-memory attach is refused.
const FALLBACK: &str = "shm still works, but messages above QUIVER_SHM_EAGER_MAX go \
    through the ring (copied twice, pipelined) instead of one copy by rendezvous \
    (ContextStats::shm_without_cross_memory counts such connections), and puts and gets \
    on memory a peer lent (Context::register) are applied by that peer's progress engine \
    instead of one copy with no work of its CPU (RmaStats::cross_memory_refused)";

/// The verdict on a `process_vm_readv` of this process's own memory.
fn cross_memory_attach(probe: io::Result<usize>) -> Check {
    match probe {
        Ok(8) => Check::ok(
            CMA,
            "process_vm_readv works: shm sends messages above QUIVER_SHM_EAGER_MAX with one copy, \
             and puts and gets on memory a peer lent (Context::register) are one copy too"
                .into(),
        ),
        Ok(n) => Check::not_ok(
            CMA,
            "problem",
            format!("process_vm_readv read {n} of 8 bytes of this process's own memory"),
            "report this machine's kernel version; meanwhile QUIVER_TRANSPORTS=tcp avoids shared memory",
        ),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => Check::not_ok(
            CMA,
            "problem",
            "process_vm_readv does not exist in this kernel (built without CONFIG_CROSS_MEMORY_ATTACH)".into(),
            "use a kernel with CONFIG_CROSS_MEMORY_ATTACH, or QUIVER_TRANSPORTS=tcp (or udp) between the ranks",
        ),
        Err(e) => Check::not_ok(
            CMA,
            "warning",
            format!(
                "process_vm_readv of this process's own memory is refused ({e}): a seccomp \
                 profile forbids it (Docker's default does, for containers without \
                 CAP_SYS_PTRACE); {FALLBACK}"
            ),
            "for single-copy large messages, run the container with --cap-add SYS_PTRACE, \
             or with a seccomp profile that allows process_vm_readv and process_vm_writev",
        ),
    }
}

const PTRACE: &str = "ptrace scope";

/// The verdict on `kernel.yama.ptrace_scope` (`None`: no Yama).
fn ptrace_scope(scope: Option<u64>, cap_sys_ptrace: bool) -> Check {
    match scope {
        None => Check::ok(
            PTRACE,
            "no Yama ptrace restrictions (kernel.yama.ptrace_scope absent)".into(),
        ),
        Some(0) => Check::ok(
            PTRACE,
            "kernel.yama.ptrace_scope = 0: ranks of one user may read each other's memory".into(),
        ),
        Some(1) => Check::ok(
            PTRACE,
            "kernel.yama.ptrace_scope = 1 (descendants only): quiver's ranks allow each other \
             (PR_SET_PTRACER), so shm works between ranks of one user"
                .into(),
        ),
        Some(2) if cap_sys_ptrace => Check::ok(
            PTRACE,
            "kernel.yama.ptrace_scope = 2 (CAP_SYS_PTRACE only): this process has it".into(),
        ),
        Some(2) => Check::not_ok(
            PTRACE,
            "warning",
            format!(
                "kernel.yama.ptrace_scope = 2: only processes with CAP_SYS_PTRACE may read \
                 another's memory; {FALLBACK}"
            ),
            "sysctl -w kernel.yama.ptrace_scope=1 (as root), or give the ranks CAP_SYS_PTRACE",
        ),
        Some(scope) => Check::not_ok(
            PTRACE,
            "warning",
            format!(
                "kernel.yama.ptrace_scope = {scope}: no process may read another's memory; \
                 {FALLBACK}"
            ),
            "the setting cannot be lowered without a reboot: boot with a lower \
             kernel.yama.ptrace_scope (sysctl.conf)",
        ),
    }
}

const BUFFERS: &str = "socket buffers";

/// The verdict on `net.core.rmem_max`/`wmem_max` against what quiver asks for its udp
/// sockets (root sets past them with `SO_*BUFFORCE`).
fn socket_buffers(rmem_max: Option<u64>, wmem_max: Option<u64>, root: bool) -> Check {
    let wanted = DEFAULT_SOCKET_BUFFER_BYTES as u64;
    let shown = |v: Option<u64>| v.map_or("unknown".to_string(), |v| v.to_string());
    let found = format!(
        "net.core.rmem_max = {}, net.core.wmem_max = {}; quiver asks for {wanted} B per udp socket",
        shown(rmem_max),
        shown(wmem_max)
    );
    let short = [rmem_max, wmem_max]
        .iter()
        .any(|v| v.is_some_and(|v| v < wanted));
    if !short {
        Check::ok(BUFFERS, found)
    } else if root {
        Check::ok(BUFFERS, format!("{found} (root sets past the limits)"))
    } else {
        Check::not_ok(
            BUFFERS,
            "warning",
            format!("{found}: the kernel caps them, so bursts of udp traffic drop sooner and retransmit"),
            &format!("sysctl -w net.core.rmem_max={wanted} net.core.wmem_max={wanted} (as root), or run the ranks as root"),
        )
    }
}

const OFFLOADS: &str = "udp offloads";

/// Segmentation (GSO) and receive (GRO) offload on a loopback udp socket.
fn udp_offloads() -> Check {
    let socket = UdpSocket::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)));
    match socket {
        Err(e) => Check::not_ok(
            OFFLOADS,
            "warning",
            format!("no udp socket on loopback to try them on: {e}"),
            "check that the loopback interface is up (ip link set lo up)",
        ),
        Ok(mut socket) => {
            let gso = socket.gso_supported();
            let gro = socket.set_gro(true).is_ok();
            let found = format!(
                "GSO (UDP_SEGMENT) {}, GRO (UDP_GRO) {}",
                if gso { "available" } else { "unavailable" },
                if gro { "available" } else { "unavailable" }
            );
            if gso && gro {
                Check::ok(
                    OFFLOADS,
                    format!("{found}; a socket whose GSO sends the kernel refuses turns GSO off and carries on"),
                )
            } else {
                Check::not_ok(
                    OFFLOADS,
                    "warning",
                    format!("{found}: udp sends and receives one system call per datagram, slower for large messages"),
                    "use a kernel of version 4.18 or later (GSO) and 5.0 or later (GRO)",
                )
            }
        }
    }
}

const IO_URING: &str = "io_uring";

/// The verdict on setting up an io_uring udp socket (ring, registrations, multishot
/// receive) on loopback.
fn io_uring(probe: Result<(), UringUnavailable>) -> Check {
    match probe {
        Ok(()) => Check::ok(
            IO_URING,
            "a ring with a multishot receive into provided buffers works here: \
             QUIVER_UDP_IO=uring (or uring-sqpoll) may drive the udp transport"
                .into(),
        ),
        Err(e) => Check::not_ok(
            IO_URING,
            "warning",
            format!("{e}: QUIVER_UDP_IO=uring falls back to plain sockets"),
            "allow io_uring (sysctl kernel.io_uring_disabled=0, a seccomp profile that \
             permits io_uring_setup/enter/register) on Linux 6.0 or later; or leave \
             QUIVER_UDP_IO at sockets",
        ),
    }
}

const MEMLOCK: &str = "locked memory";

/// Whether shm senders may ring a receiver's doorbell with a compiler fence instead of a
/// full one (`heavy`: this process's `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)` works;
/// `light`: it registered for the barriers of others).
fn membarrier(heavy: bool, light: bool) -> Check {
    const NAME: &str = "membarrier";
    if heavy && light {
        return Check::ok(
            NAME,
            "membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) works: an shm sender orders each \
             message before its look at the receiver's doorbell with a compiler fence, and a \
             receiver pays a barrier only when it goes to sleep"
                .into(),
        );
    }
    Check::not_ok(
        NAME,
        "warning",
        "membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) is missing or refused: shm works, with a \
         full fence per message on the sender (a lower small-message rate)"
            .into(),
        "use a kernel of 4.16 or later, and a seccomp profile that allows membarrier",
    )
}

/// `RLIMIT_MEMLOCK`: quiver locks no memory today; reported for the record.
fn locked_memory() -> Check {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we pass.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) } == 0;
    let shown = |v: libc::rlim_t| {
        if v == libc::RLIM_INFINITY {
            "unlimited".to_string()
        } else {
            format!("{v} B")
        }
    };
    let found = if got {
        format!(
            "ulimit -l: {} (hard {}); quiver's rings and buffers are not locked, so this limit does not constrain it (except QUIVER_UDP_IO=uring's 4 MiB transmit arena per link, registered where the limit allows, else large sends copy)",
            shown(limit.rlim_cur),
            shown(limit.rlim_max)
        )
    } else {
        format!("ulimit -l unknown: {}", io::Error::last_os_error())
    };
    Check::ok(MEMLOCK, found)
}

const SPILL: &str = "spill directory";

/// Where unexpected messages beyond `QUIVER_UNEXPECTED_BYTES` are spilled: a warning when
/// the directory's file system is tmpfs (or ramfs), whose files live in memory, or when it
/// is missing (spills then fail and the messages stay in memory).
fn spill_directory(dir: &Path, mountinfo: &str) -> Check {
    const FIX: &str = "set QUIVER_SPILL_DIR (or TMPDIR) to a directory on a disk, such as /var/tmp or a scratch file system";
    let shown = dir.display();
    if !dir.is_dir() {
        return Check::not_ok(
            SPILL,
            "warning",
            format!("{shown} is not a directory: unexpected messages beyond QUIVER_UNEXPECTED_BYTES would stay in memory (MatchingStats::spill_failures)"),
            FIX,
        );
    }
    match mount_fs_type(dir, mountinfo) {
        Some(fs) if fs == "tmpfs" || fs == "ramfs" => Check::not_ok(
            SPILL,
            "warning",
            format!("{shown} is on {fs}: unexpected messages spilled beyond QUIVER_UNEXPECTED_BYTES would stay in memory"),
            FIX,
        ),
        Some(fs) => Check::ok(
            SPILL,
            format!("{shown} is on {fs}: unexpected messages beyond QUIVER_UNEXPECTED_BYTES leave memory for an unlinked file there"),
        ),
        None => Check::ok(
            SPILL,
            format!("{shown}: file system unknown; unexpected messages beyond QUIVER_UNEXPECTED_BYTES are spilled to an unlinked file there"),
        ),
    }
}

/// The file system type of the mount holding `dir` (the longest mount point that is a
/// prefix of its canonical path), from the text of `/proc/self/mountinfo`.
fn mount_fs_type(dir: &Path, mountinfo: &str) -> Option<String> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    mountinfo
        .lines()
        .filter_map(|line| {
            // "id parent major:minor root mount-point options [optional...] - fstype source ..."
            let mut fields = line.split_whitespace();
            let mount_point = fields.nth(4)?;
            let mut rest = fields.skip_while(|field| *field != "-");
            let fs = rest.nth(1)?;
            // Spaces and the like are written as octal escapes: no such mount point matches.
            Some((Path::new(mount_point), fs))
        })
        .filter(|(mount_point, _)| dir.starts_with(mount_point))
        .max_by_key(|(mount_point, _)| mount_point.as_os_str().len())
        .map(|(_, fs)| fs.to_string())
}

fn read_number(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether this process's effective capabilities hold CAP_SYS_PTRACE (bit 19).
fn has_cap_sys_ptrace() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << 19) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spill_directory_on_tmpfs_is_a_warning_with_the_fix() {
        let mountinfo = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:25 / /tmp rw,nosuid shared:2 - tmpfs tmpfs rw
31 22 0:26 / /var/tmp/ram rw shared:3 master:1 - ramfs none rw
";
        assert_eq!(
            mount_fs_type(Path::new("/tmp"), mountinfo).as_deref(),
            Some("tmpfs")
        );
        assert_eq!(
            mount_fs_type(Path::new("/tmp/x/y"), mountinfo).as_deref(),
            Some("tmpfs")
        );
        assert_eq!(
            mount_fs_type(Path::new("/tmpx"), mountinfo).as_deref(),
            Some("ext4")
        );
        assert_eq!(
            mount_fs_type(Path::new("/var/tmp/ram/a"), mountinfo).as_deref(),
            Some("ramfs")
        );
        assert_eq!(
            mount_fs_type(Path::new("/var/tmp"), mountinfo).as_deref(),
            Some("ext4")
        );
        let check = spill_directory(Path::new("/tmp"), mountinfo);
        assert_eq!(check.status, "warning");
        assert!(check.found.contains("tmpfs"), "{}", check.found);
        assert!(check.fix.unwrap().contains("QUIVER_SPILL_DIR"));
        let check = spill_directory(Path::new("/"), mountinfo);
        assert_eq!(check.status, "ok", "{}", check.found);
        let check = spill_directory(Path::new("/nonexistent/spill"), mountinfo);
        assert_eq!(check.status, "warning");
        assert!(check.fix.unwrap().contains("QUIVER_SPILL_DIR"));
    }

    #[test]
    fn cross_memory_attach_refused_says_why_and_what_to_change() {
        let check = cross_memory_attach(Err(io::Error::from_raw_os_error(libc::EPERM)));
        assert_eq!(check.status, "warning");
        assert!(check.found.contains("seccomp"), "{}", check.found);
        assert!(check.found.contains("through the ring"), "{}", check.found);
        assert!(check.found.contains("progress engine"), "{}", check.found);
        assert!(check.fix.unwrap().contains("SYS_PTRACE"));
        assert_eq!(cross_memory_attach(Ok(8)).status, "ok");
        let missing = cross_memory_attach(Err(io::Error::from_raw_os_error(libc::ENOSYS)));
        assert!(missing.found.contains("CONFIG_CROSS_MEMORY_ATTACH"));
    }

    #[test]
    fn io_uring_refused_says_why_and_what_to_change() {
        let refused = io_uring(Err(UringUnavailable {
            step: "setup",
            error: io::Error::from_raw_os_error(libc::EPERM),
        }));
        assert_eq!(refused.status, "warning");
        assert!(
            refused.found.contains("io_uring_disabled"),
            "{}",
            refused.found
        );
        assert!(refused.found.contains("falls back"), "{}", refused.found);
        assert!(refused.fix.unwrap().contains("QUIVER_UDP_IO"));
        assert_eq!(io_uring(Ok(())).status, "ok");
    }

    #[test]
    fn ptrace_scope_verdicts() {
        assert_eq!(ptrace_scope(None, false).status, "ok");
        assert_eq!(ptrace_scope(Some(1), false).status, "ok");
        assert_eq!(ptrace_scope(Some(2), true).status, "ok");
        let two = ptrace_scope(Some(2), false);
        assert_eq!(two.status, "warning");
        assert!(two.fix.unwrap().contains("ptrace_scope=1"));
        assert!(ptrace_scope(Some(3), true).fix.unwrap().contains("reboot"));
    }

    #[test]
    fn small_socket_buffer_limits_are_a_warning_except_for_root() {
        let small = socket_buffers(Some(212_992), Some(212_992), false);
        assert_eq!(small.status, "warning");
        assert!(small.fix.unwrap().contains("net.core.rmem_max=8388608"));
        assert_eq!(
            socket_buffers(Some(212_992), Some(212_992), true).status,
            "ok"
        );
        assert_eq!(
            socket_buffers(Some(16 << 20), Some(16 << 20), false).status,
            "ok"
        );
    }
}
