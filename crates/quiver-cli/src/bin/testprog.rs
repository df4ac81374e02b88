//! Test helper program driven by the integration tests.
fn main() {}
