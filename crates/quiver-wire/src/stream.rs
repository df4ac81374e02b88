//! Message framing on byte streams (the tcp transport), after the job-key handshake.
//!
//! A stream is reliable and ordered by itself, so a frame only has to say where a message
//! ends. Every message is one 16-byte header followed by its payload:
//!
//! ```text
//!  0       1       2       3       4               8                              16
//! +-------+-------+-------+-------+---------------+-------------------------------+
//! |  'Q'  |  'S'  |version| kind  |  reserved 0   |        length (u64, LE)       |
//! +-------+-------+-------+-------+---------------+-------------------------------+
//! ```
//!
//! `kind` is [`StreamKind`]: a message (`length` payload bytes follow), a graceful close
//! (`length` is 0, nothing follows; the sender sends nothing after it), or a tag (`length`
//! is the tag of the messages that follow, until the next tag frame; nothing follows; a
//! stream without one carries tag 0, and a sender writes one only before a message whose
//! tag differs from the last one it announced), or an active-message announcement (`am`:
//! like a tag frame, `length` is the handler id in its high 32 bits and the length of the
//! header that starts each message in its low 32 bits; the messages that follow are
//! active messages until the next tag frame). Integers are
//! little-endian. A header that fails any check means the peer does not speak this
//! protocol: the connection is closed with an error.
//!
//! Layer: quiver-wire, the bottom. Owns the header layout only; no I/O, no allocation.

/// Why a stream header did not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// Fewer than [`HEADER_LEN`] bytes.
    #[error("stream header truncated: {actual} of 16 bytes")]
    Truncated {
        /// Bytes given.
        actual: usize,
    },
    /// The first two bytes are not [`MAGIC`].
    #[error("not a quiver stream header (bad magic)")]
    BadMagic,
    /// Another framing version.
    #[error("stream framing version mismatch: ours {ours}, theirs {theirs}")]
    VersionMismatch {
        /// [`VERSION`].
        ours: u8,
        /// The peer's.
        theirs: u8,
    },
    /// Unknown kind byte.
    #[error("unknown stream header kind {0}")]
    UnknownKind(u8),
    /// Reserved bytes set, or a close with a length.
    #[error("stream header has reserved bits set")]
    NonZeroReserved,
}

/// Length of a stream header.
pub const HEADER_LEN: usize = 16;
/// The first two bytes of every header.
pub const MAGIC: [u8; 2] = *b"QS";
/// Version of the stream framing.
pub const VERSION: u8 = 1;

/// What a stream header announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    /// A message of `length` bytes follows.
    Message,
    /// The sender closes the connection gracefully.
    Close,
    /// The messages that follow carry the tag in `length`.
    Tag,
    /// The messages that follow are active messages: `length` is the handler id (high 32
    /// bits) and header length (low 32 bits). Sticky like [`StreamKind::Tag`], which ends it.
    Am,
}

impl StreamKind {
    /// The wire code.
    pub const fn code(self) -> u8 {
        match self {
            StreamKind::Message => 1,
            StreamKind::Close => 2,
            StreamKind::Tag => 3,
            StreamKind::Am => 4,
        }
    }

    /// The kind of a wire code.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(StreamKind::Message),
            2 => Some(StreamKind::Close),
            3 => Some(StreamKind::Tag),
            4 => Some(StreamKind::Am),
            _ => None,
        }
    }
}

/// A parsed stream header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamHeader {
    /// What follows.
    pub kind: StreamKind,
    /// Payload bytes that follow (0 for [`StreamKind::Close`]); the tag for
    /// [`StreamKind::Tag`] (no payload follows).
    pub length: u64,
}

impl StreamHeader {
    /// A message header.
    pub const fn message(length: u64) -> Self {
        StreamHeader {
            kind: StreamKind::Message,
            length,
        }
    }

    /// A close header.
    pub const fn close() -> Self {
        StreamHeader {
            kind: StreamKind::Close,
            length: 0,
        }
    }

    /// A tag header: the messages that follow carry `tag`.
    pub const fn tag(tag: u64) -> Self {
        StreamHeader {
            kind: StreamKind::Tag,
            length: tag,
        }
    }

    /// An active-message header: the messages that follow are active messages with `word`
    /// (handler id and header length, see [`StreamKind::Am`]).
    pub const fn am(word: u64) -> Self {
        StreamHeader {
            kind: StreamKind::Am,
            length: word,
        }
    }

    /// The 16 header bytes.
    pub fn emit(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[0..2].copy_from_slice(&MAGIC);
        out[2] = VERSION;
        out[3] = self.kind.code();
        out[8..16].copy_from_slice(&self.length.to_le_bytes());
        out
    }

    /// Parses the first [`HEADER_LEN`] bytes of `bytes`.
    ///
    /// # Errors
    /// [`StreamError::Truncated`] if fewer than 16 bytes are given, [`StreamError::BadMagic`],
    /// [`StreamError::VersionMismatch`], [`StreamError::UnknownKind`], or
    /// [`StreamError::NonZeroReserved`] (also for a close with a length).
    pub fn parse(bytes: &[u8]) -> Result<StreamHeader, StreamError> {
        let Some(h) = bytes.get(..HEADER_LEN) else {
            return Err(StreamError::Truncated {
                actual: bytes.len(),
            });
        };
        if h[0..2] != MAGIC {
            return Err(StreamError::BadMagic);
        }
        if h[2] != VERSION {
            return Err(StreamError::VersionMismatch {
                ours: VERSION,
                theirs: h[2],
            });
        }
        let kind = StreamKind::from_code(h[3]).ok_or(StreamError::UnknownKind(h[3]))?;
        if h[4..8] != [0; 4] {
            return Err(StreamError::NonZeroReserved);
        }
        let mut len = [0u8; 8];
        len.copy_from_slice(&h[8..16]);
        let length = u64::from_le_bytes(len);
        if kind == StreamKind::Close && length != 0 {
            return Err(StreamError::NonZeroReserved);
        }
        Ok(StreamHeader { kind, length })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fixture() {
        let bytes = StreamHeader::message(0x0102_0304_0506_0708).emit();
        assert_eq!(
            bytes,
            [b'Q', b'S', 1, 1, 0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1]
        );
        assert_eq!(
            StreamHeader::close().emit(),
            [b'Q', b'S', 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            StreamHeader::tag(u64::MAX - 1).emit(),
            [b'Q', b'S', 1, 3, 0, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]
        );
        let am = StreamHeader::am(9 << 32 | 8);
        assert_eq!(
            am.emit(),
            [b'Q', b'S', 1, 4, 0, 0, 0, 0, 8, 0, 0, 0, 9, 0, 0, 0]
        );
        assert_eq!(StreamHeader::parse(&am.emit()), Ok(am));
    }

    #[test]
    fn rejects() {
        let good = StreamHeader::message(5).emit();
        assert!(matches!(
            StreamHeader::parse(&good[..15]),
            Err(StreamError::Truncated { .. })
        ));
        let mut b = good;
        b[0] = b'X';
        assert_eq!(StreamHeader::parse(&b), Err(StreamError::BadMagic));
        let mut b = good;
        b[2] = 9;
        assert!(matches!(
            StreamHeader::parse(&b),
            Err(StreamError::VersionMismatch { theirs: 9, .. })
        ));
        let mut b = good;
        b[3] = 7;
        assert_eq!(StreamHeader::parse(&b), Err(StreamError::UnknownKind(7)));
        let mut b = good;
        b[5] = 1;
        assert_eq!(StreamHeader::parse(&b), Err(StreamError::NonZeroReserved));
        let mut b = StreamHeader::close().emit();
        b[8] = 1;
        assert_eq!(StreamHeader::parse(&b), Err(StreamError::NonZeroReserved));
    }

    proptest! {
        #[test]
        fn round_trip(length in any::<u64>()) {
            let h = StreamHeader::message(length);
            prop_assert_eq!(StreamHeader::parse(&h.emit()), Ok(h));
            let t = StreamHeader::tag(length);
            prop_assert_eq!(StreamHeader::parse(&t.emit()), Ok(t));
        }

        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(h) = StreamHeader::parse(&bytes) {
                prop_assert_eq!(&h.emit()[..], &bytes[..HEADER_LEN]);
            }
        }
    }
}
