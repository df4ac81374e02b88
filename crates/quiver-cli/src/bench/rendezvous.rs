//! How the bench's two ranks find each other: the job's context, the connection to the
//! other rank, and the few bytes a raw-socket baseline trades to set up (its ports)
//! over an idle quiver connection.
//!
//! Rank side only, below everything that measures: nothing here is timed.

use std::time::{Duration, Instant};

use quiver::{Addr, Connection, Context, Endpoint};

/// How long connecting to the other rank may keep failing before giving up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest message [`exchange_over`] carries, in bytes.
pub const MAX_EXCHANGE_BYTES: usize = 64;

/// The job's context (from the launcher's environment), checked to have two ranks.
///
/// # Errors
/// The context could not be built, or the job does not have exactly two ranks.
pub fn open_context() -> Result<Context, String> {
    let context = Context::from_env().map_err(|error| format!("Context::from_env: {error}"))?;
    if context.size() != 2 {
        return Err(format!(
            "the bench needs exactly 2 ranks, this job has {}",
            context.size()
        ));
    }
    Ok(context)
}

/// Connects to the other rank, retrying while it may still be starting.
///
/// # Errors
/// Connecting still failed after `CONNECT_TIMEOUT`.
pub fn connect(endpoint: &mut Endpoint, peer: Addr) -> Result<Connection, String> {
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    loop {
        match endpoint.connect(peer) {
            Ok(connection) => return Ok(connection),
            Err(error) if Instant::now() >= deadline => {
                return Err(format!("connecting to {peer}: {error}"));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// How the two ranks trade the few bytes a raw link needs to set up (ports, buffer
/// sizes): each sends its message and gets the other's. A raw transport run alone uses an
/// idle quiver shm connection; the lab's paired runs use the quiver connection under test,
/// already open and idle at that moment.
pub trait Rendezvous {
    /// Sends `mine` (at most [`MAX_EXCHANGE_BYTES`]) to the other rank and returns what it
    /// sent.
    ///
    /// # Errors
    /// Sending or receiving failed.
    fn exchange(&mut self, mine: &[u8]) -> Result<Vec<u8>, String>;
}

/// [`Rendezvous::exchange`] over an idle quiver connection: sends `mine` and receives the
/// other rank's message (at most [`MAX_EXCHANGE_BYTES`]).
///
/// # Errors
/// Sending or receiving failed.
pub fn exchange_over(
    endpoint: &mut Endpoint,
    connection: Connection,
    mine: &[u8],
) -> Result<Vec<u8>, String> {
    endpoint
        .send(connection, mine)
        .map_err(|error| format!("sending to the other rank: {error}"))?;
    let mut buffer = [0u8; MAX_EXCHANGE_BYTES];
    let (length, _) = endpoint
        .recv(&mut buffer)
        .map_err(|error| format!("receiving from the other rank: {error}"))?;
    Ok(buffer[..length].to_vec())
}
