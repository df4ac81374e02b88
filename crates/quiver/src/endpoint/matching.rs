//! Tag matching, pure: which receive takes which message, by (source, tag, mask), under
//! MPI's rules, with the memory of unexpected messages bounded.
//!
//! A [`Matcher`] holds the receives posted and not yet matched, in posting order, and the
//! messages that arrived before any receive wanted them (unexpected), in arrival order.
//! The rules:
//!
//! - a message that arrives goes to the earliest-posted receive it matches; a receive that
//!   is posted takes the earliest-arrived unexpected message it matches. Since messages of
//!   one source arrive in the order they were sent, two messages of one sender that both
//!   match a receive are taken in the order they were sent (non-overtaking), and receives
//!   are matched in the order they were posted;
//! - invariant: no posted receive matches an unexpected message (each side was checked
//!   against the other when it came in);
//! - bounding: an unexpected message's payload is held in memory only while the payloads
//!   held stay within `bound_bytes`; beyond, the caller's `spill` moves it out of memory
//!   (the endpoint writes it to a spill file, `endpoint/spill.rs`) and the matcher keeps
//!   its envelope with the spilled entry ([`Held::Spilled`]) in the same queue, so a
//!   receive behind any number of unmatched messages still completes. A spill that fails
//!   keeps the payload in memory beyond the bound (counted): nothing is dropped. Bounding
//!   never changes which receive takes which message: the property test checks it against
//!   a reference model (decision 0099).
//!
//! It knows nothing of transports, buffers or files: a payload is a `P` the caller makes
//! (`fetch`) when the matcher asks for it, a spilled payload an `S` the caller's `spill`
//! makes of it, a receive an `R` the caller gives.
//!
//! Layer: below the endpoint API, above nothing (imports only [`Addr`]). No I/O, no clock.
//! The endpoint's tagged calls (`tagged.rs`) drive it; the tag travels on the wire as
//! decision 0076 describes.

use std::collections::VecDeque;

use crate::addr::Addr;

/// Which messages a receive takes: those from `source` (`None`: any) whose tag agrees
/// with `tag` on every bit set in `mask` (a mask of 0 takes any tag).
///
/// ```
/// use quiver::{Addr, MatchSpec};
/// let from_rank_1 = MatchSpec::tag(7).from(Addr::new(1, 0));
/// assert!(from_rank_1.matches(Addr::new(1, 0), 7));
/// assert!(!from_rank_1.matches(Addr::new(2, 0), 7));
/// // The high byte names a library; the rest of the tag is free.
/// let library = MatchSpec::masked(0xAB << 56, 0xFF << 56);
/// assert!(library.matches(Addr::new(3, 0), (0xAB << 56) | 12345));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatchSpec {
    /// The sender taken (`None`: any).
    pub source: Option<Addr>,
    /// The tag's bits that must match (those set in `mask`).
    pub tag: u64,
    /// Which bits of the tag must match (0: any tag).
    pub mask: u64,
}

impl MatchSpec {
    /// Any source, any tag: what a plain `recv` takes.
    pub const ANY: MatchSpec = MatchSpec {
        source: None,
        tag: 0,
        mask: 0,
    };

    /// Exactly `tag`, from any source.
    pub const fn tag(tag: u64) -> MatchSpec {
        MatchSpec {
            source: None,
            tag,
            mask: u64::MAX,
        }
    }

    /// The tags that agree with `tag` on the bits set in `mask`, from any source.
    pub const fn masked(tag: u64, mask: u64) -> MatchSpec {
        MatchSpec {
            source: None,
            tag,
            mask,
        }
    }

    /// The same tags, from `source` only.
    pub const fn from(self, source: Addr) -> MatchSpec {
        MatchSpec {
            source: Some(source),
            ..self
        }
    }

    /// Whether a message from `source` with `tag` matches.
    #[inline]
    pub fn matches(&self, source: Addr, tag: u64) -> bool {
        (tag ^ self.tag) & self.mask == 0 && self.source.is_none_or(|s| s == source)
    }
}

/// What a tagged receive or probe reports of a message: its sender, its tag and its
/// length (also what the matcher knows of a message before its payload moves).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Envelope {
    /// The sender.
    pub source: Addr,
    /// The tag it was sent with (0 for a plain `send`).
    pub tag: u64,
    /// Payload bytes.
    pub len: u64,
}

/// Where an unexpected message's payload is.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Held<P, S> {
    /// In memory: the matcher holds it (counted against the bound).
    Here(P),
    /// Out of memory (the bound was reached): the caller's spill of it, read back once a
    /// receive matches it.
    Spilled(S),
}

/// What became of an arriving message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Arrival<R> {
    /// It goes to this posted receive (which leaves the matcher); its payload has not
    /// moved: deliver it straight into the receive's buffer.
    Posted(R),
    /// No receive wanted it: its payload was fetched and is held in memory (within the
    /// bound, or beyond it because the spill failed).
    Queued,
    /// No receive wanted it and it would have taken the held payloads over the bound: its
    /// payload was fetched and spilled; its envelope is queued with the spilled entry.
    Spilled,
}

/// Counters of a matcher.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MatchStats {
    /// Messages queued (in memory or spilled).
    pub(crate) queued: u64,
    /// Messages spilled (they would have taken the held payloads over the bound), and
    /// their bytes.
    pub(crate) spilled: u64,
    pub(crate) spilled_bytes: u64,
    /// Messages over the bound whose spill failed: held in memory beyond the bound.
    pub(crate) spill_failures: u64,
    /// The most payload bytes held in memory at once.
    pub(crate) peak_held_bytes: u64,
    /// Messages copied out of a held payload into the buffer of the receive that matched
    /// them (a staging copy), and their bytes.
    pub(crate) staged_copies: u64,
    pub(crate) staged_bytes: u64,
}

/// What an endpoint's tag matching holds and did ([`Endpoint::matching_stats`](crate::Endpoint::matching_stats)):
/// the unexpected messages waiting for a receive and the memory they hold, and how many
/// messages were copied once more because they arrived before a receive matched them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MatchingStats {
    /// Unexpected messages waiting now (arrived, no receive matched them yet), spilled
    /// ones included.
    pub unexpected: u64,
    /// Payload bytes those messages hold in memory now (in buffers of the endpoint's
    /// pool): at most `QUIVER_UNEXPECTED_BYTES`, except after spill failures.
    pub unexpected_bytes: u64,
    /// The most payload bytes unexpected messages held in memory at once.
    pub peak_unexpected_bytes: u64,
    /// Messages that ever waited as unexpected.
    pub queued: u64,
    /// Unexpected messages waiting now whose payload is in the spill file (they arrived
    /// when the memory held was at `QUIVER_UNEXPECTED_BYTES`).
    pub spilled: u64,
    /// Payload bytes of those messages (in the spill file now).
    pub spilled_bytes: u64,
    /// Messages ever spilled.
    pub spilled_total: u64,
    /// Bytes ever spilled.
    pub spilled_bytes_total: u64,
    /// Messages beyond the bound whose spill failed (disk full, directory missing): kept in
    /// memory beyond the bound, never dropped (a warning names the directory once).
    pub spill_failures: u64,
    /// Matching receives posted and waiting now.
    pub posted: u64,
    /// Messages copied from where they waited into the buffer of the receive that matched
    /// them (one copy more than a message that went straight into its receive's buffer).
    pub staged_copies: u64,
    /// Bytes of those copies.
    pub staged_bytes: u64,
}

/// Posted receives and unexpected messages of one endpoint (see the module doc).
#[derive(Debug)]
pub(crate) struct Matcher<R, P, S> {
    posted: VecDeque<(MatchSpec, R)>,
    unexpected: VecDeque<(Envelope, Held<P, S>)>,
    /// Payload bytes held in memory.
    held_bytes: u64,
    /// Unexpected messages spilled now, and their bytes.
    spilled: u64,
    spilled_bytes: u64,
    bound_bytes: u64,
    stats: MatchStats,
}

impl<R, P, S> Matcher<R, P, S> {
    /// An empty matcher holding at most `bound_bytes` of unexpected payloads in memory.
    pub(crate) fn new(bound_bytes: u64) -> Self {
        Matcher {
            posted: VecDeque::new(),
            unexpected: VecDeque::new(),
            held_bytes: 0,
            spilled: 0,
            spilled_bytes: 0,
            bound_bytes,
            stats: MatchStats::default(),
        }
    }

    /// Nothing posted, nothing unexpected: a plain receive may take the next message
    /// straight from the transports. The one test on the common path.
    #[inline]
    pub(crate) fn is_idle(&self) -> bool {
        self.posted.is_empty() && self.unexpected.is_empty()
    }

    /// Payload bytes held in memory now (at most the bound, except after spill failures).
    pub(crate) fn held_bytes(&self) -> u64 {
        self.held_bytes
    }

    /// Unexpected messages spilled now, and their payload bytes.
    pub(crate) fn spilled_now(&self) -> (u64, u64) {
        (self.spilled, self.spilled_bytes)
    }

    /// Unexpected messages queued (in memory or spilled).
    pub(crate) fn unexpected_len(&self) -> usize {
        self.unexpected.len()
    }

    /// Posted receives waiting.
    pub(crate) fn posted_len(&self) -> usize {
        self.posted.len()
    }

    /// The counters.
    pub(crate) fn stats(&self) -> MatchStats {
        self.stats
    }

    /// A held payload of `len` bytes was copied into the buffer of the receive it matched.
    pub(crate) fn count_staged(&mut self, len: u64) {
        self.stats.staged_copies += 1;
        self.stats.staged_bytes += len;
    }

    /// The public counters ([`MatchingStats`]).
    pub(crate) fn public_stats(&self) -> MatchingStats {
        let stats = self.stats();
        let (spilled, spilled_bytes) = self.spilled_now();
        MatchingStats {
            unexpected: self.unexpected_len() as u64,
            unexpected_bytes: self.held_bytes(),
            peak_unexpected_bytes: stats.peak_held_bytes,
            queued: stats.queued,
            posted: self.posted_len() as u64,
            staged_copies: stats.staged_copies,
            staged_bytes: stats.staged_bytes,
            spilled,
            spilled_bytes,
            spilled_total: stats.spilled,
            spilled_bytes_total: stats.spilled_bytes,
            spill_failures: stats.spill_failures,
        }
    }

    /// A message arrives (`envelope`; its payload not moved yet): the earliest-posted
    /// receive it matches takes it; otherwise it is queued with its payload (`fetch()`,
    /// called only then), held in memory while the held payloads stay within the bound,
    /// spilled beyond (`spill(payload)`: `Err` gives the payload back when the spill
    /// failed, and it is held in memory beyond the bound, counted).
    pub(crate) fn arrive(
        &mut self,
        envelope: Envelope,
        fetch: impl FnOnce() -> P,
        spill: impl FnOnce(P) -> Result<S, P>,
    ) -> Arrival<R> {
        if let Some(i) = self
            .posted
            .iter()
            .position(|(spec, _)| spec.matches(envelope.source, envelope.tag))
        {
            let (_, receive) = self.posted.remove(i).expect("position is in range");
            return Arrival::Posted(receive);
        }
        self.stats.queued += 1;
        let room = self.bound_bytes.saturating_sub(self.held_bytes);
        let held = if envelope.len <= room {
            Held::Here(fetch())
        } else {
            match spill(fetch()) {
                Ok(spilled) => {
                    self.spilled += 1;
                    self.spilled_bytes += envelope.len;
                    self.stats.spilled += 1;
                    self.stats.spilled_bytes += envelope.len;
                    self.unexpected
                        .push_back((envelope, Held::Spilled(spilled)));
                    return Arrival::Spilled;
                }
                Err(payload) => {
                    self.stats.spill_failures += 1;
                    Held::Here(payload)
                }
            }
        };
        self.held_bytes += envelope.len;
        self.stats.peak_held_bytes = self.stats.peak_held_bytes.max(self.held_bytes);
        self.unexpected.push_back((envelope, held));
        Arrival::Queued
    }

    /// Posts a receive: it takes the earliest unexpected message it matches (returned with
    /// the receive), or waits behind the receives posted before it (`None`).
    pub(crate) fn post(
        &mut self,
        spec: MatchSpec,
        receive: R,
    ) -> Option<(R, Envelope, Held<P, S>)> {
        match self.take(spec) {
            Some((envelope, held)) => Some((receive, envelope, held)),
            None => {
                self.posted.push_back((spec, receive));
                None
            }
        }
    }

    /// The earliest unexpected message `spec` matches, left in place (a probe).
    pub(crate) fn probe(&self, spec: MatchSpec) -> Option<&Envelope> {
        self.find(spec).map(|i| &self.unexpected[i].0)
    }

    /// Takes the earliest unexpected message `spec` matches (a receive that is not left
    /// posted when nothing matches: a `try_recv`, or a blocking receive's first look).
    pub(crate) fn take(&mut self, spec: MatchSpec) -> Option<(Envelope, Held<P, S>)> {
        let i = self.find(spec)?;
        let (envelope, held) = self.unexpected.remove(i).expect("found in range");
        match held {
            Held::Here(_) => self.held_bytes -= envelope.len,
            Held::Spilled(_) => {
                self.spilled -= 1;
                self.spilled_bytes -= envelope.len;
            }
        }
        Some((envelope, held))
    }

    /// The earliest-posted receive a message of `envelope` would go to, left posted (the
    /// caller moves the message into its buffer, then withdraws it with
    /// [`Matcher::cancel`]).
    pub(crate) fn posted_for(&self, envelope: &Envelope) -> Option<&R> {
        self.posted
            .iter()
            .find(|(spec, _)| spec.matches(envelope.source, envelope.tag))
            .map(|(_, receive)| receive)
    }

    /// Withdraws the posted receive `receive` (a cancelled or abandoned receive); false if
    /// it is not posted (it matched already).
    pub(crate) fn cancel(&mut self, receive: &R) -> bool
    where
        R: PartialEq,
    {
        match self.posted.iter().position(|(_, r)| r == receive) {
            Some(i) => {
                self.posted.remove(i);
                true
            }
            None => false,
        }
    }

    /// Withdraws the earliest-posted receive (a peer error is reported to it).
    pub(crate) fn pop_posted(&mut self) -> Option<R> {
        self.posted.pop_front().map(|(_, receive)| receive)
    }

    /// The earliest-posted receive whose spec names `source` (`None`: one for any
    /// source), left posted.
    pub(crate) fn posted_from(&self, source: Option<Addr>) -> Option<&R> {
        self.posted
            .iter()
            .find(|(spec, _)| spec.source == source)
            .map(|(_, receive)| receive)
    }

    /// The earliest-posted receive naming a source `ended` says no message can come from
    /// any more, withdrawn with that source (its clean end is reported to it).
    pub(crate) fn withdraw_from_ended(
        &mut self,
        mut ended: impl FnMut(Addr) -> bool,
    ) -> Option<(Addr, R)> {
        let i = self
            .posted
            .iter()
            .position(|(spec, _)| spec.source.is_some_and(&mut ended))?;
        let (spec, receive) = self.posted.remove(i).expect("position is in range");
        Some((spec.source.expect("named"), receive))
    }

    fn find(&self, spec: MatchSpec) -> Option<usize> {
        self.unexpected
            .iter()
            .position(|(envelope, _)| spec.matches(envelope.source, envelope.tag))
    }
}

#[cfg(test)]
mod tests;
