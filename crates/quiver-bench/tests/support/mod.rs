//! Helpers shared by the integration tests.

pub(crate) mod pattern;
pub(crate) mod testbed;
