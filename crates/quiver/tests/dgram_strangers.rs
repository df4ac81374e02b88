//! Strangers attacking a running two-rank udp job from another process on the host (this
//! test binary run again, `support::attacker`), from sockets of their own: a flood of
//! Hellos that know the job id but not the key, with random initiator ids, random claimed
//! ranks and many source addresses. The job's traffic completes, every Hello is refused
//! before anything is kept for it (the router's remembered Hellos stay at the job's own),
//! and the refusals are counted.

mod support;

use support::attacker::{self, Attacker};

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quiver::{Addr, Config, Context, TransportKind};
use quiver_proto::handshake::{ConnectRequest, Initiator, JobKey};
use quiver_wire::frame::{FrameHeader, FrameKey, FrameKeys, FrameType};
use quiver_wire::handshake::{field, MAX_MESSAGE_LEN};

const KEY: [u8; 32] = [3; 32];
/// Hellos in the flood (each sent to both ranks).
const FLOOD: u64 = 100_000;
/// Set in the attacking process: `JOB COUNT TARGET...`.
const ATTACKER_ENV: &str = "QUIVER_STRANGER_ATTACKER";

/// A splitmix64 step: the flood's randomness (seeded, so a failure replays).
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A Hello datagram of job `job` claiming rank `rank`, from initiator id `src_id`, MACed
/// with `key` and then, when `scramble` is set, with its MAC overwritten by random bytes.
fn hello(
    job: u64,
    rank: u32,
    src_id: u64,
    key: [u8; 32],
    nonce: u8,
    scramble: Option<u64>,
) -> Vec<u8> {
    let request = ConnectRequest {
        job_id: job,
        src_rank: rank,
        src_port: 1,
        dst_port: 1,
    };
    let mut initiator = Initiator::new(JobKey::from_bytes(key), request, [nonce; 32]);
    let mut payload = [0u8; MAX_MESSAGE_LEN];
    let len = initiator.poll_transmit(&mut payload).unwrap().unwrap();
    if let Some(mut state) = scramble {
        for byte in &mut payload[field::HELLO_MAC_H] {
            *byte = next(&mut state) as u8;
        }
    }
    let mut datagram = vec![0u8; 256];
    // Handshake frames go under the public handshake key: a stranger can make them.
    let header_len = FrameHeader::new(FrameType::Handshake, 0, src_id)
        .emit(
            FrameKeys::job_only(FrameKey::handshake()),
            &mut datagram,
            &payload[..len],
        )
        .unwrap();
    datagram.truncate(header_len);
    datagram.extend_from_slice(&payload[..len]);
    datagram
}

/// Sends `count` Hellos to each of `targets` from sockets bound to several loopback
/// addresses (sources that are no rank of the job), until done or `stop`.
fn flood(
    job: u64,
    targets: Vec<SocketAddr>,
    count: u64,
    stop: Arc<AtomicBool>,
    progress: Arc<AtomicU64>,
) -> u64 {
    let sockets: Vec<UdpSocket> = (0..8u8)
        .map(|host| UdpSocket::bind((Ipv4Addr::new(127, 66, host, 1), 0)).expect("bind"))
        .collect();
    let mut state = 0x5EED;
    let mut sent = 0;
    for index in 0..count {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let random = next(&mut state);
        let rank = match random % 3 {
            0 => 0,
            1 => 1,
            _ => (random >> 8) as u32,
        };
        let src_id = next(&mut state) | 1;
        // Half with a stranger's key, half with the job's key but a random MAC.
        let datagram = if index % 2 == 0 {
            let mut stranger = KEY;
            stranger[0] ^= (random >> 16) as u8 | 1;
            hello(job, rank, src_id, stranger, random as u8, None)
        } else {
            hello(job, rank, src_id, KEY, random as u8, Some(random))
        };
        progress.store(index, Ordering::Relaxed);
        let socket = &sockets[(random >> 24) as usize % sockets.len()];
        for target in &targets {
            if socket.send_to(&datagram, target).is_ok() {
                sent += 1;
            }
        }
    }
    sent
}

#[test]
fn a_hello_flood_without_the_key_leaves_no_state_and_the_job_carries_on() {
    let addrs: Vec<SocketAddr> = (0..2)
        .map(|_| (Ipv4Addr::LOCALHOST, support::free_port(1)).into())
        .collect();
    let job = (u64::from(std::process::id()) << 20) | 0x66;
    let config = Config {
        transports: vec![TransportKind::Udp],
        // The flood's thread takes a core the two ranks need on a two-core machine shared
        // with other work: a rank descheduled for a second must not count as dead. What
        // this test checks is state and counting, not liveness under CPU starvation.
        net_idle_timeout: Duration::from_secs(10),
        ..Config::default()
    };
    let context = |rank| {
        Context::builder()
            .rank(rank)
            .size(2)
            .job_id(job)
            .job_key(KEY)
            .addrs(addrs.clone())
            .config(config.clone())
            .build()
            .expect("context")
    };
    let (zero, one) = (context(0), context(1));

    let flood_over = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(AtomicU64::new(0));
    // The flood comes from another process; a thread here follows what it reports.
    let arguments = format!("{job} {FLOOD} {} {}", addrs[0], addrs[1]);
    let mut stranger = Attacker::spawn("attacker", ATTACKER_ENV, &arguments);
    assert_ne!(stranger.id(), std::process::id());
    let flooding = {
        let progress = progress.clone();
        std::thread::spawn(move || {
            while let Some(line) = stranger.line() {
                let (what, count) = line.split_once(' ').expect("a report");
                let count: u64 = count.parse().expect("a count");
                match what {
                    "progress" => progress.store(count, Ordering::Relaxed),
                    "sent" => {
                        progress.store(FLOOD, Ordering::Relaxed);
                        stranger.finish();
                        return count;
                    }
                    _ => panic!("the attacker said {line:?}"),
                }
            }
            panic!("the attacker ended without a count");
        })
    };
    // The job's traffic starts once the flood is under way, and lasts a good part of it.
    while progress.load(Ordering::Relaxed) < FLOOD / 10 {
        std::thread::yield_now();
    }
    let sizes: Vec<usize> = (0..2000)
        .map(|index| [8, 1400, 9000, 65_000][index % 4])
        .collect();
    let receiving = {
        let (sizes, flood_over) = (sizes.clone(), flood_over.clone());
        std::thread::spawn(move || {
            let mut endpoint = one.endpoint(1).expect("endpoint");
            let mut buffer = vec![0u8; 1 << 17];
            for (index, &size) in sizes.iter().enumerate() {
                let (len, _) = endpoint.recv(&mut buffer).expect("recv");
                assert_eq!(&buffer[..len], &support::pattern(size, index as u32)[..]);
            }
            let back = endpoint.connect(Addr::new(0, 1)).expect("connect back");
            endpoint.send(back, b"done").expect("send done");
            // Keep the engine taking the flood until it is over.
            while !flood_over.load(Ordering::Relaxed) {
                let _ = endpoint.try_recv(&mut buffer);
            }
            drain(&mut endpoint);
            (one, endpoint)
        })
    };
    let started = Instant::now();
    let mut endpoint = zero.endpoint(1).expect("endpoint");
    support::send_patterned_until_done(&mut endpoint, &sizes);
    let traffic = started.elapsed();
    let during = progress.load(Ordering::Relaxed);
    while !flooding.is_finished() {
        let _ = endpoint.try_recv(&mut [0u8; 8]);
    }
    let sent = flooding.join().expect("flood");
    flood_over.store(true, Ordering::Relaxed);
    drain(&mut endpoint);
    let (one, _endpoint_one) = receiving.join().expect("receiver");

    let mut refused_total = 0;
    for (rank, context) in [(0, &zero), (1, &one)] {
        let stats = context.stats().datagram.expect("udp runs");
        let refused = stats.refused;
        // The router remembers only the job's own Hellos: none of the flood's.
        assert!(stats.hellos_remembered <= 1, "rank {rank}: {stats:#?}");
        assert_eq!(stats.hellos_evicted, 0, "rank {rank}");
        assert!(stats.connections <= 1, "rank {rank}: {stats:#?}");
        // Every Hello that got through the kernel was refused for lack of the key (each
        // answered by a stateless refusal shorter than it, no Reset).
        assert_eq!(refused.refused_hellos, 0, "rank {rank}: {refused:#?}");
        assert_eq!(refused.resets_sent, 0, "rank {rank}: {refused:#?}");
        assert!(refused.unproven_hellos > 0, "rank {rank}: {refused:#?}");
        refused_total += refused.unproven_hellos;
    }
    assert!(
        refused_total > sent / 10,
        "{refused_total} of {sent} Hellos counted (the rest lost in socket buffers?)"
    );
    eprintln!(
        "traffic took {traffic:?}, ending at Hello {during} of {FLOOD}; \
         {sent} sent, {refused_total} counted refused"
    );
}

/// Polls `endpoint`'s engine for 200 ms, so that it takes what is still queued for it.
fn drain(endpoint: &mut quiver::Endpoint) {
    let deadline = Instant::now() + Duration::from_millis(200);
    while Instant::now() < deadline {
        let _ = endpoint.try_recv(&mut [0u8; 8]);
    }
}

/// The attacking process: floods the targets in [`ATTACKER_ENV`] (`JOB COUNT TARGET...`)
/// with Hellos, reporting its progress every 10 ms and what it sent at the end. Does
/// nothing without the variable (a plain test run).
#[test]
fn attacker() {
    let Ok(arguments) = std::env::var(ATTACKER_ENV) else {
        return;
    };
    let mut words = arguments.split(' ');
    let job: u64 = words.next().and_then(|w| w.parse().ok()).expect("JOB");
    let count: u64 = words.next().and_then(|w| w.parse().ok()).expect("COUNT");
    let targets: Vec<SocketAddr> = words.map(|w| w.parse().expect("TARGET")).collect();
    let (stop, progress) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let reporting = {
        let (stop, progress) = (stop.clone(), progress.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                attacker::report(&format!("progress {}", progress.load(Ordering::Relaxed)));
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let sent = flood(
        job,
        targets,
        count,
        Arc::new(AtomicBool::new(false)),
        progress,
    );
    stop.store(true, Ordering::Relaxed);
    reporting.join().expect("reporter");
    attacker::report(&format!("sent {sent}"));
}
