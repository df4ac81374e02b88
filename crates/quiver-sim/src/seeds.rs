//! Running a scenario over many seeds, and replaying one.
//!
//! Layer: test infrastructure, beside the simulator: it runs scenarios, it does not build
//! them.
//!
//! Environment:
//! - `QUIVER_SIM_SEED=<u64>`: run only that seed (decimal, or hex with `0x`), in every test
//!   the cargo filter selects. This is how a reported failure is replayed.
//! - `QUIVER_SIM_SEEDS=<N>`: run seeds `0..N` in the sweep tests instead of their default
//!   count (long runs; fixed-seed tests are not affected).
//! - `QUIVER_SIM_SEED_START=<S>`: start the sweeps at seed `S` instead of 0 (`S..S+N`), to
//!   split a long sweep into runs that do not repeat each other's seeds.
//!
//! A panic inside a seed (an invariant, an assertion of the scenario, or a panic of the
//! protocol core) is caught and re-raised with the scenario, the seed and the command that
//! replays exactly that run, once every seed has run: a long sweep names all its failing
//! seeds at once (`N of M seeds failed: [...]`), not only the first.

use std::panic::{catch_unwind, AssertUnwindSafe};

/// Environment variable that selects one seed.
pub const SEED_ENV: &str = "QUIVER_SIM_SEED";
/// Environment variable that sets the number of seeds of sweep tests.
pub const SEED_COUNT_ENV: &str = "QUIVER_SIM_SEEDS";
/// Environment variable that sets the first seed of sweep tests.
pub const SEED_START_ENV: &str = "QUIVER_SIM_SEED_START";

/// The seed named by `QUIVER_SIM_SEED`, if set.
///
/// # Panics
/// If the variable is set but is not a number (a typo must not silently run nothing).
pub fn replay_seed() -> Option<u64> {
    let text = std::env::var(SEED_ENV).ok()?;
    Some(parse_seed(&text).unwrap_or_else(|| panic!("{SEED_ENV}={text:?} is not a u64")))
}

fn parse_seed(text: &str) -> Option<u64> {
    let text = text.trim();
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// The seeds a sweep test runs: the replay seed alone, else `count` seeds from
/// `QUIVER_SIM_SEED_START` (default 0), `count` being `QUIVER_SIM_SEEDS` or else
/// `default_count`.
pub fn sweep_seeds(default_count: u64) -> Vec<u64> {
    if let Some(seed) = replay_seed() {
        return vec![seed];
    }
    let number = |name: &str| std::env::var(name).ok().and_then(|text| parse_seed(&text));
    let count = number(SEED_COUNT_ENV).unwrap_or(default_count);
    let start = number(SEED_START_ENV).unwrap_or(0);
    (start..start.saturating_add(count)).collect()
}

/// The seeds a fixed-seed test runs: the replay seed alone, else `seeds`.
pub fn fixed_seeds(seeds: &[u64]) -> Vec<u64> {
    match replay_seed() {
        Some(seed) => vec![seed],
        None => seeds.to_vec(),
    }
}

/// The command that replays `seed` of test `test_name`.
pub fn replay_command(test_name: &str, seed: u64) -> String {
    format!("{SEED_ENV}={seed} cargo test -p quiver-sim --release {test_name}")
}

/// Runs `scenario` once per seed; returns how many seeds ran.
///
/// Every seed runs, even after one failed, so that a long sweep reports all its failing
/// seeds at once (each failure's message is printed to stderr as it happens).
///
/// # Panics
/// When a seed fails: the message names the test, the first failing seed, its original
/// panic message and replay command, and the list of every failing seed.
pub fn run_seeds(test_name: &str, seeds: &[u64], mut scenario: impl FnMut(u64)) -> usize {
    let mut failures: Vec<(u64, String)> = Vec::new();
    for &seed in seeds {
        let outcome = catch_unwind(AssertUnwindSafe(|| scenario(seed)));
        if let Err(payload) = outcome {
            let message = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("(non-string panic payload)")
                .to_owned();
            eprintln!("quiver-sim scenario `{test_name}` failed with seed {seed}");
            failures.push((seed, message));
        }
    }
    if let Some((seed, message)) = failures.first() {
        let failing: Vec<u64> = failures.iter().map(|&(seed, _)| seed).collect();
        panic!(
            "quiver-sim scenario `{test_name}` failed with seed {seed}:\n{message}\n\
             replay exactly this run with:\n  {}\n\
             {} of {} seeds failed: {failing:?}",
            replay_command(test_name, *seed),
            failures.len(),
            seeds.len()
        );
    }
    seeds.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_decimal_and_hex() {
        assert_eq!(parse_seed("42"), Some(42));
        assert_eq!(parse_seed(" 0x2a "), Some(42));
        assert_eq!(parse_seed("x"), None);
    }

    #[test]
    fn failure_message_names_seed_and_replay() {
        let caught = catch_unwind(|| {
            run_seeds("demo_test", &[1, 2, 3], |seed| {
                assert!(seed != 2, "boom at {seed}");
            });
        })
        .expect_err("seed 2 fails");
        let message = caught.downcast_ref::<String>().expect("formatted");
        assert!(message.contains("seed 2"), "{message}");
        assert!(message.contains("boom at 2"), "{message}");
        assert!(
            message.contains("QUIVER_SIM_SEED=2 cargo test -p quiver-sim --release demo_test"),
            "{message}"
        );
        assert!(message.contains("1 of 3 seeds failed: [2]"), "{message}");
    }

    #[test]
    fn every_failing_seed_is_listed() {
        let mut ran = Vec::new();
        let caught = catch_unwind(AssertUnwindSafe(|| {
            run_seeds("demo_test", &[1, 2, 3, 4], |seed| {
                ran.push(seed);
                assert!(seed % 2 == 1, "boom at {seed}");
            });
        }))
        .expect_err("seeds 2 and 4 fail");
        assert_eq!(ran, [1, 2, 3, 4], "the sweep goes on after a failure");
        let message = caught.downcast_ref::<String>().expect("formatted");
        assert!(message.contains("failed with seed 2"), "{message}");
        assert!(message.contains("2 of 4 seeds failed: [2, 4]"), "{message}");
    }
}
