//! UCX's side of `quiver bench am`: `ucx_perftest -t am_lat` / `-t am_bw` (UCT active
//! messages) between a server and a client process on the bench's two CPUs.

use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use super::super::in_process_job::free_port;

/// The figures `ucx_perftest` printed (its last line with `-f`).
#[derive(Debug, Clone, Copy)]
pub(super) struct UcxFields {
    pub(super) latency_us: f64,
    pub(super) rate_per_s: f64,
}

/// Runs `ucx_perftest -t test` with messages of `size` bytes between a server on `cpus[1]` and a client on `cpus[0]`;
/// `None` (said on stderr) when it is not installed or fails.
pub(super) fn ucx(
    tl: &[&str],
    cpus: [usize; 2],
    test: &str,
    size: usize,
    iters: u64,
) -> Option<UcxFields> {
    let port = free_port().ok()?.to_string();
    let server = Command::new("ucx_perftest")
        .args(["-c", &cpus[1].to_string(), "-p", &port])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut server) = server else {
        eprintln!("quiver bench am: ucx_perftest not found: no UCX baseline");
        return None;
    };
    let mut fields = None;
    for _ in 0..50 {
        thread::sleep(Duration::from_millis(100));
        if matches!(server.try_wait(), Ok(Some(_))) {
            break;
        }
        let client = Command::new("ucx_perftest")
            .args([
                "127.0.0.1",
                "-c",
                &cpus[0].to_string(),
                "-p",
                &port,
                "-t",
                test,
            ])
            .args(tl)
            .args(["-s", &size.to_string(), "-n", &iters.to_string(), "-f"])
            .output();
        let Ok(out) = client else { break };
        let text = String::from_utf8_lossy(&out.stdout);
        if out.status.success() {
            fields = parse_ucx(&text);
            break;
        }
        let err = String::from_utf8_lossy(&out.stderr);
        if !(err.contains("onnection refused") || text.contains("onnection refused")) {
            eprintln!(
                "quiver bench am: ucx_perftest -t {test} failed: {}",
                err.trim()
            );
            break;
        }
    }
    let _ = server.kill();
    let _ = server.wait();
    fields
}

/// The last line of numbers `ucx_perftest -f` prints: iterations, latency (50th
/// percentile, average, overall; µs), bandwidth (average, overall; MB/s), message rate
/// (average, overall; per second).
fn parse_ucx(text: &str) -> Option<UcxFields> {
    text.lines().rev().find_map(|line| {
        let numbers: Vec<f64> = line
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        (numbers.len() == 8).then(|| UcxFields {
            latency_us: numbers[1],
            rate_per_s: numbers[7],
        })
    })
}

#[cfg(test)]
mod tests {
    use super::parse_ucx;

    #[test]
    fn reads_the_last_line_of_ucx_perftest() {
        let out = "+----+\n|  Test | # iterations |\n+----+\n                        2000      0.416     4.080     4.080        1.87       1.87      245098      245098\n";
        let fields = parse_ucx(out).unwrap();
        assert_eq!(fields.latency_us, 0.416);
        assert_eq!(fields.rate_per_s, 245098.0);
        assert!(parse_ucx("no numbers here\n").is_none());
    }
}
