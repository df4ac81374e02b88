//! Arbitrary datagram sequences fed to the datagram router (`quiver_proto::router`) of two
//! nodes, mixed with genuine traffic between them: no panic, a consistent connection
//! table, and verdicts that match the datagram (a connection only for the id it names, a
//! Reset that answers the frame, one recorded Hello per accepted one, none forgotten).
//! The same input run twice gives the same verdicts.
//!
//! Input: a sequence of ops, each one byte (its low four bits modulo 10 the op, bit 4 the
//! node) followed by its arguments:
//! - 0 raw: `[path u8][len u8][bytes]` routed by the node;
//! - 1 hello: `[rank u8][src port u8][dst port u8][their id u8][path u8]`, a genuine Hello
//!   (of another job when bit 7 of the rank byte is set) routed by the node;
//! - 2 mangled hello: as 1, then `[index u8][xor u8]` changes one byte;
//! - 3 connect: `[local port u8][peer port u8]`, the node opens a connection to the other;
//! - 4 forget: `[index u8]`, the node forgets a connection (datagrams for it get a Reset);
//! - 5 time: `[u16]` microseconds forward, then the due timers;
//! - 6 pump: `[rounds u8]`, genuine datagrams between the nodes, through their routers;
//! - 7 forge: `[type u8][index u8][src u8]`, a well-formed frame (Resets under the job's
//!   key, connection frames under a key no connection has: routed by their ids, refused by
//!   the connection's authenticator) to one of the node's connections (or, index 255, to an
//!   unknown id);
//! - 8 stream: `[index u8]`, a Stream frame to one of the node's connections (or unknown);
//! - 9 host: `[open ports u8][path count u8]`, what the node's host answers from now on.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quiver_proto::handshake::{job_frame_key, ConnectRequest, JobKey};
use quiver_proto::reliable::{Nanos, ReliableConfig, ReliableConnection, State};
use quiver_proto::router::{
    Accepted, Direction, DropReason, EndpointAddress, Handshake, InboundPath, Routed, Router,
    RouterHost,
};
use quiver_wire::frame::{
    self, Destination, Frame, FrameHeader, FrameKey, FrameKeys, FrameType, MAX_HEADER_LEN,
};

const JOB_ID: u64 = 0x77;
const KEY: [u8; 32] = [9; 32];
/// Ports are small, so that Hellos, connects and crossings meet.
const PORTS: u8 = 4;

fn config(path_count: usize) -> ReliableConfig {
    ReliableConfig {
        send_buffer_bytes: 4096,
        recv_window_bytes: 4096,
        max_in_flight_datagrams: 32,
        max_datagram_bytes: 600,
        path_count,
        ..ReliableConfig::default()
    }
}

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&first, rest)) => {
                self.0 = rest;
                first
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }
    fn bytes(&mut self, len: usize) -> &[u8] {
        let len = len.min(self.0.len());
        let (taken, rest) = self.0.split_at(len);
        self.0 = rest;
        taken
    }
}

/// A node's connection: the protocol state and who it joins.
struct Conn {
    core: ReliableConnection,
    direction: Direction,
    local_port: u16,
    peer: EndpointAddress,
}

struct Host {
    rank: u32,
    state: u64,
    open_ports: u8,
    path_count: usize,
}

impl RouterHost<u32, Conn> for Host {
    fn random_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        // Few distinct short ids, so that fresh_id has to skip collisions.
        (z ^ (z >> 31)) & 0xFFFF_FFFF_0000_00FF
    }

    fn random_nonce(&mut self) -> [u8; 16] {
        let mut nonce = [0; 16];
        nonce[..8].copy_from_slice(&self.random_u64().to_le_bytes());
        nonce
    }

    fn inbound_path(&mut self, _rank: u32, _from: &u32, path: usize) -> Option<InboundPath> {
        (path < self.path_count).then(|| InboundPath {
            path,
            config: config(self.path_count),
        })
    }

    fn endpoint_open(&mut self, request: &ConnectRequest) -> bool {
        request.src_rank < 2 && self.open_ports & (1 << (request.dst_port % 8)) != 0
    }

    fn local_rank(&self) -> u32 {
        self.rank
    }

    fn handshake(&self, connection: &Conn) -> Option<Handshake> {
        (connection.core.state() == State::Handshaking).then_some(Handshake {
            direction: connection.direction,
            local_port: connection.local_port,
            peer: connection.peer,
        })
    }
}

struct Node {
    rank: u32,
    router: Router<Conn>,
    host: Host,
    /// Hellos recorded so far: never fewer than before.
    hellos: usize,
}

/// A short summary of a verdict, for the determinism check.
fn summary<C>(routed: &Routed<'_, C>) -> u64 {
    match routed {
        Routed::Connection { id, .. } => id ^ 1,
        Routed::RepeatedHello { id, connection } => id ^ 2 ^ u64::from(connection.is_some()) << 8,
        Routed::Accepted(accepted) => accepted.id ^ 3,
        Routed::Reset(bytes) => bytes.len() as u64 ^ 4,
        Routed::Refused { .. } => 5,
        Routed::Dropped(reason) => 6 ^ (*reason as u64) << 8,
    }
}

impl Node {
    fn new(rank: u32) -> Self {
        Self {
            rank,
            router: Router::new(JOB_ID, JobKey::from_bytes(KEY)),
            host: Host {
                rank,
                state: u64::from(rank) + 1,
                open_ports: 0xFF,
                path_count: 2,
            },
            hellos: 0,
        }
    }

    /// Routes `datagram` and acts on the verdict as an engine would, checking it against
    /// the datagram. Returns the verdict's summary and a Reset to send back, if any.
    fn receive(&mut self, now: Nanos, path: usize, datagram: &[u8]) -> (u64, Option<Vec<u8>>) {
        let from = 1 - self.rank;
        let destination = frame::destination(datagram);
        let routed = self
            .router
            .handle(now, &from, path, datagram, &mut self.host);
        let summary = summary(&routed);
        let mut reset = None;
        let mut accepted = None;
        match routed {
            Routed::Connection { id, connection } => {
                match destination {
                    Some(Destination::Id(dest)) => assert_eq!(dest, id),
                    Some(Destination::Short(short)) => assert_eq!(short, frame::short_id(id)),
                    None => panic!("a connection for a datagram that names none"),
                }
                connection.core.handle_datagram(now, path, datagram);
            }
            Routed::RepeatedHello { connection, .. } => {
                assert_eq!(destination, Some(Destination::Id(0)));
                if let Some(connection) = connection {
                    connection.core.handle_datagram(now, path, datagram);
                }
            }
            Routed::Accepted(boxed) => accepted = Some(*boxed),
            Routed::Reset(bytes) => {
                let asked = Frame::parse_unauthenticated(datagram)
                    .expect("a Reset answers a well-formed frame");
                let job = job_frame_key(&JobKey::from_bytes(KEY));
                let answer =
                    Frame::parse(bytes, FrameKeys::job_only(&job)).expect("a valid Reset");
                assert_eq!(answer.header().frame_type, FrameType::Reset);
                assert_eq!(answer.header().dest_id, asked.header().src_id);
                assert_eq!(answer.header().src_id, asked.header().dest_id);
                reset = Some(bytes.to_vec());
            }
            Routed::Refused { .. } => assert_eq!(destination, Some(Destination::Id(0))),
            Routed::Dropped(reason) => match reason {
                DropReason::NoDestination => assert_eq!(destination, None),
                DropReason::MalformedHello | DropReason::UnsharedPath => {
                    assert_eq!(destination, Some(Destination::Id(0)))
                }
                DropReason::UnknownId | DropReason::UnknownShortId => {}
            },
        }
        if let Some(Accepted {
            id,
            connection,
            request,
            rejection,
            ..
        }) = accepted
        {
            assert_ne!(id, 0);
            assert!(rejection.is_none() || connection.state() == State::Failed);
            let conn = Conn {
                core: connection,
                direction: Direction::Inbound,
                local_port: request.dst_port,
                peer: EndpointAddress::new(request.src_rank, request.src_port),
            };
            assert!(self.router.insert(id, conn).is_none(), "an id given twice");
            self.hellos += 1;
        }
        assert!(self.router.connections().is_consistent());
        assert_eq!(self.router.hello_count(), self.hellos);
        (summary, reset)
    }

    fn connect(&mut self, now: Nanos, local_port: u16, peer_port: u16) {
        let host = &mut self.host;
        let id = self.router.fresh_id(|| host.random_u64());
        let peer = EndpointAddress::new(1 - self.rank, peer_port);
        let request = ConnectRequest {
            job_id: JOB_ID,
            src_rank: self.rank,
            src_port: local_port,
            dst_port: peer_port,
        };
        let core = ReliableConnection::connect(
            config(self.host.path_count),
            JobKey::from_bytes(KEY),
            request,
            id,
            [1; 16],
            now,
        )
        .expect("valid config");
        let conn = Conn {
            core,
            direction: Direction::Outbound,
            local_port,
            peer,
        };
        assert!(self.router.insert(id, conn).is_none(), "an id given twice");
        assert!(self.router.connections().is_consistent());
    }

    /// The id of connection `index` (in id order), if there is one.
    fn pick(&self, index: u8) -> Option<u64> {
        let mut ids: Vec<u64> = self.router.connections().iter().map(|(&id, _)| id).collect();
        ids.sort_unstable();
        (!ids.is_empty()).then(|| ids[usize::from(index) % ids.len()])
    }

    /// Every datagram the node's connections have to send, in id order, with its path.
    fn transmits(&mut self, now: Nanos) -> Vec<(usize, Vec<u8>)> {
        let mut ids: Vec<u64> = self.router.connections().iter().map(|(&id, _)| id).collect();
        ids.sort_unstable();
        let mut out = Vec::new();
        let mut header = [0u8; MAX_HEADER_LEN];
        for id in ids {
            let Some(connection) = self.router.get_mut(id) else {
                continue;
            };
            while let Some(transmit) = connection.core.poll_transmit(now, &mut header) {
                let mut datagram = header[..transmit.header_len].to_vec();
                datagram.extend_from_slice(transmit.payload);
                out.push((transmit.path, datagram));
                assert!(out.len() < 10_000, "poll_transmit does not stop");
            }
            while connection.core.poll_event().is_some() {}
        }
        out
    }
}

/// A genuine Hello from the input's fields.
fn hello(input: &mut Input<'_>, now: Nanos) -> (Vec<u8>, usize) {
    let rank = input.byte();
    let src_port = u16::from(input.byte() % PORTS);
    let dst_port = u16::from(input.byte() % PORTS);
    let their_id = u64::from(input.byte()) + 1;
    let path = usize::from(input.byte() % 4);
    let request = ConnectRequest {
        job_id: if rank & 0x80 != 0 { JOB_ID + 1 } else { JOB_ID },
        src_rank: u32::from(rank & 0x7F),
        src_port,
        dst_port,
    };
    let mut initiator = ReliableConnection::connect(
        config(1),
        JobKey::from_bytes(KEY),
        request,
        their_id,
        [2; 16],
        now,
    )
    .expect("valid config");
    let mut header = [0u8; MAX_HEADER_LEN];
    let transmit = initiator.poll_transmit(now, &mut header).expect("a Hello");
    let mut datagram = header[..transmit.header_len].to_vec();
    datagram.extend_from_slice(transmit.payload);
    (datagram, path)
}

fn forged(frame_type: FrameType, dest_id: u64, src_id: u64) -> Vec<u8> {
    let mut header = FrameHeader::new(frame_type, dest_id, src_id);
    header.packet_number = 1;
    let payload: &[u8] = if frame_type == FrameType::Stream {
        b"stream"
    } else {
        &[]
    };
    let mut out = [0u8; MAX_HEADER_LEN];
    // Under the job's key, and a connection key no connection has: the router routes by
    // ids, the connection refuses the tag (a Reset verifies).
    let job = job_frame_key(&JobKey::from_bytes(KEY));
    let connection = FrameKey::new(&[0x42; 32]);
    let keys = FrameKeys {
        job: &job,
        connection: Some(&connection),
    };
    let len = header.emit(keys, &mut out, payload).expect("a valid header");
    let mut datagram = out[..len].to_vec();
    datagram.extend_from_slice(payload);
    datagram
}

/// Runs the input; returns the summaries of every verdict.
fn run(data: &[u8]) -> Vec<u64> {
    let mut nodes = [Node::new(0), Node::new(1)];
    let mut input = Input(data);
    let mut now: Nanos = 0;
    let mut verdicts = Vec::new();
    while !input.0.is_empty() {
        let op = input.byte();
        let n = usize::from(op >> 4 & 1);
        let code = (op & 0x0F) % 10;
        match code {
            0 => {
                let path = usize::from(input.byte() % 4);
                let len = usize::from(input.byte());
                let datagram = input.bytes(len).to_vec();
                verdicts.push(nodes[n].receive(now, path, &datagram).0);
            }
            1 | 2 => {
                let (mut datagram, path) = hello(&mut input, now);
                if code == 2 {
                    let index = usize::from(input.byte()) % datagram.len();
                    datagram[index] ^= input.byte().max(1);
                }
                verdicts.push(nodes[n].receive(now, path, &datagram).0);
            }
            3 => {
                let local_port = u16::from(input.byte() % PORTS);
                let peer_port = u16::from(input.byte() % PORTS);
                nodes[n].connect(now, local_port, peer_port);
            }
            4 => {
                if let Some(id) = nodes[n].pick(input.byte()) {
                    assert!(nodes[n].router.remove(id).is_some());
                    assert!(nodes[n].router.get(id).is_none());
                }
            }
            5 => {
                now += u64::from(input.u16()) * 1000;
                for node in &mut nodes {
                    for (_, connection) in node.router.iter_mut() {
                        if connection.core.poll_timeout().is_some_and(|at| at <= now) {
                            connection.core.handle_timeout(now);
                        }
                    }
                }
            }
            6 => {
                for _ in 0..=input.byte() % 8 {
                    for from in [0, 1] {
                        for (path, datagram) in nodes[from].transmits(now) {
                            let (summary, reset) = nodes[1 - from].receive(now, path, &datagram);
                            verdicts.push(summary);
                            if let Some(reset) = reset {
                                verdicts.push(nodes[from].receive(now, path, &reset).0);
                            }
                        }
                    }
                }
            }
            7 | 8 => {
                let frame_type = if code == 8 {
                    FrameType::Stream
                } else {
                    FrameType::from_code(input.byte() % 7 + 1).unwrap_or(FrameType::Ping)
                };
                let index = input.byte();
                let dest = match nodes[n].pick(index) {
                    Some(id) if index != 255 => id,
                    _ => 0x0BAD_0000_0000_0001 | u64::from(index) << 8,
                };
                // A Stream frame carries no source id.
                let src = if code == 8 { 0 } else { u64::from(input.byte()) };
                let src = if frame_type == FrameType::Stream { 0 } else { src };
                let datagram = forged(frame_type, dest, src);
                verdicts.push(nodes[n].receive(now, 0, &datagram).0);
            }
            _ => {
                nodes[n].host.open_ports = input.byte();
                nodes[n].host.path_count = usize::from(input.byte() % 3) + 1;
            }
        }
    }
    verdicts
}

fuzz_target!(|data: &[u8]| {
    assert_eq!(run(data), run(data), "the same input gave other verdicts");
});
