//! `quiver bench busy` end to end, not timed: more ranks than CPUs run every algorithm
//! over shm, tcp and udp with tiny sizes, their warm-up results checked by the ranks
//! themselves (a wrong one fails the run), and Open MPI beside them when `mpirun` and
//! `mpicc` are installed; the JSON records are complete and carry the ratios.

use std::process::Command;

use serde_json::Value;

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

#[test]
fn busy_mode_runs_every_algorithm_over_every_transport_and_open_mpi() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get().min(2));
    let ranks = (2 * cpus).max(3).to_string();
    let with_mpi = on_path("mpirun") && on_path("mpicc");
    let cpus_text = cpus.to_string();
    let output = Command::new(env!("CARGO_BIN_EXE_quiver"))
        .args(["bench", "busy", "--ranks", &ranks, "--cpus", &cpus_text])
        .args([
            "--sizes",
            "8,1K",
            "--iters",
            "5",
            "--timeout",
            "120",
            "--json",
            "-",
        ])
        .args(["--mpi", if with_mpi { "on" } else { "off" }])
        .output()
        .expect("quiver runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "quiver bench busy failed: {stderr}"
    );
    let records: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("only JSON lines on stdout"))
        .collect();
    let mut systems = vec![("quiver", "shm"), ("quiver", "tcp"), ("quiver", "udp")];
    if with_mpi {
        systems.extend([("openmpi", "vader"), ("openmpi", "tcp")]);
    }
    assert_eq!(records.len(), systems.len() * 3 * 2, "{records:?}");
    for (system, transport) in systems {
        for algorithm in ["pingpong", "ring", "reqrep"] {
            for size in [8, 1024] {
                let record = records
                    .iter()
                    .find(|r| {
                        r["system"] == system
                            && r["transport"] == transport
                            && r["algorithm"] == algorithm
                            && r["size"] == size
                    })
                    .unwrap_or_else(|| panic!("no {system} {transport} {algorithm} {size}"));
                assert_eq!(record["test"], "busy");
                assert_eq!(record["iters"], 5);
                assert_eq!(record["ranks"].to_string(), ranks);
                assert!(
                    record["time_us"].as_f64().is_some_and(|t| t > 0.0),
                    "{record}"
                );
                assert!(record["commit"].is_string(), "{record}");
                let ratio = record.get("ratio_to_openmpi");
                assert_eq!(ratio.is_some(), with_mpi && system == "quiver", "{record}");
            }
        }
    }
}

#[test]
fn busy_mode_refuses_what_it_cannot_run() {
    for arguments in [
        &["--ranks", "1"][..],
        &["--sizes", "12"],
        &["--transport", "xdp"],
        &["--cpus", "100000"],
        &["--set", "QUIVER_TRANSPORTS=tcp"],
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_quiver"))
            .args(["bench", "busy"])
            .args(arguments)
            .output()
            .expect("quiver runs");
        assert_eq!(output.status.code(), Some(2), "{arguments:?}");
    }
}
