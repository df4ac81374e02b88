//! Fuzz target: the remote-key and grant parsers never panic, and what parses emits the
//! same bytes again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quiver_wire::rma::{GrantRepr, KeyRepr};

fuzz_target!(|data: &[u8]| {
    if let Ok(key) = KeyRepr::parse(data) {
        assert_eq!(&key.emit()[..], data);
    }
    if let Ok(grant) = GrantRepr::parse(data) {
        assert_eq!(&grant.emit()[..], data);
    }
});
