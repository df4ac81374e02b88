//! Lost frames re-cut for a lowered datagram size (decision 0081, "Lost frames are
//! re-cut"; `send/resend.rs`): a path whose MTU falls with frames in flight, and that drops
//! every datagram larger than the new size from then on (an AF_XDP link: nothing
//! fragments), loses those frames once; they are resent in datagrams of the new size and
//! every message arrives intact.

use super::*;

impl Pair {
    /// Applies the lowerings of `lower_at` that are due (a has sent that many datagrams):
    /// a's datagram size falls, and the link drops every datagram from a that is larger,
    /// those in the network included.
    pub(super) fn lower_due(&mut self) {
        while let Some(&(after, size)) = self.lower_at.front() {
            if self.sizes_from_a.len() < after {
                return;
            }
            self.lower_at.pop_front();
            self.lower_now(size);
        }
    }

    /// Lowers a's datagram size to `size` now (see [`Self::lower_due`]).
    fn lower_now(&mut self, size: usize) {
        assert_eq!(self.a.lower_max_datagram_bytes(size), size);
        self.max_len_to_b = size;
        self.to_b.retain(|datagram| datagram.len() <= size);
        if self
            .held
            .as_ref()
            .is_some_and(|(from_a, datagram)| *from_a && datagram.len() > size)
        {
            self.held = None;
        }
        // The batch being routed was cut before: only later datagrams must fit.
        self.lowered.push((self.produced_by_a, size));
    }

    /// Whether every datagram a produced after each lowering fits the size it lowered to.
    fn fits_after_lowerings(&self) -> bool {
        self.lowered
            .iter()
            .all(|&(at, size)| self.sizes_from_a[at..].iter().all(|&len| len <= size))
    }
}

/// Runs until b read every message of `messages` (a writing them with `writer` as it can), b reading
/// with `read_message` in chunks of `read_chunk`; `step` runs first at every turn.
fn send_all(
    pair: &mut Pair,
    writer: &mut MessageWriter,
    messages: &[Vec<u8>],
    read_chunk: usize,
    mut step: impl FnMut(&mut Pair),
) -> Vec<Vec<u8>> {
    let mut received = Vec::new();
    let mut current = Vec::new();
    let mut buffer = vec![0u8; read_chunk.max(1)];
    pair.run_until(|pair| {
        step(pair);
        writer.write(&mut pair.a, messages);
        while pair.b.is_some() {
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

/// A window of 1472-byte frames is in flight when the size falls to 1000 and the link
/// starts dropping anything larger: every one of them is lost. They are resent shortened
/// (their packet numbers) with the rest of their bytes in new frames, every datagram a
/// sends from then on fits 1000 bytes, and the messages arrive intact. (Before, the lost
/// frames went again at 1472 bytes, were dropped again each time, and the connection ended
/// unreachable.)
#[test]
fn frames_lost_to_a_fallen_mtu_are_resent_in_smaller_datagrams() {
    for compact in [false, true] {
        let config = ReliableConfig {
            compact_data_frames: compact,
            ..small_config()
        };
        let mut pair = Pair::handshaken(config);
        let messages = patterned_messages(&[300_000, 5, 0, 40_000, 3_000]);
        // In the middle of the first window (some 45 frames of 1472 bytes): the rest of
        // that window is cut, sent and dropped, with those before still in flight.
        pair.lower_at
            .push_back((pair.sizes_from_a.len() + 20, 1000));
        let received = send_all(
            &mut pair,
            &mut MessageWriter::default(),
            &messages,
            4096,
            |_| {},
        );
        assert_eq!(received, messages, "compact {compact}");
        assert_eq!(pair.lowered.len(), 1);
        assert!(
            pair.fits_after_lowerings(),
            "compact {compact}: {:?}",
            pair.sizes_from_a
        );
        let stats = pair.a.stats();
        assert!(stats.frames_recut >= 20, "compact {compact}: {stats:?}");
        assert_eq!(
            pair.b().stats().out_of_window_dropped,
            0,
            "compact {compact}"
        );
        pair.run_until(|pair| pair.a.all_acked());
        // Every stream byte was acknowledged exactly up to the end of what was written.
        let written: u64 = messages
            .iter()
            .map(|message| 8 + message.len() as u64)
            .sum();
        assert_eq!(pair.a.acked_bytes(), written, "compact {compact}");
    }
}

/// The originals of the frames a re-cut were not lost after all, only late: b gets the
/// window without its first frames, its acks make a declare those lost and resend them
/// (shortened, with the rest of their bytes in new frames), and only then do the
/// originals arrive, before the resent frames. The shortened copies are duplicates by
/// packet number; the frames cut from their rests carry bytes b holds already and are
/// taken for their packet numbers alone: nothing is refused, and the connection carries on
/// and closes cleanly.
#[test]
fn recut_frames_whose_originals_arrived_are_taken_for_their_numbers() {
    const LATE: usize = 3;
    let mut pair = Pair::established();
    let messages = patterned_messages(&[200_000]);
    let mut writer = MessageWriter::default();
    writer.write(&mut pair.a, &messages);
    pair.flush();
    let originals: Vec<Vec<u8>> = pair.to_b.drain(..).collect();
    assert!(originals.len() >= 10 && originals.iter().all(|datagram| datagram.len() > 1000));
    assert_eq!(pair.a.lower_max_datagram_bytes(1000), 1000);
    let now = pair.now;
    for datagram in &originals[LATE..] {
        pair.b().handle_datagram(now, 0, datagram);
    }
    pair.flush();
    let acks: Vec<Vec<u8>> = pair.to_a.drain(..).collect();
    for ack in &acks {
        pair.a.handle_datagram(now, 0, ack);
    }
    pair.flush();
    let resent: Vec<Vec<u8>> = pair.to_b.drain(..).collect();
    assert_eq!(pair.a.stats().frames_recut, LATE as u64);
    assert!(resent.iter().all(|datagram| datagram.len() <= 1000));
    for datagram in originals[..LATE].iter().chain(&resent) {
        pair.b().handle_datagram(now, 0, datagram);
    }
    let stats = pair.b().stats().clone();
    assert_eq!(stats.out_of_window_dropped, 0, "{stats:?}");
    assert_eq!(
        stats.duplicates_dropped, LATE as u64,
        "the shortened copies"
    );
    let received = send_all(&mut pair, &mut writer, &messages, 4096, |_| {});
    assert_eq!(received, messages);
    assert_eq!(pair.b().stats().out_of_window_dropped, 0);
    pair.a.close(pair.now);
    {
        let now = pair.now;
        pair.b().close(now);
    }
    pair.run_until(|pair| {
        pair.a.state() == State::Closed && pair.b.as_ref().unwrap().state() == State::Closed
    });
}

/// The last frames of a transfer are lost with the Close sent after them: the frames cut
/// from their rests go out after the Close (numbered above it). b takes them (their bytes
/// are before the Close's offset), and the peer counts as closed only once every byte
/// before the Close arrived.
#[test]
fn frames_recut_after_the_close_are_taken_before_the_peer_closes() {
    let mut pair = Pair::established();
    let messages = patterned_messages(&[20_000]);
    let mut writer = MessageWriter::default();
    writer.write(&mut pair.a, &messages);
    pair.a.close(pair.now);
    pair.flush();
    let sent = pair.to_b.len();
    assert!(sent >= 3);
    pair.lower_now(1000);
    // The full data frames were over 1000 B and are gone.
    assert!(pair.to_b.len() < sent);
    let received = send_all(&mut pair, &mut writer, &messages, 4096, |_| {});
    assert_eq!(received, messages);
    {
        let now = pair.now;
        pair.b().close(now);
    }
    pair.run_until(|pair| {
        pair.a.state() == State::Closed && pair.b.as_ref().unwrap().state() == State::Closed
    });
    assert_eq!(pair.b().stats().out_of_window_dropped, 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// A lossy, duplicating, corrupting, reordering network whose MTU falls once at a
    /// random moment to a random size, after which it drops everything from a that is
    /// larger: every message arrives once, in order, byte-identical, a sends nothing larger
    /// after the lowering, and memory stays within the bound.
    #[test]
    fn a_fallen_mtu_on_a_lossy_network_delivers_exactly_once(
        loss_percent in 0u32..20,
        fates in proptest::collection::vec(fate_strategy(10), 64),
        sizes in proptest::collection::vec(0usize..30_000, 1..10),
        read_chunk in 1usize..5000,
        window in 2_000usize..60_000,
        compact in any::<bool>(),
        lower_after in 0usize..80,
        lowered_size in ReliableConfig::MIN_DATAGRAM_BYTES..1400,
        twice in any::<bool>(),
    ) {
        let config = lossy_config(window, window, compact);
        let mut pair = lossy_pair(&config, loss_percent, fates);
        let messages = patterned_messages(&sizes);
        let first = lowered_size.min(1400);
        pair.lower_at.push_back((lower_after, first));
        if twice {
            let second = ReliableConfig::MIN_DATAGRAM_BYTES.max(first - first / 4);
            pair.lower_at.push_back((lower_after + 30, second));
        }
        let received = send_all(
            &mut pair,
            &mut MessageWriter::default(),
            &messages,
            read_chunk,
            |_| {},
        );
        prop_assert_eq!(&received, &messages);
        prop_assert!(pair.fits_after_lowerings());
        prop_assert!(pair.a.memory_bytes() <= config.memory_bound_bytes());
        prop_assert!(pair.b().memory_bytes() <= config.memory_bound_bytes());
        prop_assert_eq!(pair.b().stats().credit_violations, 0);
    }
}
