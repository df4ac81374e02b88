//! Why a connection stopped working ([`Failure`]), kept on the connection and turned into an
//! [`Error`] for every later call on it.

use std::io;

use crate::addr::Addr;
use crate::config::TransportKind;
use crate::error::Error;

/// Why a connection stopped working; turned into an [`Error`] for every later call.
#[derive(Debug, Clone)]
pub(crate) enum Failure {
    Dead,
    /// The peer process has been stopped by a signal: (transport, milliseconds seen).
    Stopped(&'static str, u64),
    Closed,
    /// This endpoint closed the connection (`Endpoint::close`).
    ClosedHere,
    Corrupt(String),
    TimedOut,
    /// A network connection broke: (transport, what happened).
    Lost(&'static str, String),
    /// A blocking send found the peer blocked sending to us (transport).
    SendDeadlock(&'static str),
}

impl Failure {
    pub(crate) fn to_error(&self, peer: Addr, during: &'static str) -> Error {
        match self {
            Failure::Dead => Error::PeerDead { peer, during },
            Failure::Stopped(transport, stopped_ms) => Error::PeerStopped {
                peer,
                transport,
                during,
                stopped_ms: *stopped_ms,
            },
            Failure::Closed => Error::PeerClosed { peer },
            Failure::ClosedHere => Error::ConnectionClosed { peer },
            Failure::Corrupt(detail) => Error::Corrupt {
                peer,
                detail: detail.clone(),
            },
            Failure::TimedOut => Error::Corrupt {
                peer,
                detail: "an earlier blocking send timed out with a rendezvous outstanding".into(),
            },
            Failure::SendDeadlock(transport) => Error::SendDeadlock { peer, transport },
            Failure::Lost(transport, detail) => Error::Unreachable {
                peer,
                transport,
                detail: format!("{detail} ({during})"),
            },
        }
    }
}

/// A network connection broke: `detail` says how.
pub(crate) fn lost(kind: TransportKind, detail: impl Into<String>) -> Failure {
    Failure::Lost(kind.name(), detail.into())
}

pub(crate) fn io_failure(kind: TransportKind, e: &io::Error) -> Failure {
    match e.kind() {
        io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => {
            lost(kind, format!("the connection was reset ({e})"))
        }
        _ => lost(kind, format!("socket error: {e}")),
    }
}

/// A peer that broke the ring protocol: `detail` says how.
pub(crate) fn corrupt_detail(peer: Addr, detail: &str) -> Error {
    Error::Corrupt {
        peer,
        detail: detail.to_string(),
    }
}
