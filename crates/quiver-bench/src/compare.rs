//! `quiver-bench compare`: every transport (shm, udp, tcp) and both raw-socket baselines
//! (raw-udp, raw-tcp), one job each running pingpong, bw, rate and loggp at 8 B, 1 KiB,
//! 64 KiB and 1 MiB, next to the floors measured once in the same run; one table, in the
//! spirit of the SC98 comparison of communication layers, every figure with its ratio to
//! its floor (the rows say which floor).

use std::io::Write;

use quiver_cli::bench::crossover::{significant, SuiteRun};
use quiver_cli::bench::floor::Floors;
use quiver_cli::bench::plan::{TestName, Transport};
use quiver_cli::bench::record;
use quiver_cli::bench::result::RankResult;

use crate::bench::plan::{LabPlan, LabTest};
use crate::bench::record::{LabPoint, LabRecord, LoggpRecord};
use crate::suite::{run_suite, SuiteOptions, SuiteShape};

/// Sizes of the compare table's columns: latency at the first two, bandwidth at the last two.
const COMPARE_SIZES_BYTES: [u64; 4] = [8, 1 << 10, 64 << 10, 1 << 20];
/// Transports and baselines compared, in the table's order.
const COMPARE_TRANSPORTS: [Transport; 5] = [
    Transport::Shm,
    Transport::Udp,
    Transport::Tcp,
    Transport::RawUdp,
    Transport::RawTcp,
];
/// Iteration effort of a default compare (percent of the bench's defaults): the whole
/// suite stays under five minutes on the 2-core machines.
const COMPARE_EFFORT_PERCENT: u64 = 15;

/// Command line of `quiver-bench compare`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CompareArgs {
    /// The suite's options.
    #[command(flatten)]
    options: SuiteOptions,
}

/// Runs `quiver-bench compare`.
///
/// # Errors
/// Bad options, or every transport failed.
pub(crate) fn run(args: &CompareArgs) -> Result<(), String> {
    let shape = SuiteShape {
        name: "compare",
        effort_percent: COMPARE_EFFORT_PERCENT,
        rounds: 1,
        floor_sizes: &COMPARE_SIZES_BYTES,
    };
    run_suite(&args.options, shape, compare)
}

/// One transport's results in the compare table (a failed job keeps its error).
struct CompareColumn {
    transport: Transport,
    records: Result<Vec<LabRecord>, String>,
}

/// Runs every job and prints the table to `table` (when given).
fn compare(run: &mut SuiteRun<'_, LabRecord>, table: Option<&mut dyn Write>) -> Result<(), String> {
    let mut columns = Vec::new();
    for transport in COMPARE_TRANSPORTS {
        let base = run.plan(
            transport,
            vec![TestName::Pingpong, TestName::Bw, TestName::Rate],
            &COMPARE_SIZES_BYTES,
            &[],
        );
        let plan = LabPlan {
            tests: vec![
                LabTest::Pingpong,
                LabTest::Bw,
                LabTest::Rate,
                LabTest::Loggp,
            ],
            base,
            interleave: None,
        };
        let records = run.job(&plan.rank_job());
        if let Err(error) = &records {
            eprintln!(
                "quiver-bench compare: {transport} failed; its column is left empty:\n{error}"
            );
        }
        columns.push(CompareColumn { transport, records });
    }
    run.report.clear_progress();
    if let Some(table) = table {
        print_compare(table, &columns, run.floors)
            .map_err(|error| format!("writing the table: {error}"))?;
    }
    if columns.iter().all(|column| column.records.is_err()) {
        return Err("every transport failed".to_string());
    }
    Ok(())
}

/// One row of the compare table: a label, how to read a column's figure, and its floor.
struct CompareRow {
    label: &'static str,
    figure: fn(&[LabRecord]) -> Option<f64>,
    /// The floor the figure is divided by (same unit).
    floor: fn(&Floors) -> Option<f64>,
    floor_name: &'static str,
}

/// The figure of the point of `test` at `size` (latency, bandwidth or rate).
fn point(records: &[LabRecord], test: LabTest, size: u64) -> Option<f64> {
    records
        .iter()
        .find(|record| {
            record.test() == test && record.size() == size && record.labels().variant.is_none()
        })
        .and_then(LabRecord::figure)
        .map(|(_, value)| value)
}

/// The loggp fit record: the model at the smallest size.
fn loggp_fit(records: &[LabRecord]) -> Option<&LoggpRecord> {
    records.iter().find_map(|record| match record {
        LabRecord::Lab(LabPoint::Loggp(point)) if point.is_fit() => Some(point),
        _ => None,
    })
}

fn syscall_us(floors: &Floors) -> Option<f64> {
    floors
        .extended
        .as_ref()
        .map(|extended| extended.syscall.median_us)
}

fn memcpy_mbps(floors: &Floors, size: u64) -> Option<f64> {
    floors.memcpy_at(size).map(|memcpy| memcpy.median_mbps)
}

fn latency_floor_us(floors: &Floors, size: u64) -> Option<f64> {
    Some(record::latency_floor_us(floors, size))
}

const COMPARE_ROWS: [CompareRow; 10] = [
    CompareRow {
        label: "8 B one-way latency (µs)",
        figure: |r| point(r, LabTest::Pingpong, 8),
        floor: |f| latency_floor_us(f, 8),
        floor_name: "hand-off",
    },
    CompareRow {
        label: "1 KiB one-way latency (µs)",
        figure: |r| point(r, LabTest::Pingpong, 1024),
        floor: |f| latency_floor_us(f, 1024),
        floor_name: "max(hand-off, memcpy)",
    },
    CompareRow {
        label: "64 KiB bandwidth (MB/s)",
        figure: |r| point(r, LabTest::Bw, 64 << 10),
        floor: |f| memcpy_mbps(f, 64 << 10),
        floor_name: "memcpy",
    },
    CompareRow {
        label: "1 MiB bandwidth (MB/s)",
        figure: |r| point(r, LabTest::Bw, 1 << 20),
        floor: |f| memcpy_mbps(f, 1 << 20),
        floor_name: "memcpy",
    },
    CompareRow {
        label: "8 B message rate (Mmsg/s)",
        figure: |r| point(r, LabTest::Rate, 8),
        floor: |f| Some(1.0 / f.handoff.one_way_median_us),
        floor_name: "1 / hand-off",
    },
    CompareRow {
        label: "o_s, 8 B (µs)",
        figure: |r| loggp_fit(r).map(|p| p.o_s_us),
        floor: syscall_us,
        floor_name: "syscall",
    },
    CompareRow {
        label: "o_r, 8 B (µs)",
        figure: |r| loggp_fit(r).map(|p| p.o_r_us),
        floor: syscall_us,
        floor_name: "syscall",
    },
    CompareRow {
        label: "L, 8 B (µs)",
        figure: |r| loggp_fit(r).map(|p| p.l_us),
        floor: |f| Some(f.handoff.one_way_median_us),
        floor_name: "hand-off",
    },
    CompareRow {
        label: "g, 8 B (µs)",
        figure: |r| loggp_fit(r).map(|p| p.g_us),
        floor: |f| Some(f.handoff.one_way_median_us),
        floor_name: "hand-off",
    },
    CompareRow {
        label: "G, 64 KiB..1 MiB (ns/B)",
        figure: |r| loggp_fit(r).and_then(|p| p.big_g_ns_per_byte),
        // ns per byte of one memcpy: 1000 / (bytes per µs).
        floor: |f| memcpy_mbps(f, 1 << 20).map(|mbps| 1e3 / mbps),
        floor_name: "memcpy 1 MiB",
    },
];

/// `value (ratio x)` for a compare cell.
fn compare_cell(value: Option<f64>, floor: Option<f64>) -> String {
    match (value, floor) {
        (Some(value), Some(floor)) if floor > 0.0 => {
            format!("{} ({}x)", significant(value), significant(value / floor))
        }
        (Some(value), _) => significant(value),
        (None, _) => "-".to_string(),
    }
}

fn print_compare(
    table: &mut dyn Write,
    columns: &[CompareColumn],
    floors: &Floors,
) -> std::io::Result<()> {
    writeln!(table)?;
    writeln!(
        table,
        "compare: every transport and baseline, two pinned busy-polling ranks on CPU {} and {}",
        floors.handoff.cpu_a, floors.handoff.cpu_b
    )?;
    writeln!(
        table,
        "  each cell: figure (figure / floor); floors measured in this run (right). Latencies and"
    )?;
    writeln!(
        table,
        "  o_s/o_r/L/g: lower is better, x >= 1 expected (o_s/o_r below a syscall = no kernel entry);"
    )?;
    writeln!(
        table,
        "  bandwidth and rate: higher is better, x <= 1 expected. G = per-byte gap fitted over 64 KiB..1 MiB."
    )?;
    let label_width = 27;
    let cell_width = 19;
    write!(table, "{:<label_width$}", "")?;
    for column in columns {
        write!(table, "{:>cell_width$}", column.transport.as_str())?;
    }
    writeln!(table, "  {:>9} floor", "")?;
    for row in &COMPARE_ROWS {
        write!(table, "{:<label_width$}", row.label)?;
        let floor = (row.floor)(floors);
        for column in columns {
            let cell = match &column.records {
                Ok(records) => compare_cell((row.figure)(records), floor),
                Err(_) => "failed".to_string(),
            };
            write!(table, "{cell:>cell_width$}")?;
        }
        writeln!(
            table,
            "  {:>9} {}",
            floor.map_or("-".to_string(), significant),
            row.floor_name
        )?;
    }
    if let Some(extended) = &floors.extended {
        writeln!(
            table,
            "  other floors: system call {} µs, cross-core wake-up {} µs (eventfd+poll) / {} µs (futex), \
             process_vm_readv {} MB/s at 1 MiB",
            significant(extended.syscall.median_us),
            significant(extended.wakeup_eventfd.median_us),
            significant(extended.wakeup_futex.median_us),
            extended
                .cma
                .iter()
                .find(|cma| cma.size_bytes == 1 << 20)
                .map_or("-".to_string(), |cma| significant(cma.median_mbps))
        )?;
    }
    table.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_cells_show_ratios() {
        assert_eq!(compare_cell(Some(0.135), Some(0.05)), "0.135 (2.70x)");
        assert_eq!(compare_cell(Some(20493.0), Some(38900.0)), "20493 (0.527x)");
        assert_eq!(compare_cell(None, Some(1.0)), "-");
        assert_eq!(compare_cell(Some(3.0), None), "3.00");
    }
}
