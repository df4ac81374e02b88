//! Status codes, the mapping from the Rust API's errors, and the thread-local message of
//! the last error (`quiver_strerror`, `quiver_last_error_message`).

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};

use rust_quiver::Error;

/// What a call of the C API returned. `QUIVER_OK` is 0; every other value is an error,
/// described further by quiver_last_error_message(). The numbers are stable: new codes are
/// only ever added at the end.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum quiver_status {
    /// Success.
    QUIVER_OK = 0,
    /// The call would have to wait (a try_ call: nothing arrived yet, the ring is full).
    QUIVER_ERR_WOULD_BLOCK = 1,
    /// The next message is larger than the buffer offered: the message stays queued and
    /// the call's length output holds its size; receive it again with a larger buffer.
    QUIVER_ERR_BUFFER_TOO_SMALL = 2,
    /// The peer process died; its connections with this endpoint are closed.
    QUIVER_ERR_PEER_DEAD = 3,
    /// The peer process was stopped (SIGSTOP) longer than the detection time.
    QUIVER_ERR_PEER_STOPPED = 4,
    /// Both sides block sending to each other over shm and neither receives.
    QUIVER_ERR_SEND_DEADLOCK = 5,
    /// The peer closed the connection (a clean end).
    QUIVER_ERR_PEER_CLOSED = 6,
    /// The peer broke the protocol; the connection was closed.
    QUIVER_ERR_CORRUPT = 7,
    /// The peer announced a message larger than this endpoint accepts.
    QUIVER_ERR_MESSAGE_TOO_LARGE = 8,
    /// The peer cannot be reached over the network.
    QUIVER_ERR_UNREACHABLE = 9,
    /// Nobody accepted the connection before the connect timeout.
    QUIVER_ERR_REFUSED = 10,
    /// The peer does not hold this job's key (or belongs to another job).
    QUIVER_ERR_WRONG_KEY = 11,
    /// The peer speaks another protocol version.
    QUIVER_ERR_VERSION_MISMATCH = 12,
    /// The operating system refused for lack of permission.
    QUIVER_ERR_PERMISSION_DENIED = 13,
    /// A configured transport cannot run on this machine.
    QUIVER_ERR_TRANSPORT_UNAVAILABLE = 14,
    /// Shared memory for a ring or a doorbell could not be created.
    QUIVER_ERR_OUT_OF_SHARED_MEMORY = 15,
    /// A blocking call passed the endpoint's timeout.
    QUIVER_ERR_TIMEOUT = 16,
    /// A one-sided operation failed (not offered by the transport, out of bounds, rights,
    /// alignment, key refused or revoked).
    QUIVER_ERR_RMA = 17,
    /// The caller passed something unusable (NULL where a pointer is needed, a closed
    /// connection, a port already open...).
    QUIVER_ERR_INVALID_ARGUMENT = 18,
    /// A QUIVER_* setting is wrong, or the environment does not describe a job.
    QUIVER_ERR_CONFIG = 19,
    /// The operating system refused something.
    QUIVER_ERR_IO = 20,
    /// The handle is not a live handle of its kind: zero, freed, made up, or (for a
    /// connection) another endpoint's.
    QUIVER_ERR_BAD_HANDLE = 21,
    /// Another thread is inside a call on this endpoint right now.
    QUIVER_ERR_BUSY = 22,
    /// quiver failed internally (a bug: please report it with the message); the endpoint
    /// involved refuses every later call but quiver_endpoint_free.
    QUIVER_ERR_INTERNAL = 23,
}

use quiver_status::*;

/// The status code of a Rust API error.
pub(crate) fn status_of(e: &Error) -> quiver_status {
    match e {
        Error::WouldBlock => QUIVER_ERR_WOULD_BLOCK,
        Error::BufferTooSmall { .. } => QUIVER_ERR_BUFFER_TOO_SMALL,
        Error::PeerDead { .. } => QUIVER_ERR_PEER_DEAD,
        Error::PeerStopped { .. } => QUIVER_ERR_PEER_STOPPED,
        Error::SendDeadlock { .. } => QUIVER_ERR_SEND_DEADLOCK,
        Error::PeerClosed { .. } => QUIVER_ERR_PEER_CLOSED,
        Error::Corrupt { .. } => QUIVER_ERR_CORRUPT,
        Error::MessageTooLarge { .. } => QUIVER_ERR_MESSAGE_TOO_LARGE,
        Error::Unreachable { .. } => QUIVER_ERR_UNREACHABLE,
        Error::Refused { .. } => QUIVER_ERR_REFUSED,
        Error::WrongKey { .. } => QUIVER_ERR_WRONG_KEY,
        Error::VersionMismatch { .. } => QUIVER_ERR_VERSION_MISMATCH,
        Error::PermissionDenied { .. } => QUIVER_ERR_PERMISSION_DENIED,
        Error::TransportUnavailable { .. } => QUIVER_ERR_TRANSPORT_UNAVAILABLE,
        Error::OutOfSharedMemory { .. } => QUIVER_ERR_OUT_OF_SHARED_MEMORY,
        Error::Timeout { .. } => QUIVER_ERR_TIMEOUT,
        Error::RmaUnsupported { .. }
        | Error::RmaOutOfBounds { .. }
        | Error::RmaRights { .. }
        | Error::RmaMisaligned { .. }
        | Error::RmaKeyRefused { .. }
        | Error::RmaRevoked { .. } => QUIVER_ERR_RMA,
        // A closed connection's handle is the caller's misuse, as in C.
        Error::InvalidArgument(_) | Error::ConnectionClosed { .. } => QUIVER_ERR_INVALID_ARGUMENT,
        Error::Config(_) => QUIVER_ERR_CONFIG,
        Error::Io { .. } => QUIVER_ERR_IO,
        // A kind added to the Rust API later: its message still says what happened.
        _ => QUIVER_ERR_INTERNAL,
    }
}

/// A failure of a call: its code and the message quiver_last_error_message() returns.
#[derive(Debug)]
pub(crate) enum Failure {
    /// An error of the Rust API.
    Api(Error),
    /// A failure of the boundary itself (bad handle, NULL, busy, internal).
    Boundary(quiver_status, String),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::Api(e)
    }
}

/// What the boundary tells the caller about its own failures.
pub(crate) fn failure(code: quiver_status, message: impl Into<String>) -> Failure {
    Failure::Boundary(code, message.into())
}

/// The last error's message on this thread: `None` for WouldBlock (kept static so a
/// polling loop of try_ calls allocates nothing).
enum LastError {
    None,
    WouldBlock,
    Message(CString),
}

thread_local! {
    static LAST_ERROR: RefCell<LastError> = const { RefCell::new(LastError::None) };
}

const WOULD_BLOCK_MESSAGE: &CStr =
    c"operation would block (nothing to receive yet, or no room to send now)";
const NO_ERROR_MESSAGE: &CStr = c"no error on this thread yet";

/// Records `failure` as this thread's last error and returns its code.
pub(crate) fn record(failure: Failure) -> quiver_status {
    let (code, message) = match failure {
        Failure::Api(Error::WouldBlock) => {
            LAST_ERROR.with(|last| *last.borrow_mut() = LastError::WouldBlock);
            return QUIVER_ERR_WOULD_BLOCK;
        }
        Failure::Api(e) => (status_of(&e), e.to_string()),
        Failure::Boundary(code, message) => (code, message),
    };
    // An interior NUL cannot come from quiver's messages; replace it rather than lose the
    // message.
    let message = CString::new(message.replace('\0', " "))
        .unwrap_or_else(|_| CString::from(c"(unprintable message)"));
    LAST_ERROR.with(|last| *last.borrow_mut() = LastError::Message(message));
    code
}

/// A static, one-line description of `status`, a quiver_status (never NULL; any other
/// number gives "unknown quiver status"). The string lives as long as the program. Any
/// thread.
#[no_mangle]
pub extern "C" fn quiver_strerror(status: c_int) -> *const c_char {
    // An int, not the enum: a C caller may pass any number, and an enum value outside its
    // variants would be undefined behaviour on the Rust side.
    let text: &'static CStr = match status {
        0 => c"success",
        1 => c"operation would block",
        2 => c"receive buffer too small for the next message (the message is kept)",
        3 => c"peer process died",
        4 => c"peer process stopped by a signal",
        5 => c"send-send deadlock: both sides block sending, neither receives",
        6 => c"peer closed the connection",
        7 => c"connection corrupted by the peer",
        8 => c"peer announced a message larger than this endpoint accepts",
        9 => c"peer unreachable over the network",
        10 => c"connection refused",
        11 => c"wrong job key",
        12 => c"protocol version mismatch",
        13 => c"permission denied",
        14 => c"transport unavailable on this machine",
        15 => c"out of shared memory",
        16 => c"timed out",
        17 => c"one-sided operation failed",
        18 => c"invalid argument",
        19 => c"configuration error",
        20 => c"operating-system error",
        21 => c"bad handle (zero, freed, made up or another endpoint's)",
        22 => c"endpoint busy in another thread",
        23 => c"internal error in quiver",
        _ => c"unknown quiver status",
    };
    text.as_ptr()
}

/// The message of the last call that failed on this thread: what happened, the peer it
/// is about and what to do. Never NULL. The string belongs to quiver and stays valid until
/// the next failing quiver call on this thread; copy it to keep it. Successful calls leave
/// it as it was.
#[no_mangle]
pub extern "C" fn quiver_last_error_message() -> *const c_char {
    LAST_ERROR.with(|last| match &*last.borrow() {
        LastError::None => NO_ERROR_MESSAGE.as_ptr(),
        LastError::WouldBlock => WOULD_BLOCK_MESSAGE.as_ptr(),
        // The CString stays in the thread-local until the next failure replaces it.
        LastError::Message(message) => message.as_ptr(),
    })
}

/// quiver's version, e.g. "0.1.0" (static, never NULL). Any thread.
#[no_mangle]
pub extern "C" fn quiver_version() -> *const c_char {
    const VERSION: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => c"unknown",
        };
    VERSION.as_ptr()
}

#[cfg(test)]
mod tests {
    use std::ffi::CStr;

    use rust_quiver::Addr;

    use super::*;

    fn text(p: *const c_char) -> String {
        // SAFETY: the functions under test return NUL-terminated strings that live at
        // least until the next failing call on this thread.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_owned()
    }

    #[test]
    fn errors_map_to_codes_and_messages() {
        let peer = Addr::new(1, 0);
        let e = Error::PeerClosed { peer };
        let message = e.to_string();
        assert_eq!(record(Failure::Api(e)), QUIVER_ERR_PEER_CLOSED);
        assert_eq!(text(quiver_last_error_message()), message);
        assert_eq!(
            record(Failure::Api(Error::WouldBlock)),
            QUIVER_ERR_WOULD_BLOCK
        );
        assert!(text(quiver_last_error_message()).contains("would block"));
        let code = record(failure(QUIVER_ERR_BAD_HANDLE, "nul\0inside"));
        assert_eq!(code, QUIVER_ERR_BAD_HANDLE);
        assert_eq!(text(quiver_last_error_message()), "nul inside");
        assert_eq!(
            status_of(&Error::BufferTooSmall {
                message: 9,
                buffer: 1
            }),
            QUIVER_ERR_BUFFER_TOO_SMALL
        );
        assert_eq!(status_of(&Error::Config("x".into())), QUIVER_ERR_CONFIG);
    }

    #[test]
    fn every_code_has_its_own_description() {
        let mut seen = std::collections::HashSet::new();
        for code in 0..=QUIVER_ERR_INTERNAL as c_int {
            let t = text(quiver_strerror(code));
            assert_ne!(t, "unknown quiver status", "code {code}");
            assert!(seen.insert(t), "code {code} shares its description");
        }
        for code in [-1, QUIVER_ERR_INTERNAL as c_int + 1, c_int::MAX, c_int::MIN] {
            assert_eq!(text(quiver_strerror(code)), "unknown quiver status");
        }
        assert_eq!(text(quiver_version()), env!("CARGO_PKG_VERSION"));
    }

    #[test]
    fn the_message_is_per_thread() {
        record(failure(QUIVER_ERR_BUSY, "this thread's"));
        std::thread::spawn(|| {
            assert_eq!(
                text(quiver_last_error_message()),
                "no error on this thread yet"
            );
        })
        .join()
        .unwrap();
        assert_eq!(text(quiver_last_error_message()), "this thread's");
    }
}
