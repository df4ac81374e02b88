//! Thin, checked wrappers over the Linux system calls the shared-memory transport uses.
//!
//! Every `unsafe` block of the transport that is not about the ring's shared memory lives
//! here, each with its own `SAFETY:` comment. Callers get `io::Result`s and owned file
//! descriptors; nothing here interprets data.
//!
//! Layer: quiver-transport, the bottom of the shm transport. System calls only: no state,
//! no policy.

use std::ffi::c_void;
use std::io;
use std::mem::{size_of, zeroed, MaybeUninit};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Turns a `-1`-style return value into the thread's `errno`.
fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Same as [`check`] for `ssize_t` returns.
fn check_size(ret: libc::ssize_t) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// The seals every memory file quiver shares carries ([`memfd`]), and that a side mapping
/// one it received requires ([`seals`]): its size can no longer change (no shrinking, which
/// would make the other side's accesses beyond the new end die of SIGBUS, and no growing),
/// and no seal can be added or removed.
pub const SHARED_SEALS: u32 = (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL) as u32;

/// Creates an anonymous memory file of `len_bytes` (mode 0600 by construction: it has no
/// name in any file system and is reachable only through the descriptor), sealed with
/// [`SHARED_SEALS`] before it is returned, so before anyone else can hold it.
pub fn memfd(name: &str, len_bytes: usize) -> io::Result<OwnedFd> {
    let owned = memfd_unsealed(name, len_bytes)?;
    // SAFETY: plain fcntl with integer arguments on a descriptor we own.
    check(unsafe {
        libc::fcntl(
            owned.as_raw_fd(),
            libc::F_ADD_SEALS,
            SHARED_SEALS as libc::c_int,
        )
    })?;
    Ok(owned)
}

/// The seals of the file behind `fd` (`F_GET_SEALS`); 0 for a file that cannot carry
/// seals (not a memfd, or one made without `MFD_ALLOW_SEALING`: EINVAL).
pub fn seals(fd: &OwnedFd) -> io::Result<u32> {
    // SAFETY: plain fcntl with integer arguments on a descriptor the caller owns.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 {
        let error = io::Error::last_os_error();
        return match error.raw_os_error() {
            Some(libc::EINVAL) => Ok(0),
            _ => Err(error),
        };
    }
    Ok(seals as u32)
}

/// [`memfd`] without its seals (sealing allowed, none set): what a forged or careless
/// peer could send. For tests of the side that must refuse it.
#[doc(hidden)]
pub fn memfd_unsealed(name: &str, len_bytes: usize) -> io::Result<OwnedFd> {
    let cname = std::ffi::CString::new(name).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: `cname` is a valid NUL-terminated string that outlives the call.
    let fd = check(unsafe {
        libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
    })?;
    // SAFETY: `fd` was just returned by memfd_create and is owned by nobody else.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain syscall on a descriptor we own.
    check(unsafe { libc::ftruncate(owned.as_raw_fd(), len_bytes as libc::off_t) })?;
    // Reserve the pages now: when memory (or the cgroup's limit) is exhausted, this fails
    // with ENOSPC/ENOMEM here instead of SIGBUS or an OOM kill on first touch later.
    // SAFETY: plain syscall on a descriptor we own.
    let reserved = unsafe { libc::fallocate(owned.as_raw_fd(), 0, 0, len_bytes as libc::off_t) };
    if reserved != 0 {
        let error = io::Error::last_os_error();
        // A file system without fallocate still works, with the old lazy behaviour.
        if error.raw_os_error() != Some(libc::EOPNOTSUPP) {
            return Err(error);
        }
    }
    Ok(owned)
}

/// A new descriptor of the file behind `fd`, opened read-only (through
/// `/proc/self/fd`): whoever holds only it can map the file for reading, never for
/// writing, whatever it does with the descriptor.
pub fn reopen_read_only(fd: &OwnedFd) -> io::Result<OwnedFd> {
    let path = std::ffi::CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: `path` is a valid NUL-terminated string that outlives the call.
    let raw = check(unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) })?;
    // SAFETY: `raw` was just returned by open and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Size in bytes of the file behind `fd`.
pub fn file_len(fd: &OwnedFd) -> io::Result<usize> {
    // SAFETY: `stat` is plain old data; zeroed is a valid value for it.
    let mut st: libc::stat = unsafe { zeroed() };
    // SAFETY: `st` is a valid out-pointer for the duration of the call.
    check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st.st_size as usize)
}

/// A shared, read-write memory mapping of a whole file, unmapped on drop.
///
/// The memory may be written concurrently by another process: code that reads it must
/// treat every value as untrusted and use atomics or raw-pointer copies, never references
/// to plain data.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Mapping is a raw region of shared memory; all access goes through atomics or
// raw-pointer copies whose users uphold the protocol's ownership rules.
unsafe impl Send for Mapping {}
// SAFETY: as above; the type itself hands out only raw pointers.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps all `len` bytes of `fd` shared and read-write.
    pub fn map(fd: &OwnedFd, len: usize) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        // SAFETY: a fresh mapping chosen by the kernel; no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr as *mut u8).ok_or(io::ErrorKind::Other)?;
        Ok(Mapping { ptr, len })
    }

    /// Maps all `len` bytes of `fd` shared and read-only (what a descriptor opened
    /// read-only allows: the kernel refuses a writable shared mapping of it, and
    /// `mprotect` cannot add write access later).
    pub fn map_read_only(fd: &OwnedFd, len: usize) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        // SAFETY: a fresh mapping chosen by the kernel; no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr as *mut u8).ok_or(io::ErrorKind::Other)?;
        Ok(Mapping { ptr, len })
    }

    /// Start of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never true: `map` refuses empty mappings).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe exactly the mapping created in `map`, and no
        // reference into it outlives `self`.
        unsafe { libc::munmap(self.ptr.as_ptr() as *mut c_void, self.len) };
    }
}

/// Waits on a futex word in shared memory while it still holds `expected`, for at most
/// `timeout`. Returns on wake-up, timeout, signal or value change; the caller re-checks.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a valid, aligned 32-bit atomic; the kernel only reads it. A shared
    // (non-private) futex is required because the word lives in memory mapped by two processes.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        )
    };
}

/// Wakes every waiter on a shared futex word.
pub fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a valid, aligned 32-bit atomic.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX) };
}

/// `membarrier(2)`'s command that runs a memory barrier on every CPU running a thread of
/// a process registered with [`MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED`].
pub const MEMBARRIER_CMD_GLOBAL_EXPEDITED: libc::c_int = 1 << 1;
/// `membarrier(2)`'s command that registers this process for
/// [`MEMBARRIER_CMD_GLOBAL_EXPEDITED`] barriers issued by any process.
pub const MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_int = 1 << 2;
const MEMBARRIER_CMD_QUERY: libc::c_int = 0;

/// Whether the kernel offers `membarrier(2)` command `cmd` (false when the call is
/// missing or refused).
pub fn membarrier_supported(cmd: libc::c_int) -> bool {
    // SAFETY: plain syscall with integer arguments; QUERY changes nothing.
    let commands = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0) };
    commands >= 0 && commands & libc::c_long::from(cmd) != 0
}

/// Runs `membarrier(2)` command `cmd`.
///
/// # Errors
/// The system's (`EINVAL` for a command the kernel lacks, `EPERM` when refused).
pub fn membarrier(cmd: libc::c_int) -> io::Result<()> {
    // SAFETY: plain syscall with integer arguments.
    let r = unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A non-blocking, close-on-exec eventfd.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the result is a fresh descriptor.
    let fd = check(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
    // SAFETY: `fd` was just created and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds one to an eventfd's counter, making it readable.
pub fn eventfd_signal(fd: RawFd) -> io::Result<()> {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live local.
    let n = unsafe { libc::write(fd, &one as *const u64 as *const c_void, 8) };
    match check_size(n) {
        Ok(_) => Ok(()),
        // The counter is saturated: it is readable anyway, which is all a signal means.
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
        Err(e) => Err(e),
    }
}

/// Resets an eventfd's counter to zero (non-blocking; fine if it already was).
pub fn eventfd_drain(fd: RawFd) {
    let mut value: u64 = 0;
    // SAFETY: reads 8 bytes into a live local.
    unsafe { libc::read(fd, &mut value as *mut u64 as *mut c_void, 8) };
}

/// A descriptor referring to process `pid` that becomes readable when it exits.
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with integer arguments.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a fresh descriptor we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Whether the process behind `pidfd` has exited (a zero-timeout poll).
pub fn pidfd_exited(pidfd: &OwnedFd) -> bool {
    let mut pfd = [libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    matches!(poll(&mut pfd, Some(Duration::ZERO)), Ok(n) if n > 0)
}

/// `poll(2)` with an optional timeout (None waits forever). EINTR counts as zero ready.
pub fn poll(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> io::Result<usize> {
    let ms = match timeout {
        None => -1,
        Some(t) => t.as_millis().min(i32::MAX as u128) as libc::c_int,
    };
    // SAFETY: `fds` is a valid, exclusively borrowed slice of pollfd.
    let ret = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    match check(ret) {
        Ok(n) => Ok(n as usize),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
        Err(e) => Err(e),
    }
}

/// Copies `local.len()` bytes from address `remote` in process `pid` into `local`, with
/// one kernel copy (cross-memory attach). Returns how many bytes were copied, which can be
/// short if the remote range is partly unmapped.
pub fn process_vm_read(pid: libc::pid_t, local: &mut [u8], remote: u64) -> io::Result<usize> {
    if local.is_empty() {
        return Ok(0);
    }
    let local_iov = libc::iovec {
        iov_base: local.as_mut_ptr() as *mut c_void,
        iov_len: local.len(),
    };
    let remote_iov = libc::iovec {
        iov_base: remote as usize as *mut c_void,
        iov_len: local.len(),
    };
    // SAFETY: the local iovec covers exactly the exclusively borrowed `local`; the remote
    // iovec is only interpreted by the kernel in the other process's address space, which
    // checks it and returns EFAULT for bad ranges.
    check_size(unsafe { libc::process_vm_readv(pid, &local_iov, 1, &remote_iov, 1, 0) })
}

/// Copies `len` bytes from address `local` in this process to address `remote` in process
/// `pid` (cross-memory attach, the writing direction). Returns how many bytes were copied.
/// Both ranges are checked by the kernel (EFAULT for unmapped ones), so no Rust reference is
/// involved: `local` must be memory this process keeps alive for the call.
pub fn process_vm_write(
    pid: libc::pid_t,
    local: u64,
    remote: u64,
    len: usize,
) -> io::Result<usize> {
    if len == 0 {
        return Ok(0);
    }
    let local_iov = libc::iovec {
        iov_base: local as usize as *mut c_void,
        iov_len: len,
    };
    let remote_iov = libc::iovec {
        iov_base: remote as usize as *mut c_void,
        iov_len: len,
    };
    // SAFETY: the kernel reads `len` bytes at `local` in this process (returning EFAULT if
    // they are not mapped) and writes them at `remote` in `pid`; no memory of ours is written.
    check_size(unsafe { libc::process_vm_writev(pid, &local_iov, 1, &remote_iov, 1, 0) })
}

/// Allows any process of ours to read this process's memory with process_vm_readv even
/// when Yama's ptrace scope would restrict it to descendants. Errors are ignored: without
/// Yama the call fails harmlessly.
pub fn allow_cross_memory_attach() {
    // SAFETY: plain prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
}

/// The machine's physical memory in bytes (`_SC_PHYS_PAGES` times the page size), or
/// `None` if the system does not say.
pub fn physical_memory_bytes() -> Option<u64> {
    // SAFETY: sysconf takes an integer name and returns an integer; it touches no memory
    // of ours.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let pages = u64::try_from(pages).ok().filter(|&p| p > 0)?;
    let page = u64::try_from(page).ok().filter(|&p| p > 0)?;
    pages.checked_mul(page)
}

/// The process id of this process.
pub fn getpid() -> libc::pid_t {
    // SAFETY: getpid cannot fail.
    unsafe { libc::getpid() }
}

/// The process id of this process's parent (its launcher, or whatever started it).
pub fn getppid() -> libc::pid_t {
    // SAFETY: getppid cannot fail.
    unsafe { libc::getppid() }
}

/// The CPUs process `pid` (0: the calling thread) may run on, in increasing order
/// (`sched_getaffinity`).
///
/// # Errors
/// The system call's error (no such process).
pub fn cpu_affinity(pid: libc::pid_t) -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is a plain bitmask; all-zero bytes are a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t and we pass its exact size.
    check(unsafe { libc::sched_getaffinity(pid, size_of::<libc::cpu_set_t>(), &mut set) })?;
    let capacity = 8 * size_of::<libc::cpu_set_t>();
    Ok((0..capacity)
        // SAFETY: `cpu` is below the set's capacity in bits, so the access is in bounds.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

fn abstract_sockaddr(name: &[u8]) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain old data; all-zero is valid.
    let mut addr: libc::sockaddr_un = unsafe { zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    // The first byte stays 0: an abstract name, invisible in the file system.
    if name.len() + 1 > addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "socket name too long",
        ));
    }
    for (dst, src) in addr.sun_path[1..].iter_mut().zip(name) {
        *dst = *src as libc::c_char;
    }
    let len = (size_of::<libc::sa_family_t>() + 1 + name.len()) as libc::socklen_t;
    Ok((addr, len))
}

fn seqpacket_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the result is a fresh descriptor.
    let fd = check(unsafe {
        libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0)
    })?;
    // SAFETY: `fd` was just created and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A listening unix SOCK_SEQPACKET socket bound to an abstract name.
pub fn seqpacket_listen(name: &[u8]) -> io::Result<OwnedFd> {
    let fd = seqpacket_socket()?;
    let (addr, len) = abstract_sockaddr(name)?;
    // SAFETY: `addr` is a valid sockaddr_un of length `len`.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &addr as *const libc::sockaddr_un as *const libc::sockaddr,
            len,
        )
    })?;
    // SAFETY: plain syscall on a descriptor we own.
    check(unsafe { libc::listen(fd.as_raw_fd(), 128) })?;
    Ok(fd)
}

/// Connects a new unix SOCK_SEQPACKET socket to an abstract name.
pub fn seqpacket_connect(name: &[u8]) -> io::Result<OwnedFd> {
    let fd = seqpacket_socket()?;
    let (addr, len) = abstract_sockaddr(name)?;
    // SAFETY: `addr` is a valid sockaddr_un of length `len`.
    check(unsafe {
        libc::connect(
            fd.as_raw_fd(),
            &addr as *const libc::sockaddr_un as *const libc::sockaddr,
            len,
        )
    })?;
    Ok(fd)
}

/// Accepts one connection (blocking) on a listening socket.
pub fn accept(listener: &OwnedFd) -> io::Result<OwnedFd> {
    // SAFETY: null address pointers are allowed by accept4.
    let fd = check(unsafe {
        libc::accept4(
            listener.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC,
        )
    })?;
    // SAFETY: the kernel returned a fresh descriptor we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Shuts a socket down in both directions; a thread blocked in `accept` on it returns.
pub fn shutdown(fd: &OwnedFd) {
    // SAFETY: plain syscall on a descriptor we own; errors are irrelevant here.
    unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_RDWR) };
}

/// Sends one datagram without descriptors.
pub fn send_datagram(sock: &OwnedFd, data: &[u8]) -> io::Result<()> {
    send_with_fds(sock, data, &[])
}

/// Sets both the send and the receive timeout of a socket.
pub fn set_socket_timeouts(fd: &OwnedFd, timeout: Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_usec: timeout.subsec_micros() as libc::suseconds_t,
    };
    for opt in [libc::SO_RCVTIMEO, libc::SO_SNDTIMEO] {
        // SAFETY: `tv` is a valid timeval of the stated size.
        check(unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                &tv as *const libc::timeval as *const c_void,
                size_of::<libc::timeval>() as libc::socklen_t,
            )
        })?;
    }
    Ok(())
}

/// The process id of the peer of a connected unix socket, as vouched for by the kernel.
pub fn peer_pid(fd: &OwnedFd) -> io::Result<libc::pid_t> {
    peer_credentials(fd).map(|(pid, _)| pid)
}

/// A connected pair of unix stream sockets (close-on-exec, non-blocking): one end to keep,
/// one to pass to another process.
///
/// # Errors
/// The system's (descriptors exhausted).
pub fn stream_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` has room for the two descriptors socketpair writes.
    let made = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
            fds.as_mut_ptr(),
        )
    };
    if made != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socketpair succeeded: both descriptors are new and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The credentials of the peer of a connected unix socket, as the kernel recorded them when
/// the peer connected (SO_PEERCRED): its process id and user id.
pub fn peer_credentials(fd: &OwnedFd) -> io::Result<(libc::pid_t, libc::uid_t)> {
    // SAFETY: ucred is plain old data.
    let mut cred: libc::ucred = unsafe { zeroed() };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred`/`len` are valid out-pointers of the stated size.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut c_void,
            &mut len,
        )
    })?;
    Ok((cred.pid, cred.uid))
}

/// The real user id of this process.
pub fn getuid() -> libc::uid_t {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

/// Puts a descriptor in non-blocking mode (O_NONBLOCK) or takes it out of it.
pub fn set_nonblocking(fd: &OwnedFd, nonblocking: bool) -> io::Result<()> {
    // SAFETY: plain fcntl on a descriptor we own.
    let flags = check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    let flags = if nonblocking {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    // SAFETY: plain fcntl on a descriptor we own.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags) })?;
    Ok(())
}

/// Most descriptors one message carries.
pub const MAX_PASSED_FDS: usize = 4;

/// Sends one datagram, with up to [`MAX_PASSED_FDS`] descriptors attached (SCM_RIGHTS).
pub fn send_with_fds(sock: &OwnedFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    assert!(
        fds.len() <= MAX_PASSED_FDS,
        "at most {MAX_PASSED_FDS} descriptors"
    );
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut c_void,
        iov_len: data.len(),
    };
    let mut cmsg_buf = [0u64; 8]; // 64 bytes, 8-aligned: room for 4 descriptors
                                  // SAFETY: msghdr is plain old data; all-zero is valid.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let fd_bytes = std::mem::size_of_val(fds) as u32;
        // SAFETY: CMSG_SPACE is a pure computation.
        let space = unsafe { libc::CMSG_SPACE(fd_bytes) } as usize;
        debug_assert!(space <= size_of::<[u64; 8]>());
        msg.msg_control = cmsg_buf.as_mut_ptr() as *mut c_void;
        msg.msg_controllen = space;
        // SAFETY: msg_control points at `space` writable bytes, enough for one header.
        let cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        // SAFETY: `cmsg` points into `cmsg_buf` (checked non-null by construction), and the
        // data area holds `fd_bytes` bytes.
        unsafe {
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes) as usize;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr() as *const u8,
                libc::CMSG_DATA(cmsg),
                fd_bytes as usize,
            );
        }
    }
    // SAFETY: `msg` and everything it points to are live for the call.
    let n = check_size(unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) })?;
    if n != data.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "short datagram send",
        ));
    }
    Ok(())
}

/// Receives one datagram into `buf`, returning its length and any descriptors it carried.
/// A datagram larger than `buf` is an error (never silently cut).
pub fn recv_with_fds(sock: &OwnedFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut c_void,
        iov_len: buf.len(),
    };
    let mut cmsg_buf = [MaybeUninit::<u64>::zeroed(); 8];
    // SAFETY: msghdr is plain old data; all-zero is valid.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cmsg_buf.as_mut_ptr() as *mut c_void;
    msg.msg_controllen = size_of::<[u64; 8]>();
    // SAFETY: `msg` and the buffers it points to are live and writable for the call.
    let n =
        check_size(unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) })?;
    let mut fds = Vec::new();
    // SAFETY: the kernel filled msg_control/msg_controllen; the CMSG_* macros walk it.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !cmsg.is_null() {
        // SAFETY: `cmsg` is non-null and points inside the control buffer.
        let (level, kind, len) =
            unsafe { ((*cmsg).cmsg_level, (*cmsg).cmsg_type, (*cmsg).cmsg_len) };
        if level == libc::SOL_SOCKET && kind == libc::SCM_RIGHTS {
            // SAFETY: CMSG_LEN is a pure computation.
            let header = unsafe { libc::CMSG_LEN(0) } as usize;
            let count = len.saturating_sub(header) / size_of::<RawFd>();
            for i in 0..count {
                // SAFETY: the data area holds `count` descriptors; read unaligned.
                let fd = unsafe {
                    std::ptr::read_unaligned((libc::CMSG_DATA(cmsg) as *const RawFd).add(i))
                };
                // SAFETY: SCM_RIGHTS installed a fresh descriptor in this process for us.
                fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
        // SAFETY: walking the control buffer the kernel filled.
        cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
    }
    if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "handshake datagram truncated",
        ));
    }
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "peer closed the socket",
        ));
    }
    Ok((n, fds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memfd_maps_and_shares() {
        let fd = memfd("quiver-test", 4096).unwrap();
        assert_eq!(file_len(&fd).unwrap(), 4096);
        let a = Mapping::map(&fd, 4096).unwrap();
        let b = Mapping::map(&fd, 4096).unwrap();
        // SAFETY: both mappings are 4096 bytes; offset 100 is in range.
        unsafe {
            *a.as_ptr().add(100) = 42;
            assert_eq!(*b.as_ptr().add(100), 42);
        }
    }

    #[test]
    fn fds_cross_a_socket_pair() {
        let name = format!("quiver-sys-test-{}", getpid());
        let listener = seqpacket_listen(name.as_bytes()).unwrap();
        let client = seqpacket_connect(name.as_bytes()).unwrap();
        let server = accept(&listener).unwrap();
        assert_eq!(peer_pid(&server).unwrap(), getpid());
        let efd = eventfd().unwrap();
        send_with_fds(&client, b"hi", &[efd.as_raw_fd()]).unwrap();
        let mut buf = [0u8; 16];
        let (n, fds) = recv_with_fds(&server, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"hi");
        assert_eq!(fds.len(), 1);
        eventfd_signal(fds[0].as_raw_fd()).unwrap();
        let mut p = [libc::pollfd {
            fd: efd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        assert_eq!(poll(&mut p, Some(Duration::ZERO)).unwrap(), 1);
        eventfd_drain(efd.as_raw_fd());
        assert_eq!(poll(&mut p, Some(Duration::ZERO)).unwrap(), 0);
    }

    #[test]
    fn cross_memory_attach_reads_own_memory() {
        let src = vec![7u8; 10000];
        let mut dst = vec![0u8; 10000];
        let n = process_vm_read(getpid(), &mut dst, src.as_ptr() as u64).unwrap();
        assert_eq!(n, 10000);
        assert_eq!(src, dst);
        assert!(process_vm_read(getpid(), &mut dst, 8).is_err());
    }

    #[test]
    fn pidfd_of_live_process_is_not_readable() {
        let fd = pidfd_open(getpid()).unwrap();
        assert!(!pidfd_exited(&fd));
    }
}
