//! raw-udp: the plain UDP baseline, connected sockets over 127.0.0.1, busy-polling, with
//! just enough flow control that nothing is dropped on loopback (the module doc of
//! `raw/mod.rs` says how).

use std::io;
use std::net::{Ipv4Addr, UdpSocket};
use std::os::fd::AsFd;

use super::super::rendezvous::Rendezvous;
use super::link::{port_from, RawLink};
use super::spin::{spin, would_block};

/// Largest payload of one IPv4 UDP datagram; larger raw-udp messages are split.
pub const MAX_DATAGRAM_BYTES: usize = 65_507;
/// Socket buffers raw-udp asks for, per socket and direction.
const UDP_SOCKET_BUFFER_BYTES: usize = 64 << 20;
/// Kernel bookkeeping counted per datagram against the receive buffer (a conservative
/// bound on the sk_buff overhead of a loopback datagram).
const DATAGRAM_OVERHEAD_BYTES: usize = 1536;

/// raw-udp: a connected data socket pair and a connected acknowledgement socket pair.
pub(super) struct UdpLink {
    data: UdpSocket,
    acks: UdpSocket,
    /// Receive buffer of the other rank's data socket as its kernel reports it (bytes).
    peer_receive_buffer_bytes: usize,
    /// Receive buffer of this rank's data socket (bytes).
    receive_buffer_bytes: usize,
    /// Datagrams this rank sent / the other rank has acknowledged / this rank received.
    sent: u64,
    acknowledged: u64,
    received: u64,
    /// Count carried by the last acknowledgement this rank sent.
    last_ack_sent: u64,
}

impl UdpLink {
    /// Both ranks bind two sockets on 127.0.0.1, exchange ports and receive buffer sizes,
    /// and connect each socket to its counterpart.
    pub(super) fn open(bootstrap: &mut dyn Rendezvous) -> Result<UdpLink, String> {
        let bind = || -> io::Result<(UdpSocket, usize)> {
            let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
            let (_, receive) = quiver_transport::udp::set_buffer_sizes(
                socket.as_fd(),
                UDP_SOCKET_BUFFER_BYTES,
                UDP_SOCKET_BUFFER_BYTES,
            )?;
            socket.set_nonblocking(true)?;
            Ok((socket, receive))
        };
        let (data, receive_buffer_bytes) = bind().map_err(|error| format!("udp: {error}"))?;
        let (acks, _) = bind().map_err(|error| format!("udp: {error}"))?;
        let port = |socket: &UdpSocket| socket.local_addr().map(|address| address.port());
        let mut mine = Vec::with_capacity(12);
        mine.extend_from_slice(
            &port(&data)
                .map_err(|error| error.to_string())?
                .to_be_bytes(),
        );
        mine.extend_from_slice(
            &port(&acks)
                .map_err(|error| error.to_string())?
                .to_be_bytes(),
        );
        mine.extend_from_slice(&(receive_buffer_bytes as u64).to_be_bytes());
        let theirs = bootstrap.exchange(&mine)?;
        if theirs.len() != 12 {
            return Err(format!(
                "bad address message from the other rank: {theirs:?}"
            ));
        }
        let mut buffer_bytes = [0u8; 8];
        buffer_bytes.copy_from_slice(&theirs[4..12]);
        for (socket, offset) in [(&data, 0), (&acks, 2)] {
            let peer_port = port_from(&theirs, offset)?;
            socket
                .connect((Ipv4Addr::LOCALHOST, peer_port))
                .map_err(|error| format!("udp connect to port {peer_port}: {error}"))?;
        }
        Ok(UdpLink {
            data,
            acks,
            peer_receive_buffer_bytes: u64::from_be_bytes(buffer_bytes) as usize,
            receive_buffer_bytes,
            sent: 0,
            acknowledged: 0,
            received: 0,
            last_ack_sent: 0,
        })
    }

    /// Datagrams between acknowledgements for datagrams of `datagram_bytes`, for a receive
    /// buffer of `buffer_bytes`: a quarter of the buffer, so two intervals in flight fill
    /// at most half of it. Sender and receiver compute it from the same receiver buffer.
    fn ack_interval(buffer_bytes: usize, datagram_bytes: usize) -> u64 {
        ((buffer_bytes / 4) / (datagram_bytes + DATAGRAM_OVERHEAD_BYTES)).max(1) as u64
    }

    /// Reads every pending acknowledgement; returns whether any arrived.
    fn read_acks(&mut self) -> io::Result<bool> {
        let mut count = [0u8; 8];
        let mut any = false;
        while let Some(length) = would_block(self.acks.recv(&mut count))? {
            if length != 8 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("acknowledgement of {length} bytes"),
                ));
            }
            self.acknowledged = self.acknowledged.max(u64::from_be_bytes(count));
            any = true;
        }
        Ok(any)
    }

    /// Tells the sender how many datagrams arrived so far.
    fn send_ack(&mut self) -> io::Result<()> {
        let count = self.received.to_be_bytes();
        let acks = &self.acks;
        spin("sending an acknowledgement", || {
            would_block(acks.send(&count))
        })?;
        self.last_ack_sent = self.received;
        Ok(())
    }
}

impl RawLink for UdpLink {
    fn send_message(&mut self, message: &[u8]) -> io::Result<()> {
        let datagram_bytes = message.len().min(MAX_DATAGRAM_BYTES);
        let credit = 2 * Self::ack_interval(self.peer_receive_buffer_bytes, datagram_bytes);
        let mut chunks = message.chunks(MAX_DATAGRAM_BYTES);
        // An empty message is one empty datagram; `chunks` would yield none.
        let mut empty = message.is_empty().then_some(&message[..0]);
        while let Some(chunk) = empty.take().or_else(|| chunks.next()) {
            if self.sent - self.acknowledged >= credit {
                spin("waiting for send credit", || {
                    self.read_acks()?;
                    Ok((self.sent - self.acknowledged < credit).then_some(()))
                })?;
            }
            let data = &self.data;
            let written = spin("sending a datagram", || would_block(data.send(chunk)))?;
            if written != chunk.len() {
                return Err(io::Error::new(io::ErrorKind::WriteZero, "short datagram"));
            }
            self.sent += 1;
        }
        Ok(())
    }

    fn receive_message(&mut self, buffer: &mut [u8]) -> io::Result<()> {
        let datagram_bytes = buffer.len().min(MAX_DATAGRAM_BYTES);
        let interval = Self::ack_interval(self.receive_buffer_bytes, datagram_bytes);
        let length = buffer.len();
        let mut offset = 0;
        loop {
            let end = (offset + MAX_DATAGRAM_BYTES).min(length);
            let slot = &mut buffer[offset..end];
            let data = &self.data;
            let received = spin("receiving a datagram", || would_block(data.recv(slot)))?;
            if received != end - offset {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "expected a {}-byte datagram, got {received} bytes",
                        end - offset
                    ),
                ));
            }
            self.received += 1;
            if self.received - self.last_ack_sent >= interval {
                self.send_ack()?;
            }
            offset = end;
            if offset >= length {
                // The tests alternate (pingpong) or flow one way (bw, rate): a message from
                // the other rank means it has consumed everything this rank sent before.
                self.acknowledged = self.sent;
                return Ok(());
            }
        }
    }

    fn send_window_ack(&mut self) -> io::Result<()> {
        if self.last_ack_sent != self.received {
            self.send_ack()?;
        }
        Ok(())
    }

    fn wait_window_ack(&mut self) -> io::Result<()> {
        if self.acknowledged < self.sent {
            spin("waiting for the window acknowledgement", || {
                self.read_acks()?;
                Ok((self.acknowledged >= self.sent).then_some(()))
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_interval_keeps_two_intervals_within_half_the_buffer() {
        for buffer in [212_992usize, 1 << 20, 128 << 20] {
            for datagram in [0usize, 8, 1400, MAX_DATAGRAM_BYTES] {
                let interval = UdpLink::ack_interval(buffer, datagram) as usize;
                assert!(interval >= 1);
                if interval > 1 {
                    assert!(2 * interval * (datagram + DATAGRAM_OVERHEAD_BYTES) <= buffer / 2);
                }
            }
        }
    }
}
