//! Tests of the router at its own level: known ids, short ids, unknown ids and Resets,
//! Hellos and their repeats, rejections, Hellos without the key, crossed connects, the
//! Hellos map (bounded, expiring), id allocation, and a reference model under arbitrary sequences.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use quiver_wire::frame::{Frame, FrameHeader, FrameKey, FrameKeys, FrameType, MAX_HEADER_LEN};
use quiver_wire::handshake::{Challenge, ChallengeStatus};

use super::*;
use crate::handshake::{ConnectRequest, KEY_LEN};
use crate::reliable::{AcceptError, Event, FailReason, ReliableConfig, State};

const JOB_ID: u64 = 0x0b0e;

fn key() -> JobKey {
    JobKey::from_bytes([5; KEY_LEN])
}

/// A test engine's connection value: the protocol state and the handshake the host
/// reports for it.
#[derive(Debug)]
struct Conn {
    core: Option<ReliableConnection>,
    handshake: Option<Handshake>,
}

impl Conn {
    fn bare() -> Self {
        Self {
            core: None,
            handshake: None,
        }
    }
}

/// The host of a test engine: a splitmix generator, `path_count` shared paths with every
/// rank, and the open ports. Counts the random draws.
#[derive(Debug)]
struct TestHost {
    rank: u32,
    state: u64,
    draws: usize,
    path_count: usize,
    open_ports: BTreeSet<u16>,
    /// Ids to hand out first, in order, before the generator's.
    scripted: Vec<u64>,
}

impl TestHost {
    fn new(rank: u32) -> Self {
        Self {
            rank,
            state: u64::from(rank) + 1,
            draws: 0,
            path_count: 2,
            open_ports: BTreeSet::from([7]),
            scripted: Vec::new(),
        }
    }

    fn config(&self) -> ReliableConfig {
        ReliableConfig {
            path_count: self.path_count,
            ..ReliableConfig::default()
        }
    }
}

impl RouterHost<u32, Conn> for TestHost {
    fn random_u64(&mut self) -> u64 {
        self.draws += 1;
        if !self.scripted.is_empty() {
            return self.scripted.remove(0);
        }
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn random_nonce(&mut self) -> [u8; 16] {
        let low = self.random_u64().to_le_bytes();
        let mut nonce = [0; 16];
        nonce[..8].copy_from_slice(&low);
        nonce
    }

    fn inbound_path(&mut self, _rank: u32, _from: &u32, path: usize) -> Option<InboundPath> {
        (path < self.path_count).then(|| InboundPath {
            path,
            config: self.config(),
        })
    }

    fn endpoint_open(&mut self, request: &ConnectRequest) -> bool {
        self.open_ports.contains(&request.dst_port)
    }

    fn local_rank(&self) -> u32 {
        self.rank
    }

    fn handshake(&self, connection: &Conn) -> Option<Handshake> {
        connection.handshake
    }
}

/// What a verdict was, without its borrows.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    Connection(u64),
    RepeatedHello(u64, bool),
    Accepted(u64, Option<RejectReason>),
    Reset(Vec<u8>),
    Refused,
    Dropped(DropReason),
}

/// One engine of a test: its router and host, acting on every verdict as an engine would.
struct Node {
    rank: u32,
    router: Router<Conn>,
    host: TestHost,
}

impl Node {
    fn new(rank: u32) -> Self {
        Self {
            rank,
            router: Router::new(JOB_ID, key()),
            host: TestHost::new(rank),
        }
    }

    /// Routes `datagram` (from rank `from`, on `path`) and acts on the verdict: feeds it,
    /// inserts an accepted connection. Returns the verdict and any Reset to send back.
    fn receive(&mut self, now: Nanos, from: u32, path: usize, datagram: &[u8]) -> Verdict {
        match self
            .router
            .handle(now, &from, path, datagram, &mut self.host)
        {
            Routed::Connection { id, connection } => {
                if let Some(core) = &mut connection.core {
                    core.handle_datagram(now, path, datagram);
                }
                Verdict::Connection(id)
            }
            Routed::RepeatedHello { id, connection } => {
                let found = connection.is_some();
                if let Some(core) = connection.and_then(|c| c.core.as_mut()) {
                    core.handle_datagram(now, path, datagram);
                }
                Verdict::RepeatedHello(id, found)
            }
            Routed::Accepted(accepted) => {
                let Accepted {
                    id,
                    connection,
                    rejection,
                    ..
                } = *accepted;
                let conn = Conn {
                    core: Some(connection),
                    handshake: None,
                };
                self.router.insert(id, conn);
                Verdict::Accepted(id, rejection)
            }
            Routed::Reset(bytes) => Verdict::Reset(bytes.to_vec()),
            Routed::Refused { .. } => Verdict::Refused,
            Routed::Dropped(reason) => Verdict::Dropped(reason),
        }
    }

    /// Opens a connection from `port` to `dst_port` of rank `to`; returns its id.
    fn connect(&mut self, now: Nanos, port: u16, to: u32, dst_port: u16) -> u64 {
        let host = &mut self.host;
        let id = self.router.fresh_id(|| host.random_u64());
        let request = ConnectRequest {
            job_id: JOB_ID,
            src_rank: self.rank,
            src_port: port,
            dst_port,
        };
        let core =
            ReliableConnection::connect(self.host.config(), key(), request, id, [1; 16], now)
                .expect("valid config");
        let handshake = Some(Handshake {
            direction: Direction::Outbound,
            local_port: port,
            peer: EndpointAddress::new(to, dst_port),
        });
        self.router.insert(
            id,
            Conn {
                core: Some(core),
                handshake,
            },
        );
        id
    }

    /// Every datagram the node's connections have to send now, with its path.
    fn transmits(&mut self, now: Nanos) -> Vec<(usize, Vec<u8>)> {
        let mut out = Vec::new();
        let mut header = [0u8; MAX_HEADER_LEN];
        let mut ids: Vec<u64> = self
            .router
            .connections()
            .iter()
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable();
        for id in ids {
            let Some(core) = self.router.get_mut(id).and_then(|c| c.core.as_mut()) else {
                continue;
            };
            while let Some(transmit) = core.poll_transmit(now, &mut header) {
                let mut datagram = header[..transmit.header_len].to_vec();
                datagram.extend_from_slice(transmit.payload);
                out.push((transmit.path, datagram));
            }
        }
        out
    }

    fn core(&mut self, id: u64) -> &mut ReliableConnection {
        self.router
            .get_mut(id)
            .and_then(|c| c.core.as_mut())
            .expect("a connection with a core")
    }
}

/// Moves every datagram between `a` and `b` (over the path each transmit names) until
/// neither has anything to send; returns the verdicts each side gave.
fn exchange(now: Nanos, a: &mut Node, b: &mut Node) -> (Vec<Verdict>, Vec<Verdict>) {
    let (mut at_a, mut at_b) = (Vec::new(), Vec::new());
    for _ in 0..100 {
        let from_a = a.transmits(now);
        let from_b = b.transmits(now);
        if from_a.is_empty() && from_b.is_empty() {
            return (at_a, at_b);
        }
        for (path, datagram) in from_a {
            at_b.push(b.receive(now, a.rank, path, &datagram));
        }
        for (path, datagram) in from_b {
            at_a.push(a.receive(now, b.rank, path, &datagram));
        }
    }
    panic!("the exchange does not settle");
}

/// The Hello of a fresh initiator from `src_rank`/`src_port` to `dst_port`, id `id`.
fn hello(src_rank: u32, src_port: u16, dst_port: u16, id: u64, job_id: u64) -> Vec<u8> {
    hello_with_key(key(), src_rank, src_port, dst_port, id, job_id)
}

/// A Hello MACed with `key` (the job's, or a stranger's).
fn hello_with_key(
    key: JobKey,
    src_rank: u32,
    src_port: u16,
    dst_port: u16,
    id: u64,
    job_id: u64,
) -> Vec<u8> {
    let request = ConnectRequest {
        job_id,
        src_rank,
        src_port,
        dst_port,
    };
    let mut initiator =
        ReliableConnection::connect(ReliableConfig::default(), key, request, id, [2; 16], 0)
            .expect("valid config");
    let mut header = [0u8; MAX_HEADER_LEN];
    let transmit = initiator.poll_transmit(0, &mut header).expect("a Hello");
    let mut datagram = header[..transmit.header_len].to_vec();
    datagram.extend_from_slice(transmit.payload);
    datagram
}

/// The keys the tests' frames are emitted under: the job's, and a connection key no
/// connection of the tests has (a router does not verify connection frames).
fn test_keys<R>(use_keys: impl FnOnce(FrameKeys<'_>) -> R) -> R {
    let job = crate::handshake::job_frame_key(&key());
    let connection = FrameKey::new(&[0x42; 32]);
    use_keys(FrameKeys {
        job: &job,
        connection: Some(&connection),
    })
}

fn frame(frame_type: FrameType, dest_id: u64, src_id: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = [0u8; MAX_HEADER_LEN];
    let len = test_keys(|keys| {
        FrameHeader::new(frame_type, dest_id, src_id).emit(keys, &mut out, payload)
    })
    .expect("a valid header");
    let mut datagram = out[..len].to_vec();
    datagram.extend_from_slice(payload);
    datagram
}

fn stream_frame(dest_id: u64, payload: &[u8]) -> Vec<u8> {
    let mut header = FrameHeader::new(FrameType::Stream, dest_id, 0);
    header.packet_number = 1;
    let mut out = [0u8; MAX_HEADER_LEN];
    let len = test_keys(|keys| header.emit(keys, &mut out, payload)).expect("a valid header");
    let mut datagram = out[..len].to_vec();
    datagram.extend_from_slice(payload);
    datagram
}

#[test]
fn known_ids_and_short_ids_reach_their_connection() {
    let mut node = Node::new(0);
    let id = 0x1234_5678_9abc_def0;
    node.router.insert(id, Conn::bare());
    let ping = frame(FrameType::Ping, id, 99, &[]);
    assert_eq!(node.receive(0, 1, 0, &ping), Verdict::Connection(id));
    // A Stream frame names its connection by the low 24 bits only.
    let stream = stream_frame(id, b"bulk");
    assert_eq!(node.receive(0, 1, 1, &stream), Verdict::Connection(id));
    // Nothing is verified by the router: a corrupt frame for a known id still goes to
    // its connection, which drops and counts it.
    let mut corrupt = ping.clone();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0x40;
    assert_eq!(node.receive(0, 1, 0, &corrupt), Verdict::Connection(id));
    assert_eq!(node.host.draws, 0, "routing known ids draws nothing");
}

#[test]
fn unknown_ids_are_answered_with_a_reset_or_dropped() {
    let mut node = Node::new(0);
    let data = frame(FrameType::Data, 0x77, 0x55, b"x");
    let Verdict::Reset(reset) = node.receive(0, 1, 0, &data) else {
        panic!("no reset");
    };
    let parsed = test_keys(|keys| Frame::parse(&reset, keys)).expect("a valid Reset frame");
    assert_eq!(parsed.header().frame_type, FrameType::Reset);
    assert_eq!(
        (parsed.header().dest_id, parsed.header().src_id),
        (0x55, 0x77)
    );
    // No Reset for a Reset, for a frame from id 0, or for a malformed frame. (A frame to an
    // unknown id cannot be verified, having no key of its connection: a corrupted one is
    // answered too, its Reset naming the corrupted ids, which the peer's connection does
    // not take as its peer's: `frame_is_ours`.)
    let reset_frame = frame(FrameType::Reset, 0x77, 0x55, &[]);
    let from_zero = frame(FrameType::Ping, 0x77, 0, &[]);
    let mut malformed = data.clone();
    malformed[4] = 0x80;
    for datagram in [&reset_frame, &from_zero, &malformed] {
        assert_eq!(
            node.receive(0, 1, 0, datagram),
            Verdict::Dropped(DropReason::UnknownId)
        );
    }
    assert_eq!(
        node.receive(0, 1, 0, &stream_frame(0x77, b"y")),
        Verdict::Dropped(DropReason::UnknownShortId)
    );
    for garbage in [&b""[..], b"QD", b"not a frame at all, long enough to peek"] {
        assert_eq!(
            node.receive(0, 1, 0, garbage),
            Verdict::Dropped(DropReason::NoDestination)
        );
    }
}

#[test]
fn a_forgotten_connection_is_reset() {
    let mut node = Node::new(0);
    node.router.insert(0x42, Conn::bare());
    let ping = frame(FrameType::Ping, 0x42, 9, &[]);
    assert_eq!(node.receive(0, 1, 0, &ping), Verdict::Connection(0x42));
    assert!(node.router.remove(0x42).is_some());
    assert!(matches!(node.receive(0, 1, 0, &ping), Verdict::Reset(_)));
    assert_eq!(
        node.receive(0, 1, 0, &stream_frame(0x42, b"z")),
        Verdict::Dropped(DropReason::UnknownShortId)
    );
}

#[test]
fn a_hello_opens_a_connection_that_establishes_through_both_routers() {
    let (mut a, mut b) = (Node::new(0), Node::new(1));
    let id = a.connect(0, 3, 1, 7);
    let (at_a, at_b) = exchange(0, &mut a, &mut b);
    let Some(Verdict::Accepted(accepted, None)) = at_b.first().cloned() else {
        panic!("the Hello was not accepted: {at_b:?}");
    };
    assert!(at_b[1..]
        .iter()
        .all(|v| *v == Verdict::Connection(accepted)));
    assert!(at_a.iter().all(|v| *v == Verdict::Connection(id)));
    assert_eq!(a.core(id).state(), State::Established);
    assert_eq!(b.core(accepted).state(), State::Established);
    assert_eq!(b.core(accepted).peer_id(), Some(id));
    assert_eq!(b.router.hello_count(), 1);
    // One id and one nonce per accepted Hello.
    assert_eq!(b.host.draws, 2);
}

#[test]
fn a_repeated_hello_reaches_the_connection_it_opened_on_any_path() {
    let mut node = Node::new(1);
    let datagram = hello(0, 3, 7, 0xabc, JOB_ID);
    let Verdict::Accepted(id, None) = node.receive(0, 0, 0, &datagram) else {
        panic!("not accepted");
    };
    let draws = node.host.draws;
    for path in [0, 1] {
        assert_eq!(
            node.receive(10, 0, path, &datagram),
            Verdict::RepeatedHello(id, true)
        );
    }
    assert_eq!(node.host.draws, draws, "a repeat draws nothing");
    assert_eq!(node.router.connections().len(), 1);
    assert_eq!(node.router.hello_count(), 1);
    // The connection answers the repeat: its Challenge goes out again.
    assert!(!node.transmits(10).is_empty());
}

#[test]
fn hellos_outlive_their_connection_and_expire_after_their_lifetime() {
    let mut node = Node::new(1);
    let datagram = hello(0, 3, 7, 0xabc, JOB_ID);
    let Verdict::Accepted(id, None) = node.receive(0, 0, 0, &datagram) else {
        panic!("not accepted");
    };
    // Until the end of its lifetime, a repeat reaches the connection...
    let last = HELLO_LIFETIME_NS - 1;
    assert_eq!(
        node.receive(last, 0, 0, &datagram),
        Verdict::RepeatedHello(id, true)
    );
    // ...and once the connection is forgotten, a repeat is ignored: it opens no second
    // connection.
    node.router.remove(id);
    assert_eq!(
        node.receive(last, 0, 1, &datagram),
        Verdict::RepeatedHello(id, false)
    );
    assert!(node.router.connections().is_empty());
    assert_eq!(node.router.hello_count(), 1);
    // After its lifetime the entry is gone: the Hello is a new one.
    assert!(matches!(
        node.receive(HELLO_LIFETIME_NS, 0, 0, &datagram),
        Verdict::Accepted(other, None) if other != id
    ));
    assert_eq!(node.router.hello_count(), 1);
    assert_eq!(node.router.hellos_evicted(), 0);
}

#[test]
fn the_hellos_map_holds_at_most_its_capacity_oldest_out_first() {
    let mut node = Node::new(1);
    let extra = 10u64;
    for their_id in 1..=HELLO_CAPACITY as u64 + extra {
        let Verdict::Accepted(id, _) =
            node.receive(their_id, 0, 0, &hello(0, 3, 7, their_id, JOB_ID))
        else {
            panic!("Hello {their_id} not accepted");
        };
        // Keep the test's memory small: the table's bound is the point here.
        node.router.remove(id);
        assert!(node.router.hello_count() <= HELLO_CAPACITY);
    }
    assert_eq!(node.router.hello_count(), HELLO_CAPACITY);
    assert_eq!(node.router.hellos_evicted(), extra);
    // The oldest left; the newest is still answered as a repeat.
    let now = HELLO_CAPACITY as u64 + extra + 1;
    assert!(matches!(
        node.receive(now, 0, 0, &hello(0, 3, 7, 1, JOB_ID)),
        Verdict::Accepted(..)
    ));
    assert!(matches!(
        node.receive(
            now,
            0,
            0,
            &hello(0, 3, 7, HELLO_CAPACITY as u64 + extra, JOB_ID)
        ),
        Verdict::RepeatedHello(_, false)
    ));
}

#[test]
fn a_hello_without_the_key_costs_no_draw_and_no_entry_and_gets_a_shorter_refusal() {
    let mut node = Node::new(1);
    let mut now = 0;
    for (what, datagram, status) in [
        (
            "wrong key",
            hello_with_key(JobKey::from_bytes([6; KEY_LEN]), 0, 3, 7, 9, JOB_ID),
            ChallengeStatus::WrongKey,
        ),
        (
            "another job",
            hello(0, 3, 7, 9, JOB_ID + 1),
            ChallengeStatus::WrongJob,
        ),
    ] {
        now += REFUSAL_INTERVAL_NS;
        let routed = node.router.handle(now, &0, 0, &datagram, &mut node.host);
        let Routed::Refused {
            error: AcceptError::Handshake(_),
            reply: Some(reply),
        } = routed
        else {
            panic!("{what}: {routed:?}");
        };
        assert!(reply.len() < datagram.len(), "{what}: the reply amplifies");
        let frame = test_keys(|keys| Frame::parse(reply, keys)).expect("a frame");
        assert_eq!(frame.header().frame_type, FrameType::Handshake);
        assert_eq!((frame.header().dest_id, frame.header().src_id), (9, 0));
        let challenge = Challenge::new_checked(frame.payload()).expect("a Challenge");
        assert_eq!(challenge.status_code(), status.code(), "{what}");
    }
    assert_eq!(node.host.draws, 0);
    assert_eq!(node.router.hello_count(), 0);
    assert!(node.router.connections().is_empty());
    assert!(node.transmits(now).is_empty());
    // A flood gets at most one refusal per interval.
    let stranger = hello_with_key(JobKey::from_bytes([6; KEY_LEN]), 0, 3, 7, 9, JOB_ID);
    let replies = (0..100)
        .filter(|&step| {
            let at = now + REFUSAL_INTERVAL_NS + step * REFUSAL_INTERVAL_NS / 10;
            matches!(
                node.router.handle(at, &0, 0, &stranger, &mut node.host),
                Routed::Refused { reply: Some(_), .. }
            )
        })
        .count();
    assert_eq!(replies, 10);
}

#[test]
fn an_initiator_refused_for_its_key_fails_with_wrong_key() {
    let (mut a, mut b) = (Node::new(0), Node::new(1));
    b.router = Router::new(JOB_ID, JobKey::from_bytes([6; KEY_LEN]));
    let id = a.connect(0, 3, 1, 7);
    let (_, hello) = a.transmits(0).pop().expect("a Hello");
    let Routed::Refused {
        reply: Some(reply), ..
    } = b.router.handle(0, &0, 0, &hello, &mut b.host)
    else {
        panic!("not refused with a reply");
    };
    let reply = reply.to_vec();
    assert_eq!(a.receive(1, 1, 0, &reply), Verdict::Connection(id));
    assert_eq!(a.core(id).state(), State::Failed);
    assert!(matches!(
        a.core(id).poll_event(),
        Some(Event::Failed(FailReason::Handshake(
            crate::handshake::HandshakeError::AuthenticationFailed {
                message: quiver_wire::handshake::MessageKind::Hello
            }
        )))
    ));
}

#[test]
fn the_hellos_map_grows_by_one_per_answered_hello_only() {
    let mut node = Node::new(1);
    node.host.open_ports = BTreeSet::from([7]);
    for their_id in 1..=20u64 {
        // Open and closed ports alike: both are answered.
        let port = if their_id % 2 == 0 { 7 } else { 8 };
        let verdict = node.receive(0, 0, 0, &hello(0, 3, port, their_id, JOB_ID));
        assert!(matches!(verdict, Verdict::Accepted(..)), "{verdict:?}");
        assert_eq!(node.router.hello_count(), their_id as usize);
    }
    // Refused, malformed and unshared-path Hellos leave no entry.
    let mut corrupt = hello(0, 3, 7, 100, JOB_ID);
    corrupt[30] ^= 0x10;
    assert_eq!(
        node.receive(0, 0, 0, &corrupt),
        Verdict::Dropped(DropReason::MalformedHello)
    );
    assert_eq!(
        node.receive(0, 0, 0, &hello(0, 3, 7, 101, JOB_ID + 1)),
        Verdict::Refused
    );
    assert_eq!(
        node.receive(0, 0, 5, &hello(0, 3, 7, 102, JOB_ID)),
        Verdict::Dropped(DropReason::UnsharedPath)
    );
    assert_eq!(node.router.hello_count(), 20);
}

#[test]
fn a_hello_from_another_job_is_refused_with_its_reason() {
    let mut node = Node::new(1);
    let datagram = hello(0, 3, 7, 5, JOB_ID + 1);
    let routed = node.router.handle(0, &0, 0, &datagram, &mut node.host);
    assert!(
        matches!(
            routed,
            Routed::Refused {
                error: AcceptError::Handshake(_),
                ..
            }
        ),
        "{routed:?}"
    );
    // Nothing is drawn for a Hello that does not prove itself.
    assert_eq!(node.host.draws, 0);
    // Not a Hello at all: a Ping to id 0 from a stranger.
    let ping = frame(FrameType::Ping, 0, 5, &[]);
    let routed = node.router.handle(0, &0, 0, &ping, &mut node.host);
    assert!(
        matches!(
            routed,
            Routed::Refused {
                error: AcceptError::NotARequest { .. },
                reply: None
            }
        ),
        "{routed:?}"
    );
    assert!(node.router.connections().is_empty());
}

#[test]
fn malformed_and_unshared_hellos_draw_no_randomness() {
    let mut node = Node::new(1);
    let mut corrupt = hello(0, 3, 7, 9, JOB_ID);
    let last = corrupt.len() - 1;
    corrupt[last] ^= 1;
    assert_eq!(
        node.receive(0, 0, 0, &corrupt),
        Verdict::Dropped(DropReason::MalformedHello)
    );
    assert_eq!(
        node.receive(0, 0, 2, &hello(0, 3, 7, 9, JOB_ID)),
        Verdict::Dropped(DropReason::UnsharedPath)
    );
    assert_eq!(node.host.draws, 0);
    assert!(node.router.connections().is_empty());
}

#[test]
fn a_hello_for_a_closed_endpoint_is_rejected_and_the_initiator_learns_why() {
    let (mut a, mut b) = (Node::new(0), Node::new(1));
    b.host.open_ports.clear();
    let id = a.connect(0, 3, 1, 7);
    let (_, at_b) = exchange(0, &mut a, &mut b);
    assert!(
        matches!(
            at_b.first(),
            Some(Verdict::Accepted(_, Some(RejectReason::NoSuchEndpoint)))
        ),
        "{at_b:?}"
    );
    let mut events = Vec::new();
    while let Some(event) = a.core(id).poll_event() {
        events.push(event);
    }
    assert!(
        events.contains(&Event::Failed(FailReason::Rejected(
            RejectReason::NoSuchEndpoint
        ))),
        "{events:?}"
    );
}

#[test]
fn crossed_connects_keep_the_lower_endpoints_connection() {
    // Rank 0 port 7 and rank 1 port 3 connect to each other at the same moment.
    let (mut low, mut high) = (Node::new(0), Node::new(1));
    low.host.open_ports = BTreeSet::from([7]);
    high.host.open_ports = BTreeSet::from([3]);
    let low_id = low.connect(0, 7, 1, 3);
    let high_id = high.connect(0, 3, 0, 7);
    let low_hello = low.transmits(0);
    let high_hello = high.transmits(0);
    // At the lower endpoint, the higher one's Hello loses: Busy.
    let at_low = low.receive(0, 1, high_hello[0].0, &high_hello[0].1);
    assert!(
        matches!(at_low, Verdict::Accepted(_, Some(RejectReason::Busy))),
        "{at_low:?}"
    );
    // At the higher endpoint, the lower one's Hello wins, though a connect of its own is
    // under way.
    let at_high = high.receive(0, 0, low_hello[0].0, &low_hello[0].1);
    assert!(matches!(at_high, Verdict::Accepted(_, None)), "{at_high:?}");
    // Once the lower endpoint's connect is no longer under way (given up, or
    // established), the same Hello is no longer a crossing.
    low.router.get_mut(low_id).expect("there").handshake = None;
    let again = hello(1, 3, 7, 0x999, JOB_ID);
    assert!(matches!(
        low.receive(0, 1, 0, &again),
        Verdict::Accepted(_, None)
    ));
    assert!(high.router.get(high_id).is_some());
}

#[test]
fn an_inbound_handshake_under_way_is_found_for_the_connect_side() {
    let mut node = Node::new(1);
    let peer = EndpointAddress::new(0, 3);
    let handshake = |c: &Conn| c.handshake;
    assert!(!node.router.inbound_under_way(7, peer, handshake));
    let Verdict::Accepted(id, None) = node.receive(0, 0, 0, &hello(0, 3, 7, 0x10, JOB_ID)) else {
        panic!("not accepted");
    };
    node.router.get_mut(id).expect("there").handshake = Some(Handshake {
        direction: Direction::Inbound,
        local_port: 7,
        peer,
    });
    assert!(node.router.inbound_under_way(7, peer, handshake));
    assert!(!node.router.inbound_under_way(8, peer, handshake));
    assert!(!node
        .router
        .inbound_under_way(7, EndpointAddress::new(0, 4), handshake));
}

#[test]
fn fresh_ids_skip_zero_and_taken_short_ids() {
    let mut node = Node::new(0);
    node.router.insert(0x00ab_cdef, Conn::bare());
    // 0 is never an id; 0x77_00ab_cdef has the short id of the connection above.
    node.host.scripted = vec![0, 0x77_00ab_cdef, 0x55];
    let host = &mut node.host;
    assert_eq!(node.router.fresh_id(|| host.random_u64()), 0x55);
    assert_eq!(node.host.draws, 3);
}

#[test]
fn remove_and_retain_keep_short_ids_consistent() {
    let mut node = Node::new(0);
    for id in 1..=50u64 {
        node.router.insert(id << 24 | id, Conn::bare());
    }
    node.router.retain(|id, _| id % 3 != 0);
    assert!(node.router.remove(2 << 24 | 2).is_some());
    assert!(node.router.remove(2 << 24 | 2).is_none());
    assert!(node.router.connections().is_consistent());
    for id in 1..=50u64 {
        let full = id << 24 | id;
        let expected = if full % 3 != 0 && id != 2 {
            Verdict::Connection(full)
        } else {
            Verdict::Dropped(DropReason::UnknownShortId)
        };
        assert_eq!(node.receive(0, 1, 0, &stream_frame(full, b"s")), expected);
    }
}

/// One step of an arbitrary sequence against the reference model.
#[derive(Debug, Clone)]
enum Step {
    /// Open a connection (fresh id from the host).
    Open,
    /// Forget the connection at this index of the model's ids (modulo), if any.
    Forget(usize),
    /// A frame of this type to the connection at this index (modulo), or to `unknown`.
    Frame {
        target: Option<usize>,
        unknown: u64,
        type_code: u8,
        src_id: u64,
    },
    /// A Stream frame to the connection at this index, or to `unknown`.
    Stream { target: Option<usize>, unknown: u64 },
    /// Arbitrary bytes.
    Bytes(Vec<u8>),
    /// A Hello from rank 0 with this initiator id (a small set: repeats happen), MACed
    /// with the job key or, when `proven` is false, with a stranger's.
    Hello {
        their_id: u64,
        path: usize,
        proven: bool,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        Just(Step::Open),
        any::<usize>().prop_map(Step::Forget),
        (
            proptest::option::of(any::<usize>()),
            any::<u64>(),
            1u8..8,
            any::<u64>()
        )
            .prop_map(|(target, unknown, type_code, src_id)| Step::Frame {
                target,
                unknown,
                type_code,
                src_id
            }),
        (proptest::option::of(any::<usize>()), any::<u64>())
            .prop_map(|(target, unknown)| Step::Stream { target, unknown }),
        proptest::collection::vec(any::<u8>(), 0..80).prop_map(Step::Bytes),
        (1u64..6, 0usize..3, any::<bool>()).prop_map(|(their_id, path, proven)| Step::Hello {
            their_id,
            path,
            proven
        }),
    ]
}

/// The router of one node and a model of what its table and its Hellos map must hold.
struct Model {
    node: Node,
    ids: BTreeSet<u64>,
    /// Initiator id (rank 0) -> the connection its Hello opened.
    hellos: BTreeMap<u64, u64>,
}

impl Model {
    /// The id at `index` (modulo) of the model's, if any.
    fn pick(&self, index: usize) -> Option<u64> {
        (!self.ids.is_empty()).then(|| {
            *self
                .ids
                .iter()
                .nth(index % self.ids.len())
                .expect("in range")
        })
    }

    fn open(&mut self) {
        let host = &mut self.node.host;
        let id = self.node.router.fresh_id(|| host.random_u64());
        assert!(id != 0);
        assert!(!self
            .ids
            .iter()
            .any(|&other| frame::short_id(other) == frame::short_id(id)));
        self.node.router.insert(id, Conn::bare());
        self.ids.insert(id);
    }

    fn forget(&mut self, index: usize) {
        if let Some(id) = self.pick(index) {
            assert!(self.node.router.remove(id).is_some());
            self.ids.remove(&id);
        }
    }

    fn frame(
        &mut self,
        target: Option<usize>,
        unknown: u64,
        type_code: u8,
        src_id: u64,
    ) -> Verdict {
        let dest = target
            .and_then(|index| self.pick(index))
            .unwrap_or(unknown.max(1));
        let frame_type = match FrameType::from_code(type_code) {
            Some(FrameType::Stream) | None => FrameType::Ping,
            Some(other) => other,
        };
        let verdict = self
            .node
            .receive(0, 0, 0, &frame(frame_type, dest, src_id, &[]));
        let expected = if self.ids.contains(&dest) {
            Verdict::Connection(dest)
        } else if frame_type == FrameType::Reset || src_id == 0 {
            Verdict::Dropped(DropReason::UnknownId)
        } else {
            Verdict::Reset(frame(FrameType::Reset, src_id, dest, &[]))
        };
        assert_eq!(verdict, expected);
        verdict
    }

    fn stream(&mut self, target: Option<usize>, unknown: u64) -> Verdict {
        let dest = target.and_then(|index| self.pick(index)).unwrap_or(unknown);
        let verdict = self.node.receive(0, 0, 0, &stream_frame(dest, b"data"));
        let named = self
            .ids
            .iter()
            .find(|&&id| frame::short_id(id) == frame::short_id(dest));
        let expected = match named {
            Some(&id) => Verdict::Connection(id),
            None => Verdict::Dropped(DropReason::UnknownShortId),
        };
        assert_eq!(verdict, expected);
        verdict
    }

    fn bytes(&mut self, bytes: &[u8]) -> Verdict {
        let verdict = self.node.receive(0, 0, 0, bytes);
        if frame::destination(bytes).is_none() {
            assert_eq!(verdict, Verdict::Dropped(DropReason::NoDestination));
        }
        if let Verdict::Accepted(id, _) = verdict {
            self.ids.insert(id);
        }
        verdict
    }

    fn hello(&mut self, their_id: u64, path: usize) -> Verdict {
        let verdict = self
            .node
            .receive(0, 0, path, &hello(0, 3, 7, their_id, JOB_ID));
        match (self.hellos.get(&their_id), &verdict) {
            (Some(&id), Verdict::RepeatedHello(got, found)) => {
                assert_eq!((*got, *found), (id, self.ids.contains(&id)));
            }
            (None, Verdict::Accepted(id, None)) => {
                self.hellos.insert(their_id, *id);
                self.ids.insert(*id);
            }
            (None, Verdict::Dropped(DropReason::UnsharedPath)) => assert!(path >= 2),
            (known, verdict) => panic!("Hello {their_id}: {known:?} gave {verdict:?}"),
        }
        verdict
    }
}

impl Model {
    /// A Hello that does not prove the key: refused, whatever the map holds, and nothing
    /// changes.
    fn unproven_hello(&mut self, their_id: u64, path: usize) -> Verdict {
        let stranger = JobKey::from_bytes([0xee; KEY_LEN]);
        let datagram = hello_with_key(stranger, 0, 3, 7, their_id, JOB_ID);
        let verdict = self.node.receive(0, 0, path, &datagram);
        assert_eq!(verdict, Verdict::Refused, "unproven Hello {their_id}");
        verdict
    }
}

/// Runs `steps`, checking every verdict against the model; returns the verdicts.
fn run_model(steps: &[Step]) -> Vec<Verdict> {
    let mut model = Model {
        node: Node::new(1),
        ids: BTreeSet::new(),
        hellos: BTreeMap::new(),
    };
    let mut verdicts = Vec::new();
    for step in steps {
        let verdict = match step {
            Step::Open => {
                model.open();
                None
            }
            Step::Forget(index) => {
                model.forget(*index);
                None
            }
            Step::Frame {
                target,
                unknown,
                type_code,
                src_id,
            } => Some(model.frame(*target, *unknown, *type_code, *src_id)),
            Step::Stream { target, unknown } => Some(model.stream(*target, *unknown)),
            Step::Bytes(bytes) => Some(model.bytes(bytes)),
            Step::Hello {
                their_id,
                path,
                proven: true,
            } => Some(model.hello(*their_id, *path)),
            Step::Hello {
                their_id,
                path,
                proven: false,
            } => Some(model.unproven_hello(*their_id, *path)),
        };
        verdicts.extend(verdict);
        let router = &model.node.router;
        assert!(router.connections().is_consistent());
        assert_eq!(router.connections().len(), model.ids.len());
        assert_eq!(router.hello_count(), model.hellos.len());
    }
    verdicts
}

proptest! {
    #[test]
    fn routing_matches_a_reference_model(steps in proptest::collection::vec(step(), 0..60)) {
        run_model(&steps);
    }

    #[test]
    fn same_inputs_same_verdicts(steps in proptest::collection::vec(step(), 0..40)) {
        prop_assert_eq!(run_model(&steps), run_model(&steps));
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_never_reach_a_connection_they_do_not_name(
        bytes in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut node = Node::new(0);
        node.router.insert(0x0102_0304_0506, Conn::bare());
        let verdict = node.receive(0, 1, 0, &bytes);
        if let Verdict::Connection(id) = verdict {
            let named = match frame::destination(&bytes) {
                Some(Destination::Id(dest)) => dest == id,
                Some(Destination::Short(short)) => short == frame::short_id(id),
                None => false,
            };
            prop_assert!(named);
        }
    }
}
