//! The `quiver` command.
fn main() {}
