//! Forged and replayed data frames against a running two-rank udp job, sent by another
//! process on the host (a stranger: this test binary run again, `support::attacker`):
//! frames that name the live connection's id but carry no valid authenticator, and the
//! job's own frames recorded on the wire and sent again. Each is refused and counted before
//! anything in it is used (decision 0067), no byte of them is delivered, and the job's
//! traffic completes.

mod support;

use support::attacker::{self, Attacker};

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quiver::{Addr, Config, Context, DatagramStats, FaultDirection, Faults, TransportKind};
use quiver_proto::handshake::{job_frame_key, JobKey};
use quiver_wire::frame::{
    destination, Destination, Frame, FrameHeader, FrameKey, FrameKeys, FrameType,
};

const KEY: [u8; 32] = [7; 32];
/// Set in the attacking process to the address it attacks.
const ATTACKER_ENV: &str = "QUIVER_FORGERY_ATTACKER";
/// Forged datagrams of each kind, and replayed ones.
const ATTACKS: usize = 300;

/// Every datagram rank 0 sends to rank 1, as it leaves (what an observer on the path sees).
fn recorder(from: SocketAddr, to: SocketAddr) -> (Faults, Arc<Mutex<Vec<Vec<u8>>>>) {
    let recorded = Arc::new(Mutex::new(Vec::new()));
    let in_rule = recorded.clone();
    let faults = Faults::default().with_rule(move |site| {
        if site.direction == FaultDirection::Send && site.local == from && site.peer == to {
            in_rule
                .lock()
                .expect("recorder")
                .push(site.datagram.to_vec());
        }
        None
    });
    (faults, recorded)
}

fn stats(context: &Context) -> DatagramStats {
    context.stats().datagram.expect("udp runs")
}

/// Sends `datagrams` to `to`, paced so that none is lost in the socket buffers.
fn send_all(stranger: &UdpSocket, to: SocketAddr, datagrams: &[Vec<u8>]) {
    for datagram in datagrams {
        stranger.send_to(datagram, to).expect("send");
        std::thread::sleep(Duration::from_micros(200));
    }
}

#[test]
fn forged_and_replayed_frames_are_refused_counted_and_never_delivered() {
    let addrs: Vec<SocketAddr> = (0..2)
        .map(|_| (Ipv4Addr::LOCALHOST, support::free_port(1)).into())
        .collect();
    let job = (u64::from(std::process::id()) << 20) | 0x67;
    let (faults, recorded) = recorder(addrs[0], addrs[1]);
    let config = Config {
        transports: vec![TransportKind::Udp],
        net_idle_timeout: Duration::from_secs(10),
        ..Config::default()
    };
    let context = |rank, faults: Faults| {
        Context::builder()
            .rank(rank)
            .size(2)
            .job_id(job)
            .job_key(KEY)
            .addrs(addrs.clone())
            .config(Config {
                faults,
                ..config.clone()
            })
            .build()
            .expect("context")
    };
    let (zero, one) = (context(0, faults), Arc::new(context(1, Faults::default())));
    let sizes = [8usize, 1400, 9000, 65_000];
    // Rank 1 in a thread of its own: the job's traffic, then (until `attacked`) taking
    // whatever arrives, counting any message delivered, then the traffic after the attack.
    // Rank 1 says when it stopped taking (`stopped`): a message sent after `attacked` but
    // before that would be taken by the loop, counted as delivered and missing after it.
    let attacked = Arc::new(AtomicBool::new(false));
    let (stopped, stopped_taking) = std::sync::mpsc::channel();
    let receiving = {
        let (one, attacked) = (one.clone(), attacked.clone());
        std::thread::spawn(move || {
            let mut receiver = one.endpoint(1).expect("endpoint");
            let mut buffer = vec![0u8; 1 << 17];
            for (index, &size) in sizes.iter().cycle().take(40).enumerate() {
                let (len, _) = receiver.recv(&mut buffer).expect("recv");
                assert_eq!(&buffer[..len], &support::pattern(size, index as u32)[..]);
            }
            let mut delivered_meanwhile = 0;
            while !attacked.load(Ordering::Acquire) {
                if receiver.try_recv(&mut buffer).is_ok() {
                    delivered_meanwhile += 1;
                }
            }
            stopped.send(()).expect("the test waits");
            for (index, &size) in sizes.iter().enumerate() {
                let (len, _) = receiver.recv(&mut buffer).expect("recv after the attack");
                assert_eq!(
                    &buffer[..len],
                    &support::pattern(size, 1_000 + index as u32)[..]
                );
            }
            delivered_meanwhile
        })
    };
    let mut sender = zero.endpoint(1).expect("endpoint");
    let to_one = sender.connect(Addr::new(1, 1)).expect("connect");
    let mut buffer = vec![0u8; 1 << 17];

    // The job's traffic, recorded on the way: small messages (full Data frames) and large
    // ones (compact Stream frames).
    for (index, &size) in sizes.iter().cycle().take(40).enumerate() {
        sender
            .send(to_one, &support::pattern(size, index as u32))
            .expect("send");
    }
    // Let the last acks land, then take what was recorded.
    for _ in 0..300 {
        let _ = sender.try_recv(&mut buffer);
        std::thread::sleep(Duration::from_millis(1));
    }
    let recorded = recorded.lock().expect("recorder").clone();
    let data: Vec<&Vec<u8>> = recorded
        .iter()
        .filter(|datagram| {
            datagram.first() == Some(&quiver_wire::frame::STREAM_TAG)
                || Frame::parse_unauthenticated(datagram)
                    .is_ok_and(|frame| frame.header().frame_type == FrameType::Data)
        })
        .collect();
    assert!(data.len() >= 10, "{} data frames recorded", data.len());
    let connection_id = recorded
        .iter()
        .find_map(|datagram| match destination(datagram) {
            Some(Destination::Id(id)) if id != 0 => Some(id),
            _ => None,
        })
        .expect("a full frame (an Ack, a Proof) to rank 1's connection");

    // Forgeries naming the live connection: recorded frames with a payload byte changed
    // (the old tag), and new Data frames under keys that are not the connection's (the
    // job's own Reset key, which any member of the job holds, and a stranger's).
    let mut forged = Vec::new();
    for index in 0..ATTACKS {
        let mut changed = data[index % data.len()].clone();
        let at = changed.len() - 1 - index % 7;
        changed[at] ^= 0x5a;
        forged.push(changed);
    }
    let job_key = job_frame_key(&JobKey::from_bytes(KEY));
    let stranger_key = FrameKey::new(&[0x99; 32]);
    for index in 0..ATTACKS {
        let key = if index % 2 == 0 {
            &job_key
        } else {
            &stranger_key
        };
        let mut header = if index % 3 == 0 {
            // A compact Stream frame: the connection's short id, stream bytes ahead.
            FrameHeader::new(FrameType::Stream, connection_id, 0)
        } else {
            let mut header = FrameHeader::new(FrameType::Data, connection_id, 0);
            header.message_len = 5;
            header
        };
        header.packet_number = 1_000 + index as u64;
        header.stream_offset = 1 << 20;
        let keys = FrameKeys {
            job: key,
            connection: Some(key),
        };
        let mut out = vec![0u8; 256];
        let len = header.emit(keys, &mut out, b"evil!").expect("emit");
        out.truncate(len);
        out.extend_from_slice(b"evil!");
        forged.push(out);
    }
    let mut stranger = Attacker::spawn("attacker", ATTACKER_ENV, &addrs[1].to_string());
    assert_ne!(stranger.id(), std::process::id());
    let before = stats(&one);
    stranger.send(&forged);
    std::thread::sleep(Duration::from_millis(100));
    let after_forgeries = stats(&one);
    let refused = after_forgeries.corrupt_dropped - before.corrupt_dropped;
    assert!(
        refused as usize >= forged.len() * 9 / 10,
        "{refused} of {} forged datagrams counted: {after_forgeries:#?}",
        forged.len()
    );

    // Replays: the job's own recorded frames, byte for byte.
    let replays: Vec<Vec<u8>> = data
        .iter()
        .cycle()
        .take(ATTACKS)
        .map(|datagram| datagram.to_vec())
        .collect();
    stranger.send(&replays);
    stranger.finish();
    std::thread::sleep(Duration::from_millis(100));
    let after_replays = stats(&one);
    let duplicates = after_replays.duplicates_dropped - after_forgeries.duplicates_dropped;
    assert!(
        duplicates as usize >= replays.len() * 9 / 10,
        "{duplicates} of {} replays counted: {after_replays:#?}",
        replays.len()
    );
    assert_eq!(
        after_replays.corrupt_dropped, after_forgeries.corrupt_dropped,
        "a replayed frame failed its tag"
    );

    // Nothing of it was delivered, and the job carries on: the next messages are the
    // sender's, intact.
    attacked.store(true, Ordering::Release);
    stopped_taking
        .recv_timeout(Duration::from_secs(60))
        .expect("rank 1 stops taking");
    for (index, &size) in sizes.iter().enumerate() {
        let message = support::pattern(size, 1_000 + index as u32);
        sender
            .send(to_one, &message)
            .expect("send after the attack");
    }
    let delivered_meanwhile = receiving.join().expect("rank 1");
    assert_eq!(
        delivered_meanwhile, 0,
        "forged or replayed frames were delivered"
    );
    assert_eq!(stats(&zero).corrupt_dropped, 0);
}

/// The attacking process: sends each batch of datagrams the test hands it to the address in
/// [`ATTACKER_ENV`], from a socket of its own. Does nothing without the variable (a plain
/// test run).
#[test]
fn attacker() {
    let Ok(target) = std::env::var(ATTACKER_ENV) else {
        return;
    };
    let target: SocketAddr = target.parse().expect("the address to attack");
    let stranger = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    attacker::batches(|batch| {
        send_all(&stranger, target, &batch);
        attacker::report("sent");
    });
}
