//! The cost accounting of failure detection (`Endpoint::detection_stats`): a waiting call
//! with detection on counts and times its liveness looks; with detection off a call that
//! never sleeps makes none.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use quiver::{Addr, Config, Context, DetectionStats, Error, YieldMode};

static NEXT_JOB: AtomicU64 = AtomicU64::new(1);

/// Two ranks of one job in this process, both with `detect`, a 20 ms spin and a 10 ms
/// operation timeout (so a waiting call times out before it would ever sleep). The spin
/// never yields: a yield that finds the CPU shared (a busy test machine) would cut the
/// spin short and let the call sleep.
fn pair(detect: Option<Duration>) -> (Context, Context) {
    let id = (std::process::id() as u64) << 32 | NEXT_JOB.fetch_add(1, Ordering::Relaxed);
    let make = |rank| {
        let config = Config {
            connect_timeout: Duration::from_secs(5),
            spin: Duration::from_millis(20),
            yield_mode: YieldMode::Never,
            op_timeout: Some(Duration::from_millis(10)),
            detect,
            ..Config::default()
        };
        Context::builder()
            .rank(rank)
            .size(2)
            .job_id(id)
            .job_key([3; 32])
            .config(config)
            .build()
            .expect("context")
    };
    (make(0), make(1))
}

/// Rank 0 waits for a message that never comes (rank 1 connected, alive, silent); returns
/// what its endpoint's looks cost during the wait.
fn silent_wait(detect: Option<Duration>) -> DetectionStats {
    let (c0, c1) = pair(detect);
    let mut e0 = c0.endpoint(0).expect("endpoint 0");
    let mut e1 = c1.endpoint(0).expect("endpoint 1");
    let to1 = e0.connect(Addr::new(1, 0)).expect("connect 0 -> 1");
    let to0 = e1.connect(Addr::new(0, 0)).expect("connect 1 -> 0");
    // One exchange so both sides have adopted their inbound connections.
    e0.send(to1, b"hello").expect("send");
    let mut buf = [0u8; 16];
    e1.recv(&mut buf).expect("recv on 1");
    e1.send(to0, b"back").expect("send back");
    e0.recv(&mut buf).expect("recv on 0");
    let before = e0.detection_stats();
    let waited = e0.recv(&mut buf);
    assert!(matches!(waited, Err(Error::Timeout { .. })), "{waited:?}");
    e0.detection_stats().since(&before)
}

#[test]
fn a_spinning_wait_with_detection_on_counts_and_times_its_looks() {
    let cost = silent_wait(Some(Duration::from_millis(1000)));
    // The first periodic tick of the wait is due at once; later ones at most every 1 ms.
    assert!(cost.looks >= 1, "{cost:?}");
    assert!(cost.look_ns > 0, "{cost:?}");
}

#[test]
fn a_spinning_wait_with_detection_off_makes_no_look() {
    let cost = silent_wait(None);
    assert_eq!(cost, DetectionStats::default());
}
