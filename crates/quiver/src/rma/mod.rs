//! One-sided communication: memory regions a rank registers ([`region::Region`]), the
//! remote keys that name them ([`key::RemoteKey`]), and what peers do with a key: put, get
//! and 64-bit atomics, with no receive call and no work of the target's CPU over shared
//! memory (the operations are `Endpoint` methods, in `endpoint/rma.rs`). The memory model
//! is docs/rma.md.

pub(crate) mod caller;
pub(crate) mod key;
pub(crate) mod region;
