/// The variable that decides at build time whether PMIx support is compiled in
/// (`QUIVER_PMIX=0`: never, `1`: required, unset: when pkg-config finds `pmix`). Spelt only
/// here: `build.rs` includes this file too.
pub const BUILD_VARIABLE: &str = "QUIVER_PMIX";
