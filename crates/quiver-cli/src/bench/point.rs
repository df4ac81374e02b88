//! One measured run of a pingpong, bw or rate point, over quiver's connection or over a
//! raw-socket baseline: what the everyday rank program runs once per point, and what the
//! lab's paired runs run once per block.

use super::link::{Buffers, Link};
use super::plan::{Plan, TestName, RATE_MESSAGE_BYTES};
use super::raw::RawBaseline;
use super::record::Record;

/// One measured run of a pingpong, bw or rate point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// `iters` round trips of `size` bytes.
    Pingpong {
        /// Message size in bytes.
        size: u64,
        /// Timed round trips.
        iters: u64,
    },
    /// bw or rate (`test` says which): `windows` windows of messages of `size` bytes.
    Stream {
        /// bw or rate.
        test: TestName,
        /// Message size in bytes.
        size: u64,
        /// Timed windows.
        windows: u64,
    },
}

impl Point {
    /// The points of `test` (pingpong, bw or rate; none for the others), in order.
    pub fn of_test(plan: &Plan, test: TestName) -> Vec<Point> {
        match test {
            TestName::Pingpong => plan
                .sizes
                .iter()
                .map(|&size| Point::Pingpong {
                    size,
                    iters: plan.pingpong_iters(size),
                })
                .collect(),
            TestName::Bw => plan
                .sizes
                .iter()
                .map(|&size| Point::Stream {
                    test,
                    size,
                    windows: plan.bw_windows(size),
                })
                .collect(),
            TestName::Rate => vec![Point::Stream {
                test,
                size: RATE_MESSAGE_BYTES,
                windows: plan.rate_windows(),
            }],
            TestName::Floor | TestName::Bibw | TestName::Am => Vec::new(),
        }
    }

    /// "pingpong at 8 bytes", for error messages.
    pub fn name(self) -> String {
        match self {
            Point::Pingpong { size, .. } => format!("pingpong at {size} bytes"),
            Point::Stream { test, size, .. } => format!("{} at {size} bytes", test.as_str()),
        }
    }

    /// Measures the point over the quiver connection; rank 0 returns the record.
    ///
    /// # Errors
    /// The step that failed, as text.
    pub fn over_quiver(
        self,
        link: &mut Link,
        buffers: &mut Buffers,
        window: u64,
    ) -> Result<Option<Record>, String> {
        let result = match self {
            Point::Pingpong { size, iters } => link.pingpong(buffers, size, iters),
            Point::Stream {
                test,
                size,
                windows,
            } => link.stream(buffers, test, size, window, windows),
        };
        result.map_err(|error| error.to_string())
    }

    /// Measures the point over a raw-socket baseline; rank 0 returns the record.
    ///
    /// # Errors
    /// The socket error, as text.
    pub fn over_raw(
        self,
        baseline: &mut RawBaseline,
        window: u64,
    ) -> Result<Option<Record>, String> {
        let result = match self {
            Point::Pingpong { size, iters } => baseline.pingpong(size, iters),
            Point::Stream {
                test,
                size,
                windows,
            } => baseline.stream(test, size, window, windows),
        };
        result.map_err(|error| error.to_string())
    }
}
