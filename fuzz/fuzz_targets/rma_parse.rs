//! Fuzz target: the remote-key, grant, one-sided request and reply parsers never panic,
//! and what parses emits the same bytes again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quiver_wire::rma::{GrantRepr, KeyRepr};
use quiver_wire::rma_request::{ReplyRepr, RequestRepr};

fuzz_target!(|data: &[u8]| {
    if let Ok(key) = KeyRepr::parse(data) {
        assert_eq!(&key.emit()[..], data);
    }
    if let Ok(grant) = GrantRepr::parse(data) {
        assert_eq!(&grant.emit()[..], data);
    }
    if let Ok(request) = RequestRepr::parse(data) {
        assert_eq!(&request.emit()[..], data);
    }
    if let Ok(reply) = ReplyRepr::parse(data) {
        assert_eq!(&reply.emit()[..], data);
    }
});
