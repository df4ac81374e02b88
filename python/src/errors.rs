//! The exception classes, one per kind of the Rust API's error, all under `QuiverError`;
//! each carries `peer` ((rank, port) or None), and `BufferTooSmall` also `message_len` and
//! `buffer_len`.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use rust_quiver::Error;

create_exception!(
    quiver,
    QuiverError,
    PyException,
    "Every error quiver raises."
);
create_exception!(
    quiver,
    WouldBlock,
    QuiverError,
    "A try_ call would have to wait."
);
create_exception!(
    quiver,
    BufferTooSmall,
    QuiverError,
    "The next message is larger than the buffer (it stays queued; `message_len` is its length)."
);
create_exception!(quiver, PeerDead, QuiverError, "The peer process died.");
create_exception!(
    quiver,
    PeerStopped,
    QuiverError,
    "The peer process was stopped longer than the detection time."
);
create_exception!(
    quiver,
    SendDeadlock,
    QuiverError,
    "Both sides block sending to each other over shm and neither receives."
);
create_exception!(
    quiver,
    PeerClosed,
    QuiverError,
    "The peer closed the connection."
);
create_exception!(
    quiver,
    Corrupt,
    QuiverError,
    "The peer broke the protocol; the connection was closed."
);
create_exception!(
    quiver,
    MessageTooLarge,
    QuiverError,
    "The peer announced a message larger than this endpoint accepts."
);
create_exception!(
    quiver,
    Unreachable,
    QuiverError,
    "The peer cannot be reached over the network."
);
create_exception!(
    quiver,
    Refused,
    QuiverError,
    "Nobody accepted the connection before the connect timeout."
);
create_exception!(
    quiver,
    WrongKey,
    QuiverError,
    "The peer does not hold this job's key."
);
create_exception!(
    quiver,
    VersionMismatch,
    QuiverError,
    "The peer speaks another protocol version."
);
create_exception!(
    quiver,
    PermissionDenied,
    QuiverError,
    "The operating system refused for lack of permission."
);
create_exception!(
    quiver,
    TransportUnavailable,
    QuiverError,
    "A configured transport cannot run on this machine."
);
create_exception!(
    quiver,
    OutOfSharedMemory,
    QuiverError,
    "Shared memory for a ring or a doorbell could not be created."
);
create_exception!(
    quiver,
    Timeout,
    QuiverError,
    "A blocking call passed the endpoint's timeout."
);
create_exception!(
    quiver,
    RmaError,
    QuiverError,
    "A one-sided operation failed."
);
create_exception!(
    quiver,
    InvalidArgument,
    QuiverError,
    "The caller passed something unusable."
);
create_exception!(
    quiver,
    ConfigError,
    QuiverError,
    "A QUIVER_* setting is wrong, or the environment describes no job."
);
create_exception!(
    quiver,
    IoError,
    QuiverError,
    "The operating system refused something."
);
create_exception!(
    quiver,
    EndpointBusy,
    QuiverError,
    "Another thread is inside a call on this endpoint."
);

/// Adds the exception classes to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("QuiverError", py.get_type::<QuiverError>())?;
    m.add("WouldBlock", py.get_type::<WouldBlock>())?;
    m.add("BufferTooSmall", py.get_type::<BufferTooSmall>())?;
    m.add("PeerDead", py.get_type::<PeerDead>())?;
    m.add("PeerStopped", py.get_type::<PeerStopped>())?;
    m.add("SendDeadlock", py.get_type::<SendDeadlock>())?;
    m.add("PeerClosed", py.get_type::<PeerClosed>())?;
    m.add("Corrupt", py.get_type::<Corrupt>())?;
    m.add("MessageTooLarge", py.get_type::<MessageTooLarge>())?;
    m.add("Unreachable", py.get_type::<Unreachable>())?;
    m.add("Refused", py.get_type::<Refused>())?;
    m.add("WrongKey", py.get_type::<WrongKey>())?;
    m.add("VersionMismatch", py.get_type::<VersionMismatch>())?;
    m.add("PermissionDenied", py.get_type::<PermissionDenied>())?;
    m.add(
        "TransportUnavailable",
        py.get_type::<TransportUnavailable>(),
    )?;
    m.add("OutOfSharedMemory", py.get_type::<OutOfSharedMemory>())?;
    m.add("Timeout", py.get_type::<Timeout>())?;
    m.add("RmaError", py.get_type::<RmaError>())?;
    m.add("InvalidArgument", py.get_type::<InvalidArgument>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("IoError", py.get_type::<IoError>())?;
    m.add("EndpointBusy", py.get_type::<EndpointBusy>())?;
    Ok(())
}

/// The exception a Rust API error becomes.
pub(crate) fn to_py(py: Python<'_>, e: Error) -> PyErr {
    let message = e.to_string();
    let err = match &e {
        Error::WouldBlock => return WouldBlock::new_err(message),
        Error::BufferTooSmall {
            message: len,
            buffer,
        } => {
            let err = BufferTooSmall::new_err(message);
            let value = err.value(py);
            let _ = value.setattr("message_len", *len);
            let _ = value.setattr("buffer_len", *buffer);
            err
        }
        Error::PeerDead { .. } => PeerDead::new_err(message),
        Error::PeerStopped { .. } => PeerStopped::new_err(message),
        Error::SendDeadlock { .. } => SendDeadlock::new_err(message),
        Error::PeerClosed { .. } => PeerClosed::new_err(message),
        Error::Corrupt { .. } => Corrupt::new_err(message),
        Error::MessageTooLarge { .. } => MessageTooLarge::new_err(message),
        Error::Unreachable { .. } => Unreachable::new_err(message),
        Error::Refused { .. } => Refused::new_err(message),
        Error::WrongKey { .. } => WrongKey::new_err(message),
        Error::VersionMismatch { .. } => VersionMismatch::new_err(message),
        Error::PermissionDenied { .. } => PermissionDenied::new_err(message),
        Error::TransportUnavailable { .. } => TransportUnavailable::new_err(message),
        Error::OutOfSharedMemory { .. } => OutOfSharedMemory::new_err(message),
        Error::Timeout { .. } => Timeout::new_err(message),
        Error::RmaUnsupported { .. }
        | Error::RmaOutOfBounds { .. }
        | Error::RmaRights { .. }
        | Error::RmaMisaligned { .. }
        | Error::RmaKeyRefused { .. }
        | Error::RmaRevoked { .. } => RmaError::new_err(message),
        Error::InvalidArgument(_) | Error::ConnectionClosed { .. } => {
            InvalidArgument::new_err(message)
        }
        Error::Config(_) => ConfigError::new_err(message),
        Error::Io { .. } => IoError::new_err(message),
        // A kind the Rust API adds later: still a QuiverError with its message.
        _ => QuiverError::new_err(message),
    };
    let peer = e.peer().map(|p| (p.rank, p.port));
    let _ = err.value(py).setattr("peer", peer);
    err
}
