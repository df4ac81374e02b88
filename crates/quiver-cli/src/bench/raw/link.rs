//! What a raw-socket link between the two ranks is ([`RawLink`]), whichever socket it
//! uses, and the port numbers the ranks trade to set one up. Below the two links and the
//! baseline that measures over them.

use std::io;

/// A message channel between the two ranks over plain sockets.
pub(super) trait RawLink {
    /// Sends `message` (spinning while the socket is full).
    fn send_message(&mut self, message: &[u8]) -> io::Result<()>;
    /// Receives one message of exactly `buffer.len()` bytes into `buffer`.
    fn receive_message(&mut self, buffer: &mut [u8]) -> io::Result<()>;
    /// Latency (pingpong) or streaming: a link may wait differently for each.
    fn set_latency_mode(&mut self, latency: bool) {
        let _ = latency;
    }
    /// Receiver, end of a bw/rate window: tell the sender everything arrived.
    fn send_window_ack(&mut self) -> io::Result<()>;
    /// Sender, end of a bw/rate window: wait until the receiver has everything.
    fn wait_window_ack(&mut self) -> io::Result<()>;
    /// bibw: sends `count` copies of `message` while receiving `count` messages of
    /// `receive.len()` bytes (each into `receive`), both at once.
    fn exchange(&mut self, message: &[u8], receive: &mut [u8], count: u64) -> io::Result<()> {
        let _ = (message, receive, count);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "bibw is not measured over this baseline",
        ))
    }
}

/// The big-endian port at `offset` of a bootstrap message.
///
/// # Errors
/// The message is too short.
pub(super) fn port_from(message: &[u8], offset: usize) -> Result<u16, String> {
    match message.get(offset..offset + 2) {
        Some(&[high, low]) => Ok(u16::from_be_bytes([high, low])),
        _ => Err(format!(
            "bad address message from the other rank: {message:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_parse() {
        assert_eq!(port_from(&[0x12, 0x34, 0, 1], 0), Ok(0x1234));
        assert_eq!(port_from(&[0x12, 0x34, 0, 1], 2), Ok(1));
        assert!(port_from(&[1], 0).is_err());
    }
}
