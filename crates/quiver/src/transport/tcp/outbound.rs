//! The sending side of a tcp edge ([`TcpOut`]): each message is one
//! [`quiver_wire::stream`] frame, written as far as the socket takes it; the rest waits in
//! the edge's queue ([`NetOut`]) and is written on by progress. A blocking send that must
//! wait lets the endpoint receive meanwhile ([`Meanwhile`]) and sleeps in `poll` on the
//! stream (writable) and the endpoint's readable streams.

use std::io::Write;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use quiver_wire::stream::{StreamHeader, HEADER_LEN};

use super::rma::TcpRma;
use super::writer::{tcp_write, TCP_COALESCE_MAX_BYTES};
use crate::addr::Addr;
use crate::config::TransportKind;
use crate::error::{Error, Result};
use crate::slab::Key;
use crate::transport::edge_context::EdgeContext;
use crate::transport::failure::{io_failure, Failure};
use crate::transport::liveness::PeerProcess;
use crate::transport::meanwhile::Meanwhile;
use crate::transport::net_edge::{stopped_for, NetOut, NetQueued};
use crate::transport::requests::SendState;
use crate::transport::wait::{wait_fds, Wait, SLEEP_SLICE};

/// The sending side of a tcp edge (module docs).
#[derive(Debug)]
pub(crate) struct TcpOut {
    pub(crate) net: NetOut,
    stream: TcpStream,
    /// Scratch descriptors for a waiting send's `poll`.
    pollfds: Vec<libc::pollfd>,
    /// One-sided operations to the peer (their own stream, opened at the first).
    pub(crate) rma: TcpRma,
}

impl TcpOut {
    /// The edge to `peer` over `stream` (non-blocking); `process`: the peer's, when it runs
    /// on this node.
    pub(crate) fn new(peer: Addr, stream: TcpStream, process: Option<PeerProcess>) -> TcpOut {
        TcpOut {
            net: NetOut::new(peer, TransportKind::Tcp.name(), process),
            stream,
            pollfds: Vec::new(),
            rma: TcpRma::default(),
        }
    }

    /// Writes what the socket takes of `data`'s frame from `written` on; true when all of
    /// it is written.
    fn write(&mut self, data: &[u8], written: &mut usize) -> std::result::Result<bool, Failure> {
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
        while !self.net.queue.is_empty() {
            self.progress(&mut endpoint.context())?;
            if self.net.queue.is_empty() {
                break;
            }
            self.wait(&mut wait, "flushing earlier sends", endpoint)?;
        }
        loop {
            match self.write(data, &mut written) {
                Ok(true) => return Ok(()),
                Ok(false) => self.wait(&mut wait, "waiting for the peer to take data", endpoint)?,
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
                self.net.queue_rest(data, written, false, cx.requests);
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
        loop {
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
                return Ok(());
            }
            self.net.complete_front(cx.requests);
        }
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

    /// One step of waiting for the socket to take more. Meanwhile the endpoint receives
    /// what it can (the peer may be blocked sending to us).
    fn wait(
        &mut self,
        wait: &mut Wait,
        what: &'static str,
        endpoint: &mut dyn Meanwhile,
    ) -> Result<()> {
        // Acknowledgements (and credit) of datagram connections arrive through the
        // engine: take them every round.
        endpoint.poll_engine();
        endpoint.receive()?;
        self.pollfds.clear();
        self.pollfds.push(libc::pollfd {
            fd: self.stream.as_raw_fd(),
            events: libc::POLLOUT,
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

    /// Closes the edge (the endpoint closes), best effort: the queued sends, the close
    /// header, then the end of the stream.
    pub(crate) fn close(&mut self) {
        if self.net.failure.is_some() {
            return;
        }
        let stream = &mut self.stream;
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
        for q in self.net.queue.drain(..) {
            let header = StreamHeader::message(q.data.len() as u64).emit();
            let mut written = q.written;
            if !matches!(tcp_write(stream, &header, &q.data, &mut written), Ok(true)) {
                break;
            }
        }
        let _ = stream.write_all(&StreamHeader::close().emit());
        let _ = stream.shutdown(std::net::Shutdown::Write);
    }
}
