//! One fault injector for the datagram transports (udp and mem): by seed, it drops,
//! duplicates, reorders (holds back and releases later) and corrupts datagrams, per
//! direction, at the rates of [`Faults`] (`QUIVER_FAULTS`), and an optional rule
//! ([`Faults::with_rule`]) decides for particular datagrams (an ack, a Close) in tests that
//! must hit exactly those.
//!
//! Layer: a leaf below the transports. It owns the typed setting (its parse and display)
//! and the state of one socket's injector ([`FaultInjector`]: its random draws, the
//! datagrams it holds back, its counters). It does no I/O and imports nothing of the
//! crate: the datagram engine hands it each datagram it sends or receives on a socket and
//! gets back, in order, what goes on. When the setting is off the engine makes no injector
//! at all, so its hot paths pay one branch on an empty `Option`.

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

/// Fault injection on the datagram sockets (udp, mem) of a context, for tests and chaos
/// runs: off by default. Its text form ([`FromStr`], [`fmt::Display`]) is the setting
/// `QUIVER_FAULTS`.
///
/// `QUIVER_FAULTS` is `off` (the default) or comma-separated `key=value` entries:
/// - `seed=N`: the seed of the random draws (decimal or `0x` hex; 0 when not given). Each
///   socket mixes in its own address, so ranks with one setting draw differently, each
///   the same way from run to run for the same datagrams.
/// - `drop=P`, `duplicate=P`, `reorder=P`, `corrupt=P`: the probability of each fault for a
///   datagram, as a fraction (`0.01`) or a percentage (`1%`), resolution one per million.
///   Without a prefix a rate applies to datagrams as they are sent (with every rank set
///   alike, each datagram then meets it once, at its sender); `send.` says so explicitly,
///   `receive.` applies it to datagrams as they arrive. The rates of one direction add up
///   to at most 1: a datagram gets at most one fault.
///
/// A reordered datagram is held back until 1 to 8 later datagrams (drawn) have passed in
/// its direction on its socket, or until the engine's next poll, whichever comes first. A corrupted one has one bit flipped (the frame checksum then
/// rejects it). A duplicated one leaves twice in a row.
///
/// A rule ([`Faults::with_rule`]) has no text form; it decides before the rates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Faults {
    /// The seed of the random draws.
    pub seed: u64,
    /// Rates for datagrams as they are sent.
    pub send: FaultRates,
    /// Rates for datagrams as they arrive.
    pub receive: FaultRates,
    rule: Option<FaultRule>,
}

/// The probability of each fault for one datagram, in parts per million. They add up to at
/// most 1,000,000 ([`Faults`]' parse checks it; larger sums are cut at that).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultRates {
    /// Lost.
    pub drop_ppm: u32,
    /// Delivered twice.
    pub duplicate_ppm: u32,
    /// Held back and delivered after later ones.
    pub reorder_ppm: u32,
    /// One bit flipped.
    pub corrupt_ppm: u32,
}

/// The way a datagram goes through the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultDirection {
    /// Sent by this context.
    Send,
    /// Arrived at this context.
    Receive,
}

/// One datagram as a rule sees it.
#[derive(Debug)]
pub struct FaultSite<'a> {
    /// Sent or arrived.
    pub direction: FaultDirection,
    /// The address of the socket (the link) it goes through.
    pub local: SocketAddr,
    /// Where it goes (sent) or comes from (arrived).
    pub peer: SocketAddr,
    /// The datagram, header and payload.
    pub datagram: &'a [u8],
}

/// A fault a rule chooses for one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Lose it.
    Drop,
    /// Deliver it twice.
    Duplicate,
    /// Hold it back and deliver it after later ones.
    Reorder,
    /// Flip one bit of it.
    Corrupt,
}

/// A rule deciding, datagram by datagram, which fault (if any) a datagram gets, before the
/// rates are drawn ([`Faults::with_rule`]). Equal only to itself.
#[derive(Clone)]
pub(crate) struct FaultRule(Arc<Mutex<RuleFn>>);

/// The closure of a [`FaultRule`].
type RuleFn = dyn FnMut(&FaultSite<'_>) -> Option<Fault> + Send;

/// Faults injected so far (all zero when off).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Datagrams lost.
    pub dropped: u64,
    /// Datagrams delivered twice.
    pub duplicated: u64,
    /// Datagrams held back and delivered after later ones.
    pub reordered: u64,
    /// Datagrams delivered with one bit flipped.
    pub corrupted: u64,
}

/// Why a `QUIVER_FAULTS` text did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultsParseError {
    /// An entry is not `key=value`.
    #[error("entry {0:?} is not key=value")]
    NotKeyValue(String),
    /// A key that is not a seed or a rate.
    #[error("unknown key {0:?} (known: seed, and drop, duplicate, reorder, corrupt, each optionally prefixed send. or receive.)")]
    UnknownKey(String),
    /// A key given twice.
    #[error("{0} is given twice")]
    Repeated(String),
    /// The seed is not a whole number.
    #[error("seed {0:?} is not a whole number (decimal or 0x hex)")]
    BadSeed(String),
    /// A rate is not a probability.
    #[error("{key}={value:?} is not a probability: expected a fraction from 0 to 1 (0.01) or a percentage (1%) in steps of one per million")]
    BadRate {
        /// The key.
        key: String,
        /// The value given.
        value: String,
    },
    /// The rates of one direction add up to more than 1.
    #[error("the {direction} rates add up to {total_ppm} per million, more than 1")]
    OverOne {
        /// "send" or "receive".
        direction: &'static str,
        /// Their sum.
        total_ppm: u64,
    },
}

/// Most datagrams that pass a reordered one before it is released.
pub(crate) const MAX_REORDER_DISTANCE: u32 = 8;
/// Most datagrams one socket holds back per direction; one more releases the oldest.
const MAX_HELD: usize = 64;
/// Parts per million in a probability of 1.
const MILLION: u32 = 1_000_000;

impl Faults {
    /// Whether anything is injected: a rate above 0 or a rule.
    pub fn is_on(&self) -> bool {
        self.rule.is_some() || self.send.total_ppm() > 0 || self.receive.total_ppm() > 0
    }

    /// These faults with `rule` deciding first for every datagram: `Some(fault)` applies
    /// it, `None` leaves the datagram to the rates. The rule sees every datagram of every
    /// socket of every context made with these faults (clones share it), so it filters by
    /// [`FaultSite`] itself. A rule turns injection on even with all rates at 0; every
    /// datagram then goes through it one by one (GSO runs are sent as single datagrams).
    pub fn with_rule(
        mut self,
        rule: impl FnMut(&FaultSite<'_>) -> Option<Fault> + Send + 'static,
    ) -> Faults {
        self.rule = Some(FaultRule(Arc::new(Mutex::new(rule))));
        self
    }
}

impl FromStr for Faults {
    type Err = FaultsParseError;

    fn from_str(text: &str) -> Result<Faults, FaultsParseError> {
        let mut faults = Faults::default();
        let text = text.trim();
        if text.is_empty() || text.eq_ignore_ascii_case("off") {
            return Ok(faults);
        }
        let mut seen: Vec<String> = Vec::new();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (key, value) = entry
                .split_once('=')
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim()))
                .ok_or_else(|| FaultsParseError::NotKeyValue(entry.to_owned()))?;
            // `drop` and `send.drop` are the same key.
            let canonical = key.strip_prefix("send.").unwrap_or(&key).to_owned();
            if seen.contains(&canonical) {
                return Err(FaultsParseError::Repeated(key));
            }
            seen.push(canonical.clone());
            if canonical == "seed" {
                faults.seed = parse_seed(value)?;
                continue;
            }
            let (rates, name) = match canonical.strip_prefix("receive.") {
                Some(name) => (&mut faults.receive, name),
                None => (&mut faults.send, canonical.as_str()),
            };
            let slot = match name {
                "drop" => &mut rates.drop_ppm,
                "duplicate" => &mut rates.duplicate_ppm,
                "reorder" => &mut rates.reorder_ppm,
                "corrupt" => &mut rates.corrupt_ppm,
                _ => return Err(FaultsParseError::UnknownKey(key)),
            };
            *slot = parse_rate(value).ok_or_else(|| FaultsParseError::BadRate {
                key: key.clone(),
                value: value.to_owned(),
            })?;
        }
        for (direction, rates) in [("send", &faults.send), ("receive", &faults.receive)] {
            if rates.total_ppm() > u64::from(MILLION) {
                return Err(FaultsParseError::OverOne {
                    direction,
                    total_ppm: rates.total_ppm(),
                });
            }
        }
        Ok(faults)
    }
}

impl fmt::Display for Faults {
    /// `off`, or the entries that parse back to these faults (a rule, which has no text
    /// form, is shown as `(and a rule)`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.is_on() {
            return f.write_str("off");
        }
        write!(f, "seed={}", self.seed)?;
        for (prefix, rates) in [("", &self.send), ("receive.", &self.receive)] {
            for (name, ppm) in rates.named() {
                if ppm > 0 {
                    write!(f, ",{prefix}{name}={}", Probability(ppm))?;
                }
            }
        }
        if self.rule.is_some() {
            f.write_str(" (and a rule)")?;
        }
        Ok(())
    }
}

impl FaultRates {
    /// The sum of the four rates, in parts per million.
    pub fn total_ppm(&self) -> u64 {
        self.named().iter().map(|&(_, ppm)| u64::from(ppm)).sum()
    }

    /// The rates with their keys, in the order they are drawn.
    fn named(&self) -> [(&'static str, u32); 4] {
        [
            ("drop", self.drop_ppm),
            ("duplicate", self.duplicate_ppm),
            ("reorder", self.reorder_ppm),
            ("corrupt", self.corrupt_ppm),
        ]
    }

    /// The fault a uniform draw in `0..MILLION` falls on, if any.
    fn fault_at(&self, draw: u32) -> Option<Fault> {
        let faults = [
            Fault::Drop,
            Fault::Duplicate,
            Fault::Reorder,
            Fault::Corrupt,
        ];
        let mut bound = 0u64;
        for (fault, (_, ppm)) in faults.into_iter().zip(self.named()) {
            bound += u64::from(ppm);
            if u64::from(draw) < bound {
                return Some(fault);
            }
        }
        None
    }
}

impl fmt::Debug for FaultRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FaultRule(..)")
    }
}

impl PartialEq for FaultRule {
    fn eq(&self, other: &FaultRule) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for FaultRule {}

impl FaultStats {
    /// Adds `other`'s counts to these.
    pub(crate) fn add(&mut self, other: &FaultStats) {
        self.dropped += other.dropped;
        self.duplicated += other.duplicated;
        self.reordered += other.reordered;
        self.corrupted += other.corrupted;
    }
}

/// The injector of one datagram socket: the engine passes it every datagram the socket
/// sends ([`FaultInjector::send`]) and, when [`FaultInjector::on_arrival`], every datagram
/// it receives ([`FaultInjector::receive`], then [`FaultInjector::pop_arrived`]), and calls
/// [`FaultInjector::release_held`] at every poll. It holds at most [`MAX_HELD`] datagrams
/// per direction.
#[derive(Debug)]
pub(crate) struct FaultInjector {
    local: SocketAddr,
    /// Rates by direction ([`FaultDirection`] as index).
    rates: [FaultRates; 2],
    rule: Option<FaultRule>,
    /// The state of the random draws (SplitMix64).
    random_state: u64,
    /// Datagrams held back, by direction, oldest first.
    held: [VecDeque<Held>; 2],
    /// Arrived datagrams to deliver now, in order.
    arrived: VecDeque<(SocketAddr, Vec<u8>)>,
    /// The datagram being decided on, whole (reused).
    whole: Vec<u8>,
    stats: FaultStats,
}

/// A datagram held back.
#[derive(Debug)]
struct Held {
    peer: SocketAddr,
    datagram: Vec<u8>,
    /// Datagrams still to pass before it is released.
    after: u32,
}

impl FaultInjector {
    /// The injector of the socket bound at `local`, or None when `faults` is off.
    pub(crate) fn new(faults: &Faults, local: SocketAddr) -> Option<Box<FaultInjector>> {
        if !faults.is_on() {
            return None;
        }
        Some(Box::new(FaultInjector {
            local,
            rates: [faults.send, faults.receive],
            rule: faults.rule.clone(),
            random_state: faults.seed ^ address_hash(local),
            held: [VecDeque::new(), VecDeque::new()],
            arrived: VecDeque::new(),
            whole: Vec::new(),
            stats: FaultStats::default(),
        }))
    }

    /// Whether arrivals go through the injector (receive rates above 0, or a rule); when
    /// not, the engine delivers them as they come.
    pub(crate) fn on_arrival(&self) -> bool {
        self.rule.is_some() || self.rates[FaultDirection::Receive as usize].total_ppm() > 0
    }

    /// A datagram on its way to `to`, in `parts` (header, payload): `send` is called, in
    /// order, for each datagram that leaves now (none, this one once or twice, maybe
    /// corrupted, and held ones whose turn came).
    pub(crate) fn send(
        &mut self,
        to: SocketAddr,
        parts: &[&[u8]],
        send: &mut impl FnMut(SocketAddr, &[u8]),
    ) {
        self.whole.clear();
        for part in parts {
            self.whole.extend_from_slice(part);
        }
        self.pass(FaultDirection::Send, to, send);
    }

    /// A datagram that arrived from `from`: what is to be delivered now is queued for
    /// [`FaultInjector::pop_arrived`].
    pub(crate) fn receive(&mut self, from: SocketAddr, datagram: &[u8]) {
        self.whole.clear();
        self.whole.extend_from_slice(datagram);
        let mut arrived = std::mem::take(&mut self.arrived);
        self.pass(FaultDirection::Receive, from, &mut |from, datagram| {
            arrived.push_back((from, datagram.to_vec()))
        });
        self.arrived = arrived;
    }

    /// The next arrived datagram to deliver, with its source.
    pub(crate) fn pop_arrived(&mut self) -> Option<(SocketAddr, Vec<u8>)> {
        self.arrived.pop_front()
    }

    /// Releases every datagram held back: sent ones through `send`, arrived ones to
    /// [`FaultInjector::pop_arrived`].
    pub(crate) fn release_held(&mut self, send: &mut impl FnMut(SocketAddr, &[u8])) {
        for held in self.held[FaultDirection::Send as usize].drain(..) {
            send(held.peer, &held.datagram);
        }
        let arrived = &mut self.arrived;
        for held in self.held[FaultDirection::Receive as usize].drain(..) {
            arrived.push_back((held.peer, held.datagram));
        }
    }

    /// Faults injected so far.
    pub(crate) fn stats(&self) -> FaultStats {
        self.stats
    }

    /// Decides on the datagram in `self.whole` (to or from `peer`) and passes what goes on
    /// to `emit`, followed by the held datagrams whose turn came with it.
    fn pass(
        &mut self,
        direction: FaultDirection,
        peer: SocketAddr,
        emit: &mut impl FnMut(SocketAddr, &[u8]),
    ) {
        let index = direction as usize;
        for held in &mut self.held[index] {
            held.after = held.after.saturating_sub(1);
        }
        match self.decide(direction, peer) {
            None => emit(peer, &self.whole),
            Some(Fault::Drop) => self.stats.dropped += 1,
            Some(Fault::Duplicate) => {
                self.stats.duplicated += 1;
                emit(peer, &self.whole);
                emit(peer, &self.whole);
            }
            Some(Fault::Corrupt) => {
                self.stats.corrupted += 1;
                if !self.whole.is_empty() {
                    let draw = self.next_random();
                    let at = (draw % self.whole.len() as u64) as usize;
                    self.whole[at] ^= 1 << ((draw >> 32) % 8);
                }
                emit(peer, &self.whole);
            }
            Some(Fault::Reorder) => {
                self.stats.reordered += 1;
                if self.held[index].len() == MAX_HELD {
                    if let Some(oldest) = self.held[index].pop_front() {
                        emit(oldest.peer, &oldest.datagram);
                    }
                }
                let after = 1 + (self.next_random() % u64::from(MAX_REORDER_DISTANCE)) as u32;
                self.held[index].push_back(Held {
                    peer,
                    datagram: self.whole.clone(),
                    after,
                });
            }
        }
        while let Some(due) = self.held[index].iter().position(|held| held.after == 0) {
            if let Some(held) = self.held[index].remove(due) {
                emit(held.peer, &held.datagram);
            }
        }
    }

    /// The fault of the datagram in `self.whole`: the rule's, else a draw over the rates
    /// of `direction` (none drawn when they are all 0).
    fn decide(&mut self, direction: FaultDirection, peer: SocketAddr) -> Option<Fault> {
        if let Some(rule) = &self.rule {
            let site = FaultSite {
                direction,
                local: self.local,
                peer,
                datagram: &self.whole,
            };
            let mut rule = rule.0.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(fault) = (*rule)(&site) {
                return Some(fault);
            }
        }
        let rates = self.rates[direction as usize];
        if rates.total_ppm() == 0 {
            return None;
        }
        let draw = (self.next_random() % u64::from(MILLION)) as u32;
        rates.fault_at(draw)
    }

    /// The next random number (SplitMix64).
    fn next_random(&mut self) -> u64 {
        self.random_state = self.random_state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.random_state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// A probability in parts per million, shown as a fraction with no trailing zeros.
struct Probability(u32);

impl fmt::Display for Probability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 >= MILLION {
            return f.write_str("1");
        }
        let digits = format!("{:06}", self.0);
        write!(f, "0.{}", digits.trim_end_matches('0'))
    }
}

/// Parses a seed: decimal, or hex with `0x`.
fn parse_seed(value: &str) -> Result<u64, FaultsParseError> {
    let parsed = match value
        .strip_prefix("0x")
        .or_else(|| value.strip_prefix("0X"))
    {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => value.parse(),
    };
    parsed.map_err(|_| FaultsParseError::BadSeed(value.to_owned()))
}

/// Parses a probability (`0.01`, `1e-3`, `1%`) into parts per million; None when it is not
/// a number from 0 to 1 or not a whole number of parts per million.
fn parse_rate(value: &str) -> Option<u32> {
    let (number, scale) = match value.strip_suffix('%') {
        Some(percent) => (percent.trim(), 100.0),
        None => (value, 1.0),
    };
    let fraction = number.parse::<f64>().ok()? / scale;
    if !(0.0..=1.0).contains(&fraction) {
        return None;
    }
    let ppm = fraction * f64::from(MILLION);
    let whole = ppm.round();
    // Finer than one per million is not a rate this injector can draw.
    ((ppm - whole).abs() < 1e-6).then_some(whole as u32)
}

/// An FNV-1a hash of `address` (its text), mixed into the seed per socket.
fn address_hash(address: SocketAddr) -> u64 {
    address
        .to_string()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        })
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, SocketAddr};
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn address(port: u16) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, port))
    }

    /// Sends `count` datagrams (each its index, 4 bytes) through `injector`; returns what
    /// left, in order, after a final release.
    fn run(injector: &mut FaultInjector, count: u32) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut send = |_: SocketAddr, datagram: &[u8]| out.push(datagram.to_vec());
        for index in 0..count {
            injector.send(address(2), &[&index.to_be_bytes()], &mut send);
        }
        injector.release_held(&mut send);
        out
    }

    #[test]
    fn settings_parse_display_and_round_trip() {
        assert_eq!("off".parse::<Faults>().unwrap(), Faults::default());
        assert_eq!("".parse::<Faults>().unwrap(), Faults::default());
        assert!(!Faults::default().is_on());
        assert_eq!(Faults::default().to_string(), "off");
        let text = "seed=7,drop=0.01,duplicate=0.001,reorder=0.01,corrupt=0.001";
        let faults: Faults = text.parse().unwrap();
        assert_eq!(faults.seed, 7);
        assert_eq!(
            faults.send,
            FaultRates {
                drop_ppm: 10_000,
                duplicate_ppm: 1_000,
                reorder_ppm: 10_000,
                corrupt_ppm: 1_000
            }
        );
        assert_eq!(faults.receive, FaultRates::default());
        assert!(faults.is_on());
        assert_eq!(faults.to_string(), text);
        let both: Faults = " Seed=0x10 , send.drop=2% , receive.corrupt = 1e-6 "
            .parse()
            .unwrap();
        assert_eq!(both.seed, 16);
        assert_eq!(both.send.drop_ppm, 20_000);
        assert_eq!(both.receive.corrupt_ppm, 1);
        assert_eq!(
            both.to_string(),
            "seed=16,drop=0.02,receive.corrupt=0.000001"
        );
        assert_eq!(both.to_string().parse::<Faults>().unwrap(), both);
        assert_eq!(
            "drop=1".parse::<Faults>().unwrap().to_string(),
            "seed=0,drop=1"
        );
    }

    #[test]
    fn bad_settings_name_what_is_wrong() {
        let error = |text: &str| text.parse::<Faults>().unwrap_err();
        assert_eq!(error("drop"), FaultsParseError::NotKeyValue("drop".into()));
        assert_eq!(
            error("lose=0.1"),
            FaultsParseError::UnknownKey("lose".into())
        );
        assert_eq!(
            error("receive.lose=0.1"),
            FaultsParseError::UnknownKey("receive.lose".into())
        );
        assert_eq!(
            error("drop=0.1,send.drop=0.2"),
            FaultsParseError::Repeated("send.drop".into())
        );
        assert_eq!(error("seed=x"), FaultsParseError::BadSeed("x".into()));
        for bad in ["1.5", "-0.1", "abc", "0.0000001", "200%", "NaN"] {
            let text = format!("drop={bad}");
            assert_eq!(
                error(&text),
                FaultsParseError::BadRate {
                    key: "drop".into(),
                    value: bad.into()
                },
                "{text}"
            );
        }
        assert_eq!(
            error("drop=0.6,corrupt=0.5"),
            FaultsParseError::OverOne {
                direction: "send",
                total_ppm: 1_100_000
            }
        );
        let message = error("receive.reorder=7").to_string();
        assert!(
            message.contains("receive.reorder") && message.contains("\"7\""),
            "{message}"
        );
    }

    #[test]
    fn off_makes_no_injector_and_a_rule_turns_it_on() {
        assert!(FaultInjector::new(&Faults::default(), address(1)).is_none());
        let rule = Faults::default().with_rule(|_| None);
        assert!(rule.is_on());
        assert_eq!(rule.to_string(), "seed=0 (and a rule)");
        assert_eq!(rule, rule.clone());
        assert_ne!(rule, Faults::default().with_rule(|_| None));
        let injector = FaultInjector::new(&rule, address(1)).unwrap();
        assert!(injector.on_arrival());
        let send_only: Faults = "drop=0.5".parse().unwrap();
        assert!(!FaultInjector::new(&send_only, address(1))
            .unwrap()
            .on_arrival());
    }

    #[test]
    fn the_same_seed_gives_the_same_faults_and_rates_hold() {
        let faults: Faults = "seed=42,drop=0.1,duplicate=0.05,reorder=0.1,corrupt=0.05"
            .parse()
            .unwrap();
        let mut first = FaultInjector::new(&faults, address(1)).unwrap();
        let mut again = FaultInjector::new(&faults, address(1)).unwrap();
        let mut elsewhere = FaultInjector::new(&faults, address(9)).unwrap();
        let count = 100_000;
        let out = run(&mut first, count);
        assert_eq!(out, run(&mut again, count));
        assert_ne!(out, run(&mut elsewhere, count));
        let stats = first.stats();
        let near = |got: u64, rate: f64| {
            let expected = rate * f64::from(count);
            (got as f64 - expected).abs() < expected * 0.1
        };
        assert!(near(stats.dropped, 0.1), "{stats:?}");
        assert!(near(stats.duplicated, 0.05), "{stats:?}");
        assert!(near(stats.reordered, 0.1), "{stats:?}");
        assert!(near(stats.corrupted, 0.05), "{stats:?}");
        assert_eq!(
            out.len() as u64,
            u64::from(count) - stats.dropped + stats.duplicated
        );
    }

    #[test]
    fn each_fault_does_what_it_says() {
        let decide = |fault: Fault| {
            Faults::default().with_rule(move |site| {
                (u32::from_be_bytes(site.datagram.try_into().unwrap()) == 3).then_some(fault)
            })
        };
        let datagrams = |indices: &[u32]| -> Vec<Vec<u8>> {
            indices.iter().map(|i| i.to_be_bytes().to_vec()).collect()
        };
        let mut dropped = FaultInjector::new(&decide(Fault::Drop), address(1)).unwrap();
        assert_eq!(run(&mut dropped, 6), datagrams(&[0, 1, 2, 4, 5]));
        let mut duplicated = FaultInjector::new(&decide(Fault::Duplicate), address(1)).unwrap();
        assert_eq!(run(&mut duplicated, 6), datagrams(&[0, 1, 2, 3, 3, 4, 5]));
        let mut corrupted = FaultInjector::new(&decide(Fault::Corrupt), address(1)).unwrap();
        let out = run(&mut corrupted, 6);
        assert_eq!(out.len(), 6);
        let flipped: u32 = (out[3].iter().zip(3u32.to_be_bytes()))
            .map(|(a, b)| (a ^ b).count_ones())
            .sum();
        assert_eq!(flipped, 1);
        assert_eq!(corrupted.stats().corrupted, 1);
        // Held back, then released after 1 to MAX_REORDER_DISTANCE later datagrams.
        let mut reordered = FaultInjector::new(&decide(Fault::Reorder), address(1)).unwrap();
        let out = run(&mut reordered, 20);
        let at = out
            .iter()
            .position(|d| d[..] == 3u32.to_be_bytes())
            .unwrap();
        assert!(
            (4..=3 + MAX_REORDER_DISTANCE as usize).contains(&at),
            "{out:?}"
        );
        let mut others = out.clone();
        others.remove(at);
        assert_eq!(
            others,
            datagrams(&[0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19])
        );
        // With nothing after it, it waits for the release (the engine's next poll).
        let mut alone = FaultInjector::new(&decide(Fault::Reorder), address(1)).unwrap();
        let mut out = Vec::new();
        for index in 0..4u32 {
            alone.send(address(2), &[&index.to_be_bytes()], &mut |_, d| {
                out.push(d.to_vec())
            });
        }
        assert_eq!(out, datagrams(&[0, 1, 2]));
        alone.release_held(&mut |_, d| out.push(d.to_vec()));
        assert_eq!(out, datagrams(&[0, 1, 2, 3]));
    }

    #[test]
    fn arrivals_go_through_the_receive_rates_and_the_rule_sees_every_site() {
        let seen = std::sync::Arc::new(AtomicUsize::new(0));
        let counted = seen.clone();
        let faults: Faults = "receive.drop=1".parse().unwrap();
        let faults = faults.with_rule(move |site| {
            counted.fetch_add(1, Ordering::Relaxed);
            assert_eq!(site.local, address(1));
            match site.direction {
                // Sent datagrams are left to the send rates (none).
                FaultDirection::Send => None,
                // The first arrival is delivered twice, the rest go to the rates (lost).
                FaultDirection::Receive => (site.datagram == [0]).then_some(Fault::Duplicate),
            }
        });
        let mut injector = FaultInjector::new(&faults, address(1)).unwrap();
        for byte in 0..3u8 {
            injector.receive(address(5), &[byte]);
        }
        let mut arrived = Vec::new();
        while let Some((from, datagram)) = injector.pop_arrived() {
            assert_eq!(from, address(5));
            arrived.push(datagram);
        }
        assert_eq!(arrived, vec![vec![0], vec![0]]);
        assert_eq!(run(&mut injector, 3).len(), 3);
        assert_eq!(seen.load(Ordering::Relaxed), 6);
        let stats = injector.stats();
        assert_eq!((stats.dropped, stats.duplicated), (2, 1));
    }

    #[test]
    fn held_datagrams_are_bounded() {
        let always = Faults::default().with_rule(|_| Some(Fault::Reorder));
        let mut injector = FaultInjector::new(&always, address(1)).unwrap();
        let mut out = 0;
        for index in 0..1000u32 {
            injector.send(address(2), &[&index.to_be_bytes()], &mut |_, _| out += 1);
            assert!(injector.held[0].len() <= MAX_HELD);
        }
        injector.release_held(&mut |_, _| out += 1);
        assert_eq!(out, 1000);
    }
}
