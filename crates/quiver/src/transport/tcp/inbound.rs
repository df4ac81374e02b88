//! The receiving side of a tcp edge ([`TcpIn`]): the stream's reader plus the bookkeeping
//! every network edge has ([`NetIn`]). A receive takes the next message if it is whole
//! (never waiting: a blocking receive waits outside, making progress on sends meanwhile);
//! a large message is read as it arrives, over as many calls as it takes, straight into
//! the buffer that keeps it.

use std::io;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use quiver_wire::stream::{StreamHeader, StreamKind, HEADER_LEN};

use super::reader::{
    bind_posted, deliver_held, held_buffer, read_held, read_into, tcp_read_detail, Partial,
    PartialInto, TcpReader,
};
use super::stats::OpenStream;
use crate::addr::Addr;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::pool::Pool;
use crate::transport::dest::Dest;
use crate::transport::inbound_state::InboundState;
use crate::transport::liveness::PeerProcess;
use crate::transport::net_edge::{NetIn, NetInEdge};
use crate::transport::requests::{RecvCompletion, Requests};
use crate::transport::wire_tag::WireTag;

/// What a tag or am frame announces for the messages that follow it (`None` for other
/// frames).
#[inline]
fn announced(header: &StreamHeader) -> Option<WireTag> {
    match header.kind {
        StreamKind::Tag => Some(WireTag::tag(header.length)),
        StreamKind::Am => Some(WireTag {
            value: header.length,
            am: true,
        }),
        StreamKind::Message | StreamKind::Close => None,
    }
}

/// The receiving side of a tcp edge (module docs).
#[derive(Debug)]
pub(crate) struct TcpIn {
    pub(crate) net: NetIn,
    pub(crate) reader: TcpReader,
    /// The stream's place in the tcp counters (shared with the stream's outbound edge).
    pub(crate) open: Arc<OpenStream>,
}

impl TcpIn {
    /// The edge a listener accepted: `stream` (non-blocking) from `peer`, whose process is
    /// `pid` when it runs on this node.
    pub(crate) fn accepted(
        peer: Addr,
        stream: TcpStream,
        pid: Option<libc::pid_t>,
        staging_bytes: usize,
        open: Arc<OpenStream>,
    ) -> TcpIn {
        TcpIn {
            net: NetIn::accepted(peer, "tcp", pid.and_then(PeerProcess::open)),
            reader: TcpReader::new(stream, staging_bytes),
            open,
        }
    }

    /// The reverse edge of a stream this endpoint opened to `peer`.
    pub(crate) fn reverse(
        peer: Addr,
        stream: TcpStream,
        pid: Option<libc::pid_t>,
        staging_bytes: usize,
        open: Arc<OpenStream>,
    ) -> TcpIn {
        TcpIn {
            net: NetIn::reverse(peer, "tcp", pid.and_then(PeerProcess::open)),
            reader: TcpReader::new(stream, staging_bytes),
            open,
        }
    }

    /// Whether the edge still delivers (or has an error to report); a reverse edge only
    /// once the peer has sent on it.
    pub(crate) fn is_live(&mut self) -> bool {
        self.net.state != InboundState::Done && !self.silent()
    }

    /// Takes the next message into `dest` if it is whole; never waits.
    ///
    /// A message larger than the staging buffer is read as it arrives, over as many calls
    /// as it takes, and is delivered only once whole. Its bytes go where they last:
    /// - a blocking `recv`'s buffer (`PartialInto::Caller`; `committed` is set, and that
    ///   `recv` then looks at this edge only until the message is whole; if it ends early,
    ///   [`TcpIn::uncommit`] keeps the bytes);
    /// - a posted receive's buffer, moved into the edge (`PartialInto::Posted`, driven by
    ///   [`TcpIn::progress_bound`]);
    /// - otherwise (`try_recv`, pooled receives) an internal buffer (`PartialInto::Held`)
    ///   of the message's length, started by a non-blocking receive only while all held
    ///   buffers stay within `max_buffered_bytes` or no other large message is held
    ///   (`others`: the held bytes of the endpoint's other tcp edges, and whether one of
    ///   them holds a large message). A later receive with a lasting buffer takes the
    ///   message over (what arrived is copied once); a pooled receive gets the held buffer
    ///   itself.
    ///
    /// `BufferTooSmall` is checked before anything is consumed, so the message stays.
    // Long function: one loop over the stream's states (read ahead, large message in
    // progress, staged header, socket), each step continuing the loop; split, each piece
    // would need the whole borrow set of the edge and the destination.
    pub(crate) fn take(
        &mut self,
        dest: &mut Dest<'_>,
        wait: bool,
        requests: &mut Requests,
        config: &Config,
        committed: &mut bool,
        others: impl Fn() -> (u64, bool),
    ) -> Result<Option<usize>> {
        let peer = self.net.peer;
        let max_held = config.max_buffered_bytes as u64;
        let TcpIn {
            net, reader: tcp, ..
        } = self;
        tcp.stalled = false;
        // What the peer wrote is still read once it stopped; not after the stream failed.
        let readable = matches!(net.state, InboundState::Open | InboundState::Stopped(_));
        let broken = |e: io::Error, mid: bool| Error::Unreachable {
            peer,
            transport: "tcp",
            detail: tcp_read_detail(&e, mid),
        };
        loop {
            // Whole messages read ahead come first.
            if let Some((_, front)) = tcp.ready.front() {
                dest.fits(front.len() as u64)?;
                let (tag, msg) = tcp.ready.pop_front().expect("looked at just above");
                tcp.held_bytes -= msg.len();
                tcp.delivered_tag = tag;
                return deliver_held(dest, msg, &requests.pool).map(Some);
            }
            // Then the large message in progress.
            if let Some(p) = &mut tcp.partial {
                let len = p.len;
                tcp.delivered_tag = p.tag;
                // An active message is never bound to a posted receive: its handler runs
                // once it is whole, and the receive stays for the next message.
                let am = p.tag.am;
                match &mut p.into {
                    // Its posted receive gets it (progress reads it).
                    PartialInto::Posted(..) => return Ok(None),
                    PartialInto::Caller => {
                        let dst = dest.prepare(len as u64)?;
                        if !readable
                            || !read_into(&mut tcp.stream, dst, &mut p.filled)
                                .map_err(|e| broken(e, true))?
                        {
                            return Ok(None);
                        }
                        tcp.partial = None;
                        *committed = false;
                        return Ok(Some(len));
                    }
                    PartialInto::Held(held) => {
                        dest.fits(len as u64)?;
                        if !readable {
                            return Ok(None);
                        }
                        if read_held(&mut tcp.stream, held, len, &mut p.filled)
                            .map_err(|e| broken(e, true))?
                        {
                            let Some(Partial {
                                into: PartialInto::Held(msg),
                                ..
                            }) = tcp.partial.take()
                            else {
                                unreachable!("matched just above")
                            };
                            tcp.held_bytes -= len;
                            return deliver_held(dest, msg, &requests.pool).map(Some);
                        }
                        // Not whole yet: a receive whose buffer lasts takes it over.
                        let lasting = (!am && matches!(dest, Dest::Posted { .. }))
                            || (wait && matches!(dest, Dest::Slice(_)));
                        if !lasting {
                            return Ok(None);
                        }
                        let Some(Partial {
                            filled,
                            tag,
                            into: PartialInto::Held(held),
                            ..
                        }) = tcp.partial.take()
                        else {
                            unreachable!("matched just above")
                        };
                        dest.prepare(len as u64)?[..filled].copy_from_slice(&held[..filled]);
                        let into =
                            match bind_posted(dest, &mut requests.recvs, &mut requests.bound_recvs)
                            {
                                Some(into) => into,
                                None => {
                                    *committed = true;
                                    PartialInto::Caller
                                }
                            };
                        tcp.held_bytes -= len;
                        requests.pool.give(held);
                        tcp.partial = Some(Partial {
                            len,
                            filled,
                            tag,
                            into,
                        });
                        continue;
                    }
                }
            }
            let avail = tcp.end - tcp.start;
            if avail >= HEADER_LEN {
                let header = StreamHeader::parse(&tcp.buf[tcp.start..tcp.start + HEADER_LEN])
                    .map_err(|e| Error::Corrupt {
                        peer,
                        detail: format!("tcp framing: {e}"),
                    })?;
                if header.kind == StreamKind::Close {
                    tcp.start += HEADER_LEN;
                    net.state = InboundState::Done;
                    net.end.closed = true;
                    return Ok(None);
                }
                if let Some(tag) = announced(&header) {
                    tcp.start += HEADER_LEN;
                    tcp.tag = tag;
                    continue;
                }
                let len = header.length;
                // Before anything is sized by it (the edge ends with the error).
                Error::check_announced(peer, "tcp", len, config.max_message_bytes)?;
                let whole = HEADER_LEN as u64 + len;
                if whole <= avail as u64 {
                    let dst = dest.prepare(len)?;
                    let from = tcp.start + HEADER_LEN;
                    dst.copy_from_slice(&tcp.buf[from..from + len as usize]);
                    tcp.start += whole as usize;
                    tcp.delivered_tag = tcp.tag;
                    return Ok(Some(len as usize));
                }
                if whole > tcp.buf.len() as u64 {
                    // Large: start reading it (see above for where it goes).
                    dest.fits(len)?;
                    let posted = if tcp.tag.am {
                        None
                    } else {
                        bind_posted(dest, &mut requests.recvs, &mut requests.bound_recvs)
                    };
                    let mut into = if let Some(into) = posted {
                        into
                    } else if wait && matches!(dest, Dest::Slice(_)) {
                        *committed = true;
                        PartialInto::Caller
                    } else {
                        let (held_total, others_hold_partial) = others();
                        let within = held_total + len <= max_held;
                        let blocking_pooled = wait && matches!(dest, Dest::Owned(_));
                        if !(within || blocking_pooled || !others_hold_partial) {
                            return Ok(None);
                        }
                        let held = held_buffer(&requests.pool, len, avail - HEADER_LEN)?;
                        tcp.held_bytes += len as usize;
                        PartialInto::Held(held)
                    };
                    let staged = avail - HEADER_LEN;
                    let target = match &mut into {
                        PartialInto::Held(buf) | PartialInto::Posted(_, buf) => &mut buf[..],
                        PartialInto::Caller => dest.prepare(len)?,
                    };
                    target[..staged].copy_from_slice(&tcp.buf[tcp.start + HEADER_LEN..tcp.end]);
                    tcp.start = 0;
                    tcp.end = 0;
                    tcp.partial = Some(Partial {
                        len: len as usize,
                        filled: staged,
                        tag: tcp.tag,
                        into,
                    });
                    continue;
                }
            }
            if !readable {
                return Ok(None);
            }
            match tcp.fill() {
                Ok(true) => continue,
                // Nothing more now, or (a small message) not all here yet: nothing was
                // consumed; a blocking receive waits outside and comes back.
                Ok(false) => return Ok(None),
                Err(e) => return Err(broken(e, avail > 0)),
            }
        }
    }

    /// The latency path of a blocking `recv` on an endpoint whose only inbound edge is this
    /// open, active stream: one look, taking a small message when it is whole, in a few
    /// lines of code instead of the general receive path. `None` when the case does not
    /// apply (a message already read ahead or in progress, one that is large, too long for
    /// `buf`, a close or a bad header): the general path ([`TcpIn::take`]) then looks, and
    /// reports what needs reporting. Where it applies, the outcome is what the general
    /// path would give: the same message, the same error for a failed read (the caller
    /// releases a reverse edge's connect claim, as for any edge that ends).
    ///
    /// Why a separate path: from the read that brings a message in to `recv` returning it,
    /// the general path (several large functions, run once per message between system
    /// calls) took 100-160 ns here against 60-80 ns for this one.
    #[inline]
    pub(crate) fn look_lone(&mut self, buf: &mut [u8]) -> Option<Result<Option<usize>>> {
        if self.net.state != InboundState::Open
            || !self.net.active
            || !self.reader.ready.is_empty()
            || self.reader.partial.is_some()
        {
            return None;
        }
        let tcp = &mut self.reader;
        tcp.stalled = false;
        loop {
            let avail = tcp.end - tcp.start;
            if avail >= HEADER_LEN {
                let header =
                    StreamHeader::parse(&tcp.buf[tcp.start..tcp.start + HEADER_LEN]).ok()?;
                if let Some(tag) = announced(&header) {
                    tcp.start += HEADER_LEN;
                    tcp.tag = tag;
                    continue;
                }
                let len = header.length;
                let whole = HEADER_LEN as u64 + len;
                if header.kind == StreamKind::Close
                    || len > buf.len() as u64
                    || whole > tcp.buf.len() as u64
                {
                    return None;
                }
                if whole <= avail as u64 {
                    let len = len as usize;
                    let from = tcp.start + HEADER_LEN;
                    buf[..len].copy_from_slice(&tcp.buf[from..from + len]);
                    tcp.start = from + len;
                    tcp.delivered_tag = tcp.tag;
                    return Some(Ok(Some(len)));
                }
            }
            match tcp.fill() {
                Ok(true) => {}
                Ok(false) => return Some(Ok(None)),
                Err(e) => {
                    // As the general path reports a failed read of an active edge.
                    let err = Error::Unreachable {
                        peer: self.net.peer,
                        transport: "tcp",
                        detail: tcp_read_detail(&e, avail > 0),
                    };
                    let TcpIn { net, reader, .. } = self;
                    net.state = InboundState::Done;
                    reader.release();
                    return Some(Err(err));
                }
            }
        }
    }

    /// The tag of the message a look would deliver next (the one a `BufferTooSmall` left
    /// in place): the first read ahead, else the large one in progress, else the stream's
    /// current one.
    pub(crate) fn next_tag(&self) -> WireTag {
        let tcp = &self.reader;
        match (tcp.ready.front(), &tcp.partial) {
            (Some((tag, _)), _) => *tag,
            (None, Some(p)) => p.tag,
            (None, None) => tcp.tag,
        }
    }

    /// Whether read-ahead stopped at this open edge's next message (beyond a bound).
    pub(crate) fn read_ahead_stalled(&self) -> bool {
        self.net.state == InboundState::Open && self.reader.stalled
    }

    /// While the endpoint waits for a send, takes what the peer sent into internal buffers:
    /// whole messages, and a large one as it arrives, while all held buffers stay within
    /// `max_held` (`held_total`: what the endpoint's tcp edges hold so far, this one's
    /// included; updated) and this edge's within `per_edge` (`read_ahead_bytes`).
    /// `readable`: the stream had something at the endpoint's poll. Stops (marking the
    /// edge `stalled`) where a bound stops it.
    // Long function: one loop over the stream's states (a held large message, a staged
    // header or tag frame, the socket), as in `take`; split, each piece would need the
    // whole borrow set of the reader and the budget.
    pub(crate) fn read_ahead(
        &mut self,
        readable: bool,
        held_total: &mut u64,
        (max_held, per_edge): (u64, u64),
        pool: &Pool,
    ) {
        if self.net.state != InboundState::Open {
            return;
        }
        let tcp = &mut self.reader;
        if !readable && tcp.end == tcp.start {
            return;
        }
        let failed = loop {
            match &mut tcp.partial {
                None => {}
                Some(Partial {
                    len,
                    filled,
                    into: PartialInto::Held(held),
                    ..
                }) => match read_held(&mut tcp.stream, held, *len, filled) {
                    Ok(true) => {
                        if let Some(Partial {
                            tag,
                            into: PartialInto::Held(msg),
                            ..
                        }) = tcp.partial.take()
                        {
                            tcp.ready.push_back((tag, msg));
                        }
                        continue;
                    }
                    Ok(false) => break None,
                    Err(e) => break Some(tcp_read_detail(&e, true)),
                },
                // Bound to a receive, which reads it.
                Some(_) => break None,
            }
            let avail = tcp.end - tcp.start;
            if avail >= HEADER_LEN {
                // A header that fails its check is left for a receive to report.
                let Ok(header) = StreamHeader::parse(&tcp.buf[tcp.start..tcp.start + HEADER_LEN])
                else {
                    break None;
                };
                if header.kind == StreamKind::Close {
                    break None;
                }
                if let Some(tag) = announced(&header) {
                    tcp.start += HEADER_LEN;
                    tcp.tag = tag;
                    continue;
                }
                let len = header.length;
                let whole = HEADER_LEN as u64 + len;
                let large = whole > tcp.buf.len() as u64;
                if whole <= avail as u64 || large {
                    if *held_total + len > max_held || tcp.held_bytes as u64 + len > per_edge {
                        tcp.stalled = true;
                        break None;
                    }
                    let first = if large {
                        avail - HEADER_LEN
                    } else {
                        len as usize
                    };
                    let Ok(mut msg) = held_buffer(pool, len, first) else {
                        tcp.stalled = true;
                        break None;
                    };
                    *held_total += len;
                    tcp.held_bytes += len as usize;
                    let from = tcp.start + HEADER_LEN;
                    if large {
                        let staged = avail - HEADER_LEN;
                        msg[..staged].copy_from_slice(&tcp.buf[from..tcp.end]);
                        tcp.start = 0;
                        tcp.end = 0;
                        tcp.partial = Some(Partial {
                            len: len as usize,
                            filled: staged,
                            tag: tcp.tag,
                            into: PartialInto::Held(msg),
                        });
                    } else {
                        msg.copy_from_slice(&tcp.buf[from..from + len as usize]);
                        tcp.start += whole as usize;
                        tcp.ready.push_back((tcp.tag, msg));
                    }
                    continue;
                }
            }
            match tcp.fill() {
                Ok(true) => {}
                Ok(false) => break None,
                Err(e) => break Some(tcp_read_detail(&e, avail > 0)),
            }
        };
        if let Some(detail) = failed {
            // Whole messages are still delivered; then the failure is reported.
            if let Some(p) = tcp.partial.take() {
                tcp.held_bytes -= p.len;
            }
            self.net.state = InboundState::Broken(detail);
        }
    }

    /// Reads more of the large message bound to a posted receive; the request's key and
    /// outcome once the message is whole or the edge failed (None: still arriving, or no
    /// receive is bound here).
    pub(crate) fn progress_bound(&mut self) -> Option<(crate::slab::Key, Result<RecvCompletion>)> {
        let peer = self.net.peer;
        let Some(Partial {
            len,
            filled,
            into: PartialInto::Posted(key, buf),
            ..
        }) = &mut self.reader.partial
        else {
            return None;
        };
        let key = *key;
        let outcome = match read_into(&mut self.reader.stream, &mut buf[..*len], filled) {
            Ok(true) => {
                let Some(Partial {
                    len,
                    tag,
                    into: PartialInto::Posted(_, buf),
                    ..
                }) = self.reader.partial.take()
                else {
                    unreachable!("matched just above")
                };
                Ok(RecvCompletion {
                    buf,
                    len,
                    src: peer,
                    tag: tag.value,
                })
            }
            Ok(false) if self.net.state == InboundState::Open => return None,
            Ok(false) => Err(self
                .report_stopped()
                .or_else(|| self.report_broken())
                .unwrap_or_else(|| Error::Unreachable {
                    peer,
                    transport: "tcp",
                    detail: "the connection ended in the middle of a message".into(),
                })),
            Err(e) => {
                self.finish();
                Err(Error::Unreachable {
                    peer,
                    transport: "tcp",
                    detail: tcp_read_detail(&e, true),
                })
            }
        };
        Some((key, outcome))
    }

    /// A blocking `recv` ends early (an error, a timeout) in the middle of a large message
    /// it was reading into `buf` (this edge was committed to it): what arrived is copied
    /// into an internal buffer, so the message stays whole and in place for a later
    /// receive.
    pub(crate) fn uncommit(&mut self, buf: &[u8], pool: &Pool) {
        let Some(p) = &mut self.reader.partial else {
            return;
        };
        if !matches!(p.into, PartialInto::Caller) {
            return;
        }
        match held_buffer(pool, p.len as u64, p.filled) {
            Ok(mut held) => {
                held[..p.filled].copy_from_slice(&buf[..p.filled]);
                p.into = PartialInto::Held(held);
                self.reader.held_bytes += p.len;
            }
            Err(_) => {
                self.reader.partial = None;
                self.net.state = InboundState::Broken(
                    "out of memory keeping a half-received message after a receive ended".into(),
                );
            }
        }
    }

    /// Whether a receive would find something here now (for `arm`).
    pub(crate) fn has_pending(&self) -> bool {
        let tcp = &self.reader;
        self.net.state == InboundState::Open
            && (tcp.end > tcp.start || !tcp.ready.is_empty() || tcp.holds_partial())
    }

    /// Ends the edge because this endpoint closed the connection (`Endpoint::close`): what
    /// it held is dropped; a posted receive bound to a message in progress on it is handed
    /// back by key, for the caller to fail.
    pub(crate) fn close_here(&mut self) -> Option<crate::slab::Key> {
        let bound = match self.reader.partial.take() {
            Some(Partial {
                into: PartialInto::Posted(key, _),
                ..
            }) => Some(key),
            _ => None,
        };
        self.finish();
        bound
    }

    /// The stream, when the edge is open: read-ahead polls it.
    pub(crate) fn open_fd(&self) -> Option<RawFd> {
        (self.net.state == InboundState::Open).then(|| self.reader.stream.as_raw_fd())
    }

    /// The stream, when a sleeping call should wake up for it (open, and read-ahead did not
    /// stall on it).
    pub(crate) fn wake_fd(&self) -> Option<RawFd> {
        (self.net.state == InboundState::Open && !self.reader.stalled)
            .then(|| self.reader.stream.as_raw_fd())
    }

    /// The internal copies this edge holds (bytes), and whether one is a large message
    /// still arriving.
    pub(crate) fn held(&self) -> (u64, bool) {
        (self.reader.held_bytes as u64, self.reader.holds_partial())
    }
}

impl NetInEdge for TcpIn {
    fn net(&self) -> &NetIn {
        &self.net
    }

    /// Whether the edge is a reverse edge the peer has not used (yet): its failure or
    /// close ends it without a report. Notices the stream's first bytes.
    fn silent(&mut self) -> bool {
        if !self.net.active {
            self.net.active = self.reader.received_any;
        }
        !self.net.active
    }

    /// Marks the edge done and drops what it held.
    fn finish(&mut self) {
        self.net.state = InboundState::Done;
        self.reader.release();
    }

    /// A broken edge's error, once (the edge is done afterwards).
    fn mid_message(&self) -> bool {
        self.reader.partial.is_some()
    }

    fn bound_to_posted(&self) -> bool {
        matches!(
            self.reader.partial,
            Some(Partial {
                into: PartialInto::Posted(..),
                ..
            })
        )
    }
}
