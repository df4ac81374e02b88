//! Writing [`quiver_wire::stream`] frames to a tcp stream: a small frame leaves as one
//! contiguous `send`, a larger one as a gathered write of header and payload (the payload
//! never copied), resumed from where the socket stopped taking it.

use std::io::{self, IoSlice, Write};
use std::net::TcpStream;

use quiver_wire::stream::HEADER_LEN;

/// Frames (header included) up to this many bytes are copied into one buffer and written
/// with one `send` instead of a gathered `writev` of header and payload: `writev` (iovec
/// import, the vfs write path) costs more than the copy (in-launch quiver/raw-tcp latency,
/// 8 B: 1.06-1.07 -> 1.02-1.04 at 512; 1 KiB: 1.02-1.04 -> 1.00-1.02 at 2048).
/// Larger payloads are still gathered in place, never copied.
pub(crate) const TCP_COALESCE_MAX_BYTES: usize = 2048;

/// Writes what the socket takes of header + data; true when all of it is written.
pub(crate) fn tcp_write(
    stream: &mut TcpStream,
    header: &[u8; HEADER_LEN],
    data: &[u8],
    written: &mut usize,
) -> io::Result<bool> {
    let total = HEADER_LEN + data.len();
    while *written < total {
        let result = if *written == 0 && total <= TCP_COALESCE_MAX_BYTES {
            // A small frame leaves as one contiguous `send`: a gathered write costs the
            // kernel more than copying a few bytes here (see TCP_COALESCE_MAX_BYTES). The
            // buffer is no larger than the frame needs (it is zeroed first).
            if total <= 64 {
                send_copied::<64>(stream, header, data)
            } else if total <= 512 {
                send_copied::<512>(stream, header, data)
            } else {
                send_copied::<TCP_COALESCE_MAX_BYTES>(stream, header, data)
            }
        } else if *written < HEADER_LEN {
            stream.write_vectored(&[IoSlice::new(&header[*written..]), IoSlice::new(data)])
        } else {
            stream.write(&data[*written - HEADER_LEN..])
        };
        match result {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => *written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// One `send` of `header` and `data` copied into a buffer of `N` bytes (`N` at least
/// their length); returns what the socket took.
fn send_copied<const N: usize>(
    stream: &mut TcpStream,
    header: &[u8; HEADER_LEN],
    data: &[u8],
) -> io::Result<usize> {
    let total = HEADER_LEN + data.len();
    let mut frame = [0u8; N];
    frame[..HEADER_LEN].copy_from_slice(header);
    frame[HEADER_LEN..total].copy_from_slice(data);
    stream.write(&frame[..total])
}

#[cfg(test)]
pub(crate) mod tests {
    use std::io::Read;
    use std::net::{Ipv4Addr, TcpListener};

    use quiver_wire::stream::StreamHeader;

    use super::*;

    /// Two ends of a tcp connection over loopback.
    pub(crate) fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    /// Frames on both sides of each copy-buffer size arrive byte for byte, header first.
    #[test]
    fn small_and_gathered_frames_arrive_whole() {
        let (mut client, mut server) = pair();
        let sizes = [
            0,
            1,
            8,
            64 - HEADER_LEN,
            64 - HEADER_LEN + 1,
            512 - HEADER_LEN,
            512 - HEADER_LEN + 1,
            TCP_COALESCE_MAX_BYTES - HEADER_LEN - 1,
            TCP_COALESCE_MAX_BYTES - HEADER_LEN,
            TCP_COALESCE_MAX_BYTES - HEADER_LEN + 1,
            70_000,
        ];
        let mut expected = Vec::new();
        for (n, &size) in sizes.iter().enumerate() {
            let data: Vec<u8> = (0..size).map(|i| (i + n) as u8).collect();
            let header = StreamHeader::message(size as u64).emit();
            let mut written = 0;
            assert!(tcp_write(&mut client, &header, &data, &mut written).unwrap());
            assert_eq!(written, HEADER_LEN + size);
            expected.extend_from_slice(&header);
            expected.extend_from_slice(&data);
        }
        drop(client);
        let mut got = Vec::new();
        server.read_to_end(&mut got).unwrap();
        assert_eq!(got, expected);
    }

    /// A small frame the full socket does not take whole is finished by later calls from
    /// where the first one stopped (the gathered path, at an offset).
    #[test]
    fn small_frame_resumes_after_a_partial_write() {
        let (mut client, mut server) = pair();
        client.set_nonblocking(true).unwrap();
        server.set_nonblocking(true).unwrap();
        let filler = vec![0xEEu8; 64 << 10];
        let data: Vec<u8> = (0..200u32).map(|i| i as u8).collect();
        let header = StreamHeader::message(data.len() as u64).emit();
        let mut sent = Vec::new();
        // Fill the socket, then push the small frame until it is taken whole.
        loop {
            match client.write(&filler) {
                Ok(n) => sent.extend_from_slice(&filler[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("filling: {e}"),
            }
        }
        let mut written = 0;
        let mut received = Vec::new();
        let mut chunk = vec![0u8; 4096];
        while !tcp_write(&mut client, &header, &data, &mut written).unwrap() {
            // Take a little, so that the next write is likely partial.
            if let Ok(n) = server.read(&mut chunk) {
                received.extend_from_slice(&chunk[..n]);
            }
        }
        sent.extend_from_slice(&header);
        sent.extend_from_slice(&data);
        drop(client);
        server.set_nonblocking(false).unwrap();
        server.read_to_end(&mut received).unwrap();
        assert_eq!(received.len(), sent.len());
        assert!(received == sent, "the stream's bytes differ");
    }
}
