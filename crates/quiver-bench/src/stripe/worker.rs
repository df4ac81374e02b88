//! The two sides of a `quiver-bench stripe` transfer, each a process in its namespace:
//! quiver's sender and receiver (one connection striped over every link of
//! `QUIVER_LINKS`, 1 MiB messages checked byte for byte), and the TCP baseline's client and
//! server (one stream per link). Each prints its report as one JSON line.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quiver::{Addr, Context, SendRequest};

use super::plan::{link_address, StripeArgs, CONTENTS, MESSAGE_BYTES, TCP_PORT};
use super::record::{ReceiverReport, SenderReport, TcpReport};

/// The last message: this marker, then the message count (u64 LE).
const END_MARKER: &[u8; 8] = b"QVSTREND";
/// Receiver timeline resolution.
const SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

/// Runs one side of a transfer (`role`) and prints its report as one JSON line.
///
/// # Errors
/// What failed, as text.
pub(crate) fn run_worker(role: &str, args: &StripeArgs) -> Result<(), String> {
    let seconds = Duration::from_secs_f64(args.seconds);
    let json = match role {
        "sender" => serde_json::to_string(&quiver_sender(seconds, args.post_window)?),
        "receiver" => serde_json::to_string(&quiver_receiver(args.recv_window)?),
        "tcp-server" => serde_json::to_string(&tcp_server(args.worker_links)?),
        "tcp-client" => serde_json::to_string(&tcp_client(args.worker_links, seconds)?),
        other => return Err(format!("unknown worker role {other:?}")),
    }
    .map_err(|error| format!("encoding the report: {error}"))?;
    println!("{json}");
    Ok(())
}

/// The CONTENTS message bodies both sides derive from the same seed.
pub(crate) fn contents() -> Vec<Vec<u8>> {
    (0..CONTENTS as u64)
        .map(|index| {
            let mut state = (index + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut body = vec![0u8; MESSAGE_BYTES];
            for chunk in body.chunks_mut(8) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
            }
            body
        })
        .collect()
}

/// quiver's sender: 1 MiB messages for `seconds`, with blocking sends or `post_window`
/// posted ones, then the end marker; waits for the receiver's answer.
fn quiver_sender(seconds: Duration, post_window: usize) -> Result<SenderReport, String> {
    let context = Context::from_env().map_err(|error| format!("context: {error}"))?;
    let mut endpoint = context
        .endpoint(1)
        .map_err(|error| format!("endpoint: {error}"))?;
    let connection = endpoint
        .connect(Addr::new(1, 1))
        .map_err(|error| format!("connecting to the receiver: {error}"))?;
    // Each body is lent to a posted send and comes back when it completes, so a slot is
    // empty while its message is posted (the window is at most CONTENTS).
    let mut bodies: Vec<Option<Vec<u8>>> = contents().into_iter().map(Some).collect();
    let mut posted: VecDeque<(u64, SendRequest)> = VecDeque::new();
    let cpu_before = cpu_seconds();
    let start = Instant::now();
    let mut messages = 0u64;
    let failed = |index: u64, error: quiver::Error| {
        format!(
            "sending message {index}: {error}; {}",
            diagnostics(&context)
        )
    };
    while start.elapsed() < seconds {
        let slot = messages as usize % CONTENTS;
        if post_window == 0 {
            let body = bodies[slot].as_mut().expect("no send is posted");
            body[..8].copy_from_slice(&messages.to_le_bytes());
            endpoint
                .send(connection, body)
                .map_err(|error| failed(messages, error))?;
        } else {
            if posted.len() >= post_window {
                let (index, request) = posted.pop_front().expect("the window is full");
                let body = endpoint
                    .wait_send(request)
                    .map_err(|error| failed(index, error))?;
                bodies[index as usize % CONTENTS] = Some(body);
            }
            // Invariant: the message CONTENTS before this one completed (the window is
            // at most CONTENTS and the oldest is waited for first).
            let mut body = bodies[slot].take().expect("its last send completed");
            body[..8].copy_from_slice(&messages.to_le_bytes());
            let request = endpoint
                .post_send(connection, body)
                .map_err(|error| failed(messages, error))?;
            posted.push_back((messages, request));
        }
        messages += 1;
    }
    while let Some((index, request)) = posted.pop_front() {
        endpoint
            .wait_send(request)
            .map_err(|error| failed(index, error))?;
    }
    let mut end = [0u8; 16];
    end[..8].copy_from_slice(END_MARKER);
    end[8..].copy_from_slice(&messages.to_le_bytes());
    endpoint
        .send(connection, &end)
        .map_err(|error| format!("sending the end: {error}"))?;
    // The receiver answers once it has checked everything.
    let mut answer = [0u8; 16];
    endpoint
        .recv(&mut answer)
        .map_err(|error| format!("waiting for the receiver: {error}"))?;
    let elapsed_seconds = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu_before;
    Ok(sender_report(&context, messages, cpu, elapsed_seconds))
}

/// The sender's report: its figures and what the engine counted.
fn sender_report(
    context: &Context,
    messages: u64,
    cpu_seconds: f64,
    elapsed_seconds: f64,
) -> SenderReport {
    let stats = context.stats().datagram.unwrap_or_default();
    SenderReport {
        messages,
        cpu_seconds,
        elapsed_seconds,
        retransmits: stats.retransmits,
        fast_retransmits: stats.fast_retransmits,
        timeouts: stats.timeouts,
        datagrams_sent: stats.datagrams_sent,
        datagrams_received: stats.datagrams_received,
        paths_down: stats.paths_down,
        paths_rejoined: stats.paths_rejoined,
        link_payload_bytes: context
            .link_stats()
            .iter()
            .map(|link| link.payload_bytes_sent)
            .collect(),
        link_frames_lost: context
            .link_stats()
            .iter()
            .map(|link| link.frames_lost)
            .collect(),
        link_spurious_losses: context
            .link_stats()
            .iter()
            .map(|link| link.spurious_losses)
            .collect(),
        link_datagrams_received: context
            .link_stats()
            .iter()
            .map(|link| link.datagrams_received)
            .collect(),
        udp_counters: udp_counters(),
        link_gauges: context
            .link_stats()
            .iter()
            .map(|link| {
                (
                    link.window_bytes,
                    link.delivery_rate_bytes_per_second,
                    link.smoothed_rtt_ns,
                    link.min_rtt_ns,
                )
            })
            .collect(),
    }
}

/// quiver's receiver: checks every message byte for byte until the end marker, with
/// blocking receives or `recv_window` posted ones, and answers the sender.
fn quiver_receiver(recv_window: usize) -> Result<ReceiverReport, String> {
    let context = Context::from_env().map_err(|error| format!("context: {error}"))?;
    let mut endpoint = context
        .endpoint(1)
        .map_err(|error| format!("endpoint: {error}"))?;
    let bodies = contents();
    let mut buffer = vec![0u8; MESSAGE_BYTES];
    let mut report = ReceiverReport::default();
    let mut cpu_at_first = 0.0;
    let mut next_sample = Instant::now();
    // With --recv-window N: N receives posted, completed in order, each buffer posted
    // again once checked.
    let mut posted = VecDeque::new();
    for _ in 0..recv_window {
        let request = endpoint
            .post_recv(vec![0u8; MESSAGE_BYTES])
            .map_err(|error| format!("posting a receive: {error}"))?;
        posted.push_back(request);
    }
    loop {
        let receive_error = |error: quiver::Error, report: &ReceiverReport| {
            format!(
                "receiving message {}: {error}; {}",
                report.messages,
                diagnostics(&context)
            )
        };
        let len = match posted.pop_front() {
            Some(request) => {
                let done = endpoint
                    .wait_recv(request)
                    .map_err(|error| receive_error(error, &report))?;
                // The checked buffer of the previous message is posted again.
                let previous = std::mem::replace(&mut buffer, done.buf);
                let request = endpoint
                    .post_recv(previous)
                    .map_err(|error| format!("posting a receive: {error}"))?;
                posted.push_back(request);
                done.len
            }
            None => {
                endpoint
                    .recv(&mut buffer)
                    .map_err(|error| receive_error(error, &report))?
                    .0
            }
        };
        let now_ns = monotonic_ns();
        if len == 16 && &buffer[..8] == END_MARKER {
            let sent = u64::from_le_bytes(buffer[8..16].try_into().unwrap_or([0; 8]));
            if sent != report.messages {
                return Err(format!(
                    "the sender sent {sent} messages, {} arrived",
                    report.messages
                ));
            }
            break;
        }
        let index = report.messages;
        let expected = &bodies[index as usize % CONTENTS];
        if len != MESSAGE_BYTES
            || buffer[..8] != index.to_le_bytes()
            || buffer[8..len] != expected[8..]
        {
            return Err(format!(
                "message {index} is not what was sent ({len} bytes)"
            ));
        }
        if report.messages == 0 {
            report.first_ns = now_ns;
            cpu_at_first = cpu_seconds();
        }
        report.messages += 1;
        report.bytes += len as u64;
        report.last_ns = now_ns;
        if Instant::now() >= next_sample {
            report.timeline.push((now_ns, report.bytes));
            next_sample += SAMPLE_INTERVAL;
        }
    }
    report.cpu_seconds = cpu_seconds() - cpu_at_first;
    report.timeline.push((report.last_ns, report.bytes));
    let stats = context.stats().datagram.unwrap_or_default();
    report.datagrams_sent = stats.datagrams_sent;
    report.datagrams_received = stats.datagrams_received;
    report.duplicates_dropped = stats.duplicates_dropped;
    report.direct_read_bytes = stats.direct_read_bytes;
    report.udp_counters = udp_counters();
    let back = endpoint
        .connect(Addr::new(0, 1))
        .map_err(|error| format!("connecting back to the sender: {error}"))?;
    endpoint
        .send(back, b"checked")
        .map_err(|error| format!("answering the sender: {error}"))?;
    Ok(report)
}

/// The TCP baseline's server: one stream per link, counted until every stream ends.
fn tcp_server(links: u32) -> Result<TcpReport, String> {
    let listeners: Vec<TcpListener> = (0..links)
        .map(|link| {
            TcpListener::bind(link_address(link, 1, TCP_PORT))
                .map_err(|error| format!("listening on link {link}: {error}"))
        })
        .collect::<Result<_, _>>()?;
    let bodies = Arc::new(contents());
    let total = Arc::new(AtomicU64::new(0));
    let first = Arc::new(AtomicU64::new(u64::MAX));
    let last = Arc::new(AtomicU64::new(0));
    let cpu_before = cpu_seconds();
    let threads: Vec<_> = listeners
        .into_iter()
        .map(|listener| {
            let (bodies, total, first, last) =
                (bodies.clone(), total.clone(), first.clone(), last.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let (mut stream, _) = listener
                    .accept()
                    .map_err(|error| format!("accepting: {error}"))?;
                // The same work as the quiver receiver: whole messages, each checked
                // against the body it was sent from.
                let mut buffer = vec![0u8; MESSAGE_BYTES];
                let mut index = 0u64;
                loop {
                    let mut filled = 0;
                    while filled < MESSAGE_BYTES {
                        let count = stream
                            .read(&mut buffer[filled..])
                            .map_err(|error| format!("reading: {error}"))?;
                        if count == 0 {
                            return match filled {
                                0 => Ok(()),
                                _ => Err(format!(
                                    "the stream ended {filled} bytes into message {index}"
                                )),
                            };
                        }
                        filled += count;
                        let now = monotonic_ns();
                        first.fetch_min(now, Ordering::Relaxed);
                        last.fetch_max(now, Ordering::Relaxed);
                        total.fetch_add(count as u64, Ordering::Relaxed);
                    }
                    let expected = &bodies[index as usize % CONTENTS];
                    if buffer[..8] != index.to_le_bytes() || buffer[8..] != expected[8..] {
                        return Err(format!("tcp message {index} is not what was sent"));
                    }
                    index += 1;
                }
            })
        })
        .collect();
    for thread in threads {
        thread
            .join()
            .map_err(|_| "a stream thread panicked".to_string())??;
    }
    Ok(TcpReport {
        bytes: total.load(Ordering::Relaxed),
        first_ns: first.load(Ordering::Relaxed),
        last_ns: last.load(Ordering::Relaxed),
        cpu_seconds: cpu_seconds() - cpu_before,
    })
}

/// The TCP baseline's client: one stream per link, written for `seconds`.
fn tcp_client(links: u32, seconds: Duration) -> Result<TcpReport, String> {
    // The same messages as the quiver sender: CONTENTS bodies in turn, each stamped with
    // its index (per stream), so that both baselines move and check the same bytes.
    let bodies = Arc::new(contents());
    let cpu_before = cpu_seconds();
    let start = Instant::now();
    let threads: Vec<_> = (0..links)
        .map(|link| {
            let bodies = bodies.clone();
            std::thread::spawn(move || -> Result<u64, String> {
                let target = link_address(link, 1, TCP_PORT);
                let connect_deadline = Instant::now() + Duration::from_secs(10);
                let mut stream = loop {
                    match TcpStream::connect(target) {
                        Ok(stream) => break stream,
                        Err(_) if Instant::now() < connect_deadline => {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        Err(error) => return Err(format!("connecting to {target}: {error}")),
                    }
                };
                let mut sent = 0u64;
                let mut index = 0u64;
                while start.elapsed() < seconds {
                    let body = &bodies[index as usize % CONTENTS];
                    stream
                        .write_all(&index.to_le_bytes())
                        .and_then(|()| stream.write_all(&body[8..]))
                        .map_err(|error| format!("writing to {target}: {error}"))?;
                    sent += body.len() as u64;
                    index += 1;
                }
                Ok(sent)
            })
        })
        .collect();
    let mut bytes = 0;
    for thread in threads {
        bytes += thread
            .join()
            .map_err(|_| "a stream thread panicked".to_string())??;
    }
    Ok(TcpReport {
        bytes,
        first_ns: 0,
        last_ns: 0,
        cpu_seconds: cpu_seconds() - cpu_before,
    })
}

/// What the engine and the kernel say, for a failure report.
fn diagnostics(context: &Context) -> String {
    format!(
        "engine {:?}; links {:?}; kernel udp {}",
        context.stats().datagram,
        context.link_stats(),
        udp_counters()
    )
}

/// The `Udp:` counters of this network namespace, as `name=value` pairs.
pub(crate) fn udp_counters() -> String {
    let text = std::fs::read_to_string("/proc/net/snmp").unwrap_or_default();
    let mut lines = text.lines().filter(|line| line.starts_with("Udp:"));
    match (lines.next(), lines.next()) {
        (Some(names), Some(values)) => names
            .split_whitespace()
            .zip(values.split_whitespace())
            .skip(1)
            .map(|(name, value)| format!("{name}={value}"))
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// CPU time of this process so far (user + system, all threads), in seconds.
pub(crate) fn cpu_seconds() -> f64 {
    // SAFETY: rusage is plain old data; all-zero is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we own; RUSAGE_SELF is valid.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0.0;
    }
    let seconds = |time: libc::timeval| time.tv_sec as f64 + time.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// CLOCK_MONOTONIC in ns: the same clock in every process of the machine.
pub(crate) fn monotonic_ns() -> u64 {
    // SAFETY: timespec is plain old data; all-zero is a valid value.
    let mut time: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: clock_gettime writes into the struct we own; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut time) };
    time.tv_sec as u64 * 1_000_000_000 + time.tv_nsec as u64
}
