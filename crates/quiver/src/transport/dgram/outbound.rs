//! The sending side of a datagram edge ([`DgramOut`]): messages go into the protocol's send
//! window of the engine's connection (`DgramShared::write`), or, when large enough, are
//! sent in place from the caller's buffer (`DgramShared::send_in_place`,
//! `DgramShared::post_in_place`), so the payload is not copied. What the window cannot
//! take yet waits in the edge's queue ([`NetOut`]). A blocking send that must wait lets the
//! endpoint receive meanwhile ([`Meanwhile`]) and sleeps on the engine's descriptor (and
//! the endpoint's others: tcp streams, peers' one-sided request connections), no longer
//! than the protocol's next timer.

use std::sync::Arc;

use super::engine::DgramShared;
use super::in_place::InPlace;
use super::rma::DgramRma;
use crate::addr::Addr;
use crate::config::{Config, TransportKind};
use crate::error::{Error, Result};
use crate::slab::Key;
use crate::transport::edge_context::EdgeContext;
use crate::transport::failure::{lost, Failure};
use crate::transport::meanwhile::{DeadlockWatch, Meanwhile};
use crate::transport::net_edge::{NetOut, NetQueued};
use crate::transport::requests::SendState;
use crate::transport::wait::{wait_fds, Wait, SLEEP_SLICE};
use crate::transport::wire_tag::WireTag;

/// The sending side of a datagram edge (module docs).
#[derive(Debug)]
pub(crate) struct DgramOut {
    pub(crate) net: NetOut,
    /// The engine's id of the connection.
    pub(crate) id: u64,
    kind: TransportKind,
    /// Posted sends handed to the engine in place and not yet released by it: (token,
    /// request). They complete from [`DgramOut::collect_posted`].
    in_place: Vec<(u64, Key)>,
    /// The token the next posted send in place gets.
    next_token: u64,
    /// The blocking send in progress, watched for a send-send deadlock.
    watch: DeadlockWatch,
    /// One-sided operations to the peer (their own connection, opened at the first).
    pub(crate) rma: DgramRma,
    /// The tag of the sends made now ([`DgramOut::set_tag`]; 0 outside a tagged send), or
    /// their active message's word.
    tag: WireTag,
    /// What a waiting blocking send sleeps on (reused).
    pollfds: Vec<libc::pollfd>,
}

/// The engine, which every datagram edge needs; its absence is a failure of the edge.
fn engine_of(local: &crate::transport::local::LocalRank) -> Option<&DgramShared> {
    local.dgram.as_deref()
}

impl DgramOut {
    /// The edge to `peer` over the engine's connection `id` (udp or mem).
    pub(crate) fn new(peer: Addr, id: u64, kind: TransportKind) -> DgramOut {
        DgramOut {
            net: NetOut::new(peer, kind.name(), None),
            id,
            kind,
            in_place: Vec::new(),
            next_token: 0,
            watch: DeadlockWatch::default(),
            tag: WireTag::default(),
            pollfds: Vec::new(),
            rma: DgramRma::default(),
        }
    }

    /// The datagram transport of the edge (udp or mem).
    pub(crate) fn kind(&self) -> TransportKind {
        self.kind
    }

    /// Sets the tag of the sends that follow (the endpoint sets it around a tagged send or
    /// an active message and back to 0 after it): each message carries its own in its
    /// header.
    pub(crate) fn set_tag(&mut self, tag: WireTag) {
        self.tag = tag;
    }

    /// Hands more of `data` to the protocol's send window; true once all of it is taken.
    fn write(
        &self,
        engine: Option<&DgramShared>,
        data: &[u8],
        written: &mut usize,
        started: &mut bool,
    ) -> std::result::Result<bool, Failure> {
        match engine {
            Some(engine) => engine.write(self.id, self.tag, data, written, started),
            None => Err(lost(self.kind, "the datagram engine is gone")),
        }
    }

    /// A blocking send's first step, taken without the endpoint: with no earlier send
    /// queued, a message below the in-place size is tried as [`DgramOut::try_send`], which finishes most sends (the
    /// window takes the message whole). When it would wait, nothing is written and
    /// [`DgramOut::finish_send`] does the rest. The common send so skips the waiting
    /// machinery (the edge taken out of the endpoint's list and put back, the wait's
    /// setup), about a fifth of a udp send's instructions. `None`: `finish_send` sends it.
    pub(crate) fn start_send(
        &mut self,
        data: &[u8],
        cx: &mut EdgeContext<'_>,
    ) -> Option<Result<()>> {
        // Earlier sends still queued: `finish_send` flushes them first (and waits), so the
        // try's own flush of them would be done twice.
        let in_place_min = cx.config.udp_send_in_place_min;
        if !self.net.queue.is_empty() || (in_place_min > 0 && data.len() >= in_place_min) {
            return None;
        }
        match self.try_send(data, cx) {
            Err(Error::WouldBlock) => None,
            result => Some(result),
        }
    }

    /// Blocking send: returns once the protocol's send window took the whole message, or,
    /// for a large message sent in place, once no byte of `data` is lent to the protocol
    /// any more. Earlier queued sends go first. The endpoint receives meanwhile.
    pub(crate) fn finish_send(&mut self, data: &[u8], endpoint: &mut dyn Meanwhile) -> Result<()> {
        let mut wait = Wait::new(endpoint.context().config);
        self.watch = DeadlockWatch::default();
        while !self.net.queue.is_empty() {
            self.progress(&mut endpoint.context())?;
            if self.net.queue.is_empty() {
                break;
            }
            self.wait(&mut wait, "flushing earlier sends", endpoint, false)?;
        }
        let (in_place_min, engine) = {
            let cx = endpoint.context();
            (cx.config.udp_send_in_place_min, cx.local.dgram.clone())
        };
        if let Some(engine) = engine.filter(|engine| {
            in_place_min > 0
                && data.len() >= in_place_min
                && engine.in_place_pays(self.id, data.len())
        }) {
            return self.send_in_place(engine, data, &mut wait, endpoint);
        }
        let (mut written, mut started) = (0, false);
        loop {
            let done = {
                let cx = endpoint.context();
                self.write(engine_of(cx.local), data, &mut written, &mut started)
            };
            match done {
                Ok(true) => return Ok(()),
                Ok(false) => self.wait(
                    &mut wait,
                    "waiting for the peer to take data",
                    endpoint,
                    false,
                )?,
                Err(f) => return Err(self.fail(f, "while sending", &mut endpoint.context())),
            }
        }
    }

    /// The blocking send of a large message (the queue empty): sent from `data` in place;
    /// returns once no byte of `data` is lent to the protocol any more.
    fn send_in_place(
        &mut self,
        engine: Arc<DgramShared>,
        data: &[u8],
        wait: &mut Wait,
        endpoint: &mut dyn Meanwhile,
    ) -> Result<()> {
        let mut progress = InPlace::default();
        loop {
            let sent = engine.send_in_place(
                endpoint.context().local,
                (self.id, self.tag),
                data,
                &mut progress,
            );
            let step = match sent {
                Ok(true) => return Ok(()),
                // `send_in_place` polled the engine.
                Ok(false) => {
                    endpoint.engine_polled();
                    self.wait(wait, "waiting for the peer to take data", endpoint, true)
                }
                Err(f) => Err(self.fail(f, "while sending", &mut endpoint.context())),
            };
            if let Err(e) = step {
                // `data` goes back to the caller: the connection must not need it.
                engine.end_in_place(self.id, data);
                return Err(e);
            }
        }
    }

    /// Non-blocking send: the message is taken whole or not at all.
    pub(crate) fn try_send(&mut self, data: &[u8], cx: &mut EdgeContext<'_>) -> Result<()> {
        if !self.net.queue.is_empty() {
            self.progress(cx)?;
            if !self.net.queue.is_empty() {
                return Err(Error::WouldBlock);
            }
        }
        let engine = engine_of(cx.local);
        if let Some(engine) = engine {
            if !engine.can_take(self.id, data.len()) {
                return Err(Error::WouldBlock);
            }
        }
        let (mut written, mut started) = (0, false);
        match self.write(engine, data, &mut written, &mut started) {
            Ok(true) => Ok(()),
            Ok(false) if written == 0 && !started => Err(Error::WouldBlock),
            Ok(false) => {
                // Part of the message is on its way: the rest must follow.
                self.net
                    .queue_rest(data, (written, started, self.tag), cx.requests);
                Ok(())
            }
            Err(f) => Err(self.fail(f, "while sending", cx)),
        }
    }

    /// Whether a posted send of `len` bytes is sent in place (`udp_post_in_place_min`,
    /// not 0): never copied, its buffer held until every byte is acknowledged.
    pub(crate) fn posts_in_place(len: usize, config: &Config) -> bool {
        let in_place_min = config.udp_post_in_place_min;
        in_place_min > 0 && len >= in_place_min
    }

    /// Posted send. A message of at least `udp_post_in_place_min` bytes is sent in place:
    /// its buffer goes to the engine and the protocol reads its frames from it
    /// (retransmissions included) until every byte is acknowledged; only then does the
    /// request complete.
    pub(crate) fn post_send(&mut self, data: Vec<u8>, cx: &mut EdgeContext<'_>) -> Key {
        let key = cx.requests.sends.insert(SendState::Pending);
        let in_place = DgramOut::posts_in_place(data.len(), cx.config);
        self.net.queue.push_back(NetQueued {
            key: Some(key),
            tag: self.tag,
            data,
            written: 0,
            started: false,
            in_place,
        });
        cx.requests.pending_sends += 1;
        // Failures are recorded in the request.
        let _ = self.progress(cx);
        key
    }

    /// Completes the posted sends in place the engine released, then pushes the queue as
    /// far as the protocol takes it now.
    pub(crate) fn progress(&mut self, cx: &mut EdgeContext<'_>) -> Result<()> {
        self.net.check("while sending")?;
        if !self.in_place.is_empty() {
            self.collect_posted(cx)?;
        }
        let engine = engine_of(cx.local);
        loop {
            let Some(q) = self.net.queue.front_mut() else {
                return Ok(());
            };
            if let (true, Some(engine), Some(key)) = (q.in_place, engine, q.key) {
                let token = self.next_token;
                match engine.post_in_place(self.id, token, q.tag, std::mem::take(&mut q.data)) {
                    Ok(None) => {
                        self.next_token += 1;
                        self.in_place.push((token, key));
                        self.net.queue.pop_front();
                        continue;
                    }
                    Ok(Some(data)) => {
                        q.data = data;
                        return Ok(());
                    }
                    Err(f) => return Err(self.fail(f, "while sending", cx)),
                }
            }
            let (id, kind) = (self.id, self.kind);
            let written = match engine {
                Some(engine) => engine.write(id, q.tag, &q.data, &mut q.written, &mut q.started),
                None => Err(lost(kind, "the datagram engine is gone")),
            };
            match written {
                Ok(true) => self.net.complete_front(cx.requests),
                Ok(false) => return Ok(()),
                Err(f) => return Err(self.fail(f, "while sending", cx)),
            }
        }
    }

    /// Completes the posted sends in place whose buffers the engine released:
    /// acknowledged (the buffer goes back with the request), or the connection failed (the
    /// request fails, and so does the edge).
    fn collect_posted(&mut self, cx: &mut EdgeContext<'_>) -> Result<()> {
        let Some(engine) = engine_of(cx.local) else {
            return Ok(());
        };
        let mut done = Vec::new();
        engine.collect_posted(self.id, &mut done);
        let (peer, kind) = (self.net.peer, self.kind);
        let mut failed = false;
        for (token, data, delivered) in done {
            let Some(position) = self.in_place.iter().position(|&(t, _)| t == token) else {
                continue;
            };
            let (_, key) = self.in_place.swap_remove(position);
            cx.requests.pending_sends -= 1;
            let result = if delivered {
                Ok(data)
            } else {
                failed = true;
                let failure = lost(
                    kind,
                    "the connection failed before the message was acknowledged",
                );
                Err(failure.to_error(peer, "while sending"))
            };
            cx.requests.complete_send(key, result);
        }
        if failed {
            let failure = lost(kind, "the connection failed");
            return Err(self.fail(failure, "while sending", cx));
        }
        Ok(())
    }

    /// Marks the edge failed, fails its queued and in-place requests, returns the error.
    pub(crate) fn fail(
        &mut self,
        failure: Failure,
        during: &'static str,
        cx: &mut EdgeContext<'_>,
    ) -> Error {
        if self.net.failure.is_none() {
            // Posted sends in place: their buffers stay with the engine until the protocol
            // releases them (the connection failed: at once; else when it is forgotten).
            let peer = self.net.peer;
            for (_, key) in self.in_place.drain(..) {
                cx.requests.pending_sends -= 1;
                cx.requests
                    .complete_send(key, Err(failure.to_error(peer, during)));
            }
        }
        self.net.fail(failure, during, cx.requests, cx.addr)
    }

    /// One step of waiting for the protocol to take more (acknowledgements and credit
    /// arrive through the engine). Meanwhile the endpoint receives what it can; `polled`:
    /// the caller has just polled the engine.
    fn wait(
        &mut self,
        wait: &mut Wait,
        what: &'static str,
        endpoint: &mut dyn Meanwhile,
        polled: bool,
    ) -> Result<()> {
        if !polled {
            endpoint.poll_engine();
        }
        endpoint.receive()?;
        let full = endpoint.read_ahead_full(self.net.peer);
        // The sleep watches what the endpoint's meanwhile serves too (tcp streams to read
        // ahead, peers' one-sided request connections), beside the engine's descriptor.
        self.pollfds.clear();
        endpoint.wake_fds(&mut self.pollfds);
        // Posted sends in place of this edge complete meanwhile too (failures are recorded
        // in the requests).
        let mut cx = endpoint.context();
        if cx.requests.pending_sends > 0 {
            let _ = self.progress(&mut cx);
        }
        let engine = engine_of(cx.local).expect("datagram connections need the engine");
        // The send progresses as long as the peer acknowledges more of the stream.
        let mark = if full {
            engine.read_ahead_full(self.id).1
        } else {
            0
        };
        if self
            .watch
            .stuck(full, mark, cx.config.detect, (cx.addr, self.net.peer))
        {
            let name = self.kind.name();
            tracing::warn!(target: "quiver::endpoint", peer = %self.net.peer, transport = name, "send-send deadlock: the peer is blocked sending to this endpoint beyond the read-ahead bound while this endpoint is blocked sending to it");
            return Err(self.fail(Failure::SendDeadlock(name), what, &mut cx));
        }
        self.pollfds.push(libc::pollfd {
            fd: engine.raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        wait_fds(
            &mut self.pollfds,
            || engine.timeout_within(SLEEP_SLICE),
            wait,
            what,
            || true,
        )
    }

    /// Whether everything sent is delivered (or the edge failed): a closing endpoint waits
    /// for this.
    pub(crate) fn settled(&self, engine: &DgramShared) -> bool {
        self.net.failure.is_some() || (self.net.queue.is_empty() && engine.all_acked(self.id))
    }
}
