//! The datagram protocols (udp, xdp, mem) by message size: how a message leaves (copied into the
//! send window, its datagrams' payloads copied or gathered in place, or the caller's buffer
//! lent to the protocol) and how a blocking receive takes it (scattered straight into its
//! buffer or not), from the settings that put the bounds.

use crate::config::{Config, TransportKind};
use crate::transport::protocols::{consecutive, size_text, ProtocolRange};

/// What applies to a message of some size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Applies {
    in_place: bool,
    scatter: bool,
    blocking_lent: bool,
    posted_lent: bool,
}

/// The ranges a datagram connection of `kind` uses under `config`.
pub(crate) fn ranges(kind: TransportKind, config: &Config) -> Vec<ProtocolRange> {
    let at_least = |threshold: usize, size: u64| threshold > 0 && size >= threshold as u64;
    // A threshold of 0 turns the copy of short payloads off: every payload goes in place.
    let in_place =
        |size: u64| config.udp_in_place_min == 0 || size >= config.udp_in_place_min as u64;
    // The scattering receive reads udp sockets; the mem and xdp transports have none.
    let scatters = kind == TransportKind::Udp;
    let applies = |size: u64| Applies {
        in_place: in_place(size),
        scatter: scatters && at_least(config.udp_scatter_min, size),
        blocking_lent: at_least(config.udp_send_in_place_min, size),
        posted_lent: at_least(config.udp_post_in_place_min, size),
    };
    let mut bounds: Vec<u64> = [
        config.udp_in_place_min,
        config.udp_scatter_min,
        config.udp_send_in_place_min,
        config.udp_post_in_place_min,
    ]
    .into_iter()
    .map(|threshold| threshold as u64)
    .chain([0])
    .collect();
    bounds.sort_unstable();
    bounds.dedup();
    // A threshold that changes nothing for this kind (the scattering receive over mem)
    // starts no range of its own.
    let mut steps: Vec<(u64, Applies)> = Vec::new();
    for first in bounds {
        let what = applies(first);
        if steps.last().is_none_or(|(_, before)| *before != what) {
            steps.push((first, what));
        }
    }
    consecutive(
        steps
            .into_iter()
            .map(|(first, what)| (first, name(what), why(what, config)))
            .collect(),
    )
}

/// The protocol's short name: how it leaves, and `+scatter` when a blocking receive
/// scatters it.
fn name(what: Applies) -> &'static str {
    let lent = what.blocking_lent || what.posted_lent;
    match (lent, what.in_place, what.scatter) {
        (true, _, false) => "lent",
        (true, _, true) => "lent+scatter",
        (false, true, false) => "in-place",
        (false, true, true) => "in-place+scatter",
        (false, false, false) => "copied",
        (false, false, true) => "copied+scatter",
    }
}

fn why(what: Applies, config: &Config) -> String {
    let mut parts = Vec::new();
    parts.push(if what.in_place {
        format!(
            "copied into the send window, datagram payloads leaving from it in place (gathered \
             with their header, runs of them as one GSO send; payloads from {}, \
             QUIVER_UDP_IN_PLACE_MIN)",
            size_text(config.udp_in_place_min as u64)
        )
    } else {
        format!(
            "copied into the send window, each datagram's payload copied next to its header \
             (under {}, QUIVER_UDP_IN_PLACE_MIN)",
            size_text(config.udp_in_place_min as u64)
        )
    });
    if what.blocking_lent {
        parts.push(format!(
            "a blocking send lends the caller's buffer instead when the message is at least {} \
             times the connection's bandwidth-delay product, one path only (from {}, \
             QUIVER_UDP_SEND_IN_PLACE_MIN)",
            config.udp_send_in_place_bdp_multiple,
            size_text(config.udp_send_in_place_min as u64)
        ));
    }
    if what.posted_lent {
        parts.push(format!(
            "a posted send lends its buffer, never copied (from {}, QUIVER_UDP_POST_IN_PLACE_MIN)",
            size_text(config.udp_post_in_place_min as u64)
        ));
    }
    if what.scatter {
        parts.push(format!(
            "a blocking receive takes each datagram's payload straight into its buffer, one \
             link only (from {}, QUIVER_UDP_SCATTER_MIN)",
            size_text(config.udp_scatter_min as u64)
        ));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(kind: TransportKind, config: &Config) -> Vec<&'static str> {
        ranges(kind, config).iter().map(|r| r.protocol).collect()
    }

    #[test]
    fn ranges_follow_the_thresholds() {
        let config = Config::default();
        assert_eq!(
            names(TransportKind::Udp, &config),
            ["copied", "in-place", "in-place+scatter", "lent+scatter"]
        );
        let ranges = ranges(TransportKind::Udp, &config);
        assert_eq!(ranges[0].last, Some(511));
        assert_eq!(ranges[1].last, Some((16 << 10) - 1));
        assert_eq!(ranges[3].first, 256 << 10);
        assert!(
            ranges[3].why.contains("posted send lends"),
            "{}",
            ranges[3].why
        );
        assert_eq!(
            names(TransportKind::Mem, &config),
            ["copied", "in-place", "lent"],
            "no scattering receive without udp sockets"
        );
        let off = Config {
            udp_in_place_min: 0,
            udp_scatter_min: 0,
            udp_send_in_place_min: 0,
            udp_post_in_place_min: 1 << 20,
            ..Config::default()
        };
        let ranges = super::ranges(TransportKind::Udp, &off);
        assert_eq!(names(TransportKind::Udp, &off), ["in-place", "lent"]);
        assert!(!ranges[1].why.contains("blocking send lends"));
    }
}
