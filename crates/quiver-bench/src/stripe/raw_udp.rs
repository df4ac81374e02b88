//! The floor of `quiver-bench stripe --raw-udp`: a udp stream with no protocol, striped
//! over the same links as the quiver transfer, so that quiver's goodput can be read
//! against what udp sockets alone move here with the same CPUs.
//!
//! The sender has one connected socket per link and sends GSO runs (`UDP_SEGMENT`) of as
//! many datagrams of the link MTU's payload as one send takes (44 at MTU 1500). Each
//! datagram starts with a header that says where its bytes belong (`raw_framing`: the
//! stream offset, or with `--raw-udp-tagged` an authenticated Stream frame's header); the
//! rest is the stream's bytes at that offset: the quiver transfer's message bodies, one
//! after another. Runs go round robin to
//! the sockets that take them: the sockets are non-blocking with a small send buffer, so a
//! socket whose packets still wait in the link's queue says `EAGAIN` and the run goes to
//! the next one, and the socket's own accounting paces the link instead of qdisc drops.
//!
//! The receiver has one socket per link with `UDP_GRO`, takes `recvmmsg` batches, checks
//! every datagram's bytes against the stream (one slice comparison, as the quiver receiver
//! compares each message) and counts distinct and duplicate datagrams. Nothing is
//! retransmitted: what the sender sent and the receiver did not count was lost.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use quiver_transport::sys;
use quiver_transport::udp::{max_gso_bytes, GatherBuffer, RecvBatch, UdpSocket};
use quiver_transport::udp::{MAX_COALESCED_BYTES, MAX_GSO_SEGMENTS};

use super::plan::{link_address, StripeArgs, CONTENTS, MESSAGE_BYTES};
use super::raw_framing::RawFraming;
use super::record::{RawReceiverReport, RawSenderReport};
use super::worker::{contents, cpu_seconds, monotonic_ns, udp_counters};

/// UDP port of the raw stream on every link.
pub(crate) const RAW_UDP_PORT: u16 = 7600;
/// IPv4 + udp header bytes: a datagram carries the link MTU minus these.
const IP_UDP_HEADER_BYTES: u32 = 28;
/// The sender's first datagram (link 0), echoed once the receiver's sockets are all bound.
const HELLO: &[u8] = b"QVRAWHELLO";
/// The sender's last datagram on every link: this marker, then the datagram count (u64 LE).
const END_MARKER: &[u8; 8] = b"QVRAWEND";
/// Send buffer of each sender socket: small, so that a link's backlog blocks its socket
/// before the link's queue drops packets.
const SEND_BUFFER_BYTES: usize = 256 << 10;
/// The receiver ends this long after the end marker once nothing more arrives, or this
/// many times longer without one (the marker is a datagram and can be lost too).
const END_IDLE: Duration = Duration::from_millis(300);
const LOST_END_IDLE_FACTOR: u32 = 10;
/// How long either side waits for the other to appear.
const PEER_WAIT: Duration = Duration::from_secs(20);
/// Most datagrams one run may account for (the receiver's bitmap of them: 128 MiB).
const MAX_DATAGRAMS: u64 = 1 << 30;
/// Messages one receive call takes.
const RECV_BATCH: usize = 16;

/// The stream both sides derive: the quiver transfer's message bodies one after another,
/// repeating, with a run's worth of the start appended so that any datagram's bytes are
/// one slice.
pub(crate) struct Stream {
    bytes: Vec<u8>,
}

impl Stream {
    const PERIOD: usize = CONTENTS * MESSAGE_BYTES;

    pub(crate) fn new() -> Stream {
        let mut bytes: Vec<u8> = contents().concat();
        bytes.extend_from_within(..MAX_COALESCED_BYTES);
        Stream { bytes }
    }

    /// The stream's `len` bytes at `offset` (`len` at most 64 KiB).
    pub(crate) fn at(&self, offset: u64, len: usize) -> &[u8] {
        let start = (offset % Self::PERIOD as u64) as usize;
        &self.bytes[start..start + len.min(MAX_COALESCED_BYTES)]
    }
}

/// Runs a raw-udp worker role (`raw-udp-sender`, `raw-udp-receiver`) over the links of
/// `args` and prints its report as one JSON line.
///
/// # Errors
/// What failed, as text.
pub(crate) fn run_worker(role: &str, args: &StripeArgs) -> Result<(), String> {
    let datagram_bytes = args.mtu.saturating_sub(IP_UDP_HEADER_BYTES) as usize;
    let link = |link, side| link_address(link, side, RAW_UDP_PORT);
    let (side, tagged) = match role.strip_prefix("raw-udp-tagged-") {
        Some(side) => (side, true),
        None => (role.strip_prefix("raw-udp-").unwrap_or(role), false),
    };
    let framing = RawFraming::new(tagged);
    let json = match side {
        "sender" => {
            let pairs: Vec<_> = (0..args.worker_links)
                .map(|index| (link(index, 0), link(index, 1)))
                .collect();
            let seconds = Duration::from_secs_f64(args.seconds);
            serde_json::to_string(&send(&pairs, datagram_bytes, &framing, seconds)?)
        }
        "receiver" => {
            let locals: Vec<_> = (0..args.worker_links).map(|index| link(index, 1)).collect();
            serde_json::to_string(&Receiver::bind(&locals)?.run(datagram_bytes, &framing)?)
        }
        _ => return Err(format!("unknown worker role {role:?}")),
    }
    .map_err(|error| format!("encoding the report: {error}"))?;
    println!("{json}");
    Ok(())
}

/// Sends the stream for `seconds` over one socket per `(local, peer)` pair in datagrams of
/// `datagram_bytes` laid out as `framing` says, then the end marker on every link.
///
/// # Errors
/// A socket could not be set up, the receiver did not answer, or a send failed.
pub(crate) fn send(
    pairs: &[(SocketAddr, SocketAddr)],
    datagram_bytes: usize,
    framing: &RawFraming,
    seconds: Duration,
) -> Result<RawSenderReport, String> {
    let header_bytes = framing.header_bytes();
    let payload = datagram_bytes
        .checked_sub(header_bytes)
        .filter(|&bytes| bytes > 0)
        .ok_or("the datagrams are too small for their header")?;
    let mut sockets = pairs
        .iter()
        .map(|&(local, peer)| sender_socket(local, peer))
        .collect::<Result<Vec<_>, _>>()?;
    greet(&mut sockets[0])?;
    let stream = Stream::new();
    let per_run =
        (max_gso_bytes(datagram_bytes, false) / datagram_bytes).clamp(1, MAX_GSO_SEGMENTS);
    let mut headers = vec![0u8; per_run * header_bytes];
    let mut gather_buffer = GatherBuffer::with_capacity(2 * per_run, 1);
    let mut report = RawSenderReport {
        link_bytes: vec![0; sockets.len()],
        ..RawSenderReport::default()
    };
    let (cpu_before, start) = (cpu_seconds(), Instant::now());
    let (mut next, mut refused_in_row) = (0usize, 0usize);
    while start.elapsed() < seconds {
        let first = report.datagrams;
        for (index, header) in headers.chunks_exact_mut(header_bytes).enumerate() {
            let index = first + index as u64;
            let offset = index * payload as u64;
            framing.write_header(index, offset, stream.at(offset, payload), header)?;
        }
        let socket = &mut sockets[next];
        let mut gather = gather_buffer.gather();
        gather.start_message(socket.connected_peer().unwrap_or(pairs[next].1));
        for (index, header) in headers.chunks_exact(header_bytes).enumerate() {
            gather.push_part(header);
            gather.push_part(stream.at((first + index as u64) * payload as u64, payload));
        }
        gather.set_segment_size(Some(datagram_bytes as u16));
        match socket.send_gather(&gather, 0) {
            Ok(0) => {}
            Ok(_) => {
                report.datagrams += per_run as u64;
                report.link_bytes[next] += (per_run * payload) as u64;
                refused_in_row = 0;
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                report.would_block += 1;
                refused_in_row += 1;
                if refused_in_row >= sockets.len() {
                    wait_for(&sockets, libc::POLLOUT, Duration::from_millis(10))?;
                    refused_in_row = 0;
                }
            }
            Err(error) => return Err(format!("sending on link {next}: {error}")),
        }
        next = (next + 1) % sockets.len();
    }
    report.elapsed_seconds = start.elapsed().as_secs_f64();
    report.cpu_seconds = cpu_seconds() - cpu_before;
    send_end(&mut sockets, report.datagrams);
    report.udp_counters = udp_counters();
    Ok(report)
}

/// A sender socket: bound to `local`, connected to `peer`, with a small send buffer and GSO.
fn sender_socket(local: SocketAddr, peer: SocketAddr) -> Result<UdpSocket, String> {
    let mut socket = UdpSocket::bind(local).map_err(|error| format!("binding {local}: {error}"))?;
    socket
        .connect(peer)
        .map_err(|error| format!("connecting to {peer}: {error}"))?;
    socket
        .set_buffer_sizes(SEND_BUFFER_BYTES, SEND_BUFFER_BYTES)
        .map_err(|error| format!("sizing the buffers of {local}: {error}"))?;
    if !socket.gso_supported() {
        return Err(format!("no UDP_SEGMENT on {local}"));
    }
    Ok(socket)
}

/// Sends HELLO until the receiver echoes it (all its sockets are bound by then).
fn greet(socket: &mut UdpSocket) -> Result<(), String> {
    let peer = socket
        .connected_peer()
        .ok_or("the socket is not connected")?;
    let deadline = Instant::now() + PEER_WAIT;
    let mut batch = RecvBatch::new(1, MAX_COALESCED_BYTES);
    while Instant::now() < deadline {
        // Errors before the receiver is there (ECONNREFUSED from its closed port) only
        // mean "not yet".
        let _ = socket.send_one(peer, HELLO);
        if socket
            .wait_readable(Some(Duration::from_millis(20)))
            .unwrap_or(false)
            && matches!(socket.recv_one(&mut batch), Ok(1))
            && batch.message(0).data == HELLO
        {
            return Ok(());
        }
    }
    Err("the raw-udp receiver did not answer".to_string())
}

/// The end marker with the datagram count, a few times on every link (best effort: the
/// receiver also ends once nothing arrives for a while).
fn send_end(sockets: &mut [UdpSocket], datagrams: u64) {
    let mut end = [0u8; 16];
    end[..8].copy_from_slice(END_MARKER);
    end[8..].copy_from_slice(&datagrams.to_le_bytes());
    for _ in 0..5 {
        for socket in sockets.iter_mut() {
            if let Some(peer) = socket.connected_peer() {
                let _ = socket.send_one(peer, &end);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until one of `sockets` is ready for `events`, for at most `timeout`.
fn wait_for(sockets: &[UdpSocket], events: libc::c_short, timeout: Duration) -> Result<(), String> {
    let mut fds: Vec<libc::pollfd> = sockets
        .iter()
        .map(|socket| libc::pollfd {
            fd: socket.as_raw_fd(),
            events,
            revents: 0,
        })
        .collect();
    sys::poll(&mut fds, Some(timeout))
        .map(drop)
        .map_err(|error| format!("poll: {error}"))
}

/// The receiving side: one GRO socket per link.
pub(crate) struct Receiver {
    sockets: Vec<UdpSocket>,
}

/// What the receiver counted so far.
struct Tally {
    report: RawReceiverReport,
    seen: Vec<u64>,
    cpu_at_first: f64,
    last_activity: Instant,
}

impl Receiver {
    /// Binds one socket per address of `locals`, with GRO.
    ///
    /// # Errors
    /// A bind or GRO failed.
    pub(crate) fn bind(locals: &[SocketAddr]) -> Result<Receiver, String> {
        let sockets = locals
            .iter()
            .map(|&local| {
                let mut socket =
                    UdpSocket::bind(local).map_err(|error| format!("binding {local}: {error}"))?;
                socket
                    .set_gro(true)
                    .map_err(|error| format!("UDP_GRO on {local}: {error}"))?;
                Ok(socket)
            })
            .collect::<Result<_, String>>()?;
        Ok(Receiver { sockets })
    }

    /// Where the sockets are bound.
    #[cfg(test)]
    pub(crate) fn local_addresses(&self) -> Vec<SocketAddr> {
        self.sockets.iter().map(UdpSocket::local_address).collect()
    }

    /// Receives and checks datagrams of `datagram_bytes`, laid out as `framing` says,
    /// until the sender is done.
    ///
    /// # Errors
    /// A datagram that is not the stream's, a receive failure, or no sender.
    pub(crate) fn run(
        mut self,
        datagram_bytes: usize,
        framing: &RawFraming,
    ) -> Result<RawReceiverReport, String> {
        let stream = Stream::new();
        let expected = Expected {
            stream: &stream,
            framing,
            payload: datagram_bytes.saturating_sub(framing.header_bytes()).max(1),
        };
        let mut batch = RecvBatch::new(RECV_BATCH, MAX_COALESCED_BYTES);
        let started = Instant::now();
        let mut tally = Tally {
            report: RawReceiverReport::default(),
            seen: Vec::new(),
            cpu_at_first: 0.0,
            last_activity: started,
        };
        loop {
            let mut any = false;
            for socket in &mut self.sockets {
                match socket.recv_batch(&mut batch) {
                    Ok(_) => {
                        any = true;
                        tally.take(socket, &batch, &expected)?;
                    }
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                    Err(error) => return Err(format!("receiving: {error}")),
                }
            }
            if any {
                continue;
            }
            if tally.done(started)? {
                break;
            }
            wait_for(&self.sockets, libc::POLLIN, Duration::from_millis(50))?;
        }
        tally.report.cpu_seconds = cpu_seconds() - tally.cpu_at_first;
        tally.report.udp_counters = udp_counters();
        Ok(tally.report)
    }
}

impl Tally {
    /// Counts and checks the messages of `batch`, which arrived on `socket`.
    fn take(
        &mut self,
        socket: &mut UdpSocket,
        batch: &RecvBatch,
        expected: &Expected<'_>,
    ) -> Result<(), String> {
        let now = monotonic_ns();
        self.last_activity = Instant::now();
        for message in batch.iter() {
            for datagram in message.datagrams() {
                if datagram == HELLO {
                    let _ = socket.send_to(message.source, HELLO);
                } else if datagram.len() == 16 && datagram[..8] == END_MARKER[..] {
                    let mut count = [0u8; 8];
                    count.copy_from_slice(&datagram[8..]);
                    self.report.sent_datagrams = Some(u64::from_le_bytes(count));
                } else {
                    self.check(datagram, expected)?;
                    if self.report.first_ns == 0 {
                        self.report.first_ns = now;
                        self.cpu_at_first = cpu_seconds();
                    }
                    self.report.last_ns = now;
                }
            }
        }
        Ok(())
    }

    /// Checks one data datagram against the stream and counts it.
    fn check(&mut self, datagram: &[u8], expected: &Expected<'_>) -> Result<(), String> {
        let index = check_datagram(datagram, expected)?;
        let (word, bit) = ((index / 64) as usize, 1u64 << (index % 64));
        if word >= self.seen.len() {
            self.seen.resize(word + 1, 0);
        }
        if self.seen[word] & bit != 0 {
            self.report.duplicates += 1;
        } else {
            self.seen[word] |= bit;
            self.report.datagrams += 1;
            self.report.bytes += expected.payload as u64;
        }
        Ok(())
    }

    /// Whether the sender is done (its end marker and a quiet spell, or a long quiet
    /// spell); an error when it never came.
    fn done(&self, started: Instant) -> Result<bool, String> {
        let quiet = self.last_activity.elapsed();
        if self.report.datagrams == 0 {
            if started.elapsed() > PEER_WAIT + PEER_WAIT {
                return Err("no raw-udp datagram arrived".to_string());
            }
            return Ok(false);
        }
        Ok(match self.report.sent_datagrams {
            Some(_) => quiet > END_IDLE,
            None => quiet > END_IDLE * LOST_END_IDLE_FACTOR,
        })
    }
}

/// What a data datagram is checked against: the stream, the layout of the datagrams and
/// the stream bytes each carries.
pub(crate) struct Expected<'a> {
    pub(crate) stream: &'a Stream,
    pub(crate) framing: &'a RawFraming,
    pub(crate) payload: usize,
}

/// The index of `datagram` in the stream, once its header and bytes are the stream's.
///
/// # Errors
/// A length, offset, authenticator or byte that the sender could not have sent.
pub(crate) fn check_datagram(datagram: &[u8], expected: &Expected<'_>) -> Result<u64, String> {
    let (index, offset) = expected.framing.locate(datagram, expected.payload)?;
    if index >= MAX_DATAGRAMS {
        return Err(format!("a datagram at offset {offset}"));
    }
    let bytes = &datagram[expected.framing.header_bytes()..];
    if bytes != expected.stream.at(offset, expected.payload) {
        return Err(format!(
            "the datagram at offset {offset} is not what was sent"
        ));
    }
    Ok(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_datagram_finds_a_changed_byte_and_a_bad_offset() {
        let stream = Stream::new();
        let framing = RawFraming::new(false);
        let payload = 1464;
        let expected = Expected {
            stream: &stream,
            framing: &framing,
            payload,
        };
        let offset = 12_345 * payload as u64;
        let mut datagram = offset.to_le_bytes().to_vec();
        datagram.extend_from_slice(stream.at(offset, payload));
        assert_eq!(check_datagram(&datagram, &expected), Ok(12_345));
        datagram[500] ^= 1;
        assert!(check_datagram(&datagram, &expected).is_err());
        datagram[500] ^= 1;
        datagram[..8].copy_from_slice(&(offset + 1).to_le_bytes());
        assert!(check_datagram(&datagram, &expected).is_err());
        assert!(check_datagram(&datagram[..100], &expected).is_err());
        let wrapped = (Stream::PERIOD as u64 / payload as u64 + 1) * payload as u64;
        let mut across = wrapped.to_le_bytes().to_vec();
        across.extend_from_slice(stream.at(wrapped, payload));
        assert!(check_datagram(&across, &expected).is_ok());
    }

    /// Sends a short stream over two loopback links in `framing`'s layout and checks that
    /// it arrived whole.
    fn send_and_check(tagged: bool) {
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        let receiver = Receiver::bind(&[any, any]).expect("receiver sockets");
        let peers = receiver.local_addresses();
        let datagram_bytes = 1472;
        let receiving =
            std::thread::spawn(move || receiver.run(datagram_bytes, &RawFraming::new(tagged)));
        let pairs: Vec<_> = peers.iter().map(|&peer| (any, peer)).collect();
        let framing = RawFraming::new(tagged);
        let sent =
            send(&pairs, datagram_bytes, &framing, Duration::from_millis(200)).expect("sent");
        let received = receiving.join().expect("no panic").expect("received");
        assert!(sent.datagrams > 0);
        assert_eq!(received.sent_datagrams, Some(sent.datagrams));
        assert!(received.datagrams > 0 && received.datagrams <= sent.datagrams);
        assert_eq!(
            received.bytes,
            received.datagrams * (datagram_bytes - framing.header_bytes()) as u64
        );
        assert!(
            sent.link_bytes.iter().all(|&bytes| bytes > 0),
            "both links carried data"
        );
    }

    #[test]
    fn a_short_stream_over_two_loopback_links_arrives_checked() {
        send_and_check(false);
    }

    #[test]
    fn a_short_tagged_stream_arrives_verified() {
        send_and_check(true);
    }
}
