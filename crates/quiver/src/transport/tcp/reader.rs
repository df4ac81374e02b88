//! Reading [`quiver_wire::stream`] frames off a tcp stream ([`TcpReader`]): small messages
//! are staged and copied out once whole; a large one is read as it arrives, into the
//! buffer that will keep it ([`PartialInto`]); messages read ahead of any receive wait in
//! internal buffers, bounded by `max_buffered_bytes` over all edges.

use std::collections::VecDeque;
use std::io::{self, Read};
use std::net::TcpStream;

use quiver_wire::stream::HEADER_LEN;

use crate::error::Result;
use crate::pool::Pool;
use crate::slab::{Key, Slab};
use crate::transport::dest::Dest;
use crate::transport::requests::RecvState;
use crate::transport::wire_tag::WireTag;

/// The receiving side of a tcp stream. Messages come out in stream order: first `ready`,
/// then `partial`, then the staged bytes `buf[start..end]`, then the socket.
#[derive(Debug)]
pub(crate) struct TcpReader {
    pub(crate) stream: TcpStream,
    /// Staging buffer (`Config::tcp_staging_bytes`): messages that fit are read here and
    /// copied out once whole.
    pub(crate) buf: Box<[u8]>,
    pub(crate) start: usize,
    pub(crate) end: usize,
    /// Whole messages read ahead of any receive (while this endpoint waited for a send),
    /// with their tags.
    pub(crate) ready: VecDeque<(WireTag, Vec<u8>)>,
    /// The large message being read, once it has started.
    pub(crate) partial: Option<Partial>,
    /// Bytes of `ready` plus a `Held` partial's length: internal copies, bounded by
    /// `Config::max_buffered_bytes` over all edges.
    pub(crate) held_bytes: usize,
    /// Read-ahead stopped here for want of budget: not worth waking up for.
    pub(crate) stalled: bool,
    /// Some bytes arrived (a reverse edge becomes active).
    pub(crate) received_any: bool,
    /// The tag of the messages read from the stream now: the last tag (or am) frame's
    /// (tag 0 before any).
    pub(crate) tag: WireTag,
    /// The tag of the message delivered last.
    pub(crate) delivered_tag: WireTag,
}

/// A large tcp message (more than the staging buffer) being read over several calls.
#[derive(Debug)]
pub(crate) struct Partial {
    /// Payload length.
    pub(crate) len: usize,
    /// Payload bytes received so far.
    pub(crate) filled: usize,
    /// The message's tag.
    pub(crate) tag: WireTag,
    pub(crate) into: PartialInto,
}

/// Where the bytes of a [`Partial`] go.
#[derive(Debug)]
pub(crate) enum PartialInto {
    /// An internal buffer of `len` bytes: read ahead of any receive, by a non-blocking
    /// receive (which has no buffer that outlives the call), or by a pooled receive (the
    /// buffer is then handed over whole, no copy).
    Held(Vec<u8>),
    /// The buffer of a posted receive (moved out of its request until the message is
    /// whole; its length is unchanged).
    Posted(Key, Vec<u8>),
    /// The buffer of the blocking `recv` in progress (the edge the endpoint is committed to).
    Caller,
}

/// One non-blocking read into `buf`: Some(n > 0), None when nothing is there.
pub(crate) fn read_some(stream: &mut TcpStream, buf: &mut [u8]) -> io::Result<Option<usize>> {
    loop {
        match stream.read(buf) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => return Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Reads what the stream has into `dst[*filled..]`, never waiting; true once `dst` is full.
pub(crate) fn read_into(
    stream: &mut TcpStream,
    dst: &mut [u8],
    filled: &mut usize,
) -> io::Result<bool> {
    while *filled < dst.len() {
        match read_some(stream, &mut dst[*filled..])? {
            Some(n) => *filled += n,
            None => return Ok(false),
        }
    }
    Ok(true)
}

/// What a failed read on a tcp stream means (`mid`: in the middle of a message).
pub(crate) fn tcp_read_detail(e: &io::Error, mid: bool) -> String {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        if mid {
            "the stream ended in the middle of a message".into()
        } else {
            "the stream ended without a close (the peer exited or crashed)".into()
        }
    } else {
        format!("receiving: {e}")
    }
}

/// An internal buffer for a message of `len` bytes, from the pool when it can: room for
/// all of it is reserved (address space, not memory: no page is touched), and its first
/// `first` bytes are usable (zeroed); [`read_held`] grows it as the rest arrives. An
/// out-of-memory error rather than an abort when even the reservation fails.
pub(crate) fn held_buffer(pool: &Pool, len: u64, first: usize) -> Result<Vec<u8>> {
    let mut buf = pool.take(0);
    buf.clear();
    let reserved = usize::try_from(len)
        .ok()
        .filter(|&len| buf.try_reserve_exact(len).is_ok());
    if reserved.is_none() {
        return Err(crate::error::Error::io(
            format!("reserving {len} bytes for a received message"),
            io::ErrorKind::OutOfMemory.into(),
        ));
    }
    buf.resize(first.min(len as usize), 0);
    Ok(buf)
}

/// Bytes a held buffer grows by at least (then it doubles, up to its message's length).
const HELD_GROWTH_MIN: usize = 256 << 10;

/// Reads what the stream has into `held`, the internal buffer of a `len`-byte message
/// (`filled` bytes so far), growing it as the bytes arrive: to at most twice what arrived
/// (and [`HELD_GROWTH_MIN`]) ahead of them, within the room [`held_buffer`] reserved, so
/// memory is spent on what the peer sent, not on what it announced. Never waits; true once
/// the message is whole.
pub(crate) fn read_held(
    stream: &mut TcpStream,
    held: &mut Vec<u8>,
    len: usize,
    filled: &mut usize,
) -> io::Result<bool> {
    loop {
        if *filled == held.len() {
            if held.len() >= len {
                return Ok(true);
            }
            let grown = len.min(held.len().saturating_mul(2).max(HELD_GROWTH_MIN));
            held.resize(grown, 0);
        }
        if !read_into(stream, held, filled)? {
            return Ok(false);
        }
    }
}

/// Binds posted receive `dest` (if it is one) to the large message starting on a tcp
/// edge: its buffer moves into the edge and the request becomes [`RecvState::Bound`].
pub(crate) fn bind_posted(
    dest: &mut Dest<'_>,
    recvs: &mut Slab<RecvState>,
    bound_recvs: &mut usize,
) -> Option<PartialInto> {
    let Dest::Posted { key, buf, bound } = dest else {
        return None;
    };
    *bound = true;
    if let Some(state) = recvs.get_mut(*key) {
        *state = RecvState::Bound;
    }
    *bound_recvs += 1;
    Some(PartialInto::Posted(*key, std::mem::take(*buf)))
}

/// Hands `msg`, a whole message held internally, to `dest` (checked with
/// [`Dest::fits`] first): moved into an owned destination, copied otherwise. Spent
/// buffers go back to the pool.
pub(crate) fn deliver_held(dest: &mut Dest<'_>, msg: Vec<u8>, pool: &Pool) -> Result<usize> {
    let len = msg.len();
    if let Dest::Owned(v) = dest {
        pool.give(std::mem::replace(*v, msg));
    } else {
        dest.prepare(len as u64)?.copy_from_slice(&msg);
        pool.give(msg);
    }
    Ok(len)
}

impl TcpReader {
    /// A TCP inbound stream staging `staging_bytes` (`Config::tcp_staging_bytes`):
    /// messages that fit are received once whole; larger ones are read as they arrive,
    /// straight into the destination when there is one (see [`super::inbound::TcpIn::take`]).
    pub(crate) fn new(stream: TcpStream, staging_bytes: usize) -> TcpReader {
        TcpReader {
            stream,
            buf: vec![0u8; staging_bytes].into_boxed_slice(),
            start: 0,
            end: 0,
            ready: VecDeque::new(),
            partial: None,
            held_bytes: 0,
            stalled: false,
            received_any: false,
            tag: WireTag::default(),
            delivered_tag: WireTag::default(),
        }
    }

    /// Whether a held (internal) partial message is being read.
    pub(crate) fn holds_partial(&self) -> bool {
        matches!(
            self.partial,
            Some(Partial {
                into: PartialInto::Held(_),
                ..
            })
        )
    }

    /// Drops everything held (the edge is done).
    pub(crate) fn release(&mut self) {
        self.ready.clear();
        self.partial = None;
        self.held_bytes = 0;
    }

    /// Reads more into the staging buffer; false when nothing was there.
    pub(crate) fn fill(&mut self) -> io::Result<bool> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() || self.buf.len() - self.end < HEADER_LEN {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        match read_some(&mut self.stream, &mut self.buf[self.end..])? {
            Some(n) => {
                self.end += n;
                self.received_any = true;
                Ok(true)
            }
            None => Ok(false),
        }
    }
}
