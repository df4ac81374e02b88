//! The sleeping ping-pong (`quiver bench pingpong --wait fd`): 8 B round trips where
//! neither rank busy-polls. Each receive is `try_recv`, and when nothing is there, `arm`
//! and a sleep in poll(2) on the endpoint's descriptor, as a program driven by an event
//! loop does. Reported beside the busy-polling ping-pong (variant `fd-wait`), it says
//! what sleeping costs on each transport: two wake-ups per round trip.
//!
//! Layer: beside `link` (it runs over the same connection); imports `link`, `plan`,
//! `record`, `stats`.

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use quiver::{Endpoint, Error};

use super::link::{Buffers, Link};
use super::plan::{self, Plan};
use super::record::{Labels, LatencyPoint, Record};
use super::stats;

/// Message size of the sleeping ping-pong, in bytes.
pub const FD_PINGPONG_BYTES: u64 = 8;
/// At most this many timed round trips (each pays two wake-ups, tens of microseconds).
const FD_PINGPONG_MAX_ITERS: u64 = 20_000;
/// A sleep this long that nothing ends is a lost wake-up: the run fails.
const LOST_WAKE_UP: Duration = Duration::from_secs(10);
/// The variant label of its record.
pub const FD_WAIT_VARIANT: &str = "fd-wait";

/// How the ranks wait for a message in pingpong (`--wait`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WaitMode {
    /// Busy-poll (quiver's blocking calls), as every test does.
    Busy,
    /// Also measure an 8 B ping-pong that sleeps in poll(2) on the endpoint's descriptor.
    Fd,
}

/// The sleeping ping-pong's timed round trips under `plan`.
pub fn fd_pingpong_iters(plan: &Plan) -> u64 {
    plan.pingpong_iters(FD_PINGPONG_BYTES)
        .min(FD_PINGPONG_MAX_ITERS)
}

/// The sleeping ping-pong over `link`; rank 0 returns the record.
///
/// # Errors
/// A quiver error, a message of the wrong length, or a lost wake-up.
pub fn pingpong(
    link: &mut Link,
    buffers: &mut Buffers,
    plan: &Plan,
) -> Result<Option<Record>, String> {
    let iters = fd_pingpong_iters(plan);
    let warmup = plan::warmup_iters(iters);
    let length = FD_PINGPONG_BYTES as usize;
    let (rank, transport, connection) = (link.rank(), link.transport(), link.connection());
    let Buffers {
        send,
        receive,
        stamps,
    } = buffers;
    let message = &send[..length];
    let endpoint = link.endpoint_mut();
    let mut round_trip = |endpoint: &mut Endpoint| -> Result<(), String> {
        if rank == 0 {
            endpoint
                .send(connection, message)
                .map_err(|e| e.to_string())?;
            receive_on_fd(endpoint, receive, length)
        } else {
            receive_on_fd(endpoint, receive, length)?;
            endpoint
                .send(connection, message)
                .map_err(|e| e.to_string())
        }
    };
    for _ in 0..warmup {
        round_trip(endpoint)?;
    }
    stamps.clear();
    stamps.reserve(iters as usize + 1);
    stamps.push(Instant::now());
    for _ in 0..iters {
        round_trip(endpoint)?;
        stamps.push(Instant::now());
    }
    if rank != 0 {
        return Ok(None);
    }
    let mut one_way_us: Vec<f64> = stamps
        .windows(2)
        .map(|pair| (pair[1] - pair[0]).as_secs_f64() * 1e6 / 2.0)
        .collect();
    stats::sort_samples(&mut one_way_us);
    let (latency_us, latency_p99_us) = stats::median_and_p99(&one_way_us);
    Ok(Some(Record::Pingpong(LatencyPoint {
        transport,
        size: FD_PINGPONG_BYTES,
        iters,
        latency_us,
        latency_p99_us,
        floor_us: None,
        floor_ratio: None,
        cpus: None,
        labels: Labels {
            variant: Some(FD_WAIT_VARIANT.to_string()),
            ..Labels::default()
        },
        detection: None,
    })))
}

/// Receives one message of `length` bytes without busy-polling: `try_recv`, and when
/// nothing is there, `arm` and sleep in poll(2) on the endpoint's descriptor.
fn receive_on_fd(endpoint: &mut Endpoint, buffer: &mut [u8], length: usize) -> Result<(), String> {
    loop {
        match endpoint.try_recv(buffer) {
            Ok((received, _)) if received == length => return Ok(()),
            Ok((received, source)) => {
                return Err(format!("{received} bytes from {source}, expected {length}"))
            }
            Err(Error::WouldBlock) => {}
            Err(error) => return Err(error.to_string()),
        }
        if endpoint.arm().map_err(|e| e.to_string())? {
            let mut fds = [libc::pollfd {
                fd: endpoint.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            let ready = quiver_transport::sys::poll(&mut fds, Some(LOST_WAKE_UP))
                .map_err(|e| format!("poll on the endpoint's descriptor: {e}"))?;
            if ready == 0 {
                return Err(format!(
                    "asleep {LOST_WAKE_UP:?} on the endpoint's descriptor with a message due (a lost wake-up)"
                ));
            }
        }
    }
}
