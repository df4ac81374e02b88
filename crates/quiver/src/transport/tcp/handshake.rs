//! Reading job-key handshake messages off a tcp stream: they carry their own length (bytes
//! 6..8 of their prefix), so they need no extra framing. After the Verdict the stream
//! carries [`quiver_wire::stream`] frames.

use std::io::{self, Read};
use std::net::TcpStream;
use std::time::Duration;

use quiver_wire::handshake::PREFIX_LEN;

/// Time a single handshake step may take before the socket gives up.
pub(crate) const STEP_TIMEOUT: Duration = Duration::from_secs(2);

/// Reads one handshake message into `buf`; returns its length. A prefix that declares an
/// impossible length is returned alone, for the handshake parser to name the problem.
pub(crate) fn read_message(stream: &mut TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    stream.read_exact(&mut buf[..PREFIX_LEN])?;
    let declared = u16::from_be_bytes([buf[6], buf[7]]) as usize;
    if !(PREFIX_LEN..=buf.len()).contains(&declared) {
        // Let the handshake parser name the problem from the prefix alone.
        return Ok(PREFIX_LEN);
    }
    stream.read_exact(&mut buf[PREFIX_LEN..declared])?;
    Ok(declared)
}
