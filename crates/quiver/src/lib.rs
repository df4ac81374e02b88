//! quiver: the public API (contract stub; the implementation lands next).
#![allow(missing_docs, unused_variables)]
use std::os::fd::{AsRawFd, RawFd};

pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("operation would block")]
    WouldBlock,
    #[error("receive buffer of {buffer} bytes is too small for a {message}-byte message")]
    BufferTooSmall { message: usize, buffer: usize },
    #[error("peer {peer} died")]
    PeerDead { peer: Addr },
    #[error("timed out")]
    Timeout,
    #[error("{0}")]
    Other(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Addr {
    pub rank: u32,
    pub port: u16,
}
impl Addr {
    pub fn new(rank: u32, port: u16) -> Self {
        Addr { rank, port }
    }
}
impl std::fmt::Display for Addr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.rank, self.port)
    }
}

#[derive(Debug, Clone)]
pub struct Config {}

pub struct Context {}
impl Context {
    pub fn from_env() -> Result<Context> {
        todo!()
    }
    pub fn rank(&self) -> u32 {
        todo!()
    }
    pub fn size(&self) -> u32 {
        todo!()
    }
    pub fn config(&self) -> &Config {
        todo!()
    }
    pub fn endpoint(&self, port: u16) -> Result<Endpoint> {
        todo!()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Connection {
    index: u32,
    peer: Addr,
}
impl Connection {
    pub fn peer(&self) -> Addr {
        self.peer
    }
}

pub struct SendRequest {}
pub struct RecvRequest {}
pub struct RecvCompletion {
    pub buf: Vec<u8>,
    pub len: usize,
    pub src: Addr,
}
pub struct PooledBuf {}
impl PooledBuf {
    pub fn src(&self) -> Addr {
        todo!()
    }
}
impl std::ops::Deref for PooledBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        todo!()
    }
}

pub struct Endpoint {}
impl Endpoint {
    pub fn addr(&self) -> Addr {
        todo!()
    }
    pub fn connect(&mut self, peer: Addr) -> Result<Connection> {
        todo!()
    }
    pub fn send(&mut self, conn: Connection, data: &[u8]) -> Result<()> {
        todo!()
    }
    pub fn try_send(&mut self, conn: Connection, data: &[u8]) -> Result<()> {
        todo!()
    }
    pub fn recv(&mut self, buf: &mut [u8]) -> Result<(usize, Addr)> {
        todo!()
    }
    pub fn try_recv(&mut self, buf: &mut [u8]) -> Result<(usize, Addr)> {
        todo!()
    }
    pub fn recv_pooled(&mut self) -> Result<PooledBuf> {
        todo!()
    }
    pub fn try_recv_pooled(&mut self) -> Result<PooledBuf> {
        todo!()
    }
    pub fn post_send(&mut self, conn: Connection, data: Vec<u8>) -> Result<SendRequest> {
        todo!()
    }
    pub fn test_send(&mut self, req: &SendRequest) -> Result<bool> {
        todo!()
    }
    pub fn wait_send(&mut self, req: SendRequest) -> Result<Vec<u8>> {
        todo!()
    }
    pub fn post_recv(&mut self, buf: Vec<u8>) -> Result<RecvRequest> {
        todo!()
    }
    pub fn test_recv(&mut self, req: &RecvRequest) -> Result<bool> {
        todo!()
    }
    pub fn wait_recv(&mut self, req: RecvRequest) -> Result<RecvCompletion> {
        todo!()
    }
    pub fn progress(&mut self) -> Result<()> {
        todo!()
    }
}
impl AsRawFd for Endpoint {
    fn as_raw_fd(&self) -> RawFd {
        todo!()
    }
}
