//! `quiver-bench wire`: what quiver's frame format costs by itself, measured as a floor
//! under the udp transport's figures. Two threads pinned to the bench's CPUs exchange
//! datagrams over 127.0.0.1 through plain busy-polling udp sockets, as raw-udp does, with
//! no protocol at all (no sequence numbers kept, no acks, no retransmission, no windows
//! but the stream's own), in blocks of several variants interleaved in one run:
//!
//! - **latency** (8-byte ping-pong, one way = round trip / 2):
//!   - `plain`: the 8 bytes alone, as raw-udp sends them;
//!   - `stream`: behind quiver's 16-byte Stream frame header, the most compact frame
//!     (no acknowledgement fields);
//!   - `data`: behind the full Data frame header a quiver answer carries (acknowledgement,
//!     credit and message fields).
//!
//!   A framed message is copied next to its header, the header is written with its check
//!   (`FrameHeader::emit`), and the datagram leaves with one `send`; the other side
//!   verifies it (`Frame::parse_for`) and copies the payload out. That is quiver's
//!   latency path without the protocol core and the engine.
//! - **bandwidth** (1 MiB messages in windows; udp in 65016-byte datagrams, one
//!   `sendmmsg` and `recvmmsg` per message where the socket takes it, as quiver's engine
//!   batches them):
//!   - `plain`: message bytes alone;
//!   - `checked`: a 16-byte Stream header with its check and 65000 message bytes, sent
//!     gathered from the message in place and received scattered straight into the
//!     destination, then verified (`frame::parse_stream_split`): quiver's bulk path's
//!     integrity check, without the protocol;
//!   - `tcp`: the same messages over one plain TCP connection (raw-tcp's stream, with a
//!     `poll` before each read and write).
//!
//! Each pair of blocks runs every variant once, in an order rotated from pair to pair; the
//! ratio of a variant is taken against the plain block of the same pair (and `checked`
//! also against `tcp`) and summarised by its median over the pairs, with the
//! distribution-free 95% interval of that median. These are floors for the targets quiver's
//! udp is held to against raw sockets: it can be no faster than its frames over plain
//! sockets.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use quiver_wire::frame::{self, Frame, FrameHeader, FrameKey, FrameKeys, FrameType};

use quiver_cli::bench::floor::pin_current_thread;
use quiver_cli::bench::parent::{choose_cpus, open_report};
use quiver_cli::bench::plan::Transport;
use quiver_cli::bench::raw::{page_aligned, ready, spin, would_block, PAGE_BYTES};
use quiver_cli::bench::report::Report;
use quiver_cli::bench::stats::{median, sort_samples};
use serde::Serialize;

use crate::bench::paired::CONFIDENCE;
use crate::bench::MAX_INTERLEAVE_PAIRS;
use crate::stats::median_interval;

/// The frame key of both sides (quiver's connections have one per direction: the same
/// work per frame).
static BENCH_KEY: std::sync::LazyLock<FrameKey> =
    std::sync::LazyLock::new(|| FrameKey::new(&[0x51; frame::FRAME_SECRET_LEN]));

/// The keys the floors emit and verify frames under.
fn bench_keys() -> FrameKeys<'static> {
    FrameKeys {
        job: &BENCH_KEY,
        connection: Some(&BENCH_KEY),
    }
}

/// Round trips per latency block unless `--iters` says otherwise.
const DEFAULT_ROUND_TRIPS: u64 = 3000;
/// Largest `--iters`.
const MAX_ITERS: u64 = 10_000_000;
/// Pairs of blocks unless `--rounds` says otherwise.
const DEFAULT_PAIRS: u32 = 20;
/// Size of the latency test's message.
const LATENCY_BYTES: usize = 8;
/// Untimed round trips before each latency block.
const WARMUP_ROUND_TRIPS: u64 = 200;
/// Size of the bandwidth test's messages.
const BANDWIDTH_MESSAGE_BYTES: usize = 1 << 20;
/// Messages per bandwidth block (with `--iters`: a tenth of it, at least one).
const BANDWIDTH_MESSAGES: u64 = 128;
/// Bytes of each bandwidth datagram (quiver's bulk datagrams: 65000 payload bytes behind
/// a 16-byte Stream header).
const DATAGRAM_BYTES: usize = 65_016;
/// Message bytes in one checked datagram.
const CHECKED_PAYLOAD_BYTES: usize = DATAGRAM_BYTES - frame::STREAM_HEADER_LEN;
/// Socket buffers asked for (forced when allowed), per socket and direction.
const SOCKET_BUFFER_BYTES: usize = 64 << 20;
/// Connection ids the framed variants address (any two distinct ids).
const IDS: [u64; 2] = [0x5157_0001_0000_0a0a, 0x5157_0002_0000_0b0b];

/// What one latency block sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Latency {
    Plain,
    Stream,
    Data,
}

impl Latency {
    const ALL: [Latency; 3] = [Latency::Plain, Latency::Stream, Latency::Data];

    fn name(self) -> &'static str {
        match self {
            Latency::Plain => "plain",
            Latency::Stream => "stream",
            Latency::Data => "data",
        }
    }
}

/// What one bandwidth block sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bulk {
    Plain,
    Checked,
    Tcp,
}

impl Bulk {
    const ALL: [Bulk; 3] = [Bulk::Plain, Bulk::Checked, Bulk::Tcp];

    fn name(self) -> &'static str {
        match self {
            Bulk::Plain => "plain",
            Bulk::Checked => "checked",
            Bulk::Tcp => "tcp",
        }
    }

    /// A udp variant's message bytes per datagram and header bytes before them; None for
    /// tcp.
    fn datagram_layout(self) -> Option<(usize, usize)> {
        match self {
            Bulk::Plain => Some((DATAGRAM_BYTES, 0)),
            Bulk::Checked => Some((CHECKED_PAYLOAD_BYTES, frame::STREAM_HEADER_LEN)),
            Bulk::Tcp => None,
        }
    }
}

/// The variants of pair `pair`, in the order they run (rotated from pair to pair, so each
/// variant goes first, second, ... equally often).
fn pair_order<T: Copy>(all: &[T], pair: u32) -> Vec<T> {
    let start = pair as usize % all.len().max(1);
    all.iter()
        .cycle()
        .skip(start)
        .take(all.len())
        .copied()
        .collect()
}

/// One side's sockets: data (both ways), acknowledgements of bandwidth windows, and the
/// tcp connection of the `tcp` bandwidth variant.
struct Side {
    data: UdpSocket,
    acks: UdpSocket,
    stream: TcpStream,
    /// This side's connection id, and the other's (framed variants).
    id: u64,
    peer_id: u64,
    /// Packets this side sent (framed variants number them).
    sent: u64,
    received: u64,
    staging: Vec<u8>,
}

/// Binds one udp socket on 127.0.0.1 with large buffers, non-blocking.
fn bind() -> io::Result<(UdpSocket, usize)> {
    let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
    let (_, receive) = quiver_transport::udp::set_buffer_sizes(
        socket.as_fd(),
        SOCKET_BUFFER_BYTES,
        SOCKET_BUFFER_BYTES,
    )?;
    socket.set_nonblocking(true)?;
    Ok((socket, receive))
}

/// Two connected sides, and the smaller receive buffer the kernel granted.
fn open_pair() -> io::Result<([Side; 2], usize)> {
    let (data_a, receive_a) = bind()?;
    let (data_b, receive_b) = bind()?;
    let (acks_a, _) = bind()?;
    let (acks_b, _) = bind()?;
    data_a.connect(data_b.local_addr()?)?;
    data_b.connect(data_a.local_addr()?)?;
    acks_a.connect(acks_b.local_addr()?)?;
    acks_b.connect(acks_a.local_addr()?)?;
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let stream_a = TcpStream::connect(listener.local_addr()?)?;
    let (stream_b, _) = listener.accept()?;
    for stream in [&stream_a, &stream_b] {
        stream.set_nodelay(true)?;
        stream.set_nonblocking(true)?;
    }
    let side = |data, acks, stream, id: usize| Side {
        data,
        acks,
        stream,
        id: IDS[id],
        peer_id: IDS[1 - id],
        sent: 0,
        received: 0,
        staging: vec![0u8; 2048],
    };
    Ok((
        [
            side(data_a, acks_a, stream_a, 0),
            side(data_b, acks_b, stream_b, 1),
        ],
        receive_a.min(receive_b),
    ))
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

impl Side {
    /// Sends `message` (one datagram) as `variant` has it.
    fn send_small(&mut self, variant: Latency, message: &[u8]) -> io::Result<()> {
        let datagram_len = match variant {
            Latency::Plain => {
                let data = &self.data;
                spin("sending", || would_block(data.send(message)))?;
                return Ok(());
            }
            Latency::Stream => {
                let mut header = FrameHeader::new(FrameType::Stream, self.peer_id, 0);
                header.packet_number = self.sent;
                header.stream_offset = self.sent * message.len() as u64;
                self.emit(&header, message)?
            }
            Latency::Data => {
                let mut header = FrameHeader::new(FrameType::Data, self.peer_id, self.id);
                header.packet_number = self.sent;
                header.cumulative_ack = self.received;
                header.credit = (self.received + 64) * message.len() as u64;
                header.message_id = self.sent;
                header.message_len = message.len() as u64;
                header.stream_offset = self.sent * message.len() as u64;
                self.emit(&header, message)?
            }
        };
        self.sent += 1;
        let data = &self.data;
        let datagram = &self.staging[..datagram_len];
        let written = spin("sending", || would_block(data.send(datagram)))?;
        if written != datagram_len {
            return Err(invalid(format!("sent {written} of {datagram_len} bytes")));
        }
        Ok(())
    }

    /// Copies `message` next to `header` in the staging buffer and writes the header with
    /// its check; returns the datagram's length.
    fn emit(&mut self, header: &FrameHeader, message: &[u8]) -> io::Result<usize> {
        let header_len = header.header_len();
        let end = header_len + message.len();
        self.staging[header_len..end].copy_from_slice(message);
        let (head, rest) = self.staging.split_at_mut(header_len);
        header
            .emit(bench_keys(), head, &rest[..message.len()])
            .map_err(|error| invalid(error.to_string()))?;
        Ok(end)
    }

    /// Receives one message of `buffer.len()` bytes, sent as `variant` has it.
    fn receive_small(&mut self, variant: Latency, buffer: &mut [u8]) -> io::Result<()> {
        let data = &self.data;
        if variant == Latency::Plain {
            let received = spin("receiving", || would_block(data.recv(buffer)))?;
            if received != buffer.len() {
                return Err(invalid(format!("a {received}-byte datagram")));
            }
            return Ok(());
        }
        let staging = &mut self.staging;
        let received = spin("receiving", || would_block(data.recv(staging)))?;
        let parsed = Frame::parse_for(&self.staging[..received], self.id, bench_keys())
            .map_err(|error| invalid(format!("a frame that does not verify: {error}")))?;
        let expected = match variant {
            Latency::Stream => FrameType::Stream,
            _ => FrameType::Data,
        };
        if parsed.header().frame_type != expected || parsed.payload().len() != buffer.len() {
            return Err(invalid(format!(
                "a {:?} frame of {} bytes",
                parsed.header().frame_type,
                parsed.payload().len()
            )));
        }
        buffer.copy_from_slice(parsed.payload());
        self.received += 1;
        Ok(())
    }

    /// Sends `message` in datagrams of [`DATAGRAM_BYTES`], checked or not (gathered with
    /// `sendmmsg`, as quiver's engine sends), or over tcp.
    fn send_bulk(&mut self, variant: Bulk, message: &[u8]) -> io::Result<()> {
        let Some((chunk_bytes, head_len)) = variant.datagram_layout() else {
            return self.send_tcp(message);
        };
        let chunks: Vec<&[u8]> = message.chunks(chunk_bytes).collect();
        let mut heads = vec![[0u8; frame::STREAM_HEADER_LEN]; chunks.len()];
        if variant == Bulk::Checked {
            let mut offset = 0u64;
            for (head, chunk) in heads.iter_mut().zip(&chunks) {
                let mut header = FrameHeader::new(FrameType::Stream, self.peer_id, 0);
                header.packet_number = self.sent;
                header.stream_offset = offset;
                header
                    .emit(bench_keys(), head, chunk)
                    .map_err(|error| invalid(error.to_string()))?;
                self.sent += 1;
                offset += chunk.len() as u64;
            }
        }
        let mut iovecs: Vec<[libc::iovec; 2]> = heads
            .iter()
            .zip(&chunks)
            .map(|(head, chunk)| [iovec(&head[..head_len]), iovec(chunk)])
            .collect();
        let mut messages: Vec<libc::mmsghdr> = iovecs.iter_mut().map(message_header).collect();
        let fd = self.data.as_raw_fd();
        let mut done = 0;
        while done < messages.len() {
            let rest = &mut messages[done..];
            done += spin("sending", || {
                // SAFETY: every header of `rest` points at its pair of iovecs, and they at
                // `heads` and `message`, all alive and unmoved for the call; the kernel
                // only reads them and writes each header's `msg_len`.
                let sent = unsafe {
                    libc::sendmmsg(fd, rest.as_mut_ptr(), rest.len() as u32, libc::MSG_DONTWAIT)
                };
                would_block(checked_count(sent as isize))
            })?;
        }
        for (message, chunk) in messages.iter().zip(&chunks) {
            if message.msg_len as usize != head_len + chunk.len() {
                return Err(invalid(format!(
                    "a short datagram of {} bytes",
                    message.msg_len
                )));
            }
        }
        Ok(())
    }

    /// Receives a message of `buffer.len()` bytes sent by [`Side::send_bulk`] straight
    /// into `buffer` with `recvmmsg` (checked: each datagram's header apart, then verified).
    fn receive_bulk(&mut self, variant: Bulk, buffer: &mut [u8]) -> io::Result<()> {
        let Some((chunk_bytes, head_len)) = variant.datagram_layout() else {
            return self.receive_tcp(buffer);
        };
        let count = buffer.len().div_ceil(chunk_bytes);
        let mut heads = vec![[0u8; frame::STREAM_HEADER_LEN]; count];
        let mut iovecs: Vec<[libc::iovec; 2]> = heads
            .iter_mut()
            .zip(buffer.chunks_mut(chunk_bytes))
            .map(|(head, slot)| [iovec_mut(&mut head[..head_len]), iovec_mut(slot)])
            .collect();
        let mut messages: Vec<libc::mmsghdr> = iovecs.iter_mut().map(message_header).collect();
        let fd = self.data.as_raw_fd();
        let mut done = 0;
        while done < messages.len() {
            let rest = &mut messages[done..];
            done += spin("receiving", || {
                // SAFETY: every header of `rest` points at its pair of iovecs, and they at
                // `heads` and `buffer` (exclusively borrowed), alive and unmoved for the
                // call, with their lengths; the kernel writes at most those.
                let got = unsafe {
                    libc::recvmmsg(
                        fd,
                        rest.as_mut_ptr(),
                        rest.len() as u32,
                        libc::MSG_DONTWAIT,
                        std::ptr::null_mut(),
                    )
                };
                would_block(checked_count(got as isize))
            })?;
        }
        for ((slot, head), message) in buffer.chunks(chunk_bytes).zip(&heads).zip(&messages) {
            let length = message.msg_len as usize;
            let truncated = message.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            if truncated || length != head_len + slot.len() {
                return Err(invalid(format!(
                    "a {length}-byte datagram, {} expected",
                    head_len + slot.len()
                )));
            }
            if variant == Bulk::Checked {
                frame::parse_stream_split(head, slot, self.id, bench_keys())
                    .map_err(|error| invalid(format!("a frame that does not verify: {error}")))?;
            }
            self.received += 1;
        }
        Ok(())
    }

    /// Writes all of `message` to the tcp connection, waiting (with `poll`, as raw-tcp
    /// does) while its send buffer is full.
    fn send_tcp(&mut self, message: &[u8]) -> io::Result<()> {
        let mut written = 0;
        while written < message.len() {
            let stream = &mut self.stream;
            written += spin("writing", || {
                if !ready(stream, libc::POLLOUT)? {
                    return Ok(None);
                }
                would_block(stream.write(&message[written..]))
            })?;
        }
        Ok(())
    }

    /// Reads exactly `buffer.len()` bytes from the tcp connection straight into `buffer`,
    /// looking with `poll` before each read (as raw-tcp does).
    fn receive_tcp(&mut self, buffer: &mut [u8]) -> io::Result<()> {
        let mut filled = 0;
        while filled < buffer.len() {
            let stream = &mut self.stream;
            let got = spin("reading", || {
                if !ready(stream, libc::POLLIN)? {
                    return Ok(None);
                }
                would_block(stream.read(&mut buffer[filled..]))
            })?;
            if got == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the tcp connection closed",
                ));
            }
            filled += got;
        }
        Ok(())
    }

    /// Tells the sender a window arrived whole.
    fn send_window_ack(&mut self) -> io::Result<()> {
        let acks = &self.acks;
        spin("acknowledging a window", || would_block(acks.send(&[1])))?;
        Ok(())
    }

    fn wait_window_ack(&mut self) -> io::Result<()> {
        let acks = &self.acks;
        let mut byte = [0u8; 1];
        spin("waiting for a window's acknowledgement", || {
            would_block(acks.recv(&mut byte))
        })?;
        Ok(())
    }
}

/// An iovec over `bytes`, which the kernel only reads (the pointer type is the ABI's).
fn iovec(bytes: &[u8]) -> libc::iovec {
    libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    }
}

/// An iovec over `bytes`, which the kernel may write.
fn iovec_mut(bytes: &mut [u8]) -> libc::iovec {
    libc::iovec {
        iov_base: bytes.as_mut_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    }
}

/// A `sendmmsg`/`recvmmsg` header for one datagram of the two pieces `pair`.
fn message_header(pair: &mut [libc::iovec; 2]) -> libc::mmsghdr {
    // SAFETY: mmsghdr is plain data; all-zero is a valid empty header.
    let mut header: libc::mmsghdr = unsafe { std::mem::zeroed() };
    header.msg_hdr.msg_iov = pair.as_mut_ptr();
    header.msg_hdr.msg_iovlen = pair.len();
    header
}

/// A syscall's count, or its error.
fn checked_count(result: isize) -> io::Result<usize> {
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(result as usize)
}

/// What the measuring side (CPU A) found: one-way latency per latency block and MB/s per
/// bandwidth block, by pair.
#[derive(Debug, Default)]
struct Found {
    latency_us: Vec<Vec<(Latency, f64)>>,
    bandwidth_mbps: Vec<Vec<(Bulk, f64)>>,
}

/// Command line of `quiver-bench wire`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct WireArgs {
    /// Pairs of blocks (every variant once per pair) [default: 20, at most 1000]; 6 or
    /// more give a 95% interval of each ratio.
    #[arg(long, value_name = "N")]
    rounds: Option<u32>,

    /// Round trips per latency block [default: 3000]; bandwidth blocks send a tenth as many
    /// 1 MiB messages (at least one) [default: 128].
    #[arg(long, value_name = "N")]
    iters: Option<u64>,

    /// The two CPUs of the two threads, e.g. 0,1 [default: the first two allowed].
    #[arg(long, value_name = "A,B")]
    cpus: Option<String>,

    /// Also write one JSON object per block to FILE; with `-`, write only JSON to stdout
    /// (no table).
    #[arg(long, value_name = "FILE|-")]
    json: Option<String>,
}

/// Runs `quiver-bench wire`; returns the process exit code (0 ok, 1 failed, 2 bad usage).
pub(crate) fn main(args: &WireArgs) -> i32 {
    let plan = match plan_from_args(args) {
        Ok(plan) => plan,
        Err(message) => {
            eprintln!("quiver-bench wire: {message}");
            return 2;
        }
    };
    let result =
        open_report(args.json.as_deref()).and_then(|mut report: Report| run(plan, &mut report));
    match result {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("quiver-bench wire: {message}");
            1
        }
    }
}

/// Validates the command line into a plan.
fn plan_from_args(args: &WireArgs) -> Result<WirePlan, String> {
    if args
        .rounds
        .is_some_and(|rounds| !(1..=MAX_INTERLEAVE_PAIRS).contains(&rounds))
    {
        return Err(format!(
            "--rounds must be between 1 and {MAX_INTERLEAVE_PAIRS}"
        ));
    }
    if args
        .iters
        .is_some_and(|iters| !(1..=MAX_ITERS).contains(&iters))
    {
        return Err(format!("--iters must be between 1 and {MAX_ITERS}"));
    }
    let cpus = choose_cpus(args.cpus.as_deref())?;
    Ok(WirePlan::new(args.rounds, args.iters, cpus))
}

/// One block's JSON record: `test` = "wire", the variant, its pair as `round`, and its
/// figure (latency, or window and bandwidth).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "test", rename = "wire")]
struct WireBlock {
    /// raw-udp, or raw-tcp for the `tcp` bandwidth variant.
    transport: Transport,
    /// Message size in bytes.
    size: u64,
    /// Round trips (latency) or messages (bandwidth) of the block.
    iters: u64,
    /// The variant: plain, stream, data; plain, checked, tcp.
    variant: &'static str,
    /// The pair of blocks.
    round: u32,
    /// The two threads' CPUs.
    cpus: [usize; 2],
    /// What the block measured.
    #[serde(flatten)]
    figure: WireFigure,
}

/// What a wire block measured.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
enum WireFigure {
    /// Median one-way latency, µs.
    Latency {
        /// Median one-way latency, µs.
        latency_us: f64,
    },
    /// Bandwidth in windows of messages, MB/s.
    Bandwidth {
        /// Messages per window.
        window: u64,
        /// MB/s (10^6 bytes/s).
        #[serde(rename = "bandwidth_MBps")]
        bandwidth_mbps: f64,
    },
}

/// The parameters of one run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WirePlan {
    pub(crate) pairs: u32,
    pub(crate) round_trips: u64,
    pub(crate) messages: u64,
    pub(crate) cpus: [usize; 2],
}

impl WirePlan {
    /// From `--rounds` and `--iters` (round trips per latency block; bandwidth blocks get
    /// a tenth as many 1 MiB messages, at least one).
    pub(crate) fn new(rounds: Option<u32>, iters: Option<u64>, cpus: [usize; 2]) -> WirePlan {
        let round_trips = iters.unwrap_or(DEFAULT_ROUND_TRIPS).max(1);
        WirePlan {
            pairs: rounds.unwrap_or(DEFAULT_PAIRS).max(1),
            round_trips,
            messages: iters.map_or(BANDWIDTH_MESSAGES, |iters| (iters / 10).max(1)),
            cpus,
        }
    }
}

/// Runs every pair of blocks on two pinned threads and reports the summary (and one JSON
/// record per block).
pub(crate) fn run(plan: WirePlan, report: &mut Report) -> Result<(), String> {
    let (sides, receive_buffer) = open_pair().map_err(|error| format!("udp sockets: {error}"))?;
    // Two windows fit half the receive buffer even counted at twice their bytes (the
    // kernel reports twice what it grants, for its bookkeeping). 0: too small for one
    // message, and the bandwidth blocks are left out (`bulk_variants`).
    let window = (receive_buffer / 8 / BANDWIDTH_MESSAGE_BYTES).min(16) as u64;
    let [mut a, mut b] = sides;
    let barrier = Arc::new(Barrier::new(2));
    let found = std::thread::scope(|scope| {
        let barrier_b = Arc::clone(&barrier);
        let cpu_b = plan.cpus[1];
        let echo = scope.spawn(move || answer(&mut b, plan, window, cpu_b, &barrier_b));
        let measured = measure(&mut a, plan, window, &barrier);
        let echoed = echo
            .join()
            .unwrap_or_else(|_| Err("the answering thread panicked".to_string()));
        measured.and_then(|found| echoed.map(|()| found))
    })?;
    summarise(&found, plan, window, report).map_err(|error| format!("writing the report: {error}"))
}

/// The bandwidth variants a window of `window` messages allows: none when the receive
/// buffers cannot hold one 1 MiB message without loss.
fn bulk_variants(window: u64) -> &'static [Bulk] {
    if window == 0 {
        &[]
    } else {
        &Bulk::ALL
    }
}

/// The measuring side (CPU A): sends, times, and keeps the figures.
fn measure(a: &mut Side, plan: WirePlan, window: u64, barrier: &Barrier) -> Result<Found, String> {
    let pinned = pin_current_thread(plan.cpus[0]);
    // Both threads pass the barrier whatever happens, so neither waits there forever.
    barrier.wait();
    pinned.map_err(|error| error.to_string())?;
    let mut found = Found::default();
    let message = [0x5au8; LATENCY_BYTES];
    let mut echo = [0u8; LATENCY_BYTES];
    let mut stamps = Vec::with_capacity(plan.round_trips as usize);
    // Page-aligned, as raw-tcp's and raw-udp's (see `raw::page_aligned`).
    let mut bulk_storage = vec![0u8; BANDWIDTH_MESSAGE_BYTES + PAGE_BYTES];
    let bulk = page_aligned(&mut bulk_storage, BANDWIDTH_MESSAGE_BYTES);
    for (index, byte) in bulk.iter_mut().enumerate() {
        *byte = index as u8;
    }
    let bulk = &*bulk;
    let fail = |what: &str, error: io::Error| format!("{what}: {error}");
    for pair in 0..plan.pairs {
        let mut row = Vec::new();
        for variant in pair_order(&Latency::ALL, pair) {
            stamps.clear();
            for round in 0..WARMUP_ROUND_TRIPS + plan.round_trips {
                let start = Instant::now();
                a.send_small(variant, &message)
                    .and_then(|()| a.receive_small(variant, &mut echo))
                    .map_err(|error| fail(variant.name(), error))?;
                if round >= WARMUP_ROUND_TRIPS {
                    stamps.push(start.elapsed().as_secs_f64() * 1e6 / 2.0);
                }
            }
            if echo != message {
                return Err(format!("{}: the echo differs", variant.name()));
            }
            sort_samples(&mut stamps);
            row.push((variant, median(&stamps).unwrap_or(f64::NAN)));
        }
        found.latency_us.push(row);
        let mut row = Vec::new();
        for variant in pair_order(bulk_variants(window), pair) {
            let start = Instant::now();
            let mut sent = 0;
            while sent < plan.messages {
                let count = window.min(plan.messages - sent);
                for _ in 0..count {
                    a.send_bulk(variant, bulk)
                        .map_err(|error| fail(variant.name(), error))?;
                }
                a.wait_window_ack()
                    .map_err(|error| fail(variant.name(), error))?;
                sent += count;
            }
            let seconds = start.elapsed().as_secs_f64();
            let bytes = (plan.messages as usize * BANDWIDTH_MESSAGE_BYTES) as f64;
            row.push((variant, bytes / seconds / 1e6));
        }
        found.bandwidth_mbps.push(row);
    }
    Ok(found)
}

/// The answering side (CPU B): echoes the ping-pongs, receives the streams.
fn answer(
    b: &mut Side,
    plan: WirePlan,
    window: u64,
    cpu: usize,
    barrier: &Barrier,
) -> Result<(), String> {
    let pinned = pin_current_thread(cpu);
    barrier.wait();
    pinned.map_err(|error| error.to_string())?;
    let mut message = [0u8; LATENCY_BYTES];
    let mut bulk_storage = vec![0u8; BANDWIDTH_MESSAGE_BYTES + PAGE_BYTES];
    let bulk = page_aligned(&mut bulk_storage, BANDWIDTH_MESSAGE_BYTES);
    let fail = |what: &str, error: io::Error| format!("{what} (answering): {error}");
    for pair in 0..plan.pairs {
        for variant in pair_order(&Latency::ALL, pair) {
            for _ in 0..WARMUP_ROUND_TRIPS + plan.round_trips {
                b.receive_small(variant, &mut message)
                    .and_then(|()| b.send_small(variant, &message))
                    .map_err(|error| fail(variant.name(), error))?;
            }
        }
        for variant in pair_order(bulk_variants(window), pair) {
            let mut received = 0;
            while received < plan.messages {
                let count = window.min(plan.messages - received);
                for _ in 0..count {
                    b.receive_bulk(variant, bulk)
                        .map_err(|error| fail(variant.name(), error))?;
                }
                b.send_window_ack()
                    .map_err(|error| fail(variant.name(), error))?;
                received += count;
            }
            if bulk
                .iter()
                .enumerate()
                .any(|(index, &byte)| byte != index as u8)
            {
                return Err(format!("{}: a message arrived altered", variant.name()));
            }
        }
    }
    Ok(())
}

/// Median and interval of one variant's figures, and of its ratios to the plain block of
/// each pair.
struct Summary {
    median: f64,
    ratio: Option<(f64, Option<(f64, f64)>)>,
}

fn summary<T: Copy + PartialEq>(rows: &[Vec<(T, f64)>], variant: T, plain: T) -> Summary {
    let figure = |row: &Vec<(T, f64)>, which: T| {
        row.iter()
            .find(|(name, _)| *name == which)
            .map(|&(_, value)| value)
    };
    let mut values: Vec<f64> = rows.iter().filter_map(|row| figure(row, variant)).collect();
    sort_samples(&mut values);
    let ratio = (variant != plain).then(|| {
        let mut ratios: Vec<f64> = rows
            .iter()
            .filter_map(|row| Some(figure(row, variant)? / figure(row, plain)?))
            .collect();
        sort_samples(&mut ratios);
        let interval = median_interval(&ratios, CONFIDENCE).map(|i| (i.low, i.high));
        (median(&ratios).unwrap_or(f64::NAN), interval)
    });
    Summary {
        median: median(&values).unwrap_or(f64::NAN),
        ratio,
    }
}

/// A summary's ratio, its interval, or "-" for the plain variant itself.
fn ratio_text(summary: &Summary) -> String {
    match summary.ratio {
        None => "-".to_string(),
        Some((ratio, Some((low, high)))) => format!("{ratio:.3}   {low:.3} .. {high:.3}"),
        Some((ratio, None)) => format!("{ratio:.3}   - (too few pairs)"),
    }
}

/// One row of a table: the variant, its figure and its ratio.
fn write_row(table: &mut dyn Write, name: &str, figure: &str, summary: &Summary) -> io::Result<()> {
    writeln!(
        table,
        "    {name:<8} {figure:>10}   {}",
        ratio_text(summary)
    )
}

/// Writes one JSON record per block and the summary table.
fn summarise(found: &Found, plan: WirePlan, window: u64, report: &mut Report) -> io::Result<()> {
    // One JSON record per block: the fields every block shares, then its own.
    let block =
        |pair: usize, variant: &'static str, transport, size: usize, iters, figure| WireBlock {
            transport,
            size: size as u64,
            iters,
            variant,
            round: pair as u32,
            cpus: plan.cpus,
            figure,
        };
    for (pair, row) in found.latency_us.iter().enumerate() {
        for &(variant, latency_us) in row {
            report.json_only(&block(
                pair,
                variant.name(),
                Transport::RawUdp,
                LATENCY_BYTES,
                plan.round_trips,
                WireFigure::Latency { latency_us },
            ))?;
        }
    }
    for (pair, row) in found.bandwidth_mbps.iter().enumerate() {
        for &(variant, bandwidth_mbps) in row {
            let transport = if variant == Bulk::Tcp {
                Transport::RawTcp
            } else {
                Transport::RawUdp
            };
            report.json_only(&block(
                pair,
                variant.name(),
                transport,
                BANDWIDTH_MESSAGE_BYTES,
                plan.messages,
                WireFigure::Bandwidth {
                    window,
                    bandwidth_mbps,
                },
            ))?;
        }
    }
    let Some(mut table) = report.take_table() else {
        return Ok(());
    };
    let outcome = write_table(&mut *table, found, plan, window);
    report.restore_table(Some(table));
    outcome
}

/// The summary table: per variant its median and its paired ratio to the plain variant.
fn write_table(
    mut table: &mut dyn Write,
    found: &Found,
    plan: WirePlan,
    window: u64,
) -> io::Result<()> {
    writeln!(
        table,
        "quiver-bench wire: quiver's frames alone over plain udp sockets on 127.0.0.1 (no protocol),"
    )?;
    writeln!(
        table,
        "  two busy-polling threads on CPUs {} and {}; µs = microseconds, MB/s = 10^6 bytes/s",
        plan.cpus[0], plan.cpus[1]
    )?;
    writeln!(
        table,
        "  {} pairs of blocks in one run, every variant once per pair in a rotated order;",
        plan.pairs
    )?;
    writeln!(
        table,
        "  / plain = median over the pairs of variant / plain of that pair, with its distribution-free 95% interval"
    )?;
    writeln!(
        table,
        "  latency, {LATENCY_BYTES} B one way (round trip / 2), median of the blocks' medians, {} round trips per block:",
        plan.round_trips
    )?;
    writeln!(table, "    {:<8} {:>10}   / plain", "variant", "µs")?;
    for variant in Latency::ALL {
        let summary = summary(&found.latency_us, variant, Latency::Plain);
        let figure = format!("{:.3}", summary.median);
        write_row(&mut table, variant.name(), &figure, &summary)?;
    }
    if window == 0 {
        writeln!(
            table,
            "  bandwidth not measured: the udp receive buffers cannot hold a 1 MiB message without loss (run as root, or raise net.core.rmem_max to 16 MiB or more)"
        )?;
    } else {
        writeln!(
            table,
            "  bandwidth, 1 MiB messages in {DATAGRAM_BYTES}-byte datagrams, windows of {window}, {} messages per block:",
            plan.messages
        )?;
        writeln!(table, "    {:<8} {:>10}   / plain", "variant", "MB/s")?;
        for variant in Bulk::ALL {
            let summary = summary(&found.bandwidth_mbps, variant, Bulk::Plain);
            let figure = format!("{:.0}", summary.median);
            write_row(&mut table, variant.name(), &figure, &summary)?;
        }
        let against_tcp = summary(&found.bandwidth_mbps, Bulk::Checked, Bulk::Tcp);
        writeln!(
            table,
            "    checked / tcp, paired: {}",
            ratio_text(&against_tcp)
        )?;
    }
    writeln!(
        table,
        "  stream/data: 8 B behind a 16-byte Stream header / a full Data header, checked and copied on both sides;"
    )?;
    if window > 0 {
        writeln!(
            table,
            "  checked: each datagram's 16-byte Stream header and tag (AES over a keyed CRC-64 of header and payload);"
        )?;
        writeln!(
            table,
            "  tcp: the same messages over one plain TCP connection on 127.0.0.1 (raw-tcp's stream)."
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct TestCli {
        #[command(flatten)]
        wire: WireArgs,
    }

    fn plan(arguments: &[&str]) -> Result<WirePlan, String> {
        use clap::Parser;
        let cli = TestCli::try_parse_from(std::iter::once("wire").chain(arguments.iter().copied()))
            .map_err(|error| error.to_string())?;
        plan_from_args(&cli.wire)
    }

    #[test]
    fn wire_runs_alone_with_its_own_rounds() {
        let wire = plan(&["--rounds", "6", "--iters", "500", "--cpus", "0,0"]);
        // Two different CPUs are needed; one named twice is refused.
        assert!(wire.is_err());
        if std::thread::available_parallelism().map_or(1, |n| n.get()) > 1 {
            let wire = plan(&["--rounds", "6", "--iters", "500"]).expect("valid");
            assert_eq!((wire.pairs, wire.round_trips, wire.messages), (6, 500, 50));
            assert!(plan(&[]).is_ok());
        }
        assert!(plan(&["pingpong"]).is_err());
        assert!(plan(&["--rounds", "0"]).is_err());
        assert!(plan(&["--rounds", "1001"]).is_err());
        assert!(plan(&["--iters", "0"]).is_err());
    }

    #[test]
    fn every_variant_leads_equally_often() {
        let mut first = [0usize; 3];
        for pair in 0..30 {
            let order = pair_order(&Latency::ALL, pair);
            assert_eq!(order.len(), 3);
            for variant in Latency::ALL {
                assert!(order.contains(&variant));
            }
            first[Latency::ALL.iter().position(|&v| v == order[0]).unwrap()] += 1;
        }
        assert_eq!(first, [10, 10, 10]);
    }

    #[test]
    fn framed_messages_round_trip_and_a_corrupted_one_is_refused() {
        let ([mut a, mut b], _) = open_pair().expect("sockets");
        for variant in Latency::ALL {
            let message = *b"8 bytes!";
            a.send_small(variant, &message).expect("send");
            let mut got = [0u8; 8];
            b.receive_small(variant, &mut got).expect("receive");
            assert_eq!(got, message, "{variant:?}");
        }
        // A Data frame with one payload bit flipped on the way.
        let message = *b"8 bytes!";
        let mut header = FrameHeader::new(FrameType::Data, b.id, a.id);
        header.message_len = 8;
        let len = a.emit(&header, &message).expect("emit");
        a.staging[len - 1] ^= 1;
        a.data.send(&a.staging[..len]).expect("send");
        let mut got = [0u8; 8];
        let error = b.receive_small(Latency::Data, &mut got).unwrap_err();
        assert!(error.to_string().contains("does not verify"), "{error}");
    }

    #[test]
    fn checked_bulk_messages_arrive_whole_and_verified() {
        let ([mut a, mut b], _) = open_pair().expect("sockets");
        let message: Vec<u8> = (0..200_000).map(|index| (index * 7) as u8).collect();
        for variant in Bulk::ALL {
            a.send_bulk(variant, &message).expect("send");
            let mut got = vec![0u8; message.len()];
            b.receive_bulk(variant, &mut got).expect("receive");
            assert_eq!(got, message, "{variant:?}");
        }
    }

    #[test]
    fn a_short_run_reports_every_variant() {
        let plan = WirePlan {
            pairs: 2,
            round_trips: 50,
            messages: 2,
            // Both threads spin: on one CPU each would wait out the other's time slices.
            cpus: if std::thread::available_parallelism().map_or(1, |n| n.get()) > 1 {
                [0, 1]
            } else {
                [0, 0]
            },
        };
        let table = Shared::default();
        let json = Shared::default();
        let mut report = Report::new(Some(Box::new(table.clone())), Some(Box::new(json.clone())));
        run(plan, &mut report).expect("run");
        let table = table.text();
        for line in ["plain", "stream", "data", "checked", "tcp"] {
            assert!(
                table.contains(&format!("    {line} ")),
                "{line} missing: {table}"
            );
        }
        let records: Vec<serde_json::Value> = json
            .text()
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON record"))
            .collect();
        // Two pairs of three latency and three bandwidth blocks.
        assert_eq!(records.len(), 12);
        assert!(records.iter().all(|record| {
            record["latency_us"]
                .as_f64()
                .or(record["bandwidth_MBps"].as_f64())
                .unwrap()
                > 0.0
        }));
        assert!(records.iter().all(|record| record["test"] == "wire"));
    }

    /// A writer whose bytes the test reads afterwards.
    #[derive(Clone, Default)]
    struct Shared(Arc<std::sync::Mutex<Vec<u8>>>);

    impl Shared {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).expect("UTF-8")
        }
    }

    impl Write for Shared {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
}
