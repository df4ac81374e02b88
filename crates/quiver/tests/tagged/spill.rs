//! Unexpected messages beyond `QUIVER_UNEXPECTED_BYTES` (set small through the job's
//! `Config`): their payloads wait in the spill file, a receive behind more of them than the
//! bound completes, nothing is lost and the order per sender holds; a spill that fails
//! keeps them in memory.

use std::path::PathBuf;

use quiver::{Addr, MatchSpec, TransportKind};

use crate::{pattern, run_with};

/// The bound of these tests: 64 KiB of unexpected payloads in memory.
const BOUND: u64 = 64 << 10;

/// Tag-1 messages of mixed sizes (some of 1 MiB), totalling about 90 times the bound,
/// arrive before any receive wants them, then one of tag 2. The receive for tag 2
/// completes behind them all; the memory they hold never passed the bound (the payloads
/// beyond it waited in the spill file; nothing of a message is held beyond the bound, the
/// one message being pulled in aside, which is in no count); then every tag-1 message
/// arrives byte-exact in the order sent, read back by each kind of receive (blocking
/// matching, posted matching, pooled plain).
pub(crate) fn beyond_the_bound(t: TransportKind) {
    const COUNT: u32 = 24;
    fn len_of(i: u32) -> usize {
        [100, 40_000, 1 << 20, 7, 20_000, 300_000][i as usize % 6]
    }
    let total: u64 = (0..COUNT).map(|i| len_of(i) as u64).sum();
    assert!(total > 50 * BOUND);
    run_with(
        t,
        2,
        |config| config.unexpected_bytes = BOUND,
        |rank, ctx| {
            let mut ep = ctx.endpoint(0).unwrap();
            let peer = Addr::new(1 - rank, 0);
            let conn = ep.connect(peer).unwrap();
            if rank == 0 {
                for i in 0..COUNT {
                    ep.send_tagged(conn, 1, &pattern(len_of(i), i)).unwrap();
                }
                ep.send_tagged(conn, 2, &pattern(5000, 999)).unwrap();
                let mut done = [0u8; 1];
                ep.recv(&mut done).unwrap();
                return;
            }
            let mut buf = vec![0u8; 8192];
            let got = ep.recv_matching(MatchSpec::tag(2), &mut buf).unwrap();
            assert_eq!((got.source, got.tag, got.len), (peer, 2, 5000));
            assert!(
                buf[..5000] == pattern(5000, 999)[..],
                "the tag-2 message differs"
            );
            let stats = ep.matching_stats();
            assert_eq!(stats.unexpected, u64::from(COUNT));
            assert!(stats.spilled > 0, "nothing spilled: {stats:?}");
            assert_eq!(stats.unexpected_bytes + stats.spilled_bytes, total);
            assert!(stats.unexpected_bytes <= BOUND, "{stats:?}");
            assert!(stats.peak_unexpected_bytes <= BOUND, "{stats:?}");
            assert_eq!(stats.spill_failures, 0);
            let mut large = vec![0u8; 1 << 20];
            for i in 0..COUNT {
                let len = len_of(i);
                let (got_len, src, tag, bytes) = match i % 3 {
                    0 => {
                        let got = ep.recv_matching(MatchSpec::tag(1), &mut large).unwrap();
                        (
                            got.len as usize,
                            got.source,
                            Some(got.tag),
                            large[..len].to_vec(),
                        )
                    }
                    1 => {
                        let req = ep
                            .post_recv_matching(MatchSpec::tag(1).from(peer), vec![0; len])
                            .unwrap();
                        let done = ep.wait_recv(req).unwrap();
                        (done.len, done.src, Some(done.tag), done.buf)
                    }
                    _ => {
                        // A plain receive: any tag, the earliest waiting.
                        let got = ep.recv_pooled().unwrap();
                        (got.len(), got.src(), None, got.to_vec())
                    }
                };
                assert_eq!((got_len, src), (len, peer), "message {i}");
                assert!(tag.is_none_or(|tag| tag == 1), "message {i}: tag {tag:?}");
                assert!(bytes[..len] == pattern(len, i)[..], "message {i} differs");
            }
            let stats = ep.matching_stats();
            assert_eq!(
                (
                    stats.unexpected,
                    stats.unexpected_bytes,
                    stats.spilled,
                    stats.spilled_bytes
                ),
                (0, 0, 0, 0)
            );
            assert!(stats.spilled_total > 0 && stats.spilled_bytes_total > 0);
            assert!(stats.peak_unexpected_bytes <= BOUND, "{stats:?}");
            ep.send(conn, &[1]).unwrap();
        },
    );
}

/// A spill directory that does not exist: the messages beyond the bound stay in memory
/// (counted as spill failures), none is lost, and they arrive in order.
pub(crate) fn failure_keeps_them(t: TransportKind) {
    const COUNT: u32 = 10;
    const LEN: usize = 2000;
    run_with(
        t,
        2,
        |config| {
            config.unexpected_bytes = 4096;
            config.spill_dir = PathBuf::from("/nonexistent/quiver-spill");
        },
        |rank, ctx| {
            let mut ep = ctx.endpoint(0).unwrap();
            let peer = Addr::new(1 - rank, 0);
            let conn = ep.connect(peer).unwrap();
            if rank == 0 {
                for i in 0..COUNT {
                    ep.send_tagged(conn, 1, &pattern(LEN, i)).unwrap();
                }
                ep.send_tagged(conn, 2, b"last").unwrap();
                let mut done = [0u8; 1];
                ep.recv(&mut done).unwrap();
                return;
            }
            let mut buf = vec![0u8; LEN];
            let got = ep.recv_matching(MatchSpec::tag(2), &mut buf).unwrap();
            assert_eq!(&buf[..got.len as usize], b"last");
            let stats = ep.matching_stats();
            // Two fit within 4096 bytes; the spills of the other eight failed.
            assert_eq!(
                (stats.unexpected, stats.spilled, stats.spill_failures),
                (10, 0, 8)
            );
            assert_eq!(stats.unexpected_bytes, u64::from(COUNT) * LEN as u64);
            for i in 0..COUNT {
                let got = ep.recv_matching(MatchSpec::tag(1), &mut buf).unwrap();
                assert_eq!(got.len as usize, LEN);
                assert!(buf == pattern(LEN, i), "message {i} differs");
            }
            assert_eq!(ep.matching_stats().unexpected_bytes, 0);
            ep.send(conn, &[1]).unwrap();
        },
    );
}
