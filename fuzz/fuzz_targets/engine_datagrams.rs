//! Fuzz target: datagrams from anywhere into a running job's datagram engine. Two ranks of
//! one job (contexts in this process over the in-process `mem` transport, made once) keep
//! a genuine connection from rank 1 to rank 0; the input's datagrams reach rank 0's socket
//! (`quiver::fuzzing::deliver_mem_datagram`) from rank 1's address or a stranger's, and go
//! through the engine's whole receive path: the router, the Hellos it answers, the
//! connection a frame names and its authenticator, the endpoint. After every op: no panic,
//! no error on the genuine connection, the engine's state bounded; after every input a
//! genuine message still arrives intact (nothing injected was delivered in its place).
//!
//! Input: a sequence of ops, each one byte (modulo 4) followed by its arguments:
//! - 0 raw: `[source u8][len u8][bytes]`, sent as is (source bit 0: rank 1's address, else
//!   a stranger's);
//! - 1 hello: `[flags u8][id u8]`, a genuine Hello (flags bit 0: under a wrong key; bit 1:
//!   from a stranger's address; bits 2-3: the endpoint port asked for, 0 open, else not;
//!   bits 4-5: the source port 1-4, never the genuine connection's 0; bit 6: a rank out of
//!   the job) with connection id and nonce from `id` (few values, so that repeats meet);
//! - 2 mangled hello: as 1, then `[index u8][xor u8]` changes one byte;
//! - 3 genuine: `[len u8]`, rank 1 sends a message of `len * 97` bytes to rank 0, which
//!   must receive it intact.
#![no_main]

use std::cell::RefCell;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use quiver::{Addr, Config, Connection, Context, Endpoint, Error, TransportKind};
use quiver_proto::handshake::{ConnectRequest, JobKey};
use quiver_proto::reliable::{ReliableConfig, ReliableConnection};
use quiver_proto::router::HELLO_CAPACITY;
use quiver_wire::frame::MAX_HEADER_LEN;

const JOB_ID: u64 = 0x6675_7a7a;
const KEY: [u8; 32] = [0x42; 32];

/// The two ranks, rank 1's connection to rank 0, and what rank 0 received so far.
struct Job {
    _contexts: [Context; 2],
    receiver: Endpoint,
    sender: Endpoint,
    connection: Connection,
    addrs: Vec<SocketAddr>,
    genuine: u64,
}

fn address(last: u8) -> SocketAddr {
    SocketAddr::new(Ipv4Addr::new(127, 91, 7, last).into(), 47_000)
}

impl Job {
    fn new() -> Job {
        let addrs = vec![address(1), address(2)];
        let config = Config {
            transports: vec![TransportKind::Mem],
            connect_timeout: Duration::from_secs(10),
            op_timeout: Some(Duration::from_secs(10)),
            ..Config::default()
        };
        let contexts = [0, 1].map(|rank| {
            Context::builder()
                .rank(rank)
                .size(2)
                .job_id(JOB_ID)
                .job_key(KEY)
                .addrs(addrs.clone())
                .config(config.clone())
                .build()
                .expect("a context over mem")
        });
        let mut receiver = contexts[0].endpoint(0).expect("endpoint 0 of rank 0");
        let mut sender = contexts[1].endpoint(0).expect("endpoint 0 of rank 1");
        // The connect needs rank 0's engine polled meanwhile.
        let connection = std::thread::scope(|s| {
            let accept = s.spawn(|| {
                let mut buf = [0u8; 8];
                receiver.recv(&mut buf).expect("the first message")
            });
            let connection = sender.connect(Addr::new(0, 0)).expect("connect");
            sender.send(connection, b"hello").expect("first send");
            accept.join().expect("receiver");
            connection
        });
        Job {
            _contexts: contexts,
            receiver,
            sender,
            connection,
            addrs,
            genuine: 0,
        }
    }

    /// Rank 1 sends `len` bytes; rank 0 must receive exactly them from rank 1.
    fn genuine(&mut self, len: usize) {
        self.genuine += 1;
        let message: Vec<u8> = (0..len)
            .map(|i| (i as u64 ^ self.genuine.wrapping_mul(0x9e37)) as u8)
            .collect();
        let mut buf = vec![0u8; len.max(1)];
        let mut sent = false;
        for round in 0..200_000u32 {
            if !sent {
                match self.sender.try_send(self.connection, &message) {
                    Ok(()) => sent = true,
                    Err(Error::WouldBlock) => {}
                    Err(e) => panic!("genuine send: {e}"),
                }
            } else {
                self.sender.progress().expect("rank 1's progress");
            }
            match self.receiver.try_recv(&mut buf) {
                Ok((n, from)) => {
                    assert_eq!(from, Addr::new(1, 0), "a message from a stranger");
                    assert!(buf[..n] == message[..], "the genuine message changed");
                    return;
                }
                Err(Error::WouldBlock) => {}
                Err(e) => panic!("rank 0's receive: {e}"),
            }
            if round % 1024 == 1023 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        panic!("the genuine message of {len} bytes did not arrive");
    }

    /// Hands `datagram` to rank 0 from `from`, then lets both engines run.
    fn inject(&mut self, from: SocketAddr, datagram: &[u8]) {
        quiver::fuzzing::deliver_mem_datagram(from, self.addrs[0], datagram);
        match self.receiver.try_recv(&mut [0u8; 64]) {
            Err(Error::WouldBlock) => {}
            Ok(got) => panic!("an injected datagram was delivered: {got:?}"),
            Err(e) => panic!("an injected datagram broke rank 0's endpoint: {e}"),
        }
        self.sender.progress().expect("rank 1's progress");
    }

    fn check(&self) {
        let stats = self._contexts[0].stats().datagram.expect("datagram stats");
        assert!(
            stats.hellos_remembered <= HELLO_CAPACITY as u64,
            "{stats:?}"
        );
        // The genuine connection and at most one per (source port, id) of the Hellos.
        assert!(stats.connections <= 1 + 4 * 4 * 8, "{stats:?}");
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
    fn bytes(&mut self, len: usize) -> &[u8] {
        let len = len.min(self.0.len());
        let (taken, rest) = self.0.split_at(len);
        self.0 = rest;
        taken
    }
}

/// A genuine Hello as `flags` and `id` say (see the module doc), and where it comes from.
fn hello(flags: u8, id: u8, addrs: &[SocketAddr]) -> (SocketAddr, Vec<u8>) {
    let key = if flags & 1 == 0 { KEY } else { [0x24; 32] };
    let from = if flags & 2 == 0 { addrs[1] } else { address(9) };
    let request = ConnectRequest {
        job_id: JOB_ID,
        src_rank: if flags & 0x40 == 0 { 1 } else { 7 },
        src_port: 1 + u16::from((flags >> 4) & 3),
        dst_port: u16::from((flags >> 2) & 3),
    };
    let id = id % 8;
    let mut initiator = ReliableConnection::connect(
        ReliableConfig::default(),
        JobKey::from_bytes(key),
        request,
        0x1000 + u64::from(id),
        [id; 16],
        0,
    )
    .expect("a valid configuration");
    let mut header = [0u8; MAX_HEADER_LEN];
    let transmit = initiator.poll_transmit(0, &mut header).expect("a Hello");
    let mut datagram = header[..transmit.header_len].to_vec();
    datagram.extend_from_slice(transmit.payload);
    (from, datagram)
}

thread_local! {
    static JOB: RefCell<Option<Job>> = const { RefCell::new(None) };
}

fuzz_target!(|data: &[u8]| {
    JOB.with(|job| {
        let mut job = job.borrow_mut();
        let job = job.get_or_insert_with(Job::new);
        let mut input = Input(data);
        let mut ops = 0;
        while !input.0.is_empty() && ops < 64 {
            ops += 1;
            match input.byte() % 4 {
                0 => {
                    let from = if input.byte() & 1 == 0 {
                        job.addrs[1]
                    } else {
                        address(9)
                    };
                    let len = usize::from(input.byte());
                    let bytes = input.bytes(len).to_vec();
                    job.inject(from, &bytes);
                }
                op @ (1 | 2) => {
                    let (flags, id) = (input.byte(), input.byte());
                    let (from, mut datagram) = hello(flags, id, &job.addrs);
                    if op == 2 {
                        let at = usize::from(input.byte()) % datagram.len();
                        datagram[at] ^= input.byte().max(1);
                    }
                    job.inject(from, &datagram);
                }
                _ => {
                    let len = usize::from(input.byte()) * 97;
                    job.genuine(len);
                }
            }
            job.check();
        }
        job.genuine(64);
        job.check();
    });
});
