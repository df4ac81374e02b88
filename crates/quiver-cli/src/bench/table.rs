//! How the bench's records look in the table and in the OSU layout: section headers, rows,
//! and the number formats every table of the bench (and of the lab) uses.
//!
//! Formatting only: no I/O; the report writes what these functions return.

use super::floor::Floors;
use super::plan::Transport;
use super::record::{DetectionCost, Labels, Record};
use super::result::{Panel, PlotPoint, RankResult};
use super::sizes::format_size;

impl RankResult for Record {
    fn test_name(&self) -> &'static str {
        self.test().as_str()
    }

    fn transport(&self) -> Transport {
        Record::transport(self)
    }

    fn size(&self) -> u64 {
        Record::size(self)
    }

    fn labels(&self) -> &Labels {
        Record::labels(self)
    }

    fn labels_mut(&mut self) -> &mut Labels {
        Record::labels_mut(self)
    }

    fn complete(&mut self, cpus: [usize; 2], floors: &Floors) {
        Record::complete(self, cpus, floors);
    }

    fn detection(&self) -> Option<&DetectionCost> {
        Record::detection(self)
    }

    fn detection_covers_warmup(&self) -> bool {
        matches!(self, Record::Bibw(_))
    }

    fn table_header(&self) -> Vec<String> {
        match self {
            Record::Pingpong(_) => vec![
                "pingpong: one-way latency = round trip / 2, median and p99 (nearest rank) over round trips".to_string(),
                "  floor = max(hand-off, size / memcpy MB/s at that size); x floor = median / floor (1 = at the floor, lower is better)".to_string(),
                format!(
                    "  {:>10} {:>9} {:>11} {:>11} {:>11} {:>9}",
                    "size", "iters", "median µs", "p99 µs", "floor µs", "x floor"
                ),
            ],
            Record::Bw(point) => vec![
                format!("bw: streaming, windows of {} posted sends, 1-byte ack per window (osu_bw style); MB/s = bytes / time", point.window),
                "  of floor = MB/s / memcpy MB/s at that size (1 = as fast as one core's memcpy, higher is better)".to_string(),
                format!(
                    "  {:>10} {:>9} {:>11} {:>12} {:>9}",
                    "size", "windows", "MB/s", "memcpy MB/s", "of floor"
                ),
            ],
            Record::Rate(point) => vec![
                format!("rate: 8-byte messages, windows of {} posted sends, 1-byte ack per window", point.window),
                "  floor Mmsg/s = 1 / one-way hand-off (one cache-line hand-off per message); x floor = Mmsg/s / floor (higher is better)".to_string(),
                format!(
                    "  {:>10} {:>9} {:>11} {:>13} {:>9}",
                    "size", "messages", "Mmsg/s", "floor Mmsg/s", "x floor"
                ),
            ],
            Record::Bibw(point) => vec![
                format!("bibw: both ranks stream windows of {} posted sends to each other at once (osu_bibw style); MB/s = bytes both ways / time", point.window),
                "  of floor = MB/s / (2 x memcpy MB/s at that size: both cores copying)".to_string(),
                format!(
                    "  {:>10} {:>9} {:>11} {:>12} {:>9}",
                    "size", "windows", "MB/s", "floor MB/s", "of floor"
                ),
            ],
        }
    }

    fn osu_header(&self) -> (&'static str, &'static str) {
        match self {
            Record::Pingpong(_) => ("Latency Test", "# Size          Latency (us)"),
            Record::Bw(_) => ("Bandwidth Test", "# Size      Bandwidth (MB/s)"),
            Record::Bibw(_) => (
                "Bi-Directional Bandwidth Test",
                "# Size      Bandwidth (MB/s)",
            ),
            Record::Rate(_) => (
                "Multiple Bandwidth / Message Rate Test",
                "# Size                  MB/s        Messages/s",
            ),
        }
    }

    fn table_row(&self) -> String {
        let size = format_size(Record::size(self));
        match self {
            Record::Pingpong(point) => format!(
                "  {:>10} {:>9} {:>11} {:>11} {:>11} {:>9}",
                size,
                point.iters,
                format_microseconds(point.latency_us),
                format_microseconds(point.latency_p99_us),
                or_dash(point.floor_us, format_microseconds),
                or_dash(point.floor_ratio, format_ratio)
            ),
            Record::Bw(point) | Record::Bibw(point) => format!(
                "  {:>10} {:>9} {:>11} {:>12} {:>9}",
                size,
                point.iters,
                format_mbps(point.bandwidth_mbps),
                or_dash(point.floor_mbps, format_mbps),
                or_dash(point.floor_ratio, format_ratio)
            ),
            Record::Rate(point) => format!(
                "  {:>10} {:>9} {:>11} {:>13} {:>9}",
                size,
                point.iters * point.window,
                format_mmsgs(point.rate_mmsgs),
                or_dash(point.floor_mmsgs, format_mmsgs),
                or_dash(point.floor_ratio, format_ratio)
            ),
        }
    }

    fn osu_row(&self) -> String {
        match self {
            Record::Pingpong(point) => osu_figure_row(point.size, point.latency_us),
            Record::Bw(point) | Record::Bibw(point) => {
                osu_figure_row(point.size, point.bandwidth_mbps)
            }
            Record::Rate(point) => format!(
                "{:<10}{:>18}{:>18}",
                point.size,
                format!("{:.2}", point.rate_mmsgs * point.size as f64),
                format!("{:.2}", point.rate_mmsgs * 1e6)
            ),
        }
    }

    fn plot_point(&self) -> Option<PlotPoint> {
        let label = line_label(Record::transport(self), Record::labels(self));
        let size = Record::size(self) as f64;
        match self {
            Record::Pingpong(point) => Some(PlotPoint {
                panel: Panel::Latency,
                label,
                size,
                value: point.latency_us,
            }),
            Record::Bw(point) => Some(PlotPoint {
                panel: Panel::Bandwidth,
                label,
                size,
                value: point.bandwidth_mbps,
            }),
            Record::Bibw(point) => Some(PlotPoint {
                panel: Panel::Bandwidth,
                label: format!("{label} bibw"),
                size,
                value: point.bandwidth_mbps,
            }),
            Record::Rate(_) => None,
        }
    }
}

/// A plot line's label: the transport, and the variant where a suite gave one.
pub fn line_label(transport: Transport, labels: &Labels) -> String {
    match labels.variant.as_deref() {
        Some(variant) => format!("{transport} {variant}"),
        None => transport.to_string(),
    }
}

/// One OSU row: the size left, the figure right-aligned with two decimals.
pub fn osu_figure_row(size: u64, figure: f64) -> String {
    format!("{:<10}{:>18}", size, format!("{figure:.2}"))
}

/// `format(value)`, or "-" without a value.
pub fn or_dash(value: Option<f64>, format: fn(f64) -> String) -> String {
    value.map_or("-".to_string(), format)
}

/// Microseconds with three decimals below 100 µs, one above.
pub fn format_microseconds(microseconds: f64) -> String {
    if microseconds < 100.0 {
        format!("{microseconds:.3}")
    } else {
        format!("{microseconds:.1}")
    }
}

/// MB/s with three significant digits.
pub fn format_mbps(mbps: f64) -> String {
    format_significant(mbps, 3)
}

/// Mmsg/s with three significant digits.
pub fn format_mmsgs(mmsgs: f64) -> String {
    format_significant(mmsgs, 3)
}

/// A ratio with three significant digits.
pub fn format_ratio(ratio: f64) -> String {
    format_significant(ratio, 3)
}

/// At least `digits` significant digits, and no decimals for numbers that have that many
/// before the point (1234, 19.2, 2.30, 0.000331).
pub fn format_significant(value: f64, digits: i32) -> String {
    if value == 0.0 || !value.is_finite() {
        return format!("{value}");
    }
    let magnitude = value.abs().log10().floor() as i32;
    let decimals = (digits - 1 - magnitude).max(0) as usize;
    format!("{value:.decimals$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_numbers_for_the_table() {
        assert_eq!(format_ratio(1.234), "1.23");
        assert_eq!(format_ratio(12.34), "12.3");
        assert_eq!(format_ratio(1234.0), "1234");
        assert_eq!(format_ratio(0.000331384), "0.000331");
        assert_eq!(format_ratio(2.3), "2.30");
        assert_eq!(format_mbps(0.7641), "0.764");
        assert_eq!(format_mbps(47322.1), "47322");
        assert_eq!(format_microseconds(0.0912), "0.091");
        assert_eq!(format_microseconds(1234.56), "1234.6");
    }
}
