//! The results of `quiver bench busy`: a measured point as its rank 0 printed it, the JSON
//! record of each, and the table of quiver's time against Open MPI's.

use std::io::{self, Write};

use serde::{Deserialize, Serialize};

use super::plan::{Algorithm, BusyPlan};
use crate::provenance::Provenance;

/// Who ran a point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum System {
    /// quiver, through its public API (`worker.rs`).
    Quiver,
    /// Open MPI, `mpi_busy.c` under `mpirun`.
    Openmpi,
}

/// One point as a rank 0 reported it.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Message (ring: vector) size in bytes.
    pub size: u64,
    /// Timed iterations.
    pub iters: u64,
    /// Mean time per iteration in microseconds (pingpong: one way).
    pub time_us: f64,
}

impl Measured {
    /// Parses a `RESULT algorithm=A size=S iters=I time_us=T` line (anything before
    /// `RESULT`, such as a launcher's rank prefix, is ignored); `None` for any other line.
    pub fn parse(line: &str) -> Option<Measured> {
        let (_, fields) = line.split_once("RESULT ")?;
        let mut algorithm = None;
        let (mut size, mut iters, mut time_us) = (None, None, None);
        for field in fields.split_whitespace() {
            match field.split_once('=')? {
                ("algorithm", v) => algorithm = Algorithm::from_name(v),
                ("size", v) => size = v.parse().ok(),
                ("iters", v) => iters = v.parse().ok(),
                ("time_us", v) => time_us = v.parse::<f64>().ok().filter(|t| t.is_finite()),
                _ => {}
            }
        }
        Some(Measured {
            algorithm: algorithm?,
            size: size?,
            iters: iters?,
            time_us: time_us?,
        })
    }
}

/// The JSON record of one point of one system (one line of `--json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BusyRecord {
    /// Always `busy`.
    pub test: String,
    /// quiver or Open MPI.
    pub system: System,
    /// quiver's transport (`shm`, `tcp`, `udp`) or Open MPI's BTL (`vader`, `tcp`).
    pub transport: String,
    /// The algorithm's name.
    pub algorithm: String,
    /// Message (ring: vector) size in bytes.
    pub size: u64,
    /// Timed iterations.
    pub iters: u64,
    /// Mean time per iteration in microseconds (pingpong: one way; reqrep: a client's
    /// round trip; ring: one allreduce).
    pub time_us: f64,
    /// Ranks of the job.
    pub ranks: u32,
    /// The CPUs the ranks shared.
    pub cpus: Vec<usize>,
    /// quiver's records: this time over Open MPI's for the same point (over vader for
    /// shm, over tcp for tcp and udp), when Open MPI ran.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ratio_to_openmpi: Option<f64>,
    /// Where the record comes from.
    #[serde(flatten)]
    pub provenance: Provenance,
}

/// Every point of one system over one transport.
#[derive(Debug, Clone)]
pub struct Series {
    /// Who ran it.
    pub system: System,
    /// quiver's transport or Open MPI's BTL.
    pub transport: String,
    /// Its points, in the plan's order.
    pub points: Vec<Measured>,
}

/// Open MPI's BTL whose times quiver's `transport` is compared with.
pub fn openmpi_counterpart(transport: &str) -> &'static str {
    if transport == "shm" {
        "vader"
    } else {
        "tcp"
    }
}

/// The records of a run: every point of every series, quiver's with its ratio.
pub fn records(plan: &BusyPlan, series: &[Series]) -> Vec<BusyRecord> {
    let provenance = Provenance::current();
    let mut out = Vec::new();
    for s in series {
        for m in &s.points {
            let ratio_to_openmpi = match s.system {
                System::Quiver => openmpi_time(series, openmpi_counterpart(&s.transport), m)
                    .map(|t| m.time_us / t),
                System::Openmpi => None,
            };
            out.push(BusyRecord {
                test: "busy".to_string(),
                system: s.system,
                transport: s.transport.clone(),
                algorithm: m.algorithm.as_str().to_string(),
                size: m.size,
                iters: m.iters,
                time_us: m.time_us,
                ranks: plan.ranks,
                cpus: plan.cpus.clone(),
                ratio_to_openmpi,
                provenance: provenance.clone(),
            });
        }
    }
    out
}

/// Open MPI's time over `btl` for the point `m`, when it was measured.
fn openmpi_time(series: &[Series], btl: &str, m: &Measured) -> Option<f64> {
    series
        .iter()
        .filter(|s| s.system == System::Openmpi && s.transport == btl)
        .flat_map(|s| s.points.iter())
        .find(|o| o.algorithm == m.algorithm && o.size == m.size)
        .map(|o| o.time_us)
        .filter(|&t| t > 0.0)
}

/// Writes the table: one row per algorithm and size; per quiver transport its time, Open
/// MPI's and the ratio (quiver / Open MPI; the target is at most 1.5).
///
/// # Errors
/// Writing failed.
pub fn write_table(out: &mut dyn Write, plan: &BusyPlan, records: &[BusyRecord]) -> io::Result<()> {
    writeln!(
        out,
        "# quiver bench busy: {} ranks on CPUs {} ({} CPUs); mean time per operation in us \
         (pingpong: one way; ring: one allreduce; reqrep: a client's round trip)",
        plan.ranks,
        plan.cpu_list(),
        plan.cpus.len()
    )?;
    writeln!(
        out,
        "# ratio = quiver / Open MPI (shm against vader, tcp and udp against tcp)"
    )?;
    let mut header = format!("{:<9} {:>8}", "algorithm", "size");
    for t in &plan.transports {
        let btl = openmpi_counterpart(t);
        header.push_str(&format!(
            " {:>11} {:>11} {:>6}",
            format!("quiver {t}"),
            format!("ompi {btl}"),
            "ratio"
        ));
    }
    writeln!(out, "{header}")?;
    for point in &plan.points {
        let size = point.size as u64;
        let mut row = format!(
            "{:<9} {:>8}",
            point.algorithm.as_str(),
            crate::bench::sizes::format_size(size)
        );
        for t in &plan.transports {
            let find = |system: System, transport: &str| {
                records.iter().find(|r| {
                    r.system == system
                        && r.transport == transport
                        && r.algorithm == point.algorithm.as_str()
                        && r.size == size
                })
            };
            let mine = find(System::Quiver, t);
            let theirs = find(System::Openmpi, openmpi_counterpart(t));
            let time =
                |r: Option<&BusyRecord>| r.map_or("-".to_string(), |r| format!("{:.2}", r.time_us));
            let ratio = mine
                .and_then(|r| r.ratio_to_openmpi)
                .map_or("-".to_string(), |x| format!("{x:.2}"));
            row.push_str(&format!(
                " {:>11} {:>11} {:>6}",
                time(mine),
                time(theirs),
                ratio
            ));
        }
        writeln!(out, "{row}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::busy::plan::{points, MpiMode};

    #[test]
    fn result_lines_parse() {
        let m = Measured::parse("[0] RESULT algorithm=ring size=64 iters=10 time_us=12.5000")
            .expect("a result");
        assert_eq!(
            m,
            Measured {
                algorithm: Algorithm::Ring,
                size: 64,
                iters: 10,
                time_us: 12.5
            }
        );
        assert_eq!(Measured::parse("rank 0: datagram retransmits 0"), None);
        assert_eq!(
            Measured::parse("RESULT algorithm=halo size=8 iters=1 time_us=1"),
            None
        );
        assert_eq!(
            Measured::parse("RESULT algorithm=ring size=8 iters=1"),
            None
        );
    }

    #[test]
    fn quiver_records_carry_the_ratio_to_their_counterpart() {
        let plan = BusyPlan {
            ranks: 4,
            cpus: vec![0, 1],
            transports: vec!["shm".into(), "udp".into()],
            points: points(&[Algorithm::Ring], &[8], Some(5)),
            mpi: MpiMode::On,
            settings: Vec::new(),
        };
        let at = |time_us| {
            vec![Measured {
                algorithm: Algorithm::Ring,
                size: 8,
                iters: 5,
                time_us,
            }]
        };
        let series = [
            Series {
                system: System::Quiver,
                transport: "shm".into(),
                points: at(3.0),
            },
            Series {
                system: System::Quiver,
                transport: "udp".into(),
                points: at(30.0),
            },
            Series {
                system: System::Openmpi,
                transport: "vader".into(),
                points: at(2.0),
            },
            Series {
                system: System::Openmpi,
                transport: "tcp".into(),
                points: at(20.0),
            },
        ];
        let records = records(&plan, &series);
        assert_eq!(records.len(), 4);
        assert_eq!(records[0].ratio_to_openmpi, Some(1.5));
        assert_eq!(records[1].ratio_to_openmpi, Some(1.5));
        assert_eq!(records[2].ratio_to_openmpi, None);
        let mut table = Vec::new();
        write_table(&mut table, &plan, &records).expect("writes");
        let table = String::from_utf8(table).expect("utf-8");
        assert!(table.contains("quiver shm"), "{table}");
        assert!(table.contains(" 1.50"), "{table}");
    }
}
