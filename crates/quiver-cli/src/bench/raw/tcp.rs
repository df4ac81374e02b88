//! raw-tcp: the plain TCP baseline, one non-blocking connection with `TCP_NODELAY` over
//! 127.0.0.1, busy-polling. A message of `n` bytes is one `write` loop of `n` bytes; the
//! receiver reads the way a tuned application would (see [`TCP_STAGING_BYTES`]).

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Instant;

use super::super::rendezvous::Rendezvous;
use super::link::{port_from, RawLink};
use super::spin::{ready, spin, would_block, SPINS_PER_CLOCK_READ, STALL_TIMEOUT};

/// raw-tcp: messages shorter than this are received through a staging buffer this large
/// (many per read when they stream); longer ones straight into their destination. The
/// same as quiver's tcp default (`QUIVER_TCP_STAGING_BYTES`).
pub const TCP_STAGING_BYTES: usize = 256 << 10;

/// raw-tcp: one non-blocking TCP connection with `TCP_NODELAY`.
pub(super) struct TcpLink {
    stream: TcpStream,
    /// Bytes read ahead of the message being received: `staging[start..end]`.
    staging: Box<[u8]>,
    start: usize,
    end: usize,
    /// Pingpong: read and write without looking with `poll` first.
    latency: bool,
}

impl TcpLink {
    /// Rank 1 listens on 127.0.0.1 and sends its port; rank 0 connects.
    pub(super) fn open(rank: u32, bootstrap: &mut dyn Rendezvous) -> Result<TcpLink, String> {
        let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let stream = if rank == 1 {
            let listener =
                TcpListener::bind(loopback).map_err(|error| format!("tcp listen: {error}"))?;
            let port = listener
                .local_addr()
                .map_err(|error| error.to_string())?
                .port();
            bootstrap.exchange(&port.to_be_bytes())?;
            listener
                .accept()
                .map_err(|error| format!("tcp accept: {error}"))?
                .0
        } else {
            let port = port_from(&bootstrap.exchange(&[0])?, 0)?;
            TcpStream::connect((Ipv4Addr::LOCALHOST, port))
                .map_err(|error| format!("tcp connect to port {port}: {error}"))?
        };
        TcpLink::from_stream(stream).map_err(|error| format!("tcp options: {error}"))
    }

    /// The link over a connected stream (made non-blocking, `TCP_NODELAY`).
    fn from_stream(stream: TcpStream) -> io::Result<TcpLink> {
        stream.set_nodelay(true)?;
        stream.set_nonblocking(true)?;
        Ok(TcpLink {
            stream,
            staging: vec![0u8; TCP_STAGING_BYTES].into_boxed_slice(),
            start: 0,
            end: 0,
            latency: false,
        })
    }

    /// One non-blocking read into `into`, after a look with `poll` unless in latency mode:
    /// `Ok(None)` when nothing is there.
    fn read_some(
        stream: &mut TcpStream,
        into: &mut [u8],
        latency: bool,
    ) -> io::Result<Option<usize>> {
        if !latency && !ready(stream, libc::POLLIN)? {
            return Ok(None);
        }
        match would_block(stream.read(into))? {
            Some(0) => Err(io::ErrorKind::UnexpectedEof.into()),
            other => Ok(other),
        }
    }
}

impl RawLink for TcpLink {
    fn set_latency_mode(&mut self, latency: bool) {
        self.latency = latency;
    }

    fn send_message(&mut self, message: &[u8]) -> io::Result<()> {
        let mut written = 0;
        let latency = self.latency;
        while written < message.len() {
            let stream = &mut self.stream;
            written += spin("writing to the tcp stream", || {
                if !latency && !ready(stream, libc::POLLOUT)? {
                    return Ok(None);
                }
                would_block(stream.write(&message[written..]))
            })?;
        }
        Ok(())
    }

    fn receive_message(&mut self, buffer: &mut [u8]) -> io::Result<()> {
        // Bytes read ahead with an earlier message come first.
        let staged = (self.end - self.start).min(buffer.len());
        buffer[..staged].copy_from_slice(&self.staging[self.start..self.start + staged]);
        self.start += staged;
        let mut filled = staged;
        let latency = self.latency;
        while filled < buffer.len() {
            let stream = &mut self.stream;
            if buffer.len() - filled >= TCP_STAGING_BYTES {
                // A large message: straight into its buffer, as much as has arrived.
                filled += spin("reading the tcp stream", || {
                    Self::read_some(stream, &mut buffer[filled..], latency)
                })?;
                continue;
            }
            // A small one: one read takes what is there, the next messages too.
            let staging = &mut self.staging;
            let count = spin("reading the tcp stream", || {
                Self::read_some(stream, staging, latency)
            })?;
            let take = count.min(buffer.len() - filled);
            buffer[filled..filled + take].copy_from_slice(&self.staging[..take]);
            filled += take;
            self.start = take;
            self.end = count;
        }
        Ok(())
    }

    fn send_window_ack(&mut self) -> io::Result<()> {
        self.send_message(&[0])
    }

    fn wait_window_ack(&mut self) -> io::Result<()> {
        self.receive_message(&mut [0])
    }

    /// Both directions at once on the one stream: write what the socket takes, read what
    /// has arrived, until `count` messages went each way (the stream of `count` messages
    /// is `count` back-to-back copies; the receive side overwrites `receive` per message).
    fn exchange(&mut self, message: &[u8], receive: &mut [u8], count: u64) -> io::Result<()> {
        let length = message.len();
        let total = length as u64 * count;
        // Bytes already staged belong to this stream of messages.
        let staged = ((self.end - self.start) as u64).min(total);
        self.start += staged as usize;
        let (mut written, mut read) = (0u64, staged);
        let mut spins = 0u32;
        let mut stalled_since: Option<Instant> = None;
        while written < total || read < total {
            let mut progress = false;
            if written < total && ready(&self.stream, libc::POLLOUT)? {
                let offset = (written % length as u64) as usize;
                if let Some(count) = would_block(self.stream.write(&message[offset..]))? {
                    written += count as u64;
                    progress = true;
                }
            }
            if read < total && ready(&self.stream, libc::POLLIN)? {
                let offset = (read % length as u64) as usize;
                match would_block(self.stream.read(&mut receive[offset..]))? {
                    Some(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                    Some(count) => {
                        read += count as u64;
                        progress = true;
                    }
                    None => {}
                }
            }
            if progress {
                spins = 0;
                stalled_since = None;
                continue;
            }
            std::hint::spin_loop();
            spins += 1;
            if spins == SPINS_PER_CLOCK_READ {
                spins = 0;
                let since = *stalled_since.get_or_insert_with(Instant::now);
                if since.elapsed() > STALL_TIMEOUT {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no progress in bibw (a dead peer?)",
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn tcp_messages_come_out_whole_through_the_staging_buffer_and_around_it() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let mut writer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let mut link = TcpLink::from_stream(listener.accept().unwrap().0).unwrap();
        let sizes = [
            8usize,
            1000,
            3,
            TCP_STAGING_BYTES + 17,
            8,
            5,
            TCP_STAGING_BYTES - 1,
        ];
        let messages: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(seed, &size)| (0..size).map(|i| (i * 7 + seed) as u8).collect())
            .collect();
        let all: Vec<u8> = messages.concat();
        let writing = std::thread::spawn(move || writer.write_all(&all).map(|()| writer));
        for (index, message) in messages.iter().enumerate() {
            link.set_latency_mode(index % 2 == 0);
            let mut buffer = vec![0u8; message.len()];
            link.receive_message(&mut buffer).unwrap();
            assert!(buffer == *message, "message {index}");
        }
        let mut writer = writing.join().unwrap().unwrap();
        // Three messages in one write: the first read stages all of them, so the other two
        // come out after the stream has ended.
        writer.write_all(&[1, 1, 2, 2, 3, 3]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        drop(writer);
        for expected in [[1u8, 1], [2, 2], [3, 3]] {
            let mut buffer = [0u8; 2];
            link.receive_message(&mut buffer).unwrap();
            assert_eq!(buffer, expected);
        }
        let mut buffer = [0u8; 2];
        let error = link.receive_message(&mut buffer).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
    }
}
