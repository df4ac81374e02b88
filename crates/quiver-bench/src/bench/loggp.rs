//! `loggp`: the LogGP cost model, written once for every transport over the bench's
//! [`BenchLink`] trait (quiver's connection and the raw-socket baselines implement it).
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
//! also does the delivery (L ≤ 0), so g may come out below o_s there. Both are checked by
//! this crate's `tests/loggp.rs`.
//!
//! Timed loops allocate nothing and log nothing: every sample vector is sized before its
//! loop, and one clock read brackets each timed call.

use std::time::{Duration, Instant};

use quiver_cli::bench::generic::BenchLink;
use quiver_cli::bench::plan;
use quiver_cli::bench::record::Labels;
use quiver_cli::bench::stats;

use super::plan::LabPlan;
use super::record::{LoggpRecord, VARIANT_FIT};
use crate::stats::fit_line;

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
) -> Result<Option<LoggpRecord>, String> {
    let (round_trips, overhead_samples, windows) = counts;
    if link.rank() != 0 {
        answer(link, (message, receive), counts, window)?;
        return Ok(None);
    }
    let round_trip_us = round_trip_us(link, (message, receive), round_trips, buffers)?;
    let (o_s_us, o_r_us) = overheads_us(
        link,
        (message, receive),
        overhead_samples,
        round_trip_us,
        clock_overhead_us,
        buffers,
    )?;
    let g_us = gap_us(link, message, window, windows)?;
    Ok(Some(LoggpRecord {
        transport: link.transport(),
        size: message.len() as u64,
        iters: round_trips,
        window,
        latency_us: round_trip_us / 2.0,
        round_trip_us,
        o_s_us,
        o_r_us,
        l_us: round_trip_us / 2.0 - o_s_us - o_r_us,
        g_us,
        clock_overhead_us,
        big_g_ns_per_byte: None,
        fit_sizes: None,
        fit_r2: None,
        cpus: None,
        labels: Labels::default(),
    }))
}

/// Rank 1's side of a loggp point: echoes the round trips and the overhead samples, then
/// receives the stream's windows and acknowledges each.
fn answer(
    link: &mut dyn BenchLink,
    (message, receive): (&[u8], &mut [u8]),
    (round_trips, overhead_samples, windows): (u64, u64, u64),
    window: u64,
) -> Result<(), String> {
    let round_trip_warmup = plan::warmup_iters(round_trips);
    let overhead_warmup = plan::warmup_iters(overhead_samples).min(100);
    let window_warmup = plan::warmup_windows(windows);
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
    Ok(())
}

/// The round trip (the first loop): the median of `round_trips` timed ping-pongs after a
/// warm-up, µs.
fn round_trip_us(
    link: &mut dyn BenchLink,
    (message, receive): (&[u8], &mut [u8]),
    round_trips: u64,
    buffers: &mut LoggpBuffers,
) -> Result<f64, String> {
    for _ in 0..plan::warmup_iters(round_trips) {
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
    Ok(stats::median(round_trip_samples).unwrap_or(0.0))
}

/// The overheads o_s and o_r (the second loop), µs: time the send; wait until the echo has
/// surely arrived; time the receive. Medians over the samples, minus the clock's own cost,
/// at least 0.
fn overheads_us(
    link: &mut dyn BenchLink,
    (message, receive): (&[u8], &mut [u8]),
    overhead_samples: u64,
    round_trip_us: f64,
    clock_overhead_us: f64,
    buffers: &mut LoggpBuffers,
) -> Result<(f64, f64), String> {
    let overhead_warmup = plan::warmup_iters(overhead_samples).min(100);
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
    Ok((net(&buffers.send_us), net(&buffers.receive_us)))
}

/// The gap g (the third loop): a saturated stream of blocking sends in `windows` windows
/// of `window` messages after a warm-up; the time per message, µs.
fn gap_us(
    link: &mut dyn BenchLink,
    message: &[u8],
    window: u64,
    windows: u64,
) -> Result<f64, String> {
    for _ in 0..plan::warmup_windows(windows) {
        send_window(link, message, window)?;
    }
    let start = Instant::now();
    for _ in 0..windows {
        send_window(link, message, window)?;
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / (window * windows) as f64)
}

/// Sends one window of `window` messages, then waits for the receiver's acknowledgement.
fn send_window(link: &mut dyn BenchLink, message: &[u8], window: u64) -> Result<(), String> {
    for _ in 0..window {
        link.send_message(message)?;
    }
    link.wait_window_ack()
}

/// Gives every point after the first its local G: the slope of g from the previous size,
/// in ns per byte. `points` are ascending by size.
pub(crate) fn fill_gap_per_byte(points: &mut [LoggpRecord]) {
    for index in 1..points.len() {
        let (before, after) = (&points[index - 1], &points[index]);
        let (g0, g1) = (before.g_us, after.g_us);
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
pub(crate) fn fit_record(points: &[LoggpRecord]) -> Option<LoggpRecord> {
    let first = points.first()?;
    let fitted_count = points.len().div_ceil(2).max(2).min(points.len());
    let fitted = &points[points.len() - fitted_count..];
    let xs: Vec<f64> = fitted.iter().map(|point| point.size as f64).collect();
    let ys: Vec<f64> = fitted.iter().map(|point| point.g_us).collect();
    let fit = fit_line(&xs, &ys);
    Some(LoggpRecord {
        big_g_ns_per_byte: fit.map(|fit| fit.slope * 1e3),
        fit_r2: fit.map(|fit| fit.r_squared),
        fit_sizes: fit.map(|_| [fitted[0].size, fitted[fitted.len() - 1].size]),
        labels: Labels {
            variant: Some(VARIANT_FIT.to_string()),
            ..Labels::default()
        },
        ..first.clone()
    })
}

/// Runs loggp over every size of the plan; rank 0 returns the points (with their local G)
/// and the fit record, rank 1 nothing.
pub(crate) fn run(
    link: &mut dyn BenchLink,
    plan: &LabPlan,
    send: &[u8],
    receive: &mut [u8],
) -> Result<Vec<LoggpRecord>, String> {
    let most_samples = plan
        .base
        .sizes
        .iter()
        .map(|&size| {
            let (round_trips, overheads, _) = plan.loggp_counts(size);
            round_trips.max(overheads)
        })
        .max()
        .unwrap_or(0);
    let mut samples = LoggpBuffers::new(most_samples);
    let clock_overhead_us = if link.rank() == 0 {
        clock_overhead_us()
    } else {
        0.0
    };
    let mut points = Vec::with_capacity(plan.base.sizes.len());
    for &size in &plan.base.sizes {
        let length = size as usize;
        let point = loggp_point(
            link,
            (&send[..length], &mut receive[..length]),
            plan.loggp_counts(size),
            plan.base.window,
            clock_overhead_us,
            &mut samples,
        )
        .map_err(|error| format!("loggp at {size} bytes: {error}"))?;
        points.extend(point);
    }
    if points.is_empty() {
        return Ok(points);
    }
    fill_gap_per_byte(&mut points);
    points.extend(fit_record(&points));
    Ok(points)
}

#[cfg(test)]
mod tests {
    use quiver_cli::bench::plan::Transport;

    use super::*;

    fn point(size: u64, g_us: f64) -> LoggpRecord {
        LoggpRecord {
            transport: Transport::Shm,
            size,
            iters: 100,
            window: 64,
            latency_us: 0.6,
            round_trip_us: 1.2,
            o_s_us: 0.1,
            o_r_us: 0.2,
            l_us: 0.3,
            g_us,
            clock_overhead_us: 0.02,
            big_g_ns_per_byte: None,
            fit_sizes: None,
            fit_r2: None,
            cpus: None,
            labels: Labels::default(),
        }
    }

    #[test]
    fn local_and_fitted_gap_per_byte() {
        // g = 1 µs + 0.25 ns/byte above 1 KiB.
        let mut points: Vec<LoggpRecord> = [8u64, 1024, 65536, 1 << 20]
            .iter()
            .map(|&size| point(size, 1.0 + 0.00025 * size.saturating_sub(1024) as f64))
            .collect();
        fill_gap_per_byte(&mut points);
        assert_eq!(points[0].big_g_ns_per_byte, None);
        assert!(points[1].big_g_ns_per_byte.expect("G").abs() < 1e-12);
        assert!((points[3].big_g_ns_per_byte.expect("G") - 0.25).abs() < 1e-9);
        let fit = fit_record(&points).expect("fit");
        assert_eq!(fit.labels.variant.as_deref(), Some("fit"));
        assert!(fit.is_fit());
        assert_eq!(fit.size, 8);
        assert_eq!(fit.fit_sizes, Some([65536, 1 << 20]));
        assert!((fit.big_g_ns_per_byte.expect("G") - 0.25).abs() < 1e-9);
        assert!((fit.fit_r2.expect("r2") - 1.0).abs() < 1e-9);
        assert_eq!(fit.l_us, 0.3);
    }

    #[test]
    fn fit_of_one_point_has_no_gap_per_byte() {
        let fit = fit_record(&[point(8, 1.0)]).expect("fit");
        assert_eq!(fit.big_g_ns_per_byte, None);
        assert_eq!(fit.g_us, 1.0);
        assert!(fit_record(&[]).is_none());
    }

    #[test]
    fn clock_overhead_is_small_and_positive() {
        let overhead = clock_overhead_us();
        assert!((0.0..100.0).contains(&overhead), "{overhead}");
    }
}
