//! `--plot FILE.svg|FILE.png`: latency vs size (log-log) and bandwidth vs size (log-log),
//! one line per transport (and per variant: copy/zero-copy, default/tuned, pooled/fresh),
//! from the results of the run.
//!
//! Each result says where it goes ([`RankResult::plot_point`]): latency from pingpong (and
//! the lab's pool), bandwidth from bw and bibw. Drawn with the `plotters` crate: its SVG
//! backend for `.svg`, its bitmap backend into memory for `.png`, which the `png` crate
//! then encodes. Text needs a TrueType font, read from `$QUIVER_PLOT_FONT` or DejaVu Sans
//! (Debian's `fonts-dejavu-core`, which `.ci/run` installs when missing); the font is never
//! fetched from anywhere. [`load_font`] and [`write_png_sized`] serve the lab's plots too.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::prelude::*;

use super::result::{Panel, RankResult};

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
pub const FONT_ENV: &str = "QUIVER_PLOT_FONT";

/// One line: (size in bytes, value), ascending by size.
type Series = BTreeMap<String, Vec<(f64, f64)>>;

/// Draws the plot of `records` into `path` (`.svg` or `.png`).
///
/// # Errors
/// An unknown extension, no latency or bandwidth points, no font, or a drawing or
/// writing failure, as a message.
pub fn draw<R: RankResult>(path: &Path, records: &[R]) -> Result<(), String> {
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
fn series<R: RankResult>(records: &[R]) -> (Series, Series) {
    let mut latency = Series::new();
    let mut bandwidth = Series::new();
    for point in records.iter().filter_map(RankResult::plot_point) {
        let panel = match point.panel {
            Panel::Latency => &mut latency,
            Panel::Bandwidth => &mut bandwidth,
        };
        panel
            .entry(point.label)
            .or_default()
            .push((point.size, point.value));
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
pub fn load_font() -> Result<(), String> {
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
pub fn write_png_sized(path: &Path, pixels: &[u8], size: (u32, u32)) -> Result<(), String> {
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

#[cfg(test)]
mod tests {
    use super::super::plan::Transport;
    use super::super::record::{Labels, LatencyPoint, Record, StreamPoint};
    use super::*;

    fn record(test: &str, transport: Transport, size: u64, value: f64) -> Record {
        if test == "pingpong" {
            return Record::Pingpong(LatencyPoint {
                transport,
                size,
                iters: 10,
                latency_us: value,
                latency_p99_us: value,
                floor_us: None,
                floor_ratio: None,
                cpus: None,
                labels: Labels::default(),
                detection: None,
            });
        }
        let point = StreamPoint {
            transport,
            size,
            iters: 10,
            window: 64,
            bandwidth_mbps: value,
            floor_mbps: None,
            floor_ratio: None,
            cpus: None,
            labels: Labels::default(),
            detection: None,
            posted: None,
        };
        if test == "bibw" {
            Record::Bibw(point)
        } else {
            Record::Bw(point)
        }
    }

    fn records() -> Vec<Record> {
        vec![
            record("pingpong", Transport::Shm, 1024, 0.3),
            record("pingpong", Transport::Shm, 8, 0.1),
            record("pingpong", Transport::Udp, 8, 8.0),
            record("bw", Transport::Shm, 8, 90.0),
            record("bw", Transport::Shm, 1 << 20, 20000.0),
            record("bibw", Transport::Shm, 1 << 20, 30000.0),
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
}
