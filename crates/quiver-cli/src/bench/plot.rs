//! `quiver bench --plot FILE.svg|FILE.png`: latency vs size (log-log) and bandwidth vs
//! size (log-log), one line per transport (and per variant: copy/zero-copy, default/tuned,
//! pooled/fresh), from the records of the run.
//!
//! Latency comes from pingpong (and pool) points, bandwidth from bw and bibw points. Drawn
//! with the `plotters` crate: its SVG backend for `.svg`, its bitmap backend into memory
//! for `.png`, which the `png` crate then encodes. Text needs a TrueType font, read from
//! `$QUIVER_PLOT_FONT` or DejaVu Sans (Debian's `fonts-dejavu-core`, which `.ci/run`
//! installs when missing); the font is never fetched from anywhere.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::prelude::*;

use super::report::Record;

/// Image size in pixels (two panels side by side).
const WIDTH: u32 = 1400;
const HEIGHT: u32 = 560;
/// Where a TrueType font is looked for, after `$QUIVER_PLOT_FONT`.
const FONT_PATHS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];
/// Environment variable naming a TrueType font for the plot's text.
const FONT_ENV: &str = "QUIVER_PLOT_FONT";

/// One line: (size in bytes, value), ascending by size.
type Series = BTreeMap<String, Vec<(f64, f64)>>;

/// Draws the plot of `records` into `path` (`.svg` or `.png`).
///
/// # Errors
/// An unknown extension, no latency or bandwidth points, no font, or a drawing or
/// writing failure, as a message.
pub(crate) fn draw(path: &Path, records: &[Record]) -> Result<(), String> {
    let extension = path
        .extension()
        .and_then(|extension| extension.to_str())
        .map(str::to_ascii_lowercase);
    let (latency, bandwidth) = series(records);
    if latency.is_empty() && bandwidth.is_empty() {
        return Err("--plot: the run measured no latency or bandwidth points to draw".to_string());
    }
    load_font()?;
    match extension.as_deref() {
        Some("svg") => {
            let backend = SVGBackend::new(path, (WIDTH, HEIGHT));
            render(backend.into_drawing_area(), &latency, &bandwidth)
        }
        Some("png") => {
            let mut pixels = vec![0u8; (WIDTH * HEIGHT * 3) as usize];
            {
                let backend = BitMapBackend::with_buffer(&mut pixels, (WIDTH, HEIGHT));
                render(backend.into_drawing_area(), &latency, &bandwidth)?;
            }
            write_png(path, &pixels)
        }
        _ => Err(format!(
            "--plot {}: the file name must end in .svg or .png",
            path.display()
        )),
    }
}

/// Latency and bandwidth series by line label.
fn series(records: &[Record]) -> (Series, Series) {
    let mut latency = Series::new();
    let mut bandwidth = Series::new();
    for record in records {
        let label = match record.variant.as_deref() {
            Some(variant) if variant != "fit" => format!("{} {variant}", record.transport),
            _ => record.transport.clone(),
        };
        let size = record.size as f64;
        match record.test.as_str() {
            "pingpong" | "pool" => {
                if let Some(value) = record.latency_us {
                    latency.entry(label).or_default().push((size, value));
                }
            }
            "bw" => {
                if let Some(value) = record.bandwidth_mbps {
                    bandwidth.entry(label).or_default().push((size, value));
                }
            }
            "bibw" => {
                if let Some(value) = record.bandwidth_mbps {
                    bandwidth
                        .entry(format!("{label} bibw"))
                        .or_default()
                        .push((size, value));
                }
            }
            _ => {}
        }
    }
    for points in latency.values_mut().chain(bandwidth.values_mut()) {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        points.retain(|&(_, value)| value > 0.0 && value.is_finite());
    }
    latency.retain(|_, points| !points.is_empty());
    bandwidth.retain(|_, points| !points.is_empty());
    (latency, bandwidth)
}

/// Registers the TrueType font plotters draws text with (once per process).
fn load_font() -> Result<(), String> {
    static LOADED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    LOADED
        .get_or_init(|| {
            let candidates: Vec<String> = std::env::var(FONT_ENV)
                .ok()
                .into_iter()
                .chain(FONT_PATHS.iter().map(|path| path.to_string()))
                .collect();
            let Some(bytes) = candidates.iter().find_map(|path| std::fs::read(path).ok()) else {
                return Err(format!(
                    "--plot needs a TrueType font for its text: install fonts-dejavu-core \
                     (apt-get install fonts-dejavu-core) or set {FONT_ENV}=/path/to/font.ttf"
                ));
            };
            // plotters keeps a &'static reference to the font: leak the one copy this
            // process ever loads (a few hundred KiB).
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| "--plot: the font file is not a usable TrueType font".to_string())
        })
        .clone()
}

/// Draws both panels onto `root`.
fn render<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    latency: &Series,
    bandwidth: &Series,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let text = |error: DrawingAreaErrorKind<DB::ErrorType>| format!("--plot: drawing: {error}");
    root.fill(&WHITE).map_err(text)?;
    let (left, right) = root.split_horizontally(WIDTH / 2);
    panel(
        &left,
        "Latency vs message size (one way, median)",
        "latency (µs)",
        latency,
    )?;
    panel(
        &right,
        "Bandwidth vs message size (MB/s = 10^6 bytes/s)",
        "bandwidth (MB/s)",
        bandwidth,
    )?;
    root.present().map_err(text)
}

/// One log-log panel with a line and markers per series, axes, units and a legend.
fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    y_label: &str,
    lines: &Series,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let text = |error: DrawingAreaErrorKind<DB::ErrorType>| format!("--plot: drawing: {error}");
    let points = lines.values().flatten();
    let (mut x_low, mut x_high, mut y_low, mut y_high) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in points {
        x_low = x_low.min(x);
        x_high = x_high.max(x);
        y_low = y_low.min(y);
        y_high = y_high.max(y);
    }
    if lines.is_empty() {
        (x_low, x_high, y_low, y_high) = (1.0, 2.0, 1.0, 2.0);
    }
    // Some room around the data, and a non-empty range on each log axis.
    let x_range = (x_low / 1.5)..(x_high * 1.5).max(x_low * 2.0);
    let y_range = (y_low / 2.0)..(y_high * 2.0).max(y_low * 4.0);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(x_range.log_scale(), y_range.log_scale())
        .map_err(text)?;
    chart
        .configure_mesh()
        .x_desc("message size (bytes, log scale)")
        .y_desc(format!("{y_label}, log scale"))
        .x_label_formatter(&|size| format_axis(*size))
        .y_label_formatter(&|value| format_axis(*value))
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 15))
        .draw()
        .map_err(text)?;
    for (index, (label, points)) in lines.iter().enumerate() {
        let color = Palette99::pick(index).to_rgba();
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(text)?
            .label(label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(
                points
                    .iter()
                    .map(|&point| Circle::new(point, 3, color.filled())),
            )
            .map_err(text)?;
    }
    if !lines.is_empty() {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(text)?;
    }
    Ok(())
}

/// Axis numbers: `0.1`, `20`, `1500`, `2e4`.
fn format_axis(value: f64) -> String {
    if value >= 1e4 {
        format!("{value:.0e}")
    } else if value >= 1.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.2}")
    }
}

/// Encodes an RGB8 buffer of WIDTH x HEIGHT as a PNG file.
fn write_png(path: &Path, pixels: &[u8]) -> Result<(), String> {
    write_png_sized(path, pixels, (WIDTH, HEIGHT))
}

/// Encodes an RGB8 buffer of `size` (width, height) pixels as a PNG file.
fn write_png_sized(path: &Path, pixels: &[u8], size: (u32, u32)) -> Result<(), String> {
    let file = std::fs::File::create(path)
        .map_err(|error| format!("--plot: cannot create {}: {error}", path.display()))?;
    let mut encoder = png::Encoder::new(std::io::BufWriter::new(file), size.0, size.1);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder
        .write_header()
        .map_err(|error| format!("--plot: writing {}: {error}", path.display()))?;
    writer
        .write_image_data(pixels)
        .and_then(|()| writer.finish())
        .map_err(|error| format!("--plot: writing {}: {error}", path.display()))
}

// ---- `quiver bench stripe --plot`: goodput against the number of links ----

/// Size in pixels of the striping plot (one panel).
const STRIPE_WIDTH: u32 = 900;
const STRIPE_HEIGHT: u32 = 600;

/// One link count of a `quiver bench stripe` run, as the striping plot draws it.
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

    fn record(test: &str, transport: &str, size: u64, value: f64) -> Record {
        Record {
            test: test.into(),
            transport: transport.into(),
            size,
            latency_us: (test == "pingpong").then_some(value),
            bandwidth_mbps: (test != "pingpong").then_some(value),
            ..Record::default()
        }
    }

    fn records() -> Vec<Record> {
        vec![
            record("pingpong", "shm", 1024, 0.3),
            record("pingpong", "shm", 8, 0.1),
            record("pingpong", "udp", 8, 8.0),
            record("bw", "shm", 8, 90.0),
            record("bw", "shm", 1 << 20, 20000.0),
            record("bibw", "shm", 1 << 20, 30000.0),
        ]
    }

    #[test]
    fn series_group_by_transport_sorted_by_size() {
        let (latency, bandwidth) = series(&records());
        assert_eq!(latency["shm"], vec![(8.0, 0.1), (1024.0, 0.3)]);
        assert_eq!(latency["udp"], vec![(8.0, 8.0)]);
        assert_eq!(bandwidth.len(), 2);
        assert!(bandwidth.contains_key("shm bibw"));
    }

    #[test]
    fn draws_valid_svg_and_png() {
        if load_font().is_err() {
            eprintln!("no TrueType font here: skipping the drawing test");
            return;
        }
        let dir = std::env::temp_dir().join(format!("quiver-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let svg = dir.join("plot.svg");
        let png_path = dir.join("plot.png");
        draw(&svg, &records()).expect("svg");
        draw(&png_path, &records()).expect("png");
        let svg_text = std::fs::read_to_string(&svg).expect("read svg");
        let png_bytes = std::fs::read(&png_path).expect("read png");
        std::fs::remove_dir_all(&dir).expect("remove temp dir");
        assert!(svg_text.contains("<svg") && svg_text.trim_end().ends_with("</svg>"));
        assert!(svg_text.contains("latency (µs)"), "axis label missing");
        let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
        let reader = decoder.read_info().expect("valid PNG header");
        assert_eq!((reader.info().width, reader.info().height), (WIDTH, HEIGHT));
        assert!(draw(&dir.join("plot.gif"), &records()).is_err());
    }

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
