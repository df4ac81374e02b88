//! Round-trip time estimation and retransmission timeout per RFC 6298, with the minimum and
//! maximum clamped by the configuration and exponential backoff on expiry.

use super::Nanos;

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
        let spread = GRANULARITY_NS.max(self.variance_ns.saturating_mul(4));
        self.base_rto_ns = smoothed
            .saturating_add(spread)
            .clamp(self.min_rto_ns, self.max_rto_ns);
        self.backoff_shift = 0;
    }

    /// Doubles the RTO (RFC 6298 5.5), up to the maximum.
    pub(super) fn back_off(&mut self) {
        if self.rto_ns() < self.max_rto_ns {
            self.backoff_shift += 1;
        }
    }

    /// The current retransmission timeout, backoff included.
    pub(super) fn rto_ns(&self) -> Nanos {
        let shifted = self
            .base_rto_ns
            .checked_shl(self.backoff_shift)
            .filter(|value| value >> self.backoff_shift == self.base_rto_ns)
            .unwrap_or(Nanos::MAX);
        shifted.min(self.max_rto_ns)
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
        assert_eq!(fast.rto_ns(), 1_000_000, "clamped to the minimum");
    }
}
