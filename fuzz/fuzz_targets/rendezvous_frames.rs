//! Fuzz target: what a peer writes on a tcp stream after the handshake, read by a running
//! rank. A context of rank 0 (made once, tcp on loopback, messages capped at 256 KiB) is
//! sent each input's bytes on a stream of its own by this process, which joins as rank 1
//! (the job-key handshake done for real): message frames of every size around the staging
//! buffer (large ones read as they arrive into the buffer that keeps them), tags,
//! announcements of any length, closes and raw bytes. Rank 0 must deliver the messages of
//! the well-formed prefix exactly and in order, then end that stream (quietly after a
//! close, else with a typed error), never panic, hang or reserve what a length claims. The input's first
//! 16 bytes are also parsed as the shm setup message (ring descriptors' grant), which
//! must emit the same bytes again.
//!
//! Input: a sequence of ops, each one byte (modulo 5) followed by its arguments:
//! - 0 message: `[len u16]`, a genuine frame of that many bytes;
//! - 1 announcement: `[len u64][n u8]`, a message header of any length, then `n` bytes;
//! - 2 tag: `[tag u8]`, a tag frame;
//! - 3 raw: `[n u8][bytes]`;
//! - 4 close: a close frame.
#![no_main]

use std::cell::RefCell;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use quiver::{Config, Context, Endpoint, Error, TransportKind};
use quiver_proto::handshake::{ConnectRequest, Initiator, JobKey};
use quiver_wire::handshake::{MAX_MESSAGE_LEN, PREFIX_LEN};
use quiver_wire::shm_setup::SetupRepr;
use quiver_wire::stream::StreamHeader;

const JOB_ID: u64 = 0x7463_7066;
const KEY: [u8; 32] = [0x17; 32];
const MAX_MESSAGE: usize = 256 << 10;

struct Rank {
    _context: Context,
    endpoint: Endpoint,
    address: SocketAddr,
    next_port: u16,
}

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Rank {
    fn new() -> Rank {
        let addrs: Vec<SocketAddr> = (0..2)
            .map(|_| SocketAddr::new(Ipv4Addr::LOCALHOST.into(), free_port()))
            .collect();
        let config = Config {
            transports: vec![TransportKind::Tcp],
            max_message_bytes: MAX_MESSAGE as u64,
            tcp_staging_bytes: 4096,
            op_timeout: Some(Duration::from_secs(5)),
            ..Config::default()
        };
        let context = Context::builder()
            .rank(0)
            .size(2)
            .job_id(JOB_ID)
            .job_key(KEY)
            .addrs(addrs.clone())
            .config(config)
            .build()
            .expect("rank 0 over tcp");
        let endpoint = context.endpoint(0).expect("endpoint 0");
        Rank {
            _context: context,
            endpoint,
            address: addrs[0],
            next_port: 1,
        }
    }

    /// A stream to endpoint 0 from a fresh endpoint port of rank 1, handshake done.
    fn join(&mut self) -> TcpStream {
        let src_port = self.next_port;
        self.next_port = self.next_port.wrapping_add(1).max(1);
        let mut stream = TcpStream::connect(self.address).expect("connect to rank 0");
        stream.set_nodelay(true).expect("nodelay");
        let request = ConnectRequest {
            job_id: JOB_ID,
            src_rank: 1,
            src_port,
            dst_port: 0,
        };
        let mut initiator = Initiator::new(JobKey::from_bytes(KEY), request, [src_port as u8; 32]);
        let mut out = [0u8; MAX_MESSAGE_LEN];
        let mut send = |initiator: &mut Initiator, stream: &mut TcpStream| {
            while let Some(n) = initiator.poll_transmit(&mut out).expect("handshake") {
                stream.write_all(&out[..n]).expect("handshake write");
            }
        };
        send(&mut initiator, &mut stream);
        // Rank 0's listener answers while this thread waits: it runs on its own thread.
        let challenge = read_message(&mut stream);
        initiator
            .handle_challenge(&challenge, &[0u8; 12])
            .expect("a challenge");
        send(&mut initiator, &mut stream);
        let verdict = read_message(&mut stream);
        initiator.handle_verdict(&verdict).expect("accepted");
        stream
    }
}

/// Reads one handshake message (its length is in its prefix).
fn read_message(stream: &mut TcpStream) -> Vec<u8> {
    let mut message = vec![0u8; PREFIX_LEN];
    stream
        .read_exact(&mut message)
        .expect("a handshake message");
    let declared = usize::from(u16::from_be_bytes([message[6], message[7]]));
    if (PREFIX_LEN..=MAX_MESSAGE_LEN).contains(&declared) {
        message.resize(declared, 0);
        stream
            .read_exact(&mut message[PREFIX_LEN..])
            .expect("its body");
    }
    message
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
    fn u64(&mut self) -> u64 {
        let mut bytes = [0u8; 8];
        for b in &mut bytes {
            *b = self.byte();
        }
        u64::from_le_bytes(bytes)
    }
    fn bytes(&mut self, len: usize) -> &[u8] {
        let len = len.min(self.0.len());
        let (taken, rest) = self.0.split_at(len);
        self.0 = rest;
        taken
    }
}

/// The bytes the input writes and the messages of its well-formed prefix.
fn stream_bytes(data: &[u8]) -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut input = Input(data);
    let (mut bytes, mut expected) = (Vec::new(), Vec::new());
    let mut well_formed = true;
    let mut ops = 0;
    while !input.0.is_empty() && ops < 32 && bytes.len() < 1 << 20 {
        ops += 1;
        match input.byte() % 5 {
            0 => {
                let len = usize::from(u16::from_le_bytes([input.byte(), input.byte()])) * 4;
                let message: Vec<u8> = (0..len).map(|i| (i * 7 + ops) as u8).collect();
                bytes.extend_from_slice(&StreamHeader::message(len as u64).emit());
                bytes.extend_from_slice(&message);
                if well_formed {
                    expected.push(message);
                }
            }
            1 => {
                let len = input.u64();
                let n = usize::from(input.byte());
                bytes.extend_from_slice(&StreamHeader::message(len).emit());
                bytes.extend_from_slice(input.bytes(n));
                well_formed = false;
            }
            2 => {
                let tag = u64::from(input.byte());
                bytes.extend_from_slice(&StreamHeader::tag(tag).emit());
                // Untagged receives take tagged messages too; the tag changes nothing here.
            }
            3 => {
                let n = usize::from(input.byte());
                let raw = input.bytes(n);
                bytes.extend_from_slice(raw);
                well_formed &= raw.is_empty();
            }
            _ => {
                bytes.extend_from_slice(&StreamHeader::close().emit());
                well_formed = false;
            }
        }
    }
    (bytes, expected)
}

/// Whether `bytes` hold a close frame anywhere (then rank 0 may end the stream quietly
/// there: a closed connection is no error).
fn may_close(bytes: &[u8]) -> bool {
    let close = StreamHeader::close().emit();
    bytes.windows(close.len()).any(|window| window == close)
}

thread_local! {
    static RANK: RefCell<Option<Rank>> = const { RefCell::new(None) };
}

fuzz_target!(|data: &[u8]| {
    if let Ok(setup) = SetupRepr::parse(data) {
        assert_eq!(&setup.emit()[..], &data[..16]);
    }
    let (bytes, expected) = stream_bytes(data);
    let quiet_end = may_close(&bytes);
    RANK.with(|rank| {
        let mut rank = rank.borrow_mut();
        let rank = rank.get_or_insert_with(Rank::new);
        let mut stream = rank.join();
        std::thread::scope(|s| {
            // Written from another thread: rank 0 reads only as this one receives.
            s.spawn(move || {
                let _ = stream.write_all(&bytes);
                let _ = stream.shutdown(Shutdown::Write);
            });
            let mut buf = vec![0u8; MAX_MESSAGE];
            let mut delivered = 0;
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut last_news = Instant::now();
            loop {
                match rank.endpoint.try_recv(&mut buf) {
                    Ok((n, from)) => {
                        assert_eq!(from.rank, 1, "a message from {from:?}");
                        if let Some(message) = expected.get(delivered) {
                            assert!(buf[..n] == message[..], "message {delivered} changed");
                        }
                        delivered += 1;
                        last_news = Instant::now();
                    }
                    Err(Error::WouldBlock) => {
                        let quiet = last_news.elapsed() > Duration::from_millis(100);
                        if quiet_end && delivered >= expected.len() && quiet {
                            break;
                        }
                        assert!(Instant::now() < deadline, "rank 0 hangs on the stream");
                        std::thread::yield_now();
                    }
                    // The stream's end, reported once, with why.
                    Err(_) => break,
                }
            }
            assert!(
                delivered >= expected.len(),
                "{delivered} of the {} well-formed messages delivered",
                expected.len()
            );
        });
    });
});
