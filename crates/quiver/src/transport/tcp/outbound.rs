//! The sending side of a tcp edge ([`TcpOut`]): each message is one
//! [`quiver_wire::stream`] frame, written as far as the socket takes it; the rest waits in
//! the edge's queue ([`NetOut`]) and is written on by progress. A blocking send that must
//! wait lets the endpoint receive meanwhile ([`Meanwhile`]) and sleeps in `poll` on the
//! stream (writable) and the endpoint's readable streams.

use std::io::Write;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quiver_transport::sys;
use quiver_wire::stream::{StreamHeader, HEADER_LEN};

use super::rma::request_stream;
use super::stats::OpenStream;
use super::writer::{tcp_write, TCP_COALESCE_MAX_BYTES};
use crate::addr::Addr;
use crate::config::TransportKind;
use crate::error::{Error, Result};
use crate::slab::Key;
use crate::transport::edge_context::EdgeContext;
use crate::transport::failure::{io_failure, Failure};
use crate::transport::liveness::PeerProcess;
use crate::transport::meanwhile::{DeadlockWatch, Meanwhile};
use crate::transport::net_edge::{stopped_for, NetOut, NetQueued};
use crate::transport::requests::SendState;
use crate::transport::rma_stream::StreamRma;
use crate::transport::wait::{wait_fds, Wait, SLEEP_SLICE};
use crate::transport::wire_tag::WireTag;

/// The sending side of a tcp edge (module docs).
#[derive(Debug)]
pub(crate) struct TcpOut {
    pub(crate) net: NetOut,
    stream: TcpStream,
    /// Scratch descriptors for a waiting send's `poll`.
    pollfds: Vec<libc::pollfd>,
    /// The tag of the sends made now ([`TcpOut::set_tag`]; 0 outside a tagged send).
    tag: WireTag,
    /// The tag the receiver applies to the next message: the last tag frame's.
    wire_tag: WireTag,
    /// A tag frame not yet wholly written: its bytes from `HEADER_LEN - tag_left` on go
    /// before any byte of the next message.
    tag_frame: [u8; HEADER_LEN],
    tag_left: usize,
    /// One-sided operations to the peer (their own stream, opened at the first).
    pub(crate) rma: StreamRma,
    /// The socket refused the rest of the queue's front at the last progress: the next
    /// one writes only once `poll` says there is room ([`TcpOut::still_full`]).
    full: bool,
    /// The stream's place in the tcp counters (shared with the stream's inbound edge),
    /// held for its drop.
    _open: Arc<OpenStream>,
}

impl TcpOut {
    /// The edge to `peer` over `stream` (non-blocking); `process`: the peer's, when it runs
    /// on this node.
    pub(crate) fn new(
        peer: Addr,
        stream: TcpStream,
        process: Option<PeerProcess>,
        open: Arc<OpenStream>,
    ) -> TcpOut {
        TcpOut {
            net: NetOut::new(peer, TransportKind::Tcp.name(), process),
            stream,
            pollfds: Vec::new(),
            tag: WireTag::default(),
            wire_tag: WireTag::default(),
            tag_frame: [0; HEADER_LEN],
            tag_left: 0,
            rma: request_stream(),
            full: false,
            _open: open,
        }
    }

    /// Sets the tag of the sends that follow (the endpoint sets it around a tagged send
    /// and back to 0 after it).
    #[inline]
    pub(crate) fn set_tag(&mut self, tag: WireTag) {
        self.tag = tag;
    }

    /// Whether a message with `tag` may start now: true once the tag frame it needs (if
    /// its tag differs from the last one announced) is wholly written.
    #[inline]
    fn tag_ready(&mut self, tag: WireTag) -> std::io::Result<bool> {
        if self.tag_left == 0 && tag == self.wire_tag {
            return Ok(true);
        }
        self.write_tag_frame(tag)
    }

    /// [`TcpOut::tag_ready`] with a tag frame to write.
    #[cold]
    #[inline(never)]
    fn write_tag_frame(&mut self, tag: WireTag) -> std::io::Result<bool> {
        loop {
            if self.tag_left > 0 {
                match self
                    .stream
                    .write(&self.tag_frame[HEADER_LEN - self.tag_left..])
                {
                    Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                    Ok(n) => self.tag_left -= n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
                continue;
            }
            if tag == self.wire_tag {
                return Ok(true);
            }
            let header = if tag.am {
                StreamHeader::am(tag.value)
            } else {
                StreamHeader::tag(tag.value)
            };
            self.tag_frame = header.emit();
            self.tag_left = HEADER_LEN;
            self.wire_tag = tag;
        }
    }

    /// Writes what the socket takes of `data`'s frame from `written` on; true when all of
    /// it is written.
    fn write(&mut self, data: &[u8], written: &mut usize) -> std::result::Result<bool, Failure> {
        if *written == 0
            && !self
                .tag_ready(self.tag)
                .map_err(|e| io_failure(TransportKind::Tcp, &e))?
        {
            return Ok(false);
        }
        let header = StreamHeader::message(data.len() as u64).emit();
        tcp_write(&mut self.stream, &header, data, written)
            .map_err(|e| io_failure(TransportKind::Tcp, &e))
    }

    /// The latency path of a blocking send: nothing queued ahead, and one `send` of the
    /// whole (small) frame usually does it. `Ok(true)`: sent. `Ok(false)`: the rest, from
    /// `written` on, is for [`TcpOut::finish_send`].
    #[inline]
    pub(crate) fn start_send(
        &mut self,
        data: &[u8],
        written: &mut usize,
        cx: &mut EdgeContext<'_>,
    ) -> Result<bool> {
        if !self.net.queue.is_empty() || HEADER_LEN + data.len() > TCP_COALESCE_MAX_BYTES {
            return Ok(false);
        }
        match self.write(data, written) {
            Ok(done) => Ok(done),
            Err(failure) => Err(self.fail(failure, "while sending", cx)),
        }
    }

    /// Blocking send: returns once the socket took the whole frame (from `written` on).
    /// Earlier queued sends go first. The endpoint receives meanwhile.
    pub(crate) fn finish_send(
        &mut self,
        data: &[u8],
        mut written: usize,
        endpoint: &mut dyn Meanwhile,
    ) -> Result<()> {
        let mut wait = Wait::new(endpoint.context().config);
        let mut watch = DeadlockWatch::default();
        while !self.net.queue.is_empty() {
            self.progress(&mut endpoint.context())?;
            if self.net.queue.is_empty() {
                break;
            }
            let mark = self.net.queue.front().map_or(0, |q| q.written) as u64
                + ((self.net.queue.len() as u64) << 48);
            self.wait_writable(
                &mut wait,
                "flushing earlier sends",
                endpoint,
                (&mut watch, mark),
            )?;
        }
        loop {
            match self.write(data, &mut written) {
                Ok(true) => return Ok(()),
                Ok(false) => self.wait_writable(
                    &mut wait,
                    "waiting for the peer to take data",
                    endpoint,
                    (&mut watch, written as u64),
                )?,
                Err(f) => return Err(self.fail(f, "while sending", &mut endpoint.context())),
            }
        }
    }

    /// Non-blocking send: the message is taken whole or not at all (a rest the socket did
    /// not take is kept in an internal copy and sent by progress).
    pub(crate) fn try_send(&mut self, data: &[u8], cx: &mut EdgeContext<'_>) -> Result<()> {
        if !self.net.queue.is_empty() {
            self.progress(cx)?;
            if !self.net.queue.is_empty() {
                return Err(Error::WouldBlock);
            }
        }
        let mut written = 0;
        match self.write(data, &mut written) {
            Ok(true) => Ok(()),
            Ok(false) if written == 0 => Err(Error::WouldBlock),
            Ok(false) => {
                // Part of the message is on its way: the rest must follow.
                self.net
                    .queue_rest(data, (written, false, self.tag), cx.requests);
                Ok(())
            }
            Err(f) => Err(self.fail(f, "while sending", cx)),
        }
    }

    /// Posted send: queued, and written as far as the socket takes it now.
    pub(crate) fn post_send(&mut self, data: Vec<u8>, cx: &mut EdgeContext<'_>) -> Key {
        let key = cx.requests.sends.insert(SendState::Pending);
        self.net.queue.push_back(NetQueued {
            key: Some(key),
            tag: self.tag,
            data,
            written: 0,
            started: false,
            in_place: false,
        });
        cx.requests.pending_sends += 1;
        // Failures are recorded in the request.
        let _ = self.progress(cx);
        key
    }

    /// Pushes the queue as far as the socket takes it now.
    pub(crate) fn progress(&mut self, cx: &mut EdgeContext<'_>) -> Result<()> {
        self.net.check("while sending")?;
        match self.still_full() {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(failure) => return Err(self.fail(failure, "while sending", cx)),
        }
        loop {
            let Some(q) = self.net.queue.front() else {
                return Ok(());
            };
            if q.written == 0 {
                match self.tag_ready(q.tag) {
                    Ok(true) => {}
                    Ok(false) => return Ok(()),
                    Err(e) => {
                        let failure = io_failure(TransportKind::Tcp, &e);
                        return Err(self.fail(failure, "while sending", cx));
                    }
                }
            }
            let Some(q) = self.net.queue.front_mut() else {
                return Ok(());
            };
            let header = StreamHeader::message(q.data.len() as u64).emit();
            let complete = match tcp_write(&mut self.stream, &header, &q.data, &mut q.written) {
                Ok(done) => done,
                Err(e) => {
                    let failure = io_failure(TransportKind::Tcp, &e);
                    return Err(self.fail(failure, "while sending", cx));
                }
            };
            if !complete {
                self.full = true;
                return Ok(());
            }
            self.net.complete_front(cx.requests);
        }
    }

    /// Whether the socket that refused the last progress's write is still full: progress
    /// (called at every turn of a waiting loop) then asks `poll`, which takes no lock,
    /// instead of retrying the write (see [`TcpOut::wait_writable`]). A full socket whose
    /// peer shut its side of the stream never drains: [`Failure::Closed`].
    fn still_full(&mut self) -> std::result::Result<bool, Failure> {
        if self.full {
            let (writable, shut) = self.room();
            if !writable {
                return if shut { Err(Failure::Closed) } else { Ok(true) };
            }
        }
        self.full = false;
        Ok(false)
    }

    /// Marks the edge failed, fails its queued requests, returns the error.
    pub(crate) fn fail(
        &mut self,
        failure: Failure,
        during: &'static str,
        cx: &mut EdgeContext<'_>,
    ) -> Error {
        if self.net.failure.is_none() {
            cx.inbox.tcp_crossings().release_connect(self.net.peer);
        }
        self.net.fail(failure, during, cx.requests, cx.addr)
    }

    /// Waits (as [`TcpOut::wait`] does, receiving meanwhile) until the socket has room
    /// again. A write the full socket refuses costs a system call that takes the socket's
    /// lock, which the acknowledgements that would free room need too; `poll` takes no
    /// lock, and says the socket is writable only once a good part of its buffer is free
    /// (the kernel's `sk_stream_min_wspace`), so the next write hands over a large piece
    /// (decision 0080).
    fn wait_writable(
        &mut self,
        wait: &mut Wait,
        what: &'static str,
        endpoint: &mut dyn Meanwhile,
        (watch, mark): (&mut DeadlockWatch, u64),
    ) -> Result<()> {
        loop {
            self.wait(wait, what, endpoint, (&mut *watch, mark))?;
            match self.room() {
                (true, _) => return Ok(()),
                // The peer closed the connection (both directions): it reads no more.
                (false, true) => {
                    return Err(self.fail(Failure::Closed, what, &mut endpoint.context()))
                }
                (false, false) => {}
            }
        }
    }

    /// Whether the socket takes more now (or has an error the next write reports).
    #[cfg(test)]
    fn writable(&self) -> bool {
        self.room().0
    }

    /// Whether the socket takes more now (or has an error the next write reports), and
    /// whether the peer shut its side of the stream (its endpoint closed the connection,
    /// which ends both directions, or failed it: it reads nothing more).
    fn room(&self) -> (bool, bool) {
        let mut fds = [libc::pollfd {
            fd: self.stream.as_raw_fd(),
            events: libc::POLLOUT | libc::POLLRDHUP,
            revents: 0,
        }];
        match sys::poll(&mut fds, Some(Duration::ZERO)) {
            Ok(_) => (
                fds[0].revents & !libc::POLLRDHUP != 0,
                fds[0].revents & libc::POLLRDHUP != 0,
            ),
            // A failed poll says nothing: let the write find out.
            Err(_) => (true, false),
        }
    }

    /// One step of waiting for the socket to take more. Meanwhile the endpoint receives
    /// what it can (the peer may be blocked sending to us). `mark` changes whenever the
    /// send progresses: stuck while the peer's next message to us is beyond the read-ahead
    /// bound ([`DeadlockWatch`]), the connection fails with [`Error::SendDeadlock`].
    fn wait(
        &mut self,
        wait: &mut Wait,
        what: &'static str,
        endpoint: &mut dyn Meanwhile,
        (watch, mark): (&mut DeadlockWatch, u64),
    ) -> Result<()> {
        // Acknowledgements (and credit) of datagram connections arrive through the
        // engine: take them every round.
        endpoint.poll_engine();
        endpoint.receive()?;
        let full = endpoint.read_ahead_full(self.net.peer);
        let (detect, me) = {
            let cx = endpoint.context();
            (cx.config.detect, cx.addr)
        };
        if watch.stuck(full, mark, detect, (me, self.net.peer)) {
            let peer = self.net.peer;
            tracing::warn!(target: "quiver::endpoint", peer = %peer, transport = "tcp", "send-send deadlock: the peer is blocked sending to this endpoint beyond the read-ahead bound while this endpoint is blocked sending to it");
            let err = self.fail(Failure::SendDeadlock("tcp"), what, &mut endpoint.context());
            // The peer reads the end of the stream where our message stopped (an error for
            // its receive of it, not a wait); its own message to us is still read.
            let _ = self.stream.shutdown(std::net::Shutdown::Write);
            return Err(err);
        }
        self.pollfds.clear();
        self.pollfds.push(libc::pollfd {
            fd: self.stream.as_raw_fd(),
            // Woken too when the peer shuts its side (closed: the socket never drains).
            events: libc::POLLOUT | libc::POLLRDHUP,
            revents: 0,
        });
        endpoint.wake_fds(&mut self.pollfds);
        let mut cx = endpoint.context();
        let detect = cx.config.detect;
        let process = &mut self.net.process;
        let detection = &mut *cx.detection;
        let mut stopped = None;
        let waited = wait_fds(
            &mut self.pollfds,
            || SLEEP_SLICE,
            wait,
            what,
            || {
                stopped = stopped_for(process, detect, detection);
                stopped.is_none()
            },
        );
        if let Some(ms) = stopped {
            return Err(self.fail(Failure::Stopped("tcp", ms), what, &mut cx));
        }
        waited
    }

    /// The endpoint's liveness look: a peer process stopped while sends are queued fails
    /// them.
    pub(crate) fn check_liveness(
        &mut self,
        detect: Duration,
        now: Instant,
        cx: &mut EdgeContext<'_>,
    ) {
        if let Some(ms) = self.net.stopped_with_queue(detect, now) {
            self.fail(Failure::Stopped("tcp", ms), "while sending", cx);
        }
    }

    /// The stream, when a sleeping call should wake up for it (sends queued).
    pub(crate) fn wake_fd(&self) -> Option<libc::pollfd> {
        (self.net.failure.is_none() && !self.net.queue.is_empty()).then(|| libc::pollfd {
            fd: self.stream.as_raw_fd(),
            events: libc::POLLOUT,
            revents: 0,
        })
    }

    /// Whether this edge writes the stream whose counters' handle is `open` (the two edges
    /// of one stream share it).
    pub(crate) fn same_stream(&self, open: &Arc<OpenStream>) -> bool {
        Arc::ptr_eq(&self._open, open)
    }

    /// Closes the edge (the endpoint closes), best effort: the queued sends, the close
    /// header, then the end of the stream.
    pub(crate) fn close(&mut self) {
        if self.net.failure.is_some() {
            return;
        }
        let _ = self.stream.set_nonblocking(false);
        let _ = self
            .stream
            .set_write_timeout(Some(Duration::from_millis(100)));
        let queue = std::mem::take(&mut self.net.queue);
        for q in queue {
            if q.written == 0 && !matches!(self.tag_ready(q.tag), Ok(true)) {
                break;
            }
            let stream = &mut self.stream;
            let header = StreamHeader::message(q.data.len() as u64).emit();
            let mut written = q.written;
            if !matches!(tcp_write(stream, &header, &q.data, &mut written), Ok(true)) {
                break;
            }
        }
        // A tag frame begun goes out whole before the close header.
        if self.tag_left > 0 && !matches!(self.tag_ready(self.wire_tag), Ok(true)) {
            return;
        }
        let _ = self.stream.write_all(&StreamHeader::close().emit());
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
    }
}

#[cfg(test)]
mod tests {
    use std::io::{self, Read};
    use std::sync::Arc;

    use super::super::stats::TcpCounts;
    use super::super::writer::tests::pair;
    use super::*;

    /// A full socket is not writable (a blocking send then waits in `poll` instead of
    /// retrying its write); once the peer has read, it is again.
    #[test]
    fn writable_only_with_room() {
        let (client, mut server) = pair();
        client.set_nonblocking(true).unwrap();
        let counts = Arc::new(TcpCounts::default());
        let mut edge = TcpOut::new(Addr::new(1, 0), client, None, counts.connected());
        assert!(edge.writable(), "an empty socket has room");
        let filler = vec![0x5Au8; 256 << 10];
        let mut sent = 0usize;
        loop {
            match edge.stream.write(&filler) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("filling: {e}"),
            }
        }
        assert!(!edge.writable(), "full after {sent} bytes");
        let mut chunk = vec![0u8; 1 << 20];
        let mut drained = 0usize;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !edge.writable() {
            assert!(Instant::now() < deadline, "still full after the peer read");
            if drained < sent {
                drained += server.read(&mut chunk).unwrap();
            }
        }
        drop(edge);
        assert_eq!(counts.snapshot().connections, 0);
    }
}
