//! Environment hygiene: the `QUIVER_*` variables quiver knows, and a warning that names any
//! other one with the closest known name, since a misspelt setting
//! (`QUIVER_SHM_EAGER_MAXX=64K`) would otherwise be ignored without a word.
//!
//! The known names are not listed here: they are the settings table ([`Config::describe`]),
//! the bootstrap's variables (`job/variables.rs`), the logging variable ([`LOG_ENV`]),
//! the PMIx build switch ([`quiver_pmix::BUILD_VARIABLE`]) and any a program adds with
//! [`add_known_variables`] (the `quiver` command adds its own). Names starting with
//! `QUIVER_SIM_` belong to the simulator (`quiver-sim`, a test tool no program links) and
//! are never reported.
//!
//! [`Context`](crate::Context) creation warns once per process
//! (docs/decisions/0055-unknown-variables-warning.md): through a `tracing` event at warn
//! level (target `quiver::config`) when the installed subscriber records it, else as a
//! line on stderr, since a library user with no subscriber (or one filtering quiver's
//! targets out) would otherwise never see it. `quiver info` lists them too.

use std::sync::{Mutex, Once};

use crate::config::Config;
use crate::job::variables::BOOTSTRAP_VARIABLES;
use crate::log::LOG_ENV;

/// The prefix of the variables quiver reads.
pub const VARIABLE_PREFIX: &str = "QUIVER_";

/// The prefix of the simulator's variables (never reported).
const SIMULATOR_PREFIX: &str = "QUIVER_SIM_";

/// The target of the warning's `tracing` event.
const CONFIG_LOG: &str = "quiver::config";

/// Names a program added with [`add_known_variables`].
static ADDED: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

/// A `QUIVER_*` variable set in the environment that quiver does not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownVariable {
    /// The variable's name.
    pub name: String,
    /// The known name closest to it (fewest single-character edits).
    pub closest: &'static str,
    /// How many single-character insertions, deletions or substitutions turn `name` into
    /// `closest`.
    pub distance: usize,
}

impl std::fmt::Display for UnknownVariable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is set but quiver knows no such variable; it is ignored (did you mean {}?)",
            self.name, self.closest
        )
    }
}

/// Every `QUIVER_*` variable quiver knows, sorted, each once: the settings, the
/// bootstrap's variables, `QUIVER_LOG`, the PMIx build switch, and those added with
/// [`add_known_variables`].
pub fn known_variables() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = Config::default()
        .describe()
        .into_iter()
        .map(|setting| setting.env)
        .chain(BOOTSTRAP_VARIABLES)
        .chain([LOG_ENV, quiver_pmix::BUILD_VARIABLE])
        .chain(added().iter().copied())
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// Makes `names` known (a program's own `QUIVER_*` variables, such as the `quiver`
/// command's `QUIVER_PLOT_FONT`), so that they are not reported. Call it before the first
/// context is created.
pub fn add_known_variables(names: &[&'static str]) {
    let mut added = added();
    for name in names {
        if !added.contains(name) {
            added.push(name);
        }
    }
}

/// The `QUIVER_*` variables of this process's environment that quiver does not know, in
/// name order, each with the closest known name.
pub fn unknown_variables() -> Vec<UnknownVariable> {
    let names = std::env::vars_os().filter_map(|(name, _)| name.into_string().ok());
    unknown_among(names, &known_variables())
}

/// Of `names`, those that start with [`VARIABLE_PREFIX`] and are not in `known`, sorted,
/// each with the closest name of `known` (which must not be empty).
pub fn unknown_among(
    names: impl IntoIterator<Item = String>,
    known: &[&'static str],
) -> Vec<UnknownVariable> {
    let mut unknown: Vec<UnknownVariable> = names
        .into_iter()
        .filter(|name| name.starts_with(VARIABLE_PREFIX) && !name.starts_with(SIMULATOR_PREFIX))
        .filter(|name| !known.contains(&name.as_str()))
        .filter_map(|name| {
            let (distance, closest) = known
                .iter()
                .map(|candidate| (edit_distance(&name, candidate), *candidate))
                .min()?;
            Some(UnknownVariable {
                name,
                closest,
                distance,
            })
        })
        .collect();
    unknown.sort_by(|a, b| a.name.cmp(&b.name));
    unknown.dedup_by(|a, b| a.name == b.name);
    unknown
}

/// Reports each unknown variable once per process (the first context created does it):
/// a `tracing` warning when a subscriber would record it, else a line on stderr.
pub(crate) fn warn_unknown_once() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for unknown in unknown_variables() {
            report(&unknown);
        }
    });
}

/// One warning: through `tracing` when the installed subscriber records warnings of
/// [`CONFIG_LOG`], else on stderr, so that it is neither lost (no subscriber, or one whose
/// filter leaves the target out) nor printed twice.
fn report(unknown: &UnknownVariable) {
    if tracing::enabled!(target: CONFIG_LOG, tracing::Level::WARN) {
        tracing::warn!(
            target: CONFIG_LOG,
            variable = %unknown.name,
            closest = unknown.closest,
            "{unknown}"
        );
    } else {
        eprintln!("quiver: warning: {unknown}");
    }
}

/// The Levenshtein distance between `a` and `b`, by bytes (variable names are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    // One row of the table at a time: row[j] = distance(a[..i], b[..j]).
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &left) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &right) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(left != right);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

fn added() -> std::sync::MutexGuard<'static, Vec<&'static str>> {
    ADDED.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("abc", ""), 3);
        assert_eq!(edit_distance("", "ab"), 2);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("QUIVER_SPIN_US", "QUIVER_SPIN_US"), 0);
        assert_eq!(edit_distance("QUIVER_SPIN_UZ", "QUIVER_SPIN_US"), 1);
        assert_eq!(
            edit_distance("QUIVER_SHM_EAGER_MAXX", "QUIVER_SHM_EAGER_MAX"),
            1
        );
        assert_eq!(edit_distance("QUIVER_TRANSPORT", "QUIVER_TRANSPORTS"), 1);
    }

    #[test]
    fn the_known_names_come_from_the_settings_the_bootstrap_and_logging() {
        let known = known_variables();
        for name in [
            "QUIVER_SHM_EAGER_MAX",
            "QUIVER_PROTO_INFO",
            "QUIVER_RANK",
            "QUIVER_JOB_KEY_FILE",
            "QUIVER_RENDEZVOUS",
            "QUIVER_LAUNCHER",
            "QUIVER_LOG",
            "QUIVER_PMIX",
            "QUIVER_PROFILE",
        ] {
            assert!(known.contains(&name), "{name} is not known: {known:?}");
        }
        assert!(
            known.windows(2).all(|pair| pair[0] < pair[1]),
            "sorted, once"
        );
        assert!(known.iter().all(|name| name.starts_with(VARIABLE_PREFIX)));
    }

    #[test]
    fn misspelt_names_are_reported_with_the_closest_known_one() {
        let known = known_variables();
        let names = [
            "QUIVER_SHM_EAGER_MAXX",
            "QUIVER_TRANSPORT",
            "QUIVER_SPIN_US",
            "QUIVER_SIM_SEEDS",
            "HOME",
            "QUIVER_TRANSPORT",
        ]
        .map(String::from);
        let unknown = unknown_among(names, &known);
        assert_eq!(unknown.len(), 2, "{unknown:?}");
        assert_eq!(unknown[0].name, "QUIVER_SHM_EAGER_MAXX");
        assert_eq!(unknown[0].closest, "QUIVER_SHM_EAGER_MAX");
        assert_eq!(unknown[0].distance, 1);
        assert_eq!(unknown[1].closest, "QUIVER_TRANSPORTS");
        let text = unknown[0].to_string();
        assert!(
            text.contains("QUIVER_SHM_EAGER_MAXX")
                && text.contains("did you mean QUIVER_SHM_EAGER_MAX?"),
            "{text}"
        );
    }

    #[test]
    fn added_names_are_known() {
        assert!(!known_variables().contains(&"QUIVER_TEST_ADDED_NAME"));
        add_known_variables(&["QUIVER_TEST_ADDED_NAME", "QUIVER_TEST_ADDED_NAME"]);
        let known = known_variables();
        assert_eq!(
            known
                .iter()
                .filter(|name| **name == "QUIVER_TEST_ADDED_NAME")
                .count(),
            1
        );
        let unknown = unknown_among(["QUIVER_TEST_ADDED_NAME".to_string()], &known);
        assert!(unknown.is_empty());
    }

    /// Every `QUIVER_*` name the library's sources spell as a string of its own is known: a
    /// new variable must be added to the settings table or the bootstrap's list, or it would
    /// be reported as unknown. (This file's tests spell unknown ones on purpose.)
    #[test]
    fn every_variable_the_library_names_is_known() {
        let known = known_variables();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut missing = Vec::new();
        let mut stack = vec![root];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("read the sources") {
                let path = entry.expect("an entry").path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                if path.file_name().is_some_and(|name| name == "variables.rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).expect("a source file");
                for (index, _) in text.match_indices("\"QUIVER_") {
                    let rest = &text[index + 1..];
                    let end = rest
                        .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                        .unwrap_or(rest.len());
                    if rest[end..].starts_with('"') && !known.contains(&&rest[..end]) {
                        missing.push(format!("{}: {}", path.display(), &rest[..end]));
                    }
                }
            }
        }
        assert!(missing.is_empty(), "read but not known: {missing:?}");
    }
}
