//! The matcher's rules, case by case, and a property test against a reference model
//! written from MPI's definition with no bound (the matcher's bound spills, and spills
//! that fail, change nothing of it).

use proptest::prelude::*;

use super::{Arrival, Envelope, Held, MatchSpec, Matcher};
use crate::addr::Addr;

fn env(rank: u32, tag: u64, len: u64) -> Envelope {
    Envelope {
        source: Addr::new(rank, 0),
        tag,
        len,
    }
}

fn spec(source: Option<u32>, tag: u64, mask: u64) -> MatchSpec {
    MatchSpec {
        source: source.map(|r| Addr::new(r, 0)),
        tag,
        mask,
    }
}

#[test]
fn masks_and_wildcards() {
    let a = Addr::new(1, 0);
    assert!(MatchSpec::ANY.matches(a, u64::MAX));
    assert!(spec(Some(1), 7, u64::MAX).matches(a, 7));
    assert!(!spec(Some(1), 7, u64::MAX).matches(a, 6));
    assert!(!spec(Some(2), 7, u64::MAX).matches(a, 7));
    // Only the masked bits count: the high byte names a library, the rest is free.
    let library = spec(None, 0xAB << 56, 0xFF << 56);
    assert!(library.matches(a, (0xAB << 56) | 12345));
    assert!(!library.matches(a, (0xAC << 56) | 12345));
}

/// `posted_for` names the receive `arrive` would give the message to, and leaves it
/// posted; `cancel` then withdraws exactly that one (a message moved straight into it).
#[test]
fn posted_for_names_the_receive_an_arrival_would_take() {
    let mut m: Matcher<u32, (), ()> = Matcher::new(1 << 20);
    assert!(m.post(spec(Some(2), 5, u64::MAX), 10).is_none());
    assert!(m.post(spec(None, 5, u64::MAX), 11).is_none());
    assert!(m.post(MatchSpec::ANY, 12).is_none());
    assert_eq!(m.posted_for(&env(1, 5, 8)), Some(&11));
    assert_eq!(m.posted_for(&env(2, 5, 8)), Some(&10));
    assert_eq!(m.posted_for(&env(1, 6, 8)), Some(&12));
    assert_eq!(m.posted_len(), 3);
    assert!(m.cancel(&11));
    // The next message of that envelope goes where `arrive` sends it.
    assert_eq!(m.posted_for(&env(1, 5, 8)), Some(&12));
    assert_eq!(m.arrive(env(1, 5, 8), || (), Ok), Arrival::Posted(12));
    assert_eq!(m.posted_for(&env(1, 5, 8)), None);
}

#[test]
fn arrivals_go_to_the_earliest_matching_posted_receive() {
    let mut m: Matcher<u32, (), ()> = Matcher::new(1 << 20);
    assert!(m.post(spec(None, 5, u64::MAX), 1).is_none());
    assert!(m.post(spec(None, 0, 0), 2).is_none());
    assert!(m.post(spec(None, 5, u64::MAX), 3).is_none());
    // Tag 5: receive 1 was posted first, though 2 matches too.
    assert_eq!(m.arrive(env(0, 5, 8), || (), Ok), Arrival::Posted(1));
    assert_eq!(m.arrive(env(0, 5, 8), || (), Ok), Arrival::Posted(2));
    assert_eq!(m.arrive(env(0, 5, 8), || (), Ok), Arrival::Posted(3));
    assert!(m.is_idle());
}

#[test]
fn a_receive_takes_the_earliest_matching_unexpected_message() {
    let mut m: Matcher<u32, u32, u32> = Matcher::new(1 << 20);
    for (i, tag) in [1u64, 2, 1, 2].into_iter().enumerate() {
        assert_eq!(m.arrive(env(0, tag, 4), || i as u32, Ok), Arrival::Queued);
    }
    assert_eq!(m.probe(spec(None, 2, u64::MAX)), Some(&env(0, 2, 4)));
    let (_, _, held) = m.post(spec(None, 2, u64::MAX), 9).unwrap();
    assert_eq!(
        held,
        Held::Here(1),
        "the first tag-2 message, not the second"
    );
    assert_eq!(m.take(MatchSpec::ANY).unwrap().1, Held::Here(0));
    assert_eq!(m.take(MatchSpec::ANY).unwrap().1, Held::Here(2));
    assert_eq!(m.take(MatchSpec::ANY).unwrap().1, Held::Here(3));
    assert_eq!(m.held_bytes(), 0);
    assert!(m.is_idle());
}

#[test]
fn beyond_the_bound_payloads_spill_and_nothing_is_lost() {
    let mut m: Matcher<u32, u32, u32> = Matcher::new(100);
    let mut spills = 0;
    for i in 0..50u32 {
        let arrival = m.arrive(
            env(0, u64::from(i), 30),
            || i,
            |p| {
                spills += 1;
                Ok(p)
            },
        );
        let expected = if i < 3 {
            Arrival::Queued
        } else {
            Arrival::Spilled
        };
        assert_eq!(arrival, expected, "message {i}");
    }
    assert_eq!(spills, 47, "the payloads beyond the bound are spilled");
    assert_eq!(m.held_bytes(), 90);
    assert_eq!(m.spilled_now(), (47, 47 * 30));
    // A receive for a tag behind more messages than the bound holds still completes.
    let (envelope, held) = m.take(spec(Some(0), 49, u64::MAX)).unwrap();
    assert_eq!((envelope.tag, held), (49, Held::Spilled(49)));
    assert_eq!(m.unexpected_len(), 49);
    assert_eq!(m.spilled_now(), (46, 46 * 30));
    // Taking one held in memory makes room: the next arrival is held, not spilled.
    assert_eq!(m.take(MatchSpec::ANY).unwrap().1, Held::Here(0));
    assert_eq!(m.arrive(env(0, 7, 30), || 50, Ok), Arrival::Queued);
    let stats = m.stats();
    assert_eq!(
        (
            stats.queued,
            stats.spilled,
            stats.spilled_bytes,
            stats.peak_held_bytes
        ),
        (51, 47, 47 * 30, 90)
    );
    // The rest in arrival order, wherever each waited.
    let order: Vec<u32> = std::iter::from_fn(|| m.take(MatchSpec::ANY))
        .map(|(_, held)| id_of(held))
        .collect();
    let want: Vec<u32> = (1..49).chain([50]).collect();
    assert_eq!(order, want);
    assert_eq!((m.held_bytes(), m.spilled_now()), (0, (0, 0)));
}

/// A spill that fails keeps the payload in memory beyond the bound, counted: nothing is
/// dropped, and it is taken in its turn.
#[test]
fn a_failed_spill_keeps_the_payload_in_memory() {
    let mut m: Matcher<u32, u32, u32> = Matcher::new(50);
    assert_eq!(m.arrive(env(0, 1, 40), || 0, Ok), Arrival::Queued);
    assert_eq!(m.arrive(env(0, 1, 40), || 1, Err), Arrival::Queued);
    assert_eq!(m.arrive(env(0, 1, 40), || 2, Ok), Arrival::Spilled);
    assert_eq!(m.held_bytes(), 80, "beyond the bound after the failure");
    assert_eq!(m.stats().spill_failures, 1);
    assert_eq!(m.public_stats().spill_failures, 1);
    assert_eq!(m.public_stats().peak_unexpected_bytes, 80);
    assert_eq!(m.take(MatchSpec::ANY).unwrap().1, Held::Here(0));
    assert_eq!(m.take(MatchSpec::ANY).unwrap().1, Held::Here(1));
    assert_eq!(m.take(MatchSpec::ANY).unwrap().1, Held::Spilled(2));
}

#[test]
fn cancel_withdraws_a_posted_receive() {
    let mut m: Matcher<u32, (), ()> = Matcher::new(0);
    assert!(m.post(MatchSpec::ANY, 1).is_none());
    assert!(m.cancel(&1));
    assert!(!m.cancel(&1));
    assert_eq!(m.arrive(env(0, 0, 0), || (), Ok), Arrival::Queued);
}

/// One step of a random run.
#[derive(Debug, Clone)]
enum Op {
    Arrive {
        source: u32,
        tag: u64,
        len: u64,
        spill_fails: bool,
    },
    Post(MatchSpec),
    Probe(MatchSpec),
    Take(MatchSpec),
    CancelOldest,
}

fn spec_strategy() -> impl Strategy<Value = MatchSpec> {
    (
        prop::option::of(0u32..3),
        0u64..4,
        prop_oneof![Just(0u64), Just(1), Just(2), Just(3), Just(u64::MAX)],
    )
        .prop_map(|(source, tag, mask)| spec(source, tag, mask))
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u32..3, 0u64..4, 0u64..60, prop::bool::weighted(0.1))
            .prop_map(|(source, tag, len, spill_fails)| Op::Arrive { source, tag, len, spill_fails }),
        2 => spec_strategy().prop_map(Op::Post),
        1 => spec_strategy().prop_map(Op::Probe),
        1 => spec_strategy().prop_map(Op::Take),
        1 => Just(Op::CancelOldest),
    ]
}

/// MPI's rules as written, no bound: lists searched from the front.
#[derive(Default)]
struct Model {
    posted: Vec<(MatchSpec, u32)>,
    unexpected: Vec<(Envelope, u32)>,
}

impl Model {
    fn arrive(&mut self, e: Envelope, id: u32) -> Option<u32> {
        match self
            .posted
            .iter()
            .position(|(s, _)| s.matches(e.source, e.tag))
        {
            Some(i) => Some(self.posted.remove(i).1),
            None => {
                self.unexpected.push((e, id));
                None
            }
        }
    }

    fn take(&mut self, s: MatchSpec) -> Option<u32> {
        let i = self
            .unexpected
            .iter()
            .position(|(e, _)| s.matches(e.source, e.tag))?;
        Some(self.unexpected.remove(i).1)
    }
}

/// The message a held or spilled payload is (its payload is its id).
fn id_of(held: Held<u32, u32>) -> u32 {
    match held {
        Held::Here(id) | Held::Spilled(id) => id,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever the bound (small ones spill often) and whichever spills fail, the matcher
    /// pairs receives and messages exactly as the model does (posting order,
    /// non-overtaking, probes, cancellation); payloads held in memory stay within the
    /// bound but for failed spills, and add up; a payload is spilled exactly when it would
    /// not fit in the room left, and every message is delivered at most once.
    #[test]
    fn matcher_agrees_with_the_reference_model(
        ops in prop::collection::vec(op_strategy(), 0..200),
        bound in 0u64..200,
    ) {
        let mut m: Matcher<u32, u32, u32> = Matcher::new(bound);
        let mut model = Model::default();
        // Payload of message `id` is `id`; a receive's id is its posting index.
        let mut next_message = 0u32;
        let mut next_receive = 1_000_000u32;
        let mut delivered = std::collections::HashSet::new();
        // Messages held in memory beyond the bound (their spill failed).
        let mut beyond = std::collections::HashSet::new();
        let mut posted_order: Vec<u32> = Vec::new();
        for op in ops {
            match op {
                Op::Arrive { source, tag, len, spill_fails } => {
                    let id = next_message;
                    next_message += 1;
                    let e = env(source, tag, len);
                    let mut fetched = false;
                    let held_before = m.held_bytes();
                    let got = m.arrive(
                        e,
                        || { fetched = true; id },
                        |p| if spill_fails { Err(p) } else { Ok(p) },
                    );
                    let want = model.arrive(e, id);
                    match got {
                        Arrival::Posted(r) => {
                            prop_assert_eq!(Some(r), want);
                            prop_assert!(!fetched);
                            posted_order.retain(|&p| p != r);
                            prop_assert!(delivered.insert(id));
                        }
                        Arrival::Queued => {
                            prop_assert_eq!(want, None);
                            prop_assert!(fetched);
                            if len > bound.saturating_sub(held_before) {
                                prop_assert!(spill_fails, "queued beyond the bound");
                                beyond.insert(id);
                            }
                        }
                        Arrival::Spilled => {
                            prop_assert_eq!(want, None);
                            prop_assert!(fetched && !spill_fails);
                            prop_assert!(len > bound.saturating_sub(held_before), "spilled with room left");
                        }
                    }
                }
                Op::Post(s) => {
                    let r = next_receive;
                    next_receive += 1;
                    let want = model.take(s);
                    match m.post(s, r) {
                        Some((back, _, held)) => {
                            prop_assert_eq!(back, r);
                            let id = id_of(held);
                            prop_assert_eq!(Some(id), want);
                            beyond.remove(&id);
                            prop_assert!(delivered.insert(id));
                        }
                        None => {
                            prop_assert_eq!(want, None);
                            model.posted.push((s, r));
                            posted_order.push(r);
                        }
                    }
                }
                Op::Probe(s) => {
                    let want = model.unexpected.iter().find(|(e, _)| s.matches(e.source, e.tag)).map(|(e, _)| *e);
                    prop_assert_eq!(m.probe(s).copied(), want);
                }
                Op::Take(s) => {
                    let want = model.take(s);
                    let got = m.take(s).map(|(_, held)| id_of(held));
                    if let Some(id) = got {
                        beyond.remove(&id);
                        prop_assert!(delivered.insert(id));
                    }
                    prop_assert_eq!(got, want);
                }
                Op::CancelOldest => {
                    if let Some(&r) = posted_order.first() {
                        prop_assert!(m.cancel(&r));
                        model.posted.retain(|(_, p)| *p != r);
                        posted_order.remove(0);
                    }
                }
            }
            // The invariants after every step.
            let beyond_bytes: u64 = m.unexpected.iter()
                .filter(|(_, h)| matches!(h, Held::Here(id) if beyond.contains(id)))
                .map(|(e, _)| e.len).sum();
            prop_assert!(m.held_bytes() - beyond_bytes <= bound);
            prop_assert_eq!(m.unexpected_len(), model.unexpected.len());
            prop_assert_eq!(m.posted_len(), model.posted.len());
            let held: u64 = m.unexpected.iter().filter(|(_, h)| matches!(h, Held::Here(_))).map(|(e, _)| e.len).sum();
            prop_assert_eq!(held, m.held_bytes());
            let spilled: Vec<u64> = m.unexpected.iter().filter(|(_, h)| matches!(h, Held::Spilled(_))).map(|(e, _)| e.len).collect();
            prop_assert_eq!(m.spilled_now(), (spilled.len() as u64, spilled.iter().sum::<u64>()));
            for (s, _) in &m.posted {
                prop_assert!(!m.unexpected.iter().any(|(e, _)| s.matches(e.source, e.tag)));
            }
        }
    }
}
