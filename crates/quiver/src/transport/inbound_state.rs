//! Where an inbound edge stands ([`InboundState`]): open, or ending in one of the ways a
//! receive reports once before the edge is skipped.

/// `repr(u8)`: a tag byte of its own, read by every look at an edge (see `OutEdge`).
#[derive(Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum InboundState {
    Open,
    /// The peer exited: deliver what it wrote, then report its death once.
    Dying,
    /// The peer process has been stopped (milliseconds seen): deliver what it wrote, then
    /// report once.
    Stopped(u64),
    /// The ring failed a check while idle: report once, then skip.
    Broken(String),
    /// Closed gracefully or failed and reported: skipped.
    Done,
}

/// How an inbound edge ended, for [`Error::PeerClosed`](crate::Error::PeerClosed): the peer
/// closed it cleanly (a close after its last message, every message taken), and whether a
/// receive has reported it yet.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PeerEnd {
    /// The peer closed the edge; nothing before the close is left to take.
    pub(crate) closed: bool,
    /// An any-source receive reported the close (a receive naming the peer reports it
    /// every time: nothing else can satisfy it).
    pub(crate) reported: bool,
}
