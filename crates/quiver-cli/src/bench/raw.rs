//! The raw-socket baselines of `quiver bench` (`--transport raw-udp|raw-tcp`): the same
//! tests as the quiver transports (pingpong, bw, rate), over plain sockets on 127.0.0.1
//! with no protocol beyond what is needed to know where a message ends. These are the
//! floors quiver's own udp and tcp transports are compared against.
//!
//! Both ranks are started, pinned and watched exactly like the shm ranks (`ranks.rs`) and
//! busy-poll: every socket is non-blocking, and a rank that finds nothing to read (or no
//! room to write) spins (`spin_loop`) and tries again; nobody ever sleeps in the kernel.
//!
//! Method, per transport:
//! - **raw-tcp**: one TCP connection, `TCP_NODELAY`, kernel-tuned buffers. A message of
//!   `n` bytes is one `write` loop of `n` bytes. The receiver reads the way a tuned
//!   application would: a message shorter than [`TCP_STAGING_BYTES`] comes out of a staging
//!   buffer that each `read` fills as far as the socket has bytes (so one read takes many
//!   small messages of a bw/rate window, as quiver's tcp does); a longer one is read
//!   straight into its destination, as much per `read` as has arrived. Streaming tests look
//!   with `poll` before each read or write (see [`ready`]); pingpong reads and writes
//!   without (one system call per look, like quiver). The bw/rate window ack is one byte
//!   back on the same connection.
//! - **raw-udp**: connected UDP sockets, 64 MiB socket buffers (forced when allowed). A
//!   message is one datagram up to 65507 bytes; larger messages are split into 65507-byte
//!   datagrams (the last one shorter), received in order straight into the buffer. UDP has
//!   no flow control, so the receiver acknowledges on a second socket pair: after
//!   `interval` datagrams, and at the end of each bw/rate window, it sends its cumulative
//!   count of received datagrams (8 bytes). A sender keeps at most two intervals in
//!   flight, and an interval is a quarter of the receiver's socket buffer (counting 1.5
//!   KiB of kernel overhead per datagram), so on loopback nothing is ever dropped. A
//!   message coming back (pingpong) acknowledges everything sent before it. A
//!   datagram of the wrong length, or no progress for [`STALL_TIMEOUT`], is an error
//!   (which is what a loss would look like).
//!
//! The two ranks find each other through a [`Rendezvous`]: run alone, through quiver's shm
//! endpoint (rank 1 tells rank 0 its ports), which stays idle afterwards and carries the
//! last synchronisation. `--baseline interleave` (`worker.rs`) opens the same link next to
//! quiver's udp or tcp connection and trades the ports over that connection itself: its
//! context is built for the network transport only, and the connection under test is
//! already open and idle at that point, so no second quiver path is needed. The tests run
//! through [`RawBaseline`], one call per measured run, for both uses.
//!
//! Timing and records are as in `worker.rs`: one clock read per pingpong round trip, osu_bw
//! style windows, one JSON [`Record`] line per point from rank 0.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

use quiver::{Addr, Connection, Context, Endpoint};

use super::loggp::{self, BenchLink};
use super::plan::{self, Plan, TestName, Transport, RATE_MESSAGE_BYTES};
use super::report::Record;
use super::stats;
use super::worker::{connect, emit, run_loggp};

/// Largest payload of one IPv4 UDP datagram; larger raw-udp messages are split.
pub(crate) const MAX_DATAGRAM_BYTES: usize = 65_507;
/// Socket buffers raw-udp asks for, per socket and direction.
const UDP_SOCKET_BUFFER_BYTES: usize = 64 << 20;
/// Kernel bookkeeping counted per datagram against the receive buffer (a conservative
/// bound on the sk_buff overhead of a loopback datagram).
const DATAGRAM_OVERHEAD_BYTES: usize = 1536;
/// A spinning rank that makes no progress for this long gives up.
const STALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Spins between two looks at the clock while waiting.
const SPINS_PER_CLOCK_READ: u32 = 4096;
/// The quiver endpoint port used to exchange socket addresses.
const BOOTSTRAP_PORT: u16 = 0;
/// raw-tcp: messages shorter than this are received through a staging buffer this large
/// (many per read when they stream); longer ones straight into their destination. The
/// same as quiver's tcp default (`QUIVER_TCP_STAGING_BYTES`).
pub(crate) const TCP_STAGING_BYTES: usize = 256 << 10;

/// A message channel between the two ranks over plain sockets.
trait RawLink {
    /// Sends `message` (spinning while the socket is full).
    fn send_message(&mut self, message: &[u8]) -> io::Result<()>;
    /// Receives one message of exactly `buffer.len()` bytes into `buffer`.
    fn receive_message(&mut self, buffer: &mut [u8]) -> io::Result<()>;
    /// Latency (pingpong) or streaming: a link may wait differently for each.
    fn set_latency_mode(&mut self, latency: bool) {
        let _ = latency;
    }
    /// Receiver, end of a bw/rate window: tell the sender everything arrived.
    fn send_window_ack(&mut self) -> io::Result<()>;
    /// Sender, end of a bw/rate window: wait until the receiver has everything.
    fn wait_window_ack(&mut self) -> io::Result<()>;
    /// bibw: sends `count` copies of `message` while receiving `count` messages of
    /// `receive.len()` bytes (each into `receive`), both at once.
    fn exchange(&mut self, message: &[u8], receive: &mut [u8], count: u64) -> io::Result<()> {
        let _ = (message, receive, count);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "bibw is not measured over this baseline",
        ))
    }
}

/// A raw link as the generic tests see it, with the buffers of one bibw window.
struct Generic<'a> {
    link: &'a mut dyn RawLink,
    rank: u32,
    exchange_send: Vec<u8>,
    exchange_receive: Vec<u8>,
}

impl BenchLink for Generic<'_> {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn send_message(&mut self, message: &[u8]) -> Result<(), String> {
        self.link
            .send_message(message)
            .map_err(|error| error.to_string())
    }

    fn receive_message(&mut self, buffer: &mut [u8]) -> Result<(), String> {
        self.link
            .receive_message(buffer)
            .map_err(|error| error.to_string())
    }

    fn send_window_ack(&mut self) -> Result<(), String> {
        self.link
            .send_window_ack()
            .map_err(|error| error.to_string())
    }

    fn wait_window_ack(&mut self) -> Result<(), String> {
        self.link
            .wait_window_ack()
            .map_err(|error| error.to_string())
    }

    fn prepare_exchange(&mut self, size: u64, _count: u64) -> Result<(), String> {
        let length = size as usize;
        self.exchange_send = (0..length).map(|index| index as u8).collect();
        self.exchange_receive = vec![0u8; length];
        Ok(())
    }

    fn exchange(&mut self, count: u64) -> Result<(), String> {
        self.link
            .exchange(&self.exchange_send, &mut self.exchange_receive, count)
            .map_err(|error| error.to_string())
    }
}

pub(crate) fn run(plan: &Plan) -> Result<(), String> {
    let context = Context::from_env().map_err(|error| format!("Context::from_env: {error}"))?;
    if context.size() != 2 {
        return Err(format!(
            "the bench needs exactly 2 ranks, this job has {}",
            context.size()
        ));
    }
    let rank = context.rank();
    let mut endpoint = context
        .endpoint(BOOTSTRAP_PORT)
        .map_err(|error| format!("opening endpoint port {BOOTSTRAP_PORT}: {error}"))?;
    let connection = connect(&mut endpoint, Addr::new(1 - rank, BOOTSTRAP_PORT))?;
    let mut bootstrap = Bootstrap {
        endpoint,
        connection,
    };
    let mut baseline = RawBaseline::open(plan.transport, rank, &mut bootstrap, plan)?;
    run_tests(plan, &mut baseline)?;
    // Rank 1 exits only after rank 0 has finished everything.
    bootstrap
        .exchange(&[0])
        .map_err(|error| format!("last exchange: {error}"))?;
    Ok(())
}

/// Runs every rank test of the plan over `baseline`; rank 0 prints the records.
fn run_tests(plan: &Plan, baseline: &mut RawBaseline) -> Result<(), String> {
    let mut output = io::stdout().lock();
    for test in plan.rank_tests() {
        match test {
            TestName::Pingpong => {
                for &size in &plan.sizes {
                    let record = baseline
                        .pingpong(size, plan.pingpong_iters(size))
                        .map_err(|error| format!("pingpong at {size} bytes: {error}"))?;
                    emit(&mut output, record, plan)?;
                }
            }
            TestName::Bw | TestName::Rate => {
                let sizes = if test == TestName::Bw {
                    plan.sizes.clone()
                } else {
                    vec![RATE_MESSAGE_BYTES]
                };
                let windows = |size| {
                    if test == TestName::Bw {
                        plan.bw_windows(size)
                    } else {
                        plan.rate_windows()
                    }
                };
                for size in sizes {
                    let record = baseline
                        .stream(test, size, plan.window, windows(size))
                        .map_err(|error| format!("{} at {size} bytes: {error}", test.as_str()))?;
                    emit(&mut output, record, plan)?;
                }
            }
            TestName::Bibw => {
                let mut generic = baseline.generic();
                for &size in &plan.sizes {
                    let record =
                        loggp::bibw_point(&mut generic, size, plan.window, plan.bw_windows(size))
                            .map_err(|error| format!("bibw at {size} bytes: {error}"))?;
                    emit(&mut output, record, plan)?;
                }
            }
            TestName::Loggp => {
                let (link, rank, send, receive) = baseline.parts();
                let mut generic = Generic {
                    link,
                    rank,
                    exchange_send: Vec::new(),
                    exchange_receive: Vec::new(),
                };
                for record in run_loggp(&mut generic, plan, send, receive)? {
                    emit(&mut output, Some(record), plan)?;
                }
            }
            TestName::Floor
            | TestName::Pool
            | TestName::Crossover
            | TestName::Compare
            | TestName::Wire => {}
        }
    }
    Ok(())
}

/// How the two ranks trade the few bytes a raw link needs to set up (ports, buffer
/// sizes): each sends its message and gets the other's. A raw transport run alone uses an
/// idle quiver shm connection ([`Bootstrap`]); `--baseline interleave` uses the quiver
/// udp or tcp connection under test (`worker.rs`), already open and idle at that moment.
pub(crate) trait Rendezvous {
    /// Sends `mine` (at most 64 bytes) to the other rank and returns what it sent.
    fn exchange(&mut self, mine: &[u8]) -> Result<Vec<u8>, String>;
}

/// A raw-socket baseline ready to measure: the link, this rank, and page-aligned message
/// buffers for the largest message of the plan. Used by `--transport raw-*` (`run`) and,
/// block by block, by `--baseline interleave` (`worker.rs`).
pub(crate) struct RawBaseline {
    link: Box<dyn RawLink>,
    rank: u32,
    /// Storage of the send and receive buffers (see [`page_aligned`]).
    send_storage: Vec<u8>,
    receive_storage: Vec<u8>,
    /// Length of each buffer: the plan's largest message, in bytes.
    max_bytes: usize,
    /// One timestamp per pingpong round trip, plus the start.
    stamps: Vec<Instant>,
}

impl RawBaseline {
    /// Opens the raw link of `transport` (raw-udp or raw-tcp) on 127.0.0.1, trading its
    /// addresses through `rendezvous`, with buffers for every message of `plan`.
    pub(crate) fn open(
        transport: Transport,
        rank: u32,
        rendezvous: &mut dyn Rendezvous,
        plan: &Plan,
    ) -> Result<RawBaseline, String> {
        let link: Box<dyn RawLink> = match transport {
            Transport::RawTcp => Box::new(TcpLink::open(rank, rendezvous)?),
            Transport::RawUdp => Box::new(UdpLink::open(rendezvous)?),
            other => return Err(format!("{} is not a raw transport", other.as_str())),
        };
        let max_bytes = plan.max_message_bytes() as usize;
        let max_round_trips = plan.max_pingpong_iters();
        let mut send_storage = vec![0u8; max_bytes + PAGE_BYTES];
        for (index, byte) in page_aligned(&mut send_storage, max_bytes)
            .iter_mut()
            .enumerate()
        {
            *byte = index as u8;
        }
        Ok(RawBaseline {
            link,
            rank,
            send_storage,
            receive_storage: vec![0u8; max_bytes + PAGE_BYTES],
            max_bytes,
            stamps: Vec::with_capacity(max_round_trips as usize + 1),
        })
    }

    /// The link, the rank, and the page-aligned send and receive buffers.
    fn parts(&mut self) -> (&mut dyn RawLink, u32, &[u8], &mut [u8]) {
        let send = &*page_aligned(&mut self.send_storage, self.max_bytes);
        let receive = page_aligned(&mut self.receive_storage, self.max_bytes);
        (self.link.as_mut(), self.rank, send, receive)
    }

    /// The link as the generic tests (bibw) see it.
    fn generic(&mut self) -> Generic<'_> {
        Generic {
            link: self.link.as_mut(),
            rank: self.rank,
            exchange_send: Vec::new(),
            exchange_receive: Vec::new(),
        }
    }

    /// One pingpong run (warm-up, then `iters` timed round trips) of `size` bytes; rank 0
    /// returns the record. `size` must be at most the plan's largest message.
    pub(crate) fn pingpong(&mut self, size: u64, iters: u64) -> io::Result<Option<Record>> {
        let length = size as usize;
        let send = &*page_aligned(&mut self.send_storage, self.max_bytes);
        let receive = page_aligned(&mut self.receive_storage, self.max_bytes);
        self.link.set_latency_mode(true);
        let record = pingpong(
            self.link.as_mut(),
            self.rank,
            &send[..length],
            &mut receive[..length],
            iters,
            &mut self.stamps,
        );
        self.link.set_latency_mode(false);
        record
    }

    /// One bw or rate run (warm-up, then `windows` timed windows of `window` messages of
    /// `size` bytes); rank 0 returns the record.
    pub(crate) fn stream(
        &mut self,
        test: TestName,
        size: u64,
        window: u64,
        windows: u64,
    ) -> io::Result<Option<Record>> {
        let length = size as usize;
        let (link, rank, send, receive) = self.parts();
        stream(
            link,
            rank,
            test,
            (&send[..length], &mut receive[..length]),
            window,
            windows,
        )
    }
}

/// Ping-pong of `message.len()` bytes: rank 0 sends and waits for the echo, rank 1
/// echoes. Rank 0 returns the record (one-way latency = round trip / 2).
fn pingpong(
    link: &mut dyn RawLink,
    rank: u32,
    message: &[u8],
    receive: &mut [u8],
    iters: u64,
    stamps: &mut Vec<Instant>,
) -> io::Result<Option<Record>> {
    let warmup = plan::warmup_iters(iters);
    if rank != 0 {
        for _ in 0..warmup + iters {
            link.receive_message(receive)?;
            link.send_message(message)?;
        }
        return Ok(None);
    }
    for _ in 0..warmup {
        link.send_message(message)?;
        link.receive_message(receive)?;
    }
    stamps.clear();
    stamps.push(Instant::now());
    for _ in 0..iters {
        link.send_message(message)?;
        link.receive_message(receive)?;
        stamps.push(Instant::now());
    }
    let mut one_way_us: Vec<f64> = stamps
        .windows(2)
        .map(|pair| (pair[1] - pair[0]).as_secs_f64() * 1e6 / 2.0)
        .collect();
    stats::sort_samples(&mut one_way_us);
    Ok(Some(Record {
        test: TestName::Pingpong.as_str().to_string(),
        size: message.len() as u64,
        iters,
        latency_us: stats::median(&one_way_us),
        latency_p99_us: stats::percentile(&one_way_us, 99.0),
        ..Record::default()
    }))
}

/// osu_bw-style streaming: rank 0 sends `window` messages, then waits for the window ack;
/// `windows` timed rounds after a warm-up. Rank 0 returns bandwidth (bw) or rate (rate).
fn stream(
    link: &mut dyn RawLink,
    rank: u32,
    test: TestName,
    (message, receive): (&[u8], &mut [u8]),
    window: u64,
    windows: u64,
) -> io::Result<Option<Record>> {
    let warmup = plan::warmup_windows(windows);
    if rank != 0 {
        for _ in 0..warmup + windows {
            for _ in 0..window {
                link.receive_message(receive)?;
            }
            link.send_window_ack()?;
        }
        return Ok(None);
    }
    let mut send_window = || -> io::Result<()> {
        for _ in 0..window {
            link.send_message(message)?;
        }
        link.wait_window_ack()
    };
    for _ in 0..warmup {
        send_window()?;
    }
    let start = Instant::now();
    for _ in 0..windows {
        send_window()?;
    }
    let elapsed_us = start.elapsed().as_secs_f64() * 1e6;
    let messages = (window * windows) as f64;
    let size = message.len() as u64;
    let mut record = Record {
        test: test.as_str().to_string(),
        size,
        iters: windows,
        window: Some(window),
        ..Record::default()
    };
    // bytes per µs = MB/s; messages per µs = Mmsg/s.
    match test {
        TestName::Rate => record.rate_mmsgs = Some(messages / elapsed_us),
        _ => record.bandwidth_mbps = Some(messages * size as f64 / elapsed_us),
    }
    Ok(Some(record))
}

/// The idle quiver shm connection used to exchange socket addresses and to synchronise.
struct Bootstrap {
    endpoint: Endpoint,
    connection: Connection,
}

impl Rendezvous for Bootstrap {
    fn exchange(&mut self, mine: &[u8]) -> Result<Vec<u8>, String> {
        exchange_over(&mut self.endpoint, self.connection, mine)
    }
}

/// [`Rendezvous::exchange`] over an idle quiver connection: sends `mine` and receives the
/// other rank's message (at most 64 bytes).
pub(crate) fn exchange_over(
    endpoint: &mut Endpoint,
    connection: Connection,
    mine: &[u8],
) -> Result<Vec<u8>, String> {
    endpoint
        .send(connection, mine)
        .map_err(|error| format!("sending to the other rank: {error}"))?;
    let mut buffer = [0u8; 64];
    let (length, _) = endpoint
        .recv(&mut buffer)
        .map_err(|error| format!("receiving from the other rank: {error}"))?;
    Ok(buffer[..length].to_vec())
}

/// Waits by spinning: `attempt` returns `Ok(Some(_))` when done and `Ok(None)` to be tried
/// again; after [`STALL_TIMEOUT`] without success the wait fails with `TimedOut`.
pub(crate) fn spin<T>(
    what: &str,
    mut attempt: impl FnMut() -> io::Result<Option<T>>,
) -> io::Result<T> {
    let mut spins = 0u32;
    let mut started: Option<Instant> = None;
    loop {
        if let Some(done) = attempt()? {
            return Ok(done);
        }
        std::hint::spin_loop();
        spins += 1;
        if spins == SPINS_PER_CLOCK_READ {
            spins = 0;
            let started = *started.get_or_insert_with(Instant::now);
            if started.elapsed() > STALL_TIMEOUT {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no progress for {} s while {what} (a lost datagram or a dead peer)",
                        STALL_TIMEOUT.as_secs()
                    ),
                ));
            }
        }
    }
}

/// `Ok(Some(n))` for progress, `Ok(None)` for "try again", errors otherwise.
pub(crate) fn would_block(result: io::Result<usize>) -> io::Result<Option<usize>> {
    match result {
        Ok(count) => Ok(Some(count)),
        Err(error)
            if matches!(
                error.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) =>
        {
            Ok(None)
        }
        Err(error) => Err(error),
    }
}

/// Whether `stream` is ready for `events` now (a zero-timeout `poll`). The TCP spin loops
/// look with `poll` before they read or write: `tcp_poll` takes no lock, while a failed
/// non-blocking `recv` takes the socket lock and, spinning, pushes every arriving segment
/// through the backlog (measured: about 3x lower message rate).
pub(crate) fn ready(stream: &TcpStream, events: libc::c_short) -> io::Result<bool> {
    let mut fds = [libc::pollfd {
        fd: stream.as_raw_fd(),
        events,
        revents: 0,
    }];
    Ok(quiver_transport::sys::poll(&mut fds, Some(Duration::ZERO))? > 0)
}

/// raw-tcp: one non-blocking TCP connection with `TCP_NODELAY`.
struct TcpLink {
    stream: TcpStream,
    /// Bytes read ahead of the message being received: `staging[start..end]`.
    staging: Box<[u8]>,
    start: usize,
    end: usize,
    /// Pingpong: read and write without looking with `poll` first.
    latency: bool,
}

impl TcpLink {
    /// Rank 1 listens on 127.0.0.1 and sends its port; rank 0 connects.
    fn open(rank: u32, bootstrap: &mut dyn Rendezvous) -> Result<TcpLink, String> {
        let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let stream = if rank == 1 {
            let listener =
                TcpListener::bind(loopback).map_err(|error| format!("tcp listen: {error}"))?;
            let port = listener
                .local_addr()
                .map_err(|error| error.to_string())?
                .port();
            bootstrap.exchange(&port.to_be_bytes())?;
            listener
                .accept()
                .map_err(|error| format!("tcp accept: {error}"))?
                .0
        } else {
            let port = port_from(&bootstrap.exchange(&[0])?, 0)?;
            TcpStream::connect((Ipv4Addr::LOCALHOST, port))
                .map_err(|error| format!("tcp connect to port {port}: {error}"))?
        };
        TcpLink::from_stream(stream).map_err(|error| format!("tcp options: {error}"))
    }

    /// The link over a connected stream (made non-blocking, `TCP_NODELAY`).
    fn from_stream(stream: TcpStream) -> io::Result<TcpLink> {
        stream.set_nodelay(true)?;
        stream.set_nonblocking(true)?;
        Ok(TcpLink {
            stream,
            staging: vec![0u8; TCP_STAGING_BYTES].into_boxed_slice(),
            start: 0,
            end: 0,
            latency: false,
        })
    }

    /// One non-blocking read into `into`, after a look with `poll` unless in latency mode:
    /// `Ok(None)` when nothing is there.
    fn read_some(
        stream: &mut TcpStream,
        into: &mut [u8],
        latency: bool,
    ) -> io::Result<Option<usize>> {
        if !latency && !ready(stream, libc::POLLIN)? {
            return Ok(None);
        }
        match would_block(stream.read(into))? {
            Some(0) => Err(io::ErrorKind::UnexpectedEof.into()),
            other => Ok(other),
        }
    }
}

impl RawLink for TcpLink {
    fn set_latency_mode(&mut self, latency: bool) {
        self.latency = latency;
    }

    fn send_message(&mut self, message: &[u8]) -> io::Result<()> {
        let mut written = 0;
        let latency = self.latency;
        while written < message.len() {
            let stream = &mut self.stream;
            written += spin("writing to the tcp stream", || {
                if !latency && !ready(stream, libc::POLLOUT)? {
                    return Ok(None);
                }
                would_block(stream.write(&message[written..]))
            })?;
        }
        Ok(())
    }

    fn receive_message(&mut self, buffer: &mut [u8]) -> io::Result<()> {
        // Bytes read ahead with an earlier message come first.
        let staged = (self.end - self.start).min(buffer.len());
        buffer[..staged].copy_from_slice(&self.staging[self.start..self.start + staged]);
        self.start += staged;
        let mut filled = staged;
        let latency = self.latency;
        while filled < buffer.len() {
            let stream = &mut self.stream;
            if buffer.len() - filled >= TCP_STAGING_BYTES {
                // A large message: straight into its buffer, as much as has arrived.
                filled += spin("reading the tcp stream", || {
                    Self::read_some(stream, &mut buffer[filled..], latency)
                })?;
                continue;
            }
            // A small one: one read takes what is there, the next messages too.
            let staging = &mut self.staging;
            let count = spin("reading the tcp stream", || {
                Self::read_some(stream, staging, latency)
            })?;
            let take = count.min(buffer.len() - filled);
            buffer[filled..filled + take].copy_from_slice(&self.staging[..take]);
            filled += take;
            self.start = take;
            self.end = count;
        }
        Ok(())
    }

    fn send_window_ack(&mut self) -> io::Result<()> {
        self.send_message(&[0])
    }

    fn wait_window_ack(&mut self) -> io::Result<()> {
        self.receive_message(&mut [0])
    }

    /// Both directions at once on the one stream: write what the socket takes, read what
    /// has arrived, until `count` messages went each way (the stream of `count` messages
    /// is `count` back-to-back copies; the receive side overwrites `receive` per message).
    fn exchange(&mut self, message: &[u8], receive: &mut [u8], count: u64) -> io::Result<()> {
        let length = message.len();
        let total = length as u64 * count;
        // Bytes already staged belong to this stream of messages.
        let staged = ((self.end - self.start) as u64).min(total);
        self.start += staged as usize;
        let (mut written, mut read) = (0u64, staged);
        let mut spins = 0u32;
        let mut stalled_since: Option<Instant> = None;
        while written < total || read < total {
            let mut progress = false;
            if written < total && ready(&self.stream, libc::POLLOUT)? {
                let offset = (written % length as u64) as usize;
                if let Some(count) = would_block(self.stream.write(&message[offset..]))? {
                    written += count as u64;
                    progress = true;
                }
            }
            if read < total && ready(&self.stream, libc::POLLIN)? {
                let offset = (read % length as u64) as usize;
                match would_block(self.stream.read(&mut receive[offset..]))? {
                    Some(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                    Some(count) => {
                        read += count as u64;
                        progress = true;
                    }
                    None => {}
                }
            }
            if progress {
                spins = 0;
                stalled_since = None;
                continue;
            }
            std::hint::spin_loop();
            spins += 1;
            if spins == SPINS_PER_CLOCK_READ {
                spins = 0;
                let since = *stalled_since.get_or_insert_with(Instant::now);
                if since.elapsed() > STALL_TIMEOUT {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no progress in bibw (a dead peer?)",
                    ));
                }
            }
        }
        Ok(())
    }
}

/// raw-udp: a connected data socket pair and a connected acknowledgement socket pair.
struct UdpLink {
    data: UdpSocket,
    acks: UdpSocket,
    /// Receive buffer of the other rank's data socket as its kernel reports it (bytes).
    peer_receive_buffer_bytes: usize,
    /// Receive buffer of this rank's data socket (bytes).
    receive_buffer_bytes: usize,
    /// Datagrams this rank sent / the other rank has acknowledged / this rank received.
    sent: u64,
    acknowledged: u64,
    received: u64,
    /// Count carried by the last acknowledgement this rank sent.
    last_ack_sent: u64,
}

impl UdpLink {
    /// Both ranks bind two sockets on 127.0.0.1, exchange ports and receive buffer sizes,
    /// and connect each socket to its counterpart.
    fn open(bootstrap: &mut dyn Rendezvous) -> Result<UdpLink, String> {
        let bind = || -> io::Result<(UdpSocket, usize)> {
            let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
            let (_, receive) = quiver_transport::udp::set_buffer_sizes(
                socket.as_fd(),
                UDP_SOCKET_BUFFER_BYTES,
                UDP_SOCKET_BUFFER_BYTES,
            )?;
            socket.set_nonblocking(true)?;
            Ok((socket, receive))
        };
        let (data, receive_buffer_bytes) = bind().map_err(|error| format!("udp: {error}"))?;
        let (acks, _) = bind().map_err(|error| format!("udp: {error}"))?;
        let port = |socket: &UdpSocket| socket.local_addr().map(|address| address.port());
        let mut mine = Vec::with_capacity(12);
        mine.extend_from_slice(
            &port(&data)
                .map_err(|error| error.to_string())?
                .to_be_bytes(),
        );
        mine.extend_from_slice(
            &port(&acks)
                .map_err(|error| error.to_string())?
                .to_be_bytes(),
        );
        mine.extend_from_slice(&(receive_buffer_bytes as u64).to_be_bytes());
        let theirs = bootstrap.exchange(&mine)?;
        if theirs.len() != 12 {
            return Err(format!(
                "bad address message from the other rank: {theirs:?}"
            ));
        }
        let mut buffer_bytes = [0u8; 8];
        buffer_bytes.copy_from_slice(&theirs[4..12]);
        for (socket, offset) in [(&data, 0), (&acks, 2)] {
            let peer_port = port_from(&theirs, offset)?;
            socket
                .connect((Ipv4Addr::LOCALHOST, peer_port))
                .map_err(|error| format!("udp connect to port {peer_port}: {error}"))?;
        }
        Ok(UdpLink {
            data,
            acks,
            peer_receive_buffer_bytes: u64::from_be_bytes(buffer_bytes) as usize,
            receive_buffer_bytes,
            sent: 0,
            acknowledged: 0,
            received: 0,
            last_ack_sent: 0,
        })
    }

    /// Datagrams between acknowledgements for datagrams of `datagram_bytes`, for a receive
    /// buffer of `buffer_bytes`: a quarter of the buffer, so two intervals in flight fill
    /// at most half of it. Sender and receiver compute it from the same receiver buffer.
    fn ack_interval(buffer_bytes: usize, datagram_bytes: usize) -> u64 {
        ((buffer_bytes / 4) / (datagram_bytes + DATAGRAM_OVERHEAD_BYTES)).max(1) as u64
    }

    /// Reads every pending acknowledgement; returns whether any arrived.
    fn read_acks(&mut self) -> io::Result<bool> {
        let mut count = [0u8; 8];
        let mut any = false;
        while let Some(length) = would_block(self.acks.recv(&mut count))? {
            if length != 8 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("acknowledgement of {length} bytes"),
                ));
            }
            self.acknowledged = self.acknowledged.max(u64::from_be_bytes(count));
            any = true;
        }
        Ok(any)
    }

    /// Tells the sender how many datagrams arrived so far.
    fn send_ack(&mut self) -> io::Result<()> {
        let count = self.received.to_be_bytes();
        let acks = &self.acks;
        spin("sending an acknowledgement", || {
            would_block(acks.send(&count))
        })?;
        self.last_ack_sent = self.received;
        Ok(())
    }
}

impl RawLink for UdpLink {
    fn send_message(&mut self, message: &[u8]) -> io::Result<()> {
        let datagram_bytes = message.len().min(MAX_DATAGRAM_BYTES);
        let credit = 2 * Self::ack_interval(self.peer_receive_buffer_bytes, datagram_bytes);
        let mut chunks = message.chunks(MAX_DATAGRAM_BYTES);
        // An empty message is one empty datagram; `chunks` would yield none.
        let mut empty = message.is_empty().then_some(&message[..0]);
        while let Some(chunk) = empty.take().or_else(|| chunks.next()) {
            if self.sent - self.acknowledged >= credit {
                spin("waiting for send credit", || {
                    self.read_acks()?;
                    Ok((self.sent - self.acknowledged < credit).then_some(()))
                })?;
            }
            let data = &self.data;
            let written = spin("sending a datagram", || would_block(data.send(chunk)))?;
            if written != chunk.len() {
                return Err(io::Error::new(io::ErrorKind::WriteZero, "short datagram"));
            }
            self.sent += 1;
        }
        Ok(())
    }

    fn receive_message(&mut self, buffer: &mut [u8]) -> io::Result<()> {
        let datagram_bytes = buffer.len().min(MAX_DATAGRAM_BYTES);
        let interval = Self::ack_interval(self.receive_buffer_bytes, datagram_bytes);
        let length = buffer.len();
        let mut offset = 0;
        loop {
            let end = (offset + MAX_DATAGRAM_BYTES).min(length);
            let slot = &mut buffer[offset..end];
            let data = &self.data;
            let received = spin("receiving a datagram", || would_block(data.recv(slot)))?;
            if received != end - offset {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "expected a {}-byte datagram, got {received} bytes",
                        end - offset
                    ),
                ));
            }
            self.received += 1;
            if self.received - self.last_ack_sent >= interval {
                self.send_ack()?;
            }
            offset = end;
            if offset >= length {
                // The tests alternate (pingpong) or flow one way (bw, rate): a message from
                // the other rank means it has consumed everything this rank sent before.
                self.acknowledged = self.sent;
                return Ok(());
            }
        }
    }

    fn send_window_ack(&mut self) -> io::Result<()> {
        if self.last_ack_sent != self.received {
            self.send_ack()?;
        }
        Ok(())
    }

    fn wait_window_ack(&mut self) -> io::Result<()> {
        if self.acknowledged < self.sent {
            spin("waiting for the window acknowledgement", || {
                self.read_acks()?;
                Ok((self.acknowledged >= self.sent).then_some(()))
            })?;
        }
        Ok(())
    }
}

/// Bytes of a page (the alignment of the baselines' message buffers).
pub(crate) const PAGE_BYTES: usize = 4096;

/// The `len` bytes of `storage` (at least `len + PAGE_BYTES` long) that start on a page
/// boundary. A large `Vec` starts 16 bytes into a page (malloc's header); the kernel's copy
/// between a socket buffer and such a buffer then runs with destination - source = 16
/// modulo 4096, where `rep movsb` on these AMD EPYC CPUs slows down several times (the
/// aliasing described in docs/PERFORMANCE.md): a 1 MiB tcp ping-pong measured 770-820 µs
/// one way against 370-480 µs page-aligned (a C program, 2026-11-21). A strong baseline
/// does not lose to that; quiver's tcp framing happens to shift its payload by its 16-byte
/// header, out of the slow window.
pub(crate) fn page_aligned(storage: &mut [u8], len: usize) -> &mut [u8] {
    let offset = storage.as_ptr().align_offset(PAGE_BYTES).min(PAGE_BYTES);
    &mut storage[offset..offset + len]
}

/// The big-endian port at `offset` of a bootstrap message.
fn port_from(message: &[u8], offset: usize) -> Result<u16, String> {
    match message.get(offset..offset + 2) {
        Some(&[high, low]) => Ok(u16::from_be_bytes([high, low])),
        _ => Err(format!(
            "bad address message from the other rank: {message:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_interval_keeps_two_intervals_within_half_the_buffer() {
        for buffer in [212_992usize, 1 << 20, 128 << 20] {
            for datagram in [0usize, 8, 1400, MAX_DATAGRAM_BYTES] {
                let interval = UdpLink::ack_interval(buffer, datagram) as usize;
                assert!(interval >= 1);
                if interval > 1 {
                    assert!(2 * interval * (datagram + DATAGRAM_OVERHEAD_BYTES) <= buffer / 2);
                }
            }
        }
    }

    #[test]
    fn tcp_messages_come_out_whole_through_the_staging_buffer_and_around_it() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let mut writer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let mut link = TcpLink::from_stream(listener.accept().unwrap().0).unwrap();
        let sizes = [
            8usize,
            1000,
            3,
            TCP_STAGING_BYTES + 17,
            8,
            5,
            TCP_STAGING_BYTES - 1,
        ];
        let messages: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(seed, &size)| (0..size).map(|i| (i * 7 + seed) as u8).collect())
            .collect();
        let all: Vec<u8> = messages.concat();
        let writing = std::thread::spawn(move || writer.write_all(&all).map(|()| writer));
        for (index, message) in messages.iter().enumerate() {
            link.set_latency_mode(index % 2 == 0);
            let mut buffer = vec![0u8; message.len()];
            link.receive_message(&mut buffer).unwrap();
            assert!(buffer == *message, "message {index}");
        }
        let mut writer = writing.join().unwrap().unwrap();
        // Three messages in one write: the first read stages all of them, so the other two
        // come out after the stream has ended.
        writer.write_all(&[1, 1, 2, 2, 3, 3]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        drop(writer);
        for expected in [[1u8, 1], [2, 2], [3, 3]] {
            let mut buffer = [0u8; 2];
            link.receive_message(&mut buffer).unwrap();
            assert_eq!(buffer, expected);
        }
        let mut buffer = [0u8; 2];
        let error = link.receive_message(&mut buffer).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn ports_parse() {
        assert_eq!(port_from(&[0x12, 0x34, 0, 1], 0), Ok(0x1234));
        assert_eq!(port_from(&[0x12, 0x34, 0, 1], 2), Ok(1));
        assert!(port_from(&[1], 0).is_err());
    }
}
