//! For tests and diagnostics only: makes this process behave as it would in a container
//! whose seccomp profile forbids cross-memory attach (Docker's default profile does, for
//! processes without `CAP_SYS_PTRACE`), or a thread as it would where io_uring is refused.
//! Nothing in quiver's library calls it; test programs call [`deny_cross_memory_attach`]
//! before they create a context (or [`deny_io_uring_on_this_thread`] on a thread of theirs).

use std::io;

/// `AUDIT_ARCH_*` of the architecture this is built for (`seccomp_data.arch`).
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// Offsets in `struct seccomp_data`: the system call number, then the architecture.
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;

fn statement(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump_if_equal(k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    }
}

/// Installs a seccomp filter on every thread of this process (and, through `fork` and
/// `exec`, on its children) under which `process_vm_readv` and `process_vm_writev` fail with
/// `EPERM`; every other system call is allowed. Sets `no_new_privs` first (needed to install
/// a filter without `CAP_SYS_ADMIN`). It cannot be undone.
///
/// For tests of how quiver behaves where cross-memory attach is refused, and for nothing
/// else.
///
/// # Errors
/// The kernel refused `prctl(PR_SET_NO_NEW_PRIVS)` or the filter (a kernel without
/// seccomp filters).
pub fn deny_cross_memory_attach() -> io::Result<()> {
    deny(
        &[
            libc::SYS_process_vm_readv as u32,
            libc::SYS_process_vm_writev as u32,
        ],
        libc::SECCOMP_FILTER_FLAG_TSYNC,
    )
}

/// [`deny_cross_memory_attach`] on the calling thread only (and the threads and processes
/// it starts): for a test whose ranks are threads of one process, one of them in a
/// "container". It cannot be undone: call it on a thread made for it.
///
/// # Errors
/// As [`deny_cross_memory_attach`].
pub fn deny_cross_memory_attach_on_this_thread() -> io::Result<()> {
    deny(
        &[
            libc::SYS_process_vm_readv as u32,
            libc::SYS_process_vm_writev as u32,
        ],
        0,
    )
}

/// Installs a seccomp filter on the calling thread only (and the threads and processes it
/// starts) under which `io_uring_setup`, `io_uring_enter` and `io_uring_register` fail with
/// `EPERM`, as under Docker's default profile or `kernel.io_uring_disabled=2`. It cannot be
/// undone: call it on a thread made for it.
///
/// For tests of how quiver behaves where io_uring is refused, and for nothing else.
///
/// # Errors
/// As [`deny_cross_memory_attach`].
pub fn deny_io_uring_on_this_thread() -> io::Result<()> {
    deny(
        &[
            libc::SYS_io_uring_setup as u32,
            libc::SYS_io_uring_enter as u32,
            libc::SYS_io_uring_register as u32,
        ],
        0,
    )
}

/// Installs a filter under which the system calls numbered `calls` (at most 8) fail with
/// `EPERM`; `flags` as `seccomp(SECCOMP_SET_MODE_FILTER)` takes them.
fn deny(calls: &[u32], flags: libc::c_ulong) -> io::Result<()> {
    assert!(calls.len() <= 8);
    let load = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let ret = libc::BPF_RET | libc::BPF_K;
    let deny = libc::SECCOMP_RET_ERRNO | (libc::EPERM as u32 & libc::SECCOMP_RET_DATA);
    let n = calls.len() as u8;
    let mut filter = vec![
        statement(load, DATA_ARCH),
        // Another architecture's system call numbers mean other calls: allow them.
        jump_if_equal(AUDIT_ARCH, 0, n + 1),
        statement(load, DATA_NR),
    ];
    for (i, &call) in calls.iter().enumerate() {
        // Equal: jump over the remaining compares and the allow, to the deny.
        filter.push(jump_if_equal(call, n - i as u8, 0));
    }
    filter.push(statement(ret, libc::SECCOMP_RET_ALLOW));
    filter.push(statement(ret, deny));
    let program = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: plain prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `program` points at `filter`, alive for the call; the kernel copies the
    // program and only reads it.
    let installed = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &program as *const libc::sock_fprog,
        )
    };
    if installed != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a child process (the filter cannot be removed): reading our own memory works
    /// before the filter and fails with EPERM after it.
    #[test]
    fn the_filter_refuses_cross_memory_attach_with_eperm() {
        // SAFETY: the child only makes system calls and exits with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
        if pid == 0 {
            let word = 0x5eed_u64;
            let mut copy = [0u8; 8];
            let read = |copy: &mut [u8]| {
                crate::sys::process_vm_read(crate::sys::getpid(), copy, &word as *const u64 as u64)
            };
            let before = matches!(read(&mut copy), Ok(8));
            let filtered = deny_cross_memory_attach().is_ok();
            let after = read(&mut copy).map_err(|e| e.raw_os_error());
            let code = if before && filtered && after == Err(Some(libc::EPERM)) {
                0
            } else {
                1
            };
            // SAFETY: _exit ends the child at once, without running the parent's handlers.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child we forked.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "status {status}"
        );
    }
}
