//! Endpoints asleep on their descriptor, as the datagram engine knows them: whoever polls
//! the engine (any endpoint of the context, on any thread) rings the doorbell of an
//! endpoint that armed it once something arrives on one of its connections, so that an
//! endpoint sleeping in poll/epoll wakes even when another endpoint's poll took its
//! datagrams off the shared socket.
//!
//! The armed-flag pattern of the shm doorbell, one level up: the list is empty unless an
//! endpoint armed (`Endpoint::arm`), and a poll that finds it empty pays one branch. An
//! entry is one-shot: rung once, it is gone until the endpoint arms again.
//!
//! Layer: the datagram transport. Knows an endpoint only by its port and its inbox.

use std::sync::Arc;
use std::time::Duration;

use super::engine::{DgramShared, Engine};
use crate::transport::local::LocalRank;
use crate::transport::registry::Inbox;

impl DgramShared {
    /// Endpoint `port` is about to sleep on its descriptor: rings `inbox`'s doorbell when
    /// any of its connections is fed or changes state, then polls once, all under the
    /// engine's lock (so a delivery either is seen by the caller's look after this call or
    /// rings the doorbell).
    pub(crate) fn arm_sleeper(&self, port: u16, inbox: &Arc<Inbox>, ctx: &LocalRank) {
        let mut engine = self.lock();
        match engine.sleepers.iter_mut().find(|(p, _)| *p == port) {
            Some(entry) => entry.1 = inbox.clone(),
            None => engine.sleepers.push((port, inbox.clone())),
        }
        engine.poll(Some(ctx), self);
    }

    /// How long until the protocol's next timer is due (None: no timer runs): a sleeper's
    /// timer, so that retransmissions and acknowledgements go out while everyone sleeps.
    pub(crate) fn next_timer_in(&self) -> Option<Duration> {
        let mut engine = self.lock();
        if engine.timers_dirty {
            engine.next_timer = engine.earliest_timer();
        }
        let next = engine.next_timer?;
        Some(Duration::from_nanos(next.saturating_sub(engine.now())))
    }

    /// Endpoint `port` closes: it no longer wants a ring (a later endpoint on the same
    /// port has a doorbell of its own).
    pub(crate) fn forget_sleeper(&self, port: u16) {
        self.lock().sleepers.retain(|(p, _)| *p != port);
    }
}

impl Engine {
    /// Rings the doorbells of the sleepers owning connections `ids` (each once).
    #[cold]
    pub(super) fn wake_sleepers(&mut self, ids: &[u64]) {
        for &id in ids {
            let Some(port) = self.router.get(id).map(|e| e.local_port) else {
                continue;
            };
            if let Some(i) = self.sleepers.iter().position(|(p, _)| *p == port) {
                let (_, inbox) = self.sleepers.swap_remove(i);
                inbox.own_bell.ring();
                if self.sleepers.is_empty() {
                    return;
                }
            }
        }
    }
}
