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
