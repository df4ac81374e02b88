//! An endpoint's active-message handlers, their counters and what a handler sees of its
//! message (`am.rs` runs them). Generic over the endpoint so that the endpoint can hold it
//! without this module importing the endpoint.

use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::slab::Key;

/// An active message as its handler sees it: the sender, the handler id, the header and
/// the payload, views of the buffer it arrived in (valid for the handler's call).
#[derive(Debug, Clone, Copy)]
pub struct ActiveMessage<'a> {
    source: Addr,
    id: u16,
    header: &'a [u8],
    payload: &'a [u8],
    /// The payload's length.
    len: usize,
    /// How a handler registered with [`Endpoint::register_handler_into`](crate::Endpoint::register_handler_into)
    /// got its payload.
    placement: Placement,
}

/// Where the payload of an active message went (`ActiveMessage::placed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Placement {
    /// In the view [`ActiveMessage::payload`] (no buffer was chosen).
    View,
    /// In the buffer the handler's placement chose.
    Placed,
    /// The chosen buffer of this length was too short: the payload is in the view.
    TooShort(usize),
}

impl<'a> ActiveMessage<'a> {
    pub(super) fn new(source: Addr, id: u16, header: &'a [u8], payload: &'a [u8]) -> Self {
        ActiveMessage {
            source,
            id,
            header,
            payload,
            len: payload.len(),
            placement: Placement::View,
        }
    }

    /// A message whose `len`-byte payload is in a chosen buffer (`Placement::Placed`, the
    /// view empty) or, the buffer too short, in `payload`.
    pub(super) fn with_placement(mut self, len: usize, placement: Placement) -> Self {
        self.len = len;
        self.placement = placement;
        self
    }

    /// The payload's length (also when it went to a chosen buffer, where
    /// [`ActiveMessage::payload`] is empty).
    pub fn payload_len(&self) -> usize {
        self.len
    }

    /// Whether the payload went to the buffer the handler's placement chose
    /// ([`Endpoint::register_handler_into`](crate::Endpoint::register_handler_into)): its
    /// first [`ActiveMessage::payload_len`] bytes; [`ActiveMessage::payload`] is then empty.
    /// False for handlers registered with [`Endpoint::register_handler`](crate::Endpoint::register_handler),
    /// when the placement chose no buffer, or when the buffer was too short.
    pub fn placed(&self) -> bool {
        self.placement == Placement::Placed
    }

    /// [`Error::BufferTooSmall`] when the buffer the placement chose was shorter than the
    /// payload: the buffer is handed back untouched and the payload is in
    /// [`ActiveMessage::payload`] (nothing is lost; counted in [`AmStats::place_too_short`]).
    pub fn place_error(&self) -> Option<Error> {
        match self.placement {
            Placement::TooShort(buffer) => Some(Error::BufferTooSmall {
                message: self.len,
                buffer,
            }),
            _ => None,
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

/// What a handler registered with [`Endpoint::register_handler_into`](crate::Endpoint::register_handler_into)
/// sees of its message before the payload moves, to choose a buffer for it.
#[derive(Debug, Clone, Copy)]
pub struct AmArrival<'a> {
    pub(super) source: Addr,
    pub(super) id: u16,
    pub(super) header: &'a [u8],
    pub(super) payload_len: usize,
}

impl<'a> AmArrival<'a> {
    /// The sender.
    pub fn source(&self) -> Addr {
        self.source
    }

    /// The handler id the sender named.
    pub fn id(&self) -> u16 {
        self.id
    }

    /// The whole header the sender gave [`Endpoint::send_am`](crate::Endpoint::send_am).
    pub fn header(&self) -> &'a [u8] {
        self.header
    }

    /// The payload's length: the chosen buffer must hold at least this many bytes.
    pub fn payload_len(&self) -> usize {
        self.payload_len
    }
}

/// A registered handler of an endpoint `E`.
type Handler<E> = Box<dyn FnMut(&mut E, &ActiveMessage<'_>) -> Result<()> + Send>;

/// A handler that chooses the buffer its payload lands in, its buffer type erased: the
/// placement keeps the buffer it chose until the handler runs with it.
pub(super) trait Placing<E>: Send {
    /// Asks the placement for a buffer for `arrival`; whether it chose one.
    fn place(&mut self, arrival: &AmArrival<'_>) -> bool;
    /// The chosen buffer (its whole length), if one was chosen.
    fn buffer(&mut self) -> Option<&mut [u8]>;
    /// Runs the handler with `message`, handing it the chosen buffer (owned), if any.
    fn run(&mut self, ep: &mut E, message: &ActiveMessage<'_>) -> Result<()>;
}

/// [`Placing`] for a placement `P` choosing buffers `B` and a handler `H`.
pub(super) struct PlacingHandler<B, P, H> {
    pub(super) place: P,
    pub(super) handler: H,
    pub(super) chosen: Option<B>,
}

impl<E, B, P, H> Placing<E> for PlacingHandler<B, P, H>
where
    B: AsMut<[u8]> + Send + 'static,
    P: FnMut(&AmArrival<'_>) -> Option<B> + Send + 'static,
    H: FnMut(&mut E, &ActiveMessage<'_>, Option<B>) -> Result<()> + Send + 'static,
{
    fn place(&mut self, arrival: &AmArrival<'_>) -> bool {
        self.chosen = (self.place)(arrival);
        self.chosen.is_some()
    }

    fn buffer(&mut self) -> Option<&mut [u8]> {
        self.chosen.as_mut().map(AsMut::as_mut)
    }

    fn run(&mut self, ep: &mut E, message: &ActiveMessage<'_>) -> Result<()> {
        let chosen = self.chosen.take();
        (self.handler)(ep, message, chosen)
    }
}

/// A registered handler: plain, or one that chooses its payload's buffer.
pub(super) enum Slot<E> {
    Plain(Handler<E>),
    Placing(Box<dyn Placing<E>>),
}

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
    /// Payloads that went to a buffer a handler's placement chose.
    pub placed: u64,
    /// Their bytes.
    pub placed_bytes: u64,
    /// Of those (not empty), the ones copied into the chosen buffer from the buffer they arrived in
    /// (a header before the payload, or a transport that cannot take a message straight
    /// into a chosen buffer: docs/active-messages.md); the others moved straight in.
    pub staged_copies: u64,
    /// Chosen buffers shorter than their payload (the handler got the payload in a view
    /// and its buffer back: [`ActiveMessage::place_error`]).
    pub place_too_short: u64,
}

/// An endpoint's handlers (the endpoint is `E`) and what runs them.
pub(crate) struct AmState<E> {
    /// By handler id; a running handler's slot is empty while it runs.
    pub(super) handlers: Vec<Option<Slot<E>>>,
    /// How many registered handlers choose their payload's buffer (a look asks for the
    /// envelope first only while some do).
    pub(super) placing: usize,
    /// Whether a handler is running now (calls that may not run in one are refused).
    pub(super) in_handler: bool,
    pub(super) stats: AmStats,
    /// Active messages taken in (run, placed, or refused as malformed or for an unknown
    /// handler): a burst of `progress` stops at a look that took none.
    pub(super) taken: u64,
    /// Active messages one `progress` takes in now, 1 to its bound: adapted to the
    /// traffic (`Endpoint::take_in_for_handlers`).
    pub(super) burst: u64,
    /// Whether the last `progress` took a whole burst (the next one that finds messages
    /// at once doubles it).
    pub(super) burst_reached: bool,
    /// Replies queued by handlers (posted sends), reaped by progress.
    pub(super) replies: Vec<Key>,
    /// The header and payload of a send joined into one message.
    pub(super) scratch: Vec<u8>,
    /// What the intake from shm rings takes messages into (`Endpoint::take_in_from_rings`):
    /// its length is kept between messages, so a message no longer than the last is not
    /// zero-filled first.
    pub(super) intake: Vec<u8>,
}

impl<E> Default for AmState<E> {
    fn default() -> Self {
        AmState {
            handlers: Vec::new(),
            placing: 0,
            in_handler: false,
            stats: AmStats::default(),
            taken: 0,
            burst: 1,
            burst_reached: false,
            replies: Vec::new(),
            scratch: Vec::new(),
            intake: Vec::new(),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The placement's buffer is kept between `place` and `run` and handed to the handler
    /// owned, once; a declined placement hands `None`.
    #[test]
    fn a_placing_handler_hands_its_chosen_buffer_back_once() {
        let mut placing = PlacingHandler {
            place: |a: &AmArrival<'_>| (a.payload_len() > 0).then(|| vec![0u8; a.payload_len()]),
            handler: |seen: &mut Vec<Option<Vec<u8>>>, _: &ActiveMessage<'_>, buf| {
                seen.push(buf);
                Ok(())
            },
            chosen: None,
        };
        let placing: &mut dyn Placing<Vec<Option<Vec<u8>>>> = &mut placing;
        let source = Addr::new(1, 0);
        let arrival = |len| AmArrival {
            source,
            id: 3,
            header: b"h",
            payload_len: len,
        };
        assert!(placing.place(&arrival(4)));
        placing.buffer().expect("chosen")[..4].copy_from_slice(b"abcd");
        let mut seen = Vec::new();
        let message = ActiveMessage::new(source, 3, b"h", &[]).with_placement(4, Placement::Placed);
        placing.run(&mut seen, &message).unwrap();
        assert!(placing.buffer().is_none(), "handed over");
        assert!(!placing.place(&arrival(0)));
        placing
            .run(&mut seen, &ActiveMessage::new(source, 3, b"h", &[]))
            .unwrap();
        assert_eq!(seen, [Some(b"abcd".to_vec()), None]);
        assert!(message.placed() && message.place_error().is_none());
        let short =
            ActiveMessage::new(source, 3, b"h", b"abcd").with_placement(4, Placement::TooShort(2));
        assert!(matches!(
            short.place_error(),
            Some(Error::BufferTooSmall {
                message: 4,
                buffer: 2
            })
        ));
    }
}
