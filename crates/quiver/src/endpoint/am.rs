//! Active messages: a message sent with [`Endpoint::send_am`] names a handler id, and the
//! receiving endpoint runs the handler registered for that id
//! ([`Endpoint::register_handler`]) when the message arrives, inside whichever of its calls
//! takes it in (`progress`, a receive, a wait), with the message's header and payload as
//! views of the buffer it arrived in.
//!
//! On the wire an active message is a plain message (its header, then its payload) after
//! the connection's sticky tag record in its `Am` form, which carries the handler id and
//! the header's length (decision 0077; shm and tcp; the datagram transports refuse it).
//! A look that delivers a message whose record says "active" hands it to
//! [`Endpoint::run_handler`] instead of the caller; a receive's buffer too small for one
//! takes it into a pool buffer instead (`look.rs`). Handlers run with the endpoint marked
//! as inside a handler: calls that block, receive or advance progress return
//! [`Error::InHandler`] there, so a handler can neither deadlock nor run handlers inside
//! itself; replies (`reply`, `reply_am`) never wait there (a reply the connection cannot
//! take now is queued and sent by progress).

use super::handlers::{ActiveMessage, AmStats};
use super::{Connection, Endpoint, SendRequest};
use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::log::ENDPOINT_LOG;
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
        let i = usize::from(id);
        if self.am.handlers.len() <= i {
            self.am.handlers.resize_with(i + 1, || None);
        }
        self.am.handlers[i] = Some(Box::new(handler));
        if self.dgram.holds_recvs() {
            // Receives the datagram engine fills come back to the endpoint, which takes
            // active messages to their handlers (`Endpoint::lone_dgram`).
            self.dgram.withdraw_recvs(&mut self.requests, &self.local);
        }
        Ok(())
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
        let idx = self.outbound_index(conn)?;
        self.outbound[idx].set_tag(am_tag(id, header)?);
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
        let idx = self.outbound_index(conn)?;
        self.outbound[idx].set_tag(am_tag(id, header)?);
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
        let Some((id16, mut handler)) = slot else {
            self.am.stats.unknown_handler += 1;
            tracing::debug!(target: ENDPOINT_LOG, endpoint = %self.addr, peer = %source, id, "active message for an unregistered handler dropped");
            return Err(Error::UnknownHandler { peer: source, id });
        };
        let (header, payload) = bytes.split_at(header_len);
        let message = ActiveMessage::new(source, id16, header, payload);
        self.am.stats.handled += 1;
        self.am.in_handler = true;
        let result = handler(self, &message);
        self.am.in_handler = false;
        // Back in its slot, unless the handler registered another for its id meanwhile.
        if let Some(slot @ None) = self.am.handlers.get_mut(usize::from(id16)) {
            *slot = Some(handler);
        }
        result
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
