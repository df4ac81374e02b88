//! `quiver-bench stripe`'s command line and what a run measures: the link counts, the
//! testbed's links, the transfer's length and windows, validated. Pure code, no I/O.

use std::net::SocketAddr;

use quiver_cli::bench::parent::choose_cpus;

use crate::testbed::{self, Spec};

/// Bytes of every message of the quiver transfer.
pub(crate) const MESSAGE_BYTES: usize = 1 << 20;
/// Distinct message contents (message i has content i % CONTENTS, stamped with i).
pub(crate) const CONTENTS: usize = 16;
/// UDP port of the quiver ranks on every link.
pub(crate) const QUIVER_PORT: u16 = 7400;
/// TCP port of the baseline.
pub(crate) const TCP_PORT: u16 = 7500;
/// Largest --recv-window (the reliable core's posted-reader limit).
const MAX_RECV_WINDOW: usize = 64;
/// Largest --links entry (one /24 per link under 10.77.0.0/16, and quiver's path limit).
const MAX_LINKS: u32 = 64;

/// Command line of `quiver-bench stripe`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct StripeArgs {
    /// Link counts to measure, comma-separated: 4, or 1,2,4,8 for the scaling table.
    #[arg(long, value_name = "LIST", default_value = "2")]
    pub(crate) links: String,
    /// Rate limit of every link and direction (tbf), e.g. 200mbit, 1gbit.
    #[arg(long, value_name = "RATE", default_value = "1gbit")]
    pub(crate) rate: String,
    /// Random loss in percent on every link and direction (nftables).
    #[arg(long, value_name = "PCT", default_value_t = 0.0)]
    pub(crate) loss: f64,
    /// MTU of the links (quiver's datagrams are MTU - 28 bytes).
    #[arg(long, value_name = "M", default_value_t = 1500)]
    pub(crate) mtu: u32,
    /// Seconds each transfer (quiver, then TCP) runs.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub(crate) seconds: f64,
    /// Take the last link down this many seconds into the quiver transfer (no TCP baseline
    /// then); the report compares the goodput after it with the surviving links' capacity.
    #[arg(long, value_name = "S")]
    pub(crate) kill_link: Option<f64>,
    /// Segmentation/receive offloads on the links: keep, or off (per-packet loss).
    #[arg(long, value_name = "keep|off", default_value = "keep")]
    pub(crate) offloads: String,
    /// Skip the TCP baseline.
    #[arg(long)]
    pub(crate) no_tcp: bool,
    /// Also run a raw udp stream (no protocol: GSO sends, GRO receives, every byte checked,
    /// nothing retransmitted) over the same links for --seconds: the floor of any protocol
    /// over udp sockets with the same CPUs.
    #[arg(long)]
    pub(crate) raw_udp: bool,
    /// Also run the raw udp stream with each datagram an authenticated Stream frame: the
    /// sender computes quiver's frame authenticator over every byte, the receiver verifies
    /// it (the floor of a datagram transport the job key protects, still with no protocol).
    #[arg(long)]
    pub(crate) raw_udp_tagged: bool,
    /// With --loss: first run the quiver transfer with the loss rules taken off the same
    /// testbed, then with them, and report the lossy goodput over the lossless one (quiver
    /// aims at 0.95 or more at 1% loss).
    #[arg(long)]
    pub(crate) lossless_baseline: bool,
    /// The quiver sender keeps this many messages posted (`post_send`, which a udp
    /// connection transmits in place, with no copy, from QUIVER_UDP_POST_IN_PLACE_MIN up:
    /// 256K by default) instead of one
    /// blocking `send` at a time; 0 = blocking sends. At most 16 (the distinct bodies).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(crate) post_window: usize,
    /// The quiver receiver keeps this many receives posted (`post_recv`, 1 MiB each): on
    /// its one udp connection the engine places frames of the next messages straight into
    /// their buffers, also while earlier messages still arrive; 0 = one blocking `recv` at
    /// a time. At most 64.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(crate) recv_window: usize,
    /// CPUs of the sender and the receiver, e.g. 0,1 [default: the first two allowed].
    #[arg(long, value_name = "A,B")]
    pub(crate) cpus: Option<String>,
    /// Testbed name (namespaces NAME-a, NAME-b); an existing one is replaced.
    #[arg(long, value_name = "NAME", default_value = "qstripe")]
    pub(crate) name: String,
    /// Also write one JSON object per link count to FILE; with `-`, only JSON on stdout.
    #[arg(long, value_name = "FILE|-")]
    pub(crate) json: Option<String>,
    /// Print the sender's protocol counters for each run.
    #[arg(long)]
    pub(crate) verbose: bool,
    /// Draw the scaling curve (goodput vs links for quiver and TCP, the nominal N x rate
    /// and the MTU ceiling) into FILE.svg or FILE.png.
    #[arg(long, value_name = "FILE")]
    pub(crate) plot: Option<std::path::PathBuf>,
    /// Internal: run as one side of a transfer (sender, receiver, tcp-server, tcp-client).
    #[arg(long, hide = true)]
    pub(crate) worker: Option<String>,
    /// Internal: the number of links (tcp workers).
    #[arg(long, hide = true, default_value_t = 1)]
    pub(crate) worker_links: u32,
}

/// The validated options.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) link_counts: Vec<u32>,
    pub(crate) rate_bps: u64,
    pub(crate) loss_pct: f64,
    pub(crate) mtu: u32,
    pub(crate) seconds: f64,
    pub(crate) kill_link: Option<f64>,
    pub(crate) offloads_off: bool,
    pub(crate) tcp: bool,
    pub(crate) raw_udp: bool,
    pub(crate) raw_udp_tagged: bool,
    pub(crate) lossless_baseline: bool,
    pub(crate) post_window: usize,
    pub(crate) recv_window: usize,
    pub(crate) cpus: [usize; 2],
    pub(crate) name: String,
    pub(crate) json: Option<String>,
    pub(crate) verbose: bool,
    pub(crate) plot: Option<std::path::PathBuf>,
}

impl Plan {
    pub(crate) fn from_args(args: &StripeArgs) -> Result<Plan, String> {
        let link_counts: Vec<u32> = args
            .links
            .split(',')
            .map(|entry| {
                entry
                    .trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|count| (1..=MAX_LINKS).contains(count))
                    .ok_or_else(|| {
                        format!("--links: {entry:?} is not a link count between 1 and {MAX_LINKS}")
                    })
            })
            .collect::<Result<_, _>>()?;
        if !(args.seconds.is_finite() && (0.5..=3600.0).contains(&args.seconds)) {
            return Err("--seconds must be between 0.5 and 3600".to_string());
        }
        if !(args.loss.is_finite() && (0.0..=50.0).contains(&args.loss)) {
            return Err("--loss must be a percentage between 0 and 50".to_string());
        }
        if !(576..=65535).contains(&args.mtu) {
            return Err("--mtu must be between 576 and 65535".to_string());
        }
        if let Some(at) = args.kill_link {
            if !(at.is_finite() && at > 0.0 && at + 1.0 < args.seconds) {
                return Err(
                    "--kill-link must be after 0 s and at least 1 s before --seconds ends"
                        .to_string(),
                );
            }
            if link_counts.contains(&1) {
                return Err("--kill-link needs at least 2 links".to_string());
            }
        }
        if args.lossless_baseline && args.loss <= 0.0 {
            return Err("--lossless-baseline needs --loss above 0".to_string());
        }
        let offloads_off = match args.offloads.as_str() {
            "keep" => false,
            "off" => true,
            other => return Err(format!("--offloads: expected keep or off, got {other:?}")),
        };
        let cpus = choose_cpus(args.cpus.as_deref())?;
        if args.post_window > CONTENTS {
            return Err(format!(
                "--post-window: at most {CONTENTS}, got {}",
                args.post_window
            ));
        }
        if args.recv_window > MAX_RECV_WINDOW {
            return Err(format!(
                "--recv-window: at most {MAX_RECV_WINDOW}, got {}",
                args.recv_window
            ));
        }
        Ok(Plan {
            link_counts,
            rate_bps: testbed::parse_rate(&args.rate)?,
            loss_pct: args.loss,
            mtu: args.mtu,
            seconds: args.seconds,
            kill_link: args.kill_link,
            offloads_off,
            tcp: !args.no_tcp && args.kill_link.is_none(),
            raw_udp: args.raw_udp && args.kill_link.is_none(),
            raw_udp_tagged: args.raw_udp_tagged && args.kill_link.is_none(),
            lossless_baseline: args.lossless_baseline,
            post_window: args.post_window,
            recv_window: args.recv_window,
            cpus,
            name: args.name.clone(),
            json: args.json.clone(),
            verbose: args.verbose,
            plot: args.plot.clone(),
        })
    }

    pub(crate) fn spec(&self, links: u32) -> Spec {
        Spec {
            name: self.name.clone(),
            links,
            rate_bps: self.rate_bps,
            loss_ppm: (self.loss_pct * 10_000.0).round() as u32,
            mtu: self.mtu,
            offloads_off: self.offloads_off,
        }
    }
}

/// The address of side `side` (0: a, 1: b) of link `link`.
pub(crate) fn link_address(link: u32, side: u32, port: u16) -> SocketAddr {
    SocketAddr::from(([10, 77, link as u8, side as u8 + 1], port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct TestCli {
        #[command(flatten)]
        stripe: StripeArgs,
    }

    fn plan(arguments: &[&str]) -> Result<Plan, String> {
        use clap::Parser;
        let mut all = vec!["stripe", "--cpus", "0,1"];
        all.extend_from_slice(arguments);
        match TestCli::try_parse_from(all) {
            Ok(cli) => Plan::from_args(&cli.stripe),
            Err(error) => Err(error.to_string()),
        }
    }

    #[test]
    fn options_are_checked() {
        let plan =
            plan(&["--links", "1,2,4,8", "--rate", "1gbit", "--mtu", "9000"]).expect("valid");
        assert_eq!(plan.link_counts, vec![1, 2, 4, 8]);
        assert_eq!(plan.rate_bps, 1_000_000_000);
        assert!(plan.tcp);
        assert!(!plan.raw_udp, "no raw udp stream unless asked");
        assert!(super::tests::plan(&["--raw-udp"]).expect("valid").raw_udp);
        assert!(super::tests::plan(&["--links", "0"]).is_err());
        assert!(super::tests::plan(&["--links", "65"]).is_err());
        assert!(super::tests::plan(&["--links", "2", "--loss", "60"]).is_err());
        assert!(super::tests::plan(&["--links", "1", "--kill-link", "2"]).is_err());
        assert!(super::tests::plan(&["--links", "2", "--kill-link", "9.5"]).is_err());
        let killing = super::tests::plan(&["--links", "2", "--kill-link", "3"]).expect("valid");
        assert!(!killing.tcp, "no TCP baseline with a dead link");
        assert!(super::tests::plan(&["--offloads", "maybe"]).is_err());
        assert_eq!(plan.recv_window, 0, "blocking receives by default");
        let posting = super::tests::plan(&["--recv-window", "8"]).expect("valid");
        assert_eq!(posting.recv_window, 8);
        assert!(super::tests::plan(&["--recv-window", "65"]).is_err());
        assert!(!plan.lossless_baseline);
        assert!(
            super::tests::plan(&["--lossless-baseline"]).is_err(),
            "needs --loss"
        );
        let lossy = super::tests::plan(&["--loss", "1", "--lossless-baseline"]).expect("valid");
        assert!(lossy.lossless_baseline);
    }
}
