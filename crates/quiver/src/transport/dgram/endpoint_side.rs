//! What an endpoint keeps about the datagram engine besides its edges ([`DgramSide`]):
//! whether it just polled the engine, the engine's news count at which no edge had
//! anything, and the posted receives it handed to the engine. Also the endpoint's short
//! receive path for a lone datagram edge, and closing: waiting until what was sent is
//! acknowledged, then until each Close is.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::engine::DgramShared;
use super::inbound::DgramIn;
use super::outbound::DgramOut;
use super::posted_reads::RecvDone;
use crate::addr::Addr;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::slab::Key;
use crate::transport::edge_context::EdgeContext;
use crate::transport::local::LocalRank;
use crate::transport::requests::{RecvCompletion, RecvState, Requests};

/// Shortest wait for the acknowledgement of a datagram connection's Close.
const CLOSE_LINGER_MIN: Duration = Duration::from_millis(50);
/// Longest wait for the acknowledgement of a datagram connection's Close.
const CLOSE_LINGER_MAX: Duration = Duration::from_secs(1);

/// The lone datagram edge posted receives may be handed to: (engine id, peer, transport).
pub(crate) type LoneEdge = (u64, Addr, &'static str);

/// An endpoint's datagram bookkeeping (module docs).
#[derive(Debug, Default)]
pub(crate) struct DgramSide {
    /// A receive polled the engine since the last `progress`.
    pub(crate) engine_polled: bool,
    /// The engine's news count at which no datagram edge had anything to take.
    pub(crate) seen: Option<u64>,
    /// Posted receives handed to the engine ([`RecvState::Bound`]): (token, request), in
    /// posting order.
    recvs: VecDeque<(u64, Key)>,
    /// The connection they are on.
    recvs_on: Option<LoneEdge>,
    /// The token of the next receive handed to the engine.
    next_recv_token: u64,
    /// Active messages that completed a receive the engine held, not yet counted in the
    /// endpoint's `AmStats::unknown_handler` ([`DgramSide::take_unknown_handler`]).
    unknown_handler: u64,
}

impl DgramSide {
    /// Active messages that completed a held receive since the last call (each that
    /// receive's `UnknownHandler`).
    pub(crate) fn take_unknown_handler(&mut self) -> u64 {
        std::mem::take(&mut self.unknown_handler)
    }

    /// Whether posted receives are with the engine.
    pub(crate) fn holds_recvs(&self) -> bool {
        !self.recvs.is_empty()
    }

    /// The short receive path for an endpoint whose only inbound edge is `edge`, open and
    /// active: one engine call polls the sockets and takes a whole message that fits `buf`,
    /// under one lock, without the general path's look at every edge. None: the general
    /// path decides (a message too large or not whole, a connection not open); nothing was
    /// consumed then. `Some(Ok(None))`: no message yet (the engine was polled).
    #[inline]
    pub(crate) fn look_lone(
        &mut self,
        edge: &mut DgramIn,
        buf: &mut [u8],
        local: &LocalRank,
    ) -> Option<Result<Option<usize>>> {
        let engine = local.dgram.as_deref()?;
        let taken = engine.take_whole(local, edge.id, buf)?;
        // As after the general path's poll: progress need not poll again, and the next
        // general look at the edge must not skip it.
        self.engine_polled = true;
        self.seen = None;
        Some(Ok(taken.map(|(len, tag)| {
            edge.delivered_tag = tag;
            len
        })))
    }

    /// Hands the posted receives waiting at the front of the line to the engine when the
    /// endpoint's one inbound edge is a datagram connection (`lone`): the protocol places
    /// frames of the next messages straight into their buffers, also while earlier
    /// messages still arrive (a striped connection's frames of several messages overtake
    /// each other). They become [`RecvState::Bound`] and complete from
    /// [`DgramSide::progress_recvs`], in posting order. Otherwise (other edges, another
    /// connection still holding receives) nothing changes.
    pub(crate) fn bind_recvs(
        &mut self,
        lone: Option<LoneEdge>,
        requests: &mut Requests,
        local: &LocalRank,
    ) {
        if requests.posted_recvs.is_empty() {
            return;
        }
        let Some(on) = lone else {
            return;
        };
        if self.recvs_on.is_some_and(|(id, ..)| id != on.0) {
            return;
        }
        let Some(engine) = local.dgram.as_deref() else {
            return;
        };
        let mut batch = VecDeque::new();
        let mut keys = Vec::new();
        for &key in &requests.posted_recvs {
            let Some(RecvState::Pending(buf)) = requests.recvs.get_mut(key) else {
                break;
            };
            batch.push_back((self.next_recv_token, std::mem::take(buf)));
            keys.push(key);
            self.next_recv_token += 1;
        }
        let taken = engine.post_recvs(on.0, &mut batch);
        let first_token = self.next_recv_token - keys.len() as u64;
        for (index, &key) in keys.iter().enumerate() {
            if index < taken {
                requests.set_recv(key, RecvState::Bound);
                self.recvs.push_back((first_token + index as u64, key));
            } else if let (Some(RecvState::Pending(slot)), Some((_, buf))) =
                (requests.recvs.get_mut(key), batch.pop_front())
            {
                *slot = buf;
            }
        }
        if taken > 0 {
            requests.posted_recvs.drain(..taken);
            self.recvs_on = Some(on);
        }
    }

    /// Completes the posted receives the engine finished ([`DgramSide::bind_recvs`]): a
    /// whole message, a message too long for the buffer (`BufferTooSmall`, the message
    /// stays for the next receive), or the connection's failure in the middle of the
    /// receive's message. Receives whose message had not begun when the connection ended
    /// come back to the front of the line, for the general path; so do those whose
    /// message has not begun once the connection is no longer the endpoint's `lone` edge
    /// (another peer connected: its messages may come first).
    pub(crate) fn progress_recvs(
        &mut self,
        lone: Option<LoneEdge>,
        requests: &mut Requests,
        local: &LocalRank,
    ) {
        self.finish_recvs(lone, requests, local, false);
    }

    /// [`DgramSide::progress_recvs`], then takes back from the engine every receive whose
    /// message has not begun: they return to the front of the line, pending (a posted
    /// receive is being cancelled; the others are handed to the engine again by the next
    /// progress).
    pub(crate) fn withdraw_recvs(&mut self, requests: &mut Requests, local: &LocalRank) {
        self.finish_recvs(None, requests, local, true);
    }

    /// What became of the receives the engine holds (and, with `withdraw` or once the
    /// connection is no longer the `lone` edge, those whose message has not begun taken
    /// back).
    fn finish_recvs(
        &mut self,
        lone: Option<LoneEdge>,
        requests: &mut Requests,
        local: &LocalRank,
        withdraw: bool,
    ) {
        let Some((id, peer, transport)) = self.recvs_on else {
            return;
        };
        let Some(engine) = local.dgram.as_deref() else {
            return;
        };
        let mut done = Vec::new();
        let still_lone = lone.is_some_and(|(lone_id, ..)| lone_id == id);
        let held = engine.collect_recvs(id, !still_lone, &mut done);
        if withdraw {
            engine.withdraw_recvs(id, &mut done);
        }
        let mut returned = Vec::new();
        for finished in done {
            let token = match &finished {
                RecvDone::Complete { token, .. }
                | RecvDone::TooSmall { token, .. }
                | RecvDone::Returned { token, .. }
                | RecvDone::Failed { token, .. } => *token,
            };
            let Some(at) = self.recvs.iter().position(|(held, _)| *held == token) else {
                continue;
            };
            let Some((_, key)) = self.recvs.remove(at) else {
                continue;
            };
            let state = match finished {
                RecvDone::Complete { tag, .. } if tag.am => {
                    // Its message began before a handler was registered (receives are
                    // not handed to the engine while one is): as for any active message
                    // without a handler, a typed error, counted by the caller.
                    self.unknown_handler += 1;
                    RecvState::Done(Err(Error::UnknownHandler {
                        peer,
                        id: tag.am_parts().0,
                    }))
                }
                RecvDone::Complete { buf, len, tag, .. } => RecvState::Done(Ok(RecvCompletion {
                    buf,
                    len,
                    src: peer,
                    tag: tag.value,
                })),
                RecvDone::TooSmall { buf, len, .. } => {
                    RecvState::Done(Err(Error::BufferTooSmall {
                        message: len,
                        buffer: buf.len(),
                    }))
                }
                RecvDone::Returned { buf, .. } => {
                    returned.push(key);
                    RecvState::Pending(buf)
                }
                RecvDone::Failed { why, .. } => RecvState::Done(Err(Error::Unreachable {
                    peer,
                    transport,
                    detail: why,
                })),
            };
            requests.set_recv(key, state);
        }
        for key in returned.into_iter().rev() {
            requests.posted_recvs.push_front(key);
        }
        if held.is_none() {
            // The connection is gone: nothing will complete the receives it held.
            for (_, key) in self.recvs.drain(..) {
                requests.set_recv(
                    key,
                    RecvState::Done(Err(Error::Unreachable {
                        peer,
                        transport,
                        detail: "the connection ended while a receive was posted on it".into(),
                    })),
                );
            }
        }
        if self.recvs.is_empty() {
            self.recvs_on = None;
        }
    }
}

/// Closes the endpoint's datagram connections `ids` (outbound edges `outbound` first settle,
/// see [`settle_sends`]) and answers the peers a little longer, until each Close is
/// acknowledged ([`linger_close`]).
pub(crate) fn close(outbound: &mut [&mut DgramOut], mut ids: Vec<u64>, cx: &mut EdgeContext<'_>) {
    settle_sends(outbound, cx);
    let Some(engine) = cx.local.dgram.clone() else {
        return;
    };
    ids.sort_unstable();
    ids.dedup();
    for &id in &ids {
        engine.close(id);
    }
    linger_close(&engine, &ids, cx.local, cx.config);
}

/// Before the endpoint's datagram connections close, what was sent on them must arrive:
/// the peer may still need retransmissions, and only this endpoint can make them. Pushes
/// queued sends and waits until everything written is acknowledged (or the edge failed),
/// for at most the idle timeout (a peer silent that long is unreachable anyway).
fn settle_sends(outbound: &mut [&mut DgramOut], cx: &mut EdgeContext<'_>) {
    let Some(engine) = cx.local.dgram.clone() else {
        return;
    };
    let deadline = Instant::now() + cx.config.net_idle_timeout;
    loop {
        engine.poll_io(cx.local);
        for edge in outbound.iter_mut() {
            // Failures end the wait for that connection.
            let _ = edge.progress(cx);
        }
        let settled = outbound.iter().all(|edge| edge.settled(&engine));
        if settled || Instant::now() >= deadline {
            return;
        }
        // A closing endpoint's wait like any other: peers' one-sided requests are served.
        cx.local.meanwhile(true);
        engine.sleep(Duration::from_millis(1));
    }
}

/// After closing datagram connections `ids`: answers the peers a little longer, until
/// each Close is acknowledged, for at most 3 RTOs (at least [`CLOSE_LINGER_MIN`], at most
/// [`CLOSE_LINGER_MAX`] and the idle timeout). The Close carries this side's acks, so a
/// peer whose last ack from us was lost learns from it that its data arrived; without
/// this, a process that exited right after its last receive left such a peer waiting for
/// that ack for a whole idle timeout.
fn linger_close(engine: &DgramShared, ids: &[u64], local: &LocalRank, config: &Config) {
    if ids.is_empty() {
        return;
    }
    let start = Instant::now();
    let mut deadline = None;
    loop {
        engine.poll_io(local);
        let mut settled = true;
        let mut longest_rto = Duration::ZERO;
        for &id in ids {
            let (done, rto) = engine.close_settled(id);
            settled &= done;
            longest_rto = longest_rto.max(rto);
        }
        let deadline = *deadline.get_or_insert_with(|| {
            start
                + (3 * longest_rto)
                    .clamp(CLOSE_LINGER_MIN, CLOSE_LINGER_MAX)
                    .min(config.net_idle_timeout)
        });
        if settled || Instant::now() >= deadline {
            return;
        }
        local.meanwhile(true);
        engine.sleep(Duration::from_millis(1));
    }
}
