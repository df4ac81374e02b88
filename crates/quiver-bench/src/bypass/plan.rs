//! The command line of `quiver-bench bypass` and its cases.

/// The port of quiver's ranks and of the raw-udp baseline.
pub(crate) const QUIVER_PORT: u16 = 7600;
pub(crate) const RAW_PORT: u16 = 7601;

/// One case of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub(crate) enum Case {
    /// quiver over udp, plain sockets.
    QuiverUdpSockets,
    /// quiver over udp, io_uring.
    QuiverUdpUring,
    /// quiver over AF_XDP.
    QuiverXdp,
    /// Plain UDP sockets, no protocol.
    RawUdp,
    /// AF_XDP ping-pong and one-way stream, no protocol.
    RawXdp,
}

impl Case {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Case::QuiverUdpSockets => "quiver-udp-sockets",
            Case::QuiverUdpUring => "quiver-udp-uring",
            Case::QuiverXdp => "quiver-xdp",
            Case::RawUdp => "raw-udp",
            Case::RawXdp => "raw-xdp",
        }
    }
}

/// Command line of `quiver-bench bypass`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct BypassArgs {
    /// Cases to run, in order (default: all five).
    #[arg(long, value_delimiter = ',', value_enum)]
    pub(crate) cases: Vec<Case>,
    /// Latency message sizes (bytes).
    #[arg(long, value_delimiter = ',', default_value = "8,1024")]
    pub(crate) lat_sizes: Vec<usize>,
    /// Round trips per latency size.
    #[arg(long, default_value_t = 20_000)]
    pub(crate) lat_iters: u64,
    /// Message size of the rate test.
    #[arg(long, default_value_t = 8)]
    pub(crate) rate_size: usize,
    /// Messages of the rate test.
    #[arg(long, default_value_t = 200_000)]
    pub(crate) rate_count: u64,
    /// Bandwidth message sizes (bytes).
    #[arg(long, value_delimiter = ',', default_value = "65536,1048576")]
    pub(crate) bw_sizes: Vec<usize>,
    /// Bytes streamed per bandwidth size.
    #[arg(long, default_value_t = 256 << 20)]
    pub(crate) bw_bytes: u64,
    /// A short run (for tests): few iterations of everything.
    #[arg(long)]
    pub(crate) quick: bool,
    /// The veth pair's MTU.
    #[arg(long, default_value_t = 1500)]
    pub(crate) mtu: u32,
    /// CPUs of rank 0 and rank 1.
    #[arg(long, value_delimiter = ',', default_value = "0,1")]
    pub(crate) cpus: Vec<usize>,
    /// Testbed name (namespaces NAME-a and NAME-b).
    #[arg(long, default_value = "qbypass")]
    pub(crate) name: String,
    /// Write one JSON object per case and test to FILE (`-`: stdout).
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<String>,
    /// Draw the headline figures into FILE.svg.
    #[arg(long, value_name = "FILE")]
    pub(crate) plot: Option<std::path::PathBuf>,
    /// Internal: run one side of a case.
    #[arg(long, value_enum, hide = true)]
    pub(crate) worker: Option<Case>,
    /// Internal: the side's rank.
    #[arg(long, hide = true, default_value_t = 0)]
    pub(crate) rank: u32,
}

impl BypassArgs {
    /// The arguments after `--quick` shrinks them.
    pub(crate) fn effective(&self) -> BypassArgs {
        let mut args = self.clone();
        if args.quick {
            args.lat_iters = args.lat_iters.min(300);
            args.rate_count = args.rate_count.min(5_000);
            args.bw_bytes = args.bw_bytes.min(8 << 20);
        }
        if args.cases.is_empty() {
            args.cases = vec![
                Case::QuiverUdpSockets,
                Case::QuiverUdpUring,
                Case::QuiverXdp,
                Case::RawUdp,
                Case::RawXdp,
            ];
        }
        args
    }

    /// The options a worker needs to run the same tests.
    pub(crate) fn worker_options(&self) -> Vec<String> {
        let list = |v: &[usize]| {
            v.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        vec![
            format!("--lat-sizes={}", list(&self.lat_sizes)),
            format!("--lat-iters={}", self.lat_iters),
            format!("--rate-size={}", self.rate_size),
            format!("--rate-count={}", self.rate_count),
            format!("--bw-sizes={}", list(&self.bw_sizes)),
            format!("--bw-bytes={}", self.bw_bytes),
            format!("--mtu={}", self.mtu),
        ]
    }
}
