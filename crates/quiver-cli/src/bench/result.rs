//! What the bench's parent does with a rank's result, whatever its test: the
//! [`RankResult`] trait. The bench's [`Record`](super::record::Record) implements it
//! (`table.rs`), the lab's records too; the report, the ranks and the plot use nothing
//! else of a result.

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::floor::Floors;
use super::plan::Transport;
use super::record::{DetectionCost, Labels};

/// A rank's result as the parent handles it: read from rank 0's output, completed with
/// this run's floors, printed as a table row and written as a JSON line.
pub trait RankResult: Clone + Serialize + DeserializeOwned {
    /// The test's name, as in the JSON `test` key.
    fn test_name(&self) -> &'static str;
    /// The transport measured.
    fn transport(&self) -> Transport;
    /// Message size in bytes.
    fn size(&self) -> u64;
    /// Variant, settings and round.
    fn labels(&self) -> &Labels;
    /// Variant, settings and round, to change.
    fn labels_mut(&mut self) -> &mut Labels;
    /// Fills in the ranks' CPUs and the ratio to this run's floor.
    fn complete(&mut self, cpus: [usize; 2], floors: &Floors);
    /// Failure detection's cost during the point, where it was measured.
    fn detection(&self) -> Option<&DetectionCost>;
    /// Whether that cost covers the whole point, warm-up included (rather than the timed
    /// run).
    fn detection_covers_warmup(&self) -> bool {
        false
    }
    /// Whether the test's own variants share one table section, a column saying which,
    /// instead of a section each (as a suite's variants have).
    fn variant_in_column(&self) -> bool {
        false
    }
    /// The lines that open this result's table section (what is measured, the columns).
    fn table_header(&self) -> Vec<String>;
    /// The OSU micro-benchmarks' title and column line for this result's test.
    fn osu_header(&self) -> (&'static str, &'static str);
    /// The result as a row of quiver's table.
    fn table_row(&self) -> String;
    /// The result as a row in the OSU layout (size left, figures right-aligned).
    fn osu_row(&self) -> String;
    /// Where the result goes in a `--plot` (None: not drawn).
    fn plot_point(&self) -> Option<PlotPoint>;
}

/// Which panel a point is drawn in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Panel {
    /// Latency vs size, µs.
    Latency,
    /// Bandwidth vs size, MB/s.
    Bandwidth,
}

/// One point of the plot: its panel, the label of its line, its size and value.
#[derive(Debug, Clone, PartialEq)]
pub struct PlotPoint {
    /// The panel.
    pub panel: Panel,
    /// The line's label (transport, variant).
    pub label: String,
    /// Message size in bytes.
    pub size: f64,
    /// Latency in µs or bandwidth in MB/s.
    pub value: f64,
}
