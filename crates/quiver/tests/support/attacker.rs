//! A stranger in a process of its own: this test binary run again with an environment
//! variable naming what to do (the test file's `attacker` test reads it and does nothing
//! when it is unset). The parent hands it datagrams (hex on its stdin) or arguments, and
//! reads what it reports on its stdout, one line each.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

/// How long the parent waits for one report before it calls the attacker stuck.
const REPORT_TIMEOUT: Duration = Duration::from_secs(120);

/// The attacking process, its stdin and its reports; killed if dropped while it runs.
pub(crate) struct Attacker {
    child: Child,
    input: Option<ChildStdin>,
    reports: Receiver<String>,
}

impl Attacker {
    /// Runs this test binary's test `test` (it must act when `variable` is set, and do
    /// nothing otherwise) with `variable` set to `value`.
    pub(crate) fn spawn(test: &str, variable: &str, value: &str) -> Attacker {
        let mut child = Command::new(std::env::current_exe().expect("the test binary"))
            .args(["--exact", test, "--nocapture", "--test-threads", "1"])
            .env(variable, value)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting the attacker process");
        let input = child.stdin.take();
        let output = BufReader::new(child.stdout.take().expect("piped stdout"));
        let (sender, reports) = mpsc::channel();
        std::thread::spawn(move || {
            for line in output.lines() {
                let Ok(line) = line else { break };
                // libtest may have written "test NAME ... " on the same line before it.
                if let Some((_, report)) = line.trim_end().split_once(REPORT_PREFIX) {
                    if sender.send(report.to_string()).is_err() {
                        break;
                    }
                }
            }
        });
        Attacker {
            child,
            input,
            reports,
        }
    }

    /// The process's id (another process than this test's).
    pub(crate) fn id(&self) -> u32 {
        self.child.id()
    }

    /// Hands it `datagrams` to send, then a line `sync`; returns once it says it sent them.
    pub(crate) fn send(&mut self, datagrams: &[Vec<u8>]) {
        let input = self.input.as_mut().expect("stdin open");
        for datagram in datagrams {
            writeln!(input, "{}", hex(datagram)).expect("to the attacker");
        }
        writeln!(input, "sync").expect("to the attacker");
        input.flush().expect("to the attacker");
        let line = self.line().expect("the attacker's answer");
        assert_eq!(line, "sent", "the attacker said {line:?}");
    }

    /// Its next report (what libtest writes around it is skipped), or None at its end.
    ///
    /// # Panics
    /// No report for [`REPORT_TIMEOUT`]: the attacker is stuck.
    pub(crate) fn line(&mut self) -> Option<String> {
        match self.reports.recv_timeout(REPORT_TIMEOUT) {
            Ok(report) => Some(report),
            Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => panic!("no word from the attacker"),
        }
    }

    /// Closes its stdin and waits for it to exit successfully.
    pub(crate) fn finish(mut self) {
        self.input.take();
        let status = self.child.wait().expect("waiting for the attacker");
        assert!(status.success(), "the attacker failed: {status}");
    }
}

impl Drop for Attacker {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What starts a report on the attacker's stdout.
const REPORT_PREFIX: &str = "attacker says: ";

/// Says `report` to the parent (in the attacking process).
pub(crate) fn report(report: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{REPORT_PREFIX}{report}");
    let _ = stdout.flush();
}

/// The datagrams the parent hands over on stdin, up to each `sync` (in the attacking
/// process): `each` is called with every batch.
pub(crate) fn batches(mut each: impl FnMut(Vec<Vec<u8>>)) {
    let mut batch = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let line = line.expect("stdin");
        if line == "sync" {
            each(std::mem::take(&mut batch));
        } else {
            batch.push(unhex(&line));
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len() / 2)
        .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}
