//! Helpers shared by this crate's udp link integration tests (each test file that needs
//! them declares `mod support;`, and uses part of them).
#![allow(dead_code)]

pub(crate) mod attacker;

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Mutex;

use quiver::{Addr, Config, Connection, Context, Endpoint};

/// `len` bytes that differ from message to message (`seed`) and along the message.
pub(crate) fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(97)) as u8)
        .collect()
}

/// Ports this test binary already handed out: a port is probed free and then bound later,
/// so two tests running at once could otherwise be given the same one.
static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A udp port free on 127.0.0.1 up to 127.0.0.`hosts` at once, never handed out before in
/// this test binary.
pub(crate) fn free_port(hosts: u8) -> u16 {
    loop {
        let first = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = first.local_addr().unwrap().port();
        let others_free =
            (2..=hosts).all(|host| UdpSocket::bind((Ipv4Addr::new(127, 0, 0, host), port)).is_ok());
        if !others_free {
            continue;
        }
        let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner());
        if handed_out.get_or_insert_with(HashSet::new).insert(port) {
            return port;
        }
    }
}

/// Rank `rank` of a two-rank job (`job_id`, a key of `key` bytes) whose ranks' links are
/// `links` (each rank's table: its own links first, then how it sees the other's).
pub(crate) fn two_rank_context(
    rank: u32,
    job_id: u64,
    key: u8,
    links: Vec<Vec<SocketAddr>>,
    config: &Config,
) -> Context {
    Context::builder()
        .rank(rank)
        .size(2)
        .job_id(job_id)
        .job_key([key; 32])
        .links(links)
        .config(config.clone())
        .build()
        .expect("context")
}

/// Connects `endpoint` to endpoint 1 of rank 1, sends one `pattern` message per size of
/// `sizes` (seeded by its index), then waits for the receiver's "done".
pub(crate) fn send_patterned_until_done(endpoint: &mut Endpoint, sizes: &[usize]) -> Connection {
    let connection = endpoint.connect(Addr::new(1, 1)).expect("connect");
    for (index, &size) in sizes.iter().enumerate() {
        endpoint
            .send(connection, &pattern(size, index as u32))
            .expect("send");
    }
    let mut done = [0u8; 8];
    let (len, _) = endpoint.recv(&mut done).expect("done");
    assert_eq!(&done[..len], b"done");
    connection
}
