//! The simulator: nodes, links, flows, the run loop and the invariant checks.
//!
//! Layer: test infrastructure, the top of `quiver-sim`, on `quiver-proto` (the connections
//! and the router, run exactly as an engine runs them). It owns the nodes, flows, run loop
//! and invariant checks; it must not read the OS clock or any randomness but its seed.
//!
//! A *flow* is one connection with its applications: a [`SenderApp`] on the initiator node
//! writing a [`MessageScript`], and a [`ReceiverApp`] on the responder node reading and
//! verifying it. With [`FlowConfig::answer`] data flows both ways on the connection: a
//! second pair of apps writes the answer from the responder and verifies it on the
//! initiator, while the initiator's script flows the other way (each end then has data
//! to send while acknowledgements are due, as in a real exchange). The initiator side is
//! created with `ReliableConnection::connect` when the flow starts, under an id its node's
//! router draws from the simulation's generator.
//!
//! Routing: every node runs the router the engine runs ([`quiver_proto::router::Router`]):
//! it takes each arriving datagram to its connection (by full id, or a Stream frame's short
//! id), answers unknown ids with a Reset, accepts Hellos (the responder side of a flow,
//! made by `ReliableConnection::accept` inside the router) and sends repeated ones to the
//! connection they opened. The simulator only answers the router's questions (`SimHost`):
//! a flow is the endpoint a Hello's port names, and a Hello that no flow waits for is
//! rejected, its refusal sent and the connection forgotten, as the engine does.
//!
//! Links and paths: several links may join the same pair of nodes (in creation order, the
//! i-th link from `a` to `b` and the i-th from `b` to `a` form path i). A connection with
//! `path_count > 1` sends each datagram on the link its `Transmit::path` names (the
//! link-choice hook: path i = link i, modulo the number of links), and is told the path of
//! every arrival. A single-path connection takes the first link that is up (a router's
//! failover), and all its arrivals are path 0.
//!
//! Driving contract (what a real engine does, and what the core documents): after every
//! input (`handle_datagram`, `handle_timeout`, an application read or write) the simulator
//! calls `poll_transmit` until `None` and `poll_event` until `None`. Connection timers are
//! not queued: each step takes the earliest of the next queued event and every live
//! connection's `poll_timeout`, so a changed timer never leaves a stale event behind.
//!
//! Invariants, checked after every step (a violation panics with the time and context;
//! [`crate::seeds::run_seeds`] adds the seed and the replay command):
//! - time never goes backwards (the event queue asserts it);
//! - every byte read is the scripted byte: exactly once, in order, unchanged (in both
//!   directions of a flow with an answer);
//! - `memory_bytes()` of every connection stays below [`memory_bound_bytes`];
//! - in each direction, bytes written by the sender app and not yet read by the receiver
//!   app stay within `send_buffer_bytes + recv_window_bytes` (flow control holds the
//!   sender back);
//! - a connection's timer is not stuck (`poll_timeout` keeps returning a time at or before
//!   now after `handle_timeout`: a livelock).

use std::collections::BTreeMap;

use quiver_proto::handshake::{ConnectRequest, JobKey, KEY_LEN};
use quiver_proto::reliable::{
    Event, PathStats, PostedBuffers, PostedRead, ReliableConfig, ReliableConnection, ReliableStats,
    State, LEND_MESSAGE_TOKEN,
};
use quiver_proto::router::{
    self, Accepted, DropReason, EndpointAddress, Handshake, InboundPath, Routed, Router, RouterHost,
};
use quiver_wire::frame;

use crate::event::{EventQueue, Nanos, MILLISECOND_NS, SECOND_NS};
use crate::link::{Link, LinkConfig, LinkStats};
use crate::rng::{mix64, SimRng};
use crate::workload::{
    LendPolicy, MessageReader, MessageScript, MessageWriter, PostedReceives, ReceiverApp, SenderApp,
};

/// Index of a node in the simulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub usize);

/// Index of a directed link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LinkId(pub usize);

/// Index of a flow (one connection plus its applications).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlowId(pub usize);

/// The simulator's own, independent upper bound on a connection's memory for `config`:
/// both buffers, per-datagram tracking for every datagram allowed in flight (704 bytes
/// each, generous for a packet number, offsets, times, path bookkeeping, the receiver's
/// range lists (SACK, bytes placed ahead for a reader and for posted readers, stream
/// ranges held beyond a hole), a queue slot and two rests of frames re-cut for a lowered
/// datagram size, counted twice for growth), a few datagrams of scratch, 1 KiB per path, and 64 KiB of
/// fixed overhead. The core's own
/// `ReliableConfig::memory_bound_bytes()` must not exceed it, and `memory_bytes()` must
/// never exceed the core's bound.
pub fn memory_bound_bytes(config: &ReliableConfig) -> usize {
    config.send_buffer_bytes
        + config.recv_window_bytes
        + config.max_in_flight_datagrams * 704
        + 4 * config.max_datagram_bytes
        + config.path_count * 1024
        + 64 * 1024
}

/// How a flow is set up.
#[derive(Debug, Clone)]
pub struct FlowConfig {
    /// The initiator (sender) node.
    pub from: NodeId,
    /// The responder (receiver) node.
    pub to: NodeId,
    /// Configuration of both connection ends.
    pub config: ReliableConfig,
    /// What the sender sends.
    pub script: MessageScript,
    /// Slow receiver: read at most this many bytes per virtual millisecond. None: read
    /// everything as soon as it arrives.
    pub read_rate_bytes_per_ms: Option<u64>,
    /// When the initiator connects.
    pub start_ns: Nanos,
    /// The initiator uses this key instead of the job's (the wrong-key scenario).
    pub initiator_key: Option<JobKey>,
    /// True (default): the flow counts as settled once everything is delivered and acked.
    /// False: only once a side fails or closes (to watch an idle connection).
    pub settle_on_completion: bool,
    /// The sender closes the connection gracefully once every message is written; the flow
    /// then settles only when both sides are Closed (or one failed).
    pub close_when_done: bool,
    /// The sender lends its messages (sends them in place) instead of writing them.
    pub lend: Option<LendPolicy>,
    /// The receiver reads with posted readers instead of `read_message`.
    pub recv_posted: Option<PostedReceives>,
    /// What the responder sends back on the same connection, written from the start while
    /// `script` flows the other way; the initiator reads and verifies it (at full speed:
    /// `read_rate_bytes_per_ms` holds back only the responder's reading). The flow
    /// completes once both scripts are delivered and acknowledged. None: data flows one
    /// way, and the responder sends acknowledgements only.
    pub answer: Option<MessageScript>,
    /// The responder lends its answer (as `lend` for the script).
    pub answer_lend: Option<LendPolicy>,
    /// The initiator reads the answer with posted readers (as `recv_posted` for the script).
    pub answer_recv_posted: Option<PostedReceives>,
}

impl FlowConfig {
    /// A flow from `from` to `to` sending `script` at time 0 with `config`.
    pub fn new(from: NodeId, to: NodeId, config: ReliableConfig, script: MessageScript) -> Self {
        Self {
            from,
            to,
            config,
            script,
            read_rate_bytes_per_ms: None,
            start_ns: 0,
            initiator_key: None,
            settle_on_completion: true,
            close_when_done: false,
            lend: None,
            recv_posted: None,
            answer: None,
            answer_lend: None,
            answer_recv_posted: None,
        }
    }
}

/// Which end of a flow a connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Created with `connect`; runs the sender app (and the answer's receiver).
    Initiator,
    /// Created with `accept`; runs the receiver app (and the answer's sender).
    Responder,
}

/// Per-node counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Datagrams received (while alive).
    pub datagrams_received: u64,
    /// Of those, copies the link had corrupted.
    pub corrupted_received: u64,
    /// Datagrams with destination id 0 that the router refused or dropped (corrupt, wrong
    /// job, not a Hello). A wrong key is not visible here: it fails the handshake later.
    pub handshakes_refused: u64,
    /// Hellos accepted but rejected because no flow matched the request (the rejection is
    /// sent, as the engine sends it).
    pub handshakes_rejected: u64,
    /// Datagrams for an unknown connection id, or too short to carry one.
    pub unknown_destination: u64,
    /// Resets sent in reply to datagrams for unknown ids (`reliable::reset_for`).
    pub resets_sent: u64,
    /// Datagrams arriving after the node was killed.
    pub dropped_dead: u64,
}

/// Why `run_until` returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// Every flow settled: delivered and acknowledged, or failed on a side.
    AllFlowsSettled,
    /// The deadline was reached first.
    Deadline,
    /// Nothing left to happen: no event and no timer.
    Idle,
}

/// What a flow did.
#[derive(Debug, Clone)]
pub struct FlowReport {
    /// Messages in the script.
    pub messages_scripted: usize,
    /// Messages the sender fully wrote into its connection.
    pub messages_written: usize,
    /// Messages received and verified.
    pub messages_received: usize,
    /// Bytes received and verified.
    pub bytes_received: u64,
    /// Time the last message was verified and everything was acknowledged.
    pub completed_at_ns: Option<Nanos>,
    /// Time the flow started.
    pub started_at_ns: Nanos,
    /// Verified bytes per virtual second from start to completion (or to now).
    pub goodput_bytes_per_second: f64,
    /// Events of the initiator with their times.
    pub initiator_events: Vec<(Nanos, Event)>,
    /// Events of the responder with their times.
    pub responder_events: Vec<(Nanos, Event)>,
    /// Counters of the initiator connection.
    pub initiator_stats: Option<ReliableStats>,
    /// Counters of the responder connection.
    pub responder_stats: Option<ReliableStats>,
    /// Per-path counters and gauges of the initiator connection, by path index.
    pub initiator_paths: Vec<PathStats>,
    /// Largest `memory_bytes()` seen on either connection.
    pub peak_memory_bytes: usize,
    /// The bound it was checked against (`ReliableConfig::memory_bound_bytes`).
    pub memory_bound_bytes: usize,
    /// Bytes of lent messages the sender adopted (copied) after all ([`FlowConfig::lend`]).
    pub bytes_adopted: u64,
    /// Messages the sender posted ([`LendPolicy::posted_window`]) whose tokens the
    /// connection has not released (yet).
    pub posted_outstanding: u64,
    /// Posted readers of the receiver ([`FlowConfig::recv_posted`]) that finished too small
    /// for their message.
    pub posted_too_small: u64,
    /// The answer's direction, responder to initiator ([`FlowConfig::answer`]).
    pub answer: Option<DirectionReport>,
}

/// What one direction of a flow did: the fields of [`FlowReport`] of the same names, for
/// the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectionReport {
    /// Messages in the script.
    pub messages_scripted: usize,
    /// Messages the sender fully wrote into its connection.
    pub messages_written: usize,
    /// Messages received and verified.
    pub messages_received: usize,
    /// Bytes received and verified.
    pub bytes_received: u64,
    /// Bytes of lent messages the sender adopted (copied) after all.
    pub bytes_adopted: u64,
    /// Messages the sender posted whose tokens the connection has not released (yet).
    pub posted_outstanding: u64,
    /// Posted readers of the receiver that finished too small for their message.
    pub posted_too_small: u64,
}

/// Everything the run produced.
#[derive(Debug, Clone)]
pub struct SimReport {
    /// The seed.
    pub seed: u64,
    /// Virtual time at the end.
    pub now_ns: Nanos,
    /// Steps executed.
    pub steps: u64,
    /// Hash of every step (time, kind, datagram bytes): equal for equal runs.
    pub trace_hash: u64,
    /// Datagrams handed to links by all connections.
    pub datagrams_sent: u64,
    /// Per link counters, by `LinkId`.
    pub links: Vec<LinkStats>,
    /// Per node counters, by `NodeId`.
    pub nodes: Vec<NodeStats>,
    /// Per flow results, by `FlowId`.
    pub flows: Vec<FlowReport>,
}

impl SimReport {
    /// Sum of a link counter over all links.
    pub fn total_link(&self, counter: impl Fn(&LinkStats) -> u64) -> u64 {
        self.links.iter().map(counter).sum()
    }
}

enum SimEvent {
    Arrival {
        link: LinkId,
        datagram: Vec<u8>,
        corrupted: bool,
    },
    StartFlow(FlowId),
    ReaderTick(FlowId),
    Kill(NodeId),
    Restart(NodeId),
    /// A stall of the node ends: what arrived meanwhile is handed over.
    Unstall(NodeId),
}

struct Node {
    alive: bool,
    /// The node's datagram router, the one the engine runs: local connection ids (and the
    /// short ids Stream frames carry) -> index into `Sim::connections`, and the Hellos
    /// answered, so that repeated Hellos reach the connection they created.
    router: Router<usize>,
    stats: NodeStats,
    killed_at_ns: Option<Nanos>,
    /// Intervals `[start, end)` in which the node's process does not run (a host that
    /// takes the CPU away): no datagram is taken, no timer fires, nothing is sent.
    stalls: Vec<(Nanos, Nanos)>,
    /// Datagrams that arrived during a stall, handed over when it ends (the socket
    /// buffer held them): (link, bytes, corrupted).
    held: Vec<(LinkId, Vec<u8>, bool)>,
}

impl Node {
    /// The end of the stall `at` falls in, if any.
    fn stalled_until(&self, at: Nanos) -> Option<Nanos> {
        self.stalls
            .iter()
            .find(|&&(start, end)| start <= at && at < end)
            .map(|&(_, end)| end)
    }
}

struct Slot {
    node: NodeId,
    peer: NodeId,
    flow: FlowId,
    role: Role,
    connection: ReliableConnection,
    memory_bound_bytes: usize,
    peak_memory_bytes: usize,
    events: Vec<(Nanos, Event)>,
    /// Consecutive timer firings that did not move the timer past now.
    stuck_timer_count: u32,
    /// The node restarted after this connection was made: it is forgotten (no input, no
    /// timer, no output), like state lost in a process restart.
    forgotten: bool,
}

/// One direction of a flow: the app that writes a script and the app that reads it.
struct Direction {
    sender: SenderApp,
    receiver: ReceiverApp,
}

impl Direction {
    fn new(
        script: &MessageScript,
        lend: Option<LendPolicy>,
        posted: Option<PostedReceives>,
    ) -> Self {
        Self {
            sender: SenderApp::lending(script.clone(), lend),
            receiver: ReceiverApp::posting(script.clone(), posted),
        }
    }

    /// Every message written and read.
    fn is_done(&self) -> bool {
        self.sender.is_done() && self.receiver.is_done()
    }

    fn report(&self) -> DirectionReport {
        DirectionReport {
            messages_scripted: self.sender.messages_scripted(),
            messages_written: self.sender.messages_written(),
            messages_received: self.receiver.messages_received(),
            bytes_received: self.receiver.bytes_read(),
            bytes_adopted: self.sender.bytes_adopted(),
            posted_outstanding: self.sender.posted_outstanding(),
            posted_too_small: self.receiver.too_small(),
        }
    }
}

struct Flow {
    config: FlowConfig,
    /// The script, initiator to responder.
    forward: Direction,
    /// The answer, responder to initiator ([`FlowConfig::answer`]).
    answer: Option<Direction>,
    initiator: Option<usize>,
    responder: Option<usize>,
    read_budget_bytes: u64,
    completed_at_ns: Option<Nanos>,
    started: bool,
    close_called: bool,
}

impl Flow {
    /// Whether connection `slot` is this flow's end `role` (not a stray one a repeated
    /// Hello or a restart left behind).
    fn is_member(&self, role: Role, slot: usize) -> bool {
        match role {
            Role::Initiator => self.initiator == Some(slot),
            Role::Responder => self.responder == Some(slot),
        }
    }

    /// The app that writes on end `role`.
    fn sender(&self, role: Role) -> Option<&SenderApp> {
        match role {
            Role::Initiator => Some(&self.forward.sender),
            Role::Responder => self.answer.as_ref().map(|answer| &answer.sender),
        }
    }

    /// The app that reads on end `role`.
    fn receiver_mut(&mut self, role: Role) -> Option<&mut ReceiverApp> {
        match role {
            Role::Initiator => self.answer.as_mut().map(|answer| &mut answer.receiver),
            Role::Responder => Some(&mut self.forward.receiver),
        }
    }

    /// The directions with their names for messages: the script, then the answer.
    fn directions(&self) -> impl Iterator<Item = (&'static str, &Direction)> {
        std::iter::once(("script", &self.forward))
            .chain(self.answer.as_ref().map(|answer| ("answer", answer)))
    }
}

/// A deterministic simulation: build it with `add_node`, `add_link`, `add_flow`, then
/// call `run_until`.
pub struct Sim {
    seed: u64,
    rng: SimRng,
    queue: EventQueue<SimEvent>,
    nodes: Vec<Node>,
    links: Vec<Link>,
    /// Some link forges frames (a self-check): senders' keys are handed to it.
    forging: bool,
    /// (from, to) -> links, in creation order: link i is path i of multi-path connections;
    /// single-path connections take the first one that is up.
    routes: BTreeMap<(NodeId, NodeId), Vec<LinkId>>,
    /// (from, to) of each link.
    link_ends: Vec<(NodeId, NodeId)>,
    /// Position of each link among the links of its (from, to) pair: its path index.
    link_paths: Vec<usize>,
    connections: Vec<Slot>,
    flows: Vec<Flow>,
    job_id: u64,
    job_key: JobKey,
    header_scratch: Vec<u8>,
    steps: u64,
    trace_hash: u64,
    datagrams_sent: u64,
    /// Give up after this many steps (a livelock guard).
    pub max_steps: u64,
}

/// Consecutive timer firings at or before now after which a connection is declared stuck.
const STUCK_TIMER_LIMIT: u32 = 10_000;

impl Sim {
    /// An empty simulation whose every random choice derives from `seed`.
    pub fn new(seed: u64) -> Self {
        let mut rng = SimRng::new(seed);
        let job_id = rng.next_u64();
        let mut key = [0u8; KEY_LEN];
        for chunk in key.chunks_mut(8) {
            chunk.copy_from_slice(&rng.next_u64().to_le_bytes()[..chunk.len()]);
        }
        Self {
            seed,
            rng,
            queue: EventQueue::new(),
            nodes: Vec::new(),
            links: Vec::new(),
            forging: false,
            routes: BTreeMap::new(),
            link_ends: Vec::new(),
            link_paths: Vec::new(),
            connections: Vec::new(),
            flows: Vec::new(),
            job_id,
            job_key: JobKey::from_bytes(key),
            header_scratch: vec![0; frame::MAX_HEADER_LEN],
            steps: 0,
            trace_hash: mix64(seed),
            datagrams_sent: 0,
            max_steps: 200_000_000,
        }
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Current virtual time.
    pub fn now(&self) -> Nanos {
        self.queue.now()
    }

    /// A generator forked from the simulation's (for scenario choices such as scripts).
    pub fn fork_rng(&mut self, label: u64) -> SimRng {
        self.rng.fork(label)
    }

    /// A key that is not the job's (for the wrong-key scenario).
    pub fn wrong_key(&mut self) -> JobKey {
        let mut key = [0u8; KEY_LEN];
        for chunk in key.chunks_mut(8) {
            chunk.copy_from_slice(&self.rng.next_u64().to_le_bytes()[..chunk.len()]);
        }
        JobKey::from_bytes(key)
    }

    /// Adds a node.
    pub fn add_node(&mut self) -> NodeId {
        let router = self.new_router();
        self.nodes.push(Node {
            alive: true,
            router,
            stats: NodeStats::default(),
            killed_at_ns: None,
            stalls: Vec::new(),
            held: Vec::new(),
        });
        NodeId(self.nodes.len() - 1)
    }

    /// Adds a directed link from `from` to `to`.
    pub fn add_link(&mut self, from: NodeId, to: NodeId, config: LinkConfig) -> LinkId {
        let id = LinkId(self.links.len());
        let rng = self.rng.fork(0x4C49_4E4B ^ id.0 as u64);
        self.forging |= config.undetectable_corrupt_probability > 0.0;
        self.links.push(Link::new(config, rng));
        self.link_ends.push((from, to));
        let route = self.routes.entry((from, to)).or_default();
        self.link_paths.push(route.len());
        route.push(id);
        id
    }

    /// Adds a link in each direction with the same configuration; returns (forward, back).
    pub fn add_duplex_link(
        &mut self,
        a: NodeId,
        b: NodeId,
        config: LinkConfig,
    ) -> (LinkId, LinkId) {
        let forward = self.add_link(a, b, config.clone());
        let back = self.add_link(b, a, config);
        (forward, back)
    }

    /// Takes a link down during `[start, end)`.
    pub fn partition(&mut self, link: LinkId, start_ns: Nanos, end_ns: Nanos) {
        self.links[link.0].add_down_interval(start_ns, end_ns);
    }

    /// Kills `node` at `at_ns`: it never sends, receives or runs a timer again.
    pub fn kill_node(&mut self, node: NodeId, at_ns: Nanos) {
        self.queue.schedule(at_ns, SimEvent::Kill(node));
    }

    /// Stalls `node` during `[start_ns, end_ns)`: its process gets no CPU, as on a busy
    /// host. Datagrams for it wait (in order) until the end; its timers fire late, at the
    /// end at the earliest; it sends nothing meanwhile.
    pub fn stall_node(&mut self, node: NodeId, start_ns: Nanos, end_ns: Nanos) {
        if end_ns <= start_ns {
            return;
        }
        self.nodes[node.0].stalls.push((start_ns, end_ns));
        self.queue.schedule(end_ns, SimEvent::Unstall(node));
    }

    /// Restarts `node` at `at_ns`: it stays up but forgets every connection (datagrams for
    /// them are answered with a Reset, as for any unknown id).
    pub fn restart_node(&mut self, node: NodeId, at_ns: Nanos) {
        self.queue.schedule(at_ns, SimEvent::Restart(node));
    }

    /// Adds a flow; it starts at `config.start_ns`.
    ///
    /// # Panics
    /// If there are 65536 flows already (the flow index travels as the port number).
    pub fn add_flow(&mut self, config: FlowConfig) -> FlowId {
        let id = FlowId(self.flows.len());
        assert!(id.0 <= usize::from(u16::MAX), "too many flows");
        self.queue
            .schedule(config.start_ns, SimEvent::StartFlow(id));
        if config.read_rate_bytes_per_ms.is_some() {
            self.queue
                .schedule(config.start_ns, SimEvent::ReaderTick(id));
        }
        self.flows.push(Flow {
            forward: Direction::new(&config.script, config.lend, config.recv_posted),
            answer: config.answer.as_ref().map(|script| {
                Direction::new(script, config.answer_lend, config.answer_recv_posted)
            }),
            config,
            initiator: None,
            responder: None,
            read_budget_bytes: 0,
            completed_at_ns: None,
            started: false,
            close_called: false,
        });
        id
    }

    /// Runs until every flow has settled, the deadline passes, or nothing is left to do.
    ///
    /// # Panics
    /// On any invariant violation (see the module docs), or after `max_steps` steps.
    pub fn run_until(&mut self, deadline_ns: Nanos) -> StopReason {
        loop {
            if self.all_flows_settled() {
                return StopReason::AllFlowsSettled;
            }
            let next_event = self.queue.peek_time();
            let next_timer = self.next_timer();
            let next_time = match (next_event, next_timer) {
                (None, None) => return StopReason::Idle,
                (Some(event), None) => event,
                (None, Some((timer, _))) => timer,
                (Some(event), Some((timer, _))) => event.min(timer),
            };
            if next_time.max(self.now()) > deadline_ns {
                self.queue.advance_to(deadline_ns.max(self.now()));
                return StopReason::Deadline;
            }
            self.steps += 1;
            assert!(
                self.steps <= self.max_steps,
                "step limit {} reached at {} ns (livelock?)",
                self.max_steps,
                self.now()
            );
            // Queued events win ties with timers: deterministic either way.
            match (next_event, next_timer) {
                (Some(event), _) if event == next_time => {
                    let (now, event) = self.queue.pop().expect("peeked");
                    self.handle_event(now, event);
                }
                (_, Some((timer, slot))) => {
                    let now = timer.max(self.now());
                    self.queue.advance_to(now);
                    self.fire_timer(now, slot);
                }
                _ => unreachable!("next_time came from one of them"),
            }
        }
    }

    /// Sets the flow's receiver to read at most `bytes_per_ms` per virtual millisecond from
    /// now on (None: unlimited).
    pub fn set_read_rate(&mut self, flow: FlowId, bytes_per_ms: Option<u64>) {
        let was_limited = self.flows[flow.0].config.read_rate_bytes_per_ms.is_some();
        self.flows[flow.0].config.read_rate_bytes_per_ms = bytes_per_ms;
        if bytes_per_ms.is_some() && !was_limited {
            self.queue.schedule(self.now(), SimEvent::ReaderTick(flow));
        }
        if bytes_per_ms.is_none() {
            if let Some(slot) = self.flows[flow.0].responder {
                let now = self.now();
                self.drive(now, slot);
            }
        }
    }

    /// The report so far.
    pub fn report(&self) -> SimReport {
        SimReport {
            seed: self.seed,
            now_ns: self.now(),
            steps: self.steps,
            trace_hash: self.trace_hash,
            datagrams_sent: self.datagrams_sent,
            links: self.links.iter().map(|link| link.stats().clone()).collect(),
            nodes: self.nodes.iter().map(|node| node.stats.clone()).collect(),
            flows: self
                .flows
                .iter()
                .map(|flow| self.flow_report(flow))
                .collect(),
        }
    }

    /// The connection state of a flow's initiator or responder, if it exists.
    pub fn connection_state(&self, flow: FlowId, role: Role) -> Option<State> {
        let slot = match role {
            Role::Initiator => self.flows[flow.0].initiator,
            Role::Responder => self.flows[flow.0].responder,
        }?;
        Some(self.connections[slot].connection.state())
    }

    fn flow_report(&self, flow: &Flow) -> FlowReport {
        let initiator = flow.initiator.map(|slot| &self.connections[slot]);
        let responder = flow.responder.map(|slot| &self.connections[slot]);
        let end = flow.completed_at_ns.unwrap_or(self.now());
        let elapsed_ns = end.saturating_sub(flow.config.start_ns).max(1);
        let forward = flow.forward.report();
        FlowReport {
            messages_scripted: forward.messages_scripted,
            messages_written: forward.messages_written,
            bytes_adopted: forward.bytes_adopted,
            posted_outstanding: forward.posted_outstanding,
            posted_too_small: forward.posted_too_small,
            messages_received: forward.messages_received,
            bytes_received: forward.bytes_received,
            completed_at_ns: flow.completed_at_ns,
            started_at_ns: flow.config.start_ns,
            goodput_bytes_per_second: forward.bytes_received as f64 * SECOND_NS as f64
                / elapsed_ns as f64,
            initiator_events: initiator
                .map(|slot| slot.events.clone())
                .unwrap_or_default(),
            responder_events: responder
                .map(|slot| slot.events.clone())
                .unwrap_or_default(),
            initiator_stats: initiator.map(|slot| slot.connection.stats().clone()),
            responder_stats: responder.map(|slot| slot.connection.stats().clone()),
            initiator_paths: initiator
                .map(|slot| {
                    (0..slot.connection.path_count())
                        .filter_map(|path| slot.connection.path_stats(path))
                        .collect()
                })
                .unwrap_or_default(),
            peak_memory_bytes: initiator
                .iter()
                .chain(responder.iter())
                .map(|slot| slot.peak_memory_bytes)
                .max()
                .unwrap_or(0),
            memory_bound_bytes: flow.config.config.memory_bound_bytes(),
            answer: flow.answer.as_ref().map(Direction::report),
        }
    }

    /// A flow is settled when it completed (unless `settle_on_completion` is off or it
    /// closes when done), or when every connection of it on a live node has ended (Closed
    /// or Failed): after a failure the run goes on until the other side notices too.
    fn all_flows_settled(&self) -> bool {
        self.flows.iter().all(|flow| {
            if !flow.started {
                return false;
            }
            if flow.completed_at_ns.is_some()
                && flow.config.settle_on_completion
                && !flow.config.close_when_done
            {
                return true;
            }
            [flow.initiator, flow.responder]
                .into_iter()
                .flatten()
                .map(|slot| &self.connections[slot])
                .filter(|slot| self.nodes[slot.node.0].alive && !slot.forgotten)
                .all(|slot| matches!(slot.connection.state(), State::Failed | State::Closed))
        })
    }

    fn next_timer(&self) -> Option<(Nanos, usize)> {
        let mut best: Option<(Nanos, usize)> = None;
        for (index, slot) in self.connections.iter().enumerate() {
            if !self.nodes[slot.node.0].alive || slot.forgotten {
                continue;
            }
            if let Some(at) = slot.connection.poll_timeout() {
                // A stalled process runs its timers when it gets the CPU back.
                let mut at = at;
                while let Some(end) = self.nodes[slot.node.0].stalled_until(at) {
                    at = end;
                }
                if best.is_none_or(|(best_at, _)| at < best_at) {
                    best = Some((at, index));
                }
            }
        }
        best
    }

    fn trace(&mut self, values: &[u64]) {
        for &value in values {
            self.trace_hash = mix64(self.trace_hash ^ value);
        }
    }

    fn trace_bytes(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let word = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
            self.trace_hash = mix64(self.trace_hash ^ word);
        }
        let mut tail = [0u8; 8];
        tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        self.trace(&[u64::from_le_bytes(tail), bytes.len() as u64]);
    }

    fn handle_event(&mut self, now: Nanos, event: SimEvent) {
        match event {
            SimEvent::Arrival {
                link,
                datagram,
                corrupted,
            } => {
                self.trace(&[now, 1, link.0 as u64]);
                self.trace_bytes(&datagram);
                let (_, to) = self.link_endpoints(link);
                if self.nodes[to.0].stalled_until(now).is_some() {
                    self.nodes[to.0].held.push((link, datagram, corrupted));
                    return;
                }
                self.handle_arrival(now, link, &datagram, corrupted);
            }
            SimEvent::Unstall(node) => {
                self.trace(&[now, 9, node.0 as u64]);
                if self.nodes[node.0].stalled_until(now).is_some() {
                    // Another stall continues it; its own end hands everything over.
                    return;
                }
                for (link, datagram, corrupted) in std::mem::take(&mut self.nodes[node.0].held) {
                    self.handle_arrival(now, link, &datagram, corrupted);
                }
            }
            SimEvent::StartFlow(flow) => {
                self.trace(&[now, 2, flow.0 as u64]);
                self.start_flow(now, flow);
            }
            SimEvent::ReaderTick(flow) => {
                self.trace(&[now, 3, flow.0 as u64]);
                let Some(rate) = self.flows[flow.0].config.read_rate_bytes_per_ms else {
                    return;
                };
                self.flows[flow.0].read_budget_bytes = rate;
                if let Some(slot) = self.flows[flow.0].responder {
                    self.drive(now, slot);
                }
                if self.flows[flow.0].completed_at_ns.is_none() {
                    self.queue
                        .schedule(now + MILLISECOND_NS, SimEvent::ReaderTick(flow));
                }
            }
            SimEvent::Restart(node) => {
                self.trace(&[now, 8, node.0 as u64]);
                self.nodes[node.0].router = self.new_router();
                for slot in self.connections.iter_mut().filter(|slot| slot.node == node) {
                    slot.forgotten = true;
                }
            }
            SimEvent::Kill(node) => {
                self.trace(&[now, 4, node.0 as u64]);
                self.nodes[node.0].alive = false;
                self.nodes[node.0].killed_at_ns = Some(now);
            }
        }
    }

    fn start_flow(&mut self, now: Nanos, flow_id: FlowId) {
        let flow = &mut self.flows[flow_id.0];
        flow.started = true;
        let config = flow.config.clone();
        if !self.nodes[config.from.0].alive {
            return;
        }
        let request = ConnectRequest {
            job_id: self.job_id,
            src_rank: config.from.0 as u32,
            src_port: flow_id.0 as u16,
            dst_port: flow_id.0 as u16,
        };
        let local_id = self.fresh_connection_id(config.from);
        let nonce = self.rng.nonce16();
        let key = config
            .initiator_key
            .clone()
            .unwrap_or_else(|| self.job_key.clone());
        let connection =
            ReliableConnection::connect(config.config.clone(), key, request, local_id, nonce, now)
                .unwrap_or_else(|error| panic!("flow {}: invalid config: {error:?}", flow_id.0));
        let slot =
            self.insert_connection(config.from, config.to, flow_id, Role::Initiator, connection);
        self.flows[flow_id.0].initiator = Some(slot);
        self.drive(now, slot);
    }

    /// The router of a node started afresh (a new node, or a restarted one).
    fn new_router(&self) -> Router<usize> {
        Router::new(self.job_id, self.job_key.clone())
    }

    fn fresh_connection_id(&mut self, node: NodeId) -> u64 {
        let rng = &mut self.rng;
        self.nodes[node.0].router.fresh_id(|| rng.next_u64())
    }

    fn insert_connection(
        &mut self,
        node: NodeId,
        peer: NodeId,
        flow: FlowId,
        role: Role,
        connection: ReliableConnection,
    ) -> usize {
        let index = self.connections.len();
        self.nodes[node.0]
            .router
            .insert(connection.local_id(), index);
        let config = &self.flows[flow.0].config.config;
        let bound = config.memory_bound_bytes();
        assert!(
            bound <= memory_bound_bytes(config),
            "the core's memory bound {bound} exceeds the simulator's sanity bound {} for \
             {config:?}",
            memory_bound_bytes(config)
        );
        self.connections.push(Slot {
            node,
            peer,
            flow,
            role,
            connection,
            memory_bound_bytes: bound,
            peak_memory_bytes: 0,
            events: Vec::new(),
            stuck_timer_count: 0,
            forgotten: false,
        });
        index
    }

    fn link_endpoints(&self, link: LinkId) -> (NodeId, NodeId) {
        self.link_ends[link.0]
    }

    /// A datagram that reached node `to` over `link`: dropped if the link is down or the
    /// node dead, else routed by the node's router (the engine's) and handled as an
    /// engine would.
    fn handle_arrival(&mut self, now: Nanos, link: LinkId, datagram: &[u8], corrupted: bool) {
        if !self.links[link.0].is_up(now) {
            self.links[link.0].count_arrival_partition_drop();
            return;
        }
        let (from, to) = self.link_endpoints(link);
        if !self.nodes[to.0].alive {
            self.nodes[to.0].stats.dropped_dead += 1;
            return;
        }
        self.nodes[to.0].stats.datagrams_received += 1;
        if corrupted {
            self.nodes[to.0].stats.corrupted_received += 1;
        }
        let path = self.link_paths[link.0];
        let mut host = SimHost {
            rng: &mut self.rng,
            flows: &self.flows,
            connections: &self.connections,
            node: to,
        };
        match self.nodes[to.0]
            .router
            .handle(now, &from, path, datagram, &mut host)
        {
            Routed::Connection { connection, .. }
            | Routed::RepeatedHello {
                connection: Some(connection),
                ..
            } => {
                let slot = *connection;
                self.feed(now, slot, path, datagram);
                self.drive(now, slot);
            }
            // A repeat of a Hello whose connection was not kept (a rejected one).
            Routed::RepeatedHello {
                connection: None, ..
            } => {}
            Routed::Accepted(accepted) => self.handle_accepted(now, from, to, *accepted),
            Routed::Reset(reset) => {
                let reset = reset.to_vec();
                let stats = &mut self.nodes[to.0].stats;
                stats.unknown_destination += 1;
                stats.resets_sent += 1;
                let reply_path = (path > 0).then_some(path);
                self.send(now, to, from, reply_path, reset);
            }
            Routed::Refused { .. }
            | Routed::Dropped(DropReason::MalformedHello | DropReason::UnsharedPath) => {
                self.nodes[to.0].stats.handshakes_refused += 1;
            }
            Routed::Dropped(
                DropReason::NoDestination | DropReason::UnknownId | DropReason::UnknownShortId,
            ) => {
                self.nodes[to.0].stats.unknown_destination += 1;
            }
        }
    }

    /// Hands `datagram` (arrived on `path`) to connection `slot`: the end of a flow whose
    /// receiver there posts readers gets it with their buffers.
    fn feed(&mut self, now: Nanos, slot: usize, path: usize, datagram: &[u8]) {
        let entry = &mut self.connections[slot];
        let flow = &mut self.flows[entry.flow.0];
        let path = if path < entry.connection.path_count() {
            path
        } else {
            0
        };
        let member = flow.is_member(entry.role, slot);
        let receiver = flow.receiver_mut(entry.role);
        match receiver.and_then(ReceiverApp::posted_buffers) {
            Some(buffers) if member => {
                entry
                    .connection
                    .handle_datagram_posted(now, path, datagram, buffers);
            }
            _ => entry.connection.handle_datagram(now, path, datagram),
        }
    }

    /// A connection node `to`'s router accepted from a Hello of `from`: the responder of
    /// the flow the Hello names, or, rejected (no flow waits for it), a connection that
    /// sends its refusal and is forgotten, as the engine forgets it once the refusal is
    /// sent (its Hello stays answered: repeats are ignored).
    fn handle_accepted(&mut self, now: Nanos, from: NodeId, to: NodeId, accepted: Accepted) {
        let Accepted {
            connection,
            request,
            rejection,
            ..
        } = accepted;
        if rejection.is_some() {
            self.nodes[to.0].stats.handshakes_rejected += 1;
            self.send_refusal(now, to, from, connection);
            return;
        }
        let flow = FlowId(usize::from(request.dst_port));
        let slot = self.insert_connection(to, from, flow, Role::Responder, connection);
        self.flows[flow.0].responder = Some(slot);
        self.drive(now, slot);
    }

    /// Sends what a rejected connection of `node` has to send (its refusal) to `peer`.
    fn send_refusal(
        &mut self,
        now: Nanos,
        node: NodeId,
        peer: NodeId,
        mut connection: ReliableConnection,
    ) {
        let multi_path = connection.path_count() > 1;
        let mut header = std::mem::take(&mut self.header_scratch);
        // Bounded: a rejected connection has one datagram to send.
        for _ in 0..16 {
            let Some(transmit) = connection.poll_transmit(now, &mut header) else {
                break;
            };
            let mut datagram = Vec::with_capacity(transmit.header_len + transmit.payload.len());
            datagram.extend_from_slice(&header[..transmit.header_len]);
            datagram.extend_from_slice(transmit.payload);
            let path = multi_path.then_some(transmit.path);
            self.send(now, node, peer, path, datagram);
        }
        self.header_scratch = header;
    }

    fn fire_timer(&mut self, now: Nanos, slot: usize) {
        self.trace(&[now, 5, slot as u64]);
        self.connections[slot].connection.handle_timeout(now);
        let next = self.connections[slot].connection.poll_timeout();
        let entry = &mut self.connections[slot];
        if next.is_some_and(|at| at <= now) {
            entry.stuck_timer_count += 1;
            assert!(
                entry.stuck_timer_count < STUCK_TIMER_LIMIT,
                "connection {slot} ({:?} of flow {}): poll_timeout still returns {next:?} at \
                 {now} ns after {STUCK_TIMER_LIMIT} handle_timeout calls (timer livelock)",
                entry.role,
                entry.flow.0
            );
        } else {
            entry.stuck_timer_count = 0;
        }
        self.drive(now, slot);
    }

    /// Runs the slot's application, then drains transmits and events, and checks the
    /// per-step invariants of this connection.
    fn drive(&mut self, now: Nanos, slot: usize) {
        if !self.nodes[self.connections[slot].node.0].alive || self.connections[slot].forgotten {
            return;
        }
        for _ in 0..2 {
            self.run_app(now, slot);
            self.drain_transmits(now, slot);
            if !self.drain_events(now, slot) {
                break;
            }
        }
        self.check_memory(now, slot);
        self.check_unread_bound(now, self.connections[slot].flow);
        self.update_completion(now, self.connections[slot].flow);
    }

    /// Flow control, in each direction: bytes the sender app handed over but the receiver
    /// app has not read are either unacknowledged (at most the send buffer) or buffered at
    /// the receiver (at most its window), so their sum is bounded by both buffers.
    fn check_unread_bound(&self, now: Nanos, flow_id: FlowId) {
        let flow = &self.flows[flow_id.0];
        let config = &flow.config.config;
        for (name, direction) in flow.directions() {
            let unread = direction.sender.bytes_written() - direction.receiver.bytes_read();
            let bound = (config.send_buffer_bytes + config.recv_window_bytes) as u64
                + direction.receiver.unseen_read_bytes();
            assert!(
                unread <= bound,
                "flow-control invariant violated at {now} ns on flow {} ({name}): {unread} \
                 bytes written and not yet read > send buffer + receive window = {bound}",
                flow_id.0
            );
        }
    }

    /// Runs the apps of connection `slot`: the initiator writes its script (and closes once
    /// done, with `close_when_done`) and reads the answer; the responder reads the script
    /// (within its read budget) and writes the answer.
    fn run_app(&mut self, now: Nanos, slot: usize) {
        let entry = &mut self.connections[slot];
        let flow = &mut self.flows[entry.flow.0];
        if !flow.is_member(entry.role, slot) {
            return;
        }
        let (from, to) = (flow.config.from, flow.config.to);
        let violated = |direction: &str, from: NodeId, to: NodeId, violation: String| -> ! {
            panic!(
                "delivery invariant violated at {now} ns on flow {} ({direction}, node {} -> \
                 {}): {violation}",
                entry.flow.0, from.0, to.0
            )
        };
        let connection = &mut ConnectionApp(&mut entry.connection);
        match entry.role {
            Role::Initiator => {
                flow.forward.sender.pump(connection);
                if let Some(answer) = &mut flow.answer {
                    if let Err(violation) = answer.receiver.pump(connection, u64::MAX) {
                        violated("answer", to, from, violation);
                    }
                }
                let answered = flow
                    .answer
                    .as_ref()
                    .is_none_or(|answer| answer.receiver.is_done());
                if flow.config.close_when_done
                    && flow.forward.sender.is_done()
                    && answered
                    && !flow.close_called
                {
                    flow.close_called = true;
                    connection.0.close(now);
                }
            }
            Role::Responder => {
                let limited = flow.config.read_rate_bytes_per_ms.is_some();
                let budget = if limited {
                    flow.read_budget_bytes
                } else {
                    u64::MAX
                };
                match flow.forward.receiver.pump(connection, budget) {
                    Ok(read) if limited => flow.read_budget_bytes -= read,
                    Ok(_) => {}
                    Err(violation) => violated("script", from, to, violation),
                }
                if let Some(answer) = &mut flow.answer {
                    answer.sender.pump(connection);
                }
            }
        }
    }

    fn drain_transmits(&mut self, now: Nanos, slot: usize) {
        let (node, peer) = (self.connections[slot].node, self.connections[slot].peer);
        let max_datagram = self.flows[self.connections[slot].flow.0]
            .config
            .config
            .max_datagram_bytes;
        let multi_path = self.connections[slot].connection.path_count() > 1;
        let mut header = std::mem::take(&mut self.header_scratch);
        // Bounded: a connection may not emit unboundedly many datagrams for one input.
        for _ in 0..1_000_000 {
            let entry = &mut self.connections[slot];
            let flow = &self.flows[entry.flow.0];
            // The message of this end's sender, if it lends one.
            let sender = if flow.is_member(entry.role, slot) {
                flow.sender(entry.role)
            } else {
                None
            };
            let lender = |token| {
                let sender = sender?;
                if token == LEND_MESSAGE_TOKEN {
                    Some(sender.lent_message())
                } else {
                    sender.posted_message(token)
                }
            };
            let Some(transmit) = entry
                .connection
                .poll_transmit_lending(now, &mut header, lender)
            else {
                self.header_scratch = header;
                return;
            };
            let mut datagram = Vec::with_capacity(transmit.header_len + transmit.payload.len());
            datagram.extend_from_slice(&header[..transmit.header_len]);
            datagram.extend_from_slice(transmit.payload);
            assert!(
                datagram.len() <= max_datagram,
                "connection {slot}: poll_transmit produced {} bytes > max_datagram_bytes {}",
                datagram.len(),
                max_datagram
            );
            let path = multi_path.then_some(transmit.path);
            if self.forging {
                let forger = entry.connection.frame_send_key().cloned();
                for link in self.links.iter_mut().filter(|link| link.forges()) {
                    link.set_forger_key(forger.clone());
                }
            }
            self.send(now, node, peer, path, datagram);
        }
        panic!("connection {slot}: poll_transmit did not return None after 1e6 datagrams");
    }

    /// Offers `datagram` to a link from `from` to `to`: with `path`, the path-th link of the
    /// pair (modulo their number); without, the first that is up.
    fn send(
        &mut self,
        now: Nanos,
        from: NodeId,
        to: NodeId,
        path: Option<usize>,
        datagram: Vec<u8>,
    ) {
        self.datagrams_sent += 1;
        self.trace(&[now, 6, from.0 as u64, to.0 as u64]);
        let links = self
            .routes
            .get(&(from, to))
            .unwrap_or_else(|| panic!("no link from node {} to node {}", from.0, to.0));
        let link = match path {
            Some(path) => links[path % links.len()],
            None => links
                .iter()
                .copied()
                .find(|link| self.links[link.0].is_up(now))
                .unwrap_or(links[0]),
        };
        let deliveries = self.links[link.0].transmit(now, datagram);
        for (at, copy, corrupted) in deliveries.copies {
            self.queue.schedule(
                at,
                SimEvent::Arrival {
                    link,
                    datagram: copy,
                    corrupted,
                },
            );
        }
    }

    /// Returns true when there were events (the apps may have more to do).
    fn drain_events(&mut self, now: Nanos, slot: usize) -> bool {
        let mut any = false;
        while let Some(event) = self.connections[slot].connection.poll_event() {
            any = true;
            self.trace(&[now, 7, slot as u64]);
            self.connections[slot].events.push((now, event));
        }
        any
    }

    fn check_memory(&mut self, now: Nanos, slot: usize) {
        let entry = &mut self.connections[slot];
        let memory = entry.connection.memory_bytes();
        entry.peak_memory_bytes = entry.peak_memory_bytes.max(memory);
        assert!(
            memory <= entry.memory_bound_bytes,
            "memory invariant violated at {now} ns: connection {slot} ({:?} of flow {}) holds \
             {memory} bytes > bound {}",
            entry.role,
            entry.flow.0,
            entry.memory_bound_bytes
        );
    }

    /// A flow completes once every direction is written and read and each end that sent
    /// data has it all acknowledged.
    fn update_completion(&mut self, now: Nanos, flow_id: FlowId) {
        let flow = &self.flows[flow_id.0];
        if flow.completed_at_ns.is_some()
            || !flow.directions().all(|(_, direction)| direction.is_done())
        {
            return;
        }
        let all_acked = |slot: Option<usize>| {
            slot.is_some_and(|slot| self.connections[slot].connection.all_acked())
        };
        let acked =
            all_acked(flow.initiator) && (flow.answer.is_none() || all_acked(flow.responder));
        if acked {
            // The last acknowledgement may have been taken after the apps last ran (one
            // riding on a data frame is processed by the next transmit): the senders take
            // the tokens it released now, so that a completed flow has every posted
            // message back (a token still lent is a connection's bug, and stays counted).
            let flow = &mut self.flows[flow_id.0];
            let ends = [
                (flow.initiator, Some(&mut flow.forward.sender)),
                (
                    flow.responder,
                    flow.answer.as_mut().map(|answer| &mut answer.sender),
                ),
            ];
            for (slot, sender) in ends {
                if let (Some(slot), Some(sender)) = (slot, sender) {
                    sender
                        .take_released(&mut ConnectionApp(&mut self.connections[slot].connection));
                }
            }
            flow.completed_at_ns = Some(now);
        }
    }
}

/// What a node's router asks of the simulator while it accepts a Hello: the simulation's
/// generator, and the flows as the node's endpoints.
struct SimHost<'a> {
    rng: &'a mut SimRng,
    flows: &'a [Flow],
    connections: &'a [Slot],
    /// The node the Hello arrived at.
    node: NodeId,
}

impl RouterHost<NodeId, usize> for SimHost<'_> {
    fn random_u64(&mut self) -> u64 {
        self.rng.next_u64()
    }

    fn random_nonce(&mut self) -> [u8; 16] {
        self.rng.nonce16()
    }

    /// The configuration of the first flow from `from` to this node (a real endpoint has
    /// one configuration for all its connections). A single-path connection takes all its
    /// arrivals as path 0 (a router's failover), so does a Hello that came over another
    /// link.
    fn inbound_path(
        &mut self,
        _claimed_rank: u32,
        from: &NodeId,
        path: usize,
    ) -> Option<InboundPath> {
        let config = self
            .flows
            .iter()
            .find(|flow| flow.config.to == self.node && flow.config.from == *from)
            .map(|flow| flow.config.config.clone())
            .unwrap_or_default();
        let path = if path < config.path_count { path } else { 0 };
        Some(InboundPath { path, config })
    }

    /// The flow is the endpoint: the Hello's port is a flow's index, from the Hello's
    /// rank to this node, whose responder is not there yet.
    fn endpoint_open(&mut self, request: &ConnectRequest) -> bool {
        self.flows
            .get(usize::from(request.dst_port))
            .is_some_and(|flow| {
                flow.config.to == self.node
                    && flow.config.from.0 == request.src_rank as usize
                    && flow.responder.is_none()
            })
    }

    /// A node's rank is its index.
    fn local_rank(&self) -> u32 {
        self.node.0 as u32
    }

    /// A flow's ports are its index at both ends.
    fn handshake(&self, slot: &usize) -> Option<Handshake> {
        let entry = &self.connections[*slot];
        let connecting = entry.connection.state() == State::Handshaking && !entry.forgotten;
        let port = entry.flow.0 as u16;
        connecting.then_some(Handshake {
            direction: match entry.role {
                Role::Initiator => router::Direction::Outbound,
                Role::Responder => router::Direction::Inbound,
            },
            local_port: port,
            peer: EndpointAddress::new(entry.peer.0 as u32, port),
        })
    }
}

/// Adapts a connection to the application traits.
struct ConnectionApp<'a>(&'a mut ReliableConnection);

impl MessageWriter for ConnectionApp<'_> {
    fn start_message(&mut self, length_bytes: u64, tag: u64) -> bool {
        self.0.start_message_tagged(length_bytes, tag).is_ok()
    }
    fn write_message(&mut self, data: &[u8]) -> usize {
        self.0.write_message(data)
    }
    fn send_capacity(&self) -> usize {
        self.0.send_capacity()
    }
    fn lend_message(&mut self, len: u64) -> u64 {
        self.0
            .lend_message(usize::try_from(len).unwrap_or(usize::MAX)) as u64
    }
    fn lent_bytes(&self) -> u64 {
        self.0.lent_bytes()
    }
    fn adopt_lent(&mut self, message: &[u8], max_bytes: u64) -> u64 {
        let max_bytes = usize::try_from(max_bytes).unwrap_or(usize::MAX);
        // Invariant: the sender app passes the message it lent, whole.
        self.0
            .adopt_lent(message, max_bytes)
            .expect("the sender app passes the whole message it lent") as u64
    }
    fn lend_message_as(&mut self, token: u64, len: u64) -> u64 {
        self.0
            .lend_message_as(token, usize::try_from(len).unwrap_or(usize::MAX)) as u64
    }
    fn poll_released(&mut self) -> Option<u64> {
        self.0.poll_released()
    }
}

impl MessageReader for ConnectionApp<'_> {
    fn peek_message_len(&self) -> Option<u64> {
        self.0.peek_message_len()
    }
    fn message_tag(&self) -> u64 {
        self.0.message_tag()
    }
    fn read_message(&mut self, out: &mut [u8]) -> (usize, bool) {
        self.0.read_message(out)
    }
    fn post_reader(&mut self, token: u64, capacity: usize) -> bool {
        self.0.post_reader(token, capacity)
    }
    fn read_posted(&mut self, buffers: &mut dyn PostedBuffers) {
        self.0.read_posted(buffers);
    }
    fn poll_posted(&mut self) -> Option<PostedRead> {
        self.0.poll_posted()
    }
}
