//! A progress bar with an estimate of the time left, on stderr, for `quiver bench` runs.
//!
//! Shown only when stderr is a terminal or `--progress` asks for it, and only once a run
//! has taken longer than `SHOW_AFTER`. It runs in the parent process, which only waits
//! for the ranks' results: it is redrawn when a measured point arrives, never inside a
//! timed loop. The estimate assumes the remaining points take as long, on average, as the
//! finished ones.

use std::io::Write;
use std::time::{Duration, Instant};

/// A run shorter than this shows no bar.
const SHOW_AFTER: Duration = Duration::from_secs(3);
/// Characters of the bar itself.
const BAR_WIDTH: usize = 30;

/// Progress over a known number of measured points.
pub struct Progress {
    enabled: bool,
    start: Instant,
    total_points: usize,
    done_points: usize,
    /// Whether a line is on screen (to be cleared at the end).
    drawn: bool,
}

impl Progress {
    /// A bar for `total_points` points, drawn when `forced` or stderr is a terminal.
    pub fn new(total_points: usize, forced: bool) -> Progress {
        Progress {
            enabled: forced || stderr_is_terminal(),
            start: Instant::now(),
            total_points,
            done_points: 0,
            drawn: false,
        }
    }

    /// Adds points the run will measure (a suite learns of its jobs as it goes).
    pub fn add_points(&mut self, points: usize) {
        self.total_points += points;
    }

    /// One more point is measured: redraw.
    pub fn point_done(&mut self, what: &str) {
        self.done_points = (self.done_points + 1).min(self.total_points.max(1));
        let elapsed = self.start.elapsed();
        if !self.enabled || elapsed < SHOW_AFTER {
            return;
        }
        let line = render(self.done_points, self.total_points, elapsed, what);
        let mut stderr = std::io::stderr().lock();
        let _ = write!(stderr, "\r{line}\x1b[K");
        let _ = stderr.flush();
        self.drawn = true;
    }

    /// Removes the bar (before the final output, and at the end of the run).
    pub fn clear(&mut self) {
        if self.drawn {
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "\r\x1b[K");
            let _ = stderr.flush();
            self.drawn = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}

/// `[#########.....]  12/40 points  1:05 elapsed, ~2:31 left  (udp pingpong 64 KiB)`.
pub fn render(done: usize, total: usize, elapsed: Duration, what: &str) -> String {
    let total = total.max(1);
    let done = done.min(total);
    let filled = BAR_WIDTH * done / total;
    let left = if done == 0 {
        "?".to_string()
    } else {
        let per_point = elapsed.as_secs_f64() / done as f64;
        format_duration(per_point * (total - done) as f64)
    };
    format!(
        "[{}{}] {done:>3}/{total} points  {} elapsed, ~{left} left  ({what})",
        "#".repeat(filled),
        ".".repeat(BAR_WIDTH - filled),
        format_duration(elapsed.as_secs_f64()),
    )
}

/// Minutes and seconds: `0:07`, `12:30`.
fn format_duration(seconds: f64) -> String {
    let whole = seconds.max(0.0).round() as u64;
    format!("{}:{:02}", whole / 60, whole % 60)
}

fn stderr_is_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_bar_counts_and_estimate() {
        let line = render(10, 40, Duration::from_secs(20), "shm bw 1 MiB");
        assert!(line.starts_with("[#######........"), "{line}");
        assert!(line.contains(" 10/40 points"), "{line}");
        assert!(line.contains("0:20 elapsed"), "{line}");
        // 2 s per point, 30 points left.
        assert!(line.contains("~1:00 left"), "{line}");
        assert!(line.ends_with("(shm bw 1 MiB)"), "{line}");
        assert!(render(0, 0, Duration::ZERO, "x").contains("~? left"));
        assert!(render(5, 5, Duration::from_secs(1), "x").contains("~0:00 left"));
    }
}
