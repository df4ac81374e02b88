//! The header of one message in a reliable connection's byte stream (`docs/protocol.md`,
//! "Datagram frames", the stream): an 8-byte length prefix, and for a tagged message the
//! 8-byte tag after it.
//!
//! ```text
//! untagged:  | prefix u64 LE: bit 63 = 0, bits 0..63 = payload length | payload |
//! tagged:    | prefix u64 LE: bit 63 = 1, bits 0..63 = payload length | tag u64 LE | payload |
//! ```
//!
//! Tag 0 travels untagged (no tag bytes), so an untagged message keeps the bytes it had
//! before tags. To the frames (Stream frames' raw bytes, a Data frame's `message_len`,
//! `fragment_offset` and the 8 prefix bytes its first fragment covers) a tagged message's
//! tag is the first 8 bytes of its body: frames never look inside a body, so they cut and
//! place a tagged message exactly as an untagged one of 8 more bytes. A Data frame's
//! `message_len` is the raw prefix (bit 63 included), which the receiver writes back as
//! the prefix.
//!
//! Every 64-bit value is a valid prefix (the payload length takes the low 63 bits), so
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
/// The longest payload a prefix can announce.
pub const MAX_MESSAGE_PAYLOAD: u64 = MESSAGE_TAGGED - 1;

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

    /// The raw value.
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// Whether a tag follows the prefix.
    pub const fn tagged(self) -> bool {
        self.0 & MESSAGE_TAGGED != 0
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
    /// 2^63 + 7: no overflow).
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
            assert_eq!(
                MessagePrefix::new(prefix.payload_len(), u64::from(prefix.tagged())),
                prefix
            );
            assert!(prefix.body_len() >= prefix.payload_len());
        }
        assert_eq!(
            MessagePrefix::from_raw(u64::MAX).body_len(),
            MAX_MESSAGE_PAYLOAD + 8
        );
    }
}
