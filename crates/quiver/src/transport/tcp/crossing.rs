//! Crossed tcp connects: two endpoints that connect to each other at the same moment must
//! end up on one stream (one tcp connection carries both directions of an endpoint pair).
//! Each endpoint records the peers it is opening a connection to and the peers its listener
//! is accepting one from; the rule below picks the stream that stays.

use crate::addr::Addr;

/// Peers an endpoint is opening tcp connections to, and peers its listener is accepting
/// one from (a few entries: one per connect in progress).
#[derive(Debug, Default)]
pub(crate) struct Crossings {
    initiated: Vec<Addr>,
    accepting: Vec<Addr>,
}

impl Crossings {
    /// The endpoint is about to open a tcp connection to `peer`: true (and recorded) unless
    /// the listener is accepting one from `peer` right now, which the endpoint should wait
    /// for and use instead.
    pub(crate) fn claim_connect(&mut self, peer: Addr) -> bool {
        if self.accepting.contains(&peer) {
            return false;
        }
        if !self.initiated.contains(&peer) {
            self.initiated.push(peer);
        }
        true
    }

    /// The endpoint's tcp connect to `peer` ended (connected, or failed).
    pub(crate) fn release_connect(&mut self, peer: Addr) {
        self.initiated.retain(|&p| p != peer);
    }

    /// The listener starts accepting a tcp connection from `peer` to this endpoint
    /// (`local`). False when it crosses one this endpoint is opening to `peer` (both sides
    /// connect at once) and `local` is the lower address: one connection carries both
    /// directions, so the one the lower address opened stays and this one is refused
    /// (`Busy`); the refused side then uses the one it accepted. Otherwise the accept is
    /// recorded until [`Crossings::end_accept`], and a connect of this endpoint to `peer`
    /// meanwhile waits for it.
    pub(crate) fn begin_accept(&mut self, local: Addr, peer: Addr) -> bool {
        if local < peer && self.initiated.contains(&peer) {
            return false;
        }
        self.accepting.push(peer);
        true
    }

    /// The accept of [`Crossings::begin_accept`] ended (handed over or failed).
    pub(crate) fn end_accept(&mut self, peer: Addr) {
        if let Some(i) = self.accepting.iter().position(|&p| p == peer) {
            self.accepting.swap_remove(i);
        }
    }
}
