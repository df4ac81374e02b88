//! What a connection's sticky tag record announces for the messages that follow it
//! ([`WireTag`]): a tag, or that they are active messages for one handler with a header
//! of one length (decision 0076 for tags, 0077 for active messages).

/// The tag state of a connection's messages: a plain tag (`am` false), or an active
/// message's word (`am` true: the handler id in the high 32 bits, the length of the header
/// that starts each message in the low 32 bits). Shm announces it with a `Tag` or `Am`
/// ring record, tcp with a `Tag` or `Am` frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WireTag {
    /// The tag, or the active message's word.
    pub(crate) value: u64,
    /// Whether the messages are active messages.
    pub(crate) am: bool,
}

impl WireTag {
    /// A plain tag.
    #[inline]
    pub(crate) const fn tag(value: u64) -> WireTag {
        WireTag { value, am: false }
    }

    /// Active messages for handler `id` whose header is `header_len` bytes.
    #[inline]
    pub(crate) const fn am(id: u16, header_len: u32) -> WireTag {
        WireTag {
            value: (id as u64) << 32 | header_len as u64,
            am: true,
        }
    }

    /// An active message's handler id (as the peer sent it: it may exceed `u16`) and
    /// header length.
    #[inline]
    pub(crate) const fn am_parts(self) -> (u32, u32) {
        ((self.value >> 32) as u32, self.value as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::WireTag;

    #[test]
    fn am_word_round_trips() {
        let t = WireTag::am(u16::MAX, u32::MAX);
        assert!(t.am);
        assert_eq!(t.am_parts(), (u32::from(u16::MAX), u32::MAX));
        assert_ne!(t, WireTag::tag(t.value));
        assert_eq!(WireTag::default(), WireTag::tag(0));
    }
}
