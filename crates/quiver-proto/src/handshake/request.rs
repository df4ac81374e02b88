//! Who connects to whom, and why a responder refuses.
//!
//! Layer: sans-IO, inside [`crate::handshake`]: plain data carried by a Hello and a
//! refusing Challenge. No logic.

/// Who connects to whom: the identities a Hello carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnectRequest {
    /// The job both ends must belong to.
    pub job_id: u64,
    /// The initiator's rank.
    pub src_rank: u32,
    /// The initiator's endpoint port.
    pub src_port: u16,
    /// The port of the responder's endpoint being connected to.
    pub dst_port: u16,
}

/// Why a responder refuses a well-formed Hello from its own job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// No endpoint is open at the requested port.
    NoSuchEndpoint,
    /// The endpoint takes no more connections now.
    Busy,
}
