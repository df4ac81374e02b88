//! Virtual time and the event queue.
//!
//! Layer: test infrastructure, the bottom of `quiver-sim`. It owns virtual time and the
//! queue; it must not read the OS clock.
//!
//! Events are ordered by (time, insertion sequence number): two events at the same virtual
//! instant always pop in the order they were scheduled, so a run is a pure function of the
//! seed. The queue owns the clock: popping an event advances `now`, and time never moves
//! backwards (asserted: it would be a simulator bug).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Virtual nanoseconds since the start of the simulation (same unit as the protocol core).
pub type Nanos = u64;

/// One nanosecond-based duration helpers, for readable scenario code.
pub const MICROSECOND_NS: Nanos = 1_000;
/// One millisecond in nanoseconds.
pub const MILLISECOND_NS: Nanos = 1_000_000;
/// One second in nanoseconds.
pub const SECOND_NS: Nanos = 1_000_000_000;

struct Scheduled<E> {
    at_ns: Nanos,
    sequence: u64,
    event: E,
}

impl<E> PartialEq for Scheduled<E> {
    fn eq(&self, other: &Self) -> bool {
        self.at_ns == other.at_ns && self.sequence == other.sequence
    }
}

impl<E> Eq for Scheduled<E> {}

impl<E> PartialOrd for Scheduled<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Scheduled<E> {
    // BinaryHeap is a max-heap: reverse so the earliest (then first scheduled) pops first.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .at_ns
            .cmp(&self.at_ns)
            .then_with(|| other.sequence.cmp(&self.sequence))
    }
}

/// A deterministic priority queue of events plus the virtual clock.
pub struct EventQueue<E> {
    heap: BinaryHeap<Scheduled<E>>,
    next_sequence: u64,
    now_ns: Nanos,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    /// An empty queue at time 0.
    pub fn new() -> Self {
        Self {
            heap: BinaryHeap::new(),
            next_sequence: 0,
            now_ns: 0,
        }
    }

    /// Current virtual time.
    pub fn now(&self) -> Nanos {
        self.now_ns
    }

    /// Number of pending events.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Schedules `event` at `at_ns`.
    ///
    /// # Panics
    /// If `at_ns` is in the past: scheduling backwards in time is a simulator bug.
    pub fn schedule(&mut self, at_ns: Nanos, event: E) {
        assert!(
            at_ns >= self.now_ns,
            "event scheduled in the past: at {at_ns} ns, now {} ns",
            self.now_ns
        );
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        self.heap.push(Scheduled {
            at_ns,
            sequence,
            event,
        });
    }

    /// Time of the earliest pending event.
    pub fn peek_time(&self) -> Option<Nanos> {
        self.heap.peek().map(|scheduled| scheduled.at_ns)
    }

    /// Removes the earliest event and advances the clock to its time.
    pub fn pop(&mut self) -> Option<(Nanos, E)> {
        let scheduled = self.heap.pop()?;
        assert!(
            scheduled.at_ns >= self.now_ns,
            "time went backwards: event at {} ns popped at {} ns",
            scheduled.at_ns,
            self.now_ns
        );
        self.now_ns = scheduled.at_ns;
        Some((scheduled.at_ns, scheduled.event))
    }

    /// Moves the clock forward to `at_ns` without an event (used when a connection timer,
    /// which is not in the queue, is the next thing to happen).
    ///
    /// # Panics
    /// If `at_ns` is earlier than now, or later than the earliest pending event.
    pub fn advance_to(&mut self, at_ns: Nanos) {
        assert!(
            at_ns >= self.now_ns,
            "time went backwards: advance to {at_ns} ns at {} ns",
            self.now_ns
        );
        if let Some(next) = self.peek_time() {
            assert!(
                at_ns <= next,
                "advance to {at_ns} ns skips an event at {next} ns"
            );
        }
        self.now_ns = at_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_time_order_then_insertion_order() {
        let mut queue = EventQueue::new();
        queue.schedule(30, "c");
        queue.schedule(10, "a1");
        queue.schedule(20, "b");
        queue.schedule(10, "a2");
        queue.schedule(10, "a3");
        let order: Vec<_> = std::iter::from_fn(|| queue.pop()).collect();
        assert_eq!(
            order,
            vec![(10, "a1"), (10, "a2"), (10, "a3"), (20, "b"), (30, "c")]
        );
        assert_eq!(queue.now(), 30);
        assert!(queue.is_empty());
    }

    #[test]
    #[should_panic(expected = "in the past")]
    fn scheduling_in_the_past_panics() {
        let mut queue = EventQueue::new();
        queue.schedule(10, ());
        queue.pop();
        queue.schedule(5, ());
    }

    #[test]
    #[should_panic(expected = "skips an event")]
    fn advance_cannot_skip_events() {
        let mut queue = EventQueue::new();
        queue.schedule(10, ());
        queue.advance_to(11);
    }

    #[test]
    fn advance_moves_clock() {
        let mut queue: EventQueue<()> = EventQueue::new();
        queue.advance_to(7);
        assert_eq!(queue.now(), 7);
        queue.schedule(7, ());
        assert_eq!(queue.pop(), Some((7, ())));
    }
}
