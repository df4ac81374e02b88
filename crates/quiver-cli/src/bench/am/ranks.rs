//! quiver's side of `quiver bench am`: the two ranks (two threads, each with a context of
//! its own, pinned to the two CPUs, busy-polling) for the active messages' latency and
//! rate, and the plain 8 B ping-pong between the same CPUs that the active message's
//! latency is read against.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use quiver::{ActiveMessage, Addr, Config, Endpoint, TransportKind};

use super::super::floor::pin_current_thread;
use super::super::in_process_job::InProcessJob;

/// Message size of every test (UCX's default, header included).
pub(super) const SIZE: usize = 8;
/// Round trips timed together as one latency sample (two clock reads per sample).
const SAMPLE_ROUND_TRIPS: u64 = 32;
/// Round trips of warm-up before the timed ones, at most.
const WARM_UP_ROUND_TRIPS: u64 = 10_000;
/// Handler ids: rank 1's echo, rank 0's answer counter, rank 1's counter, rank 1's flush.
const ECHO: u16 = 1;
const ANSWER: u16 = 2;
const COUNT: u16 = 3;
const FLUSH: u16 = 4;

/// A job of two ranks over `kind` only; each rank's thread builds its own context.
fn job(kind: TransportKind) -> Result<InProcessJob, String> {
    let config = Config {
        transports: vec![kind],
        ..Config::from_env().map_err(|e| e.to_string())?
    };
    InProcessJob::new(&config)
}

/// The median one-way latency (µs) of `lat_iters` round trips made by `round_trip`: a
/// warm-up, then samples of [`SAMPLE_ROUND_TRIPS`].
fn median_one_way(
    lat_iters: u64,
    mut round_trip: impl FnMut() -> Result<(), String>,
) -> Result<f64, String> {
    for _ in 0..lat_iters.min(WARM_UP_ROUND_TRIPS) {
        round_trip()?;
    }
    let samples = (lat_iters / SAMPLE_ROUND_TRIPS).max(1);
    let mut one_way_ns: Vec<u64> = Vec::with_capacity(samples as usize);
    for _ in 0..samples {
        let start = Instant::now();
        for _ in 0..SAMPLE_ROUND_TRIPS {
            round_trip()?;
        }
        one_way_ns.push(start.elapsed().as_nanos() as u64 / (2 * SAMPLE_ROUND_TRIPS));
    }
    one_way_ns.sort_unstable();
    Ok(one_way_ns[one_way_ns.len() / 2] as f64 / 1e3)
}

/// The flag that stops rank 1, alone in its cache lines: rank 1 reads it on every turn of
/// its loop, so a neighbour that rank 0 writes (its stack, where the flag would otherwise
/// sit) would cross between the CPUs on each write.
#[repr(align(128))]
struct StopFlag(AtomicBool);

/// quiver's active messages: one-way latency (µs, median) and rate (Mmsg/s).
pub(super) fn active_messages(
    kind: TransportKind,
    cpus: [usize; 2],
    lat_iters: u64,
    messages: u64,
) -> Result<(f64, f64), String> {
    let job = job(kind)?;
    let stop = Box::new(StopFlag(AtomicBool::new(false)));
    thread::scope(|s| {
        let responder = s.spawn(|| respond(&job, cpus[1], &stop.0));
        let measured = initiate(&job, cpus[0], lat_iters, messages);
        stop.0.store(true, Ordering::Relaxed);
        let responded = responder
            .join()
            .map_err(|_| "rank 1 panicked".to_string())?;
        responded.and(measured)
    })
}

/// quiver's plain 8 B ping-pong (blocking `send` and `recv` on endpoints without
/// handlers) between the same CPUs: the one-way latency (µs, median). An active message
/// is such a message and a handler's call, so this is the floor of its latency.
pub(super) fn plain_messages(
    kind: TransportKind,
    cpus: [usize; 2],
    lat_iters: u64,
) -> Result<f64, String> {
    let job = job(kind)?;
    thread::scope(|s| {
        let echo = s.spawn(|| echo(&job, cpus[1]));
        let measured = ping(&job, cpus[0], lat_iters);
        let echoed = echo.join().map_err(|_| "rank 1 panicked".to_string())?;
        echoed.and(measured)
    })
}

/// Rank 1 of the plain ping-pong: sends each message back, until an empty one.
fn echo(job: &InProcessJob, cpu: usize) -> Result<(), String> {
    pin_current_thread(cpu).map_err(|e| format!("pinning rank 1 to CPU {cpu}: {e}"))?;
    let ctx = job.context(1)?;
    let fail = |e: quiver::Error| format!("rank 1: {e}");
    let mut ep = ctx.endpoint(0).map_err(fail)?;
    let conn = ep.connect(Addr::new(0, 0)).map_err(fail)?;
    let mut buf = [0u8; SIZE];
    loop {
        let (len, _) = ep.recv(&mut buf).map_err(fail)?;
        if len == 0 {
            return Ok(());
        }
        ep.send(conn, &buf[..len]).map_err(fail)?;
    }
}

/// Rank 0 of the plain ping-pong: the timed round trips, every answer checked, then an
/// empty message that ends rank 1.
fn ping(job: &InProcessJob, cpu: usize, lat_iters: u64) -> Result<f64, String> {
    pin_current_thread(cpu).map_err(|e| format!("pinning rank 0 to CPU {cpu}: {e}"))?;
    let ctx = job.context(0)?;
    let fail = |e: quiver::Error| format!("rank 0: {e}");
    let mut ep = ctx.endpoint(0).map_err(fail)?;
    let conn = ep.connect(Addr::new(1, 0)).map_err(fail)?;
    let payload = [7u8; SIZE];
    let mut answer = [0u8; SIZE];
    let latency = median_one_way(lat_iters, || {
        ep.send(conn, &payload).map_err(fail)?;
        let (len, _) = ep.recv(&mut answer).map_err(fail)?;
        if len != SIZE || answer != payload {
            return Err(format!("rank 0: the echo differs ({len} bytes)"));
        }
        Ok(())
    });
    ep.send(conn, &[]).map_err(fail)?;
    latency
}

/// Rank 1: echoes `ECHO`, counts `COUNT`, answers `FLUSH`; runs until `stop`.
fn respond(job: &InProcessJob, cpu: usize, stop: &AtomicBool) -> Result<(), String> {
    pin_current_thread(cpu).map_err(|e| format!("pinning rank 1 to CPU {cpu}: {e}"))?;
    let ctx = job.context(1)?;
    let mut ep = ctx.endpoint(0).map_err(|e| e.to_string())?;
    let answer = |ep: &mut Endpoint, m: &ActiveMessage<'_>| {
        ep.reply_am(m.source(), ANSWER, &[], m.payload())
    };
    ep.register_handler(ECHO, answer)
        .and_then(|()| ep.register_handler(FLUSH, answer))
        .and_then(|()| ep.register_handler(COUNT, |_: &mut Endpoint, _: &ActiveMessage<'_>| Ok(())))
        .map_err(|e| e.to_string())?;
    while !stop.load(Ordering::Relaxed) {
        ep.progress().map_err(|e| format!("rank 1: {e}"))?;
    }
    Ok(())
}

/// Rank 0: the round trips, then the stream.
fn initiate(
    job: &InProcessJob,
    cpu: usize,
    lat_iters: u64,
    messages: u64,
) -> Result<(f64, f64), String> {
    pin_current_thread(cpu).map_err(|e| format!("pinning rank 0 to CPU {cpu}: {e}"))?;
    let ctx = job.context(0)?;
    let mut ep = ctx.endpoint(0).map_err(|e| e.to_string())?;
    let answers = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&answers);
    ep.register_handler(ANSWER, move |_: &mut Endpoint, _: &ActiveMessage<'_>| {
        counted.fetch_add(1, Ordering::Relaxed);
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    let conn = ep.connect(Addr::new(1, 0)).map_err(|e| e.to_string())?;
    let payload = [7u8; SIZE];
    let fail = |e: quiver::Error| format!("rank 0: {e}");
    let latency_us = median_one_way(lat_iters, || {
        let want = answers.load(Ordering::Relaxed) + 1;
        ep.send_am(conn, ECHO, &[], &payload).map_err(fail)?;
        while answers.load(Ordering::Relaxed) < want {
            ep.progress().map_err(fail)?;
        }
        Ok(())
    })?;
    // The stream: a warm-up tenth, then the timed run; each ends with a flush answered.
    let stream = |ep: &mut Endpoint, n: u64| -> Result<Duration, String> {
        let want = answers.load(Ordering::Relaxed) + 1;
        let start = Instant::now();
        for _ in 0..n {
            ep.send_am(conn, COUNT, &[], &payload).map_err(fail)?;
        }
        ep.send_am(conn, FLUSH, &[], &payload).map_err(fail)?;
        while answers.load(Ordering::Relaxed) < want {
            ep.progress().map_err(fail)?;
        }
        Ok(start.elapsed())
    };
    stream(&mut ep, (messages / 10).max(1))?;
    let elapsed = stream(&mut ep, messages)?;
    let rate = (messages + 1) as f64 / elapsed.as_secs_f64() / 1e6;
    Ok((latency_us, rate))
}
