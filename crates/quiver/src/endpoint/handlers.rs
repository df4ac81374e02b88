//! An endpoint's active-message handlers, their counters and what a handler sees of its
//! message (`am.rs` runs them). Generic over the endpoint so that the endpoint can hold it
//! without this module importing the endpoint.

use crate::addr::Addr;
use crate::error::Result;
use crate::slab::Key;

/// An active message as its handler sees it: the sender, the handler id, the header and
/// the payload, views of the buffer it arrived in (valid for the handler's call).
#[derive(Debug, Clone, Copy)]
pub struct ActiveMessage<'a> {
    source: Addr,
    id: u16,
    header: &'a [u8],
    payload: &'a [u8],
}

impl<'a> ActiveMessage<'a> {
    pub(super) fn new(source: Addr, id: u16, header: &'a [u8], payload: &'a [u8]) -> Self {
        ActiveMessage {
            source,
            id,
            header,
            payload,
        }
    }

    /// The sender (answer it with [`Endpoint::reply`](crate::Endpoint::reply) or
    /// [`Endpoint::reply_am`](crate::Endpoint::reply_am)).
    pub fn source(&self) -> Addr {
        self.source
    }

    /// The handler id the sender named.
    pub fn id(&self) -> u16 {
        self.id
    }

    /// The header the sender gave [`Endpoint::send_am`](crate::Endpoint::send_am).
    pub fn header(&self) -> &'a [u8] {
        self.header
    }

    /// The payload the sender gave [`Endpoint::send_am`](crate::Endpoint::send_am).
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }
}

/// A registered handler of an endpoint `E`.
type Handler<E> = Box<dyn FnMut(&mut E, &ActiveMessage<'_>) -> Result<()> + Send>;

/// Counters of an endpoint's active messages ([`Endpoint::am_stats`](crate::Endpoint::am_stats)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AmStats {
    /// Handlers run (one per active message received).
    pub handled: u64,
    /// Active messages dropped because no handler was registered for their id (each one
    /// [`Error::UnknownHandler`](crate::Error::UnknownHandler) from the call that took it in).
    pub unknown_handler: u64,
    /// Active messages whose header was longer than the message (a peer that does not
    /// speak the protocol: its connection was failed).
    pub malformed: u64,
    /// Calls a handler made that a handler may not ([`Error::InHandler`](crate::Error::InHandler)).
    pub refused_calls: u64,
    /// Replies a handler made that the connection could not take at once: queued, sent by
    /// progress.
    pub replies_queued: u64,
    /// Of those, the ones that failed (logged; the connection's error also comes from its
    /// next send).
    pub replies_failed: u64,
}

/// An endpoint's handlers (the endpoint is `E`) and what runs them.
pub(crate) struct AmState<E> {
    /// By handler id; a running handler's slot is empty while it runs.
    pub(super) handlers: Vec<Option<Handler<E>>>,
    /// Whether a handler is running now (calls that may not run in one are refused).
    pub(super) in_handler: bool,
    pub(super) stats: AmStats,
    /// Replies queued by handlers (posted sends), reaped by progress.
    pub(super) replies: Vec<Key>,
    /// The header and payload of a send joined into one message.
    pub(super) scratch: Vec<u8>,
}

impl<E> Default for AmState<E> {
    fn default() -> Self {
        AmState {
            handlers: Vec::new(),
            in_handler: false,
            stats: AmStats::default(),
            replies: Vec::new(),
            scratch: Vec::new(),
        }
    }
}

impl<E> std::fmt::Debug for AmState<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmState")
            .field("handlers", &self.handlers.iter().flatten().count())
            .field("in_handler", &self.in_handler)
            .field("stats", &self.stats)
            .finish()
    }
}
