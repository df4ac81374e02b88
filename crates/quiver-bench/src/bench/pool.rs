//! `pool`: what receive buffers cost. A pingpong over quiver's connection where rank 0
//! receives with `recv_pooled` (buffers the endpoint registered in advance and gets back on
//! drop) or, the other variant, into a newly allocated buffer per message (the cost of
//! preparing memory on the fly: allocation, zeroing, page faults). Rank 1 receives into
//! its one reused buffer. Timed like the bench's pingpong: one clock read per round trip.

use std::time::Instant;

use quiver_cli::bench::link::{timed_span, Buffers, Link, StepError, StepResult};
use quiver_cli::bench::plan;
use quiver_cli::bench::record::{Labels, LatencyPoint};
use quiver_cli::bench::stats;

/// The pool variant receiving with `recv_pooled`.
pub(crate) const VARIANT_POOLED: &str = "pooled";
/// The pool variant receiving into a fresh buffer per message.
pub(crate) const VARIANT_FRESH: &str = "fresh";

/// Ping-pong of `size` bytes, `iters` timed round trips after a warm-up, rank 0 receiving
/// into pooled buffers or, with `fresh`, a new buffer per message; rank 0 returns the
/// point (its variant says which).
///
/// # Errors
/// A quiver error or a message of the wrong length.
pub(crate) fn pool_pingpong(
    link: &mut Link,
    buffers: &mut Buffers,
    size: u64,
    iters: u64,
    fresh: bool,
) -> StepResult<Option<LatencyPoint>> {
    let length = size as usize;
    let warmup = plan::warmup_iters(iters);
    let Buffers {
        send,
        receive,
        stamps,
    } = buffers;
    let message = &send[..length];
    if link.rank() != 0 {
        for _ in 0..warmup {
            link.receive_exact(receive, length)?;
            link.send(message)?;
        }
        let before = link.endpoint_mut().detection_stats();
        for _ in 0..iters {
            link.receive_exact(receive, length)?;
            link.send(message)?;
        }
        let own = link.endpoint_mut().detection_stats().since(&before);
        link.total_detection(own)?;
        return Ok(None);
    }
    let receive_once = |link: &mut Link| -> StepResult<()> {
        if fresh {
            // The point of this variant: a new buffer per message.
            let mut buffer = vec![0u8; length];
            link.receive_exact(&mut buffer, length)?;
            std::hint::black_box(&buffer);
        } else {
            let pooled = link.endpoint_mut().recv_pooled()?;
            if pooled.len() != length {
                return Err(StepError::UnexpectedLength {
                    expected: length,
                    received: pooled.len(),
                    source: pooled.src(),
                });
            }
        }
        Ok(())
    };
    for _ in 0..warmup {
        link.send(message)?;
        receive_once(link)?;
    }
    stamps.clear();
    let before = link.endpoint_mut().detection_stats();
    stamps.push(Instant::now());
    for _ in 0..iters {
        link.send(message)?;
        receive_once(link)?;
        stamps.push(Instant::now());
    }
    let own = link.endpoint_mut().detection_stats().since(&before);
    let both = link.total_detection(own)?;
    let timed = timed_span(stamps);
    let mut one_way_us: Vec<f64> = stamps
        .windows(2)
        .map(|pair| (pair[1] - pair[0]).as_secs_f64() * 1e6 / 2.0)
        .collect();
    stats::sort_samples(&mut one_way_us);
    let (latency_us, latency_p99_us) = stats::median_and_p99(&one_way_us);
    Ok(Some(LatencyPoint {
        transport: link.transport(),
        size,
        iters,
        latency_us,
        latency_p99_us,
        floor_us: None,
        floor_ratio: None,
        cpus: None,
        labels: Labels {
            variant: Some(if fresh { VARIANT_FRESH } else { VARIANT_POOLED }.to_string()),
            ..Labels::default()
        },
        detection: Some(link.detection_cost(both, timed)),
    }))
}
