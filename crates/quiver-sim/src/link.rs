//! Directed links: the network model.
//!
//! Layer: test infrastructure, under `sim.rs`. It owns each link's queue, impairments and
//! counters; it must not know connections or routing.
//!
//! A datagram offered to a link goes through, in order: partition check (link down: drop),
//! MTU check (oversize: drop), the bounded drop-tail queue in front of a serialiser of the
//! given bandwidth, loss (independent, or Gilbert-Elliott bursts), corruption (random byte
//! flips), and propagation delay plus uniform jitter (which reorders datagrams). A copy may
//! be duplicated with its own jitter. All randomness comes from the link's own `SimRng`, so
//! traffic on one link never shifts the random stream of another.

use std::collections::BTreeMap;

use quiver_wire::frame::{Frame, FrameKey, FrameKeys, FrameType, MessagePrefix};

use crate::event::Nanos;
use crate::rng::SimRng;

/// Targeted loss of the last datagrams of every message (tail loss): Data frames whose
/// bytes reach into the last `tail_bytes` of their message are dropped the first `times`
/// times each one (identified by message id and fragment offset) is offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailDrop {
    /// Size of the message tail in bytes.
    pub tail_bytes: u64,
    /// How many transmissions of each tail fragment are dropped (1: the first; 2: the
    /// first and its first retransmission...).
    pub times: u32,
}

/// Two-state burst-loss model (Gilbert-Elliott). The state changes once per datagram
/// offered to the link; while in the bad state datagrams are lost with
/// `loss_probability_bad`, in the good state with the link's `loss_probability`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GilbertElliott {
    /// Probability, per datagram, of going from good to bad.
    pub good_to_bad: f64,
    /// Probability, per datagram, of going from bad to good (mean burst = 1 / this).
    pub bad_to_good: f64,
    /// Loss probability in the bad state.
    pub loss_probability_bad: f64,
}

/// Everything that characterises one directed link.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkConfig {
    /// One-way propagation delay.
    pub delay_ns: Nanos,
    /// Extra delay drawn uniformly from `[0, jitter_ns]` per datagram (reordering).
    pub jitter_ns: Nanos,
    /// Independent loss probability per datagram (the good-state loss when bursty).
    pub loss_probability: f64,
    /// Optional burst loss.
    pub burst_loss: Option<GilbertElliott>,
    /// Optional targeted loss of message tails.
    pub tail_drop: Option<TailDrop>,
    /// Probability that a datagram is delivered twice.
    pub duplicate_probability: f64,
    /// Probability that a datagram has 1 to 3 random bytes changed.
    pub corrupt_probability: f64,
    /// Self-test of the simulator only: probability that a Data frame's payload gets a
    /// byte changed *and its tag recomputed* under the sender's key (the simulator hands it
    /// over), i.e. corruption the protocol cannot see.
    /// Runs with this set must fail the delivery invariant; never use it in a scenario
    /// that should pass.
    pub undetectable_corrupt_probability: f64,
    /// Serialisation rate in bits per second; 0 means unlimited (no queueing).
    pub bandwidth_bits_per_second: u64,
    /// Bytes the queue in front of the serialiser holds (drop-tail); ignored when the
    /// bandwidth is unlimited.
    pub queue_capacity_bytes: usize,
    /// Largest datagram the link carries; larger ones are dropped and counted.
    pub mtu_bytes: usize,
    /// Intervals `[start, end)` during which the link is down (partitioned): datagrams sent
    /// or arriving then are dropped.
    pub down_intervals: Vec<(Nanos, Nanos)>,
}

impl Default for LinkConfig {
    /// A clean 10 µs link, no bandwidth limit, MTU 1500: nothing lost, reordered or changed.
    fn default() -> Self {
        Self {
            delay_ns: 10_000,
            jitter_ns: 0,
            loss_probability: 0.0,
            burst_loss: None,
            tail_drop: None,
            duplicate_probability: 0.0,
            corrupt_probability: 0.0,
            undetectable_corrupt_probability: 0.0,
            bandwidth_bits_per_second: 0,
            queue_capacity_bytes: usize::MAX,
            mtu_bytes: 1500,
            down_intervals: Vec::new(),
        }
    }
}

/// Counters of one link.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Datagrams offered by the sender.
    pub offered: u64,
    /// Bytes offered by the sender.
    pub offered_bytes: u64,
    /// Copies scheduled for delivery (includes duplicates).
    pub delivered: u64,
    /// Dropped by random or burst loss.
    pub dropped_loss: u64,
    /// Dropped by the tail-drop rule.
    pub dropped_tail: u64,
    /// Dropped because the queue was full.
    pub dropped_queue: u64,
    /// Dropped because larger than the MTU.
    pub dropped_mtu: u64,
    /// Dropped because the link was down (at send or at arrival).
    pub dropped_partition: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Copies whose bytes were changed.
    pub corrupted: u64,
}

/// Why a datagram did not make it onto the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Random or burst loss.
    Loss,
    /// The tail-drop rule.
    Tail,
    /// Queue full.
    Queue,
    /// Larger than the MTU.
    Mtu,
    /// Link down.
    Partition,
}

/// Copies of one datagram to deliver (0, 1 or 2 copies).
#[derive(Debug, Default)]
pub struct Deliveries {
    /// `(arrival time, bytes)` per copy.
    /// `(arrival time, bytes, corrupted)` per copy; `corrupted` is set when the link
    /// changed the bytes (detectably).
    pub copies: Vec<(Nanos, Vec<u8>, bool)>,
    /// Set when the datagram was dropped.
    pub dropped: Option<DropReason>,
}

/// A link's mutable state: the queue, the burst state, its RNG and counters.
#[derive(Debug)]
pub struct Link {
    config: LinkConfig,
    rng: SimRng,
    burst_bad: bool,
    /// `(departure time, bytes)` of datagrams queued or being serialised, oldest first.
    queue: std::collections::VecDeque<(Nanos, usize)>,
    queued_bytes: usize,
    last_departure_ns: Nanos,
    stats: LinkStats,
    /// Tail-drop rule: times each (message id, fragment offset) has been dropped.
    tail_drops: BTreeMap<(u64, u64), u32>,
    /// The key the current sender emits under (`undetectable_corrupt_probability` only).
    forger: Option<FrameKey>,
}

impl Link {
    /// A link in the good state with an empty queue.
    pub fn new(config: LinkConfig, rng: SimRng) -> Self {
        Self {
            config,
            rng,
            burst_bad: false,
            queue: std::collections::VecDeque::new(),
            queued_bytes: 0,
            last_departure_ns: 0,
            stats: LinkStats::default(),
            tail_drops: BTreeMap::new(),
            forger: None,
        }
    }

    /// Whether this link forges frames (`undetectable_corrupt_probability` above 0): its
    /// sender's key must then be handed over ([`Link::set_forger_key`]).
    pub fn forges(&self) -> bool {
        self.config.undetectable_corrupt_probability > 0.0
    }

    /// The key of the sender of the datagrams offered next (see [`Link::forges`]).
    pub fn set_forger_key(&mut self, key: Option<FrameKey>) {
        self.forger = key;
    }

    /// The configuration.
    pub fn config(&self) -> &LinkConfig {
        &self.config
    }

    /// Counters so far.
    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// Adds a down interval `[start, end)`.
    pub fn add_down_interval(&mut self, start_ns: Nanos, end_ns: Nanos) {
        self.config.down_intervals.push((start_ns, end_ns));
    }

    /// True unless `at_ns` falls into a down interval.
    pub fn is_up(&self, at_ns: Nanos) -> bool {
        !self
            .config
            .down_intervals
            .iter()
            .any(|&(start, end)| start <= at_ns && at_ns < end)
    }

    /// Counts a copy dropped because the link was down when it arrived.
    pub fn count_arrival_partition_drop(&mut self) {
        self.stats.dropped_partition += 1;
        self.stats.delivered -= 1;
    }

    /// Offers one datagram at `now_ns`; returns the copies to deliver.
    pub fn transmit(&mut self, now_ns: Nanos, datagram: Vec<u8>) -> Deliveries {
        self.stats.offered += 1;
        self.stats.offered_bytes += datagram.len() as u64;
        let mut deliveries = Deliveries::default();
        if !self.is_up(now_ns) {
            self.stats.dropped_partition += 1;
            deliveries.dropped = Some(DropReason::Partition);
            return deliveries;
        }
        if datagram.len() > self.config.mtu_bytes {
            self.stats.dropped_mtu += 1;
            deliveries.dropped = Some(DropReason::Mtu);
            return deliveries;
        }
        let Some(departure_ns) = self.enqueue(now_ns, datagram.len()) else {
            self.stats.dropped_queue += 1;
            deliveries.dropped = Some(DropReason::Queue);
            return deliveries;
        };
        if self.draw_tail_drop(&datagram) {
            self.stats.dropped_tail += 1;
            deliveries.dropped = Some(DropReason::Tail);
            return deliveries;
        }
        if self.draw_loss() {
            self.stats.dropped_loss += 1;
            deliveries.dropped = Some(DropReason::Loss);
            return deliveries;
        }
        let duplicate = self.rng.chance(self.config.duplicate_probability);
        if duplicate {
            self.stats.duplicated += 1;
            let copy = self.finish_copy(departure_ns, datagram.clone());
            deliveries.copies.push(copy);
        }
        let copy = self.finish_copy(departure_ns, datagram);
        deliveries.copies.push(copy);
        self.stats.delivered += deliveries.copies.len() as u64;
        deliveries
    }

    /// Queue admission and serialisation: returns the time the last bit leaves, or None
    /// when the drop-tail queue is full.
    fn enqueue(&mut self, now_ns: Nanos, length_bytes: usize) -> Option<Nanos> {
        let rate = self.config.bandwidth_bits_per_second;
        if rate == 0 {
            return Some(now_ns);
        }
        while let Some(&(departure, bytes)) = self.queue.front() {
            if departure > now_ns {
                break;
            }
            self.queue.pop_front();
            self.queued_bytes -= bytes;
        }
        if self.queued_bytes.saturating_add(length_bytes) > self.config.queue_capacity_bytes {
            return None;
        }
        let serialisation_ns =
            ((length_bytes as u128 * 8 * 1_000_000_000).div_ceil(u128::from(rate))) as Nanos;
        let start = self.last_departure_ns.max(now_ns);
        let departure = start + serialisation_ns;
        self.last_departure_ns = departure;
        self.queue.push_back((departure, length_bytes));
        self.queued_bytes += length_bytes;
        Some(departure)
    }

    /// Changes one payload byte of a Data frame and re-emits the header under the sender's
    /// key (`forger`) so that the tag matches again.
    fn corrupt_undetectably(&mut self, datagram: Vec<u8>) -> Vec<u8> {
        let Some(key) = self.forger.clone() else {
            return datagram;
        };
        let Ok(frame) = Frame::parse_unauthenticated(&datagram) else {
            return datagram;
        };
        if frame.header().frame_type != FrameType::Data || frame.payload().is_empty() {
            return datagram;
        }
        let header = *frame.header();
        let mut payload = frame.payload().to_vec();
        let index = self.rng.below(payload.len() as u64) as usize;
        payload[index] ^= self.rng.range_inclusive(1, 255) as u8;
        let mut out = vec![0u8; quiver_wire::frame::MAX_HEADER_LEN];
        let keys = FrameKeys {
            job: &key,
            connection: Some(&key),
        };
        let Ok(length) = header.emit(keys, &mut out, &payload) else {
            return datagram;
        };
        out.truncate(length);
        out.extend_from_slice(&payload);
        self.stats.corrupted += 1;
        out
    }

    fn draw_tail_drop(&mut self, datagram: &[u8]) -> bool {
        let Some(rule) = self.config.tail_drop else {
            return false;
        };
        let Ok(frame) = Frame::parse_unauthenticated(datagram) else {
            return false;
        };
        let header = frame.header();
        let end = header.fragment_offset + frame.payload().len() as u64;
        // The body after the length prefix (a tagged message's tag included), in which
        // fragment offsets count.
        let body_len = MessagePrefix::from_raw(header.message_len).body_len();
        let in_tail = header.frame_type == FrameType::Data
            && end + rule.tail_bytes > body_len
            && !frame.payload().is_empty();
        if !in_tail {
            return false;
        }
        let count = self
            .tail_drops
            .entry((header.message_id, header.fragment_offset))
            .or_insert(0);
        if *count >= rule.times {
            return false;
        }
        *count += 1;
        true
    }

    fn draw_loss(&mut self) -> bool {
        let loss_probability = match self.config.burst_loss {
            None => self.config.loss_probability,
            Some(model) => {
                let flip = if self.burst_bad {
                    model.bad_to_good
                } else {
                    model.good_to_bad
                };
                if self.rng.chance(flip) {
                    self.burst_bad = !self.burst_bad;
                }
                if self.burst_bad {
                    model.loss_probability_bad
                } else {
                    self.config.loss_probability
                }
            }
        };
        self.rng.chance(loss_probability)
    }

    fn finish_copy(
        &mut self,
        departure_ns: Nanos,
        mut datagram: Vec<u8>,
    ) -> (Nanos, Vec<u8>, bool) {
        if self
            .rng
            .chance(self.config.undetectable_corrupt_probability)
        {
            datagram = self.corrupt_undetectably(datagram);
        }
        let corrupt = !datagram.is_empty() && self.rng.chance(self.config.corrupt_probability);
        if corrupt {
            self.stats.corrupted += 1;
            let flips = self.rng.range_inclusive(1, 3);
            let mut flipped = [usize::MAX; 3];
            for flip in 0..flips as usize {
                let index = self.rng.below(datagram.len() as u64) as usize;
                let mask = self.rng.range_inclusive(1, 255) as u8;
                // Flipping the same byte twice could undo the change: skip repeats.
                if !flipped.contains(&index) {
                    datagram[index] ^= mask;
                    flipped[flip] = index;
                }
            }
        }
        let jitter = self.rng.range_inclusive(0, self.config.jitter_ns);
        (
            departure_ns + self.config.delay_ns + jitter,
            datagram,
            corrupt,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(config: LinkConfig) -> Link {
        Link::new(config, SimRng::new(1))
    }

    #[test]
    fn clean_link_delivers_once_after_delay() {
        let mut link = link(LinkConfig::default());
        let out = link.transmit(100, vec![1, 2, 3]);
        assert_eq!(out.copies, vec![(10_100, vec![1, 2, 3], false)]);
        assert_eq!(link.stats().delivered, 1);
    }

    #[test]
    fn mtu_and_partition_drop() {
        let mut config = LinkConfig {
            mtu_bytes: 4,
            ..LinkConfig::default()
        };
        config.down_intervals.push((50, 60));
        let mut link = link(config);
        assert_eq!(link.transmit(0, vec![0; 5]).dropped, Some(DropReason::Mtu));
        assert_eq!(
            link.transmit(55, vec![0; 2]).dropped,
            Some(DropReason::Partition)
        );
        assert!(link.is_up(60));
        assert_eq!(link.transmit(60, vec![0; 2]).copies.len(), 1);
        assert_eq!(link.stats().dropped_mtu, 1);
        assert_eq!(link.stats().dropped_partition, 1);
    }

    #[test]
    fn bandwidth_serialises_and_queue_drops_tail() {
        // 8 Mbit/s: one byte per microsecond.
        let mut link = link(LinkConfig {
            delay_ns: 0,
            bandwidth_bits_per_second: 8_000_000,
            queue_capacity_bytes: 2500,
            ..LinkConfig::default()
        });
        let first = link.transmit(0, vec![0; 1000]);
        assert_eq!(first.copies[0].0, 1_000_000);
        let second = link.transmit(0, vec![0; 1000]);
        assert_eq!(second.copies[0].0, 2_000_000);
        let third = link.transmit(0, vec![0; 1000]);
        assert_eq!(third.dropped, Some(DropReason::Queue));
        // After the first left, there is room again.
        let fourth = link.transmit(1_000_000, vec![0; 1000]);
        assert_eq!(fourth.copies[0].0, 3_000_000);
    }

    fn data_frame(message_id: u64, message_len: u64, offset: u64, payload: &[u8]) -> Vec<u8> {
        use quiver_wire::frame::{FrameHeader, MAX_HEADER_LEN};
        let mut header = FrameHeader::new(FrameType::Data, 7, 8);
        header.message_id = message_id;
        header.message_len = message_len;
        header.fragment_offset = offset;
        let mut out = vec![0u8; MAX_HEADER_LEN];
        let key = quiver_wire::frame::FrameKey::new(&[1; 32]);
        let keys = quiver_wire::frame::FrameKeys {
            job: &key,
            connection: Some(&key),
        };
        let length = header.emit(keys, &mut out, payload).expect("valid header");
        out.truncate(length);
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn tail_drop_drops_only_tail_fragments_the_given_number_of_times() {
        let mut link = link(LinkConfig {
            tail_drop: Some(TailDrop {
                tail_bytes: 100,
                times: 2,
            }),
            ..LinkConfig::default()
        });
        let head = data_frame(1, 300, 0, &[0; 150]);
        let tail = data_frame(1, 300, 150, &[0; 150]);
        assert!(link.transmit(0, head.clone()).dropped.is_none());
        assert_eq!(
            link.transmit(0, tail.clone()).dropped,
            Some(DropReason::Tail)
        );
        assert_eq!(
            link.transmit(0, tail.clone()).dropped,
            Some(DropReason::Tail)
        );
        assert!(link.transmit(0, tail).dropped.is_none());
        assert!(link.transmit(0, head).dropped.is_none());
        assert!(link.transmit(0, vec![1, 2, 3]).dropped.is_none());
        assert_eq!(link.stats().dropped_tail, 2);
    }

    #[test]
    fn loss_rate_is_roughly_configured() {
        let mut link = link(LinkConfig {
            loss_probability: 0.3,
            ..LinkConfig::default()
        });
        for _ in 0..10_000 {
            link.transmit(0, vec![0; 10]);
        }
        let lost = link.stats().dropped_loss;
        assert!((2_700..3_300).contains(&lost), "lost {lost}");
    }

    #[test]
    fn burst_loss_comes_in_runs() {
        let mut link = link(LinkConfig {
            burst_loss: Some(GilbertElliott {
                good_to_bad: 0.01,
                bad_to_good: 0.2,
                loss_probability_bad: 1.0,
            }),
            ..LinkConfig::default()
        });
        let mut longest_run = 0;
        let mut run = 0;
        for _ in 0..20_000 {
            if link.transmit(0, vec![0; 10]).dropped.is_some() {
                run += 1;
                longest_run = longest_run.max(run);
            } else {
                run = 0;
            }
        }
        assert!(link.stats().dropped_loss > 200);
        assert!(longest_run >= 8, "longest run {longest_run}");
    }

    #[test]
    fn jitter_reorders_duplicates_and_corruption_changes_bytes() {
        let mut link = link(LinkConfig {
            jitter_ns: 1_000_000,
            duplicate_probability: 0.5,
            corrupt_probability: 0.5,
            ..LinkConfig::default()
        });
        let mut arrivals = Vec::new();
        let mut changed = 0;
        for index in 0..1000u64 {
            let payload = index.to_le_bytes().to_vec();
            for (at, bytes, _) in link.transmit(index * 1000, payload.clone()).copies {
                arrivals.push(at);
                if bytes != payload {
                    changed += 1;
                }
            }
        }
        assert!(arrivals.windows(2).any(|pair| pair[1] < pair[0]));
        assert!(link.stats().duplicated > 400);
        assert!(changed > 300);
        assert_eq!(link.stats().corrupted, changed);
    }
}
