//! The rank side of `quiver-bench bench` (`quiver-bench bench --worker ...`, started by the
//! lab itself): the bench's tests with the bench's code (`quiver_cli::bench::worker`), the
//! lab's tests (loggp, pool), and the paired runs that split every pingpong, bw and rate
//! point into blocks.
//!
//! `--detect interleave`: every pingpong, bw and rate point runs as blocks, each a whole
//! run of its own (warm-up, timed iterations, detection cost) with failure detection
//! switched on or off in both ranks by `Endpoint::set_detection` before it; the block's
//! record carries `detect` and its pair as `round` ([`LabPlan::interleave_blocks`]).
//!
//! `--baseline interleave` (udp, tcp): the same blocks, one of each pair over the quiver
//! connection and one over the matching raw-socket baseline (raw-udp, raw-tcp: the bench's
//! `RawBaseline`, the code `--transport raw-*` runs). Its sockets are set up right after
//! the first synchronisation, their ports traded over the quiver connection (the context
//! is built for the network transport alone, and the connection is idle then). Blocks
//! follow each other with no extra synchronisation: each ends on both ranks within a
//! message of each other, and the two channels never carry each other's messages. The
//! raw block's record carries `transport` = "raw-udp" or "raw-tcp" and the same `round`.
//! `--baseline tcp` does the same with quiver's tcp over a second context as side B.

use std::io::{self, Write};

use quiver::Context;
use quiver_cli::bench::link::{Buffers, Link};
use quiver_cli::bench::plan::Transport;
use quiver_cli::bench::point::Point;
use quiver_cli::bench::raw::{RawBaseline, RawRank};
use quiver_cli::bench::record::Record;
use quiver_cli::bench::rendezvous::open_context;
use quiver_cli::bench::worker::{apply_settings, bibw_over_quiver, emit, finish, run_raw_tests};

use super::baseline_link::{open_tcp_link, BaselineLink, Block};
use super::loggp;
use super::plan::{Interleaved, LabPlan, LabTest};
use super::pool::pool_pingpong;
use super::record::{LabPoint, LabRecord};

/// Paired runs against a baseline: the udp idle timeout of the ranks (unless set). Nobody
/// polls the quiver connection during a baseline block, and without it the first look
/// after a block longer than the detection time would find the peer silent for too long.
/// Only the keepalive of an idle connection depends on it (a quarter of it), and a
/// connection that carries a test is never idle, so the quiver blocks measure what a run
/// alone does.
const BASELINE_IDLE_TIMEOUT_MS: u64 = 3_600_000;

/// Runs the plan's rank tests in this rank.
///
/// # Errors
/// What failed, as text (the rank prints it and exits non-zero).
pub(crate) fn run(plan: &LabPlan) -> Result<(), String> {
    if plan.base.transport.is_raw() {
        // The settings tune quiver's transports, which a raw rank does not measure (its
        // shm bootstrap connection runs as configured).
        return run_raw(plan);
    }
    apply_settings(&plan.base)?;
    if plan.baseline_transport().is_some()
        && std::env::var_os("QUIVER_NET_IDLE_TIMEOUT_MS").is_none()
    {
        // Still single-threaded: see apply_settings.
        std::env::set_var(
            "QUIVER_NET_IDLE_TIMEOUT_MS",
            BASELINE_IDLE_TIMEOUT_MS.to_string(),
        );
    }
    let context = open_context()?;
    let mut link = Link::open(&context, plan.base.transport, "")?;
    let mut buffers = Buffers::new(
        plan.base.max_message_bytes() as usize,
        plan.base.max_pingpong_iters(),
    );
    let blocks = blocks(plan, &context)?;
    let mut baseline = open_baseline(plan, &context, &mut link)?;
    let mut output = io::stdout().lock();
    for test in plan.rank_tests() {
        match test {
            LabTest::Pingpong | LabTest::Bw | LabTest::Rate => {
                let Some(everyday) = test.everyday() else {
                    continue;
                };
                for point in Point::of_test(&plan.base, everyday) {
                    let mut sides = Sides {
                        link: &mut link,
                        baseline: baseline.as_mut(),
                        buffers: &mut buffers,
                    };
                    run_point(point, &blocks, &mut sides, plan, &mut output)?;
                }
            }
            LabTest::Bibw => {
                for &size in &plan.base.sizes {
                    let record = bibw_over_quiver(&mut link, &plan.base, size)?;
                    emit(&mut output, record)?;
                }
            }
            LabTest::Loggp => {
                let records = loggp::run(&mut link, plan, &buffers.send, &mut buffers.receive)?;
                for record in records {
                    emit(&mut output, Some(LabPoint::Loggp(record)))?;
                }
            }
            LabTest::Pool => {
                for &size in &plan.base.sizes {
                    let iters = plan.base.pingpong_iters(size);
                    for fresh in [false, true] {
                        let point = pool_pingpong(&mut link, &mut buffers, size, iters, fresh)
                            .map_err(|error| format!("pool at {size} bytes: {error}"))?;
                        emit(&mut output, point.map(LabPoint::Pool))?;
                    }
                }
            }
            LabTest::Floor => {}
        }
    }
    if let Some(BaselineLink::Quiver(tcp)) = baseline.as_mut() {
        let peer = 1 - tcp.link.rank();
        tcp.link
            .finish()
            .map_err(|error| format!("last exchange over tcp with rank {peer}: {error}"))?;
    }
    finish(&mut link)
}

/// `--transport raw-*`: the bench's tests over the baseline, then loggp over it.
fn run_raw(plan: &LabPlan) -> Result<(), String> {
    let mut rank = RawRank::open(&plan.base)?;
    run_raw_tests(&plan.base, rank.baseline())?;
    if plan.has(LabTest::Loggp) {
        let (mut generic, send, receive) = rank.baseline().generic_with_buffers();
        let records = loggp::run(&mut generic, plan, send, receive)?;
        let mut output = io::stdout().lock();
        for record in records {
            emit(&mut output, Some(LabPoint::Loggp(record)))?;
        }
    }
    rank.finish()
}

/// The blocks of every point, with their pair: one block as configured, or the
/// interleaved pairs.
fn blocks(plan: &LabPlan, context: &Context) -> Result<Vec<(Option<u32>, Block)>, String> {
    let detect_on = context.config().detect;
    match plan.interleave.map(|interleave| interleave.sides) {
        None => Ok(vec![(None, Block::Quiver(detect_on))]),
        Some(Interleaved::Detection) => {
            let Some(on) = detect_on else {
                return Err(
                    "--detect interleave needs failure detection on (QUIVER_DETECT_MS is 0)"
                        .to_string(),
                );
            };
            Ok(plan
                .interleave_blocks()
                .into_iter()
                .map(|(pair, on_now)| (Some(pair), Block::Quiver(on_now.then_some(on))))
                .collect())
        }
        Some(Interleaved::Baseline | Interleaved::Tcp) => Ok(plan
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
            .collect()),
    }
}

/// `--baseline interleave`: the raw link, set up over the quiver connection; `--baseline
/// tcp`: a second quiver link over a tcp-only context, set up the same way.
fn open_baseline(
    plan: &LabPlan,
    context: &Context,
    link: &mut Link,
) -> Result<Option<BaselineLink>, String> {
    match plan.baseline_transport() {
        Some(Transport::Tcp) => Ok(Some(BaselineLink::Quiver(Box::new(
            open_tcp_link(context, link)
                .map_err(|error| format!("opening the tcp baseline: {error}"))?,
        )))),
        Some(transport) => {
            let rank = link.rank();
            let raw = RawBaseline::open(transport, rank, link, &plan.base)
                .map_err(|error| format!("opening the {transport} baseline: {error}"))?;
            Ok(Some(BaselineLink::Raw(raw)))
        }
        None => Ok(None),
    }
}

/// What the blocks of a point run over.
struct Sides<'a> {
    link: &'a mut Link,
    baseline: Option<&'a mut BaselineLink>,
    buffers: &'a mut Buffers,
}

/// Runs every block of one point and writes rank 0's record of each.
fn run_point(
    point: Point,
    blocks: &[(Option<u32>, Block)],
    sides: &mut Sides<'_>,
    plan: &LabPlan,
    output: &mut impl Write,
) -> Result<(), String> {
    let window = plan.base.window;
    for &(pair, block) in blocks {
        let (transport, record) = match (block, sides.baseline.as_deref_mut()) {
            (Block::Quiver(detect), baseline) => (plan.base.transport, {
                sides
                    .link
                    .set_detection(detect)
                    .map_err(|error| format!("switching detection: {error}"))?;
                let record = point.over_quiver(sides.link, sides.buffers, window);
                if record.is_ok() && baseline.is_some() {
                    settle(sides.link, point)?;
                }
                record
            }),
            (Block::Baseline, Some(BaselineLink::Raw(raw))) => {
                (raw_transport(plan), point.over_raw(raw, window))
            }
            (Block::Baseline, Some(BaselineLink::Quiver(tcp))) => (Transport::Tcp, {
                let record = point.over_quiver(&mut tcp.link, sides.buffers, window);
                if record.is_ok() {
                    settle(&mut tcp.link, point)?;
                }
                record
            }),
            (Block::Baseline, None) => return Err("no baseline is open".to_string()),
        };
        let record =
            record.map_err(|error| format!("{} over {transport}: {error}", point.name()))?;
        emit(output, in_pair(record, pair))?;
    }
    Ok(())
}

/// The raw baseline's transport (raw-udp or raw-tcp).
fn raw_transport(plan: &LabPlan) -> Transport {
    plan.baseline_transport().unwrap_or(plan.base.transport)
}

/// Ends a quiver block of `--baseline interleave` or `tcp` with one exchange over its
/// link (outside the timed run): a rank that goes on to the other side's block stops
/// calling this endpoint, and over udp the last messages it sent may still wait in the
/// protocol's send window for acknowledgements that only this endpoint's calls handle.
/// Once rank 0's byte has come back, everything each rank sent has arrived, and the
/// answer itself leaves at once (the byte that asked for it acknowledged all before it).
fn settle(link: &mut Link, point: Point) -> Result<(), String> {
    link.synchronise()
        .map_err(|error| format!("{}: settling the link: {error}", point.name()))
}

/// Marks a block's record with its interleave pair (`round`); `None`: not interleaved.
fn in_pair(record: Option<Record>, pair: Option<u32>) -> Option<LabRecord> {
    record.map(|mut record| {
        let round = &mut record.labels_mut().round;
        *round = pair.or(*round);
        LabRecord::Bench(record)
    })
}
