//! Tests written once for every transport: the LogGP cost model (`loggp`) and
//! bidirectional bandwidth (`bibw`), over the [`BenchLink`] trait that both quiver's ranks
//! (`worker.rs`) and the raw-socket baselines (`raw.rs`) implement.
//!
//! ## The LogGP parameters, measured the parameterised-LogP way
//!
//! For each message size m, rank 0 runs three loops against rank 1 (which only answers):
//!
//! 1. **Round trip**: a ping-pong; RTT(m) = median round trip.
//! 2. **Overheads**: rank 0 times its blocking send call (**o_s(m)**: from the call to its
//!    return), then busy-waits until 2·RTT(m) + 2 µs after the send began, so rank 1's
//!    echo has surely arrived, and times its blocking receive of that echo (**o_r(m)**:
//!    the receive of an already-arrived message). Medians over the samples, minus the
//!    median cost of one pair of clock reads (measured at start, reported as
//!    `clock_overhead_us`), floored at zero.
//! 3. **Gap**: a saturated stream of blocking sends in windows of `--window` messages with
//!    a 1-byte acknowledgement per window; **g(m)** = elapsed time / messages.
//!
//! Then **L(m) = RTT(m)/2 − o_s(m) − o_r(m)**: what a one-way message costs beyond the
//! time the two processors spend inside the calls (the wire, the other side's polling, a
//! wake-up). **G** is the per-byte gap: on each size point the slope of g from the previous
//! size, and on the fit record (`variant: "fit"`) the least-squares slope of g(m) over the
//! upper half of the sizes (at least two), in ns per byte. The fit record also carries
//! o_s, o_r, L and g of the smallest size: the classic five LogGP numbers.
//!
//! LogGP's single one-way latency is o_s + L + o_r (= RTT/2 by construction of L), so the
//! check that the model describes the transport compares it with the one-way latency of an
//! independent `pingpong` run, and over shm checks that g ≥ o_s (a sender cannot start
//! messages faster than it spends inside each send). Over sockets on loopback the send call
//! also does the delivery (L ≤ 0), so g may come out below o_s there. Both are in
//! `tests/loggp.rs`.
//!
//! Timed loops allocate nothing and log nothing: every sample vector is sized before its
//! loop, and one clock read brackets each timed call.

use std::time::{Duration, Instant};

use super::plan::{self, TestName};
use super::report::Record;
use super::stats;

/// A message channel between the bench's two ranks: what the generic tests need.
pub(crate) trait BenchLink {
    /// This rank's number (0 drives and reports, 1 answers).
    fn rank(&self) -> u32;
    /// Sends `message`, blocking until the transport has taken it.
    fn send_message(&mut self, message: &[u8]) -> Result<(), String>;
    /// Receives one message of exactly `buffer.len()` bytes into `buffer`, blocking.
    fn receive_message(&mut self, buffer: &mut [u8]) -> Result<(), String>;
    /// Receiver, end of a window: tell the sender everything arrived.
    fn send_window_ack(&mut self) -> Result<(), String>;
    /// Sender, end of a window: wait until the receiver has everything.
    fn wait_window_ack(&mut self) -> Result<(), String>;
    /// Before `exchange`: make buffers for `count` messages of `size` bytes each way
    /// (outside any timed loop).
    fn prepare_exchange(&mut self, size: u64, count: u64) -> Result<(), String>;
    /// bibw: sends `count` messages of the prepared size to the other rank while receiving
    /// `count` from it; returns when all have been sent and received.
    fn exchange(&mut self, count: u64) -> Result<(), String>;
}

/// Clock read pairs timed to estimate the cost of one timed interval's clock reads.
const CLOCK_PAIRS: usize = 10_001;
/// Extra wait, beyond two round trips, before the timed receive of the overhead loop.
const ARRIVAL_MARGIN: Duration = Duration::from_micros(2);

/// Median duration of `Instant::now(); Instant::now()` (what each timed call also pays).
pub(crate) fn clock_overhead_us() -> f64 {
    let mut samples = Vec::with_capacity(CLOCK_PAIRS);
    for _ in 0..CLOCK_PAIRS {
        let start = Instant::now();
        let end = Instant::now();
        samples.push((end - start).as_secs_f64() * 1e6);
    }
    stats::sort_samples(&mut samples);
    stats::median(&samples).unwrap_or(0.0)
}

/// Sample storage for loggp, sized once for the largest counts of the run.
pub(crate) struct LoggpBuffers {
    stamps: Vec<Instant>,
    send_us: Vec<f64>,
    receive_us: Vec<f64>,
}

impl LoggpBuffers {
    /// Room for `samples` samples of each kind.
    pub(crate) fn new(samples: u64) -> LoggpBuffers {
        let samples = samples as usize + 1;
        LoggpBuffers {
            stamps: Vec::with_capacity(samples),
            send_us: Vec::with_capacity(samples),
            receive_us: Vec::with_capacity(samples),
        }
    }
}

/// One loggp point: the three loops at the size of `message` (`receive` has the same
/// length). `counts` = (round trips, overhead samples, stream windows). Rank 0 returns the
/// record (without G, which needs the neighbouring sizes: see [`fill_gap_per_byte`]).
pub(crate) fn loggp_point(
    link: &mut dyn BenchLink,
    (message, receive): (&[u8], &mut [u8]),
    counts: (u64, u64, u64),
    window: u64,
    clock_overhead_us: f64,
    buffers: &mut LoggpBuffers,
) -> Result<Option<Record>, String> {
    let (round_trips, overhead_samples, windows) = counts;
    let round_trip_warmup = plan::warmup_iters(round_trips);
    let overhead_warmup = plan::warmup_iters(overhead_samples).min(100);
    let window_warmup = plan::warmup_windows(windows);
    if link.rank() != 0 {
        for _ in 0..round_trip_warmup + round_trips + overhead_warmup + overhead_samples {
            link.receive_message(receive)?;
            link.send_message(message)?;
        }
        for _ in 0..window_warmup + windows {
            for _ in 0..window {
                link.receive_message(receive)?;
            }
            link.send_window_ack()?;
        }
        return Ok(None);
    }
    // 1. Round trip.
    for _ in 0..round_trip_warmup {
        link.send_message(message)?;
        link.receive_message(receive)?;
    }
    let stamps = &mut buffers.stamps;
    stamps.clear();
    stamps.push(Instant::now());
    for _ in 0..round_trips {
        link.send_message(message)?;
        link.receive_message(receive)?;
        stamps.push(Instant::now());
    }
    // Reuse send_us for the round trips (sorted once, read, then cleared).
    let round_trip_samples = &mut buffers.send_us;
    round_trip_samples.clear();
    round_trip_samples.extend(
        stamps
            .windows(2)
            .map(|pair| (pair[1] - pair[0]).as_secs_f64() * 1e6),
    );
    stats::sort_samples(round_trip_samples);
    let round_trip_us = stats::median(round_trip_samples).unwrap_or(0.0);

    // 2. Overheads: time the send; wait until the echo has surely arrived; time the receive.
    let arrival = Duration::from_secs_f64(2.0 * round_trip_us * 1e-6) + ARRIVAL_MARGIN;
    buffers.send_us.clear();
    buffers.receive_us.clear();
    for sample in 0..overhead_warmup + overhead_samples {
        let send_start = Instant::now();
        link.send_message(message)?;
        let send_end = Instant::now();
        while send_start.elapsed() < arrival {
            std::hint::spin_loop();
        }
        let receive_start = Instant::now();
        link.receive_message(receive)?;
        let receive_end = Instant::now();
        if sample >= overhead_warmup {
            buffers
                .send_us
                .push((send_end - send_start).as_secs_f64() * 1e6);
            buffers
                .receive_us
                .push((receive_end - receive_start).as_secs_f64() * 1e6);
        }
    }
    stats::sort_samples(&mut buffers.send_us);
    stats::sort_samples(&mut buffers.receive_us);
    let net = |sorted: &[f64]| (stats::median(sorted).unwrap_or(0.0) - clock_overhead_us).max(0.0);
    let o_s_us = net(&buffers.send_us);
    let o_r_us = net(&buffers.receive_us);

    // 3. Gap: a saturated stream of blocking sends.
    for _ in 0..window_warmup {
        send_window(link, message, window)?;
    }
    let start = Instant::now();
    for _ in 0..windows {
        send_window(link, message, window)?;
    }
    let g_us = start.elapsed().as_secs_f64() * 1e6 / (window * windows) as f64;

    Ok(Some(Record {
        test: TestName::Loggp.as_str().to_string(),
        size: message.len() as u64,
        iters: round_trips,
        window: Some(window),
        latency_us: Some(round_trip_us / 2.0),
        round_trip_us: Some(round_trip_us),
        o_s_us: Some(o_s_us),
        o_r_us: Some(o_r_us),
        l_us: Some(round_trip_us / 2.0 - o_s_us - o_r_us),
        g_us: Some(g_us),
        clock_overhead_us: Some(clock_overhead_us),
        ..Record::default()
    }))
}

fn send_window(link: &mut dyn BenchLink, message: &[u8], window: u64) -> Result<(), String> {
    for _ in 0..window {
        link.send_message(message)?;
    }
    link.wait_window_ack()
}

/// Gives every point after the first its local G: the slope of g from the previous size,
/// in ns per byte. `points` are ascending by size.
pub(crate) fn fill_gap_per_byte(points: &mut [Record]) {
    for index in 1..points.len() {
        let (before, after) = (&points[index - 1], &points[index]);
        let (Some(g0), Some(g1)) = (before.g_us, after.g_us) else {
            continue;
        };
        let bytes = after.size as f64 - before.size as f64;
        if bytes > 0.0 {
            // µs per byte x 1000 = ns per byte.
            points[index].big_g_ns_per_byte = Some((g1 - g0) / bytes * 1e3);
        }
    }
}

/// The fit record of a loggp sweep: G from the least-squares slope of g(m) over the upper
/// half of the sizes (at least two), o_s, o_r, L and g of the smallest size. `None` for
/// fewer than one point; G is absent with a single size.
pub(crate) fn fit_record(points: &[Record]) -> Option<Record> {
    let first = points.first()?;
    let fitted_count = points.len().div_ceil(2).max(2).min(points.len());
    let fitted = &points[points.len() - fitted_count..];
    let xs: Vec<f64> = fitted.iter().map(|point| point.size as f64).collect();
    let ys: Vec<f64> = fitted
        .iter()
        .map(|point| point.g_us.unwrap_or(f64::NAN))
        .collect();
    let fit = stats::fit_line(&xs, &ys);
    Some(Record {
        test: TestName::Loggp.as_str().to_string(),
        variant: Some("fit".to_string()),
        size: first.size,
        iters: first.iters,
        window: first.window,
        latency_us: first.latency_us,
        round_trip_us: first.round_trip_us,
        o_s_us: first.o_s_us,
        o_r_us: first.o_r_us,
        l_us: first.l_us,
        g_us: first.g_us,
        clock_overhead_us: first.clock_overhead_us,
        big_g_ns_per_byte: fit.map(|fit| fit.slope * 1e3),
        fit_r2: fit.map(|fit| fit.r_squared),
        fit_sizes: fit.map(|_| [fitted[0].size, fitted[fitted.len() - 1].size]),
        ..Record::default()
    })
}

/// osu_bibw-style: in each window both ranks send `window` messages of `size` bytes to
/// each other at once; `windows` timed windows after a warm-up. Rank 0 returns the record:
/// bandwidth = bytes moved in both directions / time.
pub(crate) fn bibw_point(
    link: &mut dyn BenchLink,
    size: u64,
    window: u64,
    windows: u64,
) -> Result<Option<Record>, String> {
    link.prepare_exchange(size, window)?;
    let warmup = plan::warmup_windows(windows);
    for _ in 0..warmup {
        link.exchange(window)?;
    }
    let start = Instant::now();
    for _ in 0..windows {
        link.exchange(window)?;
    }
    let elapsed_us = start.elapsed().as_secs_f64() * 1e6;
    if link.rank() != 0 {
        return Ok(None);
    }
    let bytes = 2.0 * (window * windows * size) as f64;
    Ok(Some(Record {
        test: TestName::Bibw.as_str().to_string(),
        size,
        iters: windows,
        window: Some(window),
        // bytes per µs = MB/s.
        bandwidth_mbps: Some(bytes / elapsed_us),
        ..Record::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(size: u64, g_us: f64) -> Record {
        Record {
            test: "loggp".into(),
            size,
            o_s_us: Some(0.1),
            o_r_us: Some(0.2),
            l_us: Some(0.3),
            g_us: Some(g_us),
            ..Record::default()
        }
    }

    #[test]
    fn local_and_fitted_gap_per_byte() {
        // g = 1 µs + 0.25 ns/byte above 1 KiB.
        let mut points: Vec<Record> = [8u64, 1024, 65536, 1 << 20]
            .iter()
            .map(|&size| point(size, 1.0 + 0.00025 * size.saturating_sub(1024) as f64))
            .collect();
        fill_gap_per_byte(&mut points);
        assert_eq!(points[0].big_g_ns_per_byte, None);
        assert!(points[1].big_g_ns_per_byte.expect("G").abs() < 1e-12);
        assert!((points[3].big_g_ns_per_byte.expect("G") - 0.25).abs() < 1e-9);
        let fit = fit_record(&points).expect("fit");
        assert_eq!(fit.variant.as_deref(), Some("fit"));
        assert_eq!(fit.size, 8);
        assert_eq!(fit.fit_sizes, Some([65536, 1 << 20]));
        assert!((fit.big_g_ns_per_byte.expect("G") - 0.25).abs() < 1e-9);
        assert!((fit.fit_r2.expect("r2") - 1.0).abs() < 1e-9);
        assert_eq!(fit.l_us, Some(0.3));
    }

    #[test]
    fn fit_of_one_point_has_no_gap_per_byte() {
        let fit = fit_record(&[point(8, 1.0)]).expect("fit");
        assert_eq!(fit.big_g_ns_per_byte, None);
        assert_eq!(fit.g_us, Some(1.0));
        assert!(fit_record(&[]).is_none());
    }

    #[test]
    fn clock_overhead_is_small_and_positive() {
        let overhead = clock_overhead_us();
        assert!((0.0..100.0).contains(&overhead), "{overhead}");
    }
}
