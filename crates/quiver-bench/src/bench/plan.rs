//! What one launch of the lab's two ranks measures: the bench's plan (`quiver_cli`), the
//! lab's own tests (loggp, pool) and the paired runs that split every point into blocks.
//!
//! The parent and both ranks build the same [`LabPlan`] from the same options. Pure code,
//! no I/O.

use quiver_cli::bench::plan::{Plan, RankJob, TestName, Transport, MIN_SCALED_ITERS};

/// One test of `quiver-bench bench`: the bench's, and the lab's own, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum)]
pub(crate) enum LabTest {
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
}

impl LabTest {
    /// The tests a run makes when none is named (the bench's).
    pub(crate) const DEFAULT: [LabTest; 4] = [
        LabTest::Floor,
        LabTest::Pingpong,
        LabTest::Bw,
        LabTest::Rate,
    ];

    /// The name used on the command line and in the JSON `test` key.
    pub(crate) fn as_str(self) -> &'static str {
        match self.everyday() {
            Some(test) => test.as_str(),
            None if self == LabTest::Loggp => "loggp",
            None => "pool",
        }
    }

    /// The bench's test of the same name (None for the lab's own).
    pub(crate) fn everyday(self) -> Option<TestName> {
        match self {
            LabTest::Floor => Some(TestName::Floor),
            LabTest::Pingpong => Some(TestName::Pingpong),
            LabTest::Bw => Some(TestName::Bw),
            LabTest::Bibw => Some(TestName::Bibw),
            LabTest::Rate => Some(TestName::Rate),
            LabTest::Loggp | LabTest::Pool => None,
        }
    }

    /// The lab's test for one of the bench's.
    pub(crate) fn of(test: TestName) -> LabTest {
        match test {
            TestName::Floor => LabTest::Floor,
            TestName::Pingpong => LabTest::Pingpong,
            TestName::Bw => LabTest::Bw,
            TestName::Bibw => LabTest::Bibw,
            TestName::Rate => LabTest::Rate,
            // `quiver bench am` runs apart and makes no bench records.
            TestName::Am => unreachable!("no bench record is of `am`"),
        }
    }
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
    /// its own context in the same two ranks: whether udp's bandwidth over loopback is at
    /// least tcp's, compared inside one launch.
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

/// A validated run of `quiver-bench bench`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LabPlan {
    /// The bench's plan: its tests, the transport, sizes, iterations and settings (with
    /// `blocks_per_point` = 2 x pairs when interleaved).
    pub(crate) base: Plan,
    /// Every test, the bench's and the lab's, ascending, without duplicates.
    pub(crate) tests: Vec<LabTest>,
    /// `--detect interleave` or `--baseline interleave|tcp` with `--rounds N`: N pairs of
    /// blocks per point in one launch of the ranks ([`LabPlan::interleave_blocks`]).
    pub(crate) interleave: Option<Interleave>,
}

/// Seed of the order of the blocks in each interleaved pair ([`LabPlan::interleave_blocks`]).
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

impl LabPlan {
    /// Tests that run between the ranks, in order.
    pub(crate) fn rank_tests(&self) -> impl Iterator<Item = LabTest> + '_ {
        self.tests
            .iter()
            .copied()
            .filter(|&test| test != LabTest::Floor)
    }

    /// Whether any test needs the two ranks.
    pub(crate) fn needs_ranks(&self) -> bool {
        self.rank_tests().next().is_some()
    }

    /// Whether the plan has `test`.
    pub(crate) fn has(&self, test: LabTest) -> bool {
        self.tests.contains(&test)
    }

    /// Whether any test sweeps the sizes (or shows the floors per size).
    pub(crate) fn sweeps_sizes(&self) -> bool {
        self.base.sweeps_sizes() || self.has(LabTest::Loggp) || self.has(LabTest::Pool)
    }

    /// The blocks of every interleaved point, in order, as (pair, side A: detection on, or
    /// quiver rather than the baseline). Each pair runs A-B or B-A as [`pair_orders`] says,
    /// half of them each way, so a drift during the point (the host moving a vCPU, a
    /// warming cache) weighs on both sides alike. Every point uses the same order.
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
        match self.interleave.map(|interleave| interleave.sides) {
            Some(Interleaved::Baseline) => self.base.transport.raw_baseline(),
            Some(Interleaved::Tcp) => Some(Transport::Tcp),
            _ => None,
        }
    }

    /// loggp at `size_bytes`: (round trips for L, timed send/receive pairs for o_s and
    /// o_r, windows of the saturated stream for g). A fifth of pingpong's round trips
    /// each (the overhead loop waits two round trips per sample), and bw's windows.
    pub(crate) fn loggp_counts(&self, size_bytes: u64) -> (u64, u64, u64) {
        let round_trips = (self.base.pingpong_iters(size_bytes) / 5).max(MIN_SCALED_ITERS);
        (round_trips, round_trips, self.base.bw_windows(size_bytes))
    }

    /// How many result records the ranks produce (one per measured point and block).
    pub(crate) fn rank_record_count(&self) -> usize {
        let sizes = self.base.sizes.len();
        let own: usize = self
            .rank_tests()
            .map(|test| match test {
                // Two points per size (pooled, fresh).
                LabTest::Pool => 2 * sizes,
                // One point per size and the fit.
                LabTest::Loggp => sizes + 1,
                _ => 0,
            })
            .sum();
        self.base.rank_record_count() + own
    }

    /// Arguments after the executable's name that make a rank run this plan
    /// (`bench --worker ...`).
    pub(crate) fn worker_args(&self) -> Vec<String> {
        let mut args = self.base.worker_options();
        if let Some(interleave) = self.interleave {
            let (option, value) = match interleave.sides {
                Interleaved::Detection => ("--detect", "interleave"),
                Interleaved::Baseline => ("--baseline", "interleave"),
                Interleaved::Tcp => ("--baseline", "tcp"),
            };
            args.extend([option, value, "--rounds"].map(String::from));
            args.push(interleave.pairs.to_string());
        }
        args.extend(self.rank_tests().map(|test| test.as_str().to_string()));
        args
    }

    /// The launch of the ranks that runs this plan's rank tests.
    pub(crate) fn rank_job(&self) -> RankJob {
        RankJob {
            worker_args: self.worker_args(),
            records: self.rank_record_count(),
            ..self.base.rank_job()
        }
    }
}

#[cfg(test)]
mod tests {
    use quiver_cli::bench::plan::MIN_SCALED_WINDOWS;

    use super::*;

    fn plan(tests: Vec<LabTest>, iters: Option<u64>) -> LabPlan {
        LabPlan {
            base: Plan {
                tests: tests.iter().filter_map(|test| test.everyday()).collect(),
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
            },
            tests,
            interleave: None,
        }
    }

    /// `plan` split into `pairs` interleaved pairs of `sides`.
    fn interleaved(mut plan: LabPlan, pairs: u32, sides: Interleaved) -> LabPlan {
        plan.interleave = Some(Interleave { pairs, sides });
        plan.base.blocks_per_point = 2 * pairs;
        plan
    }

    #[test]
    fn loggp_counts_follow_pingpong_and_bw() {
        let mut quick = plan(vec![LabTest::Loggp], None);
        quick.base.effort_percent = 10;
        assert_eq!(quick.loggp_counts(8), (2_000, 2_000, 500));
    }

    #[test]
    fn counts_records_and_builds_worker_args() {
        let plan = plan(
            vec![
                LabTest::Floor,
                LabTest::Pingpong,
                LabTest::Bw,
                LabTest::Rate,
                LabTest::Loggp,
                LabTest::Pool,
            ],
            Some(200),
        );
        // 2 + 2 + 1, loggp 2 + fit, pool 2 x 2.
        assert_eq!(plan.rank_record_count(), 5 + 3 + 4);
        assert_eq!(
            plan.worker_args().join(" "),
            "bench --worker --transport shm --sizes 8,65536 --window 64 --iters 200 pingpong bw rate loggp pool"
        );
        assert_eq!(plan.rank_job().records, 12);
        let floor_only = super::tests::plan(vec![LabTest::Floor], None);
        assert!(!floor_only.needs_ranks());
        assert_eq!(floor_only.rank_record_count(), 0);
    }

    #[test]
    fn interleaved_points_split_into_balanced_blocks() {
        let plan = interleaved(
            plan(vec![LabTest::Pingpong, LabTest::Bw, LabTest::Rate], None),
            3,
            Interleaved::Detection,
        );
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
        assert_eq!(plan.base.pingpong_iters(8), 100_000 / 6);
        assert_eq!(plan.base.pingpong_iters(1 << 30), 200 / 6);
        assert_eq!(plan.base.bw_windows(64 << 20), MIN_SCALED_WINDOWS);
        assert_eq!(plan.base.bw_windows(1 << 20), 128 / 6);
        assert_eq!(plan.rank_record_count(), 6 * 2 + 6 * 2 + 6);
        assert!(plan
            .worker_args()
            .join(" ")
            .contains("--detect interleave --rounds 3"));
        let mut baseline = interleaved(plan.clone(), 3, Interleaved::Baseline);
        baseline.base.transport = Transport::Udp;
        assert_eq!(baseline.baseline_transport(), Some(Transport::RawUdp));
        assert_eq!(baseline.interleave_blocks(), plan.interleave_blocks());
        assert_eq!(baseline.rank_record_count(), plan.rank_record_count());
        assert_eq!(baseline.base.pingpong_iters(8), plan.base.pingpong_iters(8));
        assert!(baseline
            .worker_args()
            .join(" ")
            .contains("--baseline interleave --rounds 3"));
        let mut tcp = baseline.clone();
        tcp.base.transport = Transport::Tcp;
        assert_eq!(tcp.baseline_transport(), Some(Transport::RawTcp));
        let udp_tcp = interleaved(baseline.clone(), 3, Interleaved::Tcp);
        assert_eq!(udp_tcp.baseline_transport(), Some(Transport::Tcp));
        assert_eq!(udp_tcp.interleave_blocks(), plan.interleave_blocks());
        assert!(udp_tcp
            .worker_args()
            .join(" ")
            .contains("--baseline tcp --rounds 3"));
        // Given iterations are per block.
        let mut given = plan.clone();
        given.base.iters = Some(500);
        assert_eq!(given.base.pingpong_iters(8), 500);
        assert!(super::tests::plan(vec![LabTest::Pingpong], None)
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
    fn lab_tests_name_and_order_like_the_bench() {
        for test in TestName::ALL {
            assert_eq!(LabTest::of(test).as_str(), test.as_str());
            assert_eq!(LabTest::of(test).everyday(), Some(test));
        }
        assert_eq!(LabTest::Loggp.as_str(), "loggp");
        assert_eq!(LabTest::Pool.as_str(), "pool");
        assert!(LabTest::Rate < LabTest::Loggp && LabTest::Loggp < LabTest::Pool);
    }
}
