//! The tcp transport: one stream per endpoint pair carries both directions, each message a
//! [`quiver_wire::stream`] frame; the job-key handshake runs on the stream first.

pub(crate) mod connect;
pub(crate) mod crossing;
pub(crate) mod handshake;
pub(crate) mod inbound;
pub(crate) mod listener;
pub(crate) mod outbound;
pub(crate) mod protocols;
pub(crate) mod reader;
pub(crate) mod rma;
pub(crate) mod stats;
pub(crate) mod writer;
