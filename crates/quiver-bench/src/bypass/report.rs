//! What `quiver-bench bypass` reports: one row per case and test (both sides' figures
//! together), the table, the JSON lines and the SVG plot of the headline figures.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use serde::Serialize;

use super::plan::Case;
use super::worker::{Measure, RankReport};

/// One case and test, both sides.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    pub(crate) case: &'static str,
    /// "latency", "rate" or "bandwidth".
    pub(crate) test: String,
    pub(crate) size: usize,
    /// Round trips (latency) or messages that arrived (streams).
    pub(crate) count: u64,
    /// Latency: median one-way time, µs.
    pub(crate) one_way_us: Option<f64>,
    /// Rate and bandwidth: messages per second and Gbit/s of payload.
    pub(crate) messages_per_second: Option<f64>,
    pub(crate) gbit_per_second: Option<f64>,
    /// CPU time per message (latency: per round trip) of rank 0 and rank 1, ns.
    pub(crate) cpu_ns_per_message: [f64; 2],
    /// CPU time per payload byte of rank 0 and rank 1, ns.
    pub(crate) cpu_ns_per_byte: [f64; 2],
    /// Raw AF_XDP streams (nothing resent): frames sent, frames that arrived, and those of
    /// the lost ones the kernel dropped at the receiving socket.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) frames_sent: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) frames_received: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) socket_drops: Option<u64>,
}

/// The rows of one case from its two reports (a test only one side reported is left out).
pub(crate) fn rows(case: Case, zero: &RankReport, one: &RankReport) -> Vec<Row> {
    zero.measures
        .iter()
        .filter_map(|m0| {
            let m1 = one
                .measures
                .iter()
                .find(|m| m.test == m0.test && m.size == m0.size)?;
            Some(row(case, m0, m1))
        })
        .collect()
}

fn row(case: Case, m0: &Measure, m1: &Measure) -> Row {
    let seconds = m0.elapsed_ns as f64 / 1e9;
    let streamed = m0.test != "latency";
    // Streams: what arrived (rank 1's count; rank 0 counts what it sent for quiver).
    let count = if streamed {
        m0.count.min(m1.count)
    } else {
        m0.count
    };
    let messages = count.max(1) as f64;
    let bytes = (count as f64 * m0.size as f64).max(1.0);
    Row {
        case: case.name(),
        test: m0.test.clone(),
        size: m0.size,
        count,
        one_way_us: m0.one_way_ns.map(|ns| ns / 1000.0),
        messages_per_second: streamed.then(|| count as f64 / seconds),
        gbit_per_second: streamed.then(|| bytes * 8.0 / seconds / 1e9),
        cpu_ns_per_message: [m0.cpu_s * 1e9 / messages, m1.cpu_s * 1e9 / messages],
        cpu_ns_per_byte: [m0.cpu_s * 1e9 / bytes, m1.cpu_s * 1e9 / bytes],
        frames_sent: m0.frames_sent,
        frames_received: m1.frames_received,
        socket_drops: m1.socket_drops,
    }
}

/// The table on stdout.
pub(crate) fn print_table(rows: &[Row], mtu: u32) {
    print!("{}", table(rows, mtu));
}

/// The table: a line per row, then a line per stream that counted its frames (what was
/// lost of them).
fn table(rows: &[Row], mtu: u32) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "bypass: one veth pair between two namespaces, MTU {mtu}, both sides busy-polling on their own CPU"
    );
    let _ = writeln!(
        text,
        "{:<20} {:<10} {:>8} {:>14} {:>16} {:>16}",
        "case", "test", "size", "result", "CPU rank 0", "CPU rank 1"
    );
    for row in rows {
        let (result, cpu) = match row.test.as_str() {
            "latency" => (
                format!("{:.2} us", row.one_way_us.unwrap_or(f64::NAN)),
                row.cpu_ns_per_message.map(|ns| format!("{ns:.0} ns/rt")),
            ),
            "rate" => (
                format!("{:.3} M/s", row.messages_per_second.unwrap_or(0.0) / 1e6),
                row.cpu_ns_per_message.map(|ns| format!("{ns:.0} ns/msg")),
            ),
            _ => (
                format!("{:.2} Gbit/s", row.gbit_per_second.unwrap_or(0.0)),
                row.cpu_ns_per_byte
                    .map(|ns| format!("{:.0} ns/KiB", ns * 1024.0)),
            ),
        };
        let _ = writeln!(
            text,
            "{:<20} {:<10} {:>8} {:>14} {:>16} {:>16}",
            row.case, row.test, row.size, result, cpu[0], cpu[1]
        );
    }
    for row in rows {
        if let (Some(sent), Some(received)) = (row.frames_sent, row.frames_received) {
            let lost = sent.saturating_sub(received);
            let _ = writeln!(
                text,
                "{} {} {}: {lost} of {sent} frames lost ({:.2}%), {} dropped at the receiving socket",
                row.case,
                row.test,
                row.size,
                lost as f64 * 100.0 / sent.max(1) as f64,
                row.socket_drops.unwrap_or(0)
            );
        }
    }
    text
}

/// One JSON object per row, to `path` (`-`: stdout).
pub(crate) fn write_json(path: &str, rows: &[Row]) -> Result<(), String> {
    let mut text = String::new();
    for row in rows {
        let line = serde_json::to_string(row).map_err(|e| e.to_string())?;
        let _ = writeln!(text, "{line}");
    }
    if path == "-" {
        std::io::stdout()
            .write_all(text.as_bytes())
            .map_err(|e| e.to_string())
    } else {
        std::fs::write(path, text).map_err(|e| format!("--json {path}: {e}"))
    }
}

/// One panel of the plot: its title, the figure of a row, the message size and the test.
type Panel<'a> = (
    String,
    Box<dyn Fn(&Row) -> Option<f64>>,
    Option<usize>,
    &'a str,
);

/// The three headline figures of every case as horizontal bars, one panel each: 8 B
/// one-way latency, 8 B message rate, 1 MiB bandwidth (the first latency, rate and largest
/// bandwidth test measured), written as SVG.
pub(crate) fn write_plot(path: &Path, rows: &[Row], mtu: u32) -> Result<(), String> {
    if path.extension().and_then(|e| e.to_str()) != Some("svg") {
        return Err(format!(
            "--plot {}: the file name must end in .svg",
            path.display()
        ));
    }
    let first = |test: &str| rows.iter().find(|r| r.test == test).map(|r| r.size);
    let largest_bw = rows
        .iter()
        .filter(|r| r.test == "bandwidth")
        .map(|r| r.size)
        .max();
    let panels: [Panel<'_>; 3] = [
        (
            "one-way latency (us, lower is better)".into(),
            Box::new(|r: &Row| r.one_way_us),
            first("latency"),
            "latency",
        ),
        (
            "message rate (million/s)".into(),
            Box::new(|r: &Row| r.messages_per_second.map(|m| m / 1e6)),
            first("rate"),
            "rate",
        ),
        (
            "bandwidth (Gbit/s)".into(),
            Box::new(|r: &Row| r.gbit_per_second),
            largest_bw,
            "bandwidth",
        ),
    ];
    let (width, panel_height, label_width, bar_width) = (900.0, 200.0, 170.0, 600.0);
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"10\" y=\"20\" font-size=\"15\">quiver-bench bypass: one veth pair, MTU {mtu}</text>\n",
        panel_height * 3.0 + 40.0
    );
    for (index, (title, value, size, test)) in panels.iter().enumerate() {
        let top = 40.0 + index as f64 * panel_height;
        let Some(size) = size else { continue };
        let bars: Vec<(&str, f64)> = rows
            .iter()
            .filter(|r| r.test == *test && r.size == *size)
            .filter_map(|r| value(r).map(|v| (r.case, v)))
            .collect();
        let most = bars.iter().map(|b| b.1).fold(0.0f64, f64::max).max(1e-9);
        let _ = writeln!(
            svg,
            "<text x=\"10\" y=\"{}\" font-size=\"13\">{title}, {size} B messages</text>",
            top + 14.0
        );
        for (k, (case, v)) in bars.iter().enumerate() {
            let y = top + 24.0 + k as f64 * 30.0;
            let w = bar_width * v / most;
            let _ = writeln!(
                svg,
                "<text x=\"10\" y=\"{}\">{case}</text><rect x=\"{label_width}\" y=\"{y}\" width=\"{w:.1}\" height=\"20\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{}\">{v:.3}</text>",
                y + 14.0,
                if case.starts_with("quiver") { "#3465a4" } else { "#888a85" },
                label_width + w + 6.0,
                y + 14.0
            );
        }
    }
    svg.push_str("</svg>\n");
    std::fs::write(path, svg).map_err(|e| format!("--plot {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measure(test: &str, size: usize, count: u64, cpu_s: f64) -> Measure {
        Measure {
            test: test.into(),
            size,
            count,
            elapsed_ns: 1_000_000_000,
            one_way_ns: None,
            cpu_s,
            frames_sent: None,
            frames_received: None,
            socket_drops: None,
        }
    }

    #[test]
    fn a_raw_xdp_stream_row_reports_rate_bandwidth_and_loss() {
        let mut m0 = measure("rate", 8, 990_000, 1.0);
        m0.frames_sent = Some(1_000_000);
        let mut m1 = measure("rate", 8, 990_000, 0.5);
        m1.frames_received = Some(990_000);
        m1.socket_drops = Some(4_000);
        let mut b0 = measure("bandwidth", 1 << 20, 1000, 2.0);
        b0.frames_sent = Some(713_000);
        let mut b1 = measure("bandwidth", 1 << 20, 1000, 1.0);
        b1.frames_received = Some(713_000);
        b1.socket_drops = Some(0);
        let zero = RankReport {
            rank: 0,
            measures: vec![m0, b0],
        };
        let one = RankReport {
            rank: 1,
            measures: vec![m1, b1],
        };
        let all = rows(Case::RawXdp, &zero, &one);
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].messages_per_second, Some(990_000.0));
        assert_eq!(all[0].frames_sent, Some(1_000_000));
        assert_eq!(all[0].frames_received, Some(990_000));
        let gbit = all[1].gbit_per_second.expect("a bandwidth figure");
        assert!((gbit - 1000.0 * 8.0 * 1048576.0 / 1e9).abs() < 1e-9);
        // rank 1's CPU per KiB: 1 s over 1000 MiB.
        assert!((all[1].cpu_ns_per_byte[1] * 1024.0 - 1e9 / 1_024_000.0).abs() < 1e-6);
        let text = table(&all, 1500);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[2].starts_with("raw-xdp") && lines[2].contains("0.990 M/s"));
        assert!(lines[3].contains("8.39 Gbit/s") && lines[3].contains("977 ns/KiB"));
        assert_eq!(
            lines[4],
            "raw-xdp rate 8: 10000 of 1000000 frames lost (1.00%), 4000 dropped at the receiving socket"
        );
        assert!(lines[5].contains("0 of 713000 frames lost (0.00%)"));
        let json = serde_json::to_string(&all[0]).expect("json");
        assert!(json.contains("\"frames_sent\":1000000"));
        assert!(json.contains("\"frames_received\":990000"));
    }

    #[test]
    fn other_rows_show_no_frame_counts() {
        let zero = RankReport {
            rank: 0,
            measures: vec![measure("bandwidth", 65536, 4096, 1.0)],
        };
        let one = RankReport {
            rank: 1,
            measures: vec![measure("bandwidth", 65536, 4096, 1.0)],
        };
        let all = rows(Case::RawUdp, &zero, &one);
        assert_eq!(table(&all, 1500).lines().count(), 3);
        let json = serde_json::to_string(&all[0]).expect("json");
        assert!(!json.contains("frames_sent"));
    }
}
