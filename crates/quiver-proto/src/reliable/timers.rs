//! Timers: retransmission, the credit probe, keepalive, idle and handshake deadlines, and
//! how a connection fails.
//!
//! Layer: sans-IO, inside [`crate::reliable`]. No clock: `now` is the caller's.

use super::connection::ReliableConnection;
use super::events::{Event, FailReason, State};
use super::time::{earliest, Nanos};

impl ReliableConnection {
    /// Earliest time [`handle_timeout`](Self::handle_timeout) must be called (retransmit,
    /// delayed ack, keepalive, idle/handshake timeout). `None`: nothing scheduled.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        if let Some(ack) = &self.deferred_ack {
            // Processed by `handle_timeout` if nothing else comes first.
            return Some(ack.arrived_at);
        }
        self.poll_timeout_holding_ack()
    }

    /// [`poll_timeout`](Self::poll_timeout) leaving out an ack held for the answer (the
    /// `reliable` module docs, "The answer first"), which `poll_timeout` gives as due at
    /// its arrival: the earliest of the other timers, as the connection stands before that
    /// ack is processed. For a caller that calls `poll_transmit` for such a connection
    /// later, on its own schedule (once the application had its chance to answer): the held
    /// ack is then processed by that call, not by a `handle_timeout` ahead of the answer.
    /// A timer the ack would bring forward (a lower RTO from its RTT sample) shows once it
    /// is processed.
    pub fn poll_timeout_holding_ack(&self) -> Option<Nanos> {
        match self.state {
            State::Handshaking => {
                let deadline = Some(self.handshake_deadline);
                earliest(deadline, self.handshake_retransmit_at)
            }
            State::Established | State::Closing => {
                let mut deadline = earliest(self.send.paths.next_deadline(), self.probe_deadline);
                deadline = earliest(deadline, self.recv.ack_deadline());
                deadline = earliest(deadline, Some(self.keepalive_at()));
                earliest(deadline, Some(self.idle_deadline()))
            }
            State::Closed | State::Failed => None,
        }
    }

    /// Runs the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Nanos) {
        self.apply_deferred_ack();
        match self.state {
            State::Handshaking => {
                if now >= self.handshake_deadline {
                    self.fail(FailReason::HandshakeTimeout);
                    return;
                }
                if self.handshake_retransmit_at.is_some_and(|at| at <= now) {
                    self.handshake_retransmit_at = None;
                    self.handshake_send_pending = self.handshake_out_len > 0;
                    self.stats.handshake_retransmits += 1;
                    if self.is_initiator {
                        // A dead first link must not keep the connection from opening.
                        self.handshake_path = (self.handshake_path + 1) % self.send.paths.len();
                    }
                    self.handshake_interval_ns = self
                        .handshake_interval_ns
                        .saturating_mul(2)
                        .min(self.config.max_rto_ns);
                }
            }
            State::Established | State::Closing => self.handle_connection_timers(now),
            State::Closed | State::Failed => {}
        }
    }

    pub(super) fn check_closed(&mut self) {
        if self.state == State::Closing && self.send.close_acked() && self.recv.peer_closed() {
            self.state = State::Closed;
            self.probe_deadline = None;
            self.events.push_back(Event::Closed);
        }
    }

    pub(super) fn handle_connection_timers(&mut self, now: Nanos) {
        if now >= self.idle_deadline() {
            self.unreachable();
            return;
        }
        let due = self.send.due_path_rtos(now);
        for path in (0..self.send.paths.len()).filter(|path| due & (1 << path) != 0) {
            self.stats.rto_expirations += 1;
            self.consecutive_rtos += 1;
            let (_, failed) = self.send.on_path_rto(now, path);
            // One path: max_retransmits timeouts in a row. Several: each path times out on
            // its own (with its own backoff), and the peer is gone only once even the best
            // usable path timed out that often in a row. (Counting every path's timeouts
            // together gave a striped connection as little as 70 ms of a stalled peer.)
            let gone = if self.send.paths.len() == 1 {
                self.consecutive_rtos > self.config.max_retransmits
            } else {
                self.send.paths.fewest_failures() > self.config.max_retransmits
            };
            if gone {
                self.unreachable();
                return;
            }
            self.rtt.back_off();
            if failed && self.send.take_path_down(now, path) {
                self.stats.paths_down += 1;
            }
        }
        let failed = self.send.paths.handle_ping_timers(now);
        for path in (0..self.send.paths.len()).filter(|path| failed & (1 << path) != 0) {
            if self.send.take_path_down(now, path) {
                self.stats.paths_down += 1;
            }
        }
        if self.probe_deadline.is_some_and(|deadline| deadline <= now) {
            let best = self.send.paths.best();
            self.send.paths.ping(best);
            self.last_ping_at = now;
            self.probe_deadline = None;
            self.probe_backoff_shift = (self.probe_backoff_shift + 1).min(16);
        }
        if now >= self.keepalive_at() {
            self.send.paths.ping_all_usable();
            self.last_ping_at = now;
        }
        self.refresh_timers(now);
    }

    /// Whether the send side is idle as far as [`Self::refresh_timers`] goes: nothing in
    /// flight and no path timer armed, no data waiting (so not blocked on credit), no
    /// credit probe armed. A frame that carries no ack fields then leaves every timer and
    /// every send-side gauge as it is.
    pub(super) fn timers_idle(&self) -> bool {
        self.send.path_timers_idle() && !self.send.data_waiting() && self.probe_deadline.is_none()
    }

    /// Re-arms the RTO and the credit probe, and updates the gauges in the stats.
    pub(super) fn refresh_timers(&mut self, now: Nanos) {
        if matches!(self.state, State::Established | State::Closing) {
            self.send.refresh_path_timers(now);
            if self.send.credit_blocked() && !self.send.has_unsacked() {
                if self.probe_deadline.is_none() {
                    let interval = self
                        .rtt
                        .rto_ns()
                        .checked_shl(self.probe_backoff_shift)
                        .unwrap_or(self.config.max_rto_ns)
                        .min(self.config.max_rto_ns);
                    self.probe_deadline = Some(now.saturating_add(interval));
                }
            } else {
                self.probe_deadline = None;
            }
        }
        self.stats.smoothed_rtt_ns = self.rtt.smoothed_ns();
        self.stats.rtt_variance_ns = self.rtt.variance_ns();
        self.stats.rto_ns = self.send.paths.min_rto_ns();
        self.stats.send_buffered_bytes = self.send.buffered_bytes();
        self.stats.recv_buffered_bytes = self.recv.buffered_bytes();
    }

    pub(super) fn keepalive_at(&self) -> Nanos {
        self.last_received_at
            .max(self.last_ping_at)
            .saturating_add(self.config.keepalive_interval_ns)
    }

    pub(super) fn idle_deadline(&self) -> Nanos {
        self.last_received_at
            .saturating_add(self.config.idle_timeout_ns)
    }

    pub(super) fn unreachable(&mut self) {
        self.state = State::Failed;
        self.send.release_all();
        self.fail_reason = Some(FailReason::PeerUnreachable);
        self.probe_deadline = None;
        self.events.push_back(Event::PeerUnreachable);
    }

    pub(super) fn fail(&mut self, reason: FailReason) {
        if matches!(self.state, State::Closed | State::Failed) {
            return;
        }
        if matches!(
            reason,
            FailReason::Handshake(_) | FailReason::Rejected(_) | FailReason::HandshakeTimeout
        ) {
            self.stats.handshake_failures += 1;
        }
        self.state = State::Failed;
        self.send.release_all();
        self.fail_reason = Some(reason);
        self.probe_deadline = None;
        self.handshake_retransmit_at = None;
        self.events.push_back(Event::Failed(reason));
    }
}
