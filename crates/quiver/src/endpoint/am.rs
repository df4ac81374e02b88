//! Active messages: a message sent with [`Endpoint::send_am`] names a handler id, and the
//! receiving endpoint runs the handler registered for that id
//! ([`Endpoint::register_handler`]) when the message arrives, inside whichever of its calls
//! takes it in (`progress`, a receive, a wait), with the message's header and payload as
//! views of the buffer it arrived in.
//!
//! On the wire an active message is a plain message (its header, then its payload) after
//! the connection's sticky tag record in its `Am` form, which carries the handler id and
//! the header's length (decision 0077: shm and tcp; udp, mem and xdp mark it in the
//! stream header instead).
//! A look that delivers a message whose record says "active" hands it to
//! [`Endpoint::run_handler`] instead of the caller; a receive's buffer too small for one
//! takes it into a pool buffer instead (`look.rs`). Handlers run with the endpoint marked
//! as inside a handler: calls that block, receive or advance progress return
//! [`Error::InHandler`] there, so a handler can neither deadlock nor run handlers inside
//! itself; replies (`reply`, `reply_am`) never wait there (a reply the connection cannot
//! take now is queued and sent by progress).

use super::handlers::{
    ActiveMessage, AmArrival, AmStats, Placement, Placing, PlacingHandler, Slot,
};
use super::{Connection, Endpoint, SendRequest};
use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::log::ENDPOINT_LOG;
use crate::transport::dest::Dest;
use crate::transport::requests::SendState;
use crate::transport::wire_tag::WireTag;

/// A joined message larger than this is not kept as scratch after its send.
const SCRATCH_KEEP_BYTES: usize = 1 << 20;

impl Endpoint {
    /// Registers `handler` for active messages with `id` (replacing the one registered for
    /// it, if any). The handler runs on this endpoint's thread, inside whichever call of
    /// this endpoint takes the message in: [`Endpoint::progress`], a receive, a wait (a
    /// program that only serves active messages calls `progress` in a loop, or sleeps on
    /// the endpoint's descriptor between calls). It gets the endpoint and the message; the
    /// message's header and payload are views of the buffer it arrived in, valid for the
    /// call (no copy beyond the one any receive makes). Messages of one sender run their
    /// handlers in the order they were sent, once each.
    ///
    /// A handler must not block: calls that block, receive or advance progress return
    /// [`Error::InHandler`] inside it (docs/active-messages.md lists what it may call).
    /// What it returns is returned by the call that ran it (an error there ends that call;
    /// the message counts as handled).
    ///
    /// # Errors
    /// None today; reserved.
    pub fn register_handler<F>(&mut self, id: u16, handler: F) -> Result<()>
    where
        F: FnMut(&mut Endpoint, &ActiveMessage<'_>) -> Result<()> + Send + 'static,
    {
        self.register_slot(id, Slot::Plain(Box::new(handler)));
        Ok(())
    }

    /// Registers `handler` for active messages with `id`, as [`Endpoint::register_handler`],
    /// with a placement that chooses the buffer the payload lands in. Before the payload
    /// moves, `place` gets the sender, the id, the whole header and the payload's length
    /// ([`AmArrival`]) and returns a buffer of at least that length (a `Vec<u8>`, a
    /// `Box<[u8]>`, a type of the caller's wrapping part of a bigger array), or `None` to
    /// take the payload as [`Endpoint::register_handler`] does (a view of a pool buffer).
    /// Then `handler` runs with the message and the buffer, handed back owned: when
    /// [`ActiveMessage::placed`], the payload is the buffer's first
    /// [`ActiveMessage::payload_len`] bytes (and [`ActiveMessage::payload`] is empty).
    ///
    /// Over shm a payload sent without a header moves once, straight into the chosen
    /// buffer (a rendezvous is pulled into it from the sender's memory); with a header, and
    /// over tcp, it is copied once from the buffer it arrived in ([`AmStats::staged_copies`];
    /// docs/active-messages.md).
    ///
    /// A chosen buffer shorter than the payload loses nothing: the handler runs with the
    /// payload in [`ActiveMessage::payload`], its buffer handed back untouched, and
    /// [`ActiveMessage::place_error`] saying so ([`AmStats::place_too_short`] counts it).
    ///
    /// # Errors
    /// None today; reserved.
    pub fn register_handler_into<B, P, H>(&mut self, id: u16, place: P, handler: H) -> Result<()>
    where
        B: AsMut<[u8]> + Send + 'static,
        P: FnMut(&AmArrival<'_>) -> Option<B> + Send + 'static,
        H: FnMut(&mut Endpoint, &ActiveMessage<'_>, Option<B>) -> Result<()> + Send + 'static,
    {
        let placing = PlacingHandler {
            place,
            handler,
            chosen: None,
        };
        self.register_slot(id, Slot::Placing(Box::new(placing)));
        Ok(())
    }

    fn register_slot(&mut self, id: u16, slot: Slot<Endpoint>) {
        let i = usize::from(id);
        if self.am.handlers.len() <= i {
            self.am.handlers.resize_with(i + 1, || None);
        }
        self.am.handlers[i] = Some(slot);
        self.count_placing();
        if self.dgram.holds_recvs() {
            // Receives the datagram engine fills come back to the endpoint, which takes
            // active messages to their handlers (`Endpoint::lone_dgram`).
            self.dgram.withdraw_recvs(&mut self.requests, &self.local);
        }
    }

    /// Counts the registered handlers that choose their payload's buffer.
    fn count_placing(&mut self) {
        self.am.placing = self
            .am
            .handlers
            .iter()
            .filter(|slot| matches!(slot, Some(Slot::Placing(_))))
            .count();
    }

    /// Removes the handler of `id`; whether there was one. Active messages for `id` are
    /// then [`Error::UnknownHandler`].
    pub fn unregister_handler(&mut self, id: u16) -> bool {
        let had = self
            .am
            .handlers
            .get_mut(usize::from(id))
            .and_then(Option::take)
            .is_some();
        self.count_placing();
        if !self.am.in_handler {
            // No slot is lent to a running handler: the table may shrink (progress stops
            // taking messages in for handlers once none is left).
            while let Some(None) = self.am.handlers.last() {
                self.am.handlers.pop();
            }
        }
        had
    }

    /// Sends an active message for handler `id` of the receiving endpoint: `header` then
    /// `payload`, one message, blocking as [`Endpoint::send`] does, over every transport.
    /// Messages of one connection arrive in order whatever their kind.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a header of 4 GiB or more; otherwise as
    /// [`Endpoint::send`].
    pub fn send_am(
        &mut self,
        conn: Connection,
        id: u16,
        header: &[u8],
        payload: &[u8],
    ) -> Result<()> {
        self.refuse_in_handler("send_am")?;
        self.with_am(conn, id, header, payload, |ep, data| ep.send(conn, data))
    }

    /// [`Endpoint::send_am`] only if that needs no waiting (as [`Endpoint::try_send`]).
    /// Allowed inside a handler.
    ///
    /// # Errors
    /// [`Error::WouldBlock`] (nothing was sent); otherwise as [`Endpoint::send_am`].
    pub fn try_send_am(
        &mut self,
        conn: Connection,
        id: u16,
        header: &[u8],
        payload: &[u8],
    ) -> Result<()> {
        self.with_am(conn, id, header, payload, |ep, data| {
            ep.try_send(conn, data)
        })
    }

    /// [`Endpoint::send_am`] without waiting, as [`Endpoint::post_send`]: the endpoint
    /// holds the message until [`Endpoint::wait_send`], which hands back `header` followed
    /// by `payload` (`payload` itself when `header` is empty). Allowed inside a handler.
    ///
    /// # Errors
    /// As [`Endpoint::send_am`].
    pub fn post_send_am(
        &mut self,
        conn: Connection,
        id: u16,
        header: &[u8],
        payload: Vec<u8>,
    ) -> Result<SendRequest> {
        let idx = self.tag_edge(conn, am_tag(id, header)?);
        let data = if header.is_empty() {
            payload
        } else {
            let mut data = Vec::with_capacity(header.len() + payload.len());
            data.extend_from_slice(header);
            data.extend_from_slice(&payload);
            data
        };
        let result = self.post_send(conn, data);
        self.untag(idx);
        result
    }

    /// Answers `src` (the sender of a message this endpoint received) with an active
    /// message for its handler `id`, on [`Endpoint::reply_connection`]. Outside a handler
    /// it blocks as [`Endpoint::send_am`]; inside one it never waits: what the connection
    /// cannot take now is copied and sent by progress (counted in
    /// [`AmStats::replies_queued`]).
    ///
    /// # Errors
    /// As [`Endpoint::reply_connection`], then as [`Endpoint::send_am`].
    pub fn reply_am(&mut self, src: Addr, id: u16, header: &[u8], payload: &[u8]) -> Result<()> {
        let conn = self.reply_connection(src)?;
        if !self.am.in_handler {
            return self.send_am(conn, id, header, payload);
        }
        match self.try_send_am(conn, id, header, payload) {
            Err(Error::WouldBlock) => {
                let req = self.post_send_am(conn, id, header, payload.to_vec())?;
                self.queue_reply(req);
                Ok(())
            }
            other => other,
        }
    }

    /// [`Endpoint::reply`] inside a handler: sent now if the connection takes it, else
    /// queued (a copy) and sent by progress.
    pub(super) fn reply_in_handler(&mut self, conn: Connection, data: &[u8]) -> Result<()> {
        match self.try_send(conn, data) {
            Err(Error::WouldBlock) => {
                let req = self.post_send(conn, data.to_vec())?;
                self.queue_reply(req);
                Ok(())
            }
            other => other,
        }
    }

    /// The counters of this endpoint's active messages.
    pub fn am_stats(&self) -> AmStats {
        self.am.stats
    }

    /// Whether a handler is running now (inside one, calls that may block are refused).
    pub fn in_handler(&self) -> bool {
        self.am.in_handler
    }

    /// [`Error::InHandler`] for `call` when a handler is running (one test of a flag on the
    /// calls that may block or receive).
    #[inline]
    pub(super) fn refuse_in_handler(&mut self, call: &'static str) -> Result<()> {
        if self.am.in_handler {
            return Err(self.refused(call));
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn refused(&mut self, call: &'static str) -> Error {
        self.am.stats.refused_calls += 1;
        Error::InHandler { call }
    }

    /// Runs `send` with the message `header` + `payload` (joined in scratch when there is a
    /// header) on `conn`'s edge announcing an active message for `id`.
    fn with_am(
        &mut self,
        conn: Connection,
        id: u16,
        header: &[u8],
        payload: &[u8],
        send: impl FnOnce(&mut Endpoint, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let idx = self.tag_edge(conn, am_tag(id, header)?);
        let result = if header.is_empty() {
            send(self, payload)
        } else {
            let mut data = std::mem::take(&mut self.am.scratch);
            data.clear();
            data.extend_from_slice(header);
            data.extend_from_slice(payload);
            let result = send(self, &data);
            if data.capacity() <= SCRATCH_KEEP_BYTES {
                self.am.scratch = data;
            }
            result
        };
        self.untag(idx);
        result
    }

    fn queue_reply(&mut self, req: SendRequest) {
        self.am.stats.replies_queued += 1;
        self.am.replies.push(req.key);
    }

    /// Drops the queued replies that completed (logging and counting a failed one).
    pub(super) fn reap_replies(&mut self) {
        let mut failed = 0;
        let sends = &mut self.requests.sends;
        self.am.replies.retain(|&key| match sends.get_mut(key) {
            Some(SendState::Pending) => true,
            Some(SendState::Done(_)) => {
                if let Some(SendState::Done(Err(e))) = sends.remove(key) {
                    tracing::warn!(target: ENDPOINT_LOG, error = %e, "a queued active-message reply failed");
                    failed += 1;
                }
                false
            }
            None => false,
        });
        self.am.stats.replies_failed += failed;
    }

    /// Whether queued replies wait for progress.
    #[inline]
    pub(super) fn replies_pending(&self) -> bool {
        !self.am.replies.is_empty()
    }

    /// Whether any handler is registered (progress then takes messages in to run them).
    #[inline]
    pub(super) fn has_handlers(&self) -> bool {
        !self.am.handlers.is_empty()
    }

    /// Runs the handler of the active message `bytes` (header then payload) that inbound
    /// edge `edge` delivered with `tag`. An unregistered id is [`Error::UnknownHandler`]
    /// (the message is dropped, counted); a header longer than the message fails the edge
    /// (its next look reports it). The handler's own error is returned.
    pub(super) fn run_handler(&mut self, edge: usize, tag: WireTag, bytes: &[u8]) -> Result<()> {
        self.am.taken += 1;
        let source = self.inbound[edge].peer();
        let (id, header_len) = tag.am_parts();
        let header_len = header_len as usize;
        if header_len > bytes.len() {
            self.am.stats.malformed += 1;
            self.inbound[edge].fail(format!(
                "active message for handler {id} announced a {header_len}-byte header in a \
                 message of {} bytes",
                bytes.len()
            ));
            return Ok(());
        }
        let slot = u16::try_from(id).ok().and_then(|id16| {
            self.am
                .handlers
                .get_mut(usize::from(id16))
                .and_then(Option::take)
                .map(|h| (id16, h))
        });
        let Some((id16, slot)) = slot else {
            self.am.stats.unknown_handler += 1;
            tracing::debug!(target: ENDPOINT_LOG, endpoint = %self.addr, peer = %source, id, "active message for an unregistered handler dropped");
            return Err(Error::UnknownHandler { peer: source, id });
        };
        let (header, payload) = bytes.split_at(header_len);
        let mut handler = match slot {
            Slot::Plain(handler) => handler,
            Slot::Placing(placing) => {
                return self.run_placing(source, id16, header, payload, placing);
            }
        };
        let message = ActiveMessage::new(source, id16, header, payload);
        self.am.stats.handled += 1;
        self.am.in_handler = true;
        let result = handler(self, &message);
        self.am.in_handler = false;
        // Back in its slot, unless the handler registered another for its id meanwhile.
        if let Some(slot @ None) = self.am.handlers.get_mut(usize::from(id16)) {
            *slot = Some(Slot::Plain(handler));
        }
        result
    }

    /// Runs a handler that chooses its payload's buffer, the message already taken in
    /// (`header`, `payload`): the payload is copied into the chosen buffer (a staged copy)
    /// if it fits.
    #[cold]
    #[inline(never)]
    fn run_placing(
        &mut self,
        source: Addr,
        id: u16,
        header: &[u8],
        payload: &[u8],
        mut placing: Box<dyn Placing<Endpoint>>,
    ) -> Result<()> {
        let len = payload.len();
        let arrival = AmArrival {
            source,
            id,
            header,
            payload_len: len,
        };
        let mut placement = Placement::View;
        if placing.place(&arrival) {
            if let Some(buf) = placing.buffer() {
                if buf.len() >= len {
                    buf[..len].copy_from_slice(payload);
                    // An empty payload copies nothing.
                    self.am.stats.staged_copies += u64::from(len > 0);
                    self.count_placed(len);
                    placement = Placement::Placed;
                } else {
                    placement = self.too_short(buf.len());
                }
            }
        }
        let view = if placement == Placement::Placed {
            &[][..]
        } else {
            payload
        };
        let message = ActiveMessage::new(source, id, header, view).with_placement(len, placement);
        self.finish_placing(id, placing, &message)
    }

    /// Takes shm inbound edge `i`'s next message as a look into `dest` does, except that an
    /// active message without a header for a handler that chooses its payload's buffer
    /// moves straight into the buffer it chooses (a look with an empty destination tells
    /// the message's length and handler first, leaving it in place). Used only while such
    /// handlers are registered.
    pub(super) fn look_placing(
        &mut self,
        i: usize,
        dest: &mut Dest<'_>,
        wait: bool,
    ) -> Result<Option<usize>> {
        let len = match self.look_at(i, &mut Dest::Slice(&mut []), false, false) {
            Err(Error::BufferTooSmall { message, .. }) => message,
            Ok(Some(empty)) => {
                // An empty message, taken whole (its tag tells what it is): `dest` holds it
                // as a look into it would (an owned buffer's length set to 0).
                dest.prepare(empty as u64)?;
                return Ok(Some(empty));
            }
            // Nothing, or an error.
            other => return other,
        };
        let tag = self.inbound[i].next_tag();
        let (id, header_len) = tag.am_parts();
        let placing = match u16::try_from(id) {
            Ok(id16) if tag.am && header_len == 0 => {
                match self.am.handlers.get_mut(usize::from(id16)) {
                    Some(slot @ Some(Slot::Placing(_))) => match slot.take() {
                        Some(Slot::Placing(placing)) => Some((id16, placing)),
                        _ => None,
                    },
                    _ => None,
                }
            }
            _ => None,
        };
        let Some((id, placing)) = placing else {
            return self.look_at(i, dest, wait, false);
        };
        self.place_straight(i, id, len, placing).map(|()| None)
    }

    /// Edge `i`'s next message, an active message of `len` payload bytes without a header
    /// for `placing`'s handler `id`, into the buffer the placement chooses (a pool buffer
    /// when it chooses none or one too short), then the handler.
    #[cold]
    #[inline(never)]
    fn place_straight(
        &mut self,
        i: usize,
        id: u16,
        len: usize,
        mut placing: Box<dyn Placing<Endpoint>>,
    ) -> Result<()> {
        self.am.taken += 1;
        let source = self.inbound[i].peer();
        let arrival = AmArrival {
            source,
            id,
            header: &[],
            payload_len: len,
        };
        let mut short = None;
        if placing.place(&arrival) {
            if let Some(buf) = placing.buffer() {
                if buf.len() >= len {
                    let got = self.look_at(i, &mut Dest::Slice(&mut buf[..len]), false, false);
                    return match got {
                        Ok(Some(n)) if n == len && self.inbound[i].tag().am => {
                            self.count_placed(len);
                            let message = ActiveMessage::new(source, id, &[], &[])
                                .with_placement(len, Placement::Placed);
                            self.finish_placing(id, placing, &message)
                        }
                        // Not reached: the look that told the message left it in place.
                        other => {
                            self.put_back(id, placing);
                            other.map(|_| ())
                        }
                    };
                }
                short = Some(buf.len());
            }
        }
        let mut pooled = self.requests.pool.take(0);
        let got = self.look_at(i, &mut Dest::Owned(&mut pooled), false, false);
        let result = match got {
            Ok(Some(n)) if self.inbound[i].tag().am => {
                let placement = match short {
                    Some(buffer) => self.too_short(buffer),
                    None => Placement::View,
                };
                let message =
                    ActiveMessage::new(source, id, &[], &pooled[..n]).with_placement(n, placement);
                self.finish_placing(id, placing, &message)
            }
            // Not reached: the look that told the message left it in place.
            other => {
                self.put_back(id, placing);
                other.map(|_| ())
            }
        };
        self.requests.pool.give(pooled);
        result
    }

    fn count_placed(&mut self, len: usize) {
        self.am.stats.placed += 1;
        self.am.stats.placed_bytes += len as u64;
    }

    fn too_short(&mut self, buffer: usize) -> Placement {
        self.am.stats.place_too_short += 1;
        Placement::TooShort(buffer)
    }

    /// Runs `placing`'s handler with `message`, then puts it back in its slot.
    fn finish_placing(
        &mut self,
        id: u16,
        mut placing: Box<dyn Placing<Endpoint>>,
        message: &ActiveMessage<'_>,
    ) -> Result<()> {
        self.am.stats.handled += 1;
        self.am.in_handler = true;
        let result = placing.run(self, message);
        self.am.in_handler = false;
        self.put_back(id, placing);
        result
    }

    /// Back in its slot, unless a handler registered another for its id meanwhile.
    fn put_back(&mut self, id: u16, placing: Box<dyn Placing<Endpoint>>) {
        if let Some(slot @ None) = self.am.handlers.get_mut(usize::from(id)) {
            *slot = Some(Slot::Placing(placing));
        }
        self.count_placing();
    }
}

/// The tag state announcing an active message for `id` with `header`.
fn am_tag(id: u16, header: &[u8]) -> Result<WireTag> {
    let header_len = u32::try_from(header.len()).map_err(|_| {
        Error::InvalidArgument(format!(
            "active-message header of {} bytes: must be under 4 GiB",
            header.len()
        ))
    })?;
    Ok(WireTag::am(id, header_len))
}
