//! Receiving: blocking, non-blocking, pooled and posted receives from any peer (readiness
//! for poll/epoll, `arm`, is `readiness.rs`'s).

use super::matching::MatchSpec;
use super::{Endpoint, RecvRequest};
use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::pool::PooledBuf;
use crate::transport::dest::Dest;
use crate::transport::requests::{RecvCompletion, RecvState};
use crate::transport::wait::Wait;

impl Endpoint {
    /// Receives the next message from any connected peer into `buf`, blocking until one
    /// arrives. Returns its length and sender.
    ///
    /// # Errors
    /// [`Error::BufferTooSmall`] (the message stays queued), a peer error of one inbound
    /// connection (reported once; the others keep working), [`Error::Timeout`].
    pub fn recv(&mut self, buf: &mut [u8]) -> Result<(usize, Addr)> {
        self.refuse_in_handler("recv")?;
        if !self.matcher.is_idle() {
            return self.recv_any_matched(buf);
        }
        let mut wait = Wait::new(&self.config);
        loop {
            if self.requests.posted_recvs.is_empty() {
                // One tcp or datagram edge alone takes a short path (`look.rs`).
                let looked = match self.look_lone(buf) {
                    Some(looked) => looked,
                    None => self.poll_once(&mut Dest::Slice(buf), true),
                };
                match looked {
                    // Rebuilt, not handed on: a copy of the pair would read its narrow
                    // stores back with one wide load (a store-forwarding stall).
                    Ok(Some((len, source))) => {
                        return Ok((len, Addr::new(source.rank, source.port)))
                    }
                    Ok(None) => {
                        if let Some(end) = self.end_of(None) {
                            return Err(end);
                        }
                    }
                    Err(e) => return Err(self.uncommit(buf, e)),
                }
            }
            self.advance();
            if let Err(e) = self.idle(&mut wait, "waiting for a message") {
                return Err(self.uncommit(buf, e));
            }
        }
    }

    /// Receives a message into `buf` if one is complete now.
    ///
    /// # Errors
    /// [`Error::WouldBlock`] if none is waiting (to sleep until one arrives, see
    /// [`Endpoint::arm`]); otherwise as [`Endpoint::recv`].
    pub fn try_recv(&mut self, buf: &mut [u8]) -> Result<(usize, Addr)> {
        self.refuse_in_handler("try_recv")?;
        if !self.matcher.is_idle() {
            let got = self.try_recv_matching(MatchSpec::ANY, buf)?;
            return Ok((got.len as usize, got.source));
        }
        self.advance();
        if self.requests.posted_recvs.is_empty() {
            if let Some(got) = self.poll_once(&mut Dest::Slice(buf), false)? {
                return Ok(got);
            }
            if let Some(end) = self.end_of(None) {
                return Err(end);
            }
        }
        self.would_block()
    }

    /// Receives the next message into a buffer from the endpoint's pool, blocking; the
    /// buffer returns to the pool when the [`PooledBuf`] is dropped.
    ///
    /// # Errors
    /// As [`Endpoint::recv`], without `BufferTooSmall`.
    pub fn recv_pooled(&mut self) -> Result<PooledBuf> {
        self.refuse_in_handler("recv_pooled")?;
        let mut wait = Wait::new(&self.config);
        let mut buf = self.requests.pool.take(0);
        loop {
            if !self.matcher.is_idle() {
                if let Some(got) = self.take_any_pooled(true)? {
                    return Ok(got);
                }
                if let Some(end) = self.end_of(None) {
                    return Err(end);
                }
            } else if self.requests.posted_recvs.is_empty() {
                if let Some((_, src)) = self.poll_once(&mut Dest::Owned(&mut buf), true)? {
                    return Ok(PooledBuf::new(buf, src, self.requests.pool.clone()));
                }
                if let Some(end) = self.end_of(None) {
                    self.requests.pool.give(buf);
                    return Err(end);
                }
            }
            self.advance();
            self.idle(&mut wait, "waiting for a message")?;
        }
    }

    /// Non-blocking [`Endpoint::recv_pooled`].
    ///
    /// # Errors
    /// [`Error::WouldBlock`] if no complete message is waiting.
    pub fn try_recv_pooled(&mut self) -> Result<PooledBuf> {
        self.refuse_in_handler("try_recv_pooled")?;
        self.advance();
        if !self.matcher.is_idle() {
            if let Some(got) = self.take_any_pooled(false)? {
                return Ok(got);
            }
            if let Some(end) = self.end_of(None) {
                return Err(end);
            }
        } else if self.requests.posted_recvs.is_empty() {
            let mut buf = self.requests.take_scratch();
            if let Some((_, src)) = self.poll_once(&mut Dest::Owned(&mut buf), false)? {
                return Ok(PooledBuf::new(buf, src, self.requests.pool.clone()));
            }
            self.requests.keep_scratch(buf);
            if let Some(end) = self.end_of(None) {
                return Err(end);
            }
        }
        self.would_block()
    }

    pub(super) fn would_block<T>(&mut self) -> Result<T> {
        self.idle_polls = self.idle_polls.wrapping_add(1);
        if self.idle_polls.is_multiple_of(256) {
            // Nothing is arriving: let senders see the space we freed, and notice dead peers.
            self.flush_inbound();
            if self.config.detect.is_some() {
                self.check_liveness_throttled();
            }
        }
        Err(Error::WouldBlock)
    }

    /// Posts a receive: the next message (from any peer) not claimed by an earlier posted
    /// receive goes into `buf` (up to `buf.len()` bytes).
    ///
    /// # Errors
    /// None today; reserved.
    pub fn post_recv(&mut self, buf: Vec<u8>) -> Result<RecvRequest> {
        self.refuse_in_handler("post_recv")?;
        if !self.matcher.is_idle() {
            // Behind the matching receives posted before it, or for a message waiting.
            return self.post_recv_matching(MatchSpec::ANY, buf);
        }
        let key = self.requests.recvs.insert(RecvState::Pending(buf));
        self.requests.posted_recvs.push_back(key);
        self.progress_recvs();
        Ok(RecvRequest { key })
    }

    /// Whether a posted receive has completed.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a request of another endpoint.
    pub fn test_recv(&mut self, req: &RecvRequest) -> Result<bool> {
        self.refuse_in_handler("test_recv")?;
        self.progress()?;
        match self.requests.recvs.get_mut(req.key) {
            Some(RecvState::Pending(_) | RecvState::Bound) => Ok(false),
            Some(RecvState::Done(_)) => Ok(true),
            None => Err(Error::InvalidArgument("unknown receive request".into())),
        }
    }

    /// Waits for a posted receive.
    ///
    /// # Errors
    /// [`Error::BufferTooSmall`] (the buffer is dropped, the message stays queued) or a
    /// peer error that occurred while this receive was first in line.
    pub fn wait_recv(&mut self, req: RecvRequest) -> Result<RecvCompletion> {
        self.wait_recv_ready(&req)?;
        match self.requests.recvs.remove(req.key) {
            Some(RecvState::Done(r)) => r,
            _ => unreachable!("wait_recv_ready returned Ok: the receive is done"),
        }
    }

    /// Waits until posted receive `req` has completed, without ending it: afterwards
    /// [`Endpoint::test_recv`] is true and [`Endpoint::wait_recv`] returns at once with
    /// its outcome. A failed wait ([`Error::Timeout`], an error of progress) leaves the
    /// receive posted (a later message still goes into it), so a caller that holds
    /// requests by number (the C and Python bindings) can wait again or cancel it.
    ///
    /// # Errors
    /// [`Error::Timeout`], an error of progress, [`Error::InvalidArgument`] for a request
    /// of another endpoint; not the receive's own outcome (`wait_recv` gives that).
    pub fn wait_recv_ready(&mut self, req: &RecvRequest) -> Result<()> {
        self.refuse_in_handler("wait_recv")?;
        let mut wait = Wait::new(&self.config);
        loop {
            self.progress()?;
            match self.requests.recvs.get_mut(req.key) {
                Some(RecvState::Done(_)) => return Ok(()),
                Some(RecvState::Pending(_) | RecvState::Bound) => {}
                None => return Err(Error::InvalidArgument("unknown receive request".into())),
            }
            self.idle(&mut wait, "waiting for a posted receive")?;
        }
    }

    /// Fills the posted receives, in posting order, with what the edges have.
    pub(super) fn progress_recvs(&mut self) {
        // On an endpoint whose one inbound edge is a datagram connection, the engine takes
        // the posted receives' buffers (frames go straight into them).
        let lone = self.lone_dgram();
        self.dgram.bind_recvs(lone, &mut self.requests, &self.local);
        while let Some(&key) = self.requests.posted_recvs.front() {
            let mut buf = match self.requests.recvs.get_mut(key) {
                Some(RecvState::Pending(buf)) => std::mem::take(buf),
                _ => {
                    self.requests.posted_recvs.pop_front();
                    continue;
                }
            };
            let mut dest = Dest::Posted {
                key,
                buf: &mut buf,
                bound: false,
            };
            let result = self.poll_once(&mut dest, false);
            if let Dest::Posted { bound: true, .. } = dest {
                // Matched to a large tcp message, which now holds the buffer; the next
                // posted receive may take the next message.
                self.requests.posted_recvs.pop_front();
                continue;
            }
            let state = match result {
                Ok(None) => match self.end_of(None) {
                    // Nothing more can come: the clean end goes to the first in line.
                    Some(end) => RecvState::Done(Err(end)),
                    None => {
                        if let Some(RecvState::Pending(b)) = self.requests.recvs.get_mut(key) {
                            *b = buf;
                        }
                        return;
                    }
                },
                Ok(Some((len, src))) => RecvState::Done(Ok(RecvCompletion {
                    buf,
                    len,
                    src,
                    tag: self.last_tag.value,
                })),
                Err(e) => RecvState::Done(Err(e)),
            };
            self.requests.set_recv(key, state);
            self.requests.posted_recvs.pop_front();
        }
    }

    /// Moves on every message bound to a posted receive (a large tcp message read from the
    /// socket, a datagram message whose frames the engine placed); completes the request
    /// once its message is whole, or with the edge's error.
    pub(super) fn progress_bound_recvs(&mut self) {
        for inb in self.inbound.iter_mut() {
            if let Some((key, outcome)) = inb.progress_bound(&self.local) {
                self.requests.bound_recvs -= 1;
                self.requests.set_recv(key, RecvState::Done(outcome));
            }
        }
    }
}

impl Endpoint {
    /// A blocking plain `recv` on an endpoint whose matcher holds messages or receives:
    /// any source, any tag, in arrival order behind the receives posted before it.
    #[cold]
    #[inline(never)]
    fn recv_any_matched(&mut self, buf: &mut [u8]) -> Result<(usize, Addr)> {
        let got = self.recv_matching(MatchSpec::ANY, buf)?;
        Ok((got.len as usize, got.source))
    }
}
