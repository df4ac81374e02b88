//! The one-sided requests an initiator sends over a network transport (tcp, udp, xdp) and
//! the target's replies: the software path, where the target's progress engine applies
//! each operation to its region (docs/rma.md, docs/protocol.md "one-sided requests").
//!
//! A request is 88 bytes, followed by the data of a put (`len` bytes):
//!
//! ```text
//!  0    2       3    4         8          16        24            32            40        88
//!  +----+-------+----+---------+----------+---------+-------------+-------------+---------+
//!  | QR |version| op | seq u32 | offset   | len u64 | operand u64 | operand u64 | key 48  |
//!  +----+-------+----+---------+----------+---------+-------------+-------------+---------+
//! ```
//!
//! The first operand is the value of `fetch_add` and `swap` and the expected word of
//! `compare_swap`, the second the new word of `compare_swap`; unused operands are 0. A
//! flush carries no key (48 zero bytes) and no length. `len` is 8 for an atomic.
//!
//! A reply is 32 bytes, followed by the data of a get (`len` bytes, only when the status
//! is [`ReplyStatus::Done`]):
//!
//! ```text
//!  0    2       3        4         8           16        24            32
//!  +----+-------+--------+---------+-----------+---------+-------------+
//!  | QA |version| status | seq u32 | value u64 | len u64 | reserved 0  |
//!  +----+-------+--------+---------+-----------+---------+-------------+
//! ```
//!
//! `seq` echoes the request's; `value` is the word before an atomic. Integers are
//! big-endian. Parsing never panics on any input; a reserved field that is not zero, an
//! unknown code or a length a field cannot have is a typed error.
//!
//! Layer: quiver-wire, the bottom. Layouts only: no I/O, no allocation.

use crate::rma::{RmaWireError, KEY_LEN};

/// First bytes of a request.
pub const REQUEST_MAGIC: [u8; 2] = *b"QR";
/// First bytes of a reply.
pub const REPLY_MAGIC: [u8; 2] = *b"QA";
/// Version of the request and reply layouts.
pub const VERSION: u8 = 1;
/// Length of a request's header (a put's data follows it).
pub const REQUEST_LEN: usize = 88;
/// Length of a reply's header (a get's data follows it).
pub const REPLY_LEN: usize = 32;

/// The operation a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestOp {
    /// Write the `len` bytes that follow at `offset`.
    Put,
    /// Send back `len` bytes from `offset`.
    Get,
    /// Add the first operand to the word at `offset`.
    FetchAdd,
    /// Replace the word at `offset` by the second operand if it holds the first.
    CompareSwap,
    /// Replace the word at `offset` by the first operand.
    Swap,
    /// Reply once every earlier request of this stream is applied.
    Flush,
}

impl RequestOp {
    fn code(self) -> u8 {
        match self {
            RequestOp::Put => 1,
            RequestOp::Get => 2,
            RequestOp::FetchAdd => 3,
            RequestOp::CompareSwap => 4,
            RequestOp::Swap => 5,
            RequestOp::Flush => 6,
        }
    }

    fn from_code(code: u8) -> Option<RequestOp> {
        Some(match code {
            1 => RequestOp::Put,
            2 => RequestOp::Get,
            3 => RequestOp::FetchAdd,
            4 => RequestOp::CompareSwap,
            5 => RequestOp::Swap,
            6 => RequestOp::Flush,
            _ => return None,
        })
    }

    /// Whether the operation writes the region.
    pub fn writes(self) -> bool {
        !matches!(self, RequestOp::Get | RequestOp::Flush)
    }

    /// Whether the operation is a 64-bit atomic.
    pub fn is_atomic(self) -> bool {
        matches!(
            self,
            RequestOp::FetchAdd | RequestOp::CompareSwap | RequestOp::Swap
        )
    }

    /// Whether data of `len` bytes follows the request.
    pub fn carries_data(self) -> bool {
        self == RequestOp::Put
    }
}

/// Byte offsets of a request's fields.
mod request_field {
    use core::ops::Range;

    pub(super) const MAGIC: Range<usize> = 0..2;
    pub(super) const VERSION: usize = 2;
    pub(super) const OP: usize = 3;
    pub(super) const SEQ: Range<usize> = 4..8;
    pub(super) const OFFSET: Range<usize> = 8..16;
    pub(super) const LEN: Range<usize> = 16..24;
    pub(super) const A: Range<usize> = 24..32;
    pub(super) const B: Range<usize> = 32..40;
    pub(super) const KEY: Range<usize> = 40..88;
}

/// Byte offsets of a reply's fields.
mod reply_field {
    use core::ops::Range;

    pub(super) const MAGIC: Range<usize> = 0..2;
    pub(super) const VERSION: usize = 2;
    pub(super) const STATUS: usize = 3;
    pub(super) const SEQ: Range<usize> = 4..8;
    pub(super) const VALUE: Range<usize> = 8..16;
    pub(super) const LEN: Range<usize> = 16..24;
    pub(super) const RESERVED: Range<usize> = 24..32;
}

fn u64_at(bytes: &[u8], range: core::ops::Range<usize>) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[range]);
    u64::from_be_bytes(b)
}

fn u32_at(bytes: &[u8], range: core::ops::Range<usize>) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[range]);
    u32::from_be_bytes(b)
}

/// A parsed request. The key is kept as bytes: the target parses and checks it
/// (`quiver_wire::rma::KeyRepr`) against its live regions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestRepr {
    /// The operation.
    pub op: RequestOp,
    /// The initiator's number for it, echoed in the reply.
    pub seq: u32,
    /// The byte offset into the region.
    pub offset: u64,
    /// The bytes the operation touches (8 for an atomic, 0 for a flush).
    pub len: u64,
    /// The first operand.
    pub a: u64,
    /// The second operand.
    pub b: u64,
    /// The remote key's bytes (zeros for a flush).
    pub key: [u8; KEY_LEN],
}

impl RequestRepr {
    /// Parses a request header (any input: never panics).
    ///
    /// # Errors
    /// [`RmaWireError`] naming what is wrong: length, magic, version, an unknown operation,
    /// an atomic whose `len` is not 8, or a flush with a length or a key.
    pub fn parse(bytes: &[u8]) -> Result<RequestRepr, RmaWireError> {
        if bytes.len() != REQUEST_LEN {
            return Err(RmaWireError::Length {
                what: "request",
                actual: bytes.len(),
                expected: REQUEST_LEN,
            });
        }
        if bytes[request_field::MAGIC] != REQUEST_MAGIC {
            return Err(RmaWireError::Magic("request"));
        }
        if bytes[request_field::VERSION] != VERSION {
            return Err(RmaWireError::Version {
                what: "request",
                version: bytes[request_field::VERSION],
            });
        }
        let code = bytes[request_field::OP];
        let op = RequestOp::from_code(code).ok_or(RmaWireError::Code {
            what: "operation",
            code,
        })?;
        let mut key = [0u8; KEY_LEN];
        key.copy_from_slice(&bytes[request_field::KEY]);
        let request = RequestRepr {
            op,
            seq: u32_at(bytes, request_field::SEQ),
            offset: u64_at(bytes, request_field::OFFSET),
            len: u64_at(bytes, request_field::LEN),
            a: u64_at(bytes, request_field::A),
            b: u64_at(bytes, request_field::B),
            key,
        };
        let consistent = if op.is_atomic() {
            request.len == 8
        } else if op == RequestOp::Flush {
            request.len == 0 && request.offset == 0 && key == [0; KEY_LEN]
        } else {
            true
        };
        let unused_operands = match op {
            RequestOp::CompareSwap => true,
            RequestOp::FetchAdd | RequestOp::Swap => request.b == 0,
            _ => request.a == 0 && request.b == 0,
        };
        if !consistent || !unused_operands {
            return Err(RmaWireError::Code {
                what: "request field",
                code,
            });
        }
        Ok(request)
    }

    /// The request's header bytes.
    pub fn emit(&self) -> [u8; REQUEST_LEN] {
        let mut out = [0u8; REQUEST_LEN];
        out[request_field::MAGIC].copy_from_slice(&REQUEST_MAGIC);
        out[request_field::VERSION] = VERSION;
        out[request_field::OP] = self.op.code();
        out[request_field::SEQ].copy_from_slice(&self.seq.to_be_bytes());
        out[request_field::OFFSET].copy_from_slice(&self.offset.to_be_bytes());
        out[request_field::LEN].copy_from_slice(&self.len.to_be_bytes());
        out[request_field::A].copy_from_slice(&self.a.to_be_bytes());
        out[request_field::B].copy_from_slice(&self.b.to_be_bytes());
        out[request_field::KEY].copy_from_slice(&self.key);
        out
    }
}

/// How the target answered a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplyStatus {
    /// Applied (a get's data follows).
    Done,
    /// No live region of the target matches the key (never was, forged, or of another
    /// job or rank).
    UnknownKey,
    /// The key names a region its owner dropped.
    Revoked,
    /// The key or the region does not allow the operation (a write with a read-only key,
    /// a read-write key for a read-only region).
    WrongRights,
    /// The bytes lie outside the region.
    OutOfBounds,
    /// An atomic on a word that is not 8-byte aligned.
    Misaligned,
}

impl ReplyStatus {
    fn code(self) -> u8 {
        match self {
            ReplyStatus::Done => 0,
            ReplyStatus::UnknownKey => 1,
            ReplyStatus::Revoked => 2,
            ReplyStatus::WrongRights => 3,
            ReplyStatus::OutOfBounds => 4,
            ReplyStatus::Misaligned => 5,
        }
    }

    fn from_code(code: u8) -> Option<ReplyStatus> {
        Some(match code {
            0 => ReplyStatus::Done,
            1 => ReplyStatus::UnknownKey,
            2 => ReplyStatus::Revoked,
            3 => ReplyStatus::WrongRights,
            4 => ReplyStatus::OutOfBounds,
            5 => ReplyStatus::Misaligned,
            _ => return None,
        })
    }
}

/// A parsed reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyRepr {
    /// Applied, or why not.
    pub status: ReplyStatus,
    /// The request's number.
    pub seq: u32,
    /// The word before an atomic (0 otherwise).
    pub value: u64,
    /// The bytes of data that follow (a get's, when done; 0 otherwise).
    pub len: u64,
}

impl ReplyRepr {
    /// Parses a reply header (any input: never panics).
    ///
    /// # Errors
    /// [`RmaWireError`] naming what is wrong; a refusal that announces data is one.
    pub fn parse(bytes: &[u8]) -> Result<ReplyRepr, RmaWireError> {
        if bytes.len() != REPLY_LEN {
            return Err(RmaWireError::Length {
                what: "reply",
                actual: bytes.len(),
                expected: REPLY_LEN,
            });
        }
        if bytes[reply_field::MAGIC] != REPLY_MAGIC {
            return Err(RmaWireError::Magic("reply"));
        }
        if bytes[reply_field::VERSION] != VERSION {
            return Err(RmaWireError::Version {
                what: "reply",
                version: bytes[reply_field::VERSION],
            });
        }
        let code = bytes[reply_field::STATUS];
        let status = ReplyStatus::from_code(code).ok_or(RmaWireError::Code {
            what: "status",
            code,
        })?;
        let reserved = u64_at(bytes, reply_field::RESERVED);
        let len = u64_at(bytes, reply_field::LEN);
        if reserved != 0 || (status != ReplyStatus::Done && len != 0) {
            return Err(RmaWireError::Code {
                what: "reply field",
                code,
            });
        }
        Ok(ReplyRepr {
            status,
            seq: u32_at(bytes, reply_field::SEQ),
            value: u64_at(bytes, reply_field::VALUE),
            len,
        })
    }

    /// The reply's header bytes.
    pub fn emit(&self) -> [u8; REPLY_LEN] {
        let mut out = [0u8; REPLY_LEN];
        out[reply_field::MAGIC].copy_from_slice(&REPLY_MAGIC);
        out[reply_field::VERSION] = VERSION;
        out[reply_field::STATUS] = self.status.code();
        out[reply_field::SEQ].copy_from_slice(&self.seq.to_be_bytes());
        out[reply_field::VALUE].copy_from_slice(&self.value.to_be_bytes());
        out[reply_field::LEN].copy_from_slice(&self.len.to_be_bytes());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(op: RequestOp) -> RequestRepr {
        RequestRepr {
            op,
            seq: 9,
            offset: 64,
            len: 8,
            a: if op == RequestOp::Get { 0 } else { 5 },
            b: if op == RequestOp::CompareSwap { 6 } else { 0 },
            key: [7; KEY_LEN],
        }
    }

    #[test]
    fn requests_and_replies_round_trip_as_documented() {
        for op in [
            RequestOp::FetchAdd,
            RequestOp::CompareSwap,
            RequestOp::Swap,
            RequestOp::Get,
        ] {
            let bytes = request(op).emit();
            assert_eq!(&bytes[..3], b"QR\x01");
            assert_eq!(bytes[7], 9);
            assert_eq!(RequestRepr::parse(&bytes), Ok(request(op)));
        }
        let put = RequestRepr {
            a: 0,
            len: 1 << 40,
            ..request(RequestOp::Put)
        };
        assert_eq!(RequestRepr::parse(&put.emit()), Ok(put));
        let flush = RequestRepr {
            op: RequestOp::Flush,
            seq: 1,
            offset: 0,
            len: 0,
            a: 0,
            b: 0,
            key: [0; KEY_LEN],
        };
        assert_eq!(RequestRepr::parse(&flush.emit()), Ok(flush));
        let reply = ReplyRepr {
            status: ReplyStatus::Done,
            seq: 3,
            value: 11,
            len: 4096,
        };
        let bytes = reply.emit();
        assert_eq!(&bytes[..4], b"QA\x01\x00");
        assert_eq!(ReplyRepr::parse(&bytes), Ok(reply));
    }

    #[test]
    fn inconsistent_requests_and_replies_are_typed_errors() {
        let mut wide_atomic = request(RequestOp::FetchAdd);
        wide_atomic.len = 16;
        assert!(RequestRepr::parse(&wide_atomic.emit()).is_err());
        let mut keyed_flush = request(RequestOp::Flush);
        keyed_flush.len = 0;
        keyed_flush.offset = 0;
        keyed_flush.a = 0;
        assert!(RequestRepr::parse(&keyed_flush.emit()).is_err());
        let mut bad = request(RequestOp::Put).emit();
        bad[3] = 99;
        assert!(RequestRepr::parse(&bad).is_err());
        let refusal_with_data = ReplyRepr {
            status: ReplyStatus::OutOfBounds,
            seq: 1,
            value: 0,
            len: 5,
        };
        assert!(ReplyRepr::parse(&refusal_with_data.emit()).is_err());
        let mut reserved = ReplyRepr {
            status: ReplyStatus::Done,
            seq: 1,
            value: 0,
            len: 0,
        }
        .emit();
        reserved[31] = 1;
        assert!(ReplyRepr::parse(&reserved).is_err());
    }

    #[test]
    fn parsing_never_panics() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for len in 0..100 {
            for _ in 0..200 {
                let bytes: Vec<u8> = (0..len)
                    .map(|_| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        state as u8
                    })
                    .collect();
                let _ = RequestRepr::parse(&bytes);
                let _ = ReplyRepr::parse(&bytes);
            }
        }
    }
}
