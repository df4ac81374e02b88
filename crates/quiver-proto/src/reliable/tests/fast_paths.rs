//! The fast paths (`fast_path.rs`) change nothing but the instructions they take: the same
//! exchange, run once with them and once with the general path alone, gives the same
//! connections (their whole state, by their `Debug` output, after every step) and the same
//! datagrams (every header, in order), whatever the network does.

use std::cell::RefCell;
use std::collections::hash_map::DefaultHasher;
use std::fmt::Write as _;
use std::hash::Hasher;
use std::rc::Rc;

use super::*;
use crate::reliable::fast_path;

/// Feeds what is written into a hash: the whole state of two connections, tens of KiB of
/// `Debug` text, at every step, without keeping it.
struct HashWriter(DefaultHasher);

impl core::fmt::Write for HashWriter {
    fn write_str(&mut self, text: &str) -> core::fmt::Result {
        self.0.write(text.as_bytes());
        Ok(())
    }
}

fn hash_of(value: &dyn core::fmt::Debug) -> u64 {
    let mut writer = HashWriter(DefaultHasher::new());
    write!(writer, "{value:?}").unwrap();
    writer.0.finish()
}

/// Puts the general-only switch back when a test ends, even by a panic.
struct GeneralOnly;

impl GeneralOnly {
    fn set(general_only: bool) -> GeneralOnly {
        fast_path::force_general(general_only);
        GeneralOnly
    }
}

impl Drop for GeneralOnly {
    fn drop(&mut self) {
        fast_path::force_general(false);
    }
}

/// What one run of an exchange left: a hash per step of both connections' state (and the
/// clock), a hash per datagram of its header, what each side read, and how many times a
/// fast path was taken.
#[derive(Debug, PartialEq, Eq)]
struct Trace {
    states: Vec<u64>,
    headers: Vec<u64>,
    read_by_a: Vec<Vec<u8>>,
    read_by_b: Vec<Vec<u8>>,
    fast_taken: u64,
}

/// How a request-response exchange runs.
#[derive(Debug, Clone)]
struct Exchange {
    loss_percent: u32,
    fates: Vec<Fate>,
    sizes: Vec<usize>,
    window: usize,
    compact: bool,
    /// b reads with `handle_datagram_into` (a `DirectReader`).
    direct: bool,
    /// a lends its requests (`lend_message_as`) instead of writing them.
    lend: bool,
    /// Both sides close once every answer is in.
    close: bool,
    read_chunk: usize,
}

/// a's request `index` (and b's answer, its bytes reversed).
fn request(exchange: &Exchange, index: usize) -> Vec<u8> {
    patterned(exchange.sizes[index], index as u8)
}

fn answer(exchange: &Exchange, index: usize) -> Vec<u8> {
    let mut answer = request(exchange, index);
    answer.reverse();
    answer
}

/// Reads every whole message `connection` has into `received`.
fn read_all(
    connection: &mut ReliableConnection,
    buffer: &mut [u8],
    current: &mut Vec<u8>,
    received: &mut Vec<Vec<u8>>,
) {
    loop {
        let (count, complete) = connection.read_message(buffer);
        current.extend_from_slice(&buffer[..count]);
        if complete {
            received.push(core::mem::take(current));
        } else if count == 0 {
            return;
        }
    }
}

/// a lends its requests, one token per request (its index in `Pair::posted`), as far as
/// the send buffer and the count of lends take them.
#[derive(Default)]
struct Lender {
    next_message: usize,
    lent: usize,
    started: bool,
}

impl Lender {
    fn lend(&mut self, connection: &mut ReliableConnection, messages: &[Vec<u8>]) {
        while let Some(message) = messages.get(self.next_message) {
            if !self.started {
                if connection.start_message(message.len() as u64).is_err() {
                    return;
                }
                self.started = true;
                self.lent = 0;
            }
            let token = self.next_message as u64;
            self.lent += connection.lend_message_as(token, message.len() - self.lent);
            if self.lent < message.len() {
                return;
            }
            self.started = false;
            self.next_message += 1;
        }
    }
}

/// Runs `exchange` (with the fast paths, or with the general path alone) and traces it.
fn run_exchange(exchange: &Exchange, general_only: bool) -> Trace {
    let _switch = GeneralOnly::set(general_only);
    let taken_before = fast_path::taken();
    let config = ReliableConfig {
        // Small enough that a whole state's `Debug` text stays cheap to hash every step.
        max_in_flight_datagrams: 32,
        ..lossy_config(exchange.window, exchange.window, exchange.compact)
    };
    let mut pair = lossy_pair(&config, exchange.loss_percent, exchange.fates.clone());
    let headers = Rc::new(RefCell::new(Vec::new()));
    let mut filter = core::mem::replace(&mut pair.filter, Box::new(|_, _, _| Fate::Deliver));
    let seen = Rc::clone(&headers);
    pair.filter = Box::new(move |index, from_a, header| {
        seen.borrow_mut().push(hash_of(&(from_a, header)));
        filter(index, from_a, header)
    });
    let count = exchange.sizes.len();
    let requests: Vec<Vec<u8>> = (0..count).map(|index| request(exchange, index)).collect();
    let answers: Vec<Vec<u8>> = (0..count).map(|index| answer(exchange, index)).collect();
    if exchange.lend {
        pair.posted = requests.clone();
    }
    if exchange.direct {
        pair.direct = Some(DirectReader::new(exchange.read_chunk));
    }
    let mut states = Vec::new();
    let (mut writer_a, mut lender_a, mut writer_b) = (
        MessageWriter::default(),
        Lender::default(),
        MessageWriter::default(),
    );
    let (mut read_by_a, mut current_a) = (Vec::new(), Vec::new());
    let (mut read_by_b, mut current_b) = (Vec::new(), Vec::new());
    let mut buffer = vec![0u8; exchange.read_chunk.max(1)];
    let mut closed = false;
    pair.run_until(|pair| {
        states.push(hash_of(&(pair.now, &pair.a, &pair.b)));
        // a asks the next question once the last one's answer is in.
        let asked = &requests[..(read_by_a.len() + 1).min(count)];
        if exchange.lend {
            lender_a.lend(&mut pair.a, asked);
            while pair.a.poll_released().is_some() {}
        } else {
            writer_a.write(&mut pair.a, asked);
        }
        read_all(&mut pair.a, &mut buffer, &mut current_a, &mut read_by_a);
        let Some(b) = pair.b.as_mut() else {
            return false;
        };
        match pair.direct.as_mut() {
            Some(reader) => {
                reader.pull(b);
                read_by_b.clone_from(&reader.received);
            }
            None => read_all(b, &mut buffer, &mut current_b, &mut read_by_b),
        }
        writer_b.write(b, &answers[..read_by_b.len()]);
        if read_by_a.len() < count {
            return false;
        }
        if !exchange.close {
            return true;
        }
        if !closed {
            closed = true;
            let now = pair.now;
            pair.a.close(now);
            pair.b().close(now);
        }
        pair.a.state() == State::Closed && pair.b().state() == State::Closed
    });
    states.push(hash_of(&(pair.now, &pair.a, &pair.b)));
    assert_eq!(read_by_a, answers);
    assert_eq!(read_by_b, requests);
    let headers = headers.borrow().clone();
    Trace {
        states,
        headers,
        read_by_a,
        read_by_b,
        fast_taken: fast_path::taken() - taken_before,
    }
}

/// Runs `exchange` both ways and checks that the traces match. Returns how many times the
/// fast paths were taken.
fn check_exchange(exchange: &Exchange) -> u64 {
    let fast = run_exchange(exchange, false);
    let general = run_exchange(exchange, true);
    assert_eq!(general.fast_taken, 0, "the switch did not hold");
    let first_state = fast
        .states
        .iter()
        .zip(&general.states)
        .position(|(fast, general)| fast != general);
    let first_header = fast
        .headers
        .iter()
        .zip(&general.headers)
        .position(|(fast, general)| fast != general);
    assert_eq!(
        (
            first_state,
            first_header,
            fast.states.len(),
            fast.headers.len()
        ),
        (None, None, general.states.len(), general.headers.len()),
        "the fast paths changed the exchange {exchange:?}"
    );
    fast.fast_taken
}

fn clean_exchange(sizes: Vec<usize>) -> Exchange {
    Exchange {
        loss_percent: 0,
        fates: vec![Fate::Deliver],
        sizes,
        window: 16 << 10,
        compact: false,
        direct: false,
        lend: false,
        close: true,
        read_chunk: 4096,
    }
}

#[test]
fn small_requests_and_answers_take_the_fast_paths_and_change_nothing() {
    let taken = check_exchange(&clean_exchange(vec![8; 40]));
    // Each of the 80 messages: its frame cut, taken in order and acknowledged on the short
    // routes.
    assert_eq!(taken, 3 * 80, "fast paths taken {taken} times");
}

#[test]
fn the_fast_paths_change_nothing_for_lent_direct_compact_or_lost_frames() {
    let sizes = vec![8, 0, 1500, 3000, 8, 20_000, 64, 8, 8, 9000, 1];
    let mut exchange = clean_exchange(sizes);
    check_exchange(&exchange);
    exchange.lend = true;
    check_exchange(&exchange);
    exchange.direct = true;
    exchange.read_chunk = 700;
    check_exchange(&exchange);
    exchange.compact = true;
    check_exchange(&exchange);
    exchange.loss_percent = 10;
    exchange.fates = vec![Fate::Deliver, Fate::Delay, Fate::Duplicate, Fate::Corrupt];
    check_exchange(&exchange);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the network does to a request-response exchange (loss, duplication,
    /// corruption, reordering), the fast paths leave every state and datagram as the
    /// general path does.
    #[test]
    fn the_fast_paths_change_nothing_on_any_network(
        loss_percent in 0u32..15,
        fates in proptest::collection::vec(fate_strategy(10), 32),
        sizes in proptest::collection::vec(prop_oneof![0usize..64, 0usize..6000], 1..12),
        window in 1024usize..24_000,
        compact in any::<bool>(),
        direct in any::<bool>(),
        lend in any::<bool>(),
        close in any::<bool>(),
        read_chunk in 1usize..3000,
    ) {
        let exchange = Exchange {
            loss_percent, fates, sizes, window, compact, direct, lend, close, read_chunk,
        };
        check_exchange(&exchange);
    }
}

/// Two paths (`TwoPaths`): a's small messages striped over both, one at a time, each
/// acknowledged on its own path.
fn two_path_trace(general_only: bool) -> (Vec<u64>, u64) {
    let _switch = GeneralOnly::set(general_only);
    let taken_before = fast_path::taken();
    let mut pair = TwoPaths::established_with(ReliableConfig {
        // Small buffers: the state's `Debug` text is hashed after every message.
        send_buffer_bytes: 32 << 10,
        recv_window_bytes: 32 << 10,
        ..TwoPaths::config()
    });
    let mut states = Vec::new();
    let mut now = 10_000_000;
    for index in 0..60 {
        pair.write(&patterned(
            if index % 7 == 3 { 5000 } else { 8 },
            index as u8,
        ));
        now = pair.run_lossless(now);
        states.push(hash_of(&(now, &pair.a, &pair.b, &pair.read)));
    }
    (states, fast_path::taken() - taken_before)
}

#[test]
fn the_fast_paths_change_nothing_on_two_paths() {
    let (fast, taken) = two_path_trace(false);
    let (general, _) = two_path_trace(true);
    assert_eq!(fast, general);
    assert!(taken > 0);
}
