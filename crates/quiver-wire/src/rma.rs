//! The remote key of a registered memory region, and the grant a target's listener sends
//! back when an initiator asks to map the region (docs/rma.md, "keys").
//!
//! A key is 48 bytes a program may carry in any message:
//!
//! ```text
//!  0    2       3       4          8            16            24          32              48
//!  +----+-------+-------+----------+------------+-------------+-----------+---------------+
//!  | QK |version|rights | rank u32 | job id u64 | region u64  | len u64   | capability 16 |
//!  +----+-------+-------+----------+------------+-------------+-----------+---------------+
//! ```
//!
//! The grant is 16 bytes (the region's descriptor rides with it, SCM_RIGHTS, when the
//! status is [`GrantStatus::Granted`]):
//!
//! ```text
//!  0      4        5        6        8          16
//!  +------+--------+--------+--------+----------+
//!  | QGNT | version| status | rights | len u64  |
//!  +------+--------+--------+--------+----------+
//! ```
//!
//! A grant of status [`GrantStatus::GrantedCaller`] (memory the owner lent, reached by
//! cross-memory attach) carries the region's control file instead, and is followed by a
//! caller grant of 24 bytes:
//!
//! ```text
//!  0      4        5          8          12         16          24
//!  +------+--------+----------+----------+----------+-----------+
//!  | QCAL | version| reserved | slot u32 | reserved | addr u64  |
//!  +------+--------+----------+----------+----------+-----------+
//! ```
//!
//! All integers are big-endian. Parsing never panics on any input.
//!
//! Layer: quiver-wire, the bottom. Layouts only: no I/O, no allocation.

/// First bytes of a key.
pub const KEY_MAGIC: [u8; 2] = *b"QK";
/// Version of the key and grant layouts.
pub const VERSION: u8 = 1;
/// Length of a key.
pub const KEY_LEN: usize = 48;
/// Length of the capability inside a key.
pub const CAPABILITY_LEN: usize = 16;
/// First bytes of a grant.
pub const GRANT_MAGIC: [u8; 4] = *b"QGNT";
/// Length of a grant.
pub const GRANT_LEN: usize = 16;
/// First bytes of a caller grant.
pub const CALLER_GRANT_MAGIC: [u8; 4] = *b"QCAL";
/// Length of a caller grant.
pub const CALLER_GRANT_LEN: usize = 24;

/// Byte offsets of a key's fields.
mod key_field {
    use core::ops::Range;

    pub(super) const MAGIC: Range<usize> = 0..2;
    pub(super) const VERSION: usize = 2;
    pub(super) const RIGHTS: usize = 3;
    pub(super) const RANK: Range<usize> = 4..8;
    pub(super) const JOB: Range<usize> = 8..16;
    pub(super) const REGION: Range<usize> = 16..24;
    pub(super) const LEN: Range<usize> = 24..32;
    pub(super) const CAPABILITY: Range<usize> = 32..48;
}

/// Byte offsets of a grant's fields.
mod grant_field {
    use core::ops::Range;

    pub(super) const MAGIC: Range<usize> = 0..4;
    pub(super) const VERSION: usize = 4;
    pub(super) const STATUS: usize = 5;
    pub(super) const RIGHTS: usize = 6;
    pub(super) const RESERVED: usize = 7;
    pub(super) const LEN: Range<usize> = 8..16;
}

/// What a key allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rights {
    /// `get` only.
    Read,
    /// `get`, `put` and the atomics.
    ReadWrite,
}

impl Rights {
    fn code(self) -> u8 {
        match self {
            Rights::Read => 1,
            Rights::ReadWrite => 3,
        }
    }

    fn from_code(code: u8) -> Option<Rights> {
        match code {
            1 => Some(Rights::Read),
            3 => Some(Rights::ReadWrite),
            _ => None,
        }
    }

    /// Whether these rights allow writing.
    pub fn writable(self) -> bool {
        self == Rights::ReadWrite
    }

    /// The rights' name in messages ("read-only", "read-write").
    pub fn name(self) -> &'static str {
        match self {
            Rights::Read => "read-only",
            Rights::ReadWrite => "read-write",
        }
    }
}

/// Why a key or a grant did not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RmaWireError {
    /// Wrong length.
    #[error("{what} is {actual} bytes, expected {expected}")]
    Length {
        /// "key" or "grant".
        what: &'static str,
        /// Bytes given.
        actual: usize,
        /// Bytes expected.
        expected: usize,
    },
    /// Not a key or grant.
    #[error("not a quiver {0} (wrong magic)")]
    Magic(&'static str),
    /// Another version.
    #[error("{what} version {version} (this quiver speaks {VERSION})")]
    Version {
        /// "key" or "grant".
        what: &'static str,
        /// The version found.
        version: u8,
    },
    /// An unknown rights or status code, or a reserved byte that is not 0.
    #[error("unknown {what} code {code}")]
    Code {
        /// "rights", "status" or "reserved".
        what: &'static str,
        /// The code found.
        code: u8,
    },
}

/// A parsed remote key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyRepr {
    /// What the key allows.
    pub rights: Rights,
    /// The rank that owns the region.
    pub rank: u32,
    /// The job the region belongs to.
    pub job_id: u64,
    /// The region's number at its rank (never reused while the rank runs).
    pub region: u64,
    /// The region's length in bytes.
    pub len: u64,
    /// The unguessable capability the owner drew for the region.
    pub capability: [u8; CAPABILITY_LEN],
}

fn u64_at(bytes: &[u8], range: core::ops::Range<usize>) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[range]);
    u64::from_be_bytes(b)
}

impl KeyRepr {
    /// Parses a key (any input: never panics).
    ///
    /// # Errors
    /// [`RmaWireError`] naming what is wrong.
    pub fn parse(bytes: &[u8]) -> Result<KeyRepr, RmaWireError> {
        if bytes.len() != KEY_LEN {
            return Err(RmaWireError::Length {
                what: "key",
                actual: bytes.len(),
                expected: KEY_LEN,
            });
        }
        if bytes[key_field::MAGIC] != KEY_MAGIC {
            return Err(RmaWireError::Magic("key"));
        }
        if bytes[key_field::VERSION] != VERSION {
            return Err(RmaWireError::Version {
                what: "key",
                version: bytes[key_field::VERSION],
            });
        }
        let code = bytes[key_field::RIGHTS];
        let rights = Rights::from_code(code).ok_or(RmaWireError::Code {
            what: "rights",
            code,
        })?;
        let mut rank = [0u8; 4];
        rank.copy_from_slice(&bytes[key_field::RANK]);
        let mut capability = [0u8; CAPABILITY_LEN];
        capability.copy_from_slice(&bytes[key_field::CAPABILITY]);
        Ok(KeyRepr {
            rights,
            rank: u32::from_be_bytes(rank),
            job_id: u64_at(bytes, key_field::JOB),
            region: u64_at(bytes, key_field::REGION),
            len: u64_at(bytes, key_field::LEN),
            capability,
        })
    }

    /// The key's bytes.
    pub fn emit(&self) -> [u8; KEY_LEN] {
        let mut out = [0u8; KEY_LEN];
        out[key_field::MAGIC].copy_from_slice(&KEY_MAGIC);
        out[key_field::VERSION] = VERSION;
        out[key_field::RIGHTS] = self.rights.code();
        out[key_field::RANK].copy_from_slice(&self.rank.to_be_bytes());
        out[key_field::JOB].copy_from_slice(&self.job_id.to_be_bytes());
        out[key_field::REGION].copy_from_slice(&self.region.to_be_bytes());
        out[key_field::LEN].copy_from_slice(&self.len.to_be_bytes());
        out[key_field::CAPABILITY].copy_from_slice(&self.capability);
        out
    }
}

/// The target's answer to a request to map a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantStatus {
    /// The region's descriptor is attached.
    Granted,
    /// No live region of this rank matches the key (never was, forged, or revoked).
    UnknownKey,
    /// The key asks for more rights than the region was registered with.
    WrongRights,
    /// The region could not be handed over (descriptors exhausted).
    NoResources,
    /// Memory the owner lent (not a memory file): its control file is attached, and a
    /// [`CallerGrantRepr`] follows.
    GrantedCaller,
}

impl GrantStatus {
    fn code(self) -> u8 {
        match self {
            GrantStatus::Granted => 0,
            GrantStatus::UnknownKey => 1,
            GrantStatus::WrongRights => 2,
            GrantStatus::NoResources => 3,
            GrantStatus::GrantedCaller => 4,
        }
    }

    fn from_code(code: u8) -> Option<GrantStatus> {
        Some(match code {
            0 => GrantStatus::Granted,
            1 => GrantStatus::UnknownKey,
            2 => GrantStatus::WrongRights,
            3 => GrantStatus::NoResources,
            4 => GrantStatus::GrantedCaller,
            _ => return None,
        })
    }
}

/// A parsed grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantRepr {
    /// Granted, or why not.
    pub status: GrantStatus,
    /// The rights of the descriptor attached.
    pub rights: Rights,
    /// The region's length in bytes.
    pub len: u64,
}

impl GrantRepr {
    /// Parses a grant (any input: never panics).
    ///
    /// # Errors
    /// [`RmaWireError`] naming what is wrong.
    pub fn parse(bytes: &[u8]) -> Result<GrantRepr, RmaWireError> {
        if bytes.len() != GRANT_LEN {
            return Err(RmaWireError::Length {
                what: "grant",
                actual: bytes.len(),
                expected: GRANT_LEN,
            });
        }
        if bytes[grant_field::MAGIC] != GRANT_MAGIC {
            return Err(RmaWireError::Magic("grant"));
        }
        if bytes[grant_field::VERSION] != VERSION {
            return Err(RmaWireError::Version {
                what: "grant",
                version: bytes[grant_field::VERSION],
            });
        }
        if bytes[grant_field::RESERVED] != 0 {
            return Err(RmaWireError::Code {
                what: "reserved",
                code: bytes[grant_field::RESERVED],
            });
        }
        let code = bytes[grant_field::STATUS];
        let status = GrantStatus::from_code(code).ok_or(RmaWireError::Code {
            what: "status",
            code,
        })?;
        let code = bytes[grant_field::RIGHTS];
        let rights = Rights::from_code(code).ok_or(RmaWireError::Code {
            what: "rights",
            code,
        })?;
        Ok(GrantRepr {
            status,
            rights,
            len: u64_at(bytes, grant_field::LEN),
        })
    }

    /// The grant's bytes.
    pub fn emit(&self) -> [u8; GRANT_LEN] {
        let mut out = [0u8; GRANT_LEN];
        out[grant_field::MAGIC].copy_from_slice(&GRANT_MAGIC);
        out[grant_field::VERSION] = VERSION;
        out[grant_field::STATUS] = self.status.code();
        out[grant_field::RIGHTS] = self.rights.code();
        out[grant_field::RESERVED] = 0;
        out[grant_field::LEN].copy_from_slice(&self.len.to_be_bytes());
        out
    }
}

/// What follows a [`GrantStatus::GrantedCaller`] grant: where the lent memory is in the
/// owner's process, and the initiator's slot in the control file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallerGrantRepr {
    /// The initiator process's in-use slot in the control file.
    pub slot: u32,
    /// The memory's first byte in the owner's address space.
    pub addr: u64,
}

impl CallerGrantRepr {
    /// Parses a caller grant (any input: never panics).
    ///
    /// # Errors
    /// [`RmaWireError`] naming what is wrong.
    pub fn parse(bytes: &[u8]) -> Result<CallerGrantRepr, RmaWireError> {
        if bytes.len() != CALLER_GRANT_LEN {
            return Err(RmaWireError::Length {
                what: "caller grant",
                actual: bytes.len(),
                expected: CALLER_GRANT_LEN,
            });
        }
        if bytes[0..4] != CALLER_GRANT_MAGIC {
            return Err(RmaWireError::Magic("caller grant"));
        }
        if bytes[4] != VERSION {
            return Err(RmaWireError::Version {
                what: "caller grant",
                version: bytes[4],
            });
        }
        if let Some(&code) = bytes[5..8].iter().chain(&bytes[12..16]).find(|&&b| b != 0) {
            return Err(RmaWireError::Code {
                what: "reserved",
                code,
            });
        }
        let mut slot = [0u8; 4];
        slot.copy_from_slice(&bytes[8..12]);
        Ok(CallerGrantRepr {
            slot: u32::from_be_bytes(slot),
            addr: u64_at(bytes, 16..24),
        })
    }

    /// The caller grant's bytes.
    pub fn emit(&self) -> [u8; CALLER_GRANT_LEN] {
        let mut out = [0u8; CALLER_GRANT_LEN];
        out[0..4].copy_from_slice(&CALLER_GRANT_MAGIC);
        out[4] = VERSION;
        out[8..12].copy_from_slice(&self.slot.to_be_bytes());
        out[16..24].copy_from_slice(&self.addr.to_be_bytes());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caller_grants_round_trip_and_bad_ones_are_typed_errors() {
        let grant = CallerGrantRepr {
            slot: 3,
            addr: 0x7fff_1234_5678,
        };
        let bytes = grant.emit();
        assert_eq!(&bytes[..5], &[b'Q', b'C', b'A', b'L', 1]);
        assert_eq!(&bytes[8..12], &[0, 0, 0, 3]);
        assert_eq!(CallerGrantRepr::parse(&bytes), Ok(grant));
        assert!(CallerGrantRepr::parse(&bytes[..23]).is_err());
        for at in [0, 4, 6, 13] {
            let mut bad = bytes;
            bad[at] ^= 0x40;
            assert!(CallerGrantRepr::parse(&bad).is_err(), "byte {at}");
        }
    }

    fn key() -> KeyRepr {
        KeyRepr {
            rights: Rights::ReadWrite,
            rank: 7,
            job_id: 0x0102_0304_0506_0708,
            region: 42,
            len: 1 << 20,
            capability: [0xab; CAPABILITY_LEN],
        }
    }

    #[test]
    fn key_bytes_are_as_documented_and_round_trip() {
        let bytes = key().emit();
        assert_eq!(&bytes[..4], &[b'Q', b'K', 1, 3]);
        assert_eq!(&bytes[4..8], &[0, 0, 0, 7]);
        assert_eq!(&bytes[8..16], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(bytes[23], 42);
        assert_eq!(&bytes[24..32], &[0, 0, 0, 0, 0, 0x10, 0, 0]);
        assert_eq!(KeyRepr::parse(&bytes), Ok(key()));
        let ro = KeyRepr {
            rights: Rights::Read,
            ..key()
        };
        assert_eq!(KeyRepr::parse(&ro.emit()), Ok(ro));
    }

    #[test]
    fn grant_round_trips() {
        for status in [
            GrantStatus::Granted,
            GrantStatus::UnknownKey,
            GrantStatus::WrongRights,
            GrantStatus::NoResources,
            GrantStatus::GrantedCaller,
        ] {
            let grant = GrantRepr {
                status,
                rights: Rights::Read,
                len: 12345,
            };
            let bytes = grant.emit();
            assert_eq!(&bytes[..4], b"QGNT");
            assert_eq!(GrantRepr::parse(&bytes), Ok(grant));
        }
    }

    #[test]
    fn bad_keys_and_grants_are_typed_errors() {
        let good = key().emit();
        assert!(matches!(
            KeyRepr::parse(&good[..47]),
            Err(RmaWireError::Length { actual: 47, .. })
        ));
        let mut bad = good;
        bad[0] = b'X';
        assert_eq!(KeyRepr::parse(&bad), Err(RmaWireError::Magic("key")));
        let mut bad = good;
        bad[2] = 9;
        assert!(matches!(
            KeyRepr::parse(&bad),
            Err(RmaWireError::Version { version: 9, .. })
        ));
        let mut bad = good;
        bad[3] = 2;
        assert!(matches!(
            KeyRepr::parse(&bad),
            Err(RmaWireError::Code { code: 2, .. })
        ));
        let mut grant = GrantRepr {
            status: GrantStatus::Granted,
            rights: Rights::Read,
            len: 1,
        }
        .emit();
        grant[5] = 77;
        assert!(GrantRepr::parse(&grant).is_err());
        grant[5] = 0;
        grant[7] = 1;
        assert!(
            GrantRepr::parse(&grant).is_err(),
            "the reserved byte must be 0"
        );
    }

    /// Every byte string of every length up to a little past a key parses or fails without
    /// panicking (a cheap stand-in for the fuzzer, over random bytes).
    #[test]
    fn parsing_never_panics() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..64 {
            for _ in 0..200 {
                let bytes: Vec<u8> = (0..len)
                    .map(|_| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        state as u8
                    })
                    .collect();
                let _ = KeyRepr::parse(&bytes);
                let _ = GrantRepr::parse(&bytes);
            }
        }
    }
}
