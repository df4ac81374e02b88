//! The shared-memory protocols by message size (see [`super::outbound`]): short messages
//! inline with their record, eager ones copied through the ring in fragments, rendezvous
//! ones copied once by cross-memory attach (split between both processes when large).

use quiver_transport::ring::INLINE_BYTES;

use super::rendezvous::SPLIT_MIN_BYTES;
use crate::config::Config;
use crate::transport::protocols::{consecutive, size_text, ProtocolRange};

/// The ranges a shm connection uses under `config`.
pub(crate) fn ranges(config: &Config) -> Vec<ProtocolRange> {
    let eager_max = config.shm_eager_max;
    // A message up to the eager limit goes through the ring; one that fits a record's
    // inline bytes needs no fragment.
    let inline_max = INLINE_BYTES.min(eager_max);
    let rendezvous_first = eager_max + 1;
    let mut ranges = vec![
        (
            0,
            "short",
            format!(
                "inline with its record header in one cache line of the ring (up to \
                 {INLINE_BYTES} B, and at most QUIVER_SHM_EAGER_MAX)"
            ),
        ),
        (
            inline_max + 1,
            "eager",
            format!(
                "copied into the ring and out again in fragments of up to {} \
                 (QUIVER_SHM_FRAG_BYTES), copy-in overlapping copy-out; up to {} \
                 (QUIVER_SHM_EAGER_MAX)",
                size_text(config.shm_frag_bytes),
                size_text(eager_max)
            ),
        ),
        (
            rendezvous_first,
            "rendezvous",
            format!(
                "the ring carries only address and length; the receiver copies the message \
                 once, straight from the sender's memory (process_vm_readv); above \
                 QUIVER_SHM_EAGER_MAX ({})",
                size_text(eager_max)
            ),
        ),
    ];
    if !config.wait.shares_cpus() {
        ranges.push((
            rendezvous_first.max(SPLIT_MIN_BYTES),
            "rendezvous-split",
            format!(
                "rendezvous copied by both processes at once: the receiver pulls the first \
                 half (process_vm_readv) while the sender pushes the second \
                 (process_vm_writev); from {} and above QUIVER_SHM_EAGER_MAX",
                size_text(SPLIT_MIN_BYTES)
            ),
        ));
    }
    consecutive(ranges)
}

/// The ranges of a shm connection whose receiver cannot read the sender's memory
/// (cross-memory attach refused): every size through the ring.
pub(crate) fn ranges_without_cross_memory(config: &Config) -> Vec<ProtocolRange> {
    let inline_max = INLINE_BYTES.min(config.shm_eager_max);
    consecutive(vec![
        (
            0,
            "short",
            format!("inline with its record header in one cache line of the ring (up to {INLINE_BYTES} B)"),
        ),
        (
            inline_max + 1,
            "eager",
            format!(
                "copied into the ring and out again in fragments of up to {} \
                 (QUIVER_SHM_FRAG_BYTES), copy-in overlapping copy-out, at every size: \
                 cross-memory attach to the sender is refused (no rendezvous; quiver info \
                 says why)",
                size_text(config.shm_frag_bytes)
            ),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_cross_memory_every_size_is_eager() {
        let ranges = ranges_without_cross_memory(&Config::default());
        let names: Vec<_> = ranges.iter().map(|r| r.protocol).collect();
        assert_eq!(names, ["short", "eager"]);
        assert_eq!(ranges[1].first, INLINE_BYTES + 1);
        assert_eq!(ranges[1].last, None);
        assert!(ranges[1].why.contains("cross-memory attach"));
    }

    #[test]
    fn default_ranges_follow_the_settings() {
        let ranges = ranges(&Config::default());
        let names: Vec<_> = ranges.iter().map(|r| r.protocol).collect();
        assert_eq!(names, ["short", "eager", "rendezvous-split"]);
        assert_eq!(ranges[0].last, Some(INLINE_BYTES));
        assert_eq!(ranges[1].last, Some(256 << 10));
        assert_eq!(ranges[2].first, (256 << 10) + 1);
        let small = Config {
            shm_eager_max: 4096,
            ..Config::default()
        };
        let names: Vec<_> = ranges_of(&small);
        assert_eq!(names, ["short", "eager", "rendezvous", "rendezvous-split"]);
        let none = Config {
            shm_eager_max: 0,
            ..Config::default()
        };
        let ranges = super::ranges(&none);
        assert_eq!(ranges[0].protocol, "short");
        assert_eq!(ranges[0].last, Some(0));
        assert_eq!(ranges[1].protocol, "rendezvous");
        assert_eq!(ranges[1].first, 1);
    }

    /// A rank that shares its CPUs (it yields at every poll) never splits a rendezvous: the
    /// sender it would wait for may not be running.
    #[test]
    fn a_rank_sharing_its_cpus_does_not_split() {
        use crate::transport::wait_policy::{WaitPolicy, YieldMode, DEFAULT_YIELD_SPIN};
        let shared = Config {
            wait: WaitPolicy::resolve(
                std::time::Duration::from_millis(2),
                YieldMode::Always,
                DEFAULT_YIELD_SPIN,
                Default::default(),
            ),
            ..Config::default()
        };
        assert!(shared.wait.shares_cpus());
        assert_eq!(ranges_of(&shared), ["short", "eager", "rendezvous"]);
        assert!(!Config::default().wait.shares_cpus());
    }

    fn ranges_of(config: &Config) -> Vec<&'static str> {
        ranges(config).iter().map(|r| r.protocol).collect()
    }
}
