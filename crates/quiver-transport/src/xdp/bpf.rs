//! The `bpf()` system calls quiver needs to steer its frames to an AF_XDP socket: create an
//! XSKMAP, load the redirect program (`program.rs`) and attach it to an interface with a
//! BPF link, then put sockets into the map.
//!
//! Why a link (`BPF_LINK_CREATE`, attach type `BPF_XDP`) rather than the netlink attach
//! that `ip link set xdp` uses: the link lives as long as its descriptor, so the program
//! leaves the interface by itself when the process ends, however it ends (SIGKILL
//! included); a netlink-attached program would stay behind. A second link on the same
//! interface fails with EBUSY: one quiver process per interface (the error says so).
//!
//! Layer: quiver-transport (system calls, `unsafe` with `// SAFETY:`). Decides nothing
//! about frames: the program is given.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::program::{redirect_program, Instruction};

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
/// `enum bpf_attach_type`'s `BPF_XDP`.
const BPF_XDP: u32 = 37;
/// `XDP_FLAGS_SKB_MODE`: the generic (socket buffer) hook, for drivers without native XDP.
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: the driver's native hook.
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
/// Size of `union bpf_attr` we pass (the kernel accepts any size up to its own, zeros
/// beyond what it knows).
const ATTR_BYTES: usize = 128;
/// Bytes of the verifier's log kept for an error message.
const LOG_BYTES: usize = 64 * 1024;

/// Entries of the XSKMAP: one per receive queue, the key being the queue's index.
pub const MAX_QUEUES: u32 = 64;

/// Where the program runs on the interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachMode {
    /// The driver's own XDP hook (veth has one).
    Native,
    /// The generic hook after the socket buffer is built (any driver).
    Generic,
}

/// Which step of loading the program failed, and the system's error.
#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    /// `bpf(BPF_MAP_CREATE)` failed.
    #[error("creating the XSKMAP: {0}")]
    Map(#[source] io::Error),
    /// `bpf(BPF_PROG_LOAD)` failed; `log` is the verifier's message.
    #[error("loading the XDP program: {source}{log}")]
    Load {
        /// The system's error.
        #[source]
        source: io::Error,
        /// The verifier's log (empty or starting with ": ").
        log: String,
    },
    /// `bpf(BPF_LINK_CREATE)` failed in both modes; `source` is the native mode's error.
    #[error("attaching the XDP program to interface {ifindex}: {source}")]
    Attach {
        /// The interface.
        ifindex: u32,
        /// The system's error (EBUSY: another program is attached).
        #[source]
        source: io::Error,
    },
    /// `bpf(BPF_MAP_UPDATE_ELEM)` failed.
    #[error("putting the AF_XDP socket into the XSKMAP: {0}")]
    Insert(#[source] io::Error),
}

impl BpfError {
    /// The underlying system error.
    pub fn os_error(&self) -> Option<i32> {
        match self {
            BpfError::Map(e) | BpfError::Insert(e) => e.raw_os_error(),
            BpfError::Load { source, .. } | BpfError::Attach { source, .. } => {
                source.raw_os_error()
            }
        }
    }
}

/// quiver's program attached to one interface, with its map. Dropping it (or the process
/// ending) detaches the program.
#[derive(Debug)]
pub struct XdpProgram {
    map: OwnedFd,
    // The program stays referenced by the link; kept for `program_fd`.
    program: OwnedFd,
    link: OwnedFd,
    mode: AttachMode,
}

impl XdpProgram {
    /// Creates the map, loads the program matching UDP to `address`:`port` and attaches it
    /// to interface `ifindex`, natively if the driver can, else generically.
    ///
    /// # Errors
    /// The step that failed (EPERM without CAP_BPF/CAP_NET_ADMIN; EBUSY when a program is
    /// already attached to the interface).
    pub fn attach(ifindex: u32, address: Ipv4Addr, port: u16) -> Result<XdpProgram, BpfError> {
        let map = create_xskmap().map_err(BpfError::Map)?;
        let instructions = redirect_program(map.as_raw_fd(), address, port);
        let program = load_program(&instructions)?;
        let (link, mode) = match create_link(&program, ifindex, XDP_FLAGS_DRV_MODE) {
            Ok(link) => (link, AttachMode::Native),
            Err(native) if native.raw_os_error() == Some(libc::EBUSY) => {
                return Err(BpfError::Attach {
                    ifindex,
                    source: native,
                })
            }
            Err(native) => match create_link(&program, ifindex, XDP_FLAGS_SKB_MODE) {
                Ok(link) => (link, AttachMode::Generic),
                Err(_) => {
                    return Err(BpfError::Attach {
                        ifindex,
                        source: native,
                    })
                }
            },
        };
        Ok(XdpProgram {
            map,
            program,
            link,
            mode,
        })
    }

    /// Sends the frames of receive queue `queue` to the AF_XDP socket `socket` (bound to
    /// that queue of this interface).
    ///
    /// # Errors
    /// The kernel's (EINVAL: queue beyond [`MAX_QUEUES`]; EOPNOTSUPP: socket not bound).
    pub fn insert(&self, queue: u32, socket: RawFd) -> Result<(), BpfError> {
        let key = queue;
        let value = socket as u32;
        let mut attr = [0u8; ATTR_BYTES];
        put_u32(&mut attr, 0, self.map.as_raw_fd() as u32);
        put_u64(&mut attr, 8, &key as *const u32 as u64);
        put_u64(&mut attr, 16, &value as *const u32 as u64);
        put_u64(&mut attr, 24, 0); // BPF_ANY
        bpf_call(BPF_MAP_UPDATE_ELEM, &mut attr)
            .map(drop)
            .map_err(BpfError::Insert)
    }

    /// Where the program runs.
    pub fn mode(&self) -> AttachMode {
        self.mode
    }

    /// The link's descriptor (closing it detaches the program).
    pub fn link_fd(&self) -> RawFd {
        self.link.as_raw_fd()
    }

    /// The program's descriptor.
    pub fn program_fd(&self) -> RawFd {
        self.program.as_raw_fd()
    }
}

fn create_xskmap() -> io::Result<OwnedFd> {
    let mut attr = [0u8; ATTR_BYTES];
    put_u32(&mut attr, 0, BPF_MAP_TYPE_XSKMAP);
    put_u32(&mut attr, 4, 4); // key: the queue index
    put_u32(&mut attr, 8, 4); // value: the socket's descriptor
    put_u32(&mut attr, 12, MAX_QUEUES);
    attr[28..28 + 11].copy_from_slice(b"quiver_xsks");
    bpf(BPF_MAP_CREATE, &mut attr)
}

fn load_program(instructions: &[Instruction]) -> Result<OwnedFd, BpfError> {
    let bytes: Vec<u8> = instructions.iter().flat_map(|i| i.to_bytes()).collect();
    let license = b"Dual MIT/GPL\0";
    let mut log = vec![0u8; LOG_BYTES];
    let attempt = |log_level: u32, log: &mut [u8]| {
        let mut attr = [0u8; ATTR_BYTES];
        put_u32(&mut attr, 0, BPF_PROG_TYPE_XDP);
        put_u32(&mut attr, 4, instructions.len() as u32);
        put_u64(&mut attr, 8, bytes.as_ptr() as u64);
        put_u64(&mut attr, 16, license.as_ptr() as u64);
        put_u32(&mut attr, 24, log_level);
        put_u32(
            &mut attr,
            28,
            if log_level > 0 { log.len() as u32 } else { 0 },
        );
        put_u64(
            &mut attr,
            32,
            if log_level > 0 {
                log.as_mut_ptr() as u64
            } else {
                0
            },
        );
        attr[48..48 + 11].copy_from_slice(b"quiver_xdp\0");
        put_u32(&mut attr, 68, BPF_XDP);
        bpf(BPF_PROG_LOAD, &mut attr)
    };
    match attempt(0, &mut log) {
        Ok(fd) => Ok(fd),
        Err(source) => {
            // Once more with the verifier's log, for the message.
            let _ = attempt(1, &mut log);
            let end = log.iter().position(|&b| b == 0).unwrap_or(0);
            let text = String::from_utf8_lossy(&log[..end]).trim().to_string();
            let log = if text.is_empty() {
                String::new()
            } else {
                format!(": {text}")
            };
            Err(BpfError::Load { source, log })
        }
    }
}

fn create_link(program: &OwnedFd, ifindex: u32, flags: u32) -> io::Result<OwnedFd> {
    let mut attr = [0u8; ATTR_BYTES];
    put_u32(&mut attr, 0, program.as_raw_fd() as u32);
    put_u32(&mut attr, 4, ifindex);
    put_u32(&mut attr, 8, BPF_XDP);
    put_u32(&mut attr, 12, flags);
    bpf(BPF_LINK_CREATE, &mut attr)
}

/// `bpf(cmd, attr, size)`: its non-negative return.
fn bpf_call(cmd: libc::c_long, attr: &mut [u8; ATTR_BYTES]) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a zero-initialised buffer of ATTR_BYTES in the layout of `union
    // bpf_attr` for `cmd`; the pointers inside it (instructions, license, log, key, value)
    // point to memory the callers keep alive and large enough for the lengths given, for
    // the duration of the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.as_mut_ptr(),
            ATTR_BYTES as libc::c_uint,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ret)
}

/// `bpf(cmd, attr, size)` for a command that returns a new descriptor.
fn bpf(cmd: libc::c_long, attr: &mut [u8; ATTR_BYTES]) -> io::Result<OwnedFd> {
    let fd = bpf_call(cmd, attr)?;
    // SAFETY: these commands return a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

fn put_u32(attr: &mut [u8], at: usize, value: u32) {
    attr[at..at + 4].copy_from_slice(&value.to_ne_bytes());
}

fn put_u64(attr: &mut [u8], at: usize, value: u64) {
    attr[at..at + 8].copy_from_slice(&value.to_ne_bytes());
}
