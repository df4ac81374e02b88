//! Round-trip time estimation and retransmission timeout per RFC 6298, with exponential
//! backoff on expiry.
//!
//! Layer: sans-IO, inside `crate::reliable`, the bottom of it with `time.rs`. It owns one
//! estimator's state; it must not read a clock (samples are the caller's).
//!
//! The configured minimum is a margin over the smoothed RTT, not only a floor of the RTO
//! (as in Linux, whose RTO is `srtt + max(4 rttvar, rto_min)`): `rto = srtt + max(4 rttvar,
//! min_rto)`, clamped to `[min_rto, max_rto]`. A bulk sender keeps a queue at its
//! bottleneck, so its smoothed RTT is mostly queueing delay and its variance is tiny; with
//! a plain floor, `srtt + 4 rttvar` sat a fraction of a millisecond above the RTT, and a
//! process off its CPU for a little longer than the floor (a busy host, a VM's vCPU
//! descheduled) fired timeouts that were all spurious.

use super::time::Nanos;

/// Clock granularity term `G` of RFC 6298 (we get nanosecond timestamps, so 1 µs is plenty).
const GRANULARITY_NS: Nanos = 1_000;

/// Smoothed RTT, RTT variance and the RTO derived from them.
#[derive(Debug, Clone)]
pub(super) struct RttEstimator {
    smoothed_ns: Option<Nanos>,
    variance_ns: Nanos,
    /// RTO before backoff.
    base_rto_ns: Nanos,
    /// Number of doublings applied since the last sample.
    backoff_shift: u32,
    /// The RTO with the backoff, kept up to date (it is read for every datagram).
    rto_ns: Nanos,
    min_rto_ns: Nanos,
    max_rto_ns: Nanos,
}

impl RttEstimator {
    pub(super) fn new(initial_rto_ns: Nanos, min_rto_ns: Nanos, max_rto_ns: Nanos) -> Self {
        Self {
            smoothed_ns: None,
            variance_ns: 0,
            base_rto_ns: initial_rto_ns.clamp(min_rto_ns, max_rto_ns),
            backoff_shift: 0,
            rto_ns: initial_rto_ns.clamp(min_rto_ns, max_rto_ns),
            min_rto_ns,
            max_rto_ns,
        }
    }

    /// Takes one RTT measurement (RFC 6298 section 2) and clears the backoff.
    pub(super) fn on_sample(&mut self, sample_ns: Nanos) {
        match self.smoothed_ns {
            None => {
                self.smoothed_ns = Some(sample_ns);
                self.variance_ns = sample_ns / 2;
            }
            Some(smoothed) => {
                let deviation = smoothed.abs_diff(sample_ns);
                self.variance_ns = (3 * (self.variance_ns / 4)).saturating_add(deviation / 4);
                self.smoothed_ns = Some((7 * (smoothed / 8)).saturating_add(sample_ns / 8));
            }
        }
        let smoothed = self.smoothed_ns.unwrap_or(sample_ns);
        // The minimum is also the least margin over the smoothed RTT (module doc).
        let spread = GRANULARITY_NS
            .max(self.variance_ns.saturating_mul(4))
            .max(self.min_rto_ns);
        self.base_rto_ns = smoothed
            .saturating_add(spread)
            .clamp(self.min_rto_ns, self.max_rto_ns);
        self.backoff_shift = 0;
        self.rto_ns = self.base_rto_ns;
    }

    /// Doubles the RTO (RFC 6298 5.5), up to the maximum.
    pub(super) fn back_off(&mut self) {
        if self.rto_ns < self.max_rto_ns {
            self.backoff_shift += 1;
            let shifted = self
                .base_rto_ns
                .checked_shl(self.backoff_shift)
                .filter(|value| value >> self.backoff_shift == self.base_rto_ns)
                .unwrap_or(Nanos::MAX);
            self.rto_ns = shifted.min(self.max_rto_ns);
        }
    }

    /// The current retransmission timeout, backoff included.
    pub(super) fn rto_ns(&self) -> Nanos {
        self.rto_ns
    }

    /// The smoothed RTT, 0 before the first sample.
    pub(super) fn smoothed_ns(&self) -> Nanos {
        self.smoothed_ns.unwrap_or(0)
    }

    /// The RTT variance.
    pub(super) fn variance_ns(&self) -> Nanos {
        self.variance_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_rfc_6298_and_clamps() {
        let mut rtt = RttEstimator::new(200_000_000, 1_000_000, 1_000_000_000);
        assert_eq!(rtt.rto_ns(), 200_000_000);
        rtt.on_sample(10_000_000);
        // srtt = 10 ms, rttvar = 5 ms, rto = 10 + 4 * 5 = 30 ms.
        assert_eq!(rtt.smoothed_ns(), 10_000_000);
        assert_eq!(rtt.rto_ns(), 30_000_000);
        rtt.on_sample(10_000_000);
        // rttvar = 3/4 * 5 ms = 3.75 ms, srtt = 10 ms, rto = 25 ms.
        assert_eq!(rtt.variance_ns(), 3_750_000);
        assert_eq!(rtt.rto_ns(), 25_000_000);
        rtt.back_off();
        assert_eq!(rtt.rto_ns(), 50_000_000);
        for _ in 0..100 {
            rtt.back_off();
        }
        assert_eq!(rtt.rto_ns(), 1_000_000_000);
        let mut fast = RttEstimator::new(200_000_000, 1_000_000, 1_000_000_000);
        fast.on_sample(1_000);
        // srtt 1 us, 4 x rttvar 2 us: the minimum is the margin.
        assert_eq!(fast.rto_ns(), 1_001_000, "at least the minimum over srtt");
    }

    #[test]
    fn a_steady_queue_keeps_the_minimum_margin() {
        // A bulk sender's RTT: 8 ms of queue, always the same (variance decays to ~0).
        let mut rtt = RttEstimator::new(200_000_000, 10_000_000, 1_000_000_000);
        for _ in 0..200 {
            rtt.on_sample(8_000_000);
        }
        assert!(rtt.variance_ns() < 10_000);
        // Not 8 ms + 4 x rttvar (a hiccup of a few ms would fire it): 8 + 10 ms.
        assert_eq!(rtt.rto_ns(), 18_000_000);
    }
}
