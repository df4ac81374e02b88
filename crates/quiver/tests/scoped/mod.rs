//! The posted-operations-on-caller-memory part of the conformance suite (`Endpoint::scope`):
//! slices of larger arrays posted for sending, receives posted into parts of the caller's
//! arrays, typed u32 and f64 data, all byte-verified; and a scope whose body returns early
//! or panics leaves the endpoint consistent (nothing lost, nothing left posted).

use std::panic::{catch_unwind, AssertUnwindSafe};

use quiver::{Addr, TransportKind};

use super::run;

/// The u32 values of rank `rank`'s big array.
fn values(rank: u32, len: usize) -> Vec<u32> {
    (0..len as u32)
        .map(|i| i.wrapping_mul(2_654_435_761) ^ (rank + 1).wrapping_mul(0x9E37_79B9))
        .collect()
}

/// Slices of a large array: a short one, one past the eager sizes, one past 1 MiB.
const SLICES: [(usize, usize); 3] = [(3, 13), (1000, 1000 + 20_000), (50_000, 50_000 + 300_001)];

/// Each rank posts, in one scope, sends of slices of its big u32 array and receives into
/// parts of another array of its own (at offsets of their own), then sends f64s typed
/// and receives them typed: every byte checked against what the peer's array holds.
pub(crate) fn slices_of_caller_arrays(t: TransportKind) {
    run(t, 2, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        ep.set_timeout(Some(std::time::Duration::from_secs(60)));
        let peer = Addr::new(1 - rank, 0);
        let conn = ep.connect(peer).unwrap();
        let mine = values(rank, 400_000);
        let theirs = values(1 - rank, 400_000);
        let mut landing = vec![0u32; 700_000];
        // Disjoint parts of one array, each borrowed by its receive for the scope's life.
        let (head, tail) = landing.split_at_mut(350_000);
        let (first, second) = head.split_at_mut(100);
        let envelopes = ep
            .scope(|s| -> quiver::Result<Vec<quiver::Envelope>> {
                // Receives first, into parts of the caller's array: 10 values at 7,
                // 20,000 at 100, 300,001 at the start of the second half.
                let into = [
                    s.post_recv(&mut first[7..7 + 10])?,
                    s.post_recv(&mut second[..20_000])?,
                    s.post_recv(&mut tail[..300_001])?,
                ];
                let sent: Vec<_> = SLICES
                    .iter()
                    .map(|&(a, b)| s.post_send(conn, &mine[a..b]))
                    .collect::<quiver::Result<_>>()?;
                for send in sent {
                    s.wait_send(send)?;
                }
                into.into_iter().map(|r| s.wait_recv(r)).collect()
            })
            .unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        let lens: Vec<_> = envelopes.iter().map(|e| (e.source, e.len)).collect();
        let want: Vec<_> = SLICES
            .iter()
            .map(|&(a, b)| (peer, (4 * (b - a)) as u64))
            .collect();
        assert_eq!(lens, want, "lengths in bytes");
        assert!(landing[7..17] == theirs[3..13], "slice 0 differs");
        assert!(
            landing[100..20_100] == theirs[1000..21_000],
            "slice 1 differs"
        );
        assert!(
            landing[350_000..650_001] == theirs[50_000..350_001],
            "slice 2 differs"
        );
        // Nothing was written outside the parts posted.
        assert!(landing[..7].iter().all(|&v| v == 0));
        assert!(landing[17..100].iter().all(|&v| v == 0));
        assert!(landing[20_100..350_000].iter().all(|&v| v == 0));
        assert!(landing[650_001..].iter().all(|&v| v == 0));

        // Typed f64s, blocking: send_typed and recv_into.
        let field: Vec<f64> = (0..5000).map(|i| i as f64 * 0.5 + rank as f64).collect();
        let mut halo = vec![0f64; 6000];
        if rank == 0 {
            ep.send_typed(conn, &field[1000..3000]).unwrap();
            let (n, src) = ep.recv_into(&mut halo[10..]).unwrap();
            assert_eq!((n, src), (2000 * 8, peer));
        } else {
            let (n, src) = ep.recv_into(&mut halo[10..]).unwrap();
            assert_eq!((n, src), (2000 * 8, peer));
            ep.send_typed(conn, &field[1000..3000]).unwrap();
        }
        let expect: Vec<f64> = (1000..3000)
            .map(|i| i as f64 * 0.5 + (1 - rank) as f64)
            .collect();
        assert!(halo[10..2010] == expect[..], "typed f64 differ");
        assert!(halo[..10].iter().chain(&halo[2010..]).all(|&v| v == 0.0));
    });
}

/// A scope whose body returns early with a receive posted, and one whose body panics with
/// a receive and a send posted: the receives are cancelled (the messages that come later go
/// to later receives, none lost), the send completes, the endpoint keeps working.
pub(crate) fn early_return_and_panic(t: TransportKind) {
    run(t, 2, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        ep.set_timeout(Some(std::time::Duration::from_secs(60)));
        let peer = Addr::new(1 - rank, 0);
        let conn = ep.connect(peer).unwrap();
        let mut buf = [0u8; 64];
        if rank == 0 {
            // 1: after rank 1's first scope returned early.
            assert_eq!(ep.recv(&mut buf).unwrap(), (2, peer));
            ep.send(conn, b"first").unwrap();
            // 2: the send posted in the scope that panicked, then its go-ahead.
            let (n, _) = ep.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"from the panicking scope");
            assert_eq!(ep.recv(&mut buf).unwrap(), (2, peer));
            ep.send(conn, b"second").unwrap();
            assert_eq!(ep.recv(&mut buf).unwrap(), (4, peer), "done");
        } else {
            let mut part = [0u8; 32];
            let early: quiver::Result<()> = ep.scope(|s| {
                let _pending = s.post_recv(&mut part[..])?;
                Err(quiver::Error::WouldBlock)
            });
            assert!(early.is_err());
            ep.send(conn, b"go").unwrap();
            let (n, _) = ep.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"first", "the cancelled receive took nothing");
            assert!(part.iter().all(|&b| b == 0));

            let payload = b"from the panicking scope".to_vec();
            let panicked = catch_unwind(AssertUnwindSafe(|| {
                ep.scope(|s| {
                    let _recv = s.post_recv(&mut part[..]).unwrap();
                    let _send = s.post_send(conn, &payload[..]).unwrap();
                    panic!("the scope's body panics (on purpose)");
                })
            }));
            assert!(panicked.is_err());
            ep.send(conn, b"go").unwrap();
            let (n, _) = ep.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"second", "the cancelled receive took nothing");
            assert!(part.iter().all(|&b| b == 0));
            ep.send(conn, b"done").unwrap();
        }
    });
}

/// The scope's operations without the closure, as the C and Python bindings hold them (by
/// number, across calls): receives of three sizes posted first (one past 1 MiB), sends
/// copied from slices of the caller's array, the receives finished in reverse order into
/// the caller's memory (each took the message of its place in the posting order); a wait
/// that times out leaves its receive posted (the next message still goes into it); a
/// receive cancelled before its message is withdrawn (the message goes to a later
/// receive), one cancelled after its message arrived completes into the caller's memory.
pub(crate) fn posted_by_number(t: TransportKind) {
    use std::time::Duration;
    run(t, 2, |rank, ctx| {
        let mut ep = ctx.endpoint(0).unwrap();
        ep.set_timeout(Some(Duration::from_secs(60)));
        let peer = Addr::new(1 - rank, 0);
        let conn = ep.connect(peer).unwrap();
        let mine: Vec<u8> = bytemuck::cast_slice(&values(rank, 400_000)).to_vec();
        let theirs: Vec<u8> = bytemuck::cast_slice(&values(1 - rank, 400_000)).to_vec();
        let parts = [(5usize, 69usize), (1000, 81_000), (7, 7 + 1_200_004)];
        let recvs: Vec<_> = parts
            .iter()
            .map(|&(a, b)| ep.post_recv_sized(None, b - a).unwrap())
            .collect();
        let sends: Vec<_> = parts
            .iter()
            .enumerate()
            .map(|(i, &(a, b))| ep.post_send_from(conn, Some(i as u64 + 7), &mine[a..b]))
            .collect::<quiver::Result<_>>()
            .unwrap();
        for send in sends {
            ep.finish_send(send).unwrap();
        }
        let mut landing = vec![0u8; 1_300_000];
        for (i, recv) in recvs.into_iter().enumerate().rev() {
            let (a, b) = parts[i];
            let got = ep
                .finish_recv_into(recv, &mut landing[a..b])
                .unwrap_or_else(|e| panic!("rank {rank}, receive {i}: {e}"));
            assert_eq!(
                (got.source, got.tag, got.len),
                (peer, i as u64 + 7, (b - a) as u64)
            );
            assert!(landing[a..b] == theirs[a..b], "receive {i} differs");
            landing[a..b].fill(0);
        }
        assert!(landing.iter().all(|&b| b == 0), "written outside the parts");

        let mut buf = [0u8; 64];
        if rank == 0 {
            // A wait that times out leaves the receive posted.
            let late = ep.post_recv_sized(None, 64).unwrap();
            ep.set_timeout(Some(Duration::from_millis(50)));
            let waited = ep.wait_recv_ready(&late);
            assert!(
                matches!(waited, Err(quiver::Error::Timeout { .. })),
                "{waited:?}"
            );
            ep.set_timeout(Some(Duration::from_secs(60)));
            ep.send(conn, b"go").unwrap();
            ep.wait_recv_ready(&late).unwrap();
            assert!(ep.test_recv(&late).unwrap());
            let got = ep.finish_recv_into(late, &mut buf).unwrap();
            assert_eq!((got.len, &buf[..4]), (4, &b"late"[..]));

            // Cancelled before its message: withdrawn, into untouched.
            let mut part = [0u8; 32];
            let early = ep.post_recv_sized(None, 32).unwrap();
            assert_eq!(ep.cancel_recv_into(early, &mut part).unwrap(), None);
            ep.send(conn, b"go").unwrap();
            let (n, _) = ep.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"after the cancel");
            assert!(part.iter().all(|&b| b == 0));
            // Cancelled after its message arrived: completed into `part`.
            let arrived = ep.post_recv_sized(None, 32).unwrap();
            ep.send(conn, b"go").unwrap();
            ep.wait_recv_ready(&arrived).unwrap();
            let got = ep.cancel_recv_into(arrived, &mut part).unwrap().unwrap();
            assert_eq!((got.len, &part[..9]), (9, &b"completed"[..]));
            ep.send(conn, b"done").unwrap();
        } else {
            assert_eq!(ep.recv(&mut buf).unwrap(), (2, peer));
            ep.send(conn, b"late").unwrap();
            assert_eq!(ep.recv(&mut buf).unwrap(), (2, peer));
            ep.send(conn, b"after the cancel").unwrap();
            assert_eq!(ep.recv(&mut buf).unwrap(), (2, peer));
            ep.send(conn, b"completed").unwrap();
            assert_eq!(ep.recv(&mut buf).unwrap(), (4, peer));
        }
    });
}
