//! The parent side of a bench run, shared by `quiver bench`, `quiver tune` and the lab:
//! the two CPUs, where the report goes, the floors before the ranks and the hand-off again
//! after them, and the end of the run (the plot).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use crate::launch;

use super::floor::{self, Floors};
use super::plot;
use super::report::Report;
use super::result::RankResult;

/// Measures the hand-off and memcpy at `memcpy_sizes` (and the extended floors when
/// `extended`), and reports them.
///
/// # Errors
/// Measuring or writing failed.
pub fn measure_floors<R: RankResult>(
    cpus: [usize; 2],
    memcpy_sizes: &[u64],
    extended: bool,
    report: &mut Report<R>,
) -> Result<Floors, String> {
    let mut floors = floor::measure(cpus[0], cpus[1], memcpy_sizes)
        .map_err(|error| format!("measuring the floors: {error}"))?;
    if extended {
        floors.extended = Some(
            floor::measure_extended(cpus[0], cpus[1], memcpy_sizes)
                .map_err(|error| format!("measuring the extended floors: {error}"))?,
        );
    }
    report
        .floors(&floors)
        .map_err(|error| format!("writing the floors: {error}"))?;
    Ok(floors)
}

/// The hand-off depends on where the host runs the vCPUs, which can change during a run:
/// measures it again after the ranks and reports it (with a warning when it moved).
///
/// # Errors
/// Measuring or writing failed.
pub fn handoff_again<R: RankResult>(
    cpus: [usize; 2],
    floors: &Floors,
    report: &mut Report<R>,
) -> Result<(), String> {
    let after = floor::measure_handoff(cpus[0], cpus[1])
        .map_err(|error| format!("measuring the hand-off again: {error}"))?;
    report
        .handoff_after(&floors.handoff, &after)
        .map_err(|error| format!("writing the floors: {error}"))
}

/// Ends a run: clears the progress bar and draws the plot when asked for.
///
/// # Errors
/// Drawing the plot failed.
pub fn finish<R: RankResult>(mut report: Report<R>, plot: Option<&Path>) -> Result<(), String> {
    report.clear_progress();
    if let Some(path) = plot {
        plot::draw(path, report.collected())?;
        eprintln!("quiver bench: plot written to {}", path.display());
    }
    Ok(())
}

/// The two CPUs to pin the ranks (and the hand-off threads) to: `requested` ("A,B") or
/// the first two this process may use.
///
/// # Errors
/// A malformed or disallowed pair, or fewer than two CPUs allowed.
pub fn choose_cpus(requested: Option<&str>) -> Result<[usize; 2], String> {
    let allowed =
        launch::allowed_cpus().map_err(|error| format!("cannot read the CPU affinity: {error}"))?;
    let cpus = match requested {
        Some(text) => parse_cpu_pair(text)?,
        None => match allowed.as_slice() {
            [first, second, ..] => [*first, *second],
            _ => {
                return Err(format!(
                    "the bench needs two CPUs to pin its two busy-polling ranks to; this process may use only {allowed:?}"
                ))
            }
        },
    };
    if let Some(cpu) = cpus.iter().find(|cpu| !allowed.contains(cpu)) {
        return Err(format!(
            "--cpus: CPU {cpu} is not one this process may use ({allowed:?})"
        ));
    }
    Ok(cpus)
}

fn parse_cpu_pair(text: &str) -> Result<[usize; 2], String> {
    let parsed: Result<Vec<usize>, _> = text.split(',').map(|cpu| cpu.trim().parse()).collect();
    match parsed.as_deref() {
        Ok([first, second]) if first != second => Ok([*first, *second]),
        Ok([_, _]) => Err("--cpus: the two CPUs must differ".to_string()),
        _ => Err(format!(
            "--cpus: expected two CPU numbers such as 0,1, got '{text}'"
        )),
    }
}

/// Table to stdout unless `--json -`; JSON lines to stdout (`-`) or a file.
///
/// # Errors
/// The JSON file could not be created.
pub fn open_report<R: RankResult>(json: Option<&str>) -> Result<Report<R>, String> {
    let stdout = || -> Box<dyn Write> { Box::new(io::stdout()) };
    match json {
        None => Ok(Report::new(Some(stdout()), None)),
        Some("-") => Ok(Report::new(None, Some(stdout()))),
        Some(path) => {
            let file = File::create(path)
                .map_err(|error| format!("--json: cannot create '{path}': {error}"))?;
            Ok(Report::new(
                Some(stdout()),
                Some(Box::new(BufWriter::new(file))),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_pairs() {
        assert_eq!(parse_cpu_pair("0,1"), Ok([0, 1]));
        assert_eq!(parse_cpu_pair(" 3 , 2 "), Ok([3, 2]));
        assert!(parse_cpu_pair("1,1").is_err());
        assert!(parse_cpu_pair("1").is_err());
        assert!(parse_cpu_pair("0,1,2").is_err());
        assert!(parse_cpu_pair("a,b").is_err());
    }
}
