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
//! - the floors: a plain 8 B ping-pong (blocking `send` and `recv`, no handler) between the
//!   same CPUs, `msg_lat`, beside UCX's active message: an active message is a message and
//!   a handler's call, so its latency sits at or above this one; and the cache-line
//!   hand-off between the two CPUs (`handoff`, one way, as `quiver bench floor` measures
//!   it), which every message between them costs at least once: where it is above 0.8x
//!   UCX's latency, the latency target is below what the hardware allows.
//!
//! The two ranks are two threads of this process, each with a context of its own (as two
//! processes would have), pinned to the two CPUs (`--cpus`), busy-polling (`ranks.rs`).
//! Over shm the baseline is UCX's posix transport (`-x posix -d memory`), over tcp its
//! tcp transport on loopback (`-x tcp -d lo`), and over udp the same tcp transport (UCX has
//! no udp transport: its datagram transports need InfiniBand; `ucx.rs`). The targets:
//! latency at most 0.8x UCX's, rate at least 1.2x.
//!
//! The vCPUs of a virtual machine may move between physical CPUs from one second to the
//! next, which moves a cache-line hand-off (and every figure here) by up to 3x. So the
//! bench runs three rounds, each quiver's three figures then UCX's two, and reports
//! the medians and the median of the rounds' ratios (each quiver figure against UCX's of
//! the same round) with their range.

mod ranks;
mod ucx;

use quiver::TransportKind;

use self::ranks::SIZE;
use super::floor;
use super::parent::choose_cpus;
use super::stats;
use crate::provenance::Provenance;

/// Round trips timed by default (after as many again of warm-up, up to 10,000).
const DEFAULT_LAT_ITERS: u64 = 100_000;
/// Messages of the rate test by default.
const DEFAULT_RATE_MESSAGES: u64 = 2_000_000;
/// Rounds of quiver's figures and UCX's, one after the other.
const ROUNDS: usize = 3;

/// One figure of the run, per round: quiver's, and UCX's where it ran.
#[derive(Debug, Clone)]
struct Figure {
    test: &'static str,
    unit: &'static str,
    quiver: Vec<f64>,
    ucx: Vec<Option<f64>>,
    /// The target ratio and whether lower is better (none: a floor, read beside).
    target: Option<(f64, bool)>,
    /// What a floor is, for the table's last column.
    note: &'static str,
}

impl Figure {
    /// The median of quiver's rounds.
    fn quiver_median(&self) -> f64 {
        median(&self.quiver).unwrap_or(f64::NAN)
    }

    /// The median of UCX's rounds (none when it never ran).
    fn ucx_median(&self) -> Option<f64> {
        median(&self.ucx.iter().flatten().copied().collect::<Vec<_>>())
    }

    /// quiver / UCX of each round UCX ran in.
    fn ratios(&self) -> Vec<f64> {
        self.quiver
            .iter()
            .zip(&self.ucx)
            .filter_map(|(q, u)| u.map(|u| q / u))
            .collect()
    }
}

/// The median of `values` (unsorted; [`stats::median`]); none when empty.
fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    stats::sort_samples(&mut sorted);
    stats::median(&sorted)
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
    let mut figures = [
        figure("am_lat", "us", Some((0.8, true)), ""),
        figure("am_rate", "Mmsg/s", Some((1.2, false)), ""),
        figure("msg_lat", "us", None, "(plain message: the am_lat floor)"),
        figure(
            "handoff",
            "us",
            None,
            "(cache-line hand-off: every message's floor)",
        ),
    ];
    for _ in 0..ROUNDS {
        let (latency, rate) =
            ranks::active_messages(kind, cpus, lat_iters, messages).map_err(AmFailure::Run)?;
        let plain = ranks::plain_messages(kind, cpus, lat_iters).map_err(AmFailure::Run)?;
        let handoff = floor::measure_handoff(cpus[0], cpus[1])
            .map_err(|e| AmFailure::Run(format!("measuring the cache-line hand-off: {e}")))?
            .one_way_median_us;
        let ucx_lat = ucx::ucx(&ucx_tl, cpus, "am_lat", SIZE, lat_iters).map(|f| f.latency_us);
        let ucx_rate = ucx::ucx(&ucx_tl, cpus, "am_bw", SIZE, messages).map(|f| f.rate_per_s / 1e6);
        for (figure, quiver, ucx) in [
            (0, latency, ucx_lat),
            (1, rate, ucx_rate),
            (2, plain, ucx_lat),
            (3, handoff, ucx_lat),
        ] {
            figures[figure].quiver.push(quiver);
            figures[figure].ucx.push(ucx);
        }
    }
    print_figures(options.json, kind, cpus, &figures);
    Ok(())
}

/// A figure with no rounds yet.
fn figure(
    test: &'static str,
    unit: &'static str,
    target: Option<(f64, bool)>,
    note: &'static str,
) -> Figure {
    Figure {
        test,
        unit,
        quiver: Vec::with_capacity(ROUNDS),
        ucx: Vec::with_capacity(ROUNDS),
        target,
        note,
    }
}

/// The table (or JSON lines with `--json -`; both with `--json FILE`).
fn print_figures(json: Option<&str>, kind: TransportKind, cpus: [usize; 2], figures: &[Figure]) {
    let provenance = Provenance::current();
    let lines: Vec<String> = figures
        .iter()
        .map(|f| {
            let ratios = f.ratios();
            serde_json::json!({
                "schema_version": provenance.schema_version,
                "host": provenance.host,
                "quiver_version": provenance.quiver_version,
                "commit": provenance.commit,
                "test": f.test,
                "transport": kind.name(),
                "size": SIZE,
                "unit": f.unit,
                "quiver": f.quiver_median(),
                "ucx": f.ucx_median(),
                "ratio": median(&ratios),
                "target_ratio": f.target.map(|(ratio, _)| ratio),
                "quiver_rounds": f.quiver,
                "ucx_rounds": f.ucx,
                "ratio_rounds": ratios,
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
    print_table(kind, cpus, figures);
}

/// The table: each figure's medians, the median of its rounds' ratios and their range.
fn print_table(kind: TransportKind, cpus: [usize; 2], figures: &[Figure]) {
    let ucx_name = if kind == TransportKind::Shm {
        "UCX posix"
    } else {
        "UCX tcp"
    };
    println!(
        "active messages over {} (8 B; ranks: two threads pinned to CPUs {} and {}; {ROUNDS} rounds, medians)",
        kind.name(),
        cpus[0],
        cpus[1]
    );
    println!(
        "{:<10} {:>14} {:>14} {:>8} {:>13}  target",
        "test", "quiver", ucx_name, "ratio", "rounds"
    );
    for f in figures {
        let ratios = f.ratios();
        let ucx = f
            .ucx_median()
            .map_or("-".to_string(), |u| format!("{u:.3} {}", f.unit));
        let ratio = median(&ratios).map_or("-".to_string(), |r| format!("{r:.2}x"));
        let low = ratios.iter().copied().reduce(f64::min);
        let high = ratios.iter().copied().reduce(f64::max);
        let range = low
            .zip(high)
            .map_or("-".to_string(), |(l, h)| format!("{l:.2}-{h:.2}"));
        let target = match f.target {
            Some((target, true)) => format!("<= {target}x"),
            Some((target, false)) => format!(">= {target}x"),
            None => f.note.to_string(),
        };
        println!(
            "{:<10} {:>14} {:>14} {:>8} {:>13}  {target}",
            f.test,
            format!("{:.3} {}", f.quiver_median(), f.unit),
            ucx,
            ratio,
            range
        );
    }
}
