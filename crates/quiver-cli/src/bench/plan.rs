//! What one `quiver bench` run measures: tests, sizes and iteration counts.
//!
//! The parent and both ranks build the same [`Plan`] from the same options, so every
//! iteration count is computed by the functions here and never sent over the wire.
//! Pure code, no I/O.

use super::sizes;

/// One test of the bench, in the order the bench runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub(crate) enum TestName {
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
    /// The LogGP cost model per size: o_s, o_r, L, g, and G fitted over the sizes.
    Loggp,
    /// recv_pooled (pre-registered buffers) against a fresh buffer per message.
    Pool,
    /// For each transport, where the copy path and the zero-copy path cross (runs the
    /// ranks once per path, with the threshold forced each way).
    Crossover,
    /// Every transport and baseline side by side, with the floors (one table).
    Compare,
    /// What quiver's frames cost by themselves: plain udp sockets with and without
    /// quiver's frame headers and checks, interleaved in one run (no protocol).
    Wire,
}

impl TestName {
    /// The name used on the command line and in the JSON `test` key.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            TestName::Floor => "floor",
            TestName::Pingpong => "pingpong",
            TestName::Bw => "bw",
            TestName::Bibw => "bibw",
            TestName::Rate => "rate",
            TestName::Loggp => "loggp",
            TestName::Pool => "pool",
            TestName::Crossover => "crossover",
            TestName::Compare => "compare",
            TestName::Wire => "wire",
        }
    }

    /// Whether the test runs between the two ranks of one job (everything but the floors
    /// and the tests that start several jobs themselves).
    pub(crate) fn needs_ranks(self) -> bool {
        !matches!(
            self,
            TestName::Floor | TestName::Crossover | TestName::Compare | TestName::Wire
        )
    }

    /// Whether the test starts rank jobs of its own (and must be named alone).
    pub(crate) fn is_suite(self) -> bool {
        matches!(
            self,
            TestName::Crossover | TestName::Compare | TestName::Wire
        )
    }

    /// Whether the test sweeps the message sizes (one point per size).
    pub(crate) fn sweeps_sizes(self) -> bool {
        matches!(
            self,
            TestName::Pingpong | TestName::Bw | TestName::Bibw | TestName::Loggp | TestName::Pool
        )
    }
}

/// What the bench measures between its two ranks.
///
/// `shm` (and, later, quiver's network transports) runs through the quiver API
/// (`worker.rs`); the `raw-*` baselines are plain sockets with no protocol (`raw.rs`), the
/// floors the quiver network transports are compared against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    /// quiver's shared-memory transport.
    Shm,
    /// Baseline: plain UDP sockets over 127.0.0.1, busy-polling, no protocol.
    RawUdp,
    /// Baseline: a plain TCP connection over 127.0.0.1, busy-polling, no protocol.
    RawTcp,
    /// quiver's UDP transport (its own reliable protocol) over 127.0.0.1.
    Udp,
    /// quiver's TCP transport over 127.0.0.1.
    Tcp,
}

impl Transport {
    /// Every transport, in the order `--help` and error messages list them.
    pub(crate) const ALL: [Transport; 5] = [
        Transport::Shm,
        Transport::Udp,
        Transport::Tcp,
        Transport::RawUdp,
        Transport::RawTcp,
    ];

    /// The name used on the command line and in the JSON `transport` key.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Transport::Shm => "shm",
            Transport::RawUdp => "raw-udp",
            Transport::RawTcp => "raw-tcp",
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
        }
    }

    /// The transport called `name`, if there is one.
    pub(crate) fn from_name(name: &str) -> Option<Transport> {
        Transport::ALL
            .into_iter()
            .find(|transport| transport.as_str() == name)
    }

    /// Whether this is a raw-socket baseline (measured without the quiver API).
    pub(crate) fn is_raw(self) -> bool {
        matches!(self, Transport::RawUdp | Transport::RawTcp)
    }

    /// The raw-socket baseline of a quiver network transport: raw-udp for udp, raw-tcp
    /// for tcp (`None` for the others).
    pub(crate) fn raw_baseline(self) -> Option<Transport> {
        match self {
            Transport::Udp => Some(Transport::RawUdp),
            Transport::Tcp => Some(Transport::RawTcp),
            _ => None,
        }
    }
}

/// Message sizes of the default sweep, in bytes: 8 B to 4 MiB in steps of 8x.
pub(crate) const DEFAULT_SIZES_BYTES: [u64; 8] =
    [8, 64, 512, 4 << 10, 32 << 10, 256 << 10, 1 << 20, 4 << 20];
/// Default number of outstanding sends in bw and rate (as osu_bw).
pub(crate) const DEFAULT_WINDOW: u64 = 64;
/// Largest accepted window.
pub(crate) const MAX_WINDOW: u64 = 4096;
/// Largest memory the bw sender may hold in posted buffers (window x size), in bytes.
pub(crate) const MAX_WINDOW_BYTES: u64 = 4 << 30;
/// bw above the eager size, where the transport sends posted sends in place (udp): most
/// distinct buffers the sender keeps posted (double buffering: one message goes out while
/// the one before waits for its last acknowledgements). More measured slower over udp
/// loopback (docs/PERFORMANCE.md, session 11). See [`posted_in_place_buffers`].
pub(crate) const MAX_POSTED_IN_PLACE: u64 = 2;
/// The same: most bytes the sender keeps posted ([`MAX_POSTED_IN_PLACE`] buffers of up to
/// 1 MiB; larger messages go by blocking sends, which measured faster than posting them).
pub(crate) const MAX_POSTED_IN_PLACE_BYTES: u64 = 2 << 20;
/// Size of a rate message, in bytes.
pub(crate) const RATE_MESSAGE_BYTES: u64 = 8;

// Default iteration counts. The default suite (8 sizes, all tests) takes about 10 s on the
// 2-core development machine; the issue allows two minutes.
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
const MIN_SCALED_ITERS: u64 = 20;
/// Fewest windows a scaled-down default gives.
const MIN_SCALED_WINDOWS: u64 = 3;

/// A validated bench run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Tests to run, ascending (floor, pingpong, bw, rate), without duplicates.
    pub(crate) tests: Vec<TestName>,
    /// What is measured.
    pub(crate) transport: Transport,
    /// Message sizes of pingpong and bw, in bytes, ascending, without duplicates.
    pub(crate) sizes: Vec<u64>,
    /// Measured iterations per size when given: round trips (pingpong) or windows (bw, rate).
    pub(crate) iters: Option<u64>,
    /// Outstanding sends per window in bw and rate.
    pub(crate) window: u64,
    /// Network namespaces of rank 0 and rank 1 (udp/tcp between two simulated nodes).
    pub(crate) netns: Option<[String; 2]>,
    /// The ranks' addresses (`QUIVER_ADDRS`) when given; loopback ports otherwise.
    pub(crate) addrs: Option<Vec<std::net::SocketAddr>>,
    /// `QUIVER_*` settings the ranks apply before they build their context (`--set`):
    /// how a suite forces one protocol path or the other.
    pub(crate) settings: Vec<(String, String)>,
    /// Default iteration counts scaled to this percentage (100: as documented; suites
    /// and `--quick` use less). Given `--iters` are not scaled.
    pub(crate) effort_percent: u64,
    /// `--detect interleave` or `--baseline interleave` with `--rounds N`: N pairs of
    /// blocks per point in one launch of the ranks ([`Plan::interleave_blocks`]); the
    /// iterations of a point are split among the blocks.
    pub(crate) interleave: Option<Interleave>,
}

/// What the two blocks of an interleaved pair compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Interleaved {
    /// `--detect interleave`: failure detection on (side A) against off (side B).
    Detection,
    /// `--baseline interleave`: quiver's udp or tcp (side A) against its raw-socket
    /// baseline, raw-udp or raw-tcp (side B).
    Baseline,
    /// `--baseline tcp`: quiver's udp (side A) against quiver's tcp (side B), each over
    /// its own context in the same two ranks: issue 3's "udp bandwidth over loopback at
    /// least that of tcp", compared inside one launch.
    Tcp,
}

/// `--rounds N` pairs of blocks per point, and what they compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Interleave {
    /// Pairs of blocks per point (1..=1000).
    pub(crate) pairs: u32,
    /// What the two blocks of a pair compare.
    pub(crate) sides: Interleaved,
}

/// Seed of the order of the blocks in each interleaved pair ([`Plan::interleave_blocks`]).
/// Fixed, so both ranks (and every run) use the same order.
pub(crate) const INTERLEAVE_SEED: u64 = 0x7175_6976_6572_0001;

/// One step of splitmix64 (Steele, Lea and Flood): a well-mixed 64-bit value per call.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut mixed = *state;
    mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    mixed ^ (mixed >> 31)
}

/// For `pairs` pairs: whether side A runs first in each. Half the pairs (the odd one out
/// goes to A) run A first, the other half B first, in an order shuffled (Fisher-Yates) by
/// splitmix64 from [`INTERLEAVE_SEED`]: balanced, and with no period a drift during the
/// point (a vCPU moved by the host, a periodic timer) could line up with.
pub(crate) fn pair_orders(pairs: u32) -> Vec<bool> {
    let count = pairs as usize;
    let mut orders: Vec<bool> = (0..count).map(|pair| pair < count.div_ceil(2)).collect();
    let mut state = INTERLEAVE_SEED;
    for last in (1..count).rev() {
        let pick = (splitmix64(&mut state) % (last as u64 + 1)) as usize;
        orders.swap(last, pick);
    }
    orders
}

impl Plan {
    /// Tests that run between the ranks, in order.
    pub(crate) fn rank_tests(&self) -> impl Iterator<Item = TestName> + '_ {
        self.tests.iter().copied().filter(|test| test.needs_ranks())
    }

    /// Whether any test needs the two ranks.
    pub(crate) fn needs_ranks(&self) -> bool {
        self.rank_tests().next().is_some()
    }

    /// Largest message any test sends, in bytes.
    pub(crate) fn max_message_bytes(&self) -> u64 {
        let sweep_max = self
            .sizes
            .iter()
            .copied()
            .max()
            .unwrap_or(RATE_MESSAGE_BYTES);
        sweep_max.max(RATE_MESSAGE_BYTES)
    }

    /// A default count scaled by `effort_percent` (and split among the blocks of
    /// `--detect interleave`), at least `minimum`.
    fn scaled(&self, count: u64, minimum: u64) -> u64 {
        let blocks = self
            .interleave
            .map_or(1, |interleave| 2 * u64::from(interleave.pairs));
        (count.saturating_mul(self.effort_percent) / 100 / blocks).max(minimum)
    }

    /// `--detect interleave` and `--baseline interleave`: the blocks of every point, in
    /// order, as (pair, side A: detection on, or quiver rather than the raw baseline). Each
    /// pair runs A-B or B-A as [`pair_orders`] says, half of them each way, so a drift
    /// during the point (the host moving a vCPU, a warming cache) weighs on both sides
    /// alike. Every point uses the same order.
    pub(crate) fn interleave_blocks(&self) -> Vec<(u32, bool)> {
        let pairs = self.interleave.map_or(0, |interleave| interleave.pairs);
        (0..pairs)
            .zip(pair_orders(pairs))
            .flat_map(|(pair, a_first)| [(pair, a_first), (pair, !a_first)])
            .collect()
    }

    /// The baseline run next to quiver's transport: the raw-socket one of `--baseline
    /// interleave`, or quiver's tcp for `--baseline tcp`.
    pub(crate) fn baseline_transport(&self) -> Option<Transport> {
        match self.interleave {
            Some(Interleave {
                sides: Interleaved::Baseline,
                ..
            }) => self.transport.raw_baseline(),
            Some(Interleave {
                sides: Interleaved::Tcp,
                ..
            }) => Some(Transport::Tcp),
            _ => None,
        }
    }

    /// The most measured round trips of pingpong at any size of the plan (0 without sizes).
    pub(crate) fn max_pingpong_iters(&self) -> u64 {
        self.sizes
            .iter()
            .map(|&size| self.pingpong_iters(size))
            .max()
            .unwrap_or(0)
    }

    /// Measured round trips of pingpong at `size_bytes`.
    pub(crate) fn pingpong_iters(&self, size_bytes: u64) -> u64 {
        self.iters.unwrap_or_else(|| {
            self.scaled(
                (DEFAULT_PINGPONG_BYTES / (2 * size_bytes))
                    .clamp(DEFAULT_PINGPONG_MIN_ITERS, DEFAULT_PINGPONG_MAX_ITERS),
                MIN_SCALED_ITERS,
            )
        })
    }

    /// Measured windows of bw (and bibw) at `size_bytes`.
    pub(crate) fn bw_windows(&self, size_bytes: u64) -> u64 {
        self.iters.unwrap_or_else(|| {
            self.scaled(
                (DEFAULT_BW_BYTES / (size_bytes * self.window))
                    .clamp(DEFAULT_BW_MIN_WINDOWS, DEFAULT_BW_MAX_WINDOWS),
                MIN_SCALED_WINDOWS,
            )
        })
    }

    /// Measured windows of rate.
    pub(crate) fn rate_windows(&self) -> u64 {
        self.iters
            .unwrap_or_else(|| self.scaled(DEFAULT_RATE_WINDOWS, MIN_SCALED_WINDOWS))
    }

    /// loggp at `size_bytes`: (round trips for L, timed send/receive pairs for o_s and
    /// o_r, windows of the saturated stream for g). A fifth of pingpong's round trips
    /// each (the overhead loop waits two round trips per sample), and bw's windows.
    pub(crate) fn loggp_counts(&self, size_bytes: u64) -> (u64, u64, u64) {
        let round_trips = (self.pingpong_iters(size_bytes) / 5).max(MIN_SCALED_ITERS);
        (round_trips, round_trips, self.bw_windows(size_bytes))
    }

    /// How many result records the ranks produce (one per measured point).
    pub(crate) fn rank_record_count(&self) -> usize {
        let blocks = self
            .interleave
            .map_or(1, |interleave| 2 * interleave.pairs as usize);
        self.rank_tests()
            .map(|test| match test {
                TestName::Pingpong | TestName::Bw => blocks * self.sizes.len(),
                TestName::Rate => blocks,
                TestName::Bibw => self.sizes.len(),
                // Two points per size (pooled, fresh).
                TestName::Pool => 2 * self.sizes.len(),
                // One point per size and the fit.
                TestName::Loggp => self.sizes.len() + 1,
                TestName::Floor | TestName::Crossover | TestName::Compare | TestName::Wire => 0,
            })
            .sum()
    }

    /// Arguments after `quiver` that make a rank run this plan's rank tests
    /// (`bench --worker ...`).
    pub(crate) fn worker_args(&self) -> Vec<String> {
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
        if self.effort_percent != 100 {
            args.push("--effort".to_string());
            args.push(self.effort_percent.to_string());
        }
        if let Some(interleave) = self.interleave {
            let (option, value) = match interleave.sides {
                Interleaved::Detection => ("--detect", "interleave"),
                Interleaved::Baseline => ("--baseline", "interleave"),
                Interleaved::Tcp => ("--baseline", "tcp"),
            };
            args.extend([option, value, "--rounds"].map(String::from));
            args.push(interleave.pairs.to_string());
        }
        for (name, value) in &self.settings {
            args.push("--set".to_string());
            args.push(format!("{name}={value}"));
        }
        args.extend(self.rank_tests().map(|test| test.as_str().to_string()));
        args
    }
}

/// Untimed warm-up iterations before `iters` timed ones: a tenth, within 10..=1,000.
pub(crate) fn warmup_iters(iters: u64) -> u64 {
    (iters / 10).clamp(10, 1_000)
}

/// Untimed warm-up windows before `windows` timed ones: a tenth, within 2..=100.
pub(crate) fn warmup_windows(windows: u64) -> u64 {
    (windows / 10).clamp(2, 100)
}

/// bw above the eager size where the transport sends posted sends in place: how many
/// distinct buffers of `size_bytes` the sender keeps posted in a window of `window`
/// messages: at most the window, [`MAX_POSTED_IN_PLACE`] and [`MAX_POSTED_IN_PLACE_BYTES`];
/// `None` below two (one posted at a time would wait for each message's last
/// acknowledgement before starting the next: blocking sends are used then).
pub(crate) fn posted_in_place_buffers(window: u64, size_bytes: u64) -> Option<u64> {
    let by_bytes = MAX_POSTED_IN_PLACE_BYTES / size_bytes.max(1);
    let buffers = window.min(MAX_POSTED_IN_PLACE).min(by_bytes);
    (buffers >= 2).then_some(buffers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(tests: Vec<TestName>, iters: Option<u64>) -> Plan {
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
            interleave: None,
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
        assert_eq!(quick.loggp_counts(8), (2_000, 2_000, 500));
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
        let floor_only = super::tests::plan(vec![TestName::Floor], None);
        assert!(!floor_only.needs_ranks());
        assert_eq!(floor_only.rank_record_count(), 0);
    }

    #[test]
    fn interleaved_points_split_into_balanced_blocks() {
        let plan = Plan {
            interleave: Some(Interleave {
                pairs: 3,
                sides: Interleaved::Detection,
            }),
            ..plan(vec![TestName::Pingpong, TestName::Bw, TestName::Rate], None)
        };
        let blocks = plan.interleave_blocks();
        let pairs: Vec<u32> = blocks.iter().map(|&(pair, _)| pair).collect();
        assert_eq!(pairs, vec![0, 0, 1, 1, 2, 2]);
        for pair in blocks.chunks(2) {
            assert_ne!(pair[0].1, pair[1].1, "{blocks:?}");
        }
        // Two of the three pairs start with side A.
        assert_eq!(blocks.iter().step_by(2).filter(|block| block.1).count(), 2);
        assert_eq!(plan.baseline_transport(), None);
        // Six blocks share a point's default iterations (at least the minimum each).
        assert_eq!(plan.pingpong_iters(8), 100_000 / 6);
        assert_eq!(plan.pingpong_iters(1 << 30), 200 / 6);
        assert_eq!(plan.bw_windows(64 << 20), MIN_SCALED_WINDOWS);
        assert_eq!(plan.bw_windows(1 << 20), 128 / 6);
        assert_eq!(plan.rank_record_count(), 6 * 2 + 6 * 2 + 6);
        assert!(plan
            .worker_args()
            .join(" ")
            .contains("--detect interleave --rounds 3"));
        let baseline = Plan {
            transport: Transport::Udp,
            interleave: Some(Interleave {
                pairs: 3,
                sides: Interleaved::Baseline,
            }),
            ..plan.clone()
        };
        assert_eq!(baseline.baseline_transport(), Some(Transport::RawUdp));
        assert_eq!(baseline.interleave_blocks(), plan.interleave_blocks());
        assert_eq!(baseline.rank_record_count(), plan.rank_record_count());
        assert_eq!(baseline.pingpong_iters(8), plan.pingpong_iters(8));
        assert!(baseline
            .worker_args()
            .join(" ")
            .contains("--baseline interleave --rounds 3"));
        let tcp = Plan {
            transport: Transport::Tcp,
            ..baseline.clone()
        };
        assert_eq!(tcp.baseline_transport(), Some(Transport::RawTcp));
        let udp_tcp = Plan {
            interleave: Some(Interleave {
                pairs: 3,
                sides: Interleaved::Tcp,
            }),
            ..baseline.clone()
        };
        assert_eq!(udp_tcp.baseline_transport(), Some(Transport::Tcp));
        assert_eq!(udp_tcp.interleave_blocks(), plan.interleave_blocks());
        assert!(udp_tcp
            .worker_args()
            .join(" ")
            .contains("--baseline tcp --rounds 3"));
        // Given iterations are per block.
        let given = Plan {
            iters: Some(500),
            ..plan
        };
        assert_eq!(given.pingpong_iters(8), 500);
        assert!(super::tests::plan(vec![TestName::Pingpong], None)
            .interleave_blocks()
            .is_empty());
    }

    #[test]
    fn pair_orders_are_balanced_fixed_and_not_periodic() {
        for pairs in 0..=200u32 {
            let orders = pair_orders(pairs);
            assert_eq!(orders.len(), pairs as usize);
            let a_first = orders.iter().filter(|&&a_first| a_first).count();
            assert_eq!(a_first, (pairs as usize).div_ceil(2), "{pairs}: {orders:?}");
            assert_eq!(orders, pair_orders(pairs), "the same every time");
        }
        // Neither strict alternation nor its complement, nor one block of each.
        let orders = pair_orders(20);
        let alternating: Vec<bool> = (0..20).map(|pair| pair % 2 == 0).collect();
        let complement: Vec<bool> = alternating.iter().map(|&a_first| !a_first).collect();
        assert_ne!(orders, alternating);
        assert_ne!(orders, complement);
        assert_ne!(orders[..10], [true; 10]);
        // splitmix64's published first output for seed 0.
        let mut state = 0u64;
        assert_eq!(splitmix64(&mut state), 0xE220_A839_7B1D_CDAF);
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
