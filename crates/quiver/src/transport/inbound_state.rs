//! Where an inbound edge stands ([`InboundState`]): open, or ending in one of the ways a
//! receive reports once before the edge is skipped.

#[derive(Debug, PartialEq, Eq)]
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
