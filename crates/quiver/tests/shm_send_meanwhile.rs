//! A blocking shm send whose rendezvous waits for its receiver lets the endpoint's posted
//! receives take what arrives meanwhile (as a blocking network send does), and a cycle of
//! blocking sends finishes: three ranks in this process, one thread each.

mod support;
use support::pattern;

use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use quiver::{Addr, Config, Context, TransportKind};

/// Larger than the shm eager limit: a rendezvous.
const LEN: usize = 1 << 20;

/// Rank 0 posts a receive, then sends 1 MiB to rank 1, which takes it only once rank 2
/// has heard that its own 1 MiB, posted to rank 0, was taken. Rank 2's send is posted, so
/// it does not sleep in a blocking send and nothing reads it ahead: only rank 0's posted
/// receive, filled while rank 0's send waits, lets the three go on. Without it rank 0's
/// send times out (`op_timeout`).
#[test]
fn posted_receives_fill_while_a_blocking_shm_send_waits() {
    let contexts = job(3);
    thread::scope(|s| {
        let handles: Vec<_> = contexts
            .into_iter()
            .enumerate()
            .map(|(rank, ctx)| s.spawn(move || run_rank(rank, &ctx)))
            .collect();
        for handle in handles {
            if let Err(panic) = handle.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
}

/// Three ranks each `send` 1 MiB to the next and only then `recv` (a cycle of blocking
/// sends, no receive posted): a waiting send pulls ahead the rendezvous of another sender
/// than its own peer once it has waited a while, so every send finishes and every message
/// arrives intact (within `op_timeout`, never a hang).
#[test]
fn a_cycle_of_blocking_shm_sends_finishes() {
    let contexts = job(3);
    thread::scope(|s| {
        let handles: Vec<_> = contexts
            .into_iter()
            .enumerate()
            .map(|(rank, ctx)| {
                s.spawn(move || {
                    let rank = rank as u32;
                    let mut ep = ctx.endpoint(0).expect("endpoint");
                    let next = ep.connect(Addr::new((rank + 1) % 3, 0)).expect("connect");
                    ep.send(next, &pattern(LEN, rank))
                        .expect("the send in the cycle");
                    let mut buf = vec![0u8; LEN];
                    let (len, from) = ep.recv(&mut buf).expect("the previous rank's message");
                    let previous = (rank + 2) % 3;
                    assert_eq!((len, from), (LEN, Addr::new(previous, 0)));
                    assert!(
                        buf == pattern(LEN, previous),
                        "rank {previous}'s bytes differ"
                    );
                })
            })
            .collect();
        for handle in handles {
            if let Err(panic) = handle.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
}

/// One rank of the first test above.
fn run_rank(rank: usize, ctx: &Context) {
    match rank {
        0 => {
            let mut ep = ctx.endpoint(0).expect("endpoint");
            let to_1 = ep.connect(Addr::new(1, 0)).expect("connect to rank 1");
            let posted = ep.post_recv(vec![0u8; LEN]).expect("post_recv");
            ep.send(to_1, &pattern(LEN, 10)).expect("rank 0's send");
            let got = ep.wait_recv(posted).expect("rank 0's posted receive");
            assert_eq!((got.len, got.src), (LEN, Addr::new(2, 0)));
            assert!(got.buf[..LEN] == pattern(LEN, 12), "rank 2's bytes differ");
        }
        1 => {
            let mut ep = ctx.endpoint(0).expect("endpoint");
            // Rank 2's word comes on an endpoint of its own, so that rank 0's message
            // cannot come first into a buffer too small for it.
            let mut notes = ctx.endpoint(1).expect("endpoint");
            let mut note = [0u8; 1];
            let (len, from) = notes.recv(&mut note).expect("rank 2's word");
            assert_eq!((len, from), (1, Addr::new(2, 0)));
            let mut buf = vec![0u8; LEN];
            let (len, from) = ep.recv(&mut buf).expect("rank 0's message");
            assert_eq!((len, from), (LEN, Addr::new(0, 0)));
            assert!(buf == pattern(LEN, 10), "rank 0's bytes differ");
        }
        _ => {
            let mut ep = ctx.endpoint(0).expect("endpoint");
            let to_0 = ep.connect(Addr::new(0, 0)).expect("connect to rank 0");
            let to_1 = ep.connect(Addr::new(1, 1)).expect("connect to rank 1");
            let sent = ep.post_send(to_0, pattern(LEN, 12)).expect("post_send");
            ep.wait_send(sent).expect("rank 2's posted send");
            ep.send(to_1, &[1]).expect("rank 2's word");
        }
    }
}

/// The contexts of a shm job of `size` ranks in this process (a job id of its own: the
/// tests run at once).
fn job(size: u32) -> Vec<Context> {
    static NEXT_JOB: AtomicU64 = AtomicU64::new(0);
    let id = u64::from(std::process::id()) << 16 | NEXT_JOB.fetch_add(1, Ordering::Relaxed);
    let mut key = [0x5au8; 32];
    key[..4].copy_from_slice(&std::process::id().to_le_bytes());
    let config = Config {
        transports: vec![TransportKind::Shm],
        connect_timeout: Duration::from_secs(10),
        op_timeout: Some(Duration::from_secs(10)),
        ..Config::default()
    };
    (0..size)
        .map(|rank| {
            Context::builder()
                .rank(rank)
                .size(size)
                .job_id(id)
                .job_key(key)
                .config(config.clone())
                .build()
                .expect("a context")
        })
        .collect()
}
