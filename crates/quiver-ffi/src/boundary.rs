//! The boundary every C entry point goes through: `catch_unwind` around the call (no
//! panic crosses into C), the status code and the thread-local message, and the checked
//! conversions of C pointers (NULL is an error, not a crash).

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::status::{failure, quiver_status, record, Failure};

/// Runs one C API call: its `Ok` is `QUIVER_OK`; its failure or panic is recorded as this
/// thread's last error and returned as a code.
#[inline]
pub(crate) fn call(f: impl FnOnce() -> Result<(), Failure>) -> quiver_status {
    // The failure becomes its code inside: what crosses out is a code, not the failure
    // (moving a failure-sized result through the common exit costs store-forwarding
    // stalls on the path of every successful call, decision 0104).
    let code = AssertUnwindSafe(|| match f() {
        Ok(()) => quiver_status::QUIVER_OK,
        Err(failure) => record(failure),
    });
    catch_unwind(code).unwrap_or_else(|panic| record(internal(&*panic)))
}

/// The failure a caught panic becomes.
#[cold]
#[inline(never)]
pub(crate) fn internal(panic: &(dyn std::any::Any + Send)) -> Failure {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into());
    failure(
        quiver_status::QUIVER_ERR_INTERNAL,
        format!("quiver failed internally ({what}); this is a bug in quiver: please report it"),
    )
}

/// Writes `value` to the caller's output `out`.
///
/// # Errors
/// `QUIVER_ERR_INVALID_ARGUMENT` when `out` is NULL.
#[inline]
pub(crate) fn put<T>(out: *mut T, value: T, name: &str) -> Result<(), Failure> {
    if out.is_null() {
        return Err(null(name));
    }
    // SAFETY: non-NULL (checked); the header requires an output pointer to point at a
    // writable, aligned object of its type for the duration of the call.
    unsafe { out.write(value) };
    Ok(())
}

/// Writes `value` to the caller's output `out` if it is not NULL (an optional output).
#[inline]
pub(crate) fn put_optional<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: as in `put`: non-NULL, and the header's contract for outputs.
        unsafe { out.write(value) };
    }
}

/// The caller's `len` bytes at `data`; None when `data` is NULL and `len` is not 0 (the
/// message calls' fast path, which leaves saying so to [`bytes`]).
#[inline]
pub(crate) fn some_bytes<'a>(data: *const c_void, len: usize) -> Option<&'a [u8]> {
    if len == 0 {
        return Some(&[]);
    }
    // SAFETY: as in `bytes`, which this is without the failure.
    (!data.is_null()).then(|| unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) })
}

/// The caller's writable `len` bytes at `data`; None when `data` is NULL and `len` is not
/// 0 (the message calls' fast path, which leaves saying so to [`bytes_mut`]).
#[inline]
pub(crate) fn some_bytes_mut<'a>(data: *mut c_void, len: usize) -> Option<&'a mut [u8]> {
    if len == 0 {
        return Some(&mut []);
    }
    // SAFETY: as in `bytes_mut`, which this is without the failure.
    (!data.is_null()).then(|| unsafe { std::slice::from_raw_parts_mut(data.cast::<u8>(), len) })
}

/// The caller's `len` bytes at `data` (NULL allowed when `len` is 0).
///
/// # Errors
/// `QUIVER_ERR_INVALID_ARGUMENT` when `data` is NULL and `len` is not 0.
#[inline]
pub(crate) fn bytes<'a>(data: *const c_void, len: usize, name: &str) -> Result<&'a [u8], Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    if data.is_null() {
        return Err(null(name));
    }
    // SAFETY: non-NULL (checked); the header requires `data` to point at `len` readable
    // bytes that nobody writes during the call; the slice does not outlive the call ('a is
    // chosen by the caller within it).
    Ok(unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) })
}

/// The caller's writable `len` bytes at `data` (NULL allowed when `len` is 0).
///
/// # Errors
/// `QUIVER_ERR_INVALID_ARGUMENT` when `data` is NULL and `len` is not 0.
#[inline]
pub(crate) fn bytes_mut<'a>(
    data: *mut c_void,
    len: usize,
    name: &str,
) -> Result<&'a mut [u8], Failure> {
    if len == 0 {
        return Ok(&mut []);
    }
    if data.is_null() {
        return Err(null(name));
    }
    // SAFETY: non-NULL (checked); the header requires `data` to point at `len` writable
    // bytes that nothing else reads or writes during the call; the slice does not outlive
    // the call.
    Ok(unsafe { std::slice::from_raw_parts_mut(data.cast::<u8>(), len) })
}

// Cold and out of line, as every failure's message is: kept off the path of the calls that
// succeed (decision 0106).
#[cold]
#[inline(never)]
fn null(name: &str) -> Failure {
    failure(
        quiver_status::QUIVER_ERR_INVALID_ARGUMENT,
        format!("{name} is NULL"),
    )
}
