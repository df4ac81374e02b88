//! One side of a `quiver-bench bypass` case: this executable as `quiver-bench bypass
//! --worker CASE`, in its namespace, pinned, running the same list of tests as its peer
//! and printing what it measured as one JSON line.
//!
//! - quiver (udp with sockets, udp with io_uring, xdp): one connection through the public
//!   API, the job from `quiver run`'s variables (`Context::from_env`);
//! - raw-udp: a connected, non-blocking, busy-polled UDP socket, one `send` per datagram
//!   (datagrams of at most the link's MTU; no protocol, nothing resent);
//! - raw-xdp: `raw_xdp`'s AF_XDP ping-pong for latency, and its one-way stream of frames
//!   (no protocol, nothing resent; frames lost are counted) for the rate and bandwidth.
//!
//! The tests, in order: latency (ping-pong, half the round trip) of each `--lat-sizes`,
//! the message rate of `--rate-size` messages streamed one way, and the bandwidth of each
//! `--bw-sizes` streamed one way; each side reports its own CPU time (user + system,
//! `getrusage`) over each test.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use quiver::{Addr, Connection, Context, Endpoint};
use serde::{Deserialize, Serialize};

use super::plan::{BypassArgs, Case, RAW_PORT};
use super::raw_xdp::RawXdp;
use crate::stripe::plan::link_address;
use crate::stripe::worker::{cpu_seconds, monotonic_ns};

/// What one side measured in one test.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Measure {
    /// "latency", "rate" or "bandwidth".
    pub(crate) test: String,
    /// Message bytes.
    pub(crate) size: usize,
    /// Messages (latency: round trips) the test counted; for raw-udp streams, those that
    /// arrived.
    pub(crate) count: u64,
    /// Wall time of the test at rank 0 (ns).
    pub(crate) elapsed_ns: u64,
    /// Latency: the median one-way time (half a round trip), ns.
    pub(crate) one_way_ns: Option<f64>,
    /// This side's CPU time over the test (s).
    pub(crate) cpu_s: f64,
    /// Raw AF_XDP streams, sender: frames sent.
    #[serde(default)]
    pub(crate) frames_sent: Option<u64>,
    /// Raw AF_XDP streams, receiver: frames counted.
    #[serde(default)]
    pub(crate) frames_received: Option<u64>,
    /// Raw AF_XDP streams, receiver: frames the kernel dropped at its socket.
    #[serde(default)]
    pub(crate) socket_drops: Option<u64>,
}

/// One side's report: a JSON line on stdout.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RankReport {
    pub(crate) rank: u32,
    pub(crate) measures: Vec<Measure>,
}

/// The test list both sides run, in order.
#[derive(Debug, Clone, Copy)]
enum Test {
    Latency(usize),
    Rate(usize),
    Bandwidth(usize),
}

fn tests(args: &BypassArgs) -> Vec<Test> {
    let mut list: Vec<Test> = args.lat_sizes.iter().map(|&s| Test::Latency(s)).collect();
    list.push(Test::Rate(args.rate_size));
    list.extend(args.bw_sizes.iter().map(|&s| Test::Bandwidth(s)));
    list
}

/// Messages a test moves: round trips (besides the warm-up), or messages streamed.
fn count_of(test: Test, args: &BypassArgs) -> u64 {
    match test {
        Test::Latency(_) => args.lat_iters,
        Test::Rate(_) => args.rate_count,
        Test::Bandwidth(size) => (args.bw_bytes / size as u64).max(4),
    }
}

/// A reliable message channel between the two sides (quiver, or raw-xdp's ping-pong).
trait Channel {
    fn send(&mut self, message: &[u8]) -> Result<(), String>;
    fn recv(&mut self, buf: &mut [u8]) -> Result<usize, String>;
}

struct QuiverChannel {
    endpoint: Endpoint,
    connection: Connection,
}

impl Channel for QuiverChannel {
    fn send(&mut self, message: &[u8]) -> Result<(), String> {
        self.endpoint
            .send(self.connection, message)
            .map_err(|e| format!("send: {e}"))
    }

    fn recv(&mut self, buf: &mut [u8]) -> Result<usize, String> {
        self.endpoint
            .recv(buf)
            .map(|(n, _)| n)
            .map_err(|e| format!("recv: {e}"))
    }
}

impl Channel for RawXdp {
    fn send(&mut self, message: &[u8]) -> Result<(), String> {
        self.send_datagram(message);
        Ok(())
    }

    fn recv(&mut self, buf: &mut [u8]) -> Result<usize, String> {
        self.recv_datagram(buf, Duration::from_secs(5))
    }
}

/// Runs this side of `case`; prints its report.
pub(crate) fn run_worker(case: Case, rank: u32, args: &BypassArgs) -> Result<(), String> {
    let report = match case {
        Case::QuiverUdpSockets | Case::QuiverUdpUring | Case::QuiverXdp => {
            let context = Context::from_env().map_err(|e| format!("context: {e}"))?;
            let mut endpoint = context.endpoint(0).map_err(|e| format!("endpoint: {e}"))?;
            let connection = endpoint
                .connect(Addr::new(1 - rank, 0))
                .map_err(|e| format!("connect: {e}"))?;
            let mut channel = QuiverChannel {
                endpoint,
                connection,
            };
            if case == Case::QuiverUdpUring
                && context.link_stats().first().and_then(|l| l.uring).is_none()
            {
                return Err("io_uring was refused here: the link fell back to sockets".into());
            }
            run_reliable(&mut channel, rank, args, true)?
        }
        Case::RawXdp => {
            let mut xdp = RawXdp::open(rank, args.mtu)?;
            let mut report = run_reliable(&mut xdp, rank, args, false)?;
            report
                .measures
                .extend(run_raw_xdp_streams(&mut xdp, rank, args)?);
            report
        }
        Case::RawUdp => run_raw_udp(rank, args)?,
    };
    println!(
        "{}",
        serde_json::to_string(&report).map_err(|e| e.to_string())?
    );
    Ok(())
}

/// The tests over a reliable channel (streams only when `streams`).
fn run_reliable(
    channel: &mut dyn Channel,
    rank: u32,
    args: &BypassArgs,
    streams: bool,
) -> Result<RankReport, String> {
    let mut buf = vec![0u8; 4 << 20];
    // Both sides are up and the connection is open.
    if rank == 0 {
        channel.send(b"go")?;
        channel.recv(&mut buf)?;
    } else {
        channel.recv(&mut buf)?;
        channel.send(b"go")?;
    }
    let mut measures = Vec::new();
    for test in tests(args) {
        let count = count_of(test, args);
        let (size, name) = match test {
            Test::Latency(size) => (size, "latency"),
            Test::Rate(_) | Test::Bandwidth(_) if !streams => continue,
            Test::Rate(size) => (size, "rate"),
            Test::Bandwidth(size) => (size, "bandwidth"),
        };
        let message = vec![0x5au8; size];
        let cpu = cpu_seconds();
        let start = monotonic_ns();
        let mut one_way_ns = None;
        match (test, rank) {
            (Test::Latency(_), 0) => {
                let warm = (count / 10).max(10);
                let mut rtts = Vec::with_capacity(count as usize);
                for i in 0..warm + count {
                    let t0 = monotonic_ns();
                    channel.send(&message)?;
                    channel.recv(&mut buf)?;
                    if i >= warm {
                        rtts.push(monotonic_ns() - t0);
                    }
                }
                rtts.sort_unstable();
                one_way_ns = Some(rtts[rtts.len() / 2] as f64 / 2.0);
            }
            (Test::Latency(_), _) => {
                let warm = (count / 10).max(10);
                for _ in 0..warm + count {
                    let n = channel.recv(&mut buf)?;
                    channel.send(&message[..n.min(size)])?;
                }
            }
            (_, 0) => {
                for _ in 0..count {
                    channel.send(&message)?;
                }
                channel.recv(&mut buf)?;
            }
            (_, _) => {
                for _ in 0..count {
                    channel.recv(&mut buf)?;
                }
                channel.send(b"done")?;
            }
        }
        measures.push(Measure {
            test: name.into(),
            size,
            count: done(test, count),
            elapsed_ns: monotonic_ns() - start,
            one_way_ns,
            cpu_s: cpu_seconds() - cpu,
            frames_sent: None,
            frames_received: None,
            socket_drops: None,
        });
    }
    Ok(RankReport { rank, measures })
}

/// The rate and bandwidth tests as raw AF_XDP streams, after the ping-pong: each message
/// of the rate test is one frame of its size, each of a bandwidth test as many full-MTU
/// frames as its bytes need (as raw-udp sends them).
fn run_raw_xdp_streams(
    xdp: &mut RawXdp,
    rank: u32,
    args: &BypassArgs,
) -> Result<Vec<Measure>, String> {
    let max_payload = (args.mtu as usize).saturating_sub(28).max(64);
    let mut measures = Vec::new();
    for test in tests(args) {
        let (name, size) = match test {
            Test::Latency(_) => continue,
            Test::Rate(size) => ("rate", size),
            Test::Bandwidth(size) => ("bandwidth", size),
        };
        let count = count_of(test, args);
        let payload = size.min(max_payload).max(8);
        let per_message = size.div_ceil(payload).max(1) as u64;
        let cpu = cpu_seconds();
        let start = monotonic_ns();
        let mut measure = Measure {
            test: name.into(),
            size,
            count: 0,
            elapsed_ns: 0,
            one_way_ns: None,
            cpu_s: 0.0,
            frames_sent: None,
            frames_received: None,
            socket_drops: None,
        };
        if rank == 0 {
            let (sent, counted) = xdp.stream_send(payload, count * per_message)?;
            measure.count = counted / per_message;
            measure.frames_sent = Some(sent);
        } else {
            let received = xdp.stream_receive()?;
            measure.count = received.frames / per_message;
            measure.frames_received = Some(received.frames);
            measure.socket_drops = Some(received.socket_drops);
        }
        measure.elapsed_ns = monotonic_ns() - start;
        measure.cpu_s = cpu_seconds() - cpu;
        if let Some(frames) = measure.frames_received {
            xdp.answer_late_markers(frames, Duration::from_millis(30));
        } else {
            // Let the receiver's late answers come and go before the next test.
            std::thread::sleep(Duration::from_millis(40));
            xdp.drain();
        }
        measures.push(measure);
    }
    Ok(measures)
}

/// What a test did for its CPU time: latency's round trips include the warm-up ones.
fn done(test: Test, count: u64) -> u64 {
    match test {
        Test::Latency(_) => count + (count / 10).max(10),
        _ => count,
    }
}

/// Spins on a non-blocking receive until a datagram arrives or `deadline`.
fn spin_recv(socket: &UdpSocket, buf: &mut [u8], deadline: Instant) -> Result<usize, String> {
    let mut spins = 0u32;
    loop {
        match socket.recv(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(format!("raw-udp recv: {e}")),
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(4096) && Instant::now() >= deadline {
            return Err("raw-udp: nothing arrived in time".into());
        }
    }
}

/// Rank `rank`'s raw-udp socket, connected to the other's, once both are there.
fn open_raw_udp(rank: u32) -> Result<UdpSocket, String> {
    let local = link_address(0, rank, RAW_PORT);
    let peer: SocketAddr = link_address(0, 1 - rank, RAW_PORT);
    let socket = UdpSocket::bind(local).map_err(|e| format!("raw-udp bind {local}: {e}"))?;
    socket.connect(peer).map_err(|e| format!("raw-udp: {e}"))?;
    socket
        .set_nonblocking(true)
        .map_err(|e| format!("raw-udp: {e}"))?;
    let _ = quiver_transport::udp::set_buffer_sizes(
        std::os::fd::AsFd::as_fd(&socket),
        8 << 20,
        8 << 20,
    );
    let mut buf = vec![0u8; 64];
    let long = || Instant::now() + Duration::from_secs(10);
    // Both sides are up: rank 0 knocks until rank 1 answers.
    if rank == 0 {
        loop {
            let _ = socket.send(b"go");
            if spin_recv(
                &socket,
                &mut buf,
                Instant::now() + Duration::from_millis(20),
            )
            .is_ok()
            {
                break;
            }
        }
    } else {
        spin_recv(&socket, &mut buf, long())?;
        let _ = socket.send(b"go");
    }
    // Late knocks of rank 0 must not be taken for data: rank 1 drains them before rank 0
    // (which waits longer) sends its first ping.
    std::thread::sleep(Duration::from_millis(if rank == 0 { 120 } else { 30 }));
    while socket.recv(&mut buf).is_ok() {}
    Ok(socket)
}

/// Sends `datagrams` datagrams of `datagram` bytes, then end markers until the receiver
/// answers; returns the datagrams it counted.
fn raw_stream_send(socket: &UdpSocket, datagram: usize, datagrams: u64, buf: &mut [u8]) -> u64 {
    let message = vec![0x5au8; datagram];
    for _ in 0..datagrams {
        while let Err(e) = socket.send(&message) {
            if e.kind() != std::io::ErrorKind::WouldBlock {
                break;
            }
        }
    }
    loop {
        let _ = socket.send(&[0u8; END_MARKER]);
        let deadline = Instant::now() + Duration::from_millis(5);
        if let Ok(8) = spin_recv(socket, buf, deadline) {
            break u64::from_be_bytes(buf[..8].try_into().expect("8 bytes"));
        }
    }
}

/// Counts datagrams until an end marker, and answers it with the count.
fn raw_stream_receive(socket: &UdpSocket, buf: &mut [u8]) -> Result<u64, String> {
    let mut datagrams = 0u64;
    loop {
        let n = spin_recv(socket, buf, Instant::now() + Duration::from_secs(10))?;
        if n == END_MARKER {
            break;
        }
        datagrams += 1;
    }
    let _ = socket.send(&datagrams.to_be_bytes());
    Ok(datagrams)
}

/// The end of a raw-udp stream: a datagram of this many bytes (no data datagram is).
const END_MARKER: usize = 7;

/// The tests over plain udp sockets.
fn run_raw_udp(rank: u32, args: &BypassArgs) -> Result<RankReport, String> {
    let socket = open_raw_udp(rank)?;
    let max_datagram = (args.mtu as usize).saturating_sub(28).max(64);
    let mut buf = vec![0u8; 65_536];
    let long = || Instant::now() + Duration::from_secs(10);
    let mut measures = Vec::new();
    for test in tests(args) {
        let count = count_of(test, args);
        let cpu = cpu_seconds();
        let start = monotonic_ns();
        let (name, size) = match test {
            Test::Latency(size) => ("latency", size),
            Test::Rate(size) => ("rate", size),
            Test::Bandwidth(size) => ("bandwidth", size),
        };
        let mut one_way_ns = None;
        let mut counted = count;
        // Rank 1 after a stream: what it answered the end markers with.
        let mut answer = None;
        match (test, rank) {
            (Test::Latency(size), 0) => {
                let message = vec![0x5au8; size];
                let warm = (count / 10).max(10);
                let mut rtts = Vec::with_capacity(count as usize);
                for i in 0..warm + count {
                    let t0 = monotonic_ns();
                    socket.send(&message).map_err(|e| format!("raw-udp: {e}"))?;
                    spin_recv(&socket, &mut buf, long())?;
                    if i >= warm {
                        rtts.push(monotonic_ns() - t0);
                    }
                }
                rtts.sort_unstable();
                one_way_ns = Some(rtts[rtts.len() / 2] as f64 / 2.0);
            }
            (Test::Latency(_), _) => {
                let warm = (count / 10).max(10);
                for _ in 0..warm + count {
                    let n = spin_recv(&socket, &mut buf, long())?;
                    let _ = socket.send(&buf[..n]);
                }
            }
            // A message larger than a datagram goes as several (each `send` one).
            (_, 0) => {
                let per_message = size.div_ceil(size.min(max_datagram).max(8)).max(1) as u64;
                counted = raw_stream_send(
                    &socket,
                    size.min(max_datagram).max(8),
                    count * per_message,
                    &mut buf,
                ) / per_message;
            }
            (_, _) => {
                let datagrams = raw_stream_receive(&socket, &mut buf)?;
                answer = Some(datagrams);
                counted = datagrams / size.div_ceil(size.min(max_datagram).max(8)).max(1) as u64;
            }
        }
        measures.push(Measure {
            test: name.into(),
            size,
            count: done(test, counted),
            elapsed_ns: monotonic_ns() - start,
            one_way_ns,
            cpu_s: cpu_seconds() - cpu,
            frames_sent: None,
            frames_received: None,
            socket_drops: None,
        });
        if let Some(datagrams) = answer {
            // Repeated end markers: answer them too, until the next test's traffic.
            let quiet = Instant::now() + Duration::from_millis(30);
            while Instant::now() < quiet {
                if let Ok(END_MARKER) = socket.recv(&mut buf) {
                    let _ = socket.send(&u64::to_be_bytes(datagrams));
                }
            }
        }
        if rank == 0 && !matches!(test, Test::Latency(_)) {
            // Let the receiver's late answers drain before the next test.
            std::thread::sleep(Duration::from_millis(40));
            while socket.recv(&mut buf).is_ok() {}
        }
    }
    Ok(RankReport { rank, measures })
}
