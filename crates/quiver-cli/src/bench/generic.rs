//! Tests written once for every link between the two ranks: bidirectional bandwidth
//! ([`bibw_point`]), over the [`BenchLink`] trait that both quiver's connection (`Link`,
//! `link.rs`) and the raw-socket baselines implement. The lab's LogGP test is written over
//! the same trait.
//!
//! Timed loops allocate nothing and log nothing: buffers are prepared before the loop.

use std::time::Instant;

use super::plan::{self, Transport};
use super::record::{Labels, Record, StreamPoint};

/// A message channel between the bench's two ranks: what the generic tests need.
pub trait BenchLink {
    /// This rank's number (0 drives and reports, 1 answers).
    fn rank(&self) -> u32;
    /// The transport the link runs over (what its records say).
    fn transport(&self) -> Transport;
    /// Sends `message`, blocking until the transport has taken it.
    ///
    /// # Errors
    /// The transport's error, as text.
    fn send_message(&mut self, message: &[u8]) -> Result<(), String>;
    /// Receives one message of exactly `buffer.len()` bytes into `buffer`, blocking.
    ///
    /// # Errors
    /// The transport's error or a message of another length, as text.
    fn receive_message(&mut self, buffer: &mut [u8]) -> Result<(), String>;
    /// Receiver, end of a window: tell the sender everything arrived.
    ///
    /// # Errors
    /// The transport's error, as text.
    fn send_window_ack(&mut self) -> Result<(), String>;
    /// Sender, end of a window: wait until the receiver has everything.
    ///
    /// # Errors
    /// The transport's error, as text.
    fn wait_window_ack(&mut self) -> Result<(), String>;
    /// Before `exchange`: make buffers for `count` messages of `size` bytes each way
    /// (outside any timed loop).
    ///
    /// # Errors
    /// The link cannot exchange messages (a baseline without flow control both ways).
    fn prepare_exchange(&mut self, size: u64, count: u64) -> Result<(), String>;
    /// bibw: sends `count` messages of the prepared size to the other rank while receiving
    /// `count` from it; returns when all have been sent and received.
    ///
    /// # Errors
    /// The transport's error, as text.
    fn exchange(&mut self, count: u64) -> Result<(), String>;
}

/// osu_bibw-style: in each window both ranks send `window` messages of `size` bytes to
/// each other at once; `windows` timed windows after a warm-up. Rank 0 returns the record:
/// bandwidth = bytes moved in both directions / time.
///
/// # Errors
/// The link's error, as text.
pub fn bibw_point(
    link: &mut dyn BenchLink,
    size: u64,
    window: u64,
    windows: u64,
) -> Result<Option<Record>, String> {
    link.prepare_exchange(size, window)?;
    let warmup = plan::warmup_windows(windows);
    for _ in 0..warmup {
        link.exchange(window)?;
    }
    let start = Instant::now();
    for _ in 0..windows {
        link.exchange(window)?;
    }
    let elapsed_us = start.elapsed().as_secs_f64() * 1e6;
    if link.rank() != 0 {
        return Ok(None);
    }
    let bytes = 2.0 * (window * windows * size) as f64;
    Ok(Some(Record::Bibw(StreamPoint {
        transport: link.transport(),
        size,
        iters: windows,
        window,
        // bytes per µs = MB/s.
        bandwidth_mbps: bytes / elapsed_us,
        floor_mbps: None,
        floor_ratio: None,
        cpus: None,
        labels: Labels::default(),
        detection: None,
        posted: None,
    })))
}
