//! TEMPORARY stub of the datagram engine (the reliable core is not merged yet).
#![allow(dead_code, missing_docs, clippy::missing_errors_doc)]
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use quiver_proto::handshake::JobKey;

use crate::config::{Config, TransportKind};
use crate::context::ContextShared;
use crate::endpoint::{DgramTakeError as DgramTake, Dest, Failure};
use crate::error::{Error, Result};
use crate::Addr;

#[derive(Debug)]
pub(crate) struct DgramShared {
    kind: TransportKind,
}

impl DgramShared {
    pub(crate) fn bind(kind: TransportKind, _a: SocketAddr, _c: &Config, _j: u64, _k: JobKey) -> Result<DgramShared> {
        Err(Error::Config(format!("{kind} is not available yet")))
    }
    pub(crate) fn kind(&self) -> TransportKind { self.kind }
    pub(crate) fn raw_fd(&self) -> RawFd { -1 }
    pub(crate) fn timeout_within(&self, cap: Duration) -> Duration { cap }
    pub(crate) fn connect(&self, _s: Addr, _d: Addr, _t: SocketAddr, _dl: Instant) -> Result<u64> { unimplemented!() }
    pub(crate) fn poll_io(&self, _ctx: &ContextShared) {}
    pub(crate) fn can_take(&self, _id: u64, _len: usize) -> bool { false }
    pub(crate) fn write(&self, _id: u64, _d: &[u8], _w: &mut usize, _s: &mut bool) -> std::result::Result<bool, Failure> { unimplemented!() }
    pub(crate) fn readable(&self, _id: u64) -> bool { false }
    pub(crate) fn take(&self, _id: u64, _d: &mut Dest<'_>, _w: bool, _c: &Config) -> std::result::Result<Option<usize>, DgramTake> { unimplemented!() }
    pub(crate) fn close(&self, _id: u64) {}
}
