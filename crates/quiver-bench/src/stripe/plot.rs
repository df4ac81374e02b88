//! `quiver-bench stripe --plot FILE.svg|FILE.png`: goodput against the number of links,
//! for quiver's one striped connection and the N-TCP-streams baseline, with the nominal
//! N x rate line and the MTU ceilings. Drawn with `plotters`, as the bench's plots are
//! (the font and the PNG encoding are the bench's: `quiver_cli::bench::plot`).

use std::path::Path;

use plotters::prelude::*;
use quiver_cli::bench::plot::{load_font, write_png_sized};

/// Size in pixels of the striping plot (one panel).
const STRIPE_WIDTH: u32 = 900;
const STRIPE_HEIGHT: u32 = 600;

/// One link count of a `quiver-bench stripe` run, as the striping plot draws it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StripePoint {
    /// Number of links.
    pub(crate) links: u32,
    /// quiver's goodput, Gbit/s.
    pub(crate) quiver_gbps: f64,
    /// The N-TCP-streams baseline's goodput, Gbit/s (None: not measured).
    pub(crate) tcp_gbps: Option<f64>,
}

/// What the striping plot needs besides the points: the link rate and what it says.
#[derive(Debug, Clone)]
pub(crate) struct StripeSetting {
    /// Nominal rate of one link (Ethernet frames, as tbf counts), Gbit/s.
    pub(crate) rate_gbps: f64,
    /// MTU ceilings, one line each: (whose, payload bytes in a full frame). The line is
    /// N x rate x payload / `frame_bytes`.
    pub(crate) ceilings: Vec<(String, u32)>,
    /// Bytes of a full frame as tbf counts it (MTU + 14 bytes of Ethernet header).
    pub(crate) frame_bytes: u32,
    /// The caption's second line: MTU, loss, seconds.
    pub(crate) subtitle: String,
}

/// Draws the scaling curve of a striping run into `path` (`.svg` or `.png`): goodput in
/// Gbit/s against the number of links for quiver and the TCP baseline, the nominal
/// N x rate line and the MTU ceiling (N x rate x payload per frame / frame bytes).
///
/// # Errors
/// An unknown extension, no points, no font, or a drawing or writing failure.
pub(crate) fn draw_stripe(
    path: &Path,
    points: &[StripePoint],
    setting: &StripeSetting,
) -> Result<(), String> {
    let extension = path
        .extension()
        .and_then(|extension| extension.to_str())
        .map(str::to_ascii_lowercase);
    if points.is_empty() {
        return Err("--plot: the run measured no link count to draw".to_string());
    }
    if !matches!(extension.as_deref(), Some("svg" | "png")) {
        return Err(format!(
            "--plot {}: the file name must end in .svg or .png",
            path.display()
        ));
    }
    load_font()?;
    if extension.as_deref() == Some("svg") {
        let backend = SVGBackend::new(path, (STRIPE_WIDTH, STRIPE_HEIGHT));
        return render_stripe(backend.into_drawing_area(), points, setting);
    }
    let mut pixels = vec![0u8; (STRIPE_WIDTH * STRIPE_HEIGHT * 3) as usize];
    {
        let backend = BitMapBackend::with_buffer(&mut pixels, (STRIPE_WIDTH, STRIPE_HEIGHT));
        render_stripe(backend.into_drawing_area(), points, setting)?;
    }
    write_png_sized(path, &pixels, (STRIPE_WIDTH, STRIPE_HEIGHT))
}

/// What a line of the striping plot is, which sets its colour and whether it is dashed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum StripeLine {
    /// N x rate (dashed).
    Nominal,
    /// An MTU ceiling, the n-th (dashed).
    Ceiling(usize),
    /// quiver's measured goodput.
    Quiver,
    /// The TCP baseline's measured goodput.
    Tcp,
}

impl StripeLine {
    fn color(self) -> RGBAColor {
        match self {
            StripeLine::Nominal => BLACK.mix(0.6),
            StripeLine::Ceiling(0) => RED.mix(0.6),
            StripeLine::Ceiling(_) => MAGENTA.mix(0.6),
            StripeLine::Quiver => BLUE.mix(1.0),
            StripeLine::Tcp => GREEN.mix(1.0),
        }
    }

    fn dashed(self) -> bool {
        matches!(self, StripeLine::Nominal | StripeLine::Ceiling(_))
    }
}

/// One line of the striping plot: (label, points, kind).
type StripeSeries = (String, Vec<(f64, f64)>, StripeLine);

/// The striping plot's lines.
fn stripe_lines(points: &[StripePoint], setting: &StripeSetting) -> Vec<StripeSeries> {
    let mut sorted = points.to_vec();
    sorted.sort_by_key(|point| point.links);
    let links = |point: &StripePoint| f64::from(point.links);
    let mut lines = vec![(
        format!("nominal: N x {} Gbit/s", format_rate(setting.rate_gbps)),
        sorted
            .iter()
            .map(|point| (links(point), links(point) * setting.rate_gbps))
            .collect(),
        StripeLine::Nominal,
    )];
    for (index, (whose, payload_bytes)) in setting.ceilings.iter().enumerate() {
        let share = f64::from(*payload_bytes) / f64::from(setting.frame_bytes.max(1));
        lines.push((
            format!(
                "{whose} MTU ceiling: {payload_bytes} payload bytes per {}-byte frame",
                setting.frame_bytes
            ),
            sorted
                .iter()
                .map(|point| (links(point), links(point) * setting.rate_gbps * share))
                .collect(),
            StripeLine::Ceiling(index),
        ));
    }
    lines.push((
        "quiver, one striped connection".to_string(),
        sorted
            .iter()
            .map(|point| (links(point), point.quiver_gbps))
            .collect(),
        StripeLine::Quiver,
    ));
    let tcp: Vec<(f64, f64)> = sorted
        .iter()
        .filter_map(|point| point.tcp_gbps.map(|gbps| (links(point), gbps)))
        .collect();
    if !tcp.is_empty() {
        lines.push((
            "kernel TCP, N streams (one per link)".to_string(),
            tcp,
            StripeLine::Tcp,
        ));
    }
    lines
}

/// A link rate for a label: `1`, `0.2`.
fn format_rate(gbps: f64) -> String {
    let text = format!("{gbps:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Draws the striping plot onto `root`: linear axes, links 0..max+1, Gbit/s from 0.
fn render_stripe<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    points: &[StripePoint],
    setting: &StripeSetting,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let text = |error: DrawingAreaErrorKind<DB::ErrorType>| format!("--plot: drawing: {error}");
    root.fill(&WHITE).map_err(text)?;
    let lines = stripe_lines(points, setting);
    let max_links = points.iter().map(|point| point.links).max().unwrap_or(1);
    let y_high = lines
        .iter()
        .flat_map(|(_, line, _)| line.iter().map(|&(_, y)| y))
        .filter(|y| y.is_finite())
        .fold(0.1f64, f64::max)
        * 1.1;
    let x_high = f64::from(max_links) + 0.5;
    let (title_area, plot_area) = root.split_vertically(60);
    title_area
        .titled(
            "Striping: goodput vs number of links (one connection, N links)",
            ("sans-serif", 20),
        )
        .map_err(text)?
        .draw_text(
            &setting.subtitle,
            &("sans-serif", 14).into_text_style(&title_area),
            (12, 8),
        )
        .map_err(text)?;
    let mut chart = ChartBuilder::on(&plot_area)
        .margin(16)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_high, 0.0..y_high)
        .map_err(text)?;
    chart
        .configure_mesh()
        .x_desc("links (N)")
        .y_desc("goodput (Gbit/s of payload)")
        .x_labels(max_links as usize + 2)
        .x_label_formatter(&|links| {
            if links.fract().abs() < 1e-9 {
                format!("{links:.0}")
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|gbps| format!("{gbps:.1}"))
        .light_line_style(BLACK.mix(0.04))
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 15))
        .draw()
        .map_err(text)?;
    for (label, line, kind) in &lines {
        let color = kind.color();
        if kind.dashed() {
            chart
                .draw_series(DashedLineSeries::new(
                    line.iter().copied(),
                    8,
                    5,
                    color.stroke_width(2),
                ))
                .map_err(text)?
                .label(label.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        } else {
            chart
                .draw_series(LineSeries::new(line.iter().copied(), color.stroke_width(2)))
                .map_err(text)?
                .label(label.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart
                .draw_series(
                    line.iter()
                        .map(|&point| Circle::new(point, 4, color.filled())),
                )
                .map_err(text)?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(text)?;
    root.present().map_err(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stripe_points() -> (Vec<StripePoint>, StripeSetting) {
        let points = vec![
            StripePoint {
                links: 2,
                quiver_gbps: 1.906,
                tcp_gbps: Some(1.882),
            },
            StripePoint {
                links: 1,
                quiver_gbps: 0.956,
                tcp_gbps: Some(0.956),
            },
            StripePoint {
                links: 8,
                quiver_gbps: 7.521,
                tcp_gbps: None,
            },
        ];
        let setting = StripeSetting {
            rate_gbps: 1.0,
            ceilings: vec![("TCP's".to_string(), 1448)],
            frame_bytes: 1514,
            subtitle: "MTU 1500, no loss".to_string(),
        };
        (points, setting)
    }

    #[test]
    fn stripe_lines_sorted_with_nominal_and_ceiling() {
        let (points, setting) = stripe_points();
        let lines = stripe_lines(&points, &setting);
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0].1, vec![(1.0, 1.0), (2.0, 2.0), (8.0, 8.0)]);
        assert!((lines[1].1[2].1 - 8.0 * 1448.0 / 1514.0).abs() < 1e-9);
        assert_eq!(lines[2].1, vec![(1.0, 0.956), (2.0, 1.906), (8.0, 7.521)]);
        assert_eq!(
            lines[3].1,
            vec![(1.0, 0.956), (2.0, 1.882)],
            "no TCP point at 8"
        );
        assert_eq!(format_rate(0.2), "0.2");
        assert_eq!(format_rate(1.0), "1");
    }

    #[test]
    fn draws_valid_stripe_svg_and_png() {
        if load_font().is_err() {
            eprintln!("no TrueType font here: skipping the drawing test");
            return;
        }
        let (points, setting) = stripe_points();
        let dir = std::env::temp_dir().join(format!("quiver-stripe-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let svg = dir.join("stripe.svg");
        let png_path = dir.join("stripe.png");
        draw_stripe(&svg, &points, &setting).expect("svg");
        draw_stripe(&png_path, &points, &setting).expect("png");
        let svg_text = std::fs::read_to_string(&svg).expect("read svg");
        let png_bytes = std::fs::read(&png_path).expect("read png");
        let bad_extension = draw_stripe(&dir.join("stripe.gif"), &points, &setting);
        let no_points = draw_stripe(&svg, &[], &setting);
        std::fs::remove_dir_all(&dir).expect("remove temp dir");
        assert!(svg_text.contains("<svg") && svg_text.trim_end().ends_with("</svg>"));
        for label in [
            "goodput (Gbit/s of payload)",
            "links (N)",
            "nominal",
            "kernel TCP",
        ] {
            assert!(svg_text.contains(label), "{label:?} missing from the svg");
        }
        let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
        let reader = decoder.read_info().expect("valid PNG header");
        assert_eq!(
            (reader.info().width, reader.info().height),
            (STRIPE_WIDTH, STRIPE_HEIGHT)
        );
        assert!(bad_extension.is_err());
        assert!(no_points.is_err());
    }
}
