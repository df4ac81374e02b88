//! `quiver bench am`: active messages between two ranks, and UCX's UCT active messages
//! (`ucx_perftest -t am_lat` / `-t am_bw`) on the same CPUs as the baseline when
//! `ucx_perftest` is installed, with the ratios.
//!
//! - latency: rank 0 sends an 8-byte active message, rank 1's handler answers it with an
//!   active message to rank 0's handler, which counts it; one-way latency = round trip /
//!   2, the median (as `ucx_perftest` reports its 50th percentile) over samples of
//!   32 round trips each (`SAMPLE_ROUND_TRIPS`): reading the clock costs about 22 ns here (a
//!   virtual machine's clock), a tenth of a round trip, where `ucx_perftest` reads the
//!   time stamp counter;
//! - rate: rank 0 sends 8-byte active messages back to back (blocking only when the
//!   connection is full), rank 1's handler counts them; a last one asks for an answer;
//!   messages per second from the first send to the answer.
//!
//! The two ranks are two threads of this process, each with a context of its own (as two
//! processes would have), pinned to the two CPUs (`--cpus`), busy-polling with `progress`.
//! Over shm the baseline is UCX's posix transport (`-x posix -d memory`), over tcp its
//! tcp transport on loopback (`-x tcp -d lo`), and over udp the same tcp transport (UCX has
//! no udp transport: its datagram transports need InfiniBand). The targets of the issue that asked for this
//! bench: latency at most 0.8x UCX's, rate at least 1.2x.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use quiver::{ActiveMessage, Addr, Config, Context, Endpoint, TransportKind};

use super::floor::pin_current_thread;
use super::in_process_job::{free_port, two_ranks};
use super::parent::choose_cpus;
use crate::provenance::Provenance;

/// Round trips timed by default (after as many again of warm-up, up to 10,000).
const DEFAULT_LAT_ITERS: u64 = 100_000;
/// Round trips timed together as one latency sample (two clock reads per sample).
const SAMPLE_ROUND_TRIPS: u64 = 32;
/// Messages of the rate test by default.
const DEFAULT_RATE_MESSAGES: u64 = 2_000_000;
/// Message size of both tests (UCX's default, header included).
const SIZE: usize = 8;
/// Handler ids: rank 1's echo, rank 0's answer counter, rank 1's counter, rank 1's flush.
const ECHO: u16 = 1;
const ANSWER: u16 = 2;
const COUNT: u16 = 3;
const FLUSH: u16 = 4;

/// One figure of the run: quiver's, and UCX's where it ran.
#[derive(Debug, Clone, Copy)]
struct Figure {
    test: &'static str,
    unit: &'static str,
    quiver: f64,
    ucx: Option<f64>,
    /// The target ratio and whether lower is better.
    target: (f64, bool),
}

/// What `quiver bench am` takes of the bench's command line.
#[derive(Debug, Clone, Copy)]
pub struct AmOptions<'a> {
    /// `--transport`: shm or tcp.
    pub transport: &'a str,
    /// `--iters`: round trips timed (the rate test sends 20 times as many messages).
    pub iters: Option<u64>,
    /// `--cpus`.
    pub cpus: Option<&'a str>,
    /// `--json`.
    pub json: Option<&'a str>,
}

/// Why `quiver bench am` did not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AmFailure {
    /// A bad command line.
    Usage(String),
    /// The run failed.
    Run(String),
}

/// Runs `quiver bench am` with `options`; prints the table or the JSON lines.
///
/// # Errors
/// A transport other than shm, tcp and udp or bad CPUs ([`AmFailure::Usage`]); a failed rank
/// ([`AmFailure::Run`]).
pub fn run(options: &AmOptions<'_>) -> Result<(), AmFailure> {
    let (kind, ucx_tl) = match options.transport {
        "shm" => (TransportKind::Shm, ["-x", "posix", "-d", "memory"]),
        "tcp" => (TransportKind::Tcp, ["-x", "tcp", "-d", "lo"]),
        "udp" => (TransportKind::Udp, ["-x", "tcp", "-d", "lo"]),
        other => {
            return Err(AmFailure::Usage(format!(
                "quiver bench am runs over shm, tcp and udp, not {other}"
            )))
        }
    };
    let cpus = choose_cpus(options.cpus).map_err(AmFailure::Usage)?;
    let lat_iters = options.iters.unwrap_or(DEFAULT_LAT_ITERS).max(1);
    let messages = options
        .iters
        .map_or(DEFAULT_RATE_MESSAGES, |n| n.saturating_mul(20))
        .max(1);
    let quiver = measure(kind, cpus, lat_iters, messages).map_err(AmFailure::Run)?;
    let ucx_lat = ucx(&ucx_tl, cpus, "am_lat", lat_iters);
    let ucx_rate = ucx(&ucx_tl, cpus, "am_bw", messages);
    let figures = [
        Figure {
            test: "am_lat",
            unit: "us",
            quiver: quiver.0,
            ucx: ucx_lat.map(|fields| fields.latency_us),
            target: (0.8, true),
        },
        Figure {
            test: "am_rate",
            unit: "Mmsg/s",
            quiver: quiver.1,
            ucx: ucx_rate.map(|fields| fields.rate_per_s / 1e6),
            target: (1.2, false),
        },
    ];
    print_figures(options.json, kind, cpus, &figures);
    Ok(())
}

/// The figures `ucx_perftest` printed (its last line with `-f`).
#[derive(Debug, Clone, Copy)]
struct UcxFields {
    latency_us: f64,
    rate_per_s: f64,
}

/// Runs `ucx_perftest -t test` between a server on `cpus[1]` and a client on `cpus[0]`;
/// `None` (said on stderr) when it is not installed or fails.
fn ucx(tl: &[&str], cpus: [usize; 2], test: &str, iters: u64) -> Option<UcxFields> {
    let port = free_port().ok()?.to_string();
    let server = Command::new("ucx_perftest")
        .args(["-c", &cpus[1].to_string(), "-p", &port])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut server) = server else {
        eprintln!("quiver bench am: ucx_perftest not found: no UCX baseline");
        return None;
    };
    let mut fields = None;
    for _ in 0..50 {
        thread::sleep(Duration::from_millis(100));
        if matches!(server.try_wait(), Ok(Some(_))) {
            break;
        }
        let client = Command::new("ucx_perftest")
            .args([
                "127.0.0.1",
                "-c",
                &cpus[0].to_string(),
                "-p",
                &port,
                "-t",
                test,
            ])
            .args(tl)
            .args(["-s", &SIZE.to_string(), "-n", &iters.to_string(), "-f"])
            .output();
        let Ok(out) = client else { break };
        let text = String::from_utf8_lossy(&out.stdout);
        if out.status.success() {
            fields = parse_ucx(&text);
            break;
        }
        let err = String::from_utf8_lossy(&out.stderr);
        if !(err.contains("onnection refused") || text.contains("onnection refused")) {
            eprintln!(
                "quiver bench am: ucx_perftest -t {test} failed: {}",
                err.trim()
            );
            break;
        }
    }
    let _ = server.kill();
    let _ = server.wait();
    fields
}

/// The last line of numbers `ucx_perftest -f` prints: iterations, latency (50th
/// percentile, average, overall; µs), bandwidth (average, overall; MB/s), message rate
/// (average, overall; per second).
fn parse_ucx(text: &str) -> Option<UcxFields> {
    text.lines().rev().find_map(|line| {
        let numbers: Vec<f64> = line
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        (numbers.len() == 8).then(|| UcxFields {
            latency_us: numbers[1],
            rate_per_s: numbers[7],
        })
    })
}

/// The two ranks' contexts: one job, `kind` only.
fn contexts(kind: TransportKind) -> Result<(Context, Context), String> {
    let config = Config {
        transports: vec![kind],
        ..Config::from_env().map_err(|e| e.to_string())?
    };
    two_ranks(&config)
}

/// quiver's one-way latency (µs, median) and rate (Mmsg/s).
fn measure(
    kind: TransportKind,
    cpus: [usize; 2],
    lat_iters: u64,
    messages: u64,
) -> Result<(f64, f64), String> {
    let (ctx0, ctx1) = contexts(kind)?;
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        let responder = s.spawn(|| respond(&ctx1, cpus[1], &stop));
        let measured = initiate(&ctx0, cpus[0], lat_iters, messages);
        stop.store(true, Ordering::Relaxed);
        let responded = responder
            .join()
            .map_err(|_| "rank 1 panicked".to_string())?;
        responded.and(measured)
    })
}

/// Rank 1: echoes `ECHO`, counts `COUNT`, answers `FLUSH`; runs until `stop`.
fn respond(ctx: &Context, cpu: usize, stop: &AtomicBool) -> Result<(), String> {
    pin_current_thread(cpu).map_err(|e| format!("pinning rank 1 to CPU {cpu}: {e}"))?;
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
    ctx: &Context,
    cpu: usize,
    lat_iters: u64,
    messages: u64,
) -> Result<(f64, f64), String> {
    pin_current_thread(cpu).map_err(|e| format!("pinning rank 0 to CPU {cpu}: {e}"))?;
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
    let round_trip = |ep: &mut Endpoint| -> Result<(), String> {
        let want = answers.load(Ordering::Relaxed) + 1;
        ep.send_am(conn, ECHO, &[], &payload).map_err(fail)?;
        while answers.load(Ordering::Relaxed) < want {
            ep.progress().map_err(fail)?;
        }
        Ok(())
    };
    for _ in 0..lat_iters.min(10_000) {
        round_trip(&mut ep)?;
    }
    let samples = (lat_iters / SAMPLE_ROUND_TRIPS).max(1);
    let mut one_way_ns: Vec<u64> = Vec::with_capacity(samples as usize);
    for _ in 0..samples {
        let start = Instant::now();
        for _ in 0..SAMPLE_ROUND_TRIPS {
            round_trip(&mut ep)?;
        }
        one_way_ns.push(start.elapsed().as_nanos() as u64 / (2 * SAMPLE_ROUND_TRIPS));
    }
    one_way_ns.sort_unstable();
    let latency_us = one_way_ns[one_way_ns.len() / 2] as f64 / 1e3;
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

/// The table (or JSON lines with `--json -`; both with `--json FILE`).
fn print_figures(json: Option<&str>, kind: TransportKind, cpus: [usize; 2], figures: &[Figure]) {
    let provenance = Provenance::current();
    let lines: Vec<String> = figures
        .iter()
        .map(|f| {
            serde_json::json!({
                "schema_version": provenance.schema_version,
                "host": provenance.host,
                "quiver_version": provenance.quiver_version,
                "commit": provenance.commit,
                "test": f.test,
                "transport": kind.name(),
                "size": SIZE,
                "unit": f.unit,
                "quiver": f.quiver,
                "ucx": f.ucx,
                "ratio": f.ucx.map(|u| f.quiver / u),
                "target_ratio": f.target.0,
            })
            .to_string()
        })
        .collect();
    let json_only = json == Some("-");
    if let Some(path) = json.filter(|p| *p != "-") {
        if let Err(e) = std::fs::write(path, lines.join("\n") + "\n") {
            eprintln!("quiver bench am: writing {path}: {e}");
        }
    }
    if json_only {
        for line in &lines {
            println!("{line}");
        }
        return;
    }
    let ucx_name = if kind == TransportKind::Shm {
        "UCX posix"
    } else {
        "UCX tcp"
    };
    println!(
        "active messages over {} (8 B; ranks: two threads pinned to CPUs {} and {})",
        kind.name(),
        cpus[0],
        cpus[1]
    );
    println!(
        "{:<10} {:>14} {:>14} {:>8}  target",
        "test", "quiver", ucx_name, "ratio"
    );
    for f in figures {
        let ucx = f
            .ucx
            .map_or("-".to_string(), |u| format!("{u:.3} {}", f.unit));
        let ratio = f
            .ucx
            .map_or("-".to_string(), |u| format!("{:.2}x", f.quiver / u));
        let (target, lower) = f.target;
        let sign = if lower { "<=" } else { ">=" };
        println!(
            "{:<10} {:>14} {:>14} {:>8}  {sign} {target}x",
            f.test,
            format!("{:.3} {}", f.quiver, f.unit),
            ucx,
            ratio
        );
    }
}

#[cfg(test)]
mod tests {
    use super::parse_ucx;

    #[test]
    fn reads_the_last_line_of_ucx_perftest() {
        let out = "+----+\n|  Test | # iterations |\n+----+\n                        2000      0.416     4.080     4.080        1.87       1.87      245098      245098\n";
        let fields = parse_ucx(out).unwrap();
        assert_eq!(fields.latency_us, 0.416);
        assert_eq!(fields.rate_per_s, 245098.0);
        assert!(parse_ucx("no numbers here\n").is_none());
    }
}
