//! Handshake messages: the four messages two endpoints exchange before a connection carries
//! data, proving that both ends hold the job's secret key (`docs/protocol.md`, section
//! "Handshake").
//!
//! This module owns the byte layouts only. The state machines that decide what to send and
//! compute the MACs live in `quiver_proto::handshake`. No I/O, no allocation, no clock.
//!
//! # Common prefix
//!
//! Every message starts with the same 8 bytes. Bytes 0..8 keep this meaning in every future
//! version, so a peer can always tell a version mismatch from garbage.
//!
//! ```text
//!  0       1       2       3       4       5       6       7       8
//! +-------+-------+-------+-------+-------+-------+-------+-------+
//! |  'Q'  |  'V'  |  'H'  |  'S'  |version| kind  |    length     |
//! +-------+-------+-------+-------+-------+-------+-------+-------+
//! ```
//!
//! `version` is [`VERSION`]; `kind` is a [`MessageKind`]; `length` (u16) is the total length of
//! the message in bytes, prefix included. All integers are big-endian.
//!
//! # Hello (initiator → responder), kind 1, exactly 56 bytes
//!
//! ```text
//!  0               8              16              20      22      24                      56
//! +---------------+---------------+---------------+-------+-------+-----------------------+
//! |    prefix     |  job_id u64   | src_rank u32  |src_prt|dst_prt|     nonce_i [32]      |
//! +---------------+---------------+---------------+-------+-------+-----------------------+
//! ```
//!
//! # Challenge (responder → initiator), kind 2, 76 + params bytes (params ≤ 256)
//!
//! ```text
//!  0               8     9      12                      44                      76
//! +---------------+-----+-------+-----------------------+-----------------------+-----------+
//! |    prefix     |stat.|rsvd 0 |     nonce_r [32]      |      mac_r [32]       | params_r  |
//! +---------------+-----+-------+-----------------------+-----------------------+-----------+
//! ```
//!
//! `status` is a [`ChallengeStatus`]; the three reserved bytes are zero.
//!
//! # Proof (initiator → responder), kind 3, 40 + params bytes (params ≤ 256)
//!
//! ```text
//!  0               8                      40
//! +---------------+-----------------------+-----------+
//! |    prefix     |      mac_i [32]       | params_i  |
//! +---------------+-----------------------+-----------+
//! ```
//!
//! # Verdict (responder → initiator), kind 4, exactly 44 bytes
//!
//! ```text
//!  0               8     9      12                      44
//! +---------------+-----+-------+-----------------------+
//! |    prefix     |stat.|rsvd 0 |      mac_v [32]       |
//! +---------------+-----+-------+-----------------------+
//! ```
//!
//! `status` is a [`VerdictStatus`]; the three reserved bytes are zero. `mac_v` lets the
//! initiator check that the verdict really is the responder's answer to its Proof.
//!
//! # The no-panic contract
//!
//! - `new_checked` validates the prefix (length, magic, version, kind), that the `length`
//!   field equals the buffer's length, and that the length fits the message kind. After it
//!   succeeds, no accessor of that view can panic.
//! - `new_unchecked` validates nothing: accessors on a too-short buffer panic. Use it only to
//!   wrap a buffer you are about to `emit` into.
//! - `Repr::parse` re-runs the length checks (so it is safe on unchecked views too) and adds
//!   the semantic checks: known status codes, zero reserved bytes.
//! - `Repr::emit` writes exactly `buffer_len()` bytes and panics if the buffer is shorter, or if
//!   the repr's params are longer than [`MAX_PARAMS_LEN`]: both are caller bugs.
//!
//! Checks run in a fixed order: prefix length, magic, version, kind, fixed part, length field,
//! params limit. Because the version is checked before anything version-specific, the 8 bytes
//! of a prefix alone are enough to report a version mismatch.

use core::fmt;
use core::ops::Range;

/// The four bytes every handshake message starts with (ASCII "QVHS").
pub const MAGIC: [u8; 4] = *b"QVHS";
/// The handshake version this code speaks. Peers must match exactly.
pub const VERSION: u8 = 1;
/// Length of the common prefix in bytes.
pub const PREFIX_LEN: usize = 8;
/// Length of a nonce in bytes.
pub const NONCE_LEN: usize = 32;
/// Length of a MAC in bytes.
pub const MAC_LEN: usize = 32;
/// Largest `params` field a Challenge or Proof may carry, in bytes.
pub const MAX_PARAMS_LEN: usize = 256;
/// Length of a Hello in bytes.
pub const HELLO_LEN: usize = field::HELLO_NONCE_I.end;
/// Length of a Challenge without params, in bytes.
pub const CHALLENGE_FIXED_LEN: usize = field::CHALLENGE_MAC_R.end;
/// Length of a Proof without params, in bytes.
pub const PROOF_FIXED_LEN: usize = field::PROOF_MAC_I.end;
/// Length of a Verdict in bytes.
pub const VERDICT_LEN: usize = field::VERDICT_MAC_V.end;
/// Longest handshake message of this version, in bytes: a buffer of this size holds any of
/// them.
pub const MAX_MESSAGE_LEN: usize = CHALLENGE_FIXED_LEN + MAX_PARAMS_LEN;

/// Byte offsets of every field, as named ranges into the message.
pub mod field {
    use core::ops::{Range, RangeFrom};

    /// Prefix: the magic bytes "QVHS".
    pub const MAGIC: Range<usize> = 0..4;
    /// Prefix: the version byte.
    pub const VERSION: usize = 4;
    /// Prefix: the message kind byte.
    pub const KIND: usize = 5;
    /// Prefix: total message length, u16.
    pub const LENGTH: Range<usize> = 6..8;

    /// Hello: job id, u64.
    pub const HELLO_JOB_ID: Range<usize> = 8..16;
    /// Hello: the initiator's rank, u32.
    pub const HELLO_SRC_RANK: Range<usize> = 16..20;
    /// Hello: the initiator's endpoint port, u16.
    pub const HELLO_SRC_PORT: Range<usize> = 20..22;
    /// Hello: the port of the endpoint being connected to, u16.
    pub const HELLO_DST_PORT: Range<usize> = 22..24;
    /// Hello: the initiator's fresh nonce.
    pub const HELLO_NONCE_I: Range<usize> = 24..56;

    /// Challenge: status byte.
    pub const CHALLENGE_STATUS: usize = 8;
    /// Challenge: reserved, zero.
    pub const CHALLENGE_RESERVED: Range<usize> = 9..12;
    /// Challenge: the responder's fresh nonce.
    pub const CHALLENGE_NONCE_R: Range<usize> = 12..44;
    /// Challenge: the responder's MAC.
    pub const CHALLENGE_MAC_R: Range<usize> = 44..76;
    /// Challenge: the responder's transport parameters (rest of the message).
    pub const CHALLENGE_PARAMS_R: RangeFrom<usize> = 76..;

    /// Proof: the initiator's MAC.
    pub const PROOF_MAC_I: Range<usize> = 8..40;
    /// Proof: the initiator's transport parameters (rest of the message).
    pub const PROOF_PARAMS_I: RangeFrom<usize> = 40..;

    /// Verdict: status byte.
    pub const VERDICT_STATUS: usize = 8;
    /// Verdict: reserved, zero.
    pub const VERDICT_RESERVED: Range<usize> = 9..12;
    /// Verdict: the responder's confirmation MAC.
    pub const VERDICT_MAC_V: Range<usize> = 12..44;
}

/// Field names with the offset each one ends at, in order, to name the first field a short
/// buffer cuts off.
const PREFIX_FIELDS: &[(&str, usize)] = &[
    ("prefix.magic", field::MAGIC.end),
    ("prefix.version", field::VERSION + 1),
    ("prefix.kind", field::KIND + 1),
    ("prefix.length", field::LENGTH.end),
];
const HELLO_FIELDS: &[(&str, usize)] = &[
    ("hello.job_id", field::HELLO_JOB_ID.end),
    ("hello.src_rank", field::HELLO_SRC_RANK.end),
    ("hello.src_port", field::HELLO_SRC_PORT.end),
    ("hello.dst_port", field::HELLO_DST_PORT.end),
    ("hello.nonce_i", field::HELLO_NONCE_I.end),
];
const CHALLENGE_FIELDS: &[(&str, usize)] = &[
    ("challenge.status", field::CHALLENGE_STATUS + 1),
    ("challenge.reserved", field::CHALLENGE_RESERVED.end),
    ("challenge.nonce_r", field::CHALLENGE_NONCE_R.end),
    ("challenge.mac_r", field::CHALLENGE_MAC_R.end),
];
const PROOF_FIELDS: &[(&str, usize)] = &[("proof.mac_i", field::PROOF_MAC_I.end)];
const VERDICT_FIELDS: &[(&str, usize)] = &[
    ("verdict.status", field::VERDICT_STATUS + 1),
    ("verdict.reserved", field::VERDICT_RESERVED.end),
    ("verdict.mac_v", field::VERDICT_MAC_V.end),
];

/// Why bytes are not a valid handshake message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The buffer ends before `field` does.
    #[error("truncated: field `{field}` needs {needed} bytes, buffer has {actual}")]
    Truncated {
        /// The first field that does not fit, e.g. `"hello.nonce_i"`.
        field: &'static str,
        /// Bytes needed to hold that field.
        needed: usize,
        /// Bytes present.
        actual: usize,
    },
    /// The first four bytes are not [`MAGIC`].
    #[error("bad magic: expected {:?}, got {actual:?}", MAGIC)]
    BadMagic {
        /// The four bytes found.
        actual: [u8; 4],
    },
    /// The version byte is not [`VERSION`].
    #[error("unsupported handshake version: expected {expected}, got {actual}")]
    UnsupportedVersion {
        /// The version this code speaks.
        expected: u8,
        /// The version found.
        actual: u8,
    },
    /// The kind byte names no message.
    #[error("unknown message kind {actual}")]
    UnknownKind {
        /// The kind byte found.
        actual: u8,
    },
    /// A valid message, but not the kind this view is for.
    #[error("wrong message kind: expected {expected}, got {actual}")]
    WrongKind {
        /// The kind the view is for.
        expected: MessageKind,
        /// The kind found.
        actual: MessageKind,
    },
    /// The `length` field disagrees with the buffer's length.
    #[error("length field says {declared} bytes, buffer has {actual}")]
    LengthMismatch {
        /// The value of the `length` field.
        declared: usize,
        /// The buffer's length.
        actual: usize,
    },
    /// The message is longer than its kind allows (params over [`MAX_PARAMS_LEN`], or bytes
    /// after a fixed-size message).
    #[error("{message} too long: at most {max} bytes, got {actual}")]
    TooLong {
        /// The message kind.
        message: MessageKind,
        /// The longest valid message of that kind.
        max: usize,
        /// The message's length.
        actual: usize,
    },
    /// A status byte names no status.
    #[error("unknown status {actual} in `{field}`")]
    UnknownStatus {
        /// Which status field, e.g. `"challenge.status"`.
        field: &'static str,
        /// The byte found.
        actual: u8,
    },
    /// Reserved bytes are not zero.
    #[error("reserved field `{field}` is {actual:#x}, must be zero")]
    NonZeroReserved {
        /// Which field, e.g. `"verdict.reserved"`.
        field: &'static str,
        /// The reserved bytes as a big-endian number.
        actual: u32,
    },
}

/// The four handshake messages, in the order they are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MessageKind {
    /// Initiator → responder: who is connecting, plus the initiator's nonce.
    Hello = 1,
    /// Responder → initiator: status, the responder's nonce and MAC.
    Challenge = 2,
    /// Initiator → responder: the initiator's MAC.
    Proof = 3,
    /// Responder → initiator: whether the proof was accepted, and the responder's
    /// confirmation MAC.
    Verdict = 4,
}

impl MessageKind {
    /// The kind for a wire code, or `None` for an unknown code.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::Hello),
            2 => Some(Self::Challenge),
            3 => Some(Self::Proof),
            4 => Some(Self::Verdict),
            _ => None,
        }
    }

    /// The wire code of this kind.
    pub const fn code(self) -> u8 {
        self as u8
    }
}

impl fmt::Display for MessageKind {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            Self::Hello => "Hello",
            Self::Challenge => "Challenge",
            Self::Proof => "Proof",
            Self::Verdict => "Verdict",
        })
    }
}

/// The responder's answer to a Hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ChallengeStatus {
    /// The responder takes the connection; nonce_r, mac_r and params_r are meaningful.
    Ok = 0,
    /// No endpoint is open at the Hello's `dst_port`.
    NoSuchEndpoint = 1,
    /// The Hello's `job_id` is not the responder's job.
    WrongJob = 2,
    /// The endpoint exists but takes no more connections now.
    Busy = 3,
    /// The responder does not speak the Hello's version (sent in the responder's version).
    UnsupportedVersion = 4,
}

impl ChallengeStatus {
    /// The status for a wire code, or `None` for an unknown code.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Self::Ok),
            1 => Some(Self::NoSuchEndpoint),
            2 => Some(Self::WrongJob),
            3 => Some(Self::Busy),
            4 => Some(Self::UnsupportedVersion),
            _ => None,
        }
    }

    /// The wire code of this status.
    pub const fn code(self) -> u8 {
        self as u8
    }
}

/// The responder's answer to a Proof.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum VerdictStatus {
    /// The proof verified: the connection is established.
    Accepted = 0,
    /// The proof's MAC did not verify.
    BadProof = 1,
}

impl VerdictStatus {
    /// The status for a wire code, or `None` for an unknown code.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Self::Accepted),
            1 => Some(Self::BadProof),
            _ => None,
        }
    }

    /// The wire code of this status.
    pub const fn code(self) -> u8 {
        self as u8
    }
}

/// A view of the common 8-byte prefix of any handshake message.
///
/// Use it to frame messages on a byte stream: read [`PREFIX_LEN`] bytes, check them, then
/// read `length() - PREFIX_LEN` more. `new_checked` checks only the buffer length and the
/// magic, so that a reader can see a foreign version; if `version() != VERSION`, do not read
/// on: hand the prefix to the state machine, which reports the mismatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessagePrefix<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> MessagePrefix<T> {
    /// Wraps a buffer without checking it. Accessors panic if it is shorter than
    /// [`PREFIX_LEN`].
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer after checking that it holds a prefix with the right magic.
    ///
    /// # Errors
    /// [`WireError::Truncated`] if shorter than [`PREFIX_LEN`], [`WireError::BadMagic`].
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let bytes = buffer.as_ref();
        check_fields(bytes, PREFIX_FIELDS)?;
        check_magic(bytes)?;
        Ok(Self { buffer })
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The magic bytes.
    pub fn magic(&self) -> [u8; 4] {
        read_array(self.buffer.as_ref(), field::MAGIC)
    }

    /// The version byte.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }

    /// The raw kind byte.
    pub fn kind_code(&self) -> u8 {
        self.buffer.as_ref()[field::KIND]
    }

    /// The message kind.
    ///
    /// # Errors
    /// [`WireError::UnknownKind`] if the kind byte names no message.
    pub fn kind(&self) -> Result<MessageKind, WireError> {
        let code = self.kind_code();
        MessageKind::from_code(code).ok_or(WireError::UnknownKind { actual: code })
    }

    /// The total length of the message in bytes, prefix included.
    pub fn length(&self) -> usize {
        usize::from(read_u16(self.buffer.as_ref(), field::LENGTH))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> MessagePrefix<T> {
    /// Writes the whole prefix: magic, [`VERSION`], `kind` and the total `length` in bytes.
    ///
    /// # Panics
    /// If the buffer is shorter than [`PREFIX_LEN`] or `length` exceeds `u16::MAX`.
    pub fn fill(&mut self, kind: MessageKind, length: usize) {
        // Invariant: callers pass the length of a message they built, at most MAX_MESSAGE_LEN
        // (332) bytes; anything else is the misuse the `# Panics` section covers.
        let length = u16::try_from(length).expect("handshake message over u16::MAX bytes");
        let bytes = self.buffer.as_mut();
        bytes[field::MAGIC].copy_from_slice(&MAGIC);
        bytes[field::VERSION] = VERSION;
        bytes[field::KIND] = kind.code();
        bytes[field::LENGTH].copy_from_slice(&length.to_be_bytes());
    }

    /// Sets the version byte (tests use it to fake a foreign peer).
    pub fn set_version(&mut self, version: u8) {
        self.buffer.as_mut()[field::VERSION] = version;
    }
}

/// A view of a Hello message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Hello<T> {
    /// Wraps a buffer without checking it; accessors panic if it is shorter than
    /// [`HELLO_LEN`].
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer after checking it (see the module's no-panic contract).
    ///
    /// # Errors
    /// Any structural [`WireError`]; a different version gives
    /// [`WireError::UnsupportedVersion`], another message kind [`WireError::WrongKind`].
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let view = Self::new_unchecked(buffer);
        view.check_len()?;
        Ok(view)
    }

    /// Checks the structure: after `Ok`, accessors cannot panic.
    ///
    /// # Errors
    /// As [`Hello::new_checked`].
    pub fn check_len(&self) -> Result<(), WireError> {
        check_message(self.buffer.as_ref(), MessageKind::Hello, HELLO_FIELDS, 0)
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The job id.
    pub fn job_id(&self) -> u64 {
        u64::from_be_bytes(read_array(self.buffer.as_ref(), field::HELLO_JOB_ID))
    }

    /// The initiator's rank.
    pub fn src_rank(&self) -> u32 {
        u32::from_be_bytes(read_array(self.buffer.as_ref(), field::HELLO_SRC_RANK))
    }

    /// The initiator's endpoint port.
    pub fn src_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::HELLO_SRC_PORT)
    }

    /// The port of the endpoint being connected to.
    pub fn dst_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::HELLO_DST_PORT)
    }

    /// The initiator's nonce.
    pub fn nonce_i(&self) -> [u8; NONCE_LEN] {
        read_array(self.buffer.as_ref(), field::HELLO_NONCE_I)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Hello<T> {
    /// Writes the prefix for a Hello.
    pub fn fill_prefix(&mut self) {
        MessagePrefix::new_unchecked(self.buffer.as_mut()).fill(MessageKind::Hello, HELLO_LEN);
    }

    /// Sets the job id.
    pub fn set_job_id(&mut self, value: u64) {
        self.buffer.as_mut()[field::HELLO_JOB_ID].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the initiator's rank.
    pub fn set_src_rank(&mut self, value: u32) {
        self.buffer.as_mut()[field::HELLO_SRC_RANK].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the initiator's endpoint port.
    pub fn set_src_port(&mut self, value: u16) {
        self.buffer.as_mut()[field::HELLO_SRC_PORT].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the port being connected to.
    pub fn set_dst_port(&mut self, value: u16) {
        self.buffer.as_mut()[field::HELLO_DST_PORT].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the initiator's nonce.
    pub fn set_nonce_i(&mut self, value: &[u8; NONCE_LEN]) {
        self.buffer.as_mut()[field::HELLO_NONCE_I].copy_from_slice(value);
    }
}

/// A view of a Challenge message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Challenge<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Challenge<T> {
    /// Wraps a buffer without checking it; accessors panic if it is shorter than
    /// [`CHALLENGE_FIXED_LEN`].
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer after checking it (see the module's no-panic contract).
    ///
    /// # Errors
    /// Any structural [`WireError`]; a different version gives
    /// [`WireError::UnsupportedVersion`], another message kind [`WireError::WrongKind`].
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let view = Self::new_unchecked(buffer);
        view.check_len()?;
        Ok(view)
    }

    /// Checks the structure: after `Ok`, accessors cannot panic.
    ///
    /// # Errors
    /// As [`Challenge::new_checked`].
    pub fn check_len(&self) -> Result<(), WireError> {
        check_message(
            self.buffer.as_ref(),
            MessageKind::Challenge,
            CHALLENGE_FIELDS,
            MAX_PARAMS_LEN,
        )
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The raw status byte (see [`ChallengeStatus`]).
    pub fn status_code(&self) -> u8 {
        self.buffer.as_ref()[field::CHALLENGE_STATUS]
    }

    /// The reserved bytes as a big-endian number (zero when valid).
    pub fn reserved(&self) -> u32 {
        read_reserved(self.buffer.as_ref(), field::CHALLENGE_RESERVED)
    }

    /// The responder's nonce.
    pub fn nonce_r(&self) -> [u8; NONCE_LEN] {
        read_array(self.buffer.as_ref(), field::CHALLENGE_NONCE_R)
    }

    /// The responder's MAC.
    pub fn mac_r(&self) -> [u8; MAC_LEN] {
        read_array(self.buffer.as_ref(), field::CHALLENGE_MAC_R)
    }

    /// The bytes the MACs cover: the whole message except `mac_r`, as two pieces to be hashed
    /// in order.
    pub fn authenticated_parts(&self) -> [&[u8]; 2] {
        let bytes = self.buffer.as_ref();
        [
            &bytes[..field::CHALLENGE_MAC_R.start],
            &bytes[field::CHALLENGE_MAC_R.end..],
        ]
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Challenge<&'a T> {
    /// The responder's transport parameters.
    pub fn params_r(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::CHALLENGE_PARAMS_R]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Challenge<T> {
    /// Writes the prefix for a Challenge carrying `params_len` bytes of params.
    pub fn fill_prefix(&mut self, params_len: usize) {
        MessagePrefix::new_unchecked(self.buffer.as_mut())
            .fill(MessageKind::Challenge, CHALLENGE_FIXED_LEN + params_len);
    }

    /// Sets the status and zeroes the reserved bytes.
    pub fn set_status(&mut self, status: ChallengeStatus) {
        let bytes = self.buffer.as_mut();
        bytes[field::CHALLENGE_STATUS] = status.code();
        bytes[field::CHALLENGE_RESERVED].fill(0);
    }

    /// Sets the responder's nonce.
    pub fn set_nonce_r(&mut self, value: &[u8; NONCE_LEN]) {
        self.buffer.as_mut()[field::CHALLENGE_NONCE_R].copy_from_slice(value);
    }

    /// Sets the responder's MAC.
    pub fn set_mac_r(&mut self, value: &[u8; MAC_LEN]) {
        self.buffer.as_mut()[field::CHALLENGE_MAC_R].copy_from_slice(value);
    }

    /// Copies `value` into the params field, which must be exactly `value.len()` long.
    pub fn set_params_r(&mut self, value: &[u8]) {
        self.buffer.as_mut()[field::CHALLENGE_PARAMS_R].copy_from_slice(value);
    }
}

/// A view of a Proof message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proof<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Proof<T> {
    /// Wraps a buffer without checking it; accessors panic if it is shorter than
    /// [`PROOF_FIXED_LEN`].
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer after checking it (see the module's no-panic contract).
    ///
    /// # Errors
    /// Any structural [`WireError`]; a different version gives
    /// [`WireError::UnsupportedVersion`], another message kind [`WireError::WrongKind`].
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let view = Self::new_unchecked(buffer);
        view.check_len()?;
        Ok(view)
    }

    /// Checks the structure: after `Ok`, accessors cannot panic.
    ///
    /// # Errors
    /// As [`Proof::new_checked`].
    pub fn check_len(&self) -> Result<(), WireError> {
        check_message(
            self.buffer.as_ref(),
            MessageKind::Proof,
            PROOF_FIELDS,
            MAX_PARAMS_LEN,
        )
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The initiator's MAC.
    pub fn mac_i(&self) -> [u8; MAC_LEN] {
        read_array(self.buffer.as_ref(), field::PROOF_MAC_I)
    }

    /// The bytes the MAC covers: the whole message except `mac_i`, as two pieces to be hashed
    /// in order.
    pub fn authenticated_parts(&self) -> [&[u8]; 2] {
        let bytes = self.buffer.as_ref();
        [
            &bytes[..field::PROOF_MAC_I.start],
            &bytes[field::PROOF_MAC_I.end..],
        ]
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Proof<&'a T> {
    /// The initiator's transport parameters.
    pub fn params_i(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::PROOF_PARAMS_I]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Proof<T> {
    /// Writes the prefix for a Proof carrying `params_len` bytes of params.
    pub fn fill_prefix(&mut self, params_len: usize) {
        MessagePrefix::new_unchecked(self.buffer.as_mut())
            .fill(MessageKind::Proof, PROOF_FIXED_LEN + params_len);
    }

    /// Sets the initiator's MAC.
    pub fn set_mac_i(&mut self, value: &[u8; MAC_LEN]) {
        self.buffer.as_mut()[field::PROOF_MAC_I].copy_from_slice(value);
    }

    /// Copies `value` into the params field, which must be exactly `value.len()` long.
    pub fn set_params_i(&mut self, value: &[u8]) {
        self.buffer.as_mut()[field::PROOF_PARAMS_I].copy_from_slice(value);
    }
}

/// A view of a Verdict message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Verdict<T> {
    /// Wraps a buffer without checking it; accessors panic if it is shorter than
    /// [`VERDICT_LEN`].
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer after checking it (see the module's no-panic contract).
    ///
    /// # Errors
    /// Any structural [`WireError`]; a different version gives
    /// [`WireError::UnsupportedVersion`], another message kind [`WireError::WrongKind`].
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let view = Self::new_unchecked(buffer);
        view.check_len()?;
        Ok(view)
    }

    /// Checks the structure: after `Ok`, accessors cannot panic.
    ///
    /// # Errors
    /// As [`Verdict::new_checked`].
    pub fn check_len(&self) -> Result<(), WireError> {
        check_message(
            self.buffer.as_ref(),
            MessageKind::Verdict,
            VERDICT_FIELDS,
            0,
        )
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The raw status byte (see [`VerdictStatus`]).
    pub fn status_code(&self) -> u8 {
        self.buffer.as_ref()[field::VERDICT_STATUS]
    }

    /// The reserved bytes as a big-endian number (zero when valid).
    pub fn reserved(&self) -> u32 {
        read_reserved(self.buffer.as_ref(), field::VERDICT_RESERVED)
    }

    /// The responder's confirmation MAC.
    pub fn mac_v(&self) -> [u8; MAC_LEN] {
        read_array(self.buffer.as_ref(), field::VERDICT_MAC_V)
    }

    /// The bytes the MAC covers: the whole message except `mac_v`, as two pieces to be hashed
    /// in order (the second is empty; the shape matches the other messages).
    pub fn authenticated_parts(&self) -> [&[u8]; 2] {
        let bytes = self.buffer.as_ref();
        [
            &bytes[..field::VERDICT_MAC_V.start],
            &bytes[field::VERDICT_MAC_V.end..],
        ]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Verdict<T> {
    /// Writes the prefix for a Verdict.
    pub fn fill_prefix(&mut self) {
        MessagePrefix::new_unchecked(self.buffer.as_mut()).fill(MessageKind::Verdict, VERDICT_LEN);
    }

    /// Sets the status and zeroes the reserved bytes.
    pub fn set_status(&mut self, status: VerdictStatus) {
        let bytes = self.buffer.as_mut();
        bytes[field::VERDICT_STATUS] = status.code();
        bytes[field::VERDICT_RESERVED].fill(0);
    }

    /// Sets the responder's confirmation MAC.
    pub fn set_mac_v(&mut self, value: &[u8; MAC_LEN]) {
        self.buffer.as_mut()[field::VERDICT_MAC_V].copy_from_slice(value);
    }
}

/// A parsed Hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HelloRepr {
    /// The job the initiator belongs to.
    pub job_id: u64,
    /// The initiator's rank.
    pub src_rank: u32,
    /// The initiator's endpoint port.
    pub src_port: u16,
    /// The port of the endpoint being connected to.
    pub dst_port: u16,
    /// The initiator's fresh nonce.
    pub nonce_i: [u8; NONCE_LEN],
}

impl HelloRepr {
    /// Parses a (checked or unchecked) view.
    ///
    /// # Errors
    /// Any [`WireError`] from [`Hello::check_len`].
    pub fn parse<T: AsRef<[u8]>>(view: &Hello<T>) -> Result<Self, WireError> {
        view.check_len()?;
        Ok(Self {
            job_id: view.job_id(),
            src_rank: view.src_rank(),
            src_port: view.src_port(),
            dst_port: view.dst_port(),
            nonce_i: view.nonce_i(),
        })
    }

    /// The length of the emitted message in bytes.
    pub const fn buffer_len(&self) -> usize {
        HELLO_LEN
    }

    /// Writes the whole message into `view`.
    ///
    /// # Panics
    /// If the view's buffer is shorter than [`HelloRepr::buffer_len`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut Hello<T>) {
        view.fill_prefix();
        view.set_job_id(self.job_id);
        view.set_src_rank(self.src_rank);
        view.set_src_port(self.src_port);
        view.set_dst_port(self.dst_port);
        view.set_nonce_i(&self.nonce_i);
    }
}

/// A parsed Challenge; `params_r` borrows from the parsed buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChallengeRepr<'a> {
    /// Whether the responder takes the connection.
    pub status: ChallengeStatus,
    /// The responder's fresh nonce (zero in a rejection).
    pub nonce_r: [u8; NONCE_LEN],
    /// The responder's MAC (zero in a rejection).
    pub mac_r: [u8; MAC_LEN],
    /// The responder's transport parameters, at most [`MAX_PARAMS_LEN`] bytes.
    pub params_r: &'a [u8],
}

impl<'a> ChallengeRepr<'a> {
    /// Parses a (checked or unchecked) view.
    ///
    /// # Errors
    /// Any [`WireError`] from [`Challenge::check_len`], [`WireError::UnknownStatus`],
    /// [`WireError::NonZeroReserved`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &Challenge<&'a T>) -> Result<Self, WireError> {
        view.check_len()?;
        let status =
            ChallengeStatus::from_code(view.status_code()).ok_or(WireError::UnknownStatus {
                field: "challenge.status",
                actual: view.status_code(),
            })?;
        check_reserved("challenge.reserved", view.reserved())?;
        Ok(Self {
            status,
            nonce_r: view.nonce_r(),
            mac_r: view.mac_r(),
            params_r: view.params_r(),
        })
    }

    /// The length of the emitted message in bytes.
    pub const fn buffer_len(&self) -> usize {
        CHALLENGE_FIXED_LEN + self.params_r.len()
    }

    /// Writes the whole message into `view`.
    ///
    /// # Panics
    /// If the view's buffer is shorter than [`ChallengeRepr::buffer_len`], or `params_r` is
    /// longer than [`MAX_PARAMS_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut Challenge<T>) {
        assert!(self.params_r.len() <= MAX_PARAMS_LEN, "params_r too long");
        view.fill_prefix(self.params_r.len());
        view.set_status(self.status);
        view.set_nonce_r(&self.nonce_r);
        view.set_mac_r(&self.mac_r);
        let bytes = view.buffer.as_mut();
        bytes[field::CHALLENGE_PARAMS_R.start..self.buffer_len()].copy_from_slice(self.params_r);
    }
}

/// A parsed Proof; `params_i` borrows from the parsed buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProofRepr<'a> {
    /// The initiator's MAC.
    pub mac_i: [u8; MAC_LEN],
    /// The initiator's transport parameters, at most [`MAX_PARAMS_LEN`] bytes.
    pub params_i: &'a [u8],
}

impl<'a> ProofRepr<'a> {
    /// Parses a (checked or unchecked) view.
    ///
    /// # Errors
    /// Any [`WireError`] from [`Proof::check_len`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &Proof<&'a T>) -> Result<Self, WireError> {
        view.check_len()?;
        Ok(Self {
            mac_i: view.mac_i(),
            params_i: view.params_i(),
        })
    }

    /// The length of the emitted message in bytes.
    pub const fn buffer_len(&self) -> usize {
        PROOF_FIXED_LEN + self.params_i.len()
    }

    /// Writes the whole message into `view`.
    ///
    /// # Panics
    /// If the view's buffer is shorter than [`ProofRepr::buffer_len`], or `params_i` is longer
    /// than [`MAX_PARAMS_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut Proof<T>) {
        assert!(self.params_i.len() <= MAX_PARAMS_LEN, "params_i too long");
        view.fill_prefix(self.params_i.len());
        view.set_mac_i(&self.mac_i);
        let bytes = view.buffer.as_mut();
        bytes[field::PROOF_PARAMS_I.start..self.buffer_len()].copy_from_slice(self.params_i);
    }
}

/// A parsed Verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VerdictRepr {
    /// Whether the proof was accepted.
    pub status: VerdictStatus,
    /// The responder's confirmation MAC.
    pub mac_v: [u8; MAC_LEN],
}

impl VerdictRepr {
    /// Parses a (checked or unchecked) view.
    ///
    /// # Errors
    /// Any [`WireError`] from [`Verdict::check_len`], [`WireError::UnknownStatus`],
    /// [`WireError::NonZeroReserved`].
    pub fn parse<T: AsRef<[u8]>>(view: &Verdict<T>) -> Result<Self, WireError> {
        view.check_len()?;
        let status =
            VerdictStatus::from_code(view.status_code()).ok_or(WireError::UnknownStatus {
                field: "verdict.status",
                actual: view.status_code(),
            })?;
        check_reserved("verdict.reserved", view.reserved())?;
        Ok(Self {
            status,
            mac_v: view.mac_v(),
        })
    }

    /// The length of the emitted message in bytes.
    pub const fn buffer_len(&self) -> usize {
        VERDICT_LEN
    }

    /// Writes the whole message into `view`.
    ///
    /// # Panics
    /// If the view's buffer is shorter than [`VerdictRepr::buffer_len`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut Verdict<T>) {
        view.fill_prefix();
        view.set_status(self.status);
        view.set_mac_v(&self.mac_v);
    }
}

/// Checks a whole message of `kind` whose fixed part is described by `fields` (after the
/// prefix), followed by at most `max_params_len` bytes of params. The order of the checks is
/// part of the contract (see the module doc).
fn check_message(
    bytes: &[u8],
    kind: MessageKind,
    fields: &[(&'static str, usize)],
    max_params_len: usize,
) -> Result<(), WireError> {
    check_fields(bytes, PREFIX_FIELDS)?;
    check_magic(bytes)?;
    let version = bytes[field::VERSION];
    if version != VERSION {
        return Err(WireError::UnsupportedVersion {
            expected: VERSION,
            actual: version,
        });
    }
    let code = bytes[field::KIND];
    let actual_kind =
        MessageKind::from_code(code).ok_or(WireError::UnknownKind { actual: code })?;
    if actual_kind != kind {
        return Err(WireError::WrongKind {
            expected: kind,
            actual: actual_kind,
        });
    }
    check_fields(bytes, fields)?;
    let declared = usize::from(read_u16(bytes, field::LENGTH));
    if declared != bytes.len() {
        return Err(WireError::LengthMismatch {
            declared,
            actual: bytes.len(),
        });
    }
    // check_fields passed, so the last field's end is within the buffer.
    let fixed_len = fields.last().map_or(PREFIX_LEN, |&(_, end)| end);
    let max = fixed_len + max_params_len;
    if bytes.len() > max {
        return Err(WireError::TooLong {
            message: kind,
            max,
            actual: bytes.len(),
        });
    }
    Ok(())
}

/// Fails with the first field of `fields` that ends beyond the buffer.
fn check_fields(bytes: &[u8], fields: &[(&'static str, usize)]) -> Result<(), WireError> {
    match fields.iter().find(|&&(_, end)| end > bytes.len()) {
        Some(&(name, end)) => Err(WireError::Truncated {
            field: name,
            needed: end,
            actual: bytes.len(),
        }),
        None => Ok(()),
    }
}

/// Checks the magic; `bytes` holds at least a prefix.
fn check_magic(bytes: &[u8]) -> Result<(), WireError> {
    let magic: [u8; 4] = read_array(bytes, field::MAGIC);
    if magic == MAGIC {
        Ok(())
    } else {
        Err(WireError::BadMagic { actual: magic })
    }
}

fn check_reserved(name: &'static str, value: u32) -> Result<(), WireError> {
    if value == 0 {
        Ok(())
    } else {
        Err(WireError::NonZeroReserved {
            field: name,
            actual: value,
        })
    }
}

/// Copies `bytes[range]` into an array; `range` must be `N` long and inside `bytes`.
fn read_array<const N: usize>(bytes: &[u8], range: Range<usize>) -> [u8; N] {
    debug_assert_eq!(range.len(), N);
    let mut out = [0u8; N];
    out.copy_from_slice(&bytes[range]);
    out
}

fn read_u16(bytes: &[u8], range: Range<usize>) -> u16 {
    u16::from_be_bytes(read_array(bytes, range))
}

/// Reads a 3-byte reserved field as a number.
fn read_reserved(bytes: &[u8], range: Range<usize>) -> u32 {
    let [a, b, c]: [u8; 3] = read_array(bytes, range);
    u32::from_be_bytes([0, a, b, c])
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests unwrap: a panic is a failed test.
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn nonce_fixture() -> [u8; 32] {
        core::array::from_fn(|index| 0x40 + index as u8)
    }

    fn hello_fixture_bytes() -> Vec<u8> {
        let mut bytes = vec![b'Q', b'V', b'H', b'S', 1, 1, 0, 56];
        bytes.extend_from_slice(&[0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]);
        bytes.extend_from_slice(&[0, 0, 0, 7]);
        bytes.extend_from_slice(&[0x01, 0x02, 0x03, 0x04]);
        bytes.extend_from_slice(&nonce_fixture());
        bytes
    }

    fn hello_fixture_repr() -> HelloRepr {
        HelloRepr {
            job_id: 0x0123_4567_89ab_cdef,
            src_rank: 7,
            src_port: 0x0102,
            dst_port: 0x0304,
            nonce_i: nonce_fixture(),
        }
    }

    fn challenge_fixture_bytes() -> Vec<u8> {
        let mut bytes = vec![b'Q', b'V', b'H', b'S', 1, 2, 0, 79, 0, 0, 0, 0];
        bytes.extend_from_slice(&[0x11; 32]);
        bytes.extend_from_slice(&[0x22; 32]);
        bytes.extend_from_slice(b"abc");
        bytes
    }

    fn proof_fixture_bytes() -> Vec<u8> {
        let mut bytes = vec![b'Q', b'V', b'H', b'S', 1, 3, 0, 42];
        bytes.extend_from_slice(&[0x33; 32]);
        bytes.extend_from_slice(b"xy");
        bytes
    }

    fn verdict_fixture_bytes() -> [u8; 44] {
        let mut bytes = [0x44; 44];
        bytes[..12].copy_from_slice(&[b'Q', b'V', b'H', b'S', 1, 4, 0, 44, 1, 0, 0, 0]);
        bytes
    }

    #[test]
    fn hello_fixture_parses_and_emits() {
        let bytes = hello_fixture_bytes();
        let view = Hello::new_checked(&bytes[..]).unwrap();
        assert_eq!(HelloRepr::parse(&view).unwrap(), hello_fixture_repr());

        let repr = hello_fixture_repr();
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Hello::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
    }

    #[test]
    fn challenge_fixture_parses_and_emits() {
        let bytes = challenge_fixture_bytes();
        let view = Challenge::new_checked(&bytes[..]).unwrap();
        let repr = ChallengeRepr::parse(&view).unwrap();
        let expected = ChallengeRepr {
            status: ChallengeStatus::Ok,
            nonce_r: [0x11; 32],
            mac_r: [0x22; 32],
            params_r: b"abc",
        };
        assert_eq!(repr, expected);
        assert_eq!(view.authenticated_parts(), [&bytes[..44], &bytes[76..]]);

        let mut out = vec![0xffu8; expected.buffer_len()];
        expected.emit(&mut Challenge::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
    }

    #[test]
    fn proof_fixture_parses_and_emits() {
        let bytes = proof_fixture_bytes();
        let view = Proof::new_checked(&bytes[..]).unwrap();
        let expected = ProofRepr {
            mac_i: [0x33; 32],
            params_i: b"xy",
        };
        assert_eq!(ProofRepr::parse(&view).unwrap(), expected);
        assert_eq!(view.authenticated_parts(), [&bytes[..8], &b"xy"[..]]);

        let mut out = vec![0u8; expected.buffer_len()];
        expected.emit(&mut Proof::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
    }

    #[test]
    fn verdict_fixture_parses_and_emits() {
        let bytes = verdict_fixture_bytes();
        let view = Verdict::new_checked(&bytes[..]).unwrap();
        let expected = VerdictRepr {
            status: VerdictStatus::BadProof,
            mac_v: [0x44; 32],
        };
        assert_eq!(VerdictRepr::parse(&view).unwrap(), expected);
        assert_eq!(view.authenticated_parts(), [&bytes[..12], &[][..]]);

        let mut out = [0xffu8; VERDICT_LEN];
        expected.emit(&mut Verdict::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
    }

    #[test]
    fn prefix_view_reads_fields_of_foreign_version() {
        let mut bytes = hello_fixture_bytes();
        bytes[field::VERSION] = 9;
        let prefix = MessagePrefix::new_checked(&bytes[..PREFIX_LEN]).unwrap();
        assert_eq!(prefix.version(), 9);
        assert_eq!(prefix.kind(), Ok(MessageKind::Hello));
        assert_eq!(prefix.length(), HELLO_LEN);
        assert_eq!(prefix.magic(), MAGIC);
    }

    #[test]
    fn short_buffers_name_the_missing_field() {
        let bytes = hello_fixture_bytes();
        assert_eq!(
            Hello::new_checked(&bytes[..3]),
            Err(WireError::Truncated {
                field: "prefix.magic",
                needed: 4,
                actual: 3
            })
        );
        assert_eq!(
            Hello::new_checked(&bytes[..7]),
            Err(WireError::Truncated {
                field: "prefix.length",
                needed: 8,
                actual: 7
            })
        );
        assert_eq!(
            Hello::new_checked(&bytes[..40]),
            Err(WireError::Truncated {
                field: "hello.nonce_i",
                needed: 56,
                actual: 40
            })
        );
        assert!(Hello::new_checked(&[][..]).is_err());
    }

    #[test]
    fn prefix_errors_come_in_contract_order() {
        let mut bytes = hello_fixture_bytes();
        bytes[0] = b'X';
        assert_eq!(
            Hello::new_checked(&bytes[..]),
            Err(WireError::BadMagic { actual: *b"XVHS" })
        );

        // A foreign version is reported from the prefix alone, before any length check.
        let mut bytes = hello_fixture_bytes();
        bytes[field::VERSION] = 2;
        let expected = Err(WireError::UnsupportedVersion {
            expected: 1,
            actual: 2,
        });
        assert_eq!(Hello::new_checked(&bytes[..]), expected);
        assert_eq!(Hello::new_checked(&bytes[..PREFIX_LEN]), expected);

        let mut bytes = hello_fixture_bytes();
        bytes[field::KIND] = 77;
        assert_eq!(
            Hello::new_checked(&bytes[..]),
            Err(WireError::UnknownKind { actual: 77 })
        );

        let bytes = hello_fixture_bytes();
        assert_eq!(
            Challenge::new_checked(&bytes[..]),
            Err(WireError::WrongKind {
                expected: MessageKind::Challenge,
                actual: MessageKind::Hello
            })
        );
    }

    #[test]
    fn length_field_must_match_buffer() {
        let mut bytes = hello_fixture_bytes();
        bytes.push(0);
        assert_eq!(
            Hello::new_checked(&bytes[..]),
            Err(WireError::LengthMismatch {
                declared: 56,
                actual: 57
            })
        );
        bytes[field::LENGTH].copy_from_slice(&57u16.to_be_bytes());
        assert_eq!(
            Hello::new_checked(&bytes[..]),
            Err(WireError::TooLong {
                message: MessageKind::Hello,
                max: 56,
                actual: 57
            })
        );
    }

    #[test]
    fn params_longer_than_limit_are_rejected() {
        let params = [7u8; MAX_PARAMS_LEN + 1];
        let mut bytes = vec![0u8; PROOF_FIXED_LEN + params.len()];
        Proof::new_unchecked(&mut bytes[..]).fill_prefix(params.len());
        bytes[PROOF_FIXED_LEN..].copy_from_slice(&params);
        assert_eq!(
            Proof::new_checked(&bytes[..]),
            Err(WireError::TooLong {
                message: MessageKind::Proof,
                max: PROOF_FIXED_LEN + MAX_PARAMS_LEN,
                actual: PROOF_FIXED_LEN + MAX_PARAMS_LEN + 1
            })
        );
        // Exactly at the limit is fine.
        let repr = ProofRepr {
            mac_i: [1; 32],
            params_i: &params[..MAX_PARAMS_LEN],
        };
        let mut out = [0u8; MAX_MESSAGE_LEN];
        let out = &mut out[..repr.buffer_len()];
        repr.emit(&mut Proof::new_unchecked(&mut *out));
        assert_eq!(
            ProofRepr::parse(&Proof::new_checked(&*out).unwrap()),
            Ok(repr)
        );
    }

    #[test]
    fn semantic_checks_in_parse() {
        let mut bytes = challenge_fixture_bytes();
        bytes[field::CHALLENGE_STATUS] = 200;
        let view = Challenge::new_checked(&bytes[..]).unwrap();
        assert_eq!(
            ChallengeRepr::parse(&view),
            Err(WireError::UnknownStatus {
                field: "challenge.status",
                actual: 200
            })
        );

        let mut bytes = challenge_fixture_bytes();
        bytes[field::CHALLENGE_RESERVED.start + 2] = 5;
        let view = Challenge::new_checked(&bytes[..]).unwrap();
        assert_eq!(
            ChallengeRepr::parse(&view),
            Err(WireError::NonZeroReserved {
                field: "challenge.reserved",
                actual: 5
            })
        );

        let mut bytes = verdict_fixture_bytes();
        bytes[field::VERDICT_STATUS] = 2;
        assert_eq!(
            VerdictRepr::parse(&Verdict::new_unchecked(&bytes[..])),
            Err(WireError::UnknownStatus {
                field: "verdict.status",
                actual: 2
            })
        );
        let mut bytes = verdict_fixture_bytes();
        bytes[field::VERDICT_RESERVED.start] = 1;
        assert_eq!(
            VerdictRepr::parse(&Verdict::new_unchecked(&bytes[..])),
            Err(WireError::NonZeroReserved {
                field: "verdict.reserved",
                actual: 0x01_0000
            })
        );
    }

    #[test]
    fn parse_on_unchecked_short_view_errors_instead_of_panicking() {
        let bytes = [b'Q', b'V', b'H', b'S', 1, 2, 0, 8];
        assert!(ChallengeRepr::parse(&Challenge::new_unchecked(&bytes[..])).is_err());
        assert!(HelloRepr::parse(&Hello::new_unchecked(&bytes[..])).is_err());
    }

    #[test]
    fn codes_round_trip() {
        for code in 0..=u8::MAX {
            if let Some(kind) = MessageKind::from_code(code) {
                assert_eq!(kind.code(), code);
            }
            if let Some(status) = ChallengeStatus::from_code(code) {
                assert_eq!(status.code(), code);
            }
            if let Some(status) = VerdictStatus::from_code(code) {
                assert_eq!(status.code(), code);
            }
        }
        assert_eq!(MessageKind::from_code(0), None);
        assert_eq!(MessageKind::Proof.to_string(), "Proof");
    }

    fn challenge_status_strategy() -> impl Strategy<Value = ChallengeStatus> {
        (0u8..5).prop_map(|code| ChallengeStatus::from_code(code).unwrap())
    }

    fn params_strategy() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 0..=MAX_PARAMS_LEN)
    }

    /// Runs every view and parser over `bytes`; whenever one accepts, emitting the repr must
    /// give back the same bytes (the encoding is canonical).
    fn parse_everything(bytes: &[u8]) {
        if let Ok(prefix) = MessagePrefix::new_checked(bytes) {
            let _ = (prefix.version(), prefix.kind(), prefix.length());
        }
        if let Ok(repr) = HelloRepr::parse(&Hello::new_unchecked(bytes)) {
            let mut out = [0u8; HELLO_LEN];
            repr.emit(&mut Hello::new_unchecked(&mut out[..]));
            assert_eq!(&out[..], bytes);
        }
        if let Ok(repr) = ChallengeRepr::parse(&Challenge::new_unchecked(bytes)) {
            let mut out = [0u8; MAX_MESSAGE_LEN];
            let out = &mut out[..repr.buffer_len()];
            repr.emit(&mut Challenge::new_unchecked(&mut *out));
            assert_eq!(&*out, bytes);
        }
        if let Ok(repr) = ProofRepr::parse(&Proof::new_unchecked(bytes)) {
            let mut out = [0u8; MAX_MESSAGE_LEN];
            let out = &mut out[..repr.buffer_len()];
            repr.emit(&mut Proof::new_unchecked(&mut *out));
            assert_eq!(&*out, bytes);
        }
        if let Ok(repr) = VerdictRepr::parse(&Verdict::new_unchecked(bytes)) {
            let mut out = [0u8; VERDICT_LEN];
            repr.emit(&mut Verdict::new_unchecked(&mut out[..]));
            assert_eq!(&out[..], bytes);
        }
    }

    proptest! {
        #[test]
        fn hello_round_trips(
            job_id: u64, src_rank: u32, src_port: u16, dst_port: u16, nonce_i: [u8; 32]
        ) {
            let repr = HelloRepr { job_id, src_rank, src_port, dst_port, nonce_i };
            let mut out = [0u8; HELLO_LEN];
            repr.emit(&mut Hello::new_unchecked(&mut out[..]));
            let view = Hello::new_checked(&out[..]).unwrap();
            prop_assert_eq!(HelloRepr::parse(&view), Ok(repr));
        }

        #[test]
        fn challenge_round_trips(
            status in challenge_status_strategy(),
            nonce_r: [u8; 32],
            mac_r: [u8; 32],
            params_r in params_strategy(),
        ) {
            let repr = ChallengeRepr { status, nonce_r, mac_r, params_r: &params_r };
            let mut out = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Challenge::new_unchecked(&mut out[..]));
            let view = Challenge::new_checked(&out[..]).unwrap();
            prop_assert_eq!(ChallengeRepr::parse(&view), Ok(repr));
        }

        #[test]
        fn proof_round_trips(mac_i: [u8; 32], params_i in params_strategy()) {
            let repr = ProofRepr { mac_i, params_i: &params_i };
            let mut out = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Proof::new_unchecked(&mut out[..]));
            let view = Proof::new_checked(&out[..]).unwrap();
            prop_assert_eq!(ProofRepr::parse(&view), Ok(repr));
        }

        #[test]
        fn verdict_round_trips(accepted: bool, mac_v: [u8; 32]) {
            let status = if accepted { VerdictStatus::Accepted } else { VerdictStatus::BadProof };
            let repr = VerdictRepr { status, mac_v };
            let mut out = [0u8; VERDICT_LEN];
            repr.emit(&mut Verdict::new_unchecked(&mut out[..]));
            prop_assert_eq!(VerdictRepr::parse(&Verdict::new_checked(&out[..]).unwrap()), Ok(repr));
        }

        #[test]
        fn parse_never_panics_on_arbitrary_bytes(
            bytes in proptest::collection::vec(any::<u8>(), 0..400)
        ) {
            parse_everything(&bytes);
        }

        /// Arbitrary bytes almost never get past the magic, so also try bodies behind a valid
        /// prefix of every kind and a matching length.
        #[test]
        fn parse_never_panics_behind_valid_prefix(
            kind in 1u8..=4,
            body in proptest::collection::vec(any::<u8>(), 0..400),
        ) {
            let mut bytes = vec![0u8; PREFIX_LEN];
            bytes[field::MAGIC].copy_from_slice(&MAGIC);
            bytes[field::VERSION] = VERSION;
            bytes[field::KIND] = kind;
            bytes.extend_from_slice(&body);
            let length = u16::try_from(bytes.len()).unwrap();
            bytes[field::LENGTH].copy_from_slice(&length.to_be_bytes());
            parse_everything(&bytes);
        }
    }
}
