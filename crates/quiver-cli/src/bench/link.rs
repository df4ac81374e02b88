//! The quiver connection between the bench's two ranks, and the everyday tests measured
//! over it: pingpong, bw and rate ([`Link::pingpong`], [`Link::stream`]); bibw runs through
//! [`BenchLink`].
//!
//! Both ranks open endpoint port 0 and connect to each other's port 0, then run the same
//! tests in the same order with the same iteration counts (both derive them from the same
//! plan). Rank 0 drives every test and returns one record per measured point; rank 1
//! answers.
//!
//! The ranks use quiver's blocking calls, which busy-poll for the configured spin time
//! (`QUIVER_SPIN_US`, 2 ms by default) before they sleep, so a test never pays a wake-up.
//! If the other rank dies, the blocking call returns a `PeerDead` error instead of hanging.
//!
//! Timed loops do no allocation, logging or formatting: buffers and timestamp vectors are
//! sized before the loop; pingpong reads the clock once per round trip.
//!
//! bw and rate send a window of `window` messages, then wait for a 1-byte ack
//! (`Link::send_window`). Up to the eager limit (`QUIVER_SHM_EAGER_MAX`) every message has
//! its own buffer and all are posted. Above it the sender depends on the transport: where a
//! posted send is sent in place, never copied (udp and mem datagram connections, messages of
//! at least `QUIVER_UDP_POST_IN_PLACE_MIN`: [`Endpoint::posts_in_place`]) and two fit in
//! 2 MiB, it keeps two distinct buffers posted ([`plan::posted_in_place_buffers`]) and
//! posts each again as soon as its `wait_send` hands it back, so one message goes out
//! while the one before waits for its last acknowledgements (more in flight measured
//! slower); elsewhere (shm, tcp, larger messages, a window of 1) it sends one buffer
//! `window` times with blocking sends, as osu_bw does for rendezvous messages. The record
//! of the first kind carries `posted` (how many buffers). The receiver is the same in all
//! cases.
//!
//! Detection cost: around each timed run (pingpong, bw, rate; bibw: the whole point) both
//! ranks take their endpoint's [`DetectionStats`]; after it, rank 1 sends its share to
//! rank 0 (one 32-byte message, outside the timing), which puts the sum of both in the
//! record ([`DetectionCost`]) with `detect` = on or off.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use quiver::{
    Addr, Connection, Context, DetectionStats, Endpoint, Error, RecvRequest, SendRequest,
};

use super::generic::BenchLink;
use super::plan::{self, TestName, Transport};
use super::record::{
    DetectMode, DetectionCost, Labels, LatencyPoint, RatePoint, Record, StreamPoint,
};
use super::rendezvous::{connect, exchange_over, Rendezvous};
use super::stats;

/// The endpoint port both ranks use.
const BENCH_PORT: u16 = 0;
/// Size of the acknowledgement and synchronisation messages, in bytes.
pub const ACK_BYTES: usize = 1;
/// Size of the message carrying rank 1's detection cost: the four counters of
/// [`DetectionStats`], u64 each.
const DETECTION_BYTES: usize = 32;

/// The connection to the other rank.
pub struct Link {
    endpoint: Endpoint,
    connection: Connection,
    rank: u32,
    /// The transport the connection runs over (what its records say).
    transport: Transport,
    /// Largest message the transport copies eagerly; larger ones go by rendezvous.
    eager_max: u64,
    /// bibw: buffers of one window each way, and the requests in flight.
    exchange_sends: Vec<Vec<u8>>,
    exchange_receives: Vec<Vec<u8>>,
    send_requests: Vec<SendRequest>,
    receive_requests: Vec<RecvRequest>,
}

/// Buffers reused by every test, sized once for the largest message.
pub struct Buffers {
    /// What rank 0 sends (and rank 1 echoes): byte i is i mod 256.
    pub send: Vec<u8>,
    /// Where messages are received.
    pub receive: Vec<u8>,
    /// One timestamp per pingpong round trip, plus the start.
    pub stamps: Vec<Instant>,
}

impl Buffers {
    /// Buffers for messages of up to `max_bytes` and up to `max_round_trips` timed round
    /// trips, allocated and touched now (no page fault is timed).
    pub fn new(max_bytes: usize, max_round_trips: u64) -> Buffers {
        Buffers {
            send: (0..max_bytes).map(|index| index as u8).collect(),
            receive: vec![0u8; max_bytes],
            stamps: Vec::with_capacity(max_round_trips as usize + 1),
        }
    }
}

impl Link {
    /// Opens the bench's endpoint on `context`, connects to the other rank and makes the
    /// first exchange with it. `transport` is what the connection runs over (what its
    /// records say); `over` ends the context's part of error messages.
    ///
    /// # Errors
    /// Opening the endpoint, connecting, or the first exchange failed.
    pub fn open(context: &Context, transport: Transport, over: &str) -> Result<Link, String> {
        let rank = context.rank();
        let mut endpoint = context
            .endpoint(BENCH_PORT)
            .map_err(|error| format!("opening endpoint port {BENCH_PORT}{over}: {error}"))?;
        let peer = Addr::new(1 - rank, BENCH_PORT);
        let connection = connect(&mut endpoint, peer)?;
        let mut link = Link {
            endpoint,
            connection,
            rank,
            transport,
            eager_max: context.config().shm_eager_max,
            exchange_sends: Vec::new(),
            exchange_receives: Vec::new(),
            send_requests: Vec::new(),
            receive_requests: Vec::new(),
        };
        link.synchronise()
            .map_err(|error| format!("first exchange with rank {}{over}: {error}", peer.rank))?;
        Ok(link)
    }

    /// This rank's number (0 drives and reports, 1 answers).
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The transport the connection runs over.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// The connection to the other rank.
    pub fn connection(&self) -> Connection {
        self.connection
    }

    /// The endpoint, for tests measured by the lab over this connection.
    pub fn endpoint_mut(&mut self) -> &mut Endpoint {
        &mut self.endpoint
    }

    /// Turns failure detection on (with that detection time) or off, in this rank.
    ///
    /// # Errors
    /// A detection time the endpoint refuses.
    pub fn set_detection(&mut self, detect: Option<Duration>) -> Result<(), Error> {
        self.endpoint.set_detection(detect)
    }

    /// Rank 0 sends one byte, rank 1 answers: both are connected and at the same point.
    ///
    /// # Errors
    /// A quiver error or a message of the wrong length.
    pub fn synchronise(&mut self) -> StepResult<()> {
        let mut byte = [0u8; ACK_BYTES];
        if self.rank == 0 {
            self.send(&byte)?;
            self.receive_exact(&mut byte, ACK_BYTES)
        } else {
            self.receive_exact(&mut byte, ACK_BYTES)?;
            self.send(&byte)
        }
    }

    /// The last exchange: rank 1 exits only after it has answered everything.
    ///
    /// # Errors
    /// A quiver error or a message of the wrong length.
    pub fn finish(&mut self) -> StepResult<()> {
        self.synchronise()
    }

    /// Ping-pong of `size` bytes, `iters` timed round trips after a warm-up; rank 0
    /// returns the record.
    ///
    /// # Errors
    /// A quiver error or a message of the wrong length.
    pub fn pingpong(
        &mut self,
        buffers: &mut Buffers,
        size: u64,
        iters: u64,
    ) -> StepResult<Option<Record>> {
        let length = size as usize;
        let warmup = plan::warmup_iters(iters);
        let Buffers {
            send,
            receive,
            stamps,
        } = buffers;
        let message = &send[..length];
        if self.rank != 0 {
            for _ in 0..warmup {
                self.receive_exact(receive, length)?;
                self.send(message)?;
            }
            let before = self.endpoint.detection_stats();
            for _ in 0..iters {
                self.receive_exact(receive, length)?;
                self.send(message)?;
            }
            let own = self.endpoint.detection_stats().since(&before);
            self.total_detection(own)?;
            return Ok(None);
        }
        for _ in 0..warmup {
            self.send(message)?;
            self.receive_exact(receive, length)?;
        }
        stamps.clear();
        stamps.reserve(iters as usize + 1);
        let before = self.endpoint.detection_stats();
        stamps.push(Instant::now());
        for _ in 0..iters {
            self.send(message)?;
            self.receive_exact(receive, length)?;
            stamps.push(Instant::now());
        }
        let own = self.endpoint.detection_stats().since(&before);
        let both = self.total_detection(own)?;
        let timed = timed_span(stamps);
        let mut one_way_us: Vec<f64> = stamps
            .windows(2)
            .map(|pair| (pair[1] - pair[0]).as_secs_f64() * 1e6 / 2.0)
            .collect();
        stats::sort_samples(&mut one_way_us);
        let (latency_us, latency_p99_us) = stats::median_and_p99(&one_way_us);
        Ok(Some(Record::Pingpong(LatencyPoint {
            transport: self.transport,
            size,
            iters,
            latency_us,
            latency_p99_us,
            floor_us: None,
            floor_ratio: None,
            cpus: None,
            labels: Labels::default(),
            detection: Some(self.detection_cost(both, timed)),
        })))
    }

    /// osu_bw-style streaming: rank 0 posts `window` sends of `size` bytes, waits for them,
    /// then for rank 1's 1-byte ack; `windows` timed rounds after a warm-up. Rank 0 returns
    /// the record: bandwidth for bw, message rate for rate (`test` says which).
    ///
    /// # Errors
    /// A quiver error or a message of the wrong length.
    pub fn stream(
        &mut self,
        buffers: &mut Buffers,
        test: TestName,
        size: u64,
        window: u64,
        windows: u64,
    ) -> StepResult<Option<Record>> {
        let length = size as usize;
        let warmup = plan::warmup_windows(windows);
        if self.rank != 0 {
            let mut before = self.endpoint.detection_stats();
            for round in 0..warmup + windows {
                if round == warmup {
                    before = self.endpoint.detection_stats();
                }
                for _ in 0..window {
                    self.receive_exact(&mut buffers.receive, length)?;
                }
                self.send(&[0u8; ACK_BYTES])?;
            }
            let own = self.endpoint.detection_stats().since(&before);
            self.total_detection(own)?;
            return Ok(None);
        }
        // Owned send buffers (see send_window: a window of them up to the eager limit; above
        // it two kept posted where the transport sends posted sends in place, else one
        // reused buffer), touched now so no page fault is timed.
        let keep_posted = plan::posted_in_place_buffers(window, size)
            .filter(|_| self.endpoint.posts_in_place(self.connection, length));
        let (mode, pool_size) = match keep_posted {
            _ if size <= self.eager_max => (WindowMode::PostAll, window),
            Some(buffers) => (WindowMode::KeepPosted, buffers),
            None => (WindowMode::Repeat, 1),
        };
        let mut pool: Vec<Vec<u8>> = (0..pool_size)
            .map(|_| buffers.send[..length].to_vec())
            .collect();
        let mut requests: VecDeque<SendRequest> = VecDeque::with_capacity(pool_size as usize);
        let mut ack = [0u8; ACK_BYTES];
        for _ in 0..warmup {
            self.send_window(mode, &mut pool, window, &mut requests, &mut ack)?;
        }
        let before = self.endpoint.detection_stats();
        let start = Instant::now();
        for _ in 0..windows {
            self.send_window(mode, &mut pool, window, &mut requests, &mut ack)?;
        }
        let elapsed = start.elapsed();
        let own = self.endpoint.detection_stats().since(&before);
        let both = self.total_detection(own)?;
        let elapsed_us = elapsed.as_secs_f64() * 1e6;
        let messages = (window * windows) as f64;
        let detection = Some(self.detection_cost(both, elapsed));
        // bytes per µs = 10^6 bytes/s = MB/s; messages per µs = Mmsg/s.
        let record = match test {
            TestName::Rate => Record::Rate(RatePoint {
                transport: self.transport,
                size,
                iters: windows,
                window,
                rate_mmsgs: messages / elapsed_us,
                floor_mmsgs: None,
                floor_ratio: None,
                cpus: None,
                labels: Labels::default(),
                detection,
            }),
            _ => Record::Bw(StreamPoint {
                transport: self.transport,
                size,
                iters: windows,
                window,
                bandwidth_mbps: messages * size as f64 / elapsed_us,
                floor_mbps: None,
                floor_ratio: None,
                cpus: None,
                labels: Labels::default(),
                detection,
                posted: (mode == WindowMode::KeepPosted).then_some(pool_size),
            }),
        };
        Ok(Some(record))
    }

    /// After a timed run: rank 1 sends what its looks cost during it (`DETECTION_BYTES`);
    /// rank 0 receives that and returns the sum with its own `own` (rank 1 returns `own`).
    ///
    /// # Errors
    /// A quiver error or a message of the wrong length.
    pub fn total_detection(&mut self, own: DetectionStats) -> StepResult<DetectionStats> {
        let mut bytes = [0u8; DETECTION_BYTES];
        let own_words = [own.looks, own.look_ns, own.slow_looks, own.slow_look_ns];
        if self.rank != 0 {
            for (chunk, word) in bytes.chunks_exact_mut(8).zip(own_words) {
                chunk.copy_from_slice(&word.to_le_bytes());
            }
            self.send(&bytes)?;
            return Ok(own);
        }
        self.receive_exact(&mut bytes, DETECTION_BYTES)?;
        let mut sum = [0u64; 4];
        for ((total, chunk), word) in sum.iter_mut().zip(bytes.chunks_exact(8)).zip(own_words) {
            let mut peer = [0u8; 8];
            peer.copy_from_slice(chunk);
            *total = word.saturating_add(u64::from_le_bytes(peer));
        }
        let [looks, look_ns, slow_looks, slow_look_ns] = sum;
        Ok(DetectionStats {
            looks,
            look_ns,
            slow_looks,
            slow_look_ns,
        })
    }

    /// The detection mode and both ranks' look cost `both` over a timed run of `timed`.
    pub fn detection_cost(&self, both: DetectionStats, timed: Duration) -> DetectionCost {
        let timed_ns = timed.as_nanos() as f64;
        DetectionCost {
            detect: if self.endpoint.detection().is_some() {
                DetectMode::On
            } else {
                DetectMode::Off
            },
            detect_looks: both.looks,
            detect_ns: both.look_ns,
            detect_share: (timed_ns > 0.0).then(|| both.look_ns as f64 / timed_ns),
            detect_slow_looks: both.slow_looks,
            detect_slow_ns: both.slow_look_ns,
        }
    }

    /// Sends one window of `window` messages as `mode` says, then waits for the ack.
    /// [`WindowMode::PostAll`] (up to the eager limit): posts every buffer of `pool`
    /// (`window` of them) and waits until each is handed back. [`WindowMode::Repeat`]
    /// (above it): sends the one buffer of `pool` `window` times with blocking sends, as
    /// osu_bw does: a rendezvous send completes only once the receiver has pulled it, so
    /// posting them adds no overlap, and distinct buffers would only measure cache misses.
    /// [`WindowMode::KeepPosted`] (above it, where the transport sends posted sends in
    /// place): keeps every buffer of `pool` posted, waiting for the oldest request and
    /// posting its buffer again, until `window` messages are posted; then waits for all.
    fn send_window(
        &mut self,
        mode: WindowMode,
        pool: &mut Vec<Vec<u8>>,
        window: u64,
        requests: &mut VecDeque<SendRequest>,
        ack: &mut [u8; ACK_BYTES],
    ) -> StepResult<()> {
        match mode {
            WindowMode::Repeat => {
                if let Some(buffer) = pool.first() {
                    for _ in 0..window {
                        self.endpoint.send(self.connection, buffer)?;
                    }
                }
            }
            WindowMode::PostAll => {
                while let Some(buffer) = pool.pop() {
                    requests.push_back(self.endpoint.post_send(self.connection, buffer)?);
                }
                for request in requests.drain(..) {
                    pool.push(self.endpoint.wait_send(request)?);
                }
            }
            WindowMode::KeepPosted => {
                let mut posted = 0;
                while posted < window {
                    if let Some(buffer) = pool.pop() {
                        requests.push_back(self.endpoint.post_send(self.connection, buffer)?);
                        posted += 1;
                    } else if let Some(request) = requests.pop_front() {
                        pool.push(self.endpoint.wait_send(request)?);
                    } else {
                        // An empty pool with nothing posted: stream() made no buffer.
                        break;
                    }
                }
                while let Some(request) = requests.pop_front() {
                    pool.push(self.endpoint.wait_send(request)?);
                }
            }
        }
        self.receive_exact(ack, ACK_BYTES)
    }

    /// Sends `message`; the blocking call busy-polls for the configured spin time first.
    ///
    /// # Errors
    /// A quiver error.
    pub fn send(&mut self, message: &[u8]) -> StepResult<()> {
        Ok(self.endpoint.send(self.connection, message)?)
    }

    /// Receives one message and checks it is `length` bytes long.
    ///
    /// # Errors
    /// A quiver error or a message of another length.
    pub fn receive_exact(&mut self, buffer: &mut [u8], length: usize) -> StepResult<()> {
        match self.endpoint.recv(buffer)? {
            (received, _) if received == length => Ok(()),
            (received, source) => Err(StepError::UnexpectedLength {
                expected: length,
                received,
                source,
            }),
        }
    }
}

impl BenchLink for Link {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn transport(&self) -> Transport {
        self.transport
    }

    fn send_message(&mut self, message: &[u8]) -> Result<(), String> {
        self.send(message).map_err(|error| error.to_string())
    }

    fn receive_message(&mut self, buffer: &mut [u8]) -> Result<(), String> {
        let length = buffer.len();
        self.receive_exact(buffer, length)
            .map_err(|error| error.to_string())
    }

    fn send_window_ack(&mut self) -> Result<(), String> {
        self.send(&[0u8; ACK_BYTES])
            .map_err(|error| error.to_string())
    }

    fn wait_window_ack(&mut self) -> Result<(), String> {
        let mut ack = [0u8; ACK_BYTES];
        self.receive_exact(&mut ack, ACK_BYTES)
            .map_err(|error| error.to_string())
    }

    fn prepare_exchange(&mut self, size: u64, count: u64) -> Result<(), String> {
        let length = size as usize;
        self.exchange_sends = (0..count).map(|index| vec![index as u8; length]).collect();
        self.exchange_receives = (0..count).map(|_| vec![0u8; length]).collect();
        self.send_requests = Vec::with_capacity(count as usize);
        self.receive_requests = Vec::with_capacity(count as usize);
        Ok(())
    }

    /// Posts every receive, then every send, then waits for the sends and the receives
    /// (osu_bibw's irecv/isend/waitall), handing the buffers back to the pools.
    fn exchange(&mut self, count: u64) -> Result<(), String> {
        let text = |error: Error| error.to_string();
        let expected = self.exchange_sends.first().map_or(0, Vec::len);
        for _ in 0..count {
            let Some(buffer) = self.exchange_receives.pop() else {
                return Err("bibw: more receives than prepared buffers".to_string());
            };
            let request = self.endpoint.post_recv(buffer).map_err(text)?;
            self.receive_requests.push(request);
        }
        for _ in 0..count {
            let Some(buffer) = self.exchange_sends.pop() else {
                return Err("bibw: more sends than prepared buffers".to_string());
            };
            let request = self
                .endpoint
                .post_send(self.connection, buffer)
                .map_err(text)?;
            self.send_requests.push(request);
        }
        while let Some(request) = self.send_requests.pop() {
            let buffer = self.endpoint.wait_send(request).map_err(text)?;
            self.exchange_sends.push(buffer);
        }
        while let Some(request) = self.receive_requests.pop() {
            let completion = self.endpoint.wait_recv(request).map_err(text)?;
            if completion.len != expected {
                return Err(format!(
                    "bibw: expected a {expected}-byte message, got {} bytes",
                    completion.len
                ));
            }
            self.exchange_receives.push(completion.buf);
        }
        Ok(())
    }
}

/// How rank 0 sends a window of bw or rate (`Link::send_window`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WindowMode {
    /// Up to the eager limit: one buffer per message, all posted, then waited for.
    PostAll,
    /// Above it, where the transport sends posted sends in place (udp, mem datagram
    /// connections, `Endpoint::posts_in_place`) and two buffers fit
    /// ([`plan::posted_in_place_buffers`]): those kept posted, each posted again when it
    /// comes back.
    KeepPosted,
    /// Above it otherwise (shm, tcp, larger messages): one buffer sent `window` times with
    /// blocking sends.
    Repeat,
}

/// From the first to the last timestamp of a timed run (zero with fewer than two).
pub fn timed_span(stamps: &[Instant]) -> Duration {
    match (stamps.first(), stamps.last()) {
        (Some(first), Some(last)) => last.saturating_duration_since(*first),
        _ => Duration::ZERO,
    }
}

/// Why one step of a test failed.
#[derive(Debug)]
pub enum StepError {
    /// The quiver API returned an error.
    Quiver(Error),
    /// A message of the wrong length arrived (the ranks disagree about the plan).
    UnexpectedLength {
        /// The length the plan says.
        expected: usize,
        /// The length that arrived.
        received: usize,
        /// Who sent it.
        source: Addr,
    },
}

/// The result of one step of a test.
pub type StepResult<T> = Result<T, StepError>;

impl From<Error> for StepError {
    fn from(error: Error) -> StepError {
        StepError::Quiver(error)
    }
}

impl std::fmt::Display for StepError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StepError::Quiver(error) => write!(formatter, "{error}"),
            StepError::UnexpectedLength {
                expected,
                received,
                source,
            } => write!(
                formatter,
                "expected a {expected}-byte message, got {received} bytes from {source}"
            ),
        }
    }
}

impl Rendezvous for Link {
    /// A paired run's raw link sets up over the quiver connection, idle at that moment
    /// (right after the first synchronisation).
    fn exchange(&mut self, mine: &[u8]) -> Result<Vec<u8>, String> {
        exchange_over(&mut self.endpoint, self.connection, mine)
    }
}
