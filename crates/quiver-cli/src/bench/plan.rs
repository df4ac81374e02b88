//! What one launch of the bench's two ranks measures: the transport, the tests, the sizes
//! and the iteration counts.
//!
//! The parent and both ranks build the same [`Plan`] from the same options, so every
//! iteration count is computed by the functions here and never sent over the wire. The
//! measurement lab (`quiver-bench`) builds its larger plans on this one. Pure code, no I/O.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::sizes;

/// One everyday test of `quiver bench`, in the order the bench runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum)]
pub enum TestName {
    /// The machine's floors: cache-line hand-off latency and memcpy bandwidth.
    Floor,
    /// One-way latency, round trip / 2, over the size sweep.
    Pingpong,
    /// Streaming bandwidth with a window of outstanding sends, over the size sweep.
    Bw,
    /// Bidirectional streaming bandwidth: both ranks send windows to each other at once.
    Bibw,
    /// 8-byte message rate with a window of outstanding sends.
    Rate,
    /// Active messages (8 B round trip and rate) beside UCX's `am_lat`/`am_bw`; runs alone.
    Am,
}

impl TestName {
    /// Every test, in the order the bench runs them.
    pub const ALL: [TestName; 5] = [
        TestName::Floor,
        TestName::Pingpong,
        TestName::Bw,
        TestName::Bibw,
        TestName::Rate,
    ];

    /// The name used on the command line and in the JSON `test` key.
    pub fn as_str(self) -> &'static str {
        match self {
            TestName::Floor => "floor",
            TestName::Pingpong => "pingpong",
            TestName::Bw => "bw",
            TestName::Bibw => "bibw",
            TestName::Rate => "rate",
            TestName::Am => "am",
        }
    }

    /// Whether the test runs between the two ranks (everything but the floors).
    pub fn needs_ranks(self) -> bool {
        self != TestName::Floor
    }

    /// Whether the test sweeps the message sizes (one point per size).
    pub fn sweeps_sizes(self) -> bool {
        matches!(self, TestName::Pingpong | TestName::Bw | TestName::Bibw)
    }
}

/// What the bench measures between its two ranks.
///
/// quiver's transports run through the quiver API (`link.rs`); the `raw-*` baselines are
/// plain sockets with no protocol (`raw/`), the floors quiver's network transports are
/// compared against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Transport {
    /// quiver's shared-memory transport.
    #[serde(rename = "shm")]
    Shm,
    /// Baseline: plain UDP sockets over 127.0.0.1, busy-polling, no protocol.
    #[serde(rename = "raw-udp")]
    RawUdp,
    /// Baseline: a plain TCP connection over 127.0.0.1, busy-polling, no protocol.
    #[serde(rename = "raw-tcp")]
    RawTcp,
    /// quiver's UDP transport (its own reliable protocol) over 127.0.0.1.
    #[serde(rename = "udp")]
    Udp,
    /// quiver's TCP transport over 127.0.0.1.
    #[serde(rename = "tcp")]
    Tcp,
    /// quiver's udp protocol over AF_XDP sockets: ranks on network interfaces only
    /// (`--netns`, e.g. `quiver-bench testbed`'s namespaces; root).
    #[serde(rename = "xdp")]
    Xdp,
}

impl Transport {
    /// Every transport, in the order `--help` and error messages list them.
    pub const ALL: [Transport; 6] = [
        Transport::Shm,
        Transport::Udp,
        Transport::Tcp,
        Transport::Xdp,
        Transport::RawUdp,
        Transport::RawTcp,
    ];

    /// The name used on the command line and in the JSON `transport` key.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Shm => "shm",
            Transport::RawUdp => "raw-udp",
            Transport::RawTcp => "raw-tcp",
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
            Transport::Xdp => "xdp",
        }
    }

    /// The transport called `name`, if there is one.
    pub fn from_name(name: &str) -> Option<Transport> {
        Transport::ALL
            .into_iter()
            .find(|transport| transport.as_str() == name)
    }

    /// Whether this is a raw-socket baseline (measured without the quiver API).
    pub fn is_raw(self) -> bool {
        matches!(self, Transport::RawUdp | Transport::RawTcp)
    }

    /// Whether this is one of quiver's network transports (udp, tcp, xdp): the ones with
    /// addresses, which may run in network namespaces.
    pub fn is_network(self) -> bool {
        matches!(self, Transport::Udp | Transport::Tcp | Transport::Xdp)
    }

    /// The raw-socket baseline of a quiver network transport: raw-udp for udp, raw-tcp
    /// for tcp (`None` for the others).
    pub fn raw_baseline(self) -> Option<Transport> {
        match self {
            Transport::Udp => Some(Transport::RawUdp),
            Transport::Tcp => Some(Transport::RawTcp),
            _ => None,
        }
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// Message sizes of the default sweep, in bytes: 8 B to 4 MiB in steps of 8x.
pub const DEFAULT_SIZES_BYTES: [u64; 8] =
    [8, 64, 512, 4 << 10, 32 << 10, 256 << 10, 1 << 20, 4 << 20];
/// Default number of outstanding sends in bw and rate (as osu_bw).
pub const DEFAULT_WINDOW: u64 = 64;
/// Largest accepted window.
pub const MAX_WINDOW: u64 = 4096;
/// Largest memory the bw sender may hold in posted buffers (window x size), in bytes.
pub const MAX_WINDOW_BYTES: u64 = 4 << 30;
/// bw above the eager size, where the transport sends posted sends in place (udp): most
/// distinct buffers the sender keeps posted (double buffering: one message goes out while
/// the one before waits for its last acknowledgements). Three or more measured slower
/// over udp loopback than two. See [`posted_in_place_buffers`].
pub const MAX_POSTED_IN_PLACE: u64 = 2;
/// The same: most bytes the sender keeps posted ([`MAX_POSTED_IN_PLACE`] buffers of up to
/// 1 MiB; larger messages go by blocking sends, which measured faster than posting them).
pub const MAX_POSTED_IN_PLACE_BYTES: u64 = 2 << 20;
/// Size of a rate message, in bytes.
pub const RATE_MESSAGE_BYTES: u64 = 8;

// Default iteration counts. The default run (8 sizes, floor, pingpong, bw and rate) takes
// about 10 s on a 2-core machine: quick enough to run often, long enough for stable medians.
/// Round trips per size by default: about 4 GiB moved each way, within 200..=100,000.
const DEFAULT_PINGPONG_BYTES: u64 = 4 << 30;
const DEFAULT_PINGPONG_MIN_ITERS: u64 = 200;
const DEFAULT_PINGPONG_MAX_ITERS: u64 = 100_000;
/// Windows per size by default in bw: about 8 GiB streamed, within 20..=5,000.
const DEFAULT_BW_BYTES: u64 = 8 << 30;
const DEFAULT_BW_MIN_WINDOWS: u64 = 20;
const DEFAULT_BW_MAX_WINDOWS: u64 = 5_000;
/// Windows in the rate test by default.
const DEFAULT_RATE_WINDOWS: u64 = 20_000;
/// Fewest round trips a scaled-down default gives (enough for a median and a p99).
pub const MIN_SCALED_ITERS: u64 = 20;
/// Fewest windows a scaled-down default gives.
pub const MIN_SCALED_WINDOWS: u64 = 3;

/// A validated bench run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Tests to run, ascending (floor, pingpong, bw, bibw, rate), without duplicates.
    pub tests: Vec<TestName>,
    /// What is measured.
    pub transport: Transport,
    /// Message sizes of pingpong and bw, in bytes, ascending, without duplicates.
    pub sizes: Vec<u64>,
    /// Measured iterations per size when given: round trips (pingpong) or windows (bw, rate).
    pub iters: Option<u64>,
    /// Outstanding sends per window in bw and rate.
    pub window: u64,
    /// Network namespaces of rank 0 and rank 1 (udp/tcp between two simulated nodes).
    pub netns: Option<[String; 2]>,
    /// The ranks' addresses (`QUIVER_ADDRS`) when given; loopback ports otherwise.
    pub addrs: Option<Vec<SocketAddr>>,
    /// `QUIVER_*` settings the ranks apply before they build their context (`--set`):
    /// how a suite forces one protocol path or the other.
    pub settings: Vec<(String, String)>,
    /// Default iteration counts scaled to this percentage (100: as documented; suites
    /// and `--quick` use less). Given `--iters` are not scaled.
    pub effort_percent: u64,
    /// Blocks every pingpong, bw and rate point runs as, one after the other in the same
    /// launch (1 unless a paired run of the lab splits each point into blocks of two
    /// sides); the default iterations of a point are shared among its blocks.
    pub blocks_per_point: u32,
    /// pingpong measures each point twice, plain then tagged (`--tagged`).
    pub tagged: bool,
    /// pingpong also measures the sleeping 8 B ping-pong (`--wait fd`, `fd_wait.rs`).
    pub wait_fd: bool,
}

/// One launch of the two ranks: the command line that makes this executable a rank, what
/// the parent expects back, and where the ranks run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankJob {
    /// Arguments after the executable's name (`bench --worker ...`).
    pub worker_args: Vec<String>,
    /// Records rank 0 reports (one per measured point).
    pub records: usize,
    /// The transport measured (udp and tcp get addresses and `QUIVER_TRANSPORTS`).
    pub transport: Transport,
    /// The ranks' addresses when given; free loopback ports otherwise.
    pub addrs: Option<Vec<SocketAddr>>,
    /// Network namespaces of rank 0 and rank 1, when given.
    pub netns: Option<[String; 2]>,
}

impl Plan {
    /// Tests that run between the ranks, in order.
    pub fn rank_tests(&self) -> impl Iterator<Item = TestName> + '_ {
        self.tests.iter().copied().filter(|test| test.needs_ranks())
    }

    /// Whether any test needs the two ranks.
    pub fn needs_ranks(&self) -> bool {
        self.rank_tests().next().is_some()
    }

    /// Whether any test sweeps the sizes (or shows the floors per size).
    pub fn sweeps_sizes(&self) -> bool {
        self.tests
            .iter()
            .any(|&test| test == TestName::Floor || test.sweeps_sizes())
    }

    /// Largest message any test sends, in bytes.
    pub fn max_message_bytes(&self) -> u64 {
        let sweep_max = self
            .sizes
            .iter()
            .copied()
            .max()
            .unwrap_or(RATE_MESSAGE_BYTES);
        sweep_max.max(RATE_MESSAGE_BYTES)
    }

    /// A default count scaled by `effort_percent` (and split among the blocks of a
    /// point), at least `minimum`.
    fn scaled(&self, count: u64, minimum: u64) -> u64 {
        let blocks = u64::from(self.blocks_per_point.max(1));
        (count.saturating_mul(self.effort_percent) / 100 / blocks).max(minimum)
    }

    /// The most measured round trips of pingpong at any size of the plan (0 without sizes).
    pub fn max_pingpong_iters(&self) -> u64 {
        self.sizes
            .iter()
            .map(|&size| self.pingpong_iters(size))
            .max()
            .unwrap_or(0)
    }

    /// Measured round trips of pingpong at `size_bytes`.
    pub fn pingpong_iters(&self, size_bytes: u64) -> u64 {
        self.iters.unwrap_or_else(|| {
            self.scaled(
                (DEFAULT_PINGPONG_BYTES / (2 * size_bytes))
                    .clamp(DEFAULT_PINGPONG_MIN_ITERS, DEFAULT_PINGPONG_MAX_ITERS),
                MIN_SCALED_ITERS,
            )
        })
    }

    /// Measured windows of bw (and bibw) at `size_bytes`.
    pub fn bw_windows(&self, size_bytes: u64) -> u64 {
        self.iters.unwrap_or_else(|| {
            self.scaled(
                (DEFAULT_BW_BYTES / (size_bytes * self.window))
                    .clamp(DEFAULT_BW_MIN_WINDOWS, DEFAULT_BW_MAX_WINDOWS),
                MIN_SCALED_WINDOWS,
            )
        })
    }

    /// Measured windows of rate.
    pub fn rate_windows(&self) -> u64 {
        self.iters
            .unwrap_or_else(|| self.scaled(DEFAULT_RATE_WINDOWS, MIN_SCALED_WINDOWS))
    }

    /// How many result records the ranks produce (one per measured point, and per block).
    pub fn rank_record_count(&self) -> usize {
        let blocks = self.blocks_per_point.max(1) as usize;
        self.rank_tests()
            .map(|test| match test {
                TestName::Pingpong => {
                    let variants = if self.tagged { 2 } else { 1 };
                    variants * blocks * self.sizes.len() + usize::from(self.wait_fd)
                }
                TestName::Bw => blocks * self.sizes.len(),
                TestName::Rate => blocks,
                TestName::Bibw => self.sizes.len(),
                TestName::Floor | TestName::Am => 0,
            })
            .sum()
    }

    /// Arguments after the executable's name that make a rank run this plan's rank tests
    /// (`bench --worker ...`).
    pub fn worker_args(&self) -> Vec<String> {
        let mut args = self.worker_options();
        args.extend(self.rank_tests().map(|test| test.as_str().to_string()));
        args
    }

    /// [`Plan::worker_args`] without the tests: the lab adds options and tests of its own.
    pub fn worker_options(&self) -> Vec<String> {
        let mut args = vec![
            "bench".to_string(),
            "--worker".to_string(),
            "--transport".to_string(),
            self.transport.as_str().to_string(),
            "--sizes".to_string(),
            sizes::format_size_list(&self.sizes),
            "--window".to_string(),
            self.window.to_string(),
        ];
        if let Some(iters) = self.iters {
            args.push("--iters".to_string());
            args.push(iters.to_string());
        }
        if self.wait_fd {
            args.push("--wait".to_string());
            args.push("fd".to_string());
        }
        if self.effort_percent != 100 {
            args.push("--effort".to_string());
            args.push(self.effort_percent.to_string());
        }
        if self.tagged {
            args.push("--tagged".to_string());
        }
        for (name, value) in &self.settings {
            args.push("--set".to_string());
            args.push(format!("{name}={value}"));
        }
        args
    }

    /// The launch of the ranks that runs this plan's rank tests.
    pub fn rank_job(&self) -> RankJob {
        RankJob {
            worker_args: self.worker_args(),
            records: self.rank_record_count(),
            transport: self.transport,
            addrs: self.addrs.clone(),
            netns: self.netns.clone(),
        }
    }
}

/// Untimed warm-up iterations before `iters` timed ones: a tenth, within 10..=1,000.
pub fn warmup_iters(iters: u64) -> u64 {
    (iters / 10).clamp(10, 1_000)
}

/// Untimed warm-up windows before `windows` timed ones: a tenth, within 2..=100.
pub fn warmup_windows(windows: u64) -> u64 {
    (windows / 10).clamp(2, 100)
}

/// bw above the eager size where the transport sends posted sends in place: how many
/// distinct buffers of `size_bytes` the sender keeps posted in a window of `window`
/// messages: at most the window, [`MAX_POSTED_IN_PLACE`] and [`MAX_POSTED_IN_PLACE_BYTES`];
/// `None` below two (one posted at a time would wait for each message's last
/// acknowledgement before starting the next: blocking sends are used then).
pub fn posted_in_place_buffers(window: u64, size_bytes: u64) -> Option<u64> {
    let by_bytes = MAX_POSTED_IN_PLACE_BYTES / size_bytes.max(1);
    let buffers = window.min(MAX_POSTED_IN_PLACE).min(by_bytes);
    (buffers >= 2).then_some(buffers)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plan of `tests` over shm at 8 B and 64 KiB.
    pub(crate) fn plan(tests: Vec<TestName>, iters: Option<u64>) -> Plan {
        Plan {
            tests,
            transport: Transport::Shm,
            sizes: vec![8, 65536],
            iters,
            window: 64,
            netns: None,
            addrs: None,
            settings: Vec::new(),
            effort_percent: 100,
            blocks_per_point: 1,
            tagged: false,
            wait_fd: false,
        }
    }

    #[test]
    fn default_iterations_scale_down_with_size() {
        let plan = plan(vec![TestName::Pingpong], None);
        assert_eq!(plan.pingpong_iters(8), 100_000);
        assert_eq!(plan.pingpong_iters(1 << 20), 2048);
        assert_eq!(plan.pingpong_iters(1 << 30), 200);
        assert_eq!(plan.bw_windows(8), 5_000);
        assert_eq!(plan.bw_windows(1 << 20), 128);
        assert_eq!(plan.bw_windows(64 << 20), 20);
        let quick = Plan {
            effort_percent: 10,
            ..plan
        };
        assert_eq!(quick.pingpong_iters(8), 10_000);
        assert_eq!(quick.pingpong_iters(1 << 30), 20);
        assert_eq!(quick.bw_windows(64 << 20), 3);
    }

    #[test]
    fn given_iterations_win() {
        let plan = plan(vec![TestName::Pingpong], Some(200));
        assert_eq!(plan.pingpong_iters(8), 200);
        assert_eq!(plan.bw_windows(1 << 20), 200);
        assert_eq!(plan.rate_windows(), 200);
    }

    #[test]
    fn counts_records_and_builds_worker_args() {
        let plan = plan(
            vec![
                TestName::Floor,
                TestName::Pingpong,
                TestName::Bw,
                TestName::Rate,
            ],
            Some(200),
        );
        assert_eq!(plan.rank_record_count(), 5);
        assert_eq!(plan.max_message_bytes(), 65536);
        assert_eq!(
            plan.worker_args().join(" "),
            "bench --worker --transport shm --sizes 8,65536 --window 64 --iters 200 pingpong bw rate"
        );
        let job = plan.rank_job();
        assert_eq!(job.records, 5);
        assert_eq!(job.worker_args, plan.worker_args());
        let floor_only = super::tests::plan(vec![TestName::Floor], None);
        assert!(!floor_only.needs_ranks());
        assert_eq!(floor_only.rank_record_count(), 0);
    }

    #[test]
    fn tagged_pingpong_doubles_its_points_and_reaches_the_ranks() {
        let plain = plan(vec![TestName::Pingpong, TestName::Rate], None);
        let tagged = Plan {
            tagged: true,
            ..plain.clone()
        };
        assert_eq!(
            tagged.rank_record_count(),
            plain.rank_record_count() + plain.sizes.len()
        );
        assert!(tagged.worker_args().contains(&"--tagged".to_string()));
        assert!(!plain.worker_args().contains(&"--tagged".to_string()));
    }

    #[test]
    fn blocks_share_a_points_default_iterations() {
        let plan = Plan {
            blocks_per_point: 6,
            wait_fd: false,
            ..plan(vec![TestName::Pingpong, TestName::Bw, TestName::Rate], None)
        };
        // Six blocks share a point's default iterations (at least the minimum each).
        assert_eq!(plan.pingpong_iters(8), 100_000 / 6);
        assert_eq!(plan.pingpong_iters(1 << 30), 200 / 6);
        assert_eq!(plan.bw_windows(64 << 20), MIN_SCALED_WINDOWS);
        assert_eq!(plan.bw_windows(1 << 20), 128 / 6);
        assert_eq!(plan.rank_record_count(), 6 * 2 + 6 * 2 + 6);
        // Given iterations are per block.
        let given = Plan {
            iters: Some(500),
            ..plan
        };
        assert_eq!(given.pingpong_iters(8), 500);
    }

    #[test]
    fn transports_have_names_and_baselines() {
        for transport in Transport::ALL {
            assert_eq!(Transport::from_name(transport.as_str()), Some(transport));
            let json = serde_json::to_string(&transport).expect("serialize");
            assert_eq!(json, format!("\"{}\"", transport.as_str()));
        }
        assert_eq!(Transport::Udp.raw_baseline(), Some(Transport::RawUdp));
        assert_eq!(Transport::Tcp.raw_baseline(), Some(Transport::RawTcp));
        assert_eq!(Transport::Shm.raw_baseline(), None);
        assert!(Transport::RawTcp.is_raw() && !Transport::Tcp.is_raw());
    }

    #[test]
    fn warmups_are_bounded() {
        assert_eq!(warmup_iters(1), 10);
        assert_eq!(warmup_iters(20_000), 1_000);
        assert_eq!(warmup_windows(32), 3);
        assert_eq!(warmup_windows(1), 2);
    }

    #[test]
    fn posted_in_place_buffers_stay_within_the_window_and_the_caps() {
        let mib = 1 << 20;
        assert_eq!(posted_in_place_buffers(DEFAULT_WINDOW, mib), Some(2));
        assert_eq!(posted_in_place_buffers(MAX_WINDOW, 512 << 10), Some(2));
        assert_eq!(posted_in_place_buffers(2, mib), Some(2));
        // One at a time, or more bytes than the cap: blocking sends.
        assert_eq!(posted_in_place_buffers(1, mib), None);
        assert_eq!(posted_in_place_buffers(DEFAULT_WINDOW, mib + 1), None);
        assert_eq!(posted_in_place_buffers(DEFAULT_WINDOW, 4 * mib), None);
    }
}
