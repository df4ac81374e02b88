//! The rank side of `quiver bench` (`quiver bench --worker`, started by the bench itself).
//!
//! Both ranks open endpoint port 0 and connect to each other's port 0, then run the plan's
//! tests in the same order with the same iteration counts (both derive them from the same
//! [`Plan`]). Rank 0 drives every test and writes one JSON [`Record`] per measured point to
//! its stdout; rank 1 answers. Errors go to stderr and make the rank exit non-zero.
//!
//! The ranks use quiver's blocking calls, which busy-poll for the configured spin time
//! (`QUIVER_SPIN_US`, 2 ms by default) before they sleep, so a test never pays a wake-up.
//! If the other rank dies, the blocking call returns a `PeerDead` error instead of hanging.
//!
//! Timed loops do no allocation, logging or formatting: buffers and timestamp vectors are
//! sized before the loop; pingpong reads the clock once per round trip.
//!
//! bw and rate send a window of `window` messages, then wait for a 1-byte ack
//! ([`Link::send_window`]). Up to the eager limit (`QUIVER_SHM_EAGER_MAX`) every message has
//! its own buffer and all are posted. Above it the sender depends on the transport: where a
//! posted send is sent in place, never copied (udp and mem datagram connections, messages of
//! at least `QUIVER_UDP_POST_IN_PLACE_MIN`: [`Endpoint::posts_in_place`]) and two fit in
//! 2 MiB, it keeps two distinct buffers posted ([`plan::posted_in_place_buffers`]) and
//! posts each again as soon as its `wait_send` hands it back, so one message goes out
//! while the one before waits for its last acknowledgements (more in flight measured
//! slower); elsewhere (shm, tcp, larger messages, a window of 1) it sends one buffer
//! `window` times with blocking sends, as osu_bw does for rendezvous messages. The record
//! of the first kind carries `posted` (how many buffers). The receiver is the same in all
//! cases.
//!
//! Detection cost: around each timed run (pingpong, bw, rate, pool; bibw: the whole point)
//! both ranks take their endpoint's [`DetectionStats`]; after it, rank 1 sends its share
//! to rank 0 (one 16-byte message, outside the timing), which puts the sum of both in the
//! record (`detect_looks`, `detect_ns`, `detect_share`) with `detect` = on or off.
//!
//! `--detect interleave`: every pingpong, bw and rate point runs as blocks, each a whole
//! run of its own (warm-up, timed iterations, detection cost) with failure detection
//! switched on or off in both ranks by [`Endpoint::set_detection`] before it; the block's
//! record carries `detect` and its pair as `round` ([`Plan::interleave_blocks`]).
//!
//! `--baseline interleave` (udp, tcp): the same blocks, one of each pair over the quiver
//! connection and one over the matching raw-socket baseline (raw-udp, raw-tcp: `raw.rs`'s
//! [`RawBaseline`], the code `--transport raw-*` runs). Its sockets are set up right after
//! the first synchronisation, their ports traded over the quiver connection (the context
//! is built for the network transport alone, and the connection is idle then). Blocks
//! follow each other with no extra synchronisation: each ends on both ranks within a
//! message of each other, and the two channels never carry each other's messages. The
//! raw block's record carries `transport` = "raw-udp" or "raw-tcp" and the same `round`.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::time::{Duration, Instant};

use quiver::{
    Addr, Connection, Context, DetectionStats, Endpoint, Error, RecvRequest, SendRequest,
};

use super::loggp::{self, BenchLink, LoggpBuffers};
use super::plan::{self, Interleaved, Plan, TestName, Transport, RATE_MESSAGE_BYTES};
use super::raw::{RawBaseline, Rendezvous};
use super::report::Record;
use super::stats;

/// The endpoint port both ranks use.
const BENCH_PORT: u16 = 0;
/// How long connecting to the other rank may keep failing before giving up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// `--baseline interleave`: the udp idle timeout of the ranks (unless set): nobody polls
/// the quiver connection during a raw block, and without it the first look after a block
/// longer than the detection time would find the peer silent for too long. Only the
/// keepalive of an idle connection depends on it (a quarter of it), and a connection that
/// carries a test is never idle, so the quiver blocks measure what a run alone does.
const BASELINE_IDLE_TIMEOUT_MS: u64 = 3_600_000;
/// Size of the acknowledgement and synchronisation messages, in bytes.
const ACK_BYTES: usize = 1;
/// Size of the message carrying rank 1's detection cost: the four counters of
/// [`DetectionStats`], u64 each.
const DETECTION_BYTES: usize = 32;

/// The connection to the other rank.
struct Link {
    endpoint: Endpoint,
    connection: Connection,
    rank: u32,
    /// Largest message the transport copies eagerly; larger ones go by rendezvous.
    eager_max: u64,
    /// bibw: buffers of one window each way, and the requests in flight.
    exchange_sends: Vec<Vec<u8>>,
    exchange_receives: Vec<Vec<u8>>,
    send_requests: Vec<SendRequest>,
    receive_requests: Vec<RecvRequest>,
}

/// Buffers reused by every test, sized once for the largest message.
struct Buffers {
    send: Vec<u8>,
    receive: Vec<u8>,
    /// One timestamp per pingpong round trip, plus the start.
    stamps: Vec<Instant>,
}

pub(crate) fn run(plan: &Plan) -> Result<(), String> {
    apply_settings(plan)?;
    if plan.baseline_transport().is_some()
        && std::env::var_os("QUIVER_NET_IDLE_TIMEOUT_MS").is_none()
    {
        // Still single-threaded: see apply_settings.
        std::env::set_var(
            "QUIVER_NET_IDLE_TIMEOUT_MS",
            BASELINE_IDLE_TIMEOUT_MS.to_string(),
        );
    }
    let context = Context::from_env().map_err(|error| format!("Context::from_env: {error}"))?;
    if context.size() != 2 {
        return Err(format!(
            "the bench needs exactly 2 ranks, this job has {}",
            context.size()
        ));
    }
    let rank = context.rank();
    let peer = Addr::new(1 - rank, BENCH_PORT);
    let mut link = Link::open(&context, "")?;

    let max_bytes = plan.max_message_bytes() as usize;
    let max_round_trips = plan.max_pingpong_iters();
    let mut buffers = Buffers {
        send: (0..max_bytes).map(|index| index as u8).collect(),
        receive: vec![0u8; max_bytes],
        stamps: Vec::with_capacity(max_round_trips as usize + 1),
    };
    // The blocks of every point: one block as configured, or the interleaved pairs.
    let detect_on = context.config().detect;
    let blocks: Vec<(Option<u32>, Block)> = match plan.interleave.map(|interleave| interleave.sides)
    {
        None => vec![(None, Block::Quiver(detect_on))],
        Some(Interleaved::Detection) => {
            let Some(on) = detect_on else {
                return Err(
                    "--detect interleave needs failure detection on (QUIVER_DETECT_MS is 0)"
                        .to_string(),
                );
            };
            plan.interleave_blocks()
                .into_iter()
                .map(|(pair, on_now)| (Some(pair), Block::Quiver(on_now.then_some(on))))
                .collect()
        }
        Some(Interleaved::Baseline | Interleaved::Tcp) => plan
            .interleave_blocks()
            .into_iter()
            .map(|(pair, quiver)| {
                let block = if quiver {
                    Block::Quiver(detect_on)
                } else {
                    Block::Baseline
                };
                (Some(pair), block)
            })
            .collect(),
    };
    // --baseline interleave: the raw link, set up over the quiver connection; --baseline
    // tcp: a second quiver link over a tcp-only context, set up the same way.
    let mut baseline = match plan.baseline_transport() {
        Some(Transport::Tcp) => Some(BaselineLink::Quiver(Box::new(
            open_tcp_link(&context, &mut link)
                .map_err(|error| format!("opening the tcp baseline: {error}"))?,
        ))),
        Some(transport) => Some(BaselineLink::Raw(
            transport,
            RawBaseline::open(transport, rank, &mut link, plan)
                .map_err(|error| format!("opening the {} baseline: {error}", transport.as_str()))?,
        )),
        None => None,
    };
    let mut output = io::stdout().lock();
    for test in plan.rank_tests() {
        let mut point = |run: Run| -> Result<(), String> {
            for &(pair, block) in &blocks {
                let (transport, record) = match (block, baseline.as_mut()) {
                    (Block::Quiver(detect), baseline) => (plan.transport, {
                        link.endpoint
                            .set_detection(detect)
                            .map_err(|error| format!("switching detection: {error}"))?;
                        let record = run.over_quiver(&mut link, &mut buffers, plan.window);
                        if record.is_ok() && baseline.is_some() {
                            settle(&mut link, &run)?;
                        }
                        record
                    }),
                    (Block::Baseline, Some(BaselineLink::Raw(transport, raw))) => {
                        (*transport, run.over_raw(raw, plan.window))
                    }
                    (Block::Baseline, Some(BaselineLink::Quiver(tcp))) => (Transport::Tcp, {
                        let record = run.over_quiver(&mut tcp.link, &mut buffers, plan.window);
                        if record.is_ok() {
                            settle(&mut tcp.link, &run)?;
                        }
                        record
                    }),
                    (Block::Baseline, None) => return Err("no baseline is open".to_string()),
                };
                let record = record.map_err(|error| {
                    format!("{} over {}: {error}", run.name(), transport.as_str())
                })?;
                emit_as(&mut output, in_pair(record, pair), transport)?;
            }
            Ok(())
        };
        match test {
            TestName::Pingpong => {
                for &size in &plan.sizes {
                    let iters = plan.pingpong_iters(size);
                    point(Run::Pingpong { size, iters })?;
                }
            }
            TestName::Bw => {
                for &size in &plan.sizes {
                    let windows = plan.bw_windows(size);
                    point(Run::Stream {
                        test,
                        size,
                        windows,
                    })?;
                }
            }
            TestName::Rate => {
                point(Run::Stream {
                    test,
                    size: RATE_MESSAGE_BYTES,
                    windows: plan.rate_windows(),
                })?;
            }
            TestName::Bibw => {
                for &size in &plan.sizes {
                    let before = link.endpoint.detection_stats();
                    let start = Instant::now();
                    let mut record =
                        loggp::bibw_point(&mut link, size, plan.window, plan.bw_windows(size))
                            .map_err(|error| format!("bibw at {size} bytes: {error}"))?;
                    let point = start.elapsed();
                    let own = link.endpoint.detection_stats().since(&before);
                    let both = link
                        .total_detection(own)
                        .map_err(|error| format!("bibw at {size} bytes: {error}"))?;
                    if let Some(record) = record.as_mut() {
                        link.note_detection(record, both, point);
                    }
                    emit(&mut output, record, plan)?;
                }
            }
            TestName::Loggp => {
                let records = run_loggp(&mut link, plan, &buffers.send, &mut buffers.receive)?;
                for record in records {
                    emit(&mut output, Some(record), plan)?;
                }
            }
            TestName::Pool => {
                for &size in &plan.sizes {
                    let iters = plan.pingpong_iters(size);
                    for fresh in [false, true] {
                        let record = link
                            .pool_pingpong(&mut buffers, size, iters, fresh)
                            .map_err(|error| format!("pool at {size} bytes: {error}"))?;
                        emit(&mut output, record, plan)?;
                    }
                }
            }
            TestName::Floor | TestName::Crossover | TestName::Compare | TestName::Wire => {}
        }
    }
    if let Some(BaselineLink::Quiver(tcp)) = baseline.as_mut() {
        tcp.link
            .finish()
            .map_err(|error| format!("last exchange over tcp with rank {}: {error}", peer.rank))?;
    }
    link.finish()
        .map_err(|error| format!("last exchange with rank {}: {error}", peer.rank))
}

/// Ends a quiver block of `--baseline interleave` or `tcp` with one exchange over its
/// link (outside the timed run): a rank that goes on to the other side's block stops
/// calling this endpoint, and over udp the last messages it sent may still wait in the
/// protocol's send window for acknowledgements that only this endpoint's calls handle.
/// Once rank 0's byte has come back, everything each rank sent has arrived, and the
/// answer itself leaves at once (the byte that asked for it acknowledged all before it).
fn settle(link: &mut Link, run: &Run) -> Result<(), String> {
    link.synchronise()
        .map_err(|error| format!("{}: settling the link: {error}", run.name()))
}

/// One block of a point: a run over quiver with failure detection as given (`None`:
/// off), or a run over the baseline (`--baseline interleave` or `tcp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Quiver(Option<Duration>),
    Baseline,
}

/// The baseline side of `--baseline interleave` (raw sockets) or `--baseline tcp`
/// (quiver's tcp, over its own context).
enum BaselineLink {
    Raw(Transport, RawBaseline),
    Quiver(Box<TcpLink>),
}

/// `--baseline tcp`: quiver's tcp between the same two ranks, over a second context that
/// uses tcp only. The link (its endpoint) is dropped before the context.
struct TcpLink {
    link: Link,
    _context: Context,
}

/// Builds the `--baseline tcp` link: each rank picks a free loopback port, rank 0 draws a
/// fresh job id and key (so nothing keyed by the job id, shm names among them, is shared
/// with the first context), all of it goes to the other rank over the first link, and
/// both ranks build a tcp-only context (the configuration of the first one otherwise) and
/// open their link on it as `run` does.
///
/// The port is found by binding and closing a listener; the context binds it again a
/// moment later (another process taking it meanwhile makes the build fail, clearly).
fn open_tcp_link(context: &Context, first: &mut Link) -> Result<TcpLink, String> {
    let rank = first.rank;
    let port = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map_err(|error| format!("finding a free loopback port: {error}"))?
        .port();
    let mut mine = port.to_le_bytes().to_vec();
    if rank == 0 {
        let job = crate::launch::JobIdentity::generate()
            .map_err(|error| format!("drawing the tcp context's job id and key: {error}"))?;
        mine.extend_from_slice(&job.id.to_le_bytes());
        mine.extend_from_slice(&job.key);
    }
    let theirs = Rendezvous::exchange(first, &mine)?;
    let job_source = if rank == 0 { &mine } else { &theirs };
    let (Some(their_port), Some(job_id), Some(key)) = (
        theirs.get(..2),
        job_source
            .get(2..10)
            .and_then(|id| <[u8; 8]>::try_from(id).ok()),
        job_source
            .get(10..42)
            .and_then(|key| <[u8; 32]>::try_from(key).ok()),
    ) else {
        return Err(format!(
            "the other rank sent {} bytes for the tcp baseline's setup",
            theirs.len()
        ));
    };
    let their_port = u16::from_le_bytes([their_port[0], their_port[1]]);
    let loopback = |port| std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port));
    let addrs = if rank == 0 {
        vec![loopback(port), loopback(their_port)]
    } else {
        vec![loopback(their_port), loopback(port)]
    };
    let config = quiver::Config {
        transports: vec![quiver::TransportKind::Tcp],
        ..context.config().clone()
    };
    let tcp_context = Context::builder()
        .rank(rank)
        .size(2)
        .job_id(u64::from_le_bytes(job_id))
        .job_key(key)
        .addrs(addrs)
        .config(config)
        .build()
        .map_err(|error| format!("building the tcp context: {error}"))?;
    let link = Link::open(&tcp_context, " over tcp")?;
    Ok(TcpLink {
        link,
        _context: tcp_context,
    })
}

/// One measured run of a pingpong, bw or rate point.
#[derive(Debug, Clone, Copy)]
enum Run {
    /// `iters` round trips of `size` bytes.
    Pingpong { size: u64, iters: u64 },
    /// bw or rate: `windows` windows of messages of `size` bytes.
    Stream {
        test: TestName,
        size: u64,
        windows: u64,
    },
}

impl Run {
    /// "pingpong at 8 bytes", for error messages.
    fn name(self) -> String {
        match self {
            Run::Pingpong { size, .. } => format!("pingpong at {size} bytes"),
            Run::Stream { test, size, .. } => format!("{} at {size} bytes", test.as_str()),
        }
    }

    /// Measures the run over the quiver connection; rank 0 returns the record.
    fn over_quiver(
        self,
        link: &mut Link,
        buffers: &mut Buffers,
        window: u64,
    ) -> Result<Option<Record>, String> {
        let result = match self {
            Run::Pingpong { size, iters } => link.pingpong(buffers, size, iters),
            Run::Stream {
                test,
                size,
                windows,
            } => link.stream(buffers, test, size, window, windows),
        };
        result.map_err(|error| error.to_string())
    }

    /// Measures the run over the raw-socket baseline; rank 0 returns the record.
    fn over_raw(self, baseline: &mut RawBaseline, window: u64) -> Result<Option<Record>, String> {
        let result = match self {
            Run::Pingpong { size, iters } => baseline.pingpong(size, iters),
            Run::Stream {
                test,
                size,
                windows,
            } => baseline.stream(test, size, window, windows),
        };
        result.map_err(|error| error.to_string())
    }
}

impl Rendezvous for Link {
    /// `--baseline interleave`: the raw link's setup goes over the quiver connection,
    /// idle at that moment (right after the first synchronisation).
    fn exchange(&mut self, mine: &[u8]) -> Result<Vec<u8>, String> {
        super::raw::exchange_over(&mut self.endpoint, self.connection, mine)
    }
}

/// Marks a block's record with its interleave pair (`round`); `None`: not interleaved.
fn in_pair(record: Option<Record>, pair: Option<u32>) -> Option<Record> {
    record.map(|record| Record {
        round: pair.or(record.round),
        ..record
    })
}

/// Applies the plan's `--set` settings to this process's environment, before the context
/// reads it. Called first thing in a rank, while it is still single-threaded.
pub(super) fn apply_settings(plan: &Plan) -> Result<(), String> {
    for (name, value) in &plan.settings {
        if !name.starts_with("QUIVER_") {
            return Err(format!("--set {name}={value}: only QUIVER_* settings"));
        }
        std::env::set_var(name, value);
    }
    Ok(())
}

/// Runs loggp over every size of the plan; rank 0 returns the points (with their local G)
/// and the fit record, rank 1 nothing.
pub(super) fn run_loggp(
    link: &mut dyn BenchLink,
    plan: &Plan,
    send: &[u8],
    receive: &mut [u8],
) -> Result<Vec<Record>, String> {
    let most_samples = plan
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
        loggp::clock_overhead_us()
    } else {
        0.0
    };
    let mut points = Vec::with_capacity(plan.sizes.len());
    for &size in &plan.sizes {
        let length = size as usize;
        let point = loggp::loggp_point(
            link,
            (&send[..length], &mut receive[..length]),
            plan.loggp_counts(size),
            plan.window,
            clock_overhead_us,
            &mut samples,
        )
        .map_err(|error| format!("loggp at {size} bytes: {error}"))?;
        points.extend(point);
    }
    if points.is_empty() {
        return Ok(points);
    }
    loggp::fill_gap_per_byte(&mut points);
    points.extend(loggp::fit_record(&points));
    Ok(points)
}

/// Rank 0 writes the record (with the plan's transport) as one JSON line; rank 1 has none.
pub(super) fn emit(
    output: &mut impl Write,
    record: Option<Record>,
    plan: &Plan,
) -> Result<(), String> {
    emit_as(output, record, plan.transport)
}

/// Rank 0 writes the record, measured over `transport`, as one JSON line.
fn emit_as(
    output: &mut impl Write,
    record: Option<Record>,
    transport: Transport,
) -> Result<(), String> {
    let Some(mut record) = record else {
        return Ok(());
    };
    record.transport = transport.as_str().to_string();
    let line = serde_json::to_string(&record).map_err(|error| error.to_string())?;
    writeln!(output, "{line}")
        .and_then(|()| output.flush())
        .map_err(|error| format!("writing results to stdout: {error}"))
}

/// Connects to the other rank, retrying while it may still be starting.
pub(super) fn connect(endpoint: &mut Endpoint, peer: Addr) -> Result<Connection, String> {
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    loop {
        match endpoint.connect(peer) {
            Ok(connection) => return Ok(connection),
            Err(error) if Instant::now() >= deadline => {
                return Err(format!("connecting to {peer}: {error}"));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

impl Link {
    /// Opens the bench's endpoint on `context`, connects to the other rank and makes the
    /// first exchange with it; `over` ends the context's part of error messages.
    fn open(context: &Context, over: &str) -> Result<Link, String> {
        let rank = context.rank();
        let mut endpoint = context
            .endpoint(BENCH_PORT)
            .map_err(|error| format!("opening endpoint port {BENCH_PORT}{over}: {error}"))?;
        let peer = Addr::new(1 - rank, BENCH_PORT);
        let connection = connect(&mut endpoint, peer)?;
        let mut link = Link {
            endpoint,
            connection,
            rank,
            eager_max: context.config().shm_eager_max,
            exchange_sends: Vec::new(),
            exchange_receives: Vec::new(),
            send_requests: Vec::new(),
            receive_requests: Vec::new(),
        };
        link.synchronise()
            .map_err(|error| format!("first exchange with rank {}{over}: {error}", peer.rank))?;
        Ok(link)
    }

    /// Rank 0 sends one byte, rank 1 answers: both are connected and at the same point.
    fn synchronise(&mut self) -> StepResult<()> {
        let mut byte = [0u8; ACK_BYTES];
        if self.rank == 0 {
            self.send(&byte)?;
            self.receive_exact(&mut byte, ACK_BYTES)
        } else {
            self.receive_exact(&mut byte, ACK_BYTES)?;
            self.send(&byte)
        }
    }

    /// The last exchange: rank 1 exits only after it has answered everything.
    fn finish(&mut self) -> StepResult<()> {
        self.synchronise()
    }

    /// Ping-pong of `size` bytes; rank 0 returns the record.
    fn pingpong(
        &mut self,
        buffers: &mut Buffers,
        size: u64,
        iters: u64,
    ) -> StepResult<Option<Record>> {
        let length = size as usize;
        let warmup = plan::warmup_iters(iters);
        let Buffers {
            send,
            receive,
            stamps,
        } = buffers;
        let message = &send[..length];
        if self.rank != 0 {
            for _ in 0..warmup {
                self.receive_exact(receive, length)?;
                self.send(message)?;
            }
            let before = self.endpoint.detection_stats();
            for _ in 0..iters {
                self.receive_exact(receive, length)?;
                self.send(message)?;
            }
            let own = self.endpoint.detection_stats().since(&before);
            self.total_detection(own)?;
            return Ok(None);
        }
        for _ in 0..warmup {
            self.send(message)?;
            self.receive_exact(receive, length)?;
        }
        stamps.clear();
        stamps.reserve(iters as usize + 1);
        let before = self.endpoint.detection_stats();
        stamps.push(Instant::now());
        for _ in 0..iters {
            self.send(message)?;
            self.receive_exact(receive, length)?;
            stamps.push(Instant::now());
        }
        let own = self.endpoint.detection_stats().since(&before);
        let both = self.total_detection(own)?;
        let timed = timed_span(stamps);
        let mut one_way_us: Vec<f64> = stamps
            .windows(2)
            .map(|pair| (pair[1] - pair[0]).as_secs_f64() * 1e6 / 2.0)
            .collect();
        stats::sort_samples(&mut one_way_us);
        let mut record = Record {
            test: TestName::Pingpong.as_str().to_string(),
            size,
            iters,
            latency_us: stats::median(&one_way_us),
            latency_p99_us: stats::percentile(&one_way_us, 99.0),
            ..Record::default()
        };
        self.note_detection(&mut record, both, timed);
        Ok(Some(record))
    }

    /// Ping-pong of `size` bytes where rank 0 receives with `recv_pooled` (buffers the
    /// endpoint registered in advance and gets back on drop) or, with `fresh`, into a newly
    /// allocated buffer per message (the cost of preparing memory on the fly: allocation,
    /// zeroing, page faults). Rank 1 receives into its one reused buffer.
    fn pool_pingpong(
        &mut self,
        buffers: &mut Buffers,
        size: u64,
        iters: u64,
        fresh: bool,
    ) -> StepResult<Option<Record>> {
        let length = size as usize;
        let warmup = plan::warmup_iters(iters);
        let Buffers {
            send,
            receive,
            stamps,
        } = buffers;
        let message = &send[..length];
        if self.rank != 0 {
            for _ in 0..warmup {
                self.receive_exact(receive, length)?;
                self.send(message)?;
            }
            let before = self.endpoint.detection_stats();
            for _ in 0..iters {
                self.receive_exact(receive, length)?;
                self.send(message)?;
            }
            let own = self.endpoint.detection_stats().since(&before);
            self.total_detection(own)?;
            return Ok(None);
        }
        let receive_once = |link: &mut Link| -> StepResult<()> {
            if fresh {
                // The point of this variant: a new buffer per message.
                let mut buffer = vec![0u8; length];
                link.receive_exact(&mut buffer, length)?;
                std::hint::black_box(&buffer);
            } else {
                let pooled = link.endpoint.recv_pooled()?;
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
            self.send(message)?;
            receive_once(self)?;
        }
        stamps.clear();
        let before = self.endpoint.detection_stats();
        stamps.push(Instant::now());
        for _ in 0..iters {
            self.send(message)?;
            receive_once(self)?;
            stamps.push(Instant::now());
        }
        let own = self.endpoint.detection_stats().since(&before);
        let both = self.total_detection(own)?;
        let timed = timed_span(stamps);
        let mut one_way_us: Vec<f64> = stamps
            .windows(2)
            .map(|pair| (pair[1] - pair[0]).as_secs_f64() * 1e6 / 2.0)
            .collect();
        stats::sort_samples(&mut one_way_us);
        let mut record = Record {
            test: TestName::Pool.as_str().to_string(),
            variant: Some(if fresh { "fresh" } else { "pooled" }.to_string()),
            size,
            iters,
            latency_us: stats::median(&one_way_us),
            latency_p99_us: stats::percentile(&one_way_us, 99.0),
            ..Record::default()
        };
        self.note_detection(&mut record, both, timed);
        Ok(Some(record))
    }

    /// osu_bw-style streaming: rank 0 posts `window` sends of `size` bytes, waits for them,
    /// then for rank 1's 1-byte ack; `windows` timed rounds after a warm-up. Rank 0 returns
    /// the record: bandwidth for bw, message rate for rate.
    fn stream(
        &mut self,
        buffers: &mut Buffers,
        test: TestName,
        size: u64,
        window: u64,
        windows: u64,
    ) -> StepResult<Option<Record>> {
        let length = size as usize;
        let warmup = plan::warmup_windows(windows);
        if self.rank != 0 {
            let mut before = self.endpoint.detection_stats();
            for round in 0..warmup + windows {
                if round == warmup {
                    before = self.endpoint.detection_stats();
                }
                for _ in 0..window {
                    self.receive_exact(&mut buffers.receive, length)?;
                }
                self.send(&[0u8; ACK_BYTES])?;
            }
            let own = self.endpoint.detection_stats().since(&before);
            self.total_detection(own)?;
            return Ok(None);
        }
        // Owned send buffers (see send_window: a window of them up to the eager limit; above
        // it two kept posted where the transport sends posted sends in place, else one
        // reused buffer), touched now so no page fault is timed.
        let keep_posted = plan::posted_in_place_buffers(window, size)
            .filter(|_| self.endpoint.posts_in_place(self.connection, length));
        let (mode, pool_size) = match keep_posted {
            _ if size <= self.eager_max => (WindowMode::PostAll, window),
            Some(buffers) => (WindowMode::KeepPosted, buffers),
            None => (WindowMode::Repeat, 1),
        };
        let mut pool: Vec<Vec<u8>> = (0..pool_size)
            .map(|_| buffers.send[..length].to_vec())
            .collect();
        let mut requests: VecDeque<SendRequest> = VecDeque::with_capacity(pool_size as usize);
        let mut ack = [0u8; ACK_BYTES];
        for _ in 0..warmup {
            self.send_window(mode, &mut pool, window, &mut requests, &mut ack)?;
        }
        let before = self.endpoint.detection_stats();
        let start = Instant::now();
        for _ in 0..windows {
            self.send_window(mode, &mut pool, window, &mut requests, &mut ack)?;
        }
        let elapsed = start.elapsed();
        let own = self.endpoint.detection_stats().since(&before);
        let both = self.total_detection(own)?;
        let elapsed_us = elapsed.as_secs_f64() * 1e6;
        let messages = (window * windows) as f64;
        let mut record = Record {
            test: test.as_str().to_string(),
            size,
            iters: windows,
            window: Some(window),
            posted: (mode == WindowMode::KeepPosted).then_some(pool_size),
            ..Record::default()
        };
        // bytes per µs = 10^6 bytes/s = MB/s; messages per µs = Mmsg/s.
        match test {
            TestName::Rate => record.rate_mmsgs = Some(messages / elapsed_us),
            _ => record.bandwidth_mbps = Some(messages * size as f64 / elapsed_us),
        }
        self.note_detection(&mut record, both, elapsed);
        Ok(Some(record))
    }

    /// After a timed run: rank 1 sends what its looks cost during it ([`DETECTION_BYTES`]);
    /// rank 0 receives that and returns the sum with its own `own` (rank 1 returns `own`).
    fn total_detection(&mut self, own: DetectionStats) -> StepResult<DetectionStats> {
        let mut bytes = [0u8; DETECTION_BYTES];
        let own_words = [own.looks, own.look_ns, own.slow_looks, own.slow_look_ns];
        if self.rank != 0 {
            for (chunk, word) in bytes.chunks_exact_mut(8).zip(own_words) {
                chunk.copy_from_slice(&word.to_le_bytes());
            }
            self.send(&bytes)?;
            return Ok(own);
        }
        self.receive_exact(&mut bytes, DETECTION_BYTES)?;
        let mut sum = [0u64; 4];
        for ((total, chunk), word) in sum.iter_mut().zip(bytes.chunks_exact(8)).zip(own_words) {
            let mut peer = [0u8; 8];
            peer.copy_from_slice(chunk);
            *total = word.saturating_add(u64::from_le_bytes(peer));
        }
        let [looks, look_ns, slow_looks, slow_look_ns] = sum;
        Ok(DetectionStats {
            looks,
            look_ns,
            slow_looks,
            slow_look_ns,
        })
    }

    /// Puts the detection mode and both ranks' look cost `both` over `timed` into `record`.
    fn note_detection(&self, record: &mut Record, both: DetectionStats, timed: Duration) {
        let on = self.endpoint.detection().is_some();
        record.detect = Some(if on { "on" } else { "off" }.to_string());
        record.detect_looks = Some(both.looks);
        record.detect_ns = Some(both.look_ns);
        record.detect_slow_looks = Some(both.slow_looks);
        record.detect_slow_ns = Some(both.slow_look_ns);
        let timed_ns = timed.as_nanos() as f64;
        record.detect_share = (timed_ns > 0.0).then(|| both.look_ns as f64 / timed_ns);
    }

    /// Sends one window of `window` messages as `mode` says, then waits for the ack.
    /// [`WindowMode::PostAll`] (up to the eager limit): posts every buffer of `pool`
    /// (`window` of them) and waits until each is handed back. [`WindowMode::Repeat`]
    /// (above it): sends the one buffer of `pool` `window` times with blocking sends, as
    /// osu_bw does: a rendezvous send completes only once the receiver has pulled it, so
    /// posting them adds no overlap, and distinct buffers would only measure cache misses.
    /// [`WindowMode::KeepPosted`] (above it, where the transport sends posted sends in
    /// place): keeps every buffer of `pool` posted, waiting for the oldest request and
    /// posting its buffer again, until `window` messages are posted; then waits for all.
    fn send_window(
        &mut self,
        mode: WindowMode,
        pool: &mut Vec<Vec<u8>>,
        window: u64,
        requests: &mut VecDeque<SendRequest>,
        ack: &mut [u8; ACK_BYTES],
    ) -> StepResult<()> {
        match mode {
            WindowMode::Repeat => {
                if let Some(buffer) = pool.first() {
                    for _ in 0..window {
                        self.endpoint.send(self.connection, buffer)?;
                    }
                }
            }
            WindowMode::PostAll => {
                while let Some(buffer) = pool.pop() {
                    requests.push_back(self.endpoint.post_send(self.connection, buffer)?);
                }
                for request in requests.drain(..) {
                    pool.push(self.endpoint.wait_send(request)?);
                }
            }
            WindowMode::KeepPosted => {
                let mut posted = 0;
                while posted < window {
                    if let Some(buffer) = pool.pop() {
                        requests.push_back(self.endpoint.post_send(self.connection, buffer)?);
                        posted += 1;
                    } else if let Some(request) = requests.pop_front() {
                        pool.push(self.endpoint.wait_send(request)?);
                    } else {
                        // An empty pool with nothing posted: stream() made no buffer.
                        break;
                    }
                }
                while let Some(request) = requests.pop_front() {
                    pool.push(self.endpoint.wait_send(request)?);
                }
            }
        }
        self.receive_exact(ack, ACK_BYTES)
    }

    /// Sends `message`; the blocking call busy-polls for the configured spin time first.
    fn send(&mut self, message: &[u8]) -> StepResult<()> {
        Ok(self.endpoint.send(self.connection, message)?)
    }

    /// Receives one message and checks it is `length` bytes long.
    fn receive_exact(&mut self, buffer: &mut [u8], length: usize) -> StepResult<()> {
        match self.endpoint.recv(buffer)? {
            (received, _) if received == length => Ok(()),
            (received, source) => Err(StepError::UnexpectedLength {
                expected: length,
                received,
                source,
            }),
        }
    }
}

impl BenchLink for Link {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn send_message(&mut self, message: &[u8]) -> Result<(), String> {
        self.send(message).map_err(|error| error.to_string())
    }

    fn receive_message(&mut self, buffer: &mut [u8]) -> Result<(), String> {
        let length = buffer.len();
        self.receive_exact(buffer, length)
            .map_err(|error| error.to_string())
    }

    fn send_window_ack(&mut self) -> Result<(), String> {
        self.send(&[0u8; ACK_BYTES])
            .map_err(|error| error.to_string())
    }

    fn wait_window_ack(&mut self) -> Result<(), String> {
        let mut ack = [0u8; ACK_BYTES];
        self.receive_exact(&mut ack, ACK_BYTES)
            .map_err(|error| error.to_string())
    }

    fn prepare_exchange(&mut self, size: u64, count: u64) -> Result<(), String> {
        let length = size as usize;
        self.exchange_sends = (0..count).map(|index| vec![index as u8; length]).collect();
        self.exchange_receives = (0..count).map(|_| vec![0u8; length]).collect();
        self.send_requests = Vec::with_capacity(count as usize);
        self.receive_requests = Vec::with_capacity(count as usize);
        Ok(())
    }

    /// Posts every receive, then every send, then waits for the sends and the receives
    /// (osu_bibw's irecv/isend/waitall), handing the buffers back to the pools.
    fn exchange(&mut self, count: u64) -> Result<(), String> {
        let text = |error: Error| error.to_string();
        let expected = self.exchange_sends.first().map_or(0, Vec::len);
        for _ in 0..count {
            let Some(buffer) = self.exchange_receives.pop() else {
                return Err("bibw: more receives than prepared buffers".to_string());
            };
            let request = self.endpoint.post_recv(buffer).map_err(text)?;
            self.receive_requests.push(request);
        }
        for _ in 0..count {
            let Some(buffer) = self.exchange_sends.pop() else {
                return Err("bibw: more sends than prepared buffers".to_string());
            };
            let request = self
                .endpoint
                .post_send(self.connection, buffer)
                .map_err(text)?;
            self.send_requests.push(request);
        }
        while let Some(request) = self.send_requests.pop() {
            let buffer = self.endpoint.wait_send(request).map_err(text)?;
            self.exchange_sends.push(buffer);
        }
        while let Some(request) = self.receive_requests.pop() {
            let completion = self.endpoint.wait_recv(request).map_err(text)?;
            if completion.len != expected {
                return Err(format!(
                    "bibw: expected a {expected}-byte message, got {} bytes",
                    completion.len
                ));
            }
            self.exchange_receives.push(completion.buf);
        }
        Ok(())
    }
}

/// How rank 0 sends a window of bw or rate (`Link::send_window`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WindowMode {
    /// Up to the eager limit: one buffer per message, all posted, then waited for.
    PostAll,
    /// Above it, where the transport sends posted sends in place (udp, mem datagram
    /// connections, `Endpoint::posts_in_place`) and two buffers fit
    /// ([`plan::posted_in_place_buffers`]): those kept posted, each posted again when it
    /// comes back.
    KeepPosted,
    /// Above it otherwise (shm, tcp, larger messages): one buffer sent `window` times with
    /// blocking sends.
    Repeat,
}

/// From the first to the last timestamp of a timed run (zero with fewer than two).
fn timed_span(stamps: &[Instant]) -> Duration {
    match (stamps.first(), stamps.last()) {
        (Some(first), Some(last)) => last.saturating_duration_since(*first),
        _ => Duration::ZERO,
    }
}

/// Why one step of a test failed.
#[derive(Debug)]
enum StepError {
    /// The quiver API returned an error.
    Quiver(Error),
    /// A message of the wrong length arrived (the ranks disagree about the plan).
    UnexpectedLength {
        expected: usize,
        received: usize,
        source: Addr,
    },
}

type StepResult<T> = Result<T, StepError>;

impl From<Error> for StepError {
    fn from(error: Error) -> StepError {
        StepError::Quiver(error)
    }
}

impl std::fmt::Display for StepError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StepError::Quiver(error) => write!(formatter, "{error}"),
            StepError::UnexpectedLength {
                expected,
                received,
                source,
            } => write!(
                formatter,
                "expected a {expected}-byte message, got {received} bytes from {source}"
            ),
        }
    }
}
