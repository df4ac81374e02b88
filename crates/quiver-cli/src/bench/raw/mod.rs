//! The raw-socket baselines of `quiver bench` (`--transport raw-udp|raw-tcp`): the same
//! tests as the quiver transports (pingpong, bw, rate), over plain sockets on 127.0.0.1
//! with no protocol beyond what is needed to know where a message ends. These are the
//! floors quiver's own udp and tcp transports are compared against.
//!
//! Both ranks are started, pinned and watched exactly like quiver's ranks (`ranks.rs`) and
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
//! The two ranks find each other through a [`Rendezvous`]: run alone ([`RawRank`]),
//! through quiver's shm endpoint (rank 1 tells rank 0 its ports), which stays idle
//! afterwards and carries the last synchronisation. The lab's paired runs open the same
//! link next to quiver's udp or tcp connection and trade the ports over that connection
//! itself: its context is built for the network transport only, and the connection under
//! test is already open and idle at that point, so no second quiver path is needed. The
//! tests run through [`RawBaseline`], one call per measured run, for both uses.
//!
//! Timing and records are as over quiver (`link.rs`): one clock read per pingpong round
//! trip, osu_bw style windows, one JSON [`Record`] line per point from rank 0.
//!
//! Layout: this file (the baseline and its two tests), `link.rs` (what a raw link is),
//! `tcp.rs` and `udp.rs` (the two links), `spin.rs` (waiting by spinning).

mod link;
mod spin;
mod tcp;
mod udp;

pub use spin::{ready, spin, would_block, SPINS_PER_CLOCK_READ, STALL_TIMEOUT};
pub use tcp::TCP_STAGING_BYTES;
pub use udp::MAX_DATAGRAM_BYTES;

use std::io;
use std::time::Instant;

use quiver::{Addr, Connection, Endpoint};

use super::generic::BenchLink;
use super::plan::{self, Plan, TestName, Transport};
use super::record::{Labels, LatencyPoint, RatePoint, Record, StreamPoint};
use super::rendezvous::{connect, exchange_over, open_context, Rendezvous};
use super::stats;
use link::RawLink;
use tcp::TcpLink;
use udp::UdpLink;

/// The quiver endpoint port used to exchange socket addresses.
const BOOTSTRAP_PORT: u16 = 0;

/// A raw link as the generic tests see it, with the buffers of one bibw window.
pub struct Generic<'a> {
    link: &'a mut dyn RawLink,
    rank: u32,
    transport: Transport,
    exchange_send: Vec<u8>,
    exchange_receive: Vec<u8>,
}

impl BenchLink for Generic<'_> {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn transport(&self) -> Transport {
        self.transport
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

/// A raw-socket baseline ready to measure: the link, this rank, and page-aligned message
/// buffers for the largest message of the plan. Used by `--transport raw-*` ([`RawRank`])
/// and, block by block, by the lab's paired runs.
pub struct RawBaseline {
    link: Box<dyn RawLink>,
    rank: u32,
    transport: Transport,
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
    ///
    /// # Errors
    /// `transport` is not raw, or setting up the sockets failed.
    pub fn open(
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
            transport,
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
    pub fn generic(&mut self) -> Generic<'_> {
        Generic {
            link: self.link.as_mut(),
            rank: self.rank,
            transport: self.transport,
            exchange_send: Vec::new(),
            exchange_receive: Vec::new(),
        }
    }

    /// The link as the generic tests see it, with the page-aligned send buffer (byte i is
    /// i mod 256) and receive buffer of the plan's largest message (the lab's LogGP test).
    pub fn generic_with_buffers(&mut self) -> (Generic<'_>, &[u8], &mut [u8]) {
        let transport = self.transport;
        let (link, rank, send, receive) = self.parts();
        let generic = Generic {
            link,
            rank,
            transport,
            exchange_send: Vec::new(),
            exchange_receive: Vec::new(),
        };
        (generic, send, receive)
    }

    /// One pingpong run (warm-up, then `iters` timed round trips) of `size` bytes; rank 0
    /// returns the record. `size` must be at most the plan's largest message.
    ///
    /// # Errors
    /// A socket error, a message of the wrong length, or a stall.
    pub fn pingpong(&mut self, size: u64, iters: u64) -> io::Result<Option<Record>> {
        let length = size as usize;
        let send = &*page_aligned(&mut self.send_storage, self.max_bytes);
        let receive = page_aligned(&mut self.receive_storage, self.max_bytes);
        self.link.set_latency_mode(true);
        let record = pingpong(
            self.link.as_mut(),
            (self.rank, self.transport),
            &send[..length],
            &mut receive[..length],
            iters,
            &mut self.stamps,
        );
        self.link.set_latency_mode(false);
        record
    }

    /// One bw or rate run (warm-up, then `windows` timed windows of `window` messages of
    /// `size` bytes); rank 0 returns the record (`test` says which).
    ///
    /// # Errors
    /// A socket error, a message of the wrong length, or a stall.
    pub fn stream(
        &mut self,
        test: TestName,
        size: u64,
        window: u64,
        windows: u64,
    ) -> io::Result<Option<Record>> {
        let length = size as usize;
        let transport = self.transport;
        let (link, rank, send, receive) = self.parts();
        stream(
            link,
            (rank, transport),
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
    (rank, transport): (u32, Transport),
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
    let (latency_us, latency_p99_us) = stats::median_and_p99(&one_way_us);
    Ok(Some(Record::Pingpong(LatencyPoint {
        transport,
        size: message.len() as u64,
        iters,
        latency_us,
        latency_p99_us,
        floor_us: None,
        floor_ratio: None,
        cpus: None,
        labels: Labels::default(),
        detection: None,
    })))
}

/// osu_bw-style streaming: rank 0 sends `window` messages, then waits for the window ack;
/// `windows` timed rounds after a warm-up. Rank 0 returns bandwidth (bw) or rate (rate).
fn stream(
    link: &mut dyn RawLink,
    (rank, transport): (u32, Transport),
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
    // bytes per µs = MB/s; messages per µs = Mmsg/s.
    let record = match test {
        TestName::Rate => Record::Rate(RatePoint {
            transport,
            size,
            iters: windows,
            window,
            rate_mmsgs: messages / elapsed_us,
            floor_mmsgs: None,
            floor_ratio: None,
            cpus: None,
            labels: Labels::default(),
            detection: None,
        }),
        _ => Record::Bw(StreamPoint {
            transport,
            size,
            iters: windows,
            window,
            bandwidth_mbps: messages * size as f64 / elapsed_us,
            floor_mbps: None,
            floor_ratio: None,
            cpus: None,
            labels: Labels::default(),
            detection: None,
            posted: None,
        }),
    };
    Ok(Some(record))
}

/// A rank of `--transport raw-*`: the idle quiver shm connection the two ranks found each
/// other through (it carries the setup and the last synchronisation) and the baseline.
pub struct RawRank {
    bootstrap: Bootstrap,
    baseline: RawBaseline,
}

impl RawRank {
    /// Builds the job's context, connects to the other rank over it and opens the raw
    /// link of the plan's transport, with buffers for every message of the plan.
    ///
    /// # Errors
    /// The context, the connection or the raw link could not be set up.
    pub fn open(plan: &Plan) -> Result<RawRank, String> {
        let context = open_context()?;
        let rank = context.rank();
        let mut endpoint = context
            .endpoint(BOOTSTRAP_PORT)
            .map_err(|error| format!("opening endpoint port {BOOTSTRAP_PORT}: {error}"))?;
        let connection = connect(&mut endpoint, Addr::new(1 - rank, BOOTSTRAP_PORT))?;
        let mut bootstrap = Bootstrap {
            endpoint,
            connection,
        };
        let baseline = RawBaseline::open(plan.transport, rank, &mut bootstrap, plan)?;
        Ok(RawRank {
            bootstrap,
            baseline,
        })
    }

    /// The baseline to measure.
    pub fn baseline(&mut self) -> &mut RawBaseline {
        &mut self.baseline
    }

    /// The last exchange: rank 1 exits only after rank 0 has finished everything.
    ///
    /// # Errors
    /// The exchange failed.
    pub fn finish(mut self) -> Result<(), String> {
        self.bootstrap
            .exchange(&[0])
            .map_err(|error| format!("last exchange: {error}"))?;
        Ok(())
    }
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

/// Bytes of a page (the alignment of the baselines' message buffers).
pub const PAGE_BYTES: usize = 4096;

/// The `len` bytes of `storage` (at least `len + PAGE_BYTES` long) that start on a page
/// boundary. A large `Vec` starts 16 bytes into a page (malloc's header); the kernel's copy
/// between a socket buffer and such a buffer then runs with destination - source = 16
/// modulo 4096, where `rep movsb` on some AMD EPYC CPUs slows down several times (4 KiB
/// aliasing): a 1 MiB tcp ping-pong measured 770-820 µs one way against 370-480 µs
/// page-aligned (a C program on the development machines). A strong baseline
/// does not lose to that; quiver's tcp framing happens to shift its payload by its 16-byte
/// header, out of the slow window.
pub fn page_aligned(storage: &mut [u8], len: usize) -> &mut [u8] {
    let offset = storage.as_ptr().align_offset(PAGE_BYTES).min(PAGE_BYTES);
    &mut storage[offset..offset + len]
}
