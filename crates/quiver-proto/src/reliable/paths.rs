//! The paths of a connection: one connection striped over up to [`MAX_PATHS`] links
//! (`docs/striping.md`).
//!
//! Layer: sans-IO, inside `crate::reliable`, below the send state that uses it. It owns
//! each path's state (window, rate, RTT, loss, up or down) and the choice of path for a
//! frame; it must not see addresses, sockets or a clock.
//!
//! A path is an index `0..path_count`. The core never sees an address: the I/O layer maps
//! index `i` to a (local socket, remote address) pair, tells
//! [`ReliableConnection::handle_datagram`](super::ReliableConnection::handle_datagram) the
//! path a datagram arrived on, and sends each [`Transmit`](super::Transmit) on the path it
//! names. Path `i` is the same link in both directions.
//!
//! Per path this module keeps:
//! - an RTT estimator (RFC 6298) and its own retransmission timer, with backoff;
//! - the minimum RTT and a windowed maximum of delivery-rate samples: bytes acknowledged
//!   (first transmissions only) over intervals of at least `RATE_METER_MIN_NS` or one
//!   smoothed RTT, long enough that acks arriving in bursts (batched receives, GRO, GSO
//!   sends) do not read as a faster link;
//! - the frames in flight on it, in send order, as a list threaded through the sender's
//!   in-flight table (no container of its own, so memory stays within the connection's
//!   bound), and their bytes;
//! - a congestion window, `GAIN x rate x (min RTT + ABSENCE_ALLOWANCE_NS)`, at least
//!   `MIN_WINDOW_BYTES`: enough to keep the link busy while either process is off its CPU
//!   for a few milliseconds, small enough not to overflow a tbf-shaped link's queue
//!   (20 ms on the testbed); random loss must not slow a path down (the window ignores
//!   loss);
//! - its state: [`PathState::Up`], [`PathState::Suspect`] after a retransmission timeout or
//!   an unanswered ping (one frame in flight until something sent on it is acknowledged;
//!   a single path too, so that a timeout while the peer was paused costs one frame),
//!   [`PathState::Down`] after `DOWN_AFTER_FAILURES` failures in a row (its frames are
//!   requeued on the others; it is probed with pings and rejoins when one is answered).
//!   The last usable path never goes down: the connection's own liveness rules
//!   (`max_retransmits`, `idle_timeout_ns`) decide when the peer is gone.
//!
//! Scheduling: a frame goes on the usable path with room whose expected arrival is
//! earliest (bytes queued ahead of it at the path's rate, plus half its minimum RTT), so
//! faster paths carry more and frames arrive nearly in order.
//!
//! Pure state: no I/O, no clock, no randomness.

use super::rtt::RttEstimator;
use super::time::Nanos;

/// Most paths one connection can have.
pub const MAX_PATHS: usize = 64;

/// Window gain over the estimated bandwidth-delay product.
const GAIN: u64 = 2;
/// Added to the minimum RTT in the window, at most: the time acks may be held back by the
/// peer's batching and scheduling, and the time either process may be off its CPU. The
/// window exceeds the bandwidth-delay product by `GAIN x rate x allowance` (8 ms of the
/// link at 4 ms): while the receiver is away the sender keeps the link busy (the frames
/// wait in the receiver's socket buffer), and while the sender is away the link drains the
/// queue that surplus keeps at the bottleneck. With 1 ms (2 ms of the link) every pause of
/// a process longer than ~2 ms left the link idle: on a 2-vCPU VM that cost 5-20% of a
/// 1 Gbit/s link, run after run, while the kernel's TCP (which acks and sends without the
/// application) kept its rate.
const MAX_ABSENCE_ALLOWANCE_NS: Nanos = 4_000_000;
/// The least allowance, whatever the budget.
const MIN_ABSENCE_ALLOWANCE_NS: Nanos = 1_000_000;
/// The surplus over the bandwidth-delay products of all paths together, in bytes: the
/// allowance shrinks (down to `MIN_ABSENCE_ALLOWANCE_NS`) so that `GAIN x total rate x
/// allowance` stays within it: 4 ms up to 2 Gbit/s, 1 ms at 8 Gbit/s. Bytes in flight
/// beyond what the links hold wait in socket buffers, and where the processes rather than
/// the links are the bottleneck (8 x 1 Gbit/s at MTU 1500 on the 2-vCPU VM) they cost
/// throughput: 0.84 of nominal with 1 ms, 0.72 with 4 ms, in the same runs. A 1 MiB budget
/// (0.5 ms at 8 links, 2.1 ms at 2) was tried and taken back: at 2 links under CPU
/// contention it gave 0.85-0.88 of TCP against 0.84-0.98 with 2 MiB, in alternating
/// launches of `quiver bench stripe --links 2 --rate 1gbit`.
const SURPLUS_BUDGET_BYTES: u64 = 2 << 20;
/// Smallest window of an Up path, in bytes (and at least `MIN_WINDOW_DATAGRAMS`).
const MIN_WINDOW_BYTES: u64 = 64 << 10;
/// Smallest window of an Up path, in full datagrams.
const MIN_WINDOW_DATAGRAMS: u64 = 4;
/// Failures in a row (retransmission timeouts, unanswered pings) that take a path down.
pub(super) const DOWN_AFTER_FAILURES: u32 = 3;
/// Time over which the delivery-rate maximum is taken.
const RATE_WINDOW_NS: Nanos = 100_000_000;
/// Shortest interval of one delivery-rate sample: long against a shaper's burst (tbf lets
/// its bucket, 2 ms at the rate on the testbed, through at memory speed after a pause).
const RATE_METER_MIN_NS: Nanos = 10_000_000;
/// A timer (retransmission, ping answer) that runs this much after its deadline says this
/// process was not running (descheduled on a busy host, a VM's vCPU paused): what the peer
/// sent meanwhile may still wait, unread, in the sockets. It waits one more RTO instead of
/// failing the path (once per run of failures). The engine's own lateness, a poll round or
/// an epoll timeout rounded to 1 ms, stays well below it.
const LATE_TIMER_NS: Nanos = 2_000_000;
/// "No frame": the end of a path's list of frames in flight.
pub(super) const NO_FRAME: u64 = u64::MAX;

/// `a * b / c` without overflow (saturating at `u64::MAX`; `c` > 0): in u64 when the product
/// fits, which is the common case and avoids a 128-bit division per call (the scheduler
/// computes a few of these per path for every frame sent).
fn mul_div(a: u64, b: u64, c: u64) -> u64 {
    match a.checked_mul(b) {
        Some(product) => product / c,
        None => u64::try_from(u128::from(a) * u128::from(b) / u128::from(c)).unwrap_or(u64::MAX),
    }
}

/// What a path is good for now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PathState {
    /// Carries data up to its window.
    #[default]
    Up,
    /// A retransmission timeout or an unanswered ping: one frame in flight at a time until
    /// something sent on it is acknowledged (and one frame after each timeout).
    Suspect,
    /// Failed repeatedly: carries only probe pings; rejoins when one is answered.
    Down,
}

/// Counters and gauges of one path, from
/// [`ReliableConnection::path_stats`](super::ReliableConnection::path_stats).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathStats {
    /// The path's state now.
    pub state: PathState,
    /// Smoothed RTT in ns (0 before the first sample).
    pub smoothed_rtt_ns: u64,
    /// Smallest RTT sample in ns (0 before the first sample).
    pub min_rtt_ns: u64,
    /// Retransmission timeout in ns, backoff included.
    pub rto_ns: u64,
    /// Windowed maximum of the delivery-rate samples, bytes per second (0: no sample).
    pub delivery_rate_bytes_per_second: u64,
    /// Frame bytes (header estimate included) sent on this path and not yet
    /// acknowledged or declared lost.
    pub bytes_in_flight: u64,
    /// The congestion window in bytes now (0 when down).
    pub window_bytes: u64,
    /// Datagrams sent on this path (data, control, handshake).
    pub datagrams_sent: u64,
    /// Datagrams that arrived on this path.
    pub datagrams_received: u64,
    /// Data and Close frames sent on this path (retransmissions included).
    pub frames_sent: u64,
    /// Payload bytes of those frames.
    pub payload_bytes_sent: u64,
    /// Frames sent on this path that were acknowledged (their current transmission).
    pub frames_acked: u64,
    /// Frames sent on this path declared lost (by later frames of the path, by timeout, or
    /// because the path went down).
    pub frames_lost: u64,
    /// Frames of this path declared lost (by later frames of the path, by timeout) whose
    /// first transmission was acknowledged before any retransmission, and frames whose
    /// loss was undone with a spurious timeout (`spurious_timeouts`): losses that were
    /// not, mostly from a timeout that fired while the peer was off its CPU. (A frame
    /// retransmitted before the ack came is not counted: either copy may have arrived.)
    pub spurious_losses: u64,
    /// Retransmission timeouts of this path.
    pub rto_expirations: u64,
    /// Of those, timeouts proven spurious: a frame they declared lost was acknowledged
    /// from its first transmission, and their losses were undone (the frames not yet
    /// resent went back in flight).
    pub spurious_timeouts: u64,
    /// Timers of this path (retransmission, ping answer) that ran late, while this process
    /// was not running, and waited one more RTO for what the peer sent meanwhile.
    pub late_timers_deferred: u64,
    /// Times the path went down.
    pub times_down: u64,
    /// Times the path came back after being down.
    pub times_rejoined: u64,
}

/// A windowed maximum over time (Kathleen Nichols' three-sample filter, as in BBR).
#[derive(Debug, Clone, Default)]
struct MaxFilter {
    /// (value, time) of the best, second and third best samples; value 0: empty.
    samples: [(u64, Nanos); 3],
}

impl MaxFilter {
    fn get(&self) -> u64 {
        self.samples[0].0
    }

    fn reset(&mut self) {
        self.samples = [(0, 0); 3];
    }

    fn update(&mut self, now: Nanos, value: u64, window: Nanos) {
        let sample = (value, now);
        if self.samples[0].0 == 0
            || value >= self.samples[0].0
            || now.saturating_sub(self.samples[2].1) > window
        {
            self.samples = [sample; 3];
            return;
        }
        if value >= self.samples[1].0 {
            self.samples[1] = sample;
            self.samples[2] = sample;
        } else if value >= self.samples[2].0 {
            self.samples[2] = sample;
        }
        let age = now.saturating_sub(self.samples[0].1);
        if age > window {
            self.samples[0] = self.samples[1];
            self.samples[1] = self.samples[2];
            self.samples[2] = sample;
            if now.saturating_sub(self.samples[0].1) > window {
                self.samples[0] = self.samples[1];
                self.samples[1] = self.samples[2];
            }
        } else if self.samples[1] == self.samples[0] && age > window / 4 {
            self.samples[1] = sample;
            self.samples[2] = sample;
        } else if self.samples[2] == self.samples[1] && age > window / 2 {
            self.samples[2] = sample;
        }
    }
}

/// One path's state. Fields the sender updates directly are `pub(super)`.
#[derive(Debug)]
pub(super) struct Path {
    pub(super) state: PathState,
    pub(super) rtt: RttEstimator,
    min_rtt_ns: Option<Nanos>,
    rate: MaxFilter,
    /// Largest frame (payload plus header estimate) of the connection.
    max_frame_bytes: u64,
    /// The connection's absence allowance now ([`Paths::rebalance`]).
    allowance_ns: Nanos,
    /// Derived from the rate, the RTTs and `max_frame_bytes` whenever one of them changes
    /// ([`Path::refresh_derived`]), so that the scheduler, which looks at every path for
    /// every frame sent, does no division: the window when Up, and the picoseconds one
    /// byte takes at the rate the scheduler assumes when Up (`expected_arrival_ns`).
    up_window_bytes: u64,
    up_picos_per_byte: u64,
    /// The rate meter: when the current interval started (None: idle), the bytes
    /// acknowledged in it, when the last of them was, and when the frames counted in it
    /// were sent, earliest and latest (`Nanos::MAX`, 0: none yet).
    meter_start: Option<Nanos>,
    meter_bytes: u64,
    meter_last_at: Nanos,
    meter_first_sent_at: Nanos,
    meter_last_sent_at: Nanos,
    pub(super) bytes_in_flight: u64,
    /// Transmissions on this path so far (each frame gets the next number).
    pub(super) next_seq: u64,
    /// Highest path sequence number acknowledged, if any.
    pub(super) largest_acked_seq: Option<u64>,
    /// While an ack is processed: when the newest frame it acknowledged on this path (sent
    /// once) left, for the path's one RTT sample of that ack.
    pub(super) newest_acked_sent_at: Option<Nanos>,
    /// Oldest and newest packet numbers in flight on this path ([`NO_FRAME`]: none).
    pub(super) head: u64,
    pub(super) tail: u64,
    pub(super) rto_deadline: Option<Nanos>,
    /// Retransmission timeouts and unanswered pings since the last sign of life.
    pub(super) consecutive_failures: u32,
    /// A late timer already waited since the last sign of life or failure.
    late_timer_deferred: bool,
    /// A retransmission timeout fired and nothing was sent on the path since: a Suspect
    /// path may send one frame even with frames still counted in flight (the timeout
    /// declares only the oldest lost when the whole peer was silent, and the others stay
    /// in flight until an ack or their own timeouts; without this the resend of the
    /// oldest waited for all of them, one backed-off timeout each).
    pub(super) timeout_probe: bool,
    /// When the path's latest retransmission timeout fired (0: never). A frame sent
    /// before it gives no RTT sample: its ack may have waited for what that timeout resent
    /// (the acks of a whole window lost, the next one comes only after the resend), and
    /// such samples, a whole RTO long, had pushed the RTO of a 0.1 ms link to its 1 s
    /// maximum within seconds at 10% loss.
    pub(super) last_timeout_at: Nanos,
    /// [`Paths::signs_of_life`] when the current run of failures began (None: not failing).
    /// The path may go down only if another path showed life since: when every path
    /// fails at once, the peer (or this process) stalled, not the link.
    failing_since: Option<u64>,
    /// Ping to send on this path with the next transmit.
    ping_due: bool,
    /// Counter of pings sent on this path; the token of ping `n` is `n * MAX_PATHS + index`.
    ping_count: u64,
    /// The outstanding ping: its counter, when it left, and when it counts as unanswered.
    ping_outstanding: Option<(u64, Nanos, Nanos)>,
    /// Pings with a counter at least this answer a probe of a Down path.
    probe_floor: u64,
    /// Down: when to probe next, and the interval after that.
    next_probe_at: Option<Nanos>,
    probe_interval_ns: Nanos,
    /// Token of a peer's ping to echo on this path.
    reply_due: Option<u64>,
    pub(super) stats: PathStats,
}

impl Path {
    fn new(rtt: RttEstimator, max_frame_bytes: u64) -> Path {
        let mut path = Path {
            state: PathState::Up,
            rtt,
            min_rtt_ns: None,
            rate: MaxFilter::default(),
            max_frame_bytes,
            allowance_ns: MAX_ABSENCE_ALLOWANCE_NS,
            up_window_bytes: 0,
            up_picos_per_byte: 0,
            meter_start: None,
            meter_bytes: 0,
            meter_last_at: 0,
            meter_first_sent_at: Nanos::MAX,
            meter_last_sent_at: 0,
            bytes_in_flight: 0,
            next_seq: 0,
            largest_acked_seq: None,
            newest_acked_sent_at: None,
            head: NO_FRAME,
            tail: NO_FRAME,
            rto_deadline: None,
            consecutive_failures: 0,
            late_timer_deferred: false,
            timeout_probe: false,
            last_timeout_at: 0,
            failing_since: None,
            ping_due: false,
            ping_count: 0,
            ping_outstanding: None,
            probe_floor: 0,
            next_probe_at: None,
            probe_interval_ns: 0,
            reply_due: None,
            stats: PathStats::default(),
        };
        path.refresh_derived();
        path
    }

    /// Recomputes what is derived from the rate, the RTTs and the frame size (call after
    /// any of them changes).
    fn refresh_derived(&mut self) {
        let floor = MIN_WINDOW_BYTES.max(MIN_WINDOW_DATAGRAMS * self.max_frame_bytes);
        let rate = self.rate.get();
        self.up_window_bytes = if rate == 0 {
            floor
        } else {
            let time_ns = self
                .min_rtt_ns
                .unwrap_or(0)
                .saturating_add(self.allowance_ns);
            mul_div(rate, time_ns, 1_000_000_000)
                .saturating_mul(GAIN)
                .max(floor)
        };
        self.up_picos_per_byte = 1_000_000_000_000 / self.assumed_rate(self.up_window_bytes);
    }

    /// The rate (bytes per second, at least 1) the scheduler assumes with `window`: the
    /// larger of the measured one and what the window allows per RTT. A path that carried
    /// little measured little, and must not look too slow to be given the traffic that
    /// would show its real rate (it would starve).
    fn assumed_rate(&self, window: u64) -> u64 {
        let by_window = match self.rtt.smoothed_ns() {
            // Before the first sample every path looks like 1 GB/s: the least loaded wins.
            0 => 1_000_000_000,
            srtt => mul_div(window, 1_000_000_000, srtt),
        };
        self.rate.get().max(by_window).max(1)
    }

    /// The congestion window in bytes: `GAIN x rate x (min RTT + allowance)`
    /// when Up (at least `MIN_WINDOW_BYTES` and `MIN_WINDOW_DATAGRAMS` full frames), one
    /// full frame when Suspect, 0 when Down.
    pub(super) fn window_bytes(&self) -> u64 {
        match self.state {
            PathState::Down => 0,
            PathState::Suspect => self.max_frame_bytes,
            PathState::Up => self.up_window_bytes,
        }
    }

    /// Whether a frame of `frame_bytes` fits the window now.
    pub(super) fn has_room(&self, frame_bytes: u64) -> bool {
        match self.state {
            PathState::Down => false,
            PathState::Suspect => self.bytes_in_flight == 0 || self.timeout_probe,
            PathState::Up => {
                self.bytes_in_flight.saturating_add(frame_bytes) <= self.up_window_bytes
            }
        }
    }

    /// When a frame of `frame_bytes` sent now is expected to arrive, relative to now, in
    /// ns: the bytes queued ahead of it and its own at the rate [`Path::assumed_rate`], plus
    /// half the minimum RTT.
    fn expected_arrival_ns(&self, frame_bytes: u64) -> u64 {
        let queued = self.bytes_in_flight.saturating_add(frame_bytes);
        let picos_per_byte = match self.state {
            PathState::Up => self.up_picos_per_byte,
            // Rare (one frame in flight at most): computed here.
            PathState::Suspect | PathState::Down => {
                1_000_000_000_000 / self.assumed_rate(self.window_bytes())
            }
        };
        (queued.saturating_mul(picos_per_byte) / 1000)
            .saturating_add(self.min_rtt_ns.unwrap_or(0) / 2)
    }

    /// The smallest RTT sample, 0 before the first.
    pub(super) fn min_rtt_ns(&self) -> Nanos {
        self.min_rtt_ns.unwrap_or(0)
    }

    /// Takes an RTT sample for this path.
    pub(super) fn on_rtt_sample(&mut self, sample_ns: Nanos) {
        self.rtt.on_sample(sample_ns);
        self.min_rtt_ns = Some(self.min_rtt_ns.map_or(sample_ns, |min| min.min(sample_ns)));
        self.refresh_derived();
    }

    /// A frame starts out on this path: a path that was idle for a meter interval starts a
    /// new one (idle time is not delivery time). Shorter gaps (a window acknowledged at
    /// once, then refilled) stay in the interval, or no interval would ever complete.
    pub(super) fn on_send(&mut self, now: Nanos) {
        self.timeout_probe = false;
        let idle = self.bytes_in_flight == 0
            && now.saturating_sub(self.meter_last_at) >= RATE_METER_MIN_NS;
        if self.meter_start.is_none() || idle {
            self.start_meter_interval(now);
        }
    }

    /// A retransmission timeout: the time the path waited for it is not delivery time.
    /// The rate meter's interval ends without a sample and a new one starts with the next
    /// frame. (Counted in, a 200 ms wait made a sample of a 4 Gbit/s link read a few
    /// hundred KB/s, the window fell to its floor, and at 10% loss every lost ack of that
    /// one-window flight cost another timeout.)
    pub(super) fn restart_meter(&mut self) {
        self.meter_start = None;
    }

    fn start_meter_interval(&mut self, now: Nanos) {
        self.meter_start = Some(now);
        self.meter_bytes = 0;
        self.meter_last_at = now;
        self.meter_first_sent_at = Nanos::MAX;
        self.meter_last_sent_at = 0;
    }

    /// `bytes` of a first transmission sent at `sent_at` were acknowledged: counted by the
    /// rate meter, which takes a sample once its interval is long enough. Returns whether
    /// the windowed maximum may have changed (callers go through [`Paths::delivered`],
    /// which then rebalances the allowance).
    ///
    /// A sample is the bytes over the longer of the interval and the time their frames
    /// took to leave (as BBR's delivery rate): after the receiver paused, the acks of
    /// everything sent meanwhile come in one burst, and over the acks' time alone that read
    /// as several times the link's rate (the window, grown from it, then overflowed the
    /// link's queue).
    fn on_delivered(&mut self, now: Nanos, bytes: u64, sent_at: Nanos) -> bool {
        let Some(start) = self.meter_start else {
            self.start_meter_interval(now);
            return false;
        };
        self.meter_bytes += bytes;
        self.meter_last_at = now;
        self.meter_first_sent_at = self.meter_first_sent_at.min(sent_at);
        self.meter_last_sent_at = self.meter_last_sent_at.max(sent_at);
        let interval_ns = now.saturating_sub(start);
        if interval_ns >= RATE_METER_MIN_NS.max(self.rtt.smoothed_ns()) {
            let sending_ns = self
                .meter_last_sent_at
                .saturating_sub(self.meter_first_sent_at);
            let rate = mul_div(self.meter_bytes, 1_000_000_000, interval_ns.max(sending_ns));
            self.rate.update(now, rate, RATE_WINDOW_NS);
            self.start_meter_interval(now);
            return true;
        }
        false
    }

    /// A timer of this path due at `deadline` runs at `now`: if it runs more than
    /// [`LATE_TIMER_NS`] late, and no late timer waited since the path's last sign of life
    /// or failure, returns when it should run instead (one RTO from now).
    pub(super) fn defer_late_timer(&mut self, now: Nanos, deadline: Nanos) -> Option<Nanos> {
        if self.late_timer_deferred || now.saturating_sub(deadline) <= LATE_TIMER_NS {
            return None;
        }
        self.late_timer_deferred = true;
        self.stats.late_timers_deferred += 1;
        Some(now.saturating_add(self.rtt.rto_ns()))
    }

    /// A retransmission timeout or an unanswered ping; `signs_of_life` is the connection's
    /// count so far ([`Paths::signs_of_life`]).
    pub(super) fn on_failure(&mut self, signs_of_life: u64) {
        self.consecutive_failures += 1;
        self.late_timer_deferred = false;
        self.failing_since.get_or_insert(signs_of_life);
    }

    /// Something sent on this path was acknowledged: it works. Callers count it in
    /// [`Paths::signs_of_life`] too ([`Paths::mark_alive`] does both).
    fn on_alive(&mut self) {
        self.consecutive_failures = 0;
        self.late_timer_deferred = false;
        self.failing_since = None;
        if self.state == PathState::Suspect {
            self.state = PathState::Up;
        }
    }

    /// The counters, with the gauges as they are now.
    fn stats_now(&self) -> PathStats {
        PathStats {
            state: self.state,
            smoothed_rtt_ns: self.rtt.smoothed_ns(),
            min_rtt_ns: self.min_rtt_ns.unwrap_or(0),
            rto_ns: self.rtt.rto_ns(),
            delivery_rate_bytes_per_second: self.rate.get(),
            bytes_in_flight: self.bytes_in_flight,
            window_bytes: self.window_bytes(),
            ..self.stats.clone()
        }
    }
}

/// A ping to send: the path and the token it carries (in the packet-number field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PingToSend {
    pub(super) path: usize,
    pub(super) token: u64,
}

/// The paths of one connection.
#[derive(Debug)]
pub(super) struct Paths {
    paths: Vec<Path>,
    /// Largest frame (payload plus header estimate) the connection sends.
    max_frame_bytes: u64,
    max_rto_ns: Nanos,
    /// Path the peer's most recent datagram arrived on: where standalone acks go.
    ack_path: usize,
    /// Signs of life of any path so far (acks of frames sent on one path, ping replies,
    /// rejoins): a failing path goes down only if this moved since its failures began.
    signs_of_life: u64,
    /// When the latest frame (first transmission) or ping that got through on any path
    /// was sent: the peer was alive and reading then.
    latest_delivered_sent_at: Nanos,
    /// When the latest acknowledgement of such a frame, or answer to such a ping, arrived:
    /// the peer was alive and reading shortly before.
    latest_delivered_at: Nanos,
    /// Some path may have a ping or a ping reply to send (false: none has; spares
    /// `take_reply`/`take_ping` their walk over the paths on every `poll_transmit`).
    control_due: bool,
}

impl Paths {
    /// `count` paths (1..=MAX_PATHS, checked by config validation), all Up.
    pub(super) fn new(
        count: usize,
        max_frame_bytes: u64,
        initial_rto_ns: Nanos,
        min_rto_ns: Nanos,
        max_rto_ns: Nanos,
    ) -> Paths {
        Paths {
            paths: (0..count.clamp(1, MAX_PATHS))
                .map(|_| {
                    Path::new(
                        RttEstimator::new(initial_rto_ns, min_rto_ns, max_rto_ns),
                        max_frame_bytes,
                    )
                })
                .collect(),
            max_frame_bytes,
            max_rto_ns,
            ack_path: 0,
            signs_of_life: 0,
            latest_delivered_sent_at: 0,
            latest_delivered_at: 0,
            control_due: false,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.paths.len()
    }

    pub(super) fn get(&self, path: usize) -> &Path {
        &self.paths[path]
    }

    pub(super) fn get_mut(&mut self, path: usize) -> &mut Path {
        &mut self.paths[path]
    }

    /// The usable path with room for `frame_bytes` whose expected arrival is earliest.
    pub(super) fn choose(&self, frame_bytes: u64) -> Option<usize> {
        if self.paths.len() == 1 {
            return self.paths[0].has_room(frame_bytes).then_some(0);
        }
        // This runs for every frame sent: no division on the way (`Path::refresh_derived`).
        let mut best: Option<(u64, usize)> = None;
        for (index, path) in self.paths.iter().enumerate() {
            if !path.has_room(frame_bytes) {
                continue;
            }
            let arrival = path.expected_arrival_ns(frame_bytes);
            if best.is_none_or(|(best_arrival, _)| arrival < best_arrival) {
                best = Some((arrival, index));
            }
        }
        best.map(|(_, index)| index)
    }

    /// Whether some path could take a full-size frame now.
    pub(super) fn any_room(&self) -> bool {
        self.paths
            .iter()
            .any(|path| path.has_room(self.max_frame_bytes))
    }

    /// Paths that are not down.
    pub(super) fn usable_count(&self) -> usize {
        self.paths
            .iter()
            .filter(|path| path.state != PathState::Down)
            .count()
    }

    /// The usable path with the smallest smoothed RTT (unmeasured paths last, then by index).
    pub(super) fn best(&self) -> usize {
        self.paths
            .iter()
            .enumerate()
            .filter(|(_, path)| path.state != PathState::Down)
            .min_by_key(|(index, path)| {
                let srtt = path.rtt.smoothed_ns();
                (path.state != PathState::Up, srtt == 0, srtt, *index)
            })
            .map_or(0, |(index, _)| index)
    }

    /// `bytes` of a first transmission on `path`, sent at `sent_at`, were acknowledged
    /// (its rate meter).
    pub(super) fn delivered(&mut self, path: usize, now: Nanos, bytes: u64, sent_at: Nanos) {
        self.latest_delivered_sent_at = self.latest_delivered_sent_at.max(sent_at);
        self.latest_delivered_at = self.latest_delivered_at.max(now);
        if self.paths[path].on_delivered(now, bytes, sent_at) {
            self.rebalance();
        }
    }

    /// A rate changed: sets the allowance from the total rate of the usable paths (within
    /// [`SURPLUS_BUDGET_BYTES`]) and refreshes what every path derives from it.
    fn rebalance(&mut self) {
        let total_rate: u64 = self
            .paths
            .iter()
            .filter(|path| path.state != PathState::Down)
            .map(|path| path.rate.get())
            .sum();
        let allowance_ns = match total_rate.saturating_mul(GAIN) {
            0 => MAX_ABSENCE_ALLOWANCE_NS,
            per_second => mul_div(SURPLUS_BUDGET_BYTES, 1_000_000_000, per_second)
                .clamp(MIN_ABSENCE_ALLOWANCE_NS, MAX_ABSENCE_ALLOWANCE_NS),
        };
        for path in &mut self.paths {
            path.allowance_ns = allowance_ns;
            path.refresh_derived();
        }
    }

    /// When the latest frame or ping that got through (any path) was sent.
    pub(super) fn latest_delivered_sent_at(&self) -> Nanos {
        self.latest_delivered_sent_at
    }

    /// When the acknowledgement (or answer) of the latest frame or ping that got through
    /// (any path) arrived.
    pub(super) fn latest_delivered_at(&self) -> Nanos {
        self.latest_delivered_at
    }

    /// Signs of life of any path so far.
    pub(super) fn signs_of_life(&self) -> u64 {
        self.signs_of_life
    }

    /// Something sent on `path` was acknowledged (or answered): it works.
    pub(super) fn mark_alive(&mut self, path: usize) {
        self.signs_of_life += 1;
        self.paths[path].on_alive();
    }

    /// Whether `path` may go down now: it is not down, another path is usable, and some
    /// other path showed life since this one began failing (a link that fails while the
    /// others work is broken; when all fail together, the peer or this process stalled,
    /// and taking paths down would only slow the recovery).
    pub(super) fn may_go_down(&self, path: usize) -> bool {
        let entry = &self.paths[path];
        entry.state != PathState::Down
            && self.usable_count() > 1
            && entry
                .failing_since
                .is_some_and(|since| self.signs_of_life > since)
    }

    /// The fewest failures in a row of any usable path: the peer is unreachable when even
    /// its best path timed out this often.
    pub(super) fn fewest_failures(&self) -> u32 {
        self.paths
            .iter()
            .filter(|path| path.state != PathState::Down)
            .map(|path| path.consecutive_failures)
            .min()
            .unwrap_or(0)
    }

    /// A datagram from the peer arrived on `path`.
    pub(super) fn on_arrival(&mut self, path: usize) {
        self.paths[path].stats.datagrams_received += 1;
        self.ack_path = path;
    }

    /// Where a standalone ack goes: the arrival path of the peer's latest datagram, unless
    /// that path is down.
    pub(super) fn ack_path(&self) -> usize {
        if self.paths[self.ack_path].state == PathState::Down {
            self.best()
        } else {
            self.ack_path
        }
    }

    /// Counts a datagram sent on `path`.
    pub(super) fn count_sent(&mut self, path: usize) {
        if let Some(path) = self.paths.get_mut(path) {
            path.stats.datagrams_sent += 1;
        }
    }

    // ---- pings: keepalive, probes of Down paths, replies ----

    /// Keepalive: ping every path that is not down (a down path has its own probes).
    pub(super) fn ping_all_usable(&mut self) {
        for path in &mut self.paths {
            if path.state != PathState::Down {
                path.ping_due = true;
                self.control_due = true;
            }
        }
    }

    /// Ping one path (a credit probe).
    pub(super) fn ping(&mut self, path: usize) {
        self.paths[path].ping_due = true;
        self.control_due = true;
    }

    /// The peer pinged us on `path`: echo its token there.
    pub(super) fn queue_reply(&mut self, path: usize, token: u64) {
        self.paths[path].reply_due = Some(token);
        self.control_due = true;
    }

    /// Whether a ping or a ping reply may wait to be sent (set when one is queued, cleared
    /// once none is left).
    pub(super) fn control_due(&self) -> bool {
        self.control_due
    }

    /// Whether a ping reply waits to be sent.
    pub(super) fn reply_due(&self) -> bool {
        self.control_due && self.paths.iter().any(|path| path.reply_due.is_some())
    }

    /// The next ping reply to send, if any (path, token).
    pub(super) fn take_reply(&mut self) -> Option<PingToSend> {
        if !self.control_due {
            return None;
        }
        for (index, path) in self.paths.iter_mut().enumerate() {
            if let Some(token) = path.reply_due.take() {
                return Some(PingToSend { path: index, token });
            }
        }
        None
    }

    /// The next ping to send, if any; records it as outstanding (answer due within the
    /// path's RTO).
    pub(super) fn take_ping(&mut self, now: Nanos) -> Option<PingToSend> {
        if !self.control_due {
            return None;
        }
        for (index, path) in self.paths.iter_mut().enumerate() {
            if !path.ping_due {
                continue;
            }
            path.ping_due = false;
            path.ping_count += 1;
            let deadline = now.saturating_add(path.rtt.rto_ns());
            path.ping_outstanding = Some((path.ping_count, now, deadline));
            return Some(PingToSend {
                path: index,
                token: path.ping_count * MAX_PATHS as u64 + index as u64,
            });
        }
        self.control_due = self.paths.iter().any(|path| path.reply_due.is_some());
        None
    }

    /// A reply to our ping `token` arrived. Returns true when it brought a Down path back.
    pub(super) fn on_ping_reply(&mut self, now: Nanos, token: u64) -> bool {
        let index = (token % MAX_PATHS as u64) as usize;
        let counter = token / MAX_PATHS as u64;
        let Some(path) = self.paths.get_mut(index) else {
            return false;
        };
        if counter == 0 || counter > path.ping_count {
            return false;
        }
        if let Some((outstanding, sent_at, _)) = path.ping_outstanding {
            if outstanding == counter {
                path.ping_outstanding = None;
                path.on_rtt_sample(now.saturating_sub(sent_at));
                self.latest_delivered_sent_at = self.latest_delivered_sent_at.max(sent_at);
                self.latest_delivered_at = self.latest_delivered_at.max(now);
            }
        }
        if path.state == PathState::Down {
            if counter < path.probe_floor {
                return false;
            }
            path.state = PathState::Up;
            path.consecutive_failures = 0;
            path.failing_since = None;
            self.signs_of_life += 1;
            path.next_probe_at = None;
            path.rate.reset();
            path.meter_start = None;
            path.stats.times_rejoined += 1;
            self.rebalance();
            return true;
        }
        path.on_alive();
        self.signs_of_life += 1;
        false
    }

    // ---- timers ----

    /// Earliest timer of any path: retransmission timeouts, unanswered pings, probes.
    pub(super) fn next_deadline(&self) -> Option<Nanos> {
        // Read for every datagram: a plain minimum, `Nanos::MAX` standing for "none".
        let mut earliest = Nanos::MAX;
        for path in &self.paths {
            earliest = earliest
                .min(path.rto_deadline.unwrap_or(Nanos::MAX))
                .min(path.ping_outstanding.map_or(Nanos::MAX, |(_, _, at)| at))
                .min(path.next_probe_at.unwrap_or(Nanos::MAX));
        }
        (earliest != Nanos::MAX).then_some(earliest)
    }

    /// Runs the ping and probe timers due at `now`: an unanswered ping is a failure of its
    /// path (only with several paths: a single path is judged by the connection's own
    /// liveness rules); a Down path due for a probe gets a ping. Returns paths that failed
    /// often enough to go down (the caller requeues their frames) as a bit set.
    pub(super) fn handle_ping_timers(&mut self, now: Nanos) -> u64 {
        let several = self.paths.len() > 1;
        let signs_of_life = self.signs_of_life;
        let mut failed = 0u64;
        let mut probes = false;
        let max_rto = self.max_rto_ns;
        for (index, path) in self.paths.iter_mut().enumerate() {
            let due = path
                .ping_outstanding
                .filter(|&(_, _, deadline)| deadline <= now);
            if let Some((counter, sent_at, deadline)) = due {
                let late = match path.state {
                    // A down path's probes fail nothing: no reason to wait.
                    PathState::Down => None,
                    PathState::Up | PathState::Suspect => path.defer_late_timer(now, deadline),
                };
                if let Some(later) = late {
                    path.ping_outstanding = Some((counter, sent_at, later));
                } else {
                    path.ping_outstanding = None;
                    if several && path.state != PathState::Down {
                        path.on_failure(signs_of_life);
                        path.rtt.back_off();
                        if path.state == PathState::Up {
                            path.state = PathState::Suspect;
                        }
                        if path.consecutive_failures >= DOWN_AFTER_FAILURES {
                            failed |= 1 << index;
                        }
                    }
                }
            }
            if path.state == PathState::Down && path.next_probe_at.is_some_and(|at| at <= now) {
                path.ping_due = true;
                probes = true;
                path.probe_interval_ns = path.probe_interval_ns.saturating_mul(2).min(max_rto);
                path.next_probe_at = Some(now.saturating_add(path.probe_interval_ns));
            }
        }
        self.control_due |= probes;
        failed
    }

    /// Marks `path` down if another path is still usable; returns whether it did. The
    /// caller has requeued its frames (it holds none afterwards).
    pub(super) fn take_down(&mut self, now: Nanos, path: usize) -> bool {
        if self.paths[path].state == PathState::Down || self.usable_count() <= 1 {
            return false;
        }
        let max_rto = self.max_rto_ns;
        let entry = &mut self.paths[path];
        debug_assert_eq!(entry.head, NO_FRAME, "a path going down still holds frames");
        entry.state = PathState::Down;
        entry.rto_deadline = None;
        entry.ping_outstanding = None;
        entry.rate.reset();
        entry.min_rtt_ns = None;
        entry.stats.times_down += 1;
        entry.probe_floor = entry.ping_count + 1;
        entry.probe_interval_ns = entry.rtt.rto_ns().clamp(1, max_rto);
        entry.next_probe_at = Some(now.saturating_add(entry.probe_interval_ns));
        self.rebalance();
        if self.ack_path == path {
            self.ack_path = self.best();
        }
        true
    }

    /// The smallest RTO of a usable path.
    pub(super) fn min_rto_ns(&self) -> Nanos {
        let mut least = self.max_rto_ns;
        for path in &self.paths {
            if path.state != PathState::Down {
                least = least.min(path.rtt.rto_ns());
            }
        }
        least
    }

    /// Stats of one path, its gauges read now (not kept up to date on every call: with 8
    /// paths that was a few percent of a striped receiver's CPU).
    pub(super) fn stats(&self, path: usize) -> Option<PathStats> {
        self.paths.get(path).map(Path::stats_now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(count: usize) -> Paths {
        Paths::new(count, 1500, 10_000_000, 1_000_000, 1_000_000_000)
    }

    #[test]
    fn max_filter_keeps_the_window_maximum() {
        let mut filter = MaxFilter::default();
        filter.update(0, 10, 100);
        filter.update(10, 5, 100);
        assert_eq!(filter.get(), 10);
        filter.update(20, 20, 100);
        assert_eq!(filter.get(), 20);
        filter.update(200, 3, 100);
        assert!(filter.get() <= 20);
        filter.update(400, 4, 100);
        assert_eq!(filter.get(), 4, "old maxima expire");
    }

    #[test]
    fn window_follows_rate_and_min_rtt() {
        let mut set = paths(1);
        assert_eq!(set.get(0).window_bytes(), MIN_WINDOW_BYTES);
        set.get_mut(0).on_rtt_sample(1_000_000);
        // 100 MB/s: 1 MB per 10 ms, metered over 10 ms.
        set.get_mut(0).on_send(0);
        set.delivered(0, 5_000_000, 500_000, 0);
        assert_eq!(
            set.get(0).window_bytes(),
            MIN_WINDOW_BYTES,
            "interval too short"
        );
        set.delivered(0, 10_000_000, 500_000, 0);
        // 2 x 100 MB/s x (1 ms + 4 ms allowance) = 1 MB.
        assert_eq!(set.get(0).window_bytes(), 1_000_000);
        // A burst of acks right after: not a sample of its own.
        set.delivered(0, 10_100_000, 1_000_000, 0);
        assert_eq!(set.get(0).window_bytes(), 1_000_000);
        let path = set.get_mut(0);
        path.state = PathState::Suspect;
        assert!(path.has_room(1500));
        path.bytes_in_flight = 1;
        assert!(!path.has_room(1500));
        path.state = PathState::Down;
        assert_eq!(path.window_bytes(), 0);
    }

    #[test]
    fn a_timeout_wait_is_not_delivery_time() {
        let mut set = paths(1);
        set.get_mut(0).on_rtt_sample(100_000);
        set.get_mut(0).on_send(0);
        // 2 ms into a meter interval: too short for a sample.
        set.delivered(0, 2_000_000, 1_000_000, 0);
        // A retransmission timeout, and 200 ms without acks while frames stay in flight.
        set.get_mut(0).bytes_in_flight = 64 << 10;
        set.get_mut(0).restart_meter();
        set.get_mut(0).on_send(202_000_000);
        set.delivered(0, 212_000_000, 10_000_000, 202_000_000);
        // 10 MB in 10 ms: 1 GB/s (with the wait counted in: 11 MB over 212 ms, 52 MB/s).
        let rate = set.get(0).rate.get();
        assert!(rate >= 900_000_000, "rate {rate}");
    }

    #[test]
    fn a_window_acknowledged_at_once_still_gets_metered() {
        let mut set = paths(1);
        set.get_mut(0).on_rtt_sample(500_000);
        // Stop and wait: 64 KB out, all acknowledged 0.5 ms later, again and again.
        let mut now = 0;
        for _ in 0..40 {
            set.get_mut(0).on_send(now);
            set.get_mut(0).bytes_in_flight = 65_536;
            now += 500_000;
            set.get_mut(0).bytes_in_flight = 0;
            set.delivered(0, now, 65_536, 0);
        }
        // 64 KB per 0.5 ms = 131 MB/s.
        let rate = set.get(0).rate.get();
        assert!((120_000_000..=140_000_000).contains(&rate), "rate {rate}");
        assert!(set.get(0).window_bytes() > MIN_WINDOW_BYTES);
    }

    #[test]
    fn acks_compressed_by_a_pause_do_not_inflate_the_rate() {
        let mut set = paths(1);
        set.get_mut(0).on_rtt_sample(100_000);
        set.get_mut(0).on_send(0);
        // 100 MB/s for 10 ms: acknowledged as sent, 0.1 ms later.
        for step in 1..=100u64 {
            let sent_at = step * 100_000;
            set.delivered(0, sent_at + 100_000, 10_000, sent_at);
        }
        let steady = set.get(0).rate.get();
        assert!((95_000_000..=105_000_000).contains(&steady), "{steady}");
        // Then the receiver pauses for 30 ms: what was sent meanwhile (3 MB over 30 ms)
        // is acknowledged in a 1 ms burst after the pause.
        for step in 1..=300u64 {
            let sent_at = 10_100_000 + step * 100_000;
            set.delivered(0, 40_100_000 + step * 3_333, 10_000, sent_at);
        }
        let after = set.get(0).rate.get();
        assert!(after <= 105_000_000, "a pause read as {after} B/s");
    }

    #[test]
    fn the_surplus_of_all_paths_stays_within_the_budget() {
        // One path of 125 MB/s (1 Gbit/s): the whole allowance, 4 ms.
        let mut one = paths(1);
        one.get_mut(0).on_rtt_sample(100_000);
        one.get_mut(0).on_send(0);
        one.delivered(0, 10_000_000, 1_250_000, 0);
        assert_eq!(one.get(0).allowance_ns, MAX_ABSENCE_ALLOWANCE_NS);
        // 2 x 125 MB/s x (0.1 + 4 ms).
        assert_eq!(one.get(0).window_bytes(), 1_025_000);
        // Eight: 2 x 1 GB/s x allowance = 2 MiB, an allowance of 1.05 ms.
        let mut eight = paths(8);
        for index in 0..8 {
            eight.get_mut(index).on_rtt_sample(100_000);
            eight.get_mut(index).on_send(0);
            eight.delivered(index, 10_000_000, 1_250_000, 0);
        }
        let allowance = eight.get(0).allowance_ns;
        assert_eq!(allowance, (2 << 20) * 1_000_000_000 / 2_000_000_000);
        // Each window: 2 x 125 MB/s x 0.1 ms = 25 kB of BDP, and its share of the surplus.
        let surplus: u64 = (0..8)
            .map(|index| eight.get(index).window_bytes() - 25_000)
            .sum();
        assert!(surplus.abs_diff(SURPLUS_BUDGET_BYTES) < 100, "{surplus}");
        // A path going down leaves more to the others.
        eight.take_down(20_000_000, 7);
        assert!(eight.get(0).allowance_ns > allowance);
    }

    #[test]
    fn faster_paths_are_chosen_first_and_full_paths_skipped() {
        let mut set = paths(2);
        for (index, rate) in [(0, 100_000_000u64), (1, 1_000_000_000)] {
            set.get_mut(index).on_rtt_sample(100_000);
            set.get_mut(index).on_send(0);
            set.delivered(index, 10_000_000, rate / 100, 0);
        }
        assert_eq!(set.choose(1500), Some(1));
        set.get_mut(1).bytes_in_flight = set.get(1).window_bytes();
        assert_eq!(set.choose(1500), Some(0));
        set.get_mut(0).bytes_in_flight = set.get(0).window_bytes();
        assert_eq!(set.choose(1500), None);
    }

    #[test]
    fn the_last_usable_path_never_goes_down_and_probes_bring_paths_back() {
        let mut set = paths(2);
        assert!(set.take_down(0, 1));
        assert_eq!(set.usable_count(), 1);
        assert!(!set.take_down(0, 0), "the last usable path stays");
        assert_eq!(set.best(), 0);
        // The probe timer of path 1 queues a ping; its answer brings the path back.
        let due = set.next_deadline().expect("probe scheduled");
        assert_eq!(set.handle_ping_timers(due), 0);
        let ping = set.take_ping(due).expect("probe ping");
        assert_eq!(ping.path, 1);
        assert!(
            !set.on_ping_reply(due + 10, ping.token + MAX_PATHS as u64),
            "unknown token"
        );
        assert!(set.on_ping_reply(due + 10, ping.token));
        assert_eq!(set.get(1).state, PathState::Up);
        assert_eq!(set.stats(1).map(|stats| stats.times_rejoined), Some(1));
    }

    #[test]
    fn unanswered_pings_take_a_path_down_only_with_several_paths() {
        for count in [1usize, 2] {
            let mut set = paths(count);
            let mut failed = 0;
            let mut now = 0;
            for _ in 0..DOWN_AFTER_FAILURES {
                set.ping(count - 1);
                set.take_ping(now).expect("ping");
                now = set.next_deadline().expect("answer deadline");
                failed |= set.handle_ping_timers(now);
            }
            assert_eq!(failed != 0, count > 1, "{count} path(s)");
        }
    }
}
