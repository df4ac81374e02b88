//! `quiver bench rma` (or `put`, `get`, `atomic` for a part of it): one-sided operations
//! over shm, tcp and udp in one run, next to the machine's floors and, when `ucx_perftest`
//! is installed, UCX's own one-sided tests run on the same two CPUs:
//!
//! - `put_lat`: 8-byte put latency until the bytes are visible at the target: the two
//!   ranks put a counter into each other's region and poll their own for it (ping-pong by
//!   puts, as `ucx_perftest -t ucp_put_lat` does), round trip / 2, the median over batches
//!   of 64 round trips (the clock read once per batch, as for the hand-off floor);
//! - `put_bw`, `get_bw`: 1 MiB puts (over the network transports posted, 8 outstanding;
//!   over shm, where a posted put is done when posted, one buffer put again and again, as
//!   `ucp_put_bw` does) and gets (blocking, into one buffer), MB/s;
//! - `fetch_add`: 64-bit fetch-and-add on one word, blocking, one initiator, operations
//!   per second;
//! - `msg_bw`: quiver's own message bandwidth at 1 MiB on the same transport (blocking
//!   sends, the receiver answering once at the end), the reference for `put_bw` over tcp.
//!
//! Each figure's first operation is untimed (it maps the region or opens the request
//! connection).
//!
//! The targets (docs/rma.md, "Performance") are printed with each ratio: over shm `put_lat`
//! at most 0.5x UCX's (`ucp_put_lat` over posix), `put_bw` and `get_bw` at least 1.0x UCX's
//! (`ucp_put_bw`, `ucp_get` with cma), `fetch_add` at least 10 M/s; over tcp `put_bw` at
//! least 0.9x `msg_bw`.
//!
//! The two ranks are two contexts of one job in this process, each on a thread pinned to
//! its CPU (`--cpus`), both busy-polling; a network target polls `progress` so that it
//! serves the initiator's requests. Output: a table, or JSON Lines (`--json`), one object
//! per figure with the run's provenance. Wrap timed runs in `flock /tmp/bench.lock`.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use quiver::{Addr, Config, Context, Endpoint, RemoteKey, Rights, TransportKind};

use super::floor::{self, Floors};
use super::in_process_job::{free_port, two_ranks};
use super::parent::choose_cpus;
use crate::provenance::Provenance;

/// Exit code for a bad command line.
const EXIT_USAGE: i32 = 2;
/// Exit code for a run that failed.
const EXIT_FAILURE: i32 = 1;
/// Bytes of a bandwidth operation.
const BW_BYTES: usize = 1 << 20;
/// Bytes of a latency put.
const LAT_BYTES: usize = 8;
/// Round trips of `put_lat` timed together (one clock read per batch).
const LAT_BATCH: u64 = 64;
/// Posted puts outstanding in `put_bw`.
const PUT_WINDOW: usize = 8;

/// `quiver bench rma|put|get|atomic`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum OneSided {
    /// One-sided operations: put latency and bandwidth, get bandwidth, fetch-add rate and
    /// message bandwidth, over shm, tcp and udp, with floors and UCX beside them
    Rma(RmaArgs),
    /// Put latency and bandwidth only (and message bandwidth, put's reference over tcp)
    Put(RmaArgs),
    /// Get bandwidth only
    Get(RmaArgs),
    /// Fetch-and-add rate only
    Atomic(RmaArgs),
}

/// Options of the one-sided bench.
#[derive(Debug, Clone, clap::Args)]
pub struct RmaArgs {
    /// Transports, comma-separated.
    #[arg(long, value_name = "LIST", default_value = "shm,tcp,udp")]
    pub transports: String,
    /// The two CPUs for rank 0 and rank 1, e.g. 0,1 [default: the first two allowed].
    #[arg(long, value_name = "A,B")]
    pub cpus: Option<String>,
    /// Also write one JSON object per figure to FILE; with `-`, only JSON to stdout.
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<String>,
    /// Round trips of `put_lat` (fetch-adds: 10x as many; 1 MiB operations: a tenth, so that each bandwidth spans tens of milliseconds at least).
    #[arg(long, value_name = "N", default_value_t = 20_000)]
    pub iters: u64,
    /// Skip UCX's baselines even when `ucx_perftest` is installed.
    #[arg(long)]
    pub no_ucx: bool,
}

/// Which figures a run makes.
#[derive(Debug, Clone, Copy)]
struct Ops {
    put: bool,
    get: bool,
    atomic: bool,
}

/// Operations per figure.
#[derive(Debug, Clone, Copy)]
struct Counts {
    lat: u64,
    bw: u64,
    atomic: u64,
}

/// One measured figure.
#[derive(Debug, Clone)]
struct Figure {
    transport: &'static str,
    op: &'static str,
    size: usize,
    /// µs for latency, MB/s for bandwidth, operations per second for `fetch_add`.
    value: f64,
    unit: &'static str,
    iters: u64,
}

/// The command's entry point; the exit status.
pub fn main(command: OneSided) -> i32 {
    let (args, ops) = match command {
        OneSided::Rma(a) => (
            a,
            Ops {
                put: true,
                get: true,
                atomic: true,
            },
        ),
        OneSided::Put(a) => (
            a,
            Ops {
                put: true,
                get: false,
                atomic: false,
            },
        ),
        OneSided::Get(a) => (
            a,
            Ops {
                put: false,
                get: true,
                atomic: false,
            },
        ),
        OneSided::Atomic(a) => (
            a,
            Ops {
                put: false,
                get: false,
                atomic: true,
            },
        ),
    };
    let transports = match parse_transports(&args.transports) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("quiver bench: {e}");
            return EXIT_USAGE;
        }
    };
    let cpus = match choose_cpus(args.cpus.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("quiver bench: {e}");
            return EXIT_USAGE;
        }
    };
    match run(&args, ops, &transports, cpus) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("quiver bench: {e}");
            EXIT_FAILURE
        }
    }
}

fn parse_transports(text: &str) -> Result<Vec<TransportKind>, String> {
    text.split(',')
        .map(|name| match TransportKind::from_name(name) {
            Some(k @ (TransportKind::Shm | TransportKind::Tcp | TransportKind::Udp)) => Ok(k),
            _ => Err(format!(
                "--transports: {name:?} is not one of shm, tcp, udp"
            )),
        })
        .collect()
}

fn run(
    args: &RmaArgs,
    ops: Ops,
    transports: &[TransportKind],
    cpus: [usize; 2],
) -> Result<(), String> {
    let counts = Counts {
        lat: args.iters.max(1),
        bw: (args.iters / 10).max(1),
        atomic: args.iters.saturating_mul(10).max(1),
    };
    let floors = floor::measure(cpus[0], cpus[1], &[BW_BYTES as u64])
        .map_err(|e| format!("measuring the floors: {e}"))?;
    let mut figures = Vec::new();
    for &transport in transports {
        figures.extend(measure_transport(transport, cpus, counts, ops)?);
    }
    let ucx = if args.no_ucx {
        Vec::new()
    } else {
        ucx_baselines(cpus, counts, ops).unwrap_or_else(|why| {
            eprintln!("quiver bench: UCX's baselines skipped: {why}");
            Vec::new()
        })
    };
    report(args.json.as_deref(), &figures, &ucx, &floors, cpus)
}

/// The two contexts of a job of two ranks over `transport`.
fn job(transport: TransportKind) -> Result<(Context, Context), String> {
    let config = Config {
        transports: vec![transport],
        connect_timeout: Duration::from_secs(20),
        op_timeout: Some(Duration::from_secs(120)),
        ..Config::default()
    };
    two_ranks(&config).map_err(|e| format!("a {transport} job: {e}"))
}

/// The figures of one transport: rank 1 (the target) on a thread of its own.
fn measure_transport(
    transport: TransportKind,
    cpus: [usize; 2],
    counts: Counts,
    ops: Ops,
) -> Result<Vec<Figure>, String> {
    let (c0, c1) = job(transport)?;
    let network = transport != TransportKind::Shm;
    std::thread::scope(|scope| {
        let target = scope.spawn(|| -> Result<(), String> {
            floor::pin_current_thread(cpus[1]).map_err(|e| e.to_string())?;
            be_target(&c1, network, counts).map_err(|e| format!("{transport} target: {e}"))
        });
        let figures = (|| -> Result<Vec<Figure>, String> {
            floor::pin_current_thread(cpus[0]).map_err(|e| e.to_string())?;
            initiate(&c0, transport, counts, ops).map_err(|e| format!("{transport}: {e}"))
        })();
        let target = target
            .join()
            .map_err(|_| format!("the {transport} target panicked"))?;
        let figures = figures?;
        target?;
        Ok(figures)
    })
}

/// Polls `region` word 0 until it holds `value`, making progress for the network
/// transports (they apply peers' puts in quiver calls).
fn await_word(
    ep: &mut Endpoint,
    region: &quiver::Region,
    value: u64,
    network: bool,
) -> quiver::Result<()> {
    while region.load(0)? != value {
        if network {
            ep.progress()?;
        } else {
            std::hint::spin_loop();
        }
    }
    Ok(())
}

/// Rank 1: a region of 1 MiB, its key to rank 0, rank 0's key back; then the phases
/// rank 0 names in one-byte messages: `L` answer puts (latency), `M` receive messages,
/// `Q` stop. In between it waits in `recv`, which serves rank 0's operations.
fn be_target(ctx: &Context, network: bool, counts: Counts) -> quiver::Result<()> {
    let region = ctx.alloc_region(BW_BYTES, Rights::ReadWrite)?;
    let mut ep = ctx.endpoint(0)?;
    let conn = ep.connect(Addr::new(0, 0))?;
    ep.send(conn, region.key().as_bytes())?;
    let mut buf = vec![0u8; BW_BYTES];
    let (n, _) = ep.recv(&mut buf)?;
    let key = RemoteKey::from_bytes(&buf[..n])?;
    loop {
        let (n, _) = ep.recv(&mut buf)?;
        match buf.get(..n) {
            Some(b"L") => {
                for i in 1..=counts.lat + 1 {
                    await_word(&mut ep, &region, i, network)?;
                    ep.put(conn, &i.to_ne_bytes(), &key, 0)?;
                }
            }
            Some(b"M") => {
                // One message to warm up, then the timed ones.
                for _ in 0..=counts.bw {
                    ep.recv(&mut buf)?;
                }
                ep.send(conn, b"m")?;
            }
            _ => return Ok(()),
        }
    }
}

/// Rank 0: every figure `ops` asks for, against rank 1.
fn initiate(
    ctx: &Context,
    transport: TransportKind,
    counts: Counts,
    ops: Ops,
) -> quiver::Result<Vec<Figure>> {
    let network = transport != TransportKind::Shm;
    let region = ctx.alloc_region(64, Rights::ReadWrite)?;
    let mut ep = ctx.endpoint(0)?;
    let conn = ep.connect(Addr::new(1, 0))?;
    let mut small = [0u8; 64];
    let (n, _) = ep.recv(&mut small)?;
    let key = RemoteKey::from_bytes(&small[..n])?;
    ep.send(conn, region.key().as_bytes())?;
    let name = transport.name();
    let figure = |op, size, value, unit, iters| Figure {
        transport: name,
        op,
        size,
        value,
        unit,
        iters,
    };
    let mut figures = Vec::new();
    if ops.put {
        ep.send(conn, b"L")?;
        // The clock is read once per batch of round trips, as the hand-off floor does: a
        // read costs 25-60 ns here, as much as the put itself. The first round trip, which
        // maps the region, is not timed.
        ep.put(conn, &1u64.to_ne_bytes(), &key, 0)?;
        await_word(&mut ep, &region, 1, network)?;
        let mut rtts = Vec::with_capacity(counts.lat.div_ceil(LAT_BATCH) as usize);
        let mut next = 2;
        while next <= counts.lat + 1 {
            let batch = LAT_BATCH.min(counts.lat + 2 - next);
            let started = Instant::now();
            for i in next..next + batch {
                ep.put(conn, &i.to_ne_bytes(), &key, 0)?;
                await_word(&mut ep, &region, i, network)?;
            }
            rtts.push(started.elapsed().as_nanos() as f64 / 1e3 / batch as f64);
            next += batch;
        }
        let one_way = median(&mut rtts) / 2.0;
        figures.push(figure("put_lat", LAT_BYTES, one_way, "us", counts.lat));
        let bw = put_bandwidth(&mut ep, (conn, network), &key, counts.bw)?;
        figures.push(figure("put_bw", BW_BYTES, bw, "MB/s", counts.bw));
        let bw = message_bandwidth(&mut ep, conn, counts.bw)?;
        figures.push(figure("msg_bw", BW_BYTES, bw, "MB/s", counts.bw));
    }
    if ops.get {
        let mut buf = vec![0u8; BW_BYTES];
        ep.get(conn, &mut buf, &key, 0)?;
        let started = Instant::now();
        for _ in 0..counts.bw {
            ep.get(conn, &mut buf, &key, 0)?;
        }
        let bw = mbps(BW_BYTES as u64 * counts.bw, started.elapsed());
        figures.push(figure("get_bw", BW_BYTES, bw, "MB/s", counts.bw));
    }
    if ops.atomic {
        ep.fetch_add(conn, &key, 8, 1)?;
        let started = Instant::now();
        for _ in 0..counts.atomic {
            ep.fetch_add(conn, &key, 8, 1)?;
        }
        let rate = counts.atomic as f64 / started.elapsed().as_secs_f64();
        figures.push(figure("fetch_add", 8, rate, "op/s", counts.atomic));
    }
    ep.flush(conn)?;
    ep.send(conn, b"Q")?;
    Ok(figures)
}

/// 1 MiB puts, [`PUT_WINDOW`] posted at a time over a network transport; MB/s from the
/// first post to the flush. Over shm a posted put is done when `post_put` returns, so a
/// window would only spread the puts over more source memory than `ucx_perftest -t
/// ucp_put_bw`, which puts from one buffer: there the window is one buffer, put again
/// and again.
fn put_bandwidth(
    ep: &mut Endpoint,
    (conn, network): (quiver::Connection, bool),
    key: &RemoteKey,
    count: u64,
) -> quiver::Result<f64> {
    let window = if network { PUT_WINDOW } else { 1 };
    let mut spare: Vec<Vec<u8>> = (0..window).map(|_| vec![1u8; BW_BYTES]).collect();
    let mut posted = std::collections::VecDeque::new();
    // One put to warm up (the first maps the region, or opens the request connection).
    ep.put(conn, &spare[0], key, 0)?;
    let started = Instant::now();
    for _ in 0..count {
        let data = if let Some(data) = spare.pop() {
            data
        } else if let Some(oldest) = posted.pop_front() {
            ep.wait_rma(oldest)?.data
        } else {
            vec![1u8; BW_BYTES]
        };
        posted.push_back(ep.post_put(conn, data, key, 0)?);
    }
    for req in posted {
        ep.wait_rma(req)?;
    }
    ep.flush(conn)?;
    Ok(mbps(BW_BYTES as u64 * count, started.elapsed()))
}

/// quiver's message bandwidth at 1 MiB on the same connection: `count` blocking sends,
/// then the receiver's one answer.
fn message_bandwidth(
    ep: &mut Endpoint,
    conn: quiver::Connection,
    count: u64,
) -> quiver::Result<f64> {
    let data = vec![2u8; BW_BYTES];
    ep.send(conn, b"M")?;
    ep.send(conn, &data)?;
    let started = Instant::now();
    for _ in 0..count {
        ep.send(conn, &data)?;
    }
    ep.recv(&mut [0u8; 1])?;
    Ok(mbps(BW_BYTES as u64 * count, started.elapsed()))
}

fn mbps(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / elapsed.as_secs_f64().max(1e-9) / 1e6
}

fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples.get(samples.len() / 2).copied().unwrap_or(0.0)
}

/// UCX's figures over shared memory (`UCX_TLS=posix,cma,self`): `ucp_put_lat` at 8 B,
/// `ucp_put_bw` and `ucp_get` at 1 MiB, the server on rank 1's CPU.
fn ucx_baselines(cpus: [usize; 2], counts: Counts, ops: Ops) -> Result<Vec<Figure>, String> {
    let tool = ["/usr/bin/ucx_perftest", "/usr/local/bin/ucx_perftest"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .ok_or("ucx_perftest is not installed (Debian: ucx-utils)")?;
    let mut batch = String::new();
    if ops.put {
        batch += &format!("put_lat -t ucp_put_lat -s {LAT_BYTES} -n {}\n", counts.lat);
        batch += &format!("put_bw -t ucp_put_bw -s {BW_BYTES} -n {}\n", counts.bw);
    }
    if ops.get {
        batch += &format!("get_bw -t ucp_get -s {BW_BYTES} -n {}\n", counts.bw);
    }
    if batch.is_empty() {
        return Ok(Vec::new());
    }
    let file = std::env::temp_dir().join(format!("quiver-bench-rma-{}.ucx", std::process::id()));
    std::fs::write(&file, batch).map_err(|e| format!("writing {}: {e}", file.display()))?;
    let out = run_ucx_pair(tool, &file, cpus);
    let _ = std::fs::remove_file(&file);
    Ok(parse_ucx(&out?))
}

/// Starts a `ucx_perftest` server, then its client until it connects; the client's output.
fn run_ucx_pair(tool: &str, batch: &std::path::Path, cpus: [usize; 2]) -> Result<String, String> {
    let port = free_port().map_err(|e| e.to_string())?.to_string();
    let batch = batch.to_string_lossy().to_string();
    let common = |c: &mut Command| {
        c.env("UCX_TLS", "posix,cma,self")
            .args(["-p", &port, "-b", &batch])
            .stdin(Stdio::null());
    };
    let mut server = Command::new(tool);
    common(&mut server);
    let mut server = server
        .args(["-c", &cpus[1].to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting {tool}: {e}"))?;
    let mut result = Err("the server never answered".to_string());
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        if matches!(server.try_wait(), Ok(Some(_))) {
            break;
        }
        let mut client = Command::new(tool);
        common(&mut client);
        let done = client
            .args(["127.0.0.1", "-c", &cpus[0].to_string(), "-f"])
            .output()
            .map_err(|e| format!("running {tool}: {e}"))?;
        if done.status.success() {
            result = Ok(String::from_utf8_lossy(&done.stdout).to_string());
            break;
        }
        let said = String::from_utf8_lossy(&done.stderr).to_string();
        if !said.contains("onnection refused") {
            result = Err(format!("{tool} failed: {}", said.trim()));
            break;
        }
    }
    let _ = server.kill();
    let _ = server.wait();
    result
}

/// The figures in `ucx_perftest -f` output: lines of nine fields (name, iterations,
/// latency p50 / average / overall in µs, bandwidth average / overall in MiB/s, message
/// rate average / overall).
fn parse_ucx(out: &str) -> Vec<Figure> {
    out.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [name, iters, p50, _, _, _, bw, ..] = fields.as_slice() else {
                return None;
            };
            if fields.len() != 9 {
                return None;
            }
            let iters = iters.parse().ok()?;
            let (op, size, value, unit) = match *name {
                "put_lat" => ("put_lat", LAT_BYTES, p50.parse().ok()?, "us"),
                "put_bw" => (
                    "put_bw",
                    BW_BYTES,
                    bw.parse::<f64>().ok()? * 1.048_576,
                    "MB/s",
                ),
                "get_bw" => (
                    "get_bw",
                    BW_BYTES,
                    bw.parse::<f64>().ok()? * 1.048_576,
                    "MB/s",
                ),
                _ => return None,
            };
            Some(Figure {
                transport: "shm",
                op,
                size,
                value,
                unit,
                iters,
            })
        })
        .collect()
}

/// A figure's target: the reference's value, the ratio and whether it is met.
struct Verdict {
    reference: Option<f64>,
    target: &'static str,
    ratio: Option<f64>,
    met: Option<bool>,
}

fn verdict(f: &Figure, figures: &[Figure], ucx: &[Figure]) -> Verdict {
    let find = |list: &[Figure], transport: &str, op: &str| {
        list.iter()
            .find(|g| g.transport == transport && g.op == op)
            .map(|g| g.value)
    };
    let (reference, target, bound, at_most) = match (f.transport, f.op) {
        ("shm", "put_lat") => (find(ucx, "shm", "put_lat"), "<= 0.5x UCX", 0.5, true),
        ("shm", op @ ("put_bw" | "get_bw")) => (find(ucx, "shm", op), ">= 1.0x UCX", 1.0, false),
        ("shm", "fetch_add") => (Some(1.0), ">= 10 M/s", 10e6, false),
        ("tcp", "put_bw") => (
            find(figures, "tcp", "msg_bw"),
            ">= 0.9x tcp msg_bw",
            0.9,
            false,
        ),
        _ => (None, "", 0.0, false),
    };
    let ratio = reference.map(|r| f.value / r);
    let met = ratio.map(|r| if at_most { r <= bound } else { r >= bound });
    Verdict {
        reference: reference.filter(|_| f.op != "fetch_add"),
        target,
        ratio: ratio.filter(|_| f.op != "fetch_add"),
        met,
    }
}

/// A latency's floor against its reference: a put visible at the target moves at least
/// one cache line to the target's core, so no ratio below this one is reachable on the
/// machine that ran the bench.
fn floor_ratio(op: &str, floor: Option<f64>, reference: Option<f64>) -> Option<f64> {
    match (op, floor, reference) {
        ("put_lat", Some(floor), Some(reference)) if reference > 0.0 => Some(floor / reference),
        _ => None,
    }
}

/// The table's target column: the target and whether it is met, and the floor's ratio.
fn target_text(v: Option<&Verdict>, floor_ratio: Option<f64>) -> String {
    let mut target = v.map_or(String::new(), |v| match v.met {
        Some(true) => format!("{} met", v.target),
        Some(false) => format!("{} NOT met", v.target),
        None if !v.target.is_empty() => format!("{} (no reference)", v.target),
        None => String::new(),
    });
    if let Some(ratio) = floor_ratio {
        target += &format!(" (the hand-off floor alone: {ratio:.2}x)");
    }
    target
}

/// The table (unless `--json -`) and the JSON lines.
fn report(
    json: Option<&str>,
    figures: &[Figure],
    ucx: &[Figure],
    floors: &Floors,
    cpus: [usize; 2],
) -> Result<(), String> {
    let table = json != Some("-");
    let mut sink: Option<Box<dyn Write>> = match json {
        None => None,
        Some("-") => Some(Box::new(std::io::stdout())),
        Some(path) => Some(Box::new(
            std::fs::File::create(path).map_err(|e| format!("--json {path}: {e}"))?,
        )),
    };
    let handoff = floors.handoff.one_way_median_us;
    let memcpy = floors.memcpy_at(BW_BYTES as u64).map(|m| m.median_mbps);
    if table {
        println!(
            "one-sided operations, ranks on CPUs {},{} (floors: hand-off {handoff:.3} µs one way, memcpy 1 MiB {:.0} MB/s)",
            cpus[0],
            cpus[1],
            memcpy.unwrap_or(0.0)
        );
        println!(
            "{:<5} {:<10} {:>7} {:>14} {:>14} {:>8}  target",
            "path", "figure", "size", "quiver", "reference", "ratio"
        );
    }
    let provenance = serde_json::to_value(Provenance::current()).map_err(|e| e.to_string())?;
    for f in figures.iter().chain(ucx) {
        let is_ucx = ucx.iter().any(|g| std::ptr::eq(g, f));
        let v = if is_ucx {
            None
        } else {
            Some(verdict(f, figures, ucx))
        };
        let floor = match f.op {
            "put_lat" => Some(handoff),
            "put_bw" | "get_bw" | "msg_bw" => memcpy,
            _ => None,
        };
        let floor_ratio = floor_ratio(f.op, floor, v.as_ref().and_then(|v| v.reference));
        if table {
            let system = if is_ucx { "UCX" } else { "quiver" };
            let reference = v
                .as_ref()
                .and_then(|v| v.reference)
                .map_or(String::new(), |r| format!("{r:.2}"));
            let ratio = v
                .as_ref()
                .and_then(|v| v.ratio)
                .map_or(String::new(), |r| format!("{r:.2}x"));
            let target = target_text(v.as_ref(), floor_ratio);
            println!(
                "{:<5} {:<10} {:>7} {:>9.2} {:<4} {:>14} {:>8}  {target}{}",
                f.transport,
                f.op,
                f.size,
                f.value,
                f.unit,
                reference,
                ratio,
                if is_ucx {
                    format!("  ({system})")
                } else {
                    String::new()
                },
            );
        }
        if let Some(sink) = sink.as_mut() {
            let mut record = serde_json::json!({
                "test": "rma",
                "system": if is_ucx { "ucx" } else { "quiver" },
                "transport": f.transport,
                "op": f.op,
                "size": f.size,
                "value": f.value,
                "unit": f.unit,
                "iters": f.iters,
                "floor": floor,
                "floor_ratio": floor_ratio,
                "reference": v.as_ref().and_then(|v| v.reference),
                "ratio": v.as_ref().and_then(|v| v.ratio),
                "target": v.as_ref().map(|v| v.target).filter(|t| !t.is_empty()),
                "met": v.as_ref().and_then(|v| v.met),
            });
            if let (Some(map), Some(stamp)) = (record.as_object_mut(), provenance.as_object()) {
                map.extend(stamp.clone());
            }
            writeln!(sink, "{record}").map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand-off floor is set against UCX's put latency only: a bandwidth or a figure
    /// without a reference gets no floor ratio, and the target column says both.
    #[test]
    fn the_put_latency_target_is_shown_against_the_floor() {
        assert_eq!(floor_ratio("put_lat", Some(0.2), Some(0.25)), Some(0.8));
        assert_eq!(floor_ratio("put_lat", Some(0.2), None), None);
        assert_eq!(floor_ratio("put_lat", Some(0.2), Some(0.0)), None);
        assert_eq!(floor_ratio("put_bw", Some(5e4), Some(4e4)), None);
        let missed = Verdict {
            reference: Some(0.25),
            target: "<= 0.5x UCX",
            ratio: Some(1.04),
            met: Some(false),
        };
        assert_eq!(
            target_text(Some(&missed), Some(0.8)),
            "<= 0.5x UCX NOT met (the hand-off floor alone: 0.80x)"
        );
        assert_eq!(target_text(None, None), "");
    }
}
