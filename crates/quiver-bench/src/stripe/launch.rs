//! Starting the two sides of a `quiver-bench stripe` transfer: this executable as
//! `quiver-bench stripe --worker ROLE`, in the testbed's two namespaces, pinned, as the two
//! ranks of a job; their JSON reports read back; a link taken down mid-transfer.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use quiver_cli::launch::{spawn_rank, JobIdentity};

use super::plan::{link_address, Plan, QUIVER_PORT};
use super::record::{RawReceiverReport, RawSenderReport, ReceiverReport, SenderReport, TcpReport};
use super::worker::monotonic_ns;
use crate::testbed;

/// `QUIVER_LINKS` for the two ranks: rank 0 on side a (.1), rank 1 on side b (.2).
pub(crate) fn links_variable(links: u32) -> String {
    (0..2)
        .map(|rank| {
            (0..links)
                .map(|link| link_address(link, rank, QUIVER_PORT).to_string())
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect::<Vec<_>>()
        .join(";")
}

/// A started worker: its process and its stdout lines (`quiver-bench bypass` starts its
/// workers the same way).
pub(crate) struct Worker {
    name: &'static str,
    child: Child,
    stdout: std::sync::mpsc::Receiver<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Worker {
    /// Starts `quiver-bench stripe --worker ROLE EXTRA...` in namespace `namespace` with
    /// `environment`, as rank `rank` of `identity`, pinned to `cpu`.
    #[allow(clippy::too_many_arguments)] // One call site per role; a struct would only rename them.
    fn start(
        name: &'static str,
        namespace: &str,
        environment: &[(String, String)],
        identity: &JobIdentity,
        rank: u32,
        cpu: usize,
        role: &str,
        extra: &[String],
    ) -> Result<Worker, String> {
        Self::start_command(
            "stripe",
            name,
            namespace,
            environment,
            identity,
            rank,
            cpu,
            role,
            extra,
        )
    }

    /// [`Worker::start`] of `quiver-bench COMMAND --worker ROLE EXTRA...`.
    #[allow(clippy::too_many_arguments)] // As `start`, and the command.
    pub(crate) fn start_command(
        command: &str,
        name: &'static str,
        namespace: &str,
        environment: &[(String, String)],
        identity: &JobIdentity,
        rank: u32,
        cpu: usize,
        role: &str,
        extra: &[String],
    ) -> Result<Worker, String> {
        let exe = std::env::current_exe()
            .map_err(|error| format!("cannot find this executable: {error}"))?;
        let mut args: Vec<std::ffi::OsString> = vec![
            "netns".into(),
            "exec".into(),
            namespace.into(),
            "env".into(),
        ];
        for (key, value) in environment {
            args.push(format!("{key}={value}").into());
        }
        args.push(exe.into_os_string());
        for arg in [command, "--worker", role] {
            args.push(arg.into());
        }
        args.extend(extra.iter().map(Into::into));
        let mut child = spawn_rank(
            "ip".as_ref(),
            &args,
            identity,
            rank,
            2,
            Some(cpu),
            Stdio::piped(),
            Stdio::piped(),
        )
        .map_err(|error| format!("starting the {name}: {error}"))?;
        let (sender, stdout) = std::sync::mpsc::channel();
        if let Some(out) = child.stdout.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    if sender.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        let stderr = child.stderr.take().map(|mut err| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = err.read_to_string(&mut text);
                text
            })
        });
        Ok(Worker {
            name,
            child,
            stdout,
            stderr,
        })
    }

    pub(crate) fn kill(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }

    /// Waits for the worker's JSON line and its exit, until `deadline` (or Ctrl-C).
    pub(crate) fn finish<T: serde::de::DeserializeOwned>(
        mut self,
        deadline: Instant,
    ) -> Result<T, String> {
        let mut report: Option<T> = None;
        loop {
            match self.stdout.recv_timeout(Duration::from_millis(50)) {
                Ok(line) => match serde_json::from_str(&line) {
                    Ok(parsed) => report = Some(parsed),
                    Err(_) => eprintln!("{}: {line}", self.name),
                },
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
            if testbed::interrupted() || Instant::now() >= deadline {
                self.kill();
                return Err(format!(
                    "the {} did not finish in time (or Ctrl-C)",
                    self.name
                ));
            }
        }
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() >= deadline || testbed::interrupted() => {
                    self.kill();
                    return Err(format!("the {} did not exit", self.name));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(error) => return Err(format!("waiting for the {}: {error}", self.name)),
            }
        };
        let stderr = self
            .stderr
            .take()
            .and_then(|reader| reader.join().ok())
            .unwrap_or_default();
        match report {
            Some(report) if status.success() => Ok(report),
            _ => Err(format!(
                "the {} failed ({status}): {}",
                self.name,
                stderr.trim()
            )),
        }
    }
}

/// Starts a transfer's two workers: the `passive` side (its label, its role) in the
/// second namespace as rank 1 on the plan's second CPU, then the `active` side in the first
/// as rank 0 on the first CPU; the passive one is killed if the active one cannot start.
/// Returns (passive, active).
fn start_pair(
    plan: &Plan,
    passive: [&'static str; 2],
    active: [&'static str; 2],
    environment: &[(String, String)],
    identity: &JobIdentity,
    extra: &[String],
) -> Result<(Worker, Worker), String> {
    let [a, b] = testbed::namespaces(&plan.name);
    let [passive_label, passive_role] = passive;
    let [active_label, active_role] = active;
    let first = Worker::start(
        passive_label,
        &b,
        environment,
        identity,
        1,
        plan.cpus[1],
        passive_role,
        extra,
    )?;
    match Worker::start(
        active_label,
        &a,
        environment,
        identity,
        0,
        plan.cpus[0],
        active_role,
        extra,
    ) {
        Ok(second) => Ok((first, second)),
        Err(error) => {
            let mut first = first;
            first.kill();
            Err(error)
        }
    }
}

/// When a transfer of the plan's length, started now, has failed if it is not over.
fn transfer_deadline(plan: &Plan) -> Instant {
    Instant::now() + Duration::from_secs_f64(plan.seconds) + Duration::from_secs(60)
}

/// Both sides of the quiver transfer; returns their reports and when a link was killed.
pub(crate) fn run_quiver(
    plan: &Plan,
    links: u32,
) -> Result<(SenderReport, ReceiverReport, Option<u64>), String> {
    let [a, _] = testbed::namespaces(&plan.name);
    let mut identity =
        JobIdentity::generate().map_err(|error| format!("making a job identity: {error}"))?;
    identity.addrs = vec![
        link_address(0, 0, QUIVER_PORT),
        link_address(0, 1, QUIVER_PORT),
    ];
    identity.transports = Some("udp".to_string());
    let environment = vec![
        ("QUIVER_LINKS".to_string(), links_variable(links)),
        (
            "QUIVER_UDP_DATAGRAM_BYTES".to_string(),
            (plan.mtu - 28).to_string(),
        ),
        // Several links at a few Gbit/s: a larger window keeps every path busy.
        (
            "QUIVER_NET_WINDOW_BYTES".to_string(),
            (32u64 << 20).to_string(),
        ),
        (
            "QUIVER_NET_IDLE_TIMEOUT_MS".to_string(),
            "10000".to_string(),
        ),
    ];
    let seconds = format!("{}", plan.seconds);
    let extra = vec![
        "--seconds".to_string(),
        seconds,
        "--post-window".to_string(),
        plan.post_window.to_string(),
        "--recv-window".to_string(),
        plan.recv_window.to_string(),
    ];
    let (receiver, sender) = start_pair(
        plan,
        ["receiver", "receiver"],
        ["sender", "sender"],
        &environment,
        &identity,
        &extra,
    )?;
    let started = Instant::now();
    let deadline = transfer_deadline(plan);
    let mut killed_at_ns = None;
    if let Some(at) = plan.kill_link {
        // The transfer starts once both have connected: well under a second here.
        let kill_time = started + Duration::from_secs_f64(at + 0.5);
        while Instant::now() < kill_time && !testbed::interrupted() {
            std::thread::sleep(Duration::from_millis(10));
        }
        let device = format!("link{}", links - 1);
        killed_at_ns = Some(monotonic_ns());
        let status = Command::new("ip")
            .args(["-n", &a, "link", "set", &device, "down"])
            .status();
        if !matches!(status, Ok(status) if status.success()) {
            eprintln!("quiver-bench stripe: taking {device} down failed: {status:?}");
        }
    }
    let sender_report = sender.finish::<SenderReport>(deadline);
    let receiver_report = receiver.finish::<ReceiverReport>(deadline);
    match (sender_report, receiver_report) {
        (Ok(sender), Ok(receiver)) => Ok((sender, receiver, killed_at_ns)),
        (sender, receiver) => Err([sender.err(), receiver.err()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join("\n")),
    }
}

/// The TCP baseline: N streams, stream i over link i.
pub(crate) fn run_tcp(
    plan: &Plan,
    links: u32,
) -> Result<(TcpReport, TcpReport, Option<String>), String> {
    let [a, _] = testbed::namespaces(&plan.name);
    let identity =
        JobIdentity::generate().map_err(|error| format!("making a job identity: {error}"))?;
    let extra = vec![
        "--seconds".to_string(),
        format!("{}", plan.seconds),
        "--worker-links".to_string(),
        links.to_string(),
    ];
    let (server, client) = start_pair(
        plan,
        ["tcp server", "tcp-server"],
        ["tcp client", "tcp-client"],
        &[],
        &identity,
        &extra,
    )?;
    let deadline = transfer_deadline(plan);
    let client_report = client.finish::<TcpReport>(deadline);
    let server_report = server.finish::<TcpReport>(deadline);
    let congestion_control = Command::new("ip")
        .args([
            "netns",
            "exec",
            &a,
            "cat",
            "/proc/sys/net/ipv4/tcp_congestion_control",
        ])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_string());
    Ok((client_report?, server_report?, congestion_control))
}

/// The raw udp floor: one stream striped over every link, no protocol; `tagged`: each
/// datagram an authenticated Stream frame.
pub(crate) fn run_raw_udp(
    plan: &Plan,
    links: u32,
    tagged: bool,
) -> Result<(RawSenderReport, RawReceiverReport), String> {
    let identity =
        JobIdentity::generate().map_err(|error| format!("making a job identity: {error}"))?;
    let extra = vec![
        "--seconds".to_string(),
        format!("{}", plan.seconds),
        "--worker-links".to_string(),
        links.to_string(),
        "--mtu".to_string(),
        plan.mtu.to_string(),
    ];
    let roles = if tagged {
        [
            ["raw-udp-tagged receiver", "raw-udp-tagged-receiver"],
            ["raw-udp-tagged sender", "raw-udp-tagged-sender"],
        ]
    } else {
        [
            ["raw-udp receiver", "raw-udp-receiver"],
            ["raw-udp sender", "raw-udp-sender"],
        ]
    };
    let (receiver, sender) = start_pair(plan, roles[0], roles[1], &[], &identity, &extra)?;
    let deadline = transfer_deadline(plan);
    let sender_report = sender.finish::<RawSenderReport>(deadline);
    let receiver_report = receiver.finish::<RawReceiverReport>(deadline);
    Ok((sender_report?, receiver_report?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_variable_pairs_link_i_with_link_i() {
        assert_eq!(
            links_variable(2),
            "10.77.0.1:7400,10.77.1.1:7400;10.77.0.2:7400,10.77.1.2:7400"
        );
        let parsed = quiver::parse_links(&links_variable(8)).expect("valid QUIVER_LINKS");
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[1][7], "10.77.7.2:7400".parse().unwrap());
    }
}
