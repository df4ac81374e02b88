use super::*;

fn code(r: Result<impl Sized, Failure>) -> quiver_status {
    match r {
        Ok(_) => quiver_status::QUIVER_OK,
        Err(Failure::Boundary(code, _)) => code,
        Err(Failure::Api(e)) => panic!("unexpected API error {e}"),
    }
}

/// Both kinds of table: slots held call by call, and slots leased to their thread.
fn both<T, const N: usize>() -> [Table<T, N>; 2] {
    [Table::new("thing"), Table::leased("thing")]
}

#[test]
fn handles_are_generation_checked() {
    for table in both::<u32, 2>() {
        generation_checked(&table);
    }
}

fn generation_checked(table: &Table<u32, 2>) {
    let a = table.insert(7).unwrap();
    let b = table.insert(8).unwrap();
    assert_ne!(a, 0);
    assert_ne!(a, b);
    assert_eq!(*table.take(a).unwrap().value(), 7);
    // Full: a third value has no slot.
    assert_eq!(
        code(table.insert(9)),
        quiver_status::QUIVER_ERR_INVALID_ARGUMENT
    );
    assert_eq!(table.remove(a).unwrap(), 7);
    // The freed handle is dead, also once its slot holds a new value.
    assert_eq!(code(table.take(a)), quiver_status::QUIVER_ERR_BAD_HANDLE);
    let c = table.insert(10).unwrap();
    assert_ne!(c, a, "a reused slot gets a new generation");
    assert_eq!(code(table.take(a)), quiver_status::QUIVER_ERR_BAD_HANDLE);
    assert_eq!(code(table.remove(a)), quiver_status::QUIVER_ERR_BAD_HANDLE);
    assert_eq!(*table.take(c).unwrap().value(), 10);
    // Zero, out-of-range and made-up handles.
    for bad in [0, 3, u64::MAX, (c & !0xffff_ffff) | 5, c ^ (1 << 40)] {
        assert_eq!(
            code(table.take(bad)),
            quiver_status::QUIVER_ERR_BAD_HANDLE,
            "{bad:#x}"
        );
    }
}

#[test]
fn a_taken_slot_is_busy_until_released() {
    for table in both::<u32, 1>() {
        busy_until_released(&table);
    }
}

fn busy_until_released(table: &Table<u32, 1>) {
    let h = table.insert(1).unwrap();
    let mut held = table.take(h).unwrap();
    assert_eq!(code(table.take(h)), quiver_status::QUIVER_ERR_BUSY);
    assert_eq!(code(table.remove(h)), quiver_status::QUIVER_ERR_BUSY);
    *held.value() = 2;
    drop(held);
    assert_eq!(*table.take(h).unwrap().value(), 2);
    // A panic while the slot is held releases it (the guard's drop runs on unwind).
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _held = table.take(h).unwrap();
        panic!("inside a call");
    }));
    assert!(result.is_err());
    assert_eq!(*table.take(h).unwrap().value(), 2);
}

#[test]
fn shared_values_wait_out_a_brief_hold() {
    let table: Table<std::sync::Arc<u32>, 1> = Table::new("context");
    let h = table.insert(std::sync::Arc::new(5)).unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..10_000 {
                    assert_eq!(*table.share(h).unwrap(), 5);
                }
            });
        }
    });
    assert_eq!(code(table.share(0)), quiver_status::QUIVER_ERR_BAD_HANDLE);
}

/// Which thread holds the slot of `handle`: 0 (nobody), `HELD`, or a thread's token.
fn holder_of<T, const N: usize>(table: &Table<T, N>, handle: u64) -> u32 {
    let slot = &table.slots[(handle as u32 - 1) as usize];
    holder(slot.state.load(Ordering::Relaxed))
}

#[test]
fn the_calling_thread_keeps_the_lease_between_calls() {
    let table: Table<u32, 1> = Table::leased("thing");
    let h = table.insert(1).unwrap();
    drop(table.take(h).unwrap());
    if threads::barrier_registered() {
        assert_eq!(holder_of(&table, h), threads::current_token());
        assert_ne!(threads::current_token(), 0);
    } else {
        assert_eq!(holder_of(&table, h), 0, "no barrier: no lease");
    }
    *table.take(h).unwrap().value() += 1;
    assert_eq!(*table.take(h).unwrap().value(), 2);
}

#[test]
fn a_thread_finds_its_own_record_and_no_other() {
    let Some(mine) = threads::token() else {
        return; // no barrier in this process: no tokens, no leases
    };
    assert!(threads::own_record(mine).is_some());
    assert_ne!(threads::thread_id(), 0);
    let (theirs, id) = std::thread::scope(|s| {
        s.spawn(|| {
            let theirs = threads::token().unwrap();
            assert!(threads::own_record(theirs).is_some());
            assert!(
                threads::own_record(mine).is_none(),
                "another thread's record"
            );
            (theirs, threads::thread_id())
        })
        .join()
        .unwrap()
    });
    assert_ne!(id, threads::thread_id());
    assert!(
        threads::own_record(theirs).is_none(),
        "a record given back, or another's"
    );
    assert!(threads::own_record(0).is_none());
}

#[test]
fn threads_taking_turns_hand_the_slot_over_until_it_is_shared() {
    let table: Table<u64, 1> = Table::leased("thing");
    let h = table.insert(0).unwrap();
    let turns = 200;
    let (to_b, from_a) = std::sync::mpsc::channel::<()>();
    let (to_a, from_b) = std::sync::mpsc::channel::<()>();
    let table = &table;
    std::thread::scope(|s| {
        s.spawn(move || {
            for _ in 0..turns {
                *table.take(h).unwrap().value() += 1;
                to_b.send(()).unwrap();
                from_b.recv().unwrap();
            }
        });
        s.spawn(move || {
            for _ in 0..turns {
                from_a.recv().unwrap();
                *table.take(h).unwrap().value() += 1;
                to_a.send(()).unwrap();
            }
        });
    });
    assert_eq!(*table.take(h).unwrap().value(), 2 * turns);
    if threads::barrier_registered() {
        let slot = &table.slots[0];
        assert_eq!(slot.revocations.load(Ordering::Relaxed), SHARED_AFTER);
        drop(table.take(h).unwrap());
        assert_eq!(holder_of(table, h), 0, "a shared slot is not leased");
    }
}

/// A value that says whether a call is inside it.
#[derive(Default)]
struct Guarded {
    inside: bool,
    calls: u64,
}

/// `threads` threads calling on one slot as fast as they can, `calls` calls each: every
/// call succeeds or is BUSY, and no two are inside at once. Returns the calls that got in.
fn hammer(table: &Table<Guarded, 1>, h: u64, threads: usize, calls: usize) -> u64 {
    let entered = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..calls {
                    match table.take(h) {
                        Ok(mut taken) => {
                            let v = taken.value();
                            assert!(!v.inside, "two threads inside one slot");
                            v.inside = true;
                            v.calls += 1;
                            std::hint::spin_loop();
                            v.inside = false;
                            entered.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => assert_eq!(code(Err::<(), _>(e)), quiver_status::QUIVER_ERR_BUSY),
                    }
                }
            });
        }
    });
    entered.into_inner()
}

#[test]
fn threads_racing_on_one_slot_never_overlap() {
    let table: Table<Guarded, 1> = Table::leased("thing");
    // Fresh slots (leased, then revoked until shared) and one long race on a shared slot.
    for _ in 0..if cfg!(miri) { 3 } else { 300 } {
        let h = table.insert(Guarded::default()).unwrap();
        let entered = hammer(&table, h, 3, if cfg!(miri) { 20 } else { 200 });
        assert_eq!(table.remove(h).unwrap().calls, entered);
    }
    let h = table.insert(Guarded::default()).unwrap();
    let entered = hammer(&table, h, 2, if cfg!(miri) { 100 } else { 200_000 });
    assert!(entered > 0);
    assert_eq!(table.remove(h).unwrap().calls, entered);
}

#[test]
fn a_call_from_inside_another_endpoints_call_gets_in_but_not_into_its_own() {
    let table: Table<u32, 2> = Table::leased("thing");
    let a = table.insert(1).unwrap();
    let b = table.insert(2).unwrap();
    drop(table.take(b).unwrap());
    {
        // Leased a (outermost), then b from inside it, held for the call.
        let mut in_a = table.take(a).unwrap();
        let mut in_b = table.take(b).unwrap();
        assert_eq!(code(table.take(a)), quiver_status::QUIVER_ERR_BUSY);
        assert_eq!(code(table.take(b)), quiver_status::QUIVER_ERR_BUSY);
        assert_eq!(code(table.remove(a)), quiver_status::QUIVER_ERR_BUSY);
        *in_b.value() += 10;
        *in_a.value() += 10;
    }
    let leased_b = holder_of(&table, b);
    {
        // The other way round.
        let _in_b = table.take(b).unwrap();
        let mut in_a = table.take(a).unwrap();
        assert_eq!(code(table.take(a)), quiver_status::QUIVER_ERR_BUSY);
        assert_eq!(code(table.take(b)), quiver_status::QUIVER_ERR_BUSY);
        *in_a.value() += 100;
    }
    assert_eq!(
        holder_of(&table, b),
        leased_b,
        "a nested call leaves the lease as it was"
    );
    assert_eq!(*table.take(a).unwrap().value(), 111);
    assert_eq!(*table.take(b).unwrap().value(), 12);
}

#[test]
fn another_thread_frees_a_slot_its_owner_is_not_inside() {
    let table: Table<u32, 1> = Table::leased("thing");
    let h = table.insert(5).unwrap();
    let inside = std::sync::Barrier::new(2);
    let tried = std::sync::Barrier::new(2);
    // Each side asserts after both barriers, so a failure does not leave the other waiting.
    let (owner, freer) = std::thread::scope(|s| {
        let owner = s.spawn(|| {
            let held = table.take(h).unwrap();
            inside.wait();
            tried.wait();
            drop(held);
            inside.wait();
            tried.wait();
            code(table.take(h))
        });
        let freer = s.spawn(|| {
            inside.wait();
            let while_inside = code(table.remove(h));
            tried.wait();
            inside.wait();
            let after = table.remove(h).ok();
            let stale = code(table.take(h));
            tried.wait();
            (while_inside, after, stale)
        });
        (owner.join().unwrap(), freer.join().unwrap())
    });
    let bad = quiver_status::QUIVER_ERR_BAD_HANDLE;
    assert_eq!(freer, (quiver_status::QUIVER_ERR_BUSY, Some(5), bad));
    assert_eq!(owner, bad);
    assert_eq!(code(table.take(h)), bad);
    assert_eq!(code(table.remove(h)), bad);
}
