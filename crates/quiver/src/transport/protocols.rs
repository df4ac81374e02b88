//! What a transport does with a message of each size, and why: the answer of
//! [`Endpoint::transport`](crate::Endpoint::transport), `QUIVER_PROTO_INFO=1` and
//! `quiver info --protocols`. Each transport's folder computes its own ranges from the
//! settings (`protocols.rs` there); `edge.rs` picks the transport's.

use crate::config::TransportKind;

/// One range of message sizes and how a transport carries messages of those sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolRange {
    /// Smallest message size of the range, in bytes.
    pub first: u64,
    /// Largest message size of the range, in bytes (`None`: no upper bound).
    pub last: Option<u64>,
    /// The protocol's short name (`short`, `eager`, `rendezvous`, `staged`, ...).
    pub protocol: &'static str,
    /// How messages of this range move, and which settings put the bounds where they are.
    pub why: String,
}

impl ProtocolRange {
    /// Whether a message of `size` bytes falls in this range.
    pub fn contains(&self, size: u64) -> bool {
        size >= self.first && self.last.is_none_or(|last| size <= last)
    }
}

/// Which transport carries a connection and what it does with each message size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportInfo {
    /// The transport.
    pub kind: TransportKind,
    /// Whether the medium itself delivers in order and without loss (shm, tcp); otherwise
    /// quiver's reliable protocol does (udp, mem).
    pub reliable: bool,
    /// Whether large messages move without a staging copy.
    pub zero_copy: bool,
    /// The protocols by message size: consecutive ranges from 0 bytes up, the last one
    /// without an upper bound.
    pub ranges: Vec<ProtocolRange>,
}

impl TransportInfo {
    /// The range a message of `size` bytes falls in.
    pub fn range_for(&self, size: u64) -> Option<&ProtocolRange> {
        self.ranges.iter().find(|range| range.contains(size))
    }
}

impl std::fmt::Display for TransportInfo {
    /// One line naming the transport, then one line per range:
    /// `  0 B .. 40 B  short  inline with ...`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{} ({}{}):",
            self.kind,
            if self.reliable {
                "reliable by itself"
            } else {
                "quiver's reliable protocol"
            },
            if self.zero_copy {
                ", large messages without a staging copy"
            } else {
                ""
            }
        )?;
        for range in &self.ranges {
            let last = range
                .last
                .map_or_else(|| "any".to_string(), |last| format!("{last} B"));
            writeln!(
                f,
                "  {:>10} B .. {last:<12} {:<16} {}",
                range.first, range.protocol, range.why
            )?;
        }
        Ok(())
    }
}

/// Builds consecutive ranges from (first byte, protocol, why) steps, each saying "from this
/// size on, this protocol": a range ends where the next begins. A step that starts at or
/// below the one before it replaces it (that range would be empty), so callers may list
/// thresholds that coincide, the one that wins last.
pub(crate) fn consecutive(steps: Vec<(u64, &'static str, String)>) -> Vec<ProtocolRange> {
    let mut ranges: Vec<ProtocolRange> = Vec::new();
    for (first, protocol, why) in steps {
        while ranges
            .last()
            .is_some_and(|previous| first <= previous.first)
        {
            ranges.pop();
        }
        if let Some(previous) = ranges.last_mut() {
            previous.last = Some(first - 1);
        }
        ranges.push(ProtocolRange {
            first,
            last: None,
            protocol,
            why,
        });
    }
    ranges
}

/// A size for the `why` texts: `256 KiB`, `1 MiB`, or `2032 B` when not a whole number of
/// KiB.
pub(crate) fn size_text(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_ranges_cover_every_size_once() {
        let ranges = consecutive(vec![
            (0, "a", String::new()),
            (41, "b", String::new()),
            (41, "c", String::new()),
            (100, "d", String::new()),
        ]);
        assert_eq!(ranges.len(), 3);
        assert_eq!((ranges[0].first, ranges[0].last), (0, Some(40)));
        assert_eq!((ranges[1].first, ranges[1].last), (41, Some(99)));
        assert_eq!(ranges[1].protocol, "c", "the later of two equal steps wins");
        assert_eq!((ranges[2].first, ranges[2].last), (100, None));
        let info = TransportInfo {
            kind: TransportKind::Shm,
            reliable: true,
            zero_copy: true,
            ranges,
        };
        assert_eq!(info.range_for(40).map(|r| r.protocol), Some("a"));
        assert_eq!(info.range_for(41).map(|r| r.protocol), Some("c"));
        assert_eq!(info.range_for(u64::MAX).map(|r| r.protocol), Some("d"));
        let text = info.to_string();
        assert!(text.starts_with("shm (reliable by itself"), "{text}");
        assert_eq!(text.lines().count(), 4, "{text}");
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(size_text(40), "40 B");
        assert_eq!(size_text(2032), "2032 B");
        assert_eq!(size_text(256 << 10), "256 KiB");
        assert_eq!(size_text(1 << 20), "1 MiB");
        assert_eq!(size_text((1 << 20) + 1024), "1025 KiB");
    }
}
