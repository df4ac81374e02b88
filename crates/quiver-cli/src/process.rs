//! What every program of quiver's own does first: install the stderr `tracing` subscriber
//! that `QUIVER_LOG` asks for (the library never installs one by itself), and make the
//! programs' own `QUIVER_*` variables known, so that quiver's check for misspelt
//! variables does not report them.

use crate::bench::plot::FONT_ENV;

/// The `QUIVER_*` variables read by the programs on top of the library (not by the library).
pub const PROGRAM_VARIABLES: [&str; 1] = [FONT_ENV];

/// Sets up logging from `QUIVER_LOG` and registers [`PROGRAM_VARIABLES`]; call it first
/// thing in `main`.
pub fn init_process() {
    quiver::variables::add_known_variables(&PROGRAM_VARIABLES);
    quiver::init_logging_from_env();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `QUIVER_*` name the programs' sources (this crate's and the lab's) spell as a
    /// string of its own is known once [`init_process`] has run: a new program variable
    /// must go into [`PROGRAM_VARIABLES`], or users would be warned that it is unknown.
    #[test]
    fn every_variable_the_programs_name_is_known() {
        // Spelt by a test on purpose, as a setting that does not exist.
        const DELIBERATELY_UNKNOWN: [&str; 1] = ["QUIVER_X"];
        quiver::variables::add_known_variables(&PROGRAM_VARIABLES);
        let known = quiver::variables::known_variables();
        let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the crates folder");
        let mut missing = Vec::new();
        let mut stack = vec![
            crates.join("quiver-cli/src"),
            crates.join("quiver-bench/src"),
        ];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("read the sources") {
                let path = entry.expect("an entry").path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                let text = std::fs::read_to_string(&path).expect("a source file");
                for (index, _) in text.match_indices("\"QUIVER_") {
                    let rest = &text[index + 1..];
                    let end = rest
                        .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                        .unwrap_or(rest.len());
                    let name = &rest[..end];
                    // A bare "QUIVER_" is the prefix, not a name.
                    if rest[end..].starts_with('"')
                        && name.len() > "QUIVER_".len()
                        && !known.contains(&name)
                        && !DELIBERATELY_UNKNOWN.contains(&name)
                    {
                        missing.push(format!("{}: {name}", path.display()));
                    }
                }
            }
        }
        assert!(missing.is_empty(), "read but not known: {missing:?}");
    }
}
