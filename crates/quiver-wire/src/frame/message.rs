//! The header of one message in a reliable connection's byte stream (`docs/protocol.md`,
//! "Datagram frames", the stream): an 8-byte length prefix, and for a tagged message the
//! 8-byte tag after it.
//!
//! ```text
//! untagged:  | prefix u64 LE: bits 63, 62 = 0, bits 0..62 = payload length | payload |
//! tagged:    | prefix u64 LE: bit 63 = 1, bit 62 = 0, bits 0..62 = length | tag u64 LE | payload |
//! active:    | prefix u64 LE: bits 63, 62 = 1, bits 0..62 = length | word u64 LE | payload |
//! ```
//!
//! An active message (bit 62, only with bit 63) carries in place of the tag the word that
//! names its handler and the length of the header that starts its payload (the endpoint's
//! `WireTag`); to the frames it is a tagged message.
//!
//! Tag 0 travels untagged (no tag bytes), so an untagged message keeps the bytes it had
//! before tags. To the frames (Stream frames' raw bytes, a Data frame's `message_len`,
//! `fragment_offset` and the 8 prefix bytes its first fragment covers) a tagged message's
//! tag is the first 8 bytes of its body: frames never look inside a body, so they cut and
//! place a tagged message exactly as an untagged one of 8 more bytes. A Data frame's
//! `message_len` is the raw prefix (bit 63 included), which the receiver writes back as
//! the prefix.
//!
//! Every 64-bit value is a valid prefix (the payload length takes the low 62 bits), so
//! parsing cannot fail: no length check here; the receiver bounds the payload length by
//! its own limit before anything is sized by it. Branch-free on purpose: the untagged
//! message's path pays a mask and a shift, not a test.
//!
//! The frame layouts did not change, nor did the frame version (6): untagged messages
//! travel as before, and code from before tags (lengths below 2^40) reads a tagged
//! prefix as a length above 2^63, which it refuses as a message over its limit.

/// Bytes of the length prefix every message starts with.
pub const MESSAGE_PREFIX_LEN: u64 = 8;
/// Bytes of the tag after the prefix of a tagged message.
pub const MESSAGE_TAG_LEN: u64 = 8;
/// The prefix bit that says a tag follows.
pub const MESSAGE_TAGGED: u64 = 1 << 63;
/// The prefix bit that says the word after the prefix names an active message's handler
/// (set only with [`MESSAGE_TAGGED`]).
pub const MESSAGE_ACTIVE: u64 = 1 << 62;
/// The longest payload a prefix can announce.
pub const MAX_MESSAGE_PAYLOAD: u64 = MESSAGE_ACTIVE - 1;

/// A message's length prefix (module docs): its raw 64-bit value, read through
/// accessors that cannot fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessagePrefix(u64);

impl MessagePrefix {
    /// The prefix as it travels (little-endian on the wire).
    pub const fn from_raw(raw: u64) -> Self {
        Self(raw)
    }

    /// The prefix of a message of `payload_len` bytes (at most [`MAX_MESSAGE_PAYLOAD`]:
    /// longer lengths are cut to their low 63 bits, so check first) with `tag`: tag 0
    /// travels untagged.
    pub const fn new(payload_len: u64, tag: u64) -> Self {
        let tagged = (tag != 0) as u64;
        Self((payload_len & MAX_MESSAGE_PAYLOAD) | (tagged << 63))
    }

    /// The prefix of an active message of `payload_len` bytes (cut as in
    /// [`MessagePrefix::new`]) whose handler `word` follows the prefix.
    pub const fn active(payload_len: u64) -> Self {
        Self((payload_len & MAX_MESSAGE_PAYLOAD) | MESSAGE_TAGGED | MESSAGE_ACTIVE)
    }

    /// [`MessagePrefix::active`] when `active`, else [`MessagePrefix::new`] with `tag`.
    pub const fn for_message(payload_len: u64, tag: u64, active: bool) -> Self {
        if active {
            Self::active(payload_len)
        } else {
            Self::new(payload_len, tag)
        }
    }

    /// The raw value.
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// Whether a tag follows the prefix.
    pub const fn tagged(self) -> bool {
        self.0 & MESSAGE_TAGGED != 0
    }

    /// Whether the word after the prefix names an active message's handler (not a tag).
    /// Bit 62 without bit 63 means nothing (no word follows): not an active message.
    pub const fn is_active(self) -> bool {
        self.0 & (MESSAGE_TAGGED | MESSAGE_ACTIVE) == MESSAGE_TAGGED | MESSAGE_ACTIVE
    }

    /// The payload's length (the tag not counted).
    pub const fn payload_len(self) -> u64 {
        self.0 & MAX_MESSAGE_PAYLOAD
    }

    /// Bytes between the prefix and the payload: 8 for a tagged message, else 0.
    pub const fn tag_len(self) -> u64 {
        (self.0 >> 63) * MESSAGE_TAG_LEN
    }

    /// Bytes of the whole header: prefix and tag.
    pub const fn header_len(self) -> u64 {
        MESSAGE_PREFIX_LEN + self.tag_len()
    }

    /// Bytes after the prefix as the frames see them: tag and payload (at most
    /// 2^62 + 7: no overflow).
    pub const fn body_len(self) -> u64 {
        self.payload_len() + self.tag_len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_untagged_prefix_is_the_length_alone() {
        let prefix = MessagePrefix::new(8, 0);
        assert_eq!(prefix.raw(), 8);
        assert!(!prefix.tagged());
        assert_eq!(prefix.payload_len(), 8);
        assert_eq!(prefix.header_len(), 8);
        assert_eq!(prefix.body_len(), 8);
        assert_eq!(prefix.raw().to_le_bytes(), [8, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn a_tagged_prefix_sets_bit_63_and_counts_the_tag_in_the_body() {
        let prefix = MessagePrefix::new(5, 0xABCD);
        assert_eq!(prefix.raw(), (1 << 63) | 5);
        assert_eq!(
            prefix.raw().to_le_bytes(),
            [5, 0, 0, 0, 0, 0, 0, 0x80],
            "bit 63 is the top bit of the last byte"
        );
        assert!(prefix.tagged());
        assert_eq!(prefix.payload_len(), 5);
        assert_eq!(prefix.tag_len(), 8);
        assert_eq!(prefix.header_len(), 16);
        assert_eq!(prefix.body_len(), 13);
        assert_eq!(MessagePrefix::new(0, 1).body_len(), 8);
    }

    #[test]
    fn every_raw_value_reads_back_unchanged() {
        for raw in [
            0,
            1,
            u64::MAX,
            MESSAGE_TAGGED,
            MAX_MESSAGE_PAYLOAD,
            0x8000_0000_0000_0010,
        ] {
            let prefix = MessagePrefix::from_raw(raw);
            assert_eq!(prefix.raw(), raw);
            let rebuilt = if prefix.is_active() {
                MessagePrefix::active(prefix.payload_len())
            } else {
                MessagePrefix::new(prefix.payload_len(), u64::from(prefix.tagged()))
            };
            if raw & (MESSAGE_TAGGED | MESSAGE_ACTIVE) != MESSAGE_ACTIVE {
                assert_eq!(rebuilt, prefix);
            }
            assert!(prefix.body_len() >= prefix.payload_len());
        }
        assert_eq!(
            MessagePrefix::from_raw(u64::MAX).body_len(),
            MAX_MESSAGE_PAYLOAD + 8
        );
    }

    #[test]
    fn an_active_prefix_sets_bits_63_and_62_and_reads_as_tagged() {
        let prefix = MessagePrefix::active(5);
        assert_eq!(prefix.raw(), (3 << 62) | 5);
        assert!(prefix.tagged() && prefix.is_active());
        assert_eq!((prefix.payload_len(), prefix.header_len()), (5, 16));
        assert!(!MessagePrefix::new(5, 9).is_active());
        // Bit 62 alone announces no word: neither tagged nor active, and the length
        // leaves it out.
        let stray = MessagePrefix::from_raw(MESSAGE_ACTIVE | 5);
        assert!(!stray.tagged() && !stray.is_active());
        assert_eq!(stray.payload_len(), 5);
    }
}
