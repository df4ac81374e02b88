//! Unit tests of `quiver-bench bench`'s command line: the lab's tests and paired runs
//! validated into plans, and the ranks' command line parsed back into the same plan.

use clap::Parser;
use quiver_cli::bench::plan::{TestName, Transport};

use super::*;

#[derive(Parser)]
struct TestCli {
    #[command(flatten)]
    bench: LabBenchArgs,
}

fn parse(arguments: &[&str]) -> Result<LabBenchArgs, clap::Error> {
    let mut all = vec!["bench"];
    all.extend_from_slice(arguments);
    TestCli::try_parse_from(all).map(|cli| cli.bench)
}

fn plan(arguments: &[&str]) -> Result<LabPlan, String> {
    plan_from_args(&parse(arguments).expect("command line parses"))
}

#[test]
fn the_lab_tests_are_validated() {
    assert!(plan(&["pool", "--transport", "raw-tcp"]).is_err());
    assert!(plan(&["pool", "--transport", "tcp"]).is_ok());
    assert!(plan(&["loggp", "--transport", "raw-udp"]).is_ok());
    // The bench's validation still applies.
    assert!(plan(&["bibw", "--transport", "raw-udp"]).is_err());
    let error = plan(&["--transport", "udx"]).expect_err("no such transport");
    assert!(error.contains("unknown transport 'udx'"), "{error}");
    assert!(plan(&["loggp", "--sizes", "1G", "--window", "64"]).is_err());
    let defaults = plan(&[]).expect("valid");
    assert_eq!(defaults.tests, LabTest::DEFAULT.to_vec());
    let ordered = plan(&["pool", "loggp", "rate", "pingpong", "rate"]).expect("valid");
    assert_eq!(
        ordered.tests,
        vec![
            LabTest::Pingpong,
            LabTest::Rate,
            LabTest::Loggp,
            LabTest::Pool
        ]
    );
    assert_eq!(ordered.base.tests, vec![TestName::Pingpong, TestName::Rate]);
}

#[test]
fn worker_args_parse_back_to_the_same_plan() {
    let original = plan(&[
        "--sizes",
        "8,64K",
        "--iters",
        "200",
        "--set",
        "QUIVER_SPIN_US=100",
        "--effort",
        "20",
        "bw",
        "pingpong",
        "loggp",
    ])
    .expect("valid");
    let worker_args = original.worker_args();
    assert_eq!(worker_args[0], "bench");
    let arguments: Vec<&str> = worker_args[1..].iter().map(String::as_str).collect();
    let parsed = parse(&arguments).expect("worker command line parses");
    assert!(parsed.options.worker);
    assert_eq!(plan_from_args(&parsed).expect("valid"), original);
}

#[test]
fn detect_rounds_alternate_on_and_off() {
    assert_eq!(Detect::On.runs(6), vec![(None, None)]);
    assert_eq!(Detect::Off.runs(6), vec![(Some("0"), None)]);
    assert_eq!(
        Detect::Both.runs(2),
        vec![
            (None, Some(0)),
            (Some("0"), Some(0)),
            (None, Some(1)),
            (Some("0"), Some(1))
        ]
    );
    assert_eq!(Detect::Both.runs(6).len(), 12);
    assert!(plan(&["--detect", "both", "--rounds", "6"]).is_ok());
    assert!(plan(&["--rounds", "6"]).is_err());
    assert!(plan(&["--detect", "both", "--rounds", "0"]).is_err());
    assert!(plan(&["--detect", "both", "--rounds", "101"]).is_err());
    assert!(plan(&["pingpong", "--detect", "interleave", "--rounds", "1000"]).is_ok());
    assert!(plan(&["pingpong", "--detect", "interleave", "--rounds", "1001"]).is_err());
    // interleave: one launch, blocks inside the ranks.
    assert_eq!(Detect::Interleave.runs(6), vec![(None, None)]);
    let interleaved = plan(&["pingpong", "--detect", "interleave", "--rounds", "8"]);
    assert_eq!(
        interleaved.expect("valid").interleave,
        Some(Interleave {
            pairs: 8,
            sides: Interleaved::Detection
        })
    );
    let default_pairs = plan(&["bw", "rate", "--detect", "interleave"]).expect("valid");
    assert_eq!(
        default_pairs.interleave.map(|interleave| interleave.pairs),
        Some(DEFAULT_INTERLEAVE_PAIRS)
    );
    assert!(plan(&["loggp", "--detect", "interleave"]).is_err());
    assert!(plan(&["--transport", "raw-udp", "--detect", "interleave"]).is_err());
}

#[test]
fn baseline_interleave_is_validated() {
    let udp = plan(&["--transport", "udp", "--baseline", "interleave"]).expect("valid");
    assert_eq!(
        udp.interleave,
        Some(Interleave {
            pairs: DEFAULT_INTERLEAVE_PAIRS,
            sides: Interleaved::Baseline
        })
    );
    assert_eq!(udp.baseline_transport(), Some(Transport::RawUdp));
    let tcp = plan(&[
        "pingpong",
        "bw",
        "--transport",
        "tcp",
        "--baseline",
        "interleave",
        "--rounds",
        "20",
        "--sizes",
        "8,1M",
    ])
    .expect("valid");
    assert_eq!(tcp.interleave.map(|interleave| interleave.pairs), Some(20));
    assert_eq!(tcp.baseline_transport(), Some(Transport::RawTcp));
    assert!(plan(&[
        "--transport",
        "tcp",
        "--baseline",
        "interleave",
        "--rounds",
        "1000"
    ])
    .is_ok());
    let udp_tcp = plan(&["bw", "--transport", "udp", "--baseline", "tcp"]).expect("valid");
    assert_eq!(
        udp_tcp.interleave,
        Some(Interleave {
            pairs: DEFAULT_INTERLEAVE_PAIRS,
            sides: Interleaved::Tcp
        })
    );
    assert_eq!(udp_tcp.baseline_transport(), Some(Transport::Tcp));
    assert!(plan(&[
        "--transport",
        "udp",
        "--baseline",
        "interleave",
        "--detect",
        "off"
    ])
    .is_ok());
    // The ranks get the same plan back from their command line.
    let arguments_owned = tcp.worker_args();
    let arguments: Vec<&str> = arguments_owned[1..].iter().map(String::as_str).collect();
    assert_eq!(plan_from_args(&parse(&arguments).expect("parses")), Ok(tcp));
}

/// `plan(arguments)` is refused with a message containing `expected`.
fn refused(arguments: &[&str], expected: &str) {
    let error = plan(arguments).expect_err("refused");
    assert!(error.contains(expected), "{arguments:?}: {error}");
}

#[test]
fn baseline_interleave_refuses_what_it_cannot_pair() {
    refused(
        &[
            "--rounds",
            "1001",
            "--transport",
            "tcp",
            "--baseline",
            "interleave",
        ],
        "--rounds must be between 1 and 1000",
    );
    refused(
        &[
            "--rounds",
            "0",
            "--transport",
            "tcp",
            "--baseline",
            "interleave",
        ],
        "--rounds must be between",
    );
    for transport in ["shm", "raw-udp", "raw-tcp"] {
        refused(
            &["--transport", transport, "--baseline", "interleave"],
            "use --transport udp or tcp",
        );
    }
    for transport in ["shm", "tcp", "raw-udp", "raw-tcp"] {
        refused(
            &["--transport", transport, "--baseline", "tcp"],
            "use --transport udp",
        );
    }
    refused(
        &["--transport", "udp", "--baseline", "tcp", "loggp"],
        "loggp is not one of them",
    );
    refused(
        &[
            "--transport",
            "udp",
            "--baseline",
            "tcp",
            "--detect",
            "both",
        ],
        "not with --detect both or interleave",
    );
    for detect in ["both", "interleave"] {
        refused(
            &[
                "--transport",
                "udp",
                "--baseline",
                "interleave",
                "--detect",
                detect,
            ],
            "not with --detect both or interleave",
        );
    }
    for test in ["bibw", "loggp", "pool"] {
        refused(
            &[test, "--transport", "udp", "--baseline", "interleave"],
            "splits pingpong, bw and rate",
        );
    }
    // The suites are commands of their own, not tests of `bench`.
    for suite in ["compare", "crossover"] {
        assert!(parse(&[suite, "--transport", "udp", "--baseline", "interleave"]).is_err());
    }
    refused(
        &[
            "--transport",
            "udp",
            "--baseline",
            "interleave",
            "--netns",
            "a,b",
        ],
        "loopback",
    );
    refused(
        &[
            "--transport",
            "tcp",
            "--baseline",
            "interleave",
            "--addrs",
            "127.0.0.1:1,127.0.0.1:2",
        ],
        "loopback",
    );
    assert!(parse(&["--baseline", "both"]).is_err());
}
