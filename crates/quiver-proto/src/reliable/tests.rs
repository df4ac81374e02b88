//! Tests of the reliable connection: two connections wired back to back through a tiny
//! in-test network (a queue per direction, a filter that can drop, duplicate, corrupt or
//! reorder datagrams) and a virtual clock advanced to `poll_timeout`.
#![allow(clippy::unwrap_used)] // Tests unwrap: a panic is a failed test.

use std::collections::VecDeque;

use super::*;
use crate::handshake::KEY_LEN;

const JOB_ID: u64 = 0x5eed;

fn key(byte: u8) -> JobKey {
    JobKey::from_bytes([byte; KEY_LEN])
}

fn request() -> ConnectRequest {
    ConnectRequest {
        job_id: JOB_ID,
        src_rank: 1,
        src_port: 10,
        dst_port: 20,
    }
}

fn small_config() -> ReliableConfig {
    ReliableConfig {
        send_buffer_bytes: 64 << 10,
        recv_window_bytes: 64 << 10,
        ..ReliableConfig::default()
    }
}

/// Decides each datagram's fate from (index, sent by a, header).
type Filter = Box<dyn FnMut(usize, bool, &FrameHeader) -> Fate>;

/// What the network does to one datagram.
#[allow(dead_code)] // Filled in by the loss tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Deliver,
    Drop,
    Duplicate,
    Corrupt,
    /// Hold it back and deliver it after the next one.
    Delay,
}

/// Two endpoints and the datagrams between them. `a` connects, `b` accepts.
struct Pair {
    now: Nanos,
    a: ReliableConnection,
    b: Option<ReliableConnection>,
    config_b: ReliableConfig,
    key_b: JobKey,
    /// Datagrams in flight towards a / b.
    to_a: VecDeque<Vec<u8>>,
    to_b: VecDeque<Vec<u8>>,
    held: Option<(bool, Vec<u8>)>,
    /// Index of every datagram sent (both directions), for the filter.
    sent: usize,
    filter: Filter,
    accept_errors: Vec<AcceptError>,
    /// When set, b's datagrams vanish (the peer went silent).
    b_silent: bool,
}

impl Pair {
    fn new(config_a: ReliableConfig, config_b: ReliableConfig, key_a: u8, key_b: u8) -> Self {
        let a =
            ReliableConnection::connect(config_a, key(key_a), request(), 0xa, [1; 16], 0).unwrap();
        Self {
            now: 0,
            a,
            b: None,
            config_b,
            key_b: key(key_b),
            to_a: VecDeque::new(),
            to_b: VecDeque::new(),
            held: None,
            sent: 0,
            filter: Box::new(|_, _, _| Fate::Deliver),
            accept_errors: Vec::new(),
            b_silent: false,
        }
    }

    fn established() -> Self {
        let mut pair = Self::new(small_config(), small_config(), 7, 7);
        pair.run_until(|pair| {
            pair.a.state() == State::Established
                && pair
                    .b
                    .as_ref()
                    .is_some_and(|b| b.state() == State::Established)
        });
        assert_eq!(pair.a.poll_event(), Some(Event::Established));
        assert_eq!(pair.b().poll_event(), Some(Event::Established));
        pair
    }

    fn b(&mut self) -> &mut ReliableConnection {
        self.b.as_mut().unwrap()
    }

    /// Collects every transmit of both sides into the network.
    fn flush(&mut self) {
        let mut header = [0u8; frame::MAX_HEADER_LEN];
        loop {
            let mut any = false;
            while let Some(transmit) = self.a.poll_transmit(self.now, &mut header) {
                let mut datagram = header[..transmit.header_len].to_vec();
                datagram.extend_from_slice(transmit.payload);
                self.route(true, datagram);
                any = true;
            }
            let mut from_b = Vec::new();
            if let Some(b) = self.b.as_mut() {
                while let Some(transmit) = b.poll_transmit(self.now, &mut header) {
                    let mut datagram = header[..transmit.header_len].to_vec();
                    datagram.extend_from_slice(transmit.payload);
                    from_b.push(datagram);
                    any = true;
                }
            }
            if !self.b_silent {
                for datagram in from_b {
                    self.route(false, datagram);
                }
            }
            if !any {
                break;
            }
        }
    }

    fn route(&mut self, from_a: bool, datagram: Vec<u8>) {
        let index = self.sent;
        self.sent += 1;
        let header = *Frame::parse(&datagram).unwrap().header();
        let fate = (self.filter)(index, from_a, &header);
        let queue = if from_a {
            &mut self.to_b
        } else {
            &mut self.to_a
        };
        match fate {
            Fate::Deliver => queue.push_back(datagram),
            Fate::Drop => {}
            Fate::Duplicate => {
                queue.push_back(datagram.clone());
                queue.push_back(datagram);
            }
            Fate::Corrupt => {
                let mut corrupted = datagram;
                let at = corrupted.len() / 2;
                corrupted[at] ^= 0x10;
                queue.push_back(corrupted);
            }
            Fate::Delay => {
                if let Some((held_from_a, held)) = self.held.take() {
                    let held_queue = if held_from_a {
                        &mut self.to_b
                    } else {
                        &mut self.to_a
                    };
                    held_queue.push_back(held);
                }
                self.held = Some((from_a, datagram));
                return;
            }
        }
        if let Some((held_from_a, held)) = self.held.take() {
            let held_queue = if held_from_a {
                &mut self.to_b
            } else {
                &mut self.to_a
            };
            held_queue.push_back(held);
        }
    }

    /// Delivers every queued datagram; returns whether any was delivered.
    fn deliver(&mut self) -> bool {
        let mut any = false;
        while let Some(datagram) = self.to_b.pop_front() {
            any = true;
            match self.b.as_mut() {
                Some(b) => b.handle_datagram(self.now, &datagram),
                None => match ReliableConnection::accept(
                    self.config_b.clone(),
                    self.key_b.clone(),
                    JOB_ID,
                    &datagram,
                    0xb,
                    [2; 16],
                    self.now,
                ) {
                    Ok((connection, request_seen)) => {
                        assert_eq!(request_seen, request());
                        self.b = Some(connection);
                    }
                    Err(error) => self.accept_errors.push(error),
                },
            }
        }
        while let Some(datagram) = self.to_a.pop_front() {
            any = true;
            self.a.handle_datagram(self.now, &datagram);
        }
        any
    }

    /// One step: send, deliver; if nothing moved, advance time to the next timeout.
    /// Returns false when nothing is left to happen.
    fn step(&mut self) -> bool {
        self.flush();
        if self.deliver() {
            return true;
        }
        if let Some((held_from_a, held)) = self.held.take() {
            let queue = if held_from_a {
                &mut self.to_b
            } else {
                &mut self.to_a
            };
            queue.push_back(held);
            return true;
        }
        let next = [
            self.a.poll_timeout(),
            self.b.as_ref().and_then(ReliableConnection::poll_timeout),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(next) = next else {
            return false;
        };
        self.now = self.now.max(next);
        self.a.handle_timeout(self.now);
        if let Some(b) = self.b.as_mut() {
            b.handle_timeout(self.now);
        }
        true
    }

    fn run_until(&mut self, mut done: impl FnMut(&mut Self) -> bool) {
        for _ in 0..1_000_000 {
            if done(self) {
                return;
            }
            if !self.step() {
                break;
            }
        }
        assert!(done(self), "condition not reached at t={} ns", self.now);
    }
}

/// Sends `messages` from a to b, reading as they arrive; returns what b read.
fn transfer(pair: &mut Pair, messages: &[Vec<u8>], read_chunk: usize) -> Vec<Vec<u8>> {
    let mut received = Vec::new();
    let mut current = Vec::new();
    let mut next_message = 0;
    let mut written = 0;
    let mut started = false;
    let mut buffer = vec![0u8; read_chunk.max(1)];
    pair.run_until(|pair| {
        // Writer.
        while next_message < messages.len() {
            let message = &messages[next_message];
            if !started {
                if pair.a.start_message(message.len() as u64).is_err() {
                    break;
                }
                started = true;
                written = 0;
            }
            written += pair.a.write_message(&message[written..]);
            if written < message.len() {
                break;
            }
            started = false;
            next_message += 1;
        }
        // Reader.
        loop {
            let (count, complete) = pair.b().read_message(&mut buffer);
            current.extend_from_slice(&buffer[..count]);
            if complete {
                received.push(core::mem::take(&mut current));
            } else if count == 0 {
                break;
            }
        }
        received.len() == messages.len()
    });
    received
}

fn patterned(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|index| (index as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn handshake_establishes_both_sides() {
    let pair = Pair::established();
    assert_eq!(pair.a.peer_id(), Some(0xb));
    assert_eq!(pair.b.as_ref().unwrap().peer_id(), Some(0xa));
    assert_eq!(pair.a.request(), request());
}

#[test]
fn wrong_key_is_refused_and_counted() {
    let mut pair = Pair::new(small_config(), small_config(), 7, 8);
    pair.run_until(|pair| {
        pair.a.state() == State::Failed
            && pair.b.as_ref().is_some_and(|b| b.state() == State::Failed)
    });
    assert!(matches!(
        pair.a.poll_event(),
        Some(Event::Failed(FailReason::Handshake(
            HandshakeError::AuthenticationFailed { .. }
        )))
    ));
    assert_eq!(pair.a.stats().handshake_failures, 1);
}

#[test]
fn stranger_datagrams_are_refused_by_accept() {
    let config = small_config();
    let garbage = [0u8; 100];
    assert!(matches!(
        ReliableConnection::accept(config.clone(), key(7), JOB_ID, &garbage, 1, [0; 16], 0),
        Err(AcceptError::Frame(_))
    ));
    // A Hello of another job.
    let other = ConnectRequest {
        job_id: JOB_ID + 1,
        ..request()
    };
    let mut initiator =
        ReliableConnection::connect(config.clone(), key(7), other, 5, [0; 16], 0).unwrap();
    let mut header = [0u8; frame::MAX_HEADER_LEN];
    let transmit = initiator.poll_transmit(0, &mut header).unwrap();
    let mut hello = header[..transmit.header_len].to_vec();
    hello.extend_from_slice(transmit.payload);
    assert!(matches!(
        ReliableConnection::accept(config.clone(), key(7), JOB_ID, &hello, 1, [0; 16], 0),
        Err(AcceptError::Handshake(HandshakeError::WrongJob { .. }))
    ));
    assert!(matches!(
        ReliableConnection::accept(config, key(7), JOB_ID + 1, &hello, 0, [0; 16], 0),
        Err(AcceptError::Config(ConfigError::ZeroConnectionId))
    ));
}

#[test]
fn messages_of_many_sizes_arrive_identical() {
    let mut pair = Pair::established();
    let sizes = [
        0usize,
        1,
        7,
        8,
        1323,
        1324,
        1325,
        4096,
        65_536,
        200_000,
        3 << 20,
    ];
    let messages: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(index, &len)| patterned(len, index as u8))
        .collect();
    let received = transfer(&mut pair, &messages, 10_000);
    assert_eq!(received, messages);
    pair.run_until(|pair| pair.a.all_acked());
    assert!(pair.a.memory_bytes() <= small_config().memory_bound_bytes());
}
