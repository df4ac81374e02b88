//! `quiver info`: what quiver would do on this machine — transports, protocol thresholds,
//! every setting with the variable that overrides it, and the job this process belongs to.

use std::io::Write;

/// Prints the report; returns the exit status (2 if the configuration is invalid).
pub(crate) fn main() -> i32 {
    let config = match quiver::Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("quiver info: {e}");
            return 2;
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "quiver {}", env!("CARGO_PKG_VERSION"));
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let _ = writeln!(
        out,
        "machine: {cpus} CPUs available, kernel {}",
        kernel_release()
    );
    let _ = writeln!(out, "\ntransports:");
    let _ = writeln!(
        out,
        "  shm   available  (same node: rings in memfd + process_vm_readv for large messages)"
    );
    let _ = writeln!(out, "  tcp   not built yet");
    let _ = writeln!(out, "  udp   not built yet");
    let _ = writeln!(out, "\nshm protocol by message size:");
    for (name, low, high) in config.protocol_ranges() {
        let high = if high == u64::MAX {
            "any".to_string()
        } else {
            format!("{high} B")
        };
        let _ = writeln!(out, "  {low:>8} B .. {high:<10} {name}");
    }
    let _ = writeln!(out, "\nsettings (override with the environment variable):");
    for s in config.describe() {
        let _ = writeln!(out, "  {:<26} {:>12}  {}", s.env, s.value, s.doc);
    }
    let _ = writeln!(out, "\njob:");
    match (std::env::var("QUIVER_RANK"), std::env::var("QUIVER_SIZE")) {
        (Ok(r), Ok(s)) => {
            let _ = writeln!(
                out,
                "  rank {r} of {s} (job {})",
                std::env::var("QUIVER_JOB_ID").unwrap_or_default()
            );
        }
        _ => {
            let _ = writeln!(
                out,
                "  not inside a job (start programs with `quiver run -n N -- PROGRAM`)"
            );
        }
    }
    0
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}
