//! `quiver info`: placeholder until the lead's implementation lands (it replaces this file).

/// Prints information about this machine and quiver build; returns the exit status.
pub(crate) fn main() -> i32 {
    0
}
