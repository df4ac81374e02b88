//! The rank side of `quiver bench` (`quiver bench --worker ...`, started by the bench
//! itself): runs the plan's everyday tests over quiver's connection ([`Link`]) or over a
//! raw-socket baseline ([`RawRank`]), and writes rank 0's records to its stdout, one JSON
//! line each, as they are measured. Errors go to stderr and make the rank exit non-zero.
//!
//! The lab's rank program (`quiver-bench bench --worker`) runs the same tests with the
//! functions here, and its own tests around them.

use std::io::{self, Write};
use std::time::Instant;

use serde::Serialize;

use super::fd_wait;
use super::generic::bibw_point;
use super::link::{Buffers, Link};
use super::plan::{Plan, TestName};
use super::point::Point;
use super::raw::{RawBaseline, RawRank};
use super::record::Record;
use super::rendezvous::open_context;

/// Runs the plan's rank tests in this rank.
///
/// # Errors
/// What failed, as text (the rank prints it and exits non-zero).
pub fn run(plan: &Plan) -> Result<(), String> {
    if plan.transport.is_raw() {
        // The settings tune quiver's transports, which a raw rank does not measure (its
        // shm bootstrap connection runs as configured).
        let mut rank = RawRank::open(plan)?;
        run_raw_tests(plan, rank.baseline())?;
        return rank.finish();
    }
    apply_settings(plan)?;
    let context = open_context()?;
    let mut link = Link::open(&context, plan.transport, "")?;
    let mut buffers = Buffers::new(plan.max_message_bytes() as usize, plan.max_pingpong_iters());
    run_quiver_tests(plan, &mut link, &mut buffers)?;
    finish(&mut link)
}

/// Runs every everyday rank test of the plan over quiver's connection; rank 0 prints the
/// records.
///
/// # Errors
/// The point that failed and why.
pub fn run_quiver_tests(plan: &Plan, link: &mut Link, buffers: &mut Buffers) -> Result<(), String> {
    let mut output = io::stdout().lock();
    run_quiver_tests_into(plan, link, buffers, &mut |record| {
        emit(&mut output, Some(record))
    })
}

/// Runs every everyday rank test of the plan over quiver's connection and hands rank 0's
/// records to `sink` as they are measured (rank 1 has none): a rank started by the bench
/// prints them for its parent, a rank started by a launcher reports them itself.
///
/// # Errors
/// The point that failed and why, or the sink's error.
pub fn run_quiver_tests_into(
    plan: &Plan,
    link: &mut Link,
    buffers: &mut Buffers,
    sink: &mut dyn FnMut(Record) -> Result<(), String>,
) -> Result<(), String> {
    let mut deliver = |record: Option<Record>| record.map_or(Ok(()), &mut *sink);
    for test in plan.rank_tests() {
        match test {
            TestName::Pingpong | TestName::Bw | TestName::Rate => {
                for point in Point::of_test(plan, test) {
                    let record =
                        point
                            .over_quiver(link, buffers, plan.window)
                            .map_err(|error| {
                                format!("{} over {}: {error}", point.name(), plan.transport)
                            })?;
                    if plan.tagged && test == TestName::Pingpong {
                        // The same point again with tagged messages, right after.
                        deliver(labelled(record, "untagged"))?;
                        link.set_tagged(true);
                        let tagged = point.over_quiver(link, buffers, plan.window);
                        link.set_tagged(false);
                        let tagged = tagged.map_err(|error| {
                            format!("tagged {} over {}: {error}", point.name(), plan.transport)
                        })?;
                        deliver(labelled(tagged, "tagged"))?;
                    } else {
                        deliver(record)?;
                    }
                }
                if test == TestName::Pingpong && plan.wait_fd {
                    let record = fd_wait::pingpong(link, buffers, plan).map_err(|error| {
                        format!("the sleeping pingpong over {}: {error}", plan.transport)
                    })?;
                    deliver(record)?;
                }
            }
            TestName::Bibw => {
                for &size in &plan.sizes {
                    deliver(bibw_over_quiver(link, plan, size)?)?;
                }
            }
            // `am` never reaches a plan: `args::main` runs it apart.
            TestName::Floor | TestName::Am => {}
        }
    }
    Ok(())
}

/// A pingpong record labelled with its variant (`--tagged` runs).
fn labelled(record: Option<Record>, variant: &str) -> Option<Record> {
    record.map(|mut record| {
        if let Record::Pingpong(point) = &mut record {
            point.labels.variant = Some(variant.to_string());
        }
        record
    })
}

/// One bibw point over quiver's connection, with what failure detection cost both ranks
/// during the whole point; rank 0 returns the record.
///
/// # Errors
/// The step that failed and why.
pub fn bibw_over_quiver(link: &mut Link, plan: &Plan, size: u64) -> Result<Option<Record>, String> {
    let before = link.endpoint_mut().detection_stats();
    let start = Instant::now();
    let mut record = bibw_point(link, size, plan.window, plan.bw_windows(size))
        .map_err(|error| format!("bibw at {size} bytes: {error}"))?;
    let point = start.elapsed();
    let own = link.endpoint_mut().detection_stats().since(&before);
    let both = link
        .total_detection(own)
        .map_err(|error| format!("bibw at {size} bytes: {error}"))?;
    if let Some(Record::Bibw(bibw)) = record.as_mut() {
        bibw.detection = Some(link.detection_cost(both, point));
    }
    Ok(record)
}

/// Runs every everyday rank test of the plan over a raw-socket baseline; rank 0 prints the
/// records.
///
/// # Errors
/// The point that failed and why.
pub fn run_raw_tests(plan: &Plan, baseline: &mut RawBaseline) -> Result<(), String> {
    let mut output = io::stdout().lock();
    for test in plan.rank_tests() {
        match test {
            TestName::Pingpong | TestName::Bw | TestName::Rate => {
                for point in Point::of_test(plan, test) {
                    let record = point
                        .over_raw(baseline, plan.window)
                        .map_err(|error| format!("{}: {error}", point.name()))?;
                    emit(&mut output, record)?;
                }
            }
            TestName::Bibw => {
                let mut generic = baseline.generic();
                for &size in &plan.sizes {
                    let record = bibw_point(&mut generic, size, plan.window, plan.bw_windows(size))
                        .map_err(|error| format!("bibw at {size} bytes: {error}"))?;
                    emit(&mut output, record)?;
                }
            }
            // `am` never reaches a plan: `args::main` runs it apart.
            TestName::Floor | TestName::Am => {}
        }
    }
    Ok(())
}

/// The last exchange over quiver's connection: rank 1 exits only after it has answered
/// everything.
///
/// # Errors
/// The exchange failed.
pub fn finish(link: &mut Link) -> Result<(), String> {
    let peer = 1 - link.rank();
    link.finish()
        .map_err(|error| format!("last exchange with rank {peer}: {error}"))
}

/// Applies the plan's `--set` settings to this process's environment, before the context
/// reads it. Called first thing in a rank, while it is still single-threaded.
///
/// # Errors
/// A setting that is not a `QUIVER_*` one.
pub fn apply_settings(plan: &Plan) -> Result<(), String> {
    for (name, value) in &plan.settings {
        if !name.starts_with("QUIVER_") {
            return Err(format!("--set {name}={value}: only QUIVER_* settings"));
        }
        std::env::set_var(name, value);
    }
    Ok(())
}

/// Rank 0 writes the record as one JSON line and flushes it (the parent reads it as it
/// comes); rank 1 has none.
///
/// # Errors
/// Encoding or writing failed.
pub fn emit(output: &mut impl Write, record: Option<impl Serialize>) -> Result<(), String> {
    let Some(record) = record else {
        return Ok(());
    };
    let line = serde_json::to_string(&record).map_err(|error| error.to_string())?;
    writeln!(output, "{line}")
        .and_then(|()| output.flush())
        .map_err(|error| format!("writing results to stdout: {error}"))
}
