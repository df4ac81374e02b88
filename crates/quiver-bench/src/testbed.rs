//! `quiver-bench testbed up|down`: two network namespaces joined by N veth links, each link its
//! own subnet, rate-limited with tc tbf and made lossy with nftables (see PLATFORM.md).
//!
//! Layout for `--name NAME` (default `quiver`):
//! - namespaces `NAME-a` and `NAME-b`, loopback up in both;
//! - link i (0-based) is a veth pair called `link{i}` on both sides, with `10.77.i.1/24` in
//!   `NAME-a` and `10.77.i.2/24` in `NAME-b`, MTU `--mtu`;
//! - a tbf qdisc at `--rate` on both ends of every link (each end shapes what it sends, so
//!   both directions are limited);
//! - with `--loss PCT`: an nftables `netdev` table `quiver` in each namespace with one
//!   ingress chain per link dropping `numgen random mod 1000000 < PPM` packets, so each
//!   direction loses PCT% of its packets;
//! - offloads (GSO/GRO/TSO) stay as the kernel sets them unless `--offloads off`.
//!
//! Everything lives inside the two namespaces, so `down` is deleting them (idempotent), and
//! the host's own interfaces are never touched. `up` rolls back whatever it built when a
//! step fails or it is interrupted (SIGINT/SIGTERM). With `--owner-pid PID`, `up` also
//! starts a detached watcher (`quiver-bench testbed watch`) that removes the testbed when that
//! process exits, however it exits: tests use this so a killed test run leaves nothing.
//! Root (CAP_NET_ADMIN) and the `ip`, `tc` and `nft` tools are required.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Exit code for a bad command line or a missing prerequisite.
const EXIT_USAGE: i32 = 2;
/// Exit code for a failure while building or removing the testbed.
const EXIT_FAILURE: i32 = 1;
/// Exit code after SIGINT/SIGTERM (128 + SIGINT).
const EXIT_INTERRUPTED: i32 = 130;
/// Most links one testbed may have (one /24 under 10.77.0.0/16 each).
pub(crate) const MAX_LINKS: u32 = 254;
/// Default MTU of the links.
const DEFAULT_MTU: u32 = 1500;
/// How long the tbf queue may hold a packet before dropping it (sets its queue length).
const TBF_QUEUE_LATENCY_MS: u64 = 20;
/// Smallest tbf bucket (see [`tbf_parameters`]).
const MIN_BURST_BYTES: u64 = 128 << 10;
/// How often the watcher looks at its owner and the namespaces.
const WATCH_INTERVAL: Duration = Duration::from_millis(200);
/// Longest testbed name (namespace names get `-a`/`-b`; keep well under NAME_MAX).
const MAX_NAME_CHARS: usize = 40;

/// Options of `quiver-bench testbed`.
#[derive(Debug, clap::Args)]
pub(crate) struct TestbedArgs {
    #[command(subcommand)]
    command: TestbedCommand,
}

#[derive(Debug, clap::Subcommand)]
enum TestbedCommand {
    /// Build the two namespaces and their links
    Up(UpArgs),
    /// Remove a testbed (nothing to do if it does not exist)
    Down(NameArg),
    /// Internal: remove the testbed once process PID has exited
    #[command(hide = true)]
    Watch {
        #[command(flatten)]
        name: NameArg,
        /// The process whose exit triggers the removal.
        #[arg(long, value_name = "PID")]
        owner_pid: i32,
    },
}

#[derive(Debug, Clone, clap::Args)]
struct NameArg {
    /// Testbed name: the namespaces are NAME-a and NAME-b.
    #[arg(long, value_name = "NAME", default_value = "quiver")]
    name: String,
}

#[derive(Debug, Clone, clap::Args)]
struct UpArgs {
    #[command(flatten)]
    name: NameArg,
    /// Number of veth links between the namespaces (1..=254).
    #[arg(long, value_name = "N")]
    links: u32,
    /// Rate limit of every link in each direction, e.g. 100mbit, 1gbit, 2.5gbit.
    #[arg(long, value_name = "RATE")]
    rate: String,
    /// Random packet loss in percent in each direction of every link (ppm resolution).
    #[arg(long, value_name = "PCT", default_value_t = 0.0)]
    loss: f64,
    /// MTU of the links.
    #[arg(long, value_name = "M", default_value_t = DEFAULT_MTU)]
    mtu: u32,
    /// Segmentation/receive offloads on the links: keep (kernel defaults) or off (every
    /// packet is a real MTU-sized packet, so loss hits single packets).
    #[arg(long, value_enum, default_value = "keep")]
    offloads: Offloads,
    /// Remove an existing testbed of the same name first instead of failing.
    #[arg(long)]
    force: bool,
    /// Remove the testbed automatically when process PID exits (starts a watcher).
    #[arg(long, value_name = "PID")]
    owner_pid: Option<i32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Offloads {
    Keep,
    Off,
}

/// A validated testbed description.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Spec {
    /// Testbed name (namespace prefix).
    pub(crate) name: String,
    /// Number of links.
    pub(crate) links: u32,
    /// Rate of each link and direction, in bits per second.
    pub(crate) rate_bps: u64,
    /// Loss per direction in parts per million.
    pub(crate) loss_ppm: u32,
    /// Link MTU in bytes.
    pub(crate) mtu: u32,
    /// Whether to turn segmentation/receive offloads off.
    pub(crate) offloads_off: bool,
}

/// Set by the SIGINT/SIGTERM handler; `up` checks it between steps and rolls back.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Runs `quiver-bench testbed`; returns the exit code.
pub(crate) fn main(args: TestbedArgs) -> i32 {
    let result = match args.command {
        TestbedCommand::Up(up) => match spec_from_args(&up) {
            Ok(spec) => require_root_and_tools().and_then(|()| up_command(&spec, &up)),
            Err(message) => Err(Failure::Usage(message)),
        },
        TestbedCommand::Down(name) => check_name(&name.name)
            .map_err(Failure::Usage)
            .and_then(|()| require_root_and_tools())
            .and_then(|()| down(&name.name).map_err(Failure::Failed)),
        TestbedCommand::Watch { name, owner_pid } => {
            watch(&name.name, owner_pid);
            Ok(())
        }
    };
    match result {
        Ok(()) => 0,
        Err(failure) => {
            let (code, message) = match failure {
                Failure::Usage(message) => (EXIT_USAGE, message),
                Failure::Failed(message) => (EXIT_FAILURE, message),
                Failure::Interrupted => (
                    EXIT_INTERRUPTED,
                    "interrupted; removed the partial testbed".to_string(),
                ),
            };
            eprintln!("quiver-bench testbed: {message}");
            code
        }
    }
}

/// Why a testbed command failed.
#[derive(Debug)]
enum Failure {
    Usage(String),
    Failed(String),
    Interrupted,
}

/// The two namespace names of testbed `name`.
pub(crate) fn namespaces(name: &str) -> [String; 2] {
    [format!("{name}-a"), format!("{name}-b")]
}

/// `up` with rollback, `--force` and the optional watcher.
fn up_command(spec: &Spec, args: &UpArgs) -> Result<(), Failure> {
    install_signal_handlers();
    let existing: Vec<String> = namespaces(&spec.name)
        .into_iter()
        .filter(|namespace| namespace_exists(namespace))
        .collect();
    if !existing.is_empty() {
        if !args.force {
            return Err(Failure::Failed(format!(
                "testbed '{}' already exists (namespaces {}); remove it with `quiver-bench testbed down --name {}` or pass --force",
                spec.name,
                existing.join(", "),
                spec.name
            )));
        }
        down(&spec.name).map_err(Failure::Failed)?;
    }
    if let Err(failure) = up(spec) {
        // Roll back whatever was built; a second failure would only hide the first.
        let _ = down(&spec.name);
        return Err(failure);
    }
    if let Some(owner_pid) = args.owner_pid {
        if let Err(message) = start_watcher(&spec.name, owner_pid) {
            let _ = down(&spec.name);
            return Err(Failure::Failed(message));
        }
    }
    let [a, b] = namespaces(&spec.name);
    println!(
        "testbed '{}' up: {} link(s) between namespaces {a} (10.77.i.1) and {b} (10.77.i.2), {} per direction, loss {} ppm, MTU {}, offloads {}",
        spec.name,
        spec.links,
        format_rate(spec.rate_bps),
        spec.loss_ppm,
        spec.mtu,
        if spec.offloads_off { "off" } else { "kept" }
    );
    Ok(())
}

/// Builds testbed `spec` for another command (`quiver-bench stripe`): removes an old one of
/// the same name first, rolls back on failure, and starts a watcher that removes it when
/// this process exits. The caller should still call [`down`] when done, and should call
/// [`install_signal_handlers`] first so that Ctrl-C stops the build (see [`interrupted`]).
///
/// # Errors
/// A message naming the step that failed, or "interrupted".
pub(crate) fn build(spec: &Spec) -> Result<(), String> {
    check_name(&spec.name)?;
    require_root_and_tools().map_err(|failure| match failure {
        Failure::Usage(message) | Failure::Failed(message) => message,
        Failure::Interrupted => "interrupted".to_string(),
    })?;
    down(&spec.name)?;
    up(spec).map_err(|failure| {
        let _ = down(&spec.name);
        match failure {
            Failure::Usage(message) | Failure::Failed(message) => message,
            Failure::Interrupted => "interrupted".to_string(),
        }
    })?;
    // Even if this process is killed outright, the testbed goes with it.
    start_watcher(&spec.name, std::process::id() as i32).inspect_err(|_| {
        let _ = down(&spec.name);
    })
}

/// Whether SIGINT or SIGTERM arrived since [`install_signal_handlers`].
pub(crate) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Builds the testbed step by step; stops at the first failure or interruption.
fn up(spec: &Spec) -> Result<(), Failure> {
    let [a, b] = namespaces(&spec.name);
    let step = |program: &str, arguments: &[&str]| -> Result<(), Failure> {
        if INTERRUPTED.load(Ordering::SeqCst) {
            return Err(Failure::Interrupted);
        }
        run(program, arguments).map_err(|message| {
            if INTERRUPTED.load(Ordering::SeqCst) {
                Failure::Interrupted
            } else {
                Failure::Failed(message)
            }
        })
    };
    for namespace in [&a, &b] {
        step("ip", &["netns", "add", namespace])?;
        step("ip", &["-n", namespace, "link", "set", "lo", "up"])?;
    }
    let mtu = spec.mtu.to_string();
    let (rate, burst, latency) = tbf_parameters(spec);
    for link in 0..spec.links {
        let device = format!("link{link}");
        step(
            "ip",
            &[
                "link", "add", &device, "netns", &a, "mtu", &mtu, "type", "veth", "peer", "name",
                &device, "netns", &b, "mtu", &mtu,
            ],
        )?;
        for (namespace, host) in [(&a, 1), (&b, 2)] {
            let address = format!("10.77.{link}.{host}/24");
            step(
                "ip",
                &["-n", namespace, "addr", "add", &address, "dev", &device],
            )?;
            if spec.offloads_off {
                step(
                    "ip",
                    &[
                        "netns",
                        "exec",
                        namespace,
                        "ethtool",
                        "-K",
                        &device,
                        "tso",
                        "off",
                        "gso",
                        "off",
                        "gro",
                        "off",
                        "tx-udp-segmentation",
                        "off",
                    ],
                )?;
            }
            step(
                "tc",
                &[
                    "-n", namespace, "qdisc", "add", "dev", &device, "root", "tbf", "rate", &rate,
                    "burst", &burst, "latency", &latency,
                ],
            )?;
            step("ip", &["-n", namespace, "link", "set", &device, "up"])?;
        }
    }
    if spec.loss_ppm > 0 {
        if INTERRUPTED.load(Ordering::SeqCst) {
            return Err(Failure::Interrupted);
        }
        set_loss(spec, true).map_err(Failure::Failed)?;
    }
    Ok(())
}

/// Puts the loss rules of testbed `spec` (`spec.loss_ppm`) on its links in both
/// namespaces (`on`), or takes them off: the nftables table `netdev quiver`.
///
/// # Errors
/// `nft` failed (for `on`: the rules may be on in one namespace only).
pub(crate) fn set_loss(spec: &Spec, on: bool) -> Result<(), String> {
    let script = if on {
        loss_ruleset(spec.links, spec.loss_ppm)
    } else {
        "delete table netdev quiver\n".to_string()
    };
    for namespace in namespaces(&spec.name) {
        run_with_input(
            "ip",
            &["netns", "exec", &namespace, "nft", "-f", "-"],
            &script,
        )?;
    }
    Ok(())
}

/// Removes testbed `name`: deleting its namespaces removes the veths, qdiscs and nftables
/// rules with them. Nothing to do (and success) if they do not exist.
///
/// # Errors
/// A namespace exists but could not be deleted.
pub(crate) fn down(name: &str) -> Result<(), String> {
    let mut problems = Vec::new();
    for namespace in namespaces(name) {
        if namespace_exists(&namespace) {
            if let Err(message) = run("ip", &["netns", "del", &namespace]) {
                problems.push(message);
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// tc tbf `rate`, `burst` and `latency` for a link.
///
/// The bucket holds the largest of: 2 ms at the link rate, two full frames, and
/// [`MIN_BURST_BYTES`]. Measured with iperf3 (cubic) over one link at 1gbit: a 60 KiB
/// bucket gives 74-85% of the rate, 128 KiB and more 95-96% (the header-overhead
/// ceiling); at 100mbit 95.6%. A bucket above 64 KiB lets GSO packets through whole, so
/// with offloads kept a dropped packet can be a whole 64 KiB GSO chunk: use
/// `--offloads off` for per-packet loss. The queue holds [`TBF_QUEUE_LATENCY_MS`] at the
/// rate.
pub(crate) fn tbf_parameters(spec: &Spec) -> (String, String, String) {
    let frame_bytes = u64::from(spec.mtu) + 14;
    let two_ms_bytes = spec.rate_bps / 8 / 500;
    let burst_bytes = two_ms_bytes.max(2 * frame_bytes).max(MIN_BURST_BYTES);
    (
        format!("{}bit", spec.rate_bps),
        format!("{burst_bytes}b"),
        format!("{TBF_QUEUE_LATENCY_MS}ms"),
    )
}

/// The nftables script that drops `loss_ppm` of the packets arriving on every link.
pub(crate) fn loss_ruleset(links: u32, loss_ppm: u32) -> String {
    let mut script = String::from("table netdev quiver {\n");
    for link in 0..links {
        script.push_str(&format!(
            "  chain ingress_link{link} {{\n    type filter hook ingress device \"link{link}\" priority 0;\n    numgen random mod 1000000 < {loss_ppm} drop\n  }}\n"
        ));
    }
    script.push_str("}\n");
    script
}

/// Parses a rate such as `100mbit`, `1gbit`, `2.5gbit`, `500kbit` or `1000000` (bits per
/// second) into bits per second.
pub(crate) fn parse_rate(text: &str) -> Result<u64, String> {
    let lower = text.trim().to_ascii_lowercase();
    let (number, multiplier) = [
        ("tbit", 1e12),
        ("gbit", 1e9),
        ("mbit", 1e6),
        ("kbit", 1e3),
        ("bit", 1.0),
    ]
    .iter()
    .find_map(|(suffix, multiplier)| {
        lower
            .strip_suffix(suffix)
            .map(|number| (number.to_string(), *multiplier))
    })
    .unwrap_or((lower.clone(), 1.0));
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("--rate: expected a rate such as 100mbit or 1gbit, got '{text}'"))?;
    let bits = value * multiplier;
    if !(bits.is_finite() && (8_000.0..=1e13).contains(&bits)) {
        return Err(format!("--rate: {text} is outside 8kbit..10tbit"));
    }
    Ok(bits.round() as u64)
}

fn format_rate(bits_per_second: u64) -> String {
    let bits = bits_per_second as f64;
    if bits >= 1e9 {
        format!("{} Gbit/s", bits / 1e9)
    } else if bits >= 1e6 {
        format!("{} Mbit/s", bits / 1e6)
    } else {
        format!("{} kbit/s", bits / 1e3)
    }
}

fn check_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= MAX_NAME_CHARS
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !name.starts_with('-');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "--name: '{name}' must be 1..={MAX_NAME_CHARS} characters of A-Z a-z 0-9 - _, not starting with -"
        ))
    }
}

fn spec_from_args(args: &UpArgs) -> Result<Spec, String> {
    check_name(&args.name.name)?;
    if !(1..=MAX_LINKS).contains(&args.links) {
        return Err(format!("--links must be between 1 and {MAX_LINKS}"));
    }
    if !(68..=65535).contains(&args.mtu) {
        return Err("--mtu must be between 68 and 65535".to_string());
    }
    if !(args.loss.is_finite() && (0.0..=100.0).contains(&args.loss)) {
        return Err("--loss must be a percentage between 0 and 100".to_string());
    }
    Ok(Spec {
        name: args.name.name.clone(),
        links: args.links,
        rate_bps: parse_rate(&args.rate)?,
        loss_ppm: (args.loss * 10_000.0).round() as u32,
        mtu: args.mtu,
        offloads_off: args.offloads == Offloads::Off,
    })
}

fn require_root_and_tools() -> Result<(), Failure> {
    // SAFETY: geteuid cannot fail and has no side effects.
    if unsafe { libc::geteuid() } != 0 {
        return Err(Failure::Usage(
            "the testbed needs root (it creates network namespaces, veth links, tc qdiscs and nftables rules); run it as root".to_string(),
        ));
    }
    for tool in ["ip", "tc", "nft"] {
        let found = Command::new(tool)
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        if !found {
            return Err(Failure::Usage(format!(
                "'{tool}' is not installed (apt-get install iproute2 nftables)"
            )));
        }
    }
    Ok(())
}

fn namespace_exists(namespace: &str) -> bool {
    std::path::Path::new("/run/netns").join(namespace).exists()
}

/// Runs `program arguments`, returning its stderr as the error when it fails.
fn run(program: &str, arguments: &[&str]) -> Result<(), String> {
    run_with_input(program, arguments, "")
}

fn run_with_input(program: &str, arguments: &[&str], input: &str) -> Result<(), String> {
    use std::io::Write;
    let command_line = || format!("{program} {}", arguments.join(" "));
    let mut child = Command::new(program)
        .args(arguments)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| format!("{}: {error}", command_line()))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A program that does not read its input closes the pipe early; its exit status
        // tells whether that mattered.
        let _ = stdin.write_all(input.as_bytes());
    }
    let output = child
        .wait_with_output()
        .map_err(|error| format!("{}: {error}", command_line()))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{}` failed ({}): {}",
            command_line(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Starts `quiver-bench testbed watch` detached (own session, no terminal, no inherited pipes),
/// so it outlives both `up` and the owner. Returns once the watcher holds the testbed's
/// namespaces (it says so on its stdout, a pipe closed after that line): a testbed removed
/// and made again before, under load, would otherwise be the one it watched.
fn start_watcher(name: &str, owner_pid: i32) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let program = std::env::current_exe()
        .map_err(|error| format!("cannot find this executable for the watcher: {error}"))?;
    let mut command = Command::new(program);
    command
        .args(["testbed", "watch", "--name", name, "--owner-pid"])
        .arg(owner_pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // SAFETY: setsid is async-signal-safe and touches nothing but this (child) process.
    unsafe {
        command.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut watcher = command
        .spawn()
        .map_err(|error| format!("starting the watcher: {error}"))?;
    // One line once it holds the namespaces; nothing (end of file) if it returned at once.
    let mut ready = String::new();
    if let Some(stdout) = watcher.stdout.take() {
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut ready);
    }
    Ok(())
}

/// Waits until `owner_pid` has exited or the testbed is gone, then removes the testbed.
///
/// Only the testbed that existed when the watcher started: its namespaces are recorded by
/// identity (device and inode of the namespace files), and a watcher whose namespaces were
/// removed or replaced returns without touching anything. Without this, a run that ended
/// (and removed its testbed itself) left a watcher that, up to one interval later, removed
/// the testbed of the *next* run of the same name: `quiver-bench stripe` invocations one
/// after the other lost their namespaces mid-run ("Cannot open network namespace").
///
/// The watcher holds its namespaces open meanwhile: the kernel gives a freed namespace's
/// inode number to the next one made, so a testbed removed and made again under the same
/// name a moment later had the old identity, and the watcher removed the new one. A
/// namespace held open is not freed, and its number stays its own.
fn watch(name: &str, owner_pid: i32) {
    let owner = quiver_transport::sys::pidfd_open(owner_pid);
    let [a, b] = namespaces(name);
    let held = [hold_namespace(&a), hold_namespace(&b)];
    let watched = [held_identity(&held[0]), held_identity(&held[1])];
    if watched.iter().all(Option::is_none) {
        return;
    }
    // `up` waits for this line (start_watcher), then closes the pipe.
    let _ = std::io::Write::write_all(&mut std::io::stdout(), b"watching\n");
    let _ = std::io::Write::flush(&mut std::io::stdout());
    let still_watched = || [namespace_identity(&a), namespace_identity(&b)] == watched;
    loop {
        if !still_watched() {
            return;
        }
        let owner_gone = match &owner {
            Ok(pidfd) => quiver_transport::sys::pidfd_exited(pidfd),
            Err(_) => true,
        };
        if owner_gone {
            // Checked again right before: the owner may have removed its testbed and a
            // new one of the same name come up since the check above.
            if still_watched() {
                let _ = down(name);
            }
            return;
        }
        std::thread::sleep(WATCH_INTERVAL);
    }
}

/// Namespace `namespace` opened (its file under /run/netns), which keeps it alive; `None`
/// when it does not exist.
fn hold_namespace(namespace: &str) -> Option<std::fs::File> {
    std::fs::File::open(std::path::Path::new("/run/netns").join(namespace)).ok()
}

/// The identity of a namespace held open by [`hold_namespace`].
fn held_identity(held: &Option<std::fs::File>) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let metadata = held.as_ref()?.metadata().ok()?;
    Some((metadata.dev(), metadata.ino()))
}

/// The identity of namespace `namespace` (device and inode of its file under /run/netns,
/// which is the namespace's own nsfs inode): a namespace deleted and made again under the
/// same name has another. `None` when it does not exist.
fn namespace_identity(namespace: &str) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(std::path::Path::new("/run/netns").join(namespace))
        .ok()
        .map(|metadata| (metadata.dev(), metadata.ino()))
}

extern "C" fn on_signal(_signal: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// SIGINT/SIGTERM only set [`INTERRUPTED`]; `up` notices, rolls back and exits 130 (and
/// `quiver-bench stripe` stops its ranks and removes its testbed).
pub(crate) fn install_signal_handlers() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(signal, on_signal as *const () as libc::sighandler_t) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse() {
        assert_eq!(parse_rate("100mbit"), Ok(100_000_000));
        assert_eq!(parse_rate("1gbit"), Ok(1_000_000_000));
        assert_eq!(parse_rate("2.5Gbit"), Ok(2_500_000_000));
        assert_eq!(parse_rate("500kbit"), Ok(500_000));
        assert_eq!(parse_rate("1000000"), Ok(1_000_000));
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("1bit").is_err());
        assert!(parse_rate("-1gbit").is_err());
    }

    fn spec(rate_bps: u64, mtu: u32) -> Spec {
        Spec {
            name: "t".into(),
            links: 2,
            rate_bps,
            loss_ppm: 10_000,
            mtu,
            offloads_off: false,
        }
    }

    #[test]
    fn tbf_bucket_is_two_ms_or_two_frames_or_128k() {
        assert_eq!(
            tbf_parameters(&spec(100_000_000, 1500)),
            ("100000000bit".into(), "131072b".into(), "20ms".into())
        );
        assert_eq!(tbf_parameters(&spec(1_000_000_000, 1500)).1, "250000b");
        assert_eq!(tbf_parameters(&spec(1_000_000, 1500)).1, "131072b");
        assert_eq!(tbf_parameters(&spec(100_000_000, 65535)).1, "131098b");
    }

    #[test]
    fn loss_ruleset_has_one_chain_per_link() {
        let script = loss_ruleset(2, 10_000);
        assert_eq!(script.matches("hook ingress").count(), 2);
        assert!(script.contains("device \"link1\""));
        assert!(script.contains("numgen random mod 1000000 < 10000 drop"));
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("quiver").is_ok());
        assert!(check_name("t-1_x").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("-x").is_err());
        assert!(check_name("a/b").is_err());
        assert!(check_name(&"x".repeat(41)).is_err());
    }
}
