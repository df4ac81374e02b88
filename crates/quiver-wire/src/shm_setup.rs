//! The shared-memory setup message (docs/protocol.md, "shm setup").
//!
//! After a handshake succeeds on the local socket, the responder sends one more datagram
//! carrying the ring and doorbell descriptors (SCM_RIGHTS) and this 16-byte body:
//!
//! ```text
//!  0      4        5        6          8                16
//!  +------+--------+--------+----------+----------------+
//!  | QSET | version| status | reserved | ring_bytes u64 |
//!  +------+--------+--------+----------+----------------+
//! ```
//!
//! `status` 0 means the descriptors follow and the ring holds `ring_bytes` data bytes; 3
//! means the same, except that the responder cannot read the initiator's memory
//! (cross-memory attach refused), so every message goes through the ring; 1 and 2 are
//! refusals with the reason named by [`SetupStatus`].
//! All integers are big-endian. Parsing never panics.
//!
//! Layer: quiver-wire, the bottom. Owns the message layout only; passing the descriptors
//! is the caller's business. No I/O, no allocation.

/// Magic bytes of a setup message.
pub const MAGIC: [u8; 4] = *b"QSET";
/// Version of this layout.
pub const VERSION: u8 = 1;
/// Length of a setup message.
pub const LEN: usize = 16;

/// Byte offsets of the fields of a setup message.
mod field {
    use core::ops::Range;

    pub(super) const MAGIC: Range<usize> = 0..4;
    pub(super) const VERSION: usize = 4;
    pub(super) const STATUS: usize = 5;
    pub(super) const RESERVED: Range<usize> = 6..8;
    pub(super) const RING_BYTES: Range<usize> = 8..16;
}

/// Outcome the responder reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetupStatus {
    /// Ring and doorbell descriptors are attached.
    Ready,
    /// The responder could not read our memory with process_vm_readv (ptrace permissions).
    CrossMemoryDenied,
    /// The responder could not create the ring (e.g. out of memory).
    NoResources,
    /// Ring and doorbell descriptors are attached, but the responder could not read our
    /// memory with process_vm_readv: messages of every size go through the ring.
    ReadyWithoutCrossMemory,
}

impl SetupStatus {
    /// Whether the descriptors are attached (the edge is set up).
    pub fn is_ready(self) -> bool {
        matches!(
            self,
            SetupStatus::Ready | SetupStatus::ReadyWithoutCrossMemory
        )
    }
}

impl SetupStatus {
    fn code(self) -> u8 {
        match self {
            SetupStatus::Ready => 0,
            SetupStatus::CrossMemoryDenied => 1,
            SetupStatus::NoResources => 2,
            SetupStatus::ReadyWithoutCrossMemory => 3,
        }
    }

    fn from_code(code: u8) -> Option<SetupStatus> {
        Some(match code {
            0 => SetupStatus::Ready,
            1 => SetupStatus::CrossMemoryDenied,
            2 => SetupStatus::NoResources,
            3 => SetupStatus::ReadyWithoutCrossMemory,
            _ => return None,
        })
    }
}

/// Why a setup message did not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SetupError {
    /// Wrong length.
    #[error("setup message is {actual} bytes, expected {LEN}")]
    Length {
        /// Bytes received.
        actual: usize,
    },
    /// Not a setup message.
    #[error("setup message has a wrong magic")]
    Magic,
    /// Another version.
    #[error("setup message version {theirs}, ours {VERSION}")]
    Version {
        /// The version received.
        theirs: u8,
    },
    /// Unknown status code or non-zero reserved bytes.
    #[error("setup message field {field} has invalid value {value}")]
    Field {
        /// Which field.
        field: &'static str,
        /// The value.
        value: u64,
    },
}

/// A parsed setup message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetupRepr {
    /// Outcome.
    pub status: SetupStatus,
    /// Data bytes of the ring (0 unless `Ready`).
    pub ring_bytes: u64,
}

impl SetupRepr {
    /// Parses and validates `bytes`.
    ///
    /// # Errors
    /// [`SetupError`] naming the first wrong field.
    pub fn parse(bytes: &[u8]) -> Result<SetupRepr, SetupError> {
        let b: &[u8; LEN] = bytes.try_into().map_err(|_| SetupError::Length {
            actual: bytes.len(),
        })?;
        if b[field::MAGIC] != MAGIC {
            return Err(SetupError::Magic);
        }
        if b[field::VERSION] != VERSION {
            return Err(SetupError::Version {
                theirs: b[field::VERSION],
            });
        }
        let status = SetupStatus::from_code(b[field::STATUS]).ok_or(SetupError::Field {
            field: "status",
            value: u64::from(b[field::STATUS]),
        })?;
        if b[field::RESERVED] != [0, 0] {
            return Err(SetupError::Field {
                field: "reserved",
                value: u64::from(u16::from_be_bytes([b[6], b[7]])),
            });
        }
        let mut ring = [0u8; 8];
        ring.copy_from_slice(&b[field::RING_BYTES]);
        Ok(SetupRepr {
            status,
            ring_bytes: u64::from_be_bytes(ring),
        })
    }

    /// Writes the message.
    pub fn emit(&self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[field::MAGIC].copy_from_slice(&MAGIC);
        b[field::VERSION] = VERSION;
        b[field::STATUS] = self.status.code();
        b[field::RING_BYTES].copy_from_slice(&self.ring_bytes.to_be_bytes());
        b
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fixture() {
        let bytes = [b'Q', b'S', b'E', b'T', 1, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0];
        let repr = SetupRepr::parse(&bytes).unwrap();
        assert_eq!(
            repr,
            SetupRepr {
                status: SetupStatus::Ready,
                ring_bytes: 256 << 10
            }
        );
        assert_eq!(repr.emit(), bytes);
    }

    #[test]
    fn ready_without_cross_memory_round_trips() {
        let repr = SetupRepr {
            status: SetupStatus::ReadyWithoutCrossMemory,
            ring_bytes: 1 << 20,
        };
        let bytes = repr.emit();
        assert_eq!(bytes[5], 3);
        assert_eq!(SetupRepr::parse(&bytes), Ok(repr));
        assert!(repr.status.is_ready() && SetupStatus::Ready.is_ready());
        assert!(!SetupStatus::CrossMemoryDenied.is_ready());
    }

    #[test]
    fn rejects_bad_fields() {
        let good = SetupRepr {
            status: SetupStatus::CrossMemoryDenied,
            ring_bytes: 0,
        }
        .emit();
        assert!(SetupRepr::parse(&good[..15]).is_err());
        let mut b = good;
        b[0] = b'X';
        assert_eq!(SetupRepr::parse(&b), Err(SetupError::Magic));
        let mut b = good;
        b[4] = 2;
        assert_eq!(SetupRepr::parse(&b), Err(SetupError::Version { theirs: 2 }));
        let mut b = good;
        b[5] = 9;
        assert!(matches!(
            SetupRepr::parse(&b),
            Err(SetupError::Field {
                field: "status",
                ..
            })
        ));
        let mut b = good;
        b[7] = 1;
        assert!(matches!(
            SetupRepr::parse(&b),
            Err(SetupError::Field {
                field: "reserved",
                ..
            })
        ));
    }

    proptest! {
        #[test]
        fn parse_never_panics_and_round_trips(bytes in proptest::collection::vec(any::<u8>(), 0..32)) {
            if let Ok(repr) = SetupRepr::parse(&bytes) {
                prop_assert_eq!(&repr.emit()[..], &bytes[..]);
            }
        }
    }
}
