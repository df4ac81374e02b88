//! quiver-pmix: the few calls of the system's PMIx client library (libpmix, Debian's
//! libpmix-dev) that quiver's bootstrap needs when a job is started by `mpirun` or
//! `srun --mpi=pmix`: initialise (rank, size, namespace), put a string, commit, fence,
//! get another rank's string, finalise.
//!
//! Layer: a leaf crate beside `quiver-transport`; `quiver` uses it for
//! `Context::from_env`. The PMIx structures stay on the C side: `src/shim.c` wraps each call
//! behind plain C types, and this crate calls the shim through FFI (each call with a
//! `// SAFETY:` comment). `build.rs` compiles the shim when pkg-config finds `pmix`; without
//! it the crate builds a stub ([`BUILT`] is false and [`Client::init`] returns
//! [`PmixError`] saying so), so the workspace builds on machines without libpmix.
//!
//! PMIx keeps one client per process and counts `init`/`finalize` pairs; a [`Client`] is
//! one such pair (dropping it finalises).

use std::time::Duration;

mod error;
mod limits;

pub use error::{PmixError, Result};
pub use limits::MAX_KEY_BYTES;

include!("build_variable.rs");

/// Whether PMIx support was compiled in (pkg-config found `pmix` when this crate was built).
pub const BUILT: bool = cfg!(quiver_pmix);

/// The version string of the PMIx library linked in (e.g. "OpenPMIx 4.2.2 ..."), or None
/// when PMIx support is not built in.
pub fn version() -> Option<String> {
    imp::version()
}

/// This process's membership of a PMIx job, from `PMIx_Init` to `PMIx_Finalize`.
#[derive(Debug)]
pub struct Client {
    rank: u32,
    size: u32,
    local_size: Option<u32>,
    namespace: String,
    finalized: bool,
}

impl Client {
    /// Connects to the launcher's PMIx server (`PMIx_Init`) and reads this process's rank,
    /// the job size (`PMIX_JOB_SIZE`) and, when offered, the number of ranks on this node
    /// (`PMIX_LOCAL_SIZE`).
    ///
    /// # Errors
    /// [`PmixError`] when PMIx support is not built in, when no PMIx server can be reached
    /// (the process was not started by a PMIx launcher), or when the job size is missing.
    pub fn init() -> Result<Client> {
        let (rank, size, local_size, namespace) = imp::init()?;
        Ok(Client {
            rank,
            size,
            local_size: (local_size > 0).then_some(local_size),
            namespace,
            finalized: false,
        })
    }

    /// This process's rank in the job.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks in the job.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Number of ranks of the job on this node, if the launcher said.
    pub fn local_size(&self) -> Option<u32> {
        self.local_size
    }

    /// The job's PMIx namespace (unique per job while it runs).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Publishes `value` under `key` for every rank of the job (`PMIx_Put` with
    /// `PMIX_GLOBAL`); visible to others after [`Client::commit`] and [`Client::fence`].
    ///
    /// # Errors
    /// [`PmixError`] from PMIx, or for a key or value with a NUL byte or too long.
    pub fn put(&self, key: &str, value: &str) -> Result<()> {
        imp::put(key, value)
    }

    /// Pushes the values put so far to the local PMIx server (`PMIx_Commit`).
    ///
    /// # Errors
    /// [`PmixError`] from PMIx.
    pub fn commit(&self) -> Result<()> {
        imp::commit()
    }

    /// Waits until every rank of the job has reached the fence, collecting everyone's
    /// committed values (`PMIx_Fence` over the whole namespace with `PMIX_COLLECT_DATA`).
    /// `timeout` is passed as `PMIX_TIMEOUT` (whole seconds, at least 1).
    ///
    /// # Errors
    /// [`PmixError`] from PMIx, e.g. a timeout or a rank that died before the fence.
    pub fn fence(&self, timeout: Duration) -> Result<()> {
        imp::fence(timeout_seconds(timeout))
    }

    /// Reads the string rank `rank` published under `key` (`PMIx_Get`, with `timeout` as
    /// `PMIX_TIMEOUT`).
    ///
    /// # Errors
    /// [`PmixError`] from PMIx (e.g. not found), or when the value is not a string.
    pub fn get(&self, rank: u32, key: &str, timeout: Duration) -> Result<String> {
        imp::get(rank, key, timeout_seconds(timeout))
    }

    /// Ends this process's PMIx session (`PMIx_Finalize`); values already read stay valid.
    /// Dropping the client does the same, ignoring errors.
    ///
    /// # Errors
    /// [`PmixError`] from PMIx.
    pub fn finalize(mut self) -> Result<()> {
        self.finalized = true;
        imp::finalize()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if !self.finalized {
            let _ = imp::finalize();
        }
    }
}

fn timeout_seconds(timeout: Duration) -> i32 {
    i32::try_from(timeout.as_secs().max(1)).unwrap_or(i32::MAX)
}

#[cfg(quiver_pmix)]
mod imp {
    //! The real client: FFI to src/shim.c.

    use std::ffi::{c_char, c_int, CStr, CString};

    use crate::error::{PmixError, Result};
    use crate::limits::MAX_KEY_BYTES;

    /// Room for a PMIx namespace (PMIX_MAX_NSLEN is 255) and its NUL.
    const NAMESPACE_CAPACITY: usize = 256;

    extern "C" {
        fn quiver_pmix_init(
            rank: *mut u32,
            size: *mut u32,
            local_size: *mut u32,
            nspace: *mut c_char,
            nspace_capacity: usize,
        ) -> c_int;
        fn quiver_pmix_put_string(key: *const c_char, text: *const c_char) -> c_int;
        fn quiver_pmix_commit() -> c_int;
        fn quiver_pmix_fence(timeout_seconds: c_int) -> c_int;
        fn quiver_pmix_get_string(
            rank: u32,
            key: *const c_char,
            timeout_seconds: c_int,
            out: *mut *mut c_char,
        ) -> c_int;
        fn quiver_pmix_free(text: *mut c_char);
        fn quiver_pmix_finalize() -> c_int;
        fn quiver_pmix_error_string(status: c_int) -> *const c_char;
        fn quiver_pmix_version() -> *const c_char;
    }

    /// Copies a C string PMIx owns (static for the process) into an owned String.
    fn static_text(text: *const c_char) -> String {
        if text.is_null() {
            return String::from("(no description)");
        }
        // SAFETY: PMIx_Error_string and PMIx_Get_version return pointers to NUL-terminated
        // strings in static storage of the library; non-null was checked above.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }

    fn check(call: &'static str, status: c_int) -> Result<()> {
        if status == 0 {
            return Ok(());
        }
        // SAFETY: PMIx_Error_string accepts any status value and returns a static string.
        let text = unsafe { quiver_pmix_error_string(status) };
        Err(PmixError {
            call,
            status: Some(status),
            detail: static_text(text),
        })
    }

    fn c_string(call: &'static str, what: &str, text: &str) -> Result<CString> {
        if what == "key" && text.len() > MAX_KEY_BYTES {
            return Err(PmixError {
                call,
                status: None,
                detail: format!("key of {} bytes is longer than {MAX_KEY_BYTES}", text.len()),
            });
        }
        CString::new(text).map_err(|_| PmixError {
            call,
            status: None,
            detail: format!("the {what} contains a NUL byte"),
        })
    }

    pub(super) fn version() -> Option<String> {
        // SAFETY: PMIx_Get_version needs no initialisation and returns a static string.
        Some(static_text(unsafe { quiver_pmix_version() }))
    }

    pub(super) fn init() -> Result<(u32, u32, u32, String)> {
        let (mut rank, mut size, mut local_size) = (0u32, 0u32, 0u32);
        let mut namespace = [0 as c_char; NAMESPACE_CAPACITY];
        // SAFETY: the four out-pointers are valid for writes for the duration of the call;
        // the shim writes at most NAMESPACE_CAPACITY bytes (NUL included) into `namespace`.
        let status = unsafe {
            quiver_pmix_init(
                &mut rank,
                &mut size,
                &mut local_size,
                namespace.as_mut_ptr(),
                namespace.len(),
            )
        };
        check("PMIx_Init", status)?;
        // SAFETY: on success the shim NUL-terminated `namespace` within its capacity.
        let namespace = unsafe { CStr::from_ptr(namespace.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        if size == 0 || rank >= size {
            let _ = finalize();
            return Err(PmixError {
                call: "PMIx_Init",
                status: None,
                detail: format!("PMIx reported rank {rank} of a job of {size} ranks"),
            });
        }
        Ok((rank, size, local_size, namespace))
    }

    pub(super) fn put(key: &str, value: &str) -> Result<()> {
        let key = c_string("PMIx_Put", "key", key)?;
        let value = c_string("PMIx_Put", "value", value)?;
        // SAFETY: both pointers are NUL-terminated strings alive for the call; PMIx copies
        // the value before returning.
        check("PMIx_Put", unsafe {
            quiver_pmix_put_string(key.as_ptr(), value.as_ptr())
        })
    }

    pub(super) fn commit() -> Result<()> {
        // SAFETY: no arguments; PMIx reports misuse (not initialised) as a status.
        check("PMIx_Commit", unsafe { quiver_pmix_commit() })
    }

    pub(super) fn fence(timeout_seconds: c_int) -> Result<()> {
        // SAFETY: plain integer argument; PMIx reports misuse as a status.
        check("PMIx_Fence", unsafe { quiver_pmix_fence(timeout_seconds) })
    }

    pub(super) fn get(rank: u32, key: &str, timeout_seconds: c_int) -> Result<String> {
        let key = c_string("PMIx_Get", "key", key)?;
        let mut out: *mut c_char = std::ptr::null_mut();
        // SAFETY: `key` is a NUL-terminated string alive for the call, `out` a valid place
        // for the shim to store a malloc'ed copy (or NULL).
        let status =
            unsafe { quiver_pmix_get_string(rank, key.as_ptr(), timeout_seconds, &mut out) };
        check("PMIx_Get", status)?;
        if out.is_null() {
            return Err(PmixError {
                call: "PMIx_Get",
                status: None,
                detail: "PMIx returned no value".into(),
            });
        }
        // SAFETY: on success `out` is a NUL-terminated string the shim malloc'ed; it is read
        // once here and then freed exactly once with the shim's matching free.
        let text = unsafe { CStr::from_ptr(out) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: `out` came from the shim's strdup and is not used after this.
        unsafe { quiver_pmix_free(out) };
        Ok(text)
    }

    pub(super) fn finalize() -> Result<()> {
        // SAFETY: no arguments; PMIx counts init/finalize pairs and reports misuse.
        check("PMIx_Finalize", unsafe { quiver_pmix_finalize() })
    }
}

#[cfg(not(quiver_pmix))]
mod imp {
    //! The stub built without libpmix: every call says so.

    use crate::error::{PmixError, Result};

    fn not_built(call: &'static str) -> PmixError {
        PmixError {
            call,
            status: None,
            detail: "quiver was built without PMIx support (pkg-config did not find `pmix`: \
                     install libpmix-dev and pkg-config, then rebuild)"
                .into(),
        }
    }

    pub(super) fn version() -> Option<String> {
        None
    }

    pub(super) fn init() -> Result<(u32, u32, u32, String)> {
        Err(not_built("PMIx_Init"))
    }

    pub(super) fn put(_key: &str, _value: &str) -> Result<()> {
        Err(not_built("PMIx_Put"))
    }

    pub(super) fn commit() -> Result<()> {
        Err(not_built("PMIx_Commit"))
    }

    pub(super) fn fence(_timeout_seconds: i32) -> Result<()> {
        Err(not_built("PMIx_Fence"))
    }

    pub(super) fn get(_rank: u32, _key: &str, _timeout_seconds: i32) -> Result<String> {
        Err(not_built("PMIx_Get"))
    }

    pub(super) fn finalize() -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_matches_build() {
        assert_eq!(version().is_some(), BUILT);
        if let Some(v) = version() {
            assert!(v.contains("PMIx"), "{v}");
        }
    }

    #[test]
    fn error_text_names_the_call() {
        let e = PmixError {
            call: "PMIx_Fence",
            status: Some(-24),
            detail: "TIMEOUT".into(),
        };
        assert_eq!(e.to_string(), "PMIx_Fence failed: TIMEOUT (status -24)");
        assert_eq!(timeout_seconds(Duration::from_millis(10)), 1);
        assert_eq!(timeout_seconds(Duration::from_secs(30)), 30);
    }
}
