//! What a `quiver bench busy` run measures: the algorithms, the points (algorithm, size,
//! iterations) every system runs, the ranks, the CPUs they share, the transports, and
//! whether Open MPI runs beside quiver.

use std::fmt;

/// The default sizes: 8 B to 4 MiB.
pub const DEFAULT_SIZES_BYTES: [u64; 8] =
    [8, 64, 512, 4 << 10, 32 << 10, 256 << 10, 1 << 20, 4 << 20];
/// Largest size (each rank holds a few buffers of it).
pub const MAX_SIZE_BYTES: u64 = 64 << 20;
/// Bytes a point moves per rank and direction, roughly, when `--iters` is not given: the
/// iterations are this divided by the size, within [`MIN_ITERS`, `MAX_ITERS`].
const ITERATION_BUDGET_BYTES: u64 = 128 << 20;
/// Fewest default iterations of a point.
const MIN_ITERS: u64 = 16;
/// Most default iterations of a point (small messages).
const MAX_ITERS: u64 = 1000;
/// Most ranks of a busy run.
pub const MAX_RANKS: u32 = 64;

/// One algorithm of the busy bench (`mpi_busy.c`'s header says what each does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum)]
pub enum Algorithm {
    /// Ranks 2k and 2k+1 ping-pong, every pair at once; rank 0's one-way time.
    Pingpong,
    /// Ring allreduce of size/8 u64 (reduce-scatter, then allgather); time per allreduce.
    Ring,
    /// Rank 0 serves, every other rank asks one request at a time; a client's round trip.
    Reqrep,
}

impl Algorithm {
    /// Every algorithm, in the order a run measures them.
    pub const ALL: [Algorithm; 3] = [Algorithm::Pingpong, Algorithm::Ring, Algorithm::Reqrep];

    /// The name on the command line, in `RESULT` lines and in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Pingpong => "pingpong",
            Algorithm::Ring => "ring",
            Algorithm::Reqrep => "reqrep",
        }
    }

    /// The algorithm named `name`.
    pub fn from_name(name: &str) -> Option<Algorithm> {
        Algorithm::ALL.into_iter().find(|a| a.as_str() == name)
    }
}

/// One measured point: an algorithm at a size, its timed iterations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Point {
    /// What runs.
    pub algorithm: Algorithm,
    /// Message size in bytes (the vector's size for `ring`), a multiple of 8.
    pub size: usize,
    /// Timed iterations (the warm-up is [`warmup_of`] more).
    pub iters: u64,
}

impl fmt::Display for Point {
    /// `ALGORITHM:SIZE:ITERS`, as `mpi_busy` and the bench's workers take it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}",
            self.algorithm.as_str(),
            self.size,
            self.iters
        )
    }
}

impl Point {
    /// Parses `ALGORITHM:SIZE:ITERS`.
    ///
    /// # Errors
    /// What is wrong, as a message.
    pub fn parse(text: &str) -> Result<Point, String> {
        let bad = || format!("{text:?}: expected ALGORITHM:SIZE:ITERS");
        let mut parts = text.split(':');
        let (Some(name), Some(size), Some(iters), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let algorithm = Algorithm::from_name(name).ok_or_else(bad)?;
        let size: u64 = size.parse().map_err(|_| bad())?;
        let iters: u64 = iters.parse().map_err(|_| bad())?;
        check_size(size)?;
        if iters == 0 {
            return Err(bad());
        }
        Ok(Point {
            algorithm,
            size: size as usize,
            iters,
        })
    }
}

/// Refuses a size the algorithms cannot run: below 8, not a multiple of 8 (the ring's
/// elements are u64), or above [`MAX_SIZE_BYTES`].
///
/// # Errors
/// The message to print.
pub fn check_size(size: u64) -> Result<(), String> {
    if size < 8 || !size.is_multiple_of(8) || size > MAX_SIZE_BYTES {
        return Err(format!(
            "size {size}: the busy bench's sizes are multiples of 8 from 8 B to 64 MiB"
        ));
    }
    Ok(())
}

/// Warm-up iterations (checked, not timed) before `iters` timed ones.
pub fn warmup_of(iters: u64) -> u64 {
    (iters / 10).max(2)
}

/// Timed iterations at `size` when `--iters` is not given.
pub fn default_iters(size: u64) -> u64 {
    (ITERATION_BUDGET_BYTES / size.max(1)).clamp(MIN_ITERS, MAX_ITERS)
}

/// Whether the run also measures Open MPI (`--mpi`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum MpiMode {
    /// When `mpirun` and `mpicc` are found; otherwise quiver alone, with a note.
    #[default]
    Auto,
    /// Always: a missing `mpirun` or `mpicc` fails the run.
    On,
    /// quiver alone.
    Off,
}

/// A validated busy run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusyPlan {
    /// Ranks of the job.
    pub ranks: u32,
    /// The CPUs every rank (quiver's and Open MPI's) may run on, together.
    pub cpus: Vec<usize>,
    /// quiver's transports measured, in order (`shm`, `tcp`, `udp`).
    pub transports: Vec<String>,
    /// The points every system runs, in order.
    pub points: Vec<Point>,
    /// Whether Open MPI runs too.
    pub mpi: MpiMode,
    /// `QUIVER_*` settings for quiver's ranks.
    pub settings: Vec<(String, String)>,
}

impl BusyPlan {
    /// The CPUs as taskset's list (`0,1`).
    pub fn cpu_list(&self) -> String {
        let names: Vec<String> = self.cpus.iter().map(usize::to_string).collect();
        names.join(",")
    }
}

/// The points of `algorithms` x `sizes`, with `iters` timed iterations each or the default
/// for the size.
pub fn points(algorithms: &[Algorithm], sizes: &[u64], iters: Option<u64>) -> Vec<Point> {
    let mut points = Vec::new();
    for &algorithm in algorithms {
        for &size in sizes {
            points.push(Point {
                algorithm,
                size: size as usize,
                iters: iters.unwrap_or_else(|| default_iters(size)),
            });
        }
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_print_and_parse_back() {
        for point in points(&Algorithm::ALL, &DEFAULT_SIZES_BYTES, None) {
            assert_eq!(Point::parse(&point.to_string()), Ok(point));
            assert!((MIN_ITERS..=MAX_ITERS).contains(&point.iters));
        }
        assert_eq!(default_iters(8), MAX_ITERS);
        assert_eq!(default_iters(4 << 20), 32);
        for bad in [
            "ring:8",
            "ring:12:5",
            "ring:0:5",
            "ring:8:0",
            "halo:8:5",
            "ring:8:5:1",
        ] {
            assert!(Point::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(warmup_of(5), 2);
        assert_eq!(warmup_of(1000), 100);
    }
}
