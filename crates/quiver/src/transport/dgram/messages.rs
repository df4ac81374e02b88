//! The endpoint's message calls on a datagram connection: write a message into the send
//! window, take the next message (whole, or read as it arrives straight into the caller's
//! buffer), ask whether it is readable or all acknowledged, and close.
//!
//! Layer: the datagram transport's face to the endpoint. Each call takes the engine's lock
//! once (waiting only inside `take`, through the endpoint's wait helper).

use std::time::Duration;

use quiver_proto::reliable::{ReliableConnection, SendError, State};
use quiver_transport::udp::MAX_COALESCED_BYTES;

use super::connection::Status;
use super::engine::DgramShared;
use super::receive::{Reader, RECV_BUDGET_BYTES};
use crate::config::Config;
use crate::error::Error;
use crate::transport::dest::Dest;
use crate::transport::failure::Failure;
use crate::transport::local::LocalRank;
use crate::transport::wire_tag::WireTag;

/// Receives in a row that take a message already whole in the receive window without
/// polling the sockets ([`DgramShared::take_whole`]): a frame of 8-byte messages carries up
/// to 91 of them at MTU 1500, so a poll every 32 takes keeps one system call for about a
/// third of a frame while acks and timers wait at most 32 takes (a few microseconds).
const BUFFERED_TAKES_MAX: u32 = 32;

/// A receive window with less room than this left counts as full for the send-send
/// deadlock (the peer cannot send a frame of useful size into it).
const NEARLY_FULL_BYTES: u64 = 64 << 10;

impl DgramShared {
    /// The short receive path of a blocking receive whose endpoint's only inbound edge is
    /// open connection `id` (`Endpoint::look_lone_dgram`): one poll, as
    /// [`DgramShared::poll_io_before_receive`] (none when a whole message that fits is
    /// already there, up to [`BUFFERED_TAKES_MAX`] takes in a row), then the next message
    /// of `id` into `buf` if it is all there and fits, under one lock.
    /// `Some(Some((len, tag)))`: a message of `len` bytes with `tag` was taken;
    /// `Some(None)`: none has begun to arrive; `None`: anything else (a
    /// message too large for `buf` or not whole yet, a connection not open, or gone), which
    /// the general path ([`DgramShared::take`]) handles, nothing having been consumed.
    pub(crate) fn take_whole(
        &self,
        ctx: &LocalRank,
        id: u64,
        buf: &mut [u8],
    ) -> Option<Option<(usize, WireTag)>> {
        let mut engine = self.lock();
        // A whole message already in the window (small messages share frames: the rest of
        // a frame that carried several) is taken without a poll of the sockets first, a
        // system call on udp that finds little while the sender is slower than this loop;
        // every BUFFERED_TAKES_MAX-th take polls, so that acks and other connections wait
        // no longer than that many takes (decision 0079).
        let buffered = engine.takes_since_poll < BUFFERED_TAKES_MAX
            && engine.router.get(id).is_some_and(|entry| {
                entry.status == Status::Open
                    && entry
                        .core
                        .peek_message()
                        .is_some_and(|(len, ready)| ready && len <= buf.len() as u64)
            });
        if buffered {
            engine.takes_since_poll += 1;
            engine.buffered_takes += 1;
        } else {
            engine.poll_into(Some(ctx), self, &mut None, MAX_COALESCED_BYTES, None);
        }
        let entry = engine.router.get_mut(id)?;
        if entry.status != Status::Open {
            return None;
        }
        let Some((len, ready)) = entry.core.peek_message() else {
            return Some(None);
        };
        if len > buf.len() as u64 || !ready {
            return None;
        }
        let len = len as usize;
        // A whole message completes in one read into a buffer that holds it
        // (`ReliableConnection::message_ready`).
        let (_, complete) = entry.core.read_message(&mut buf[..len]);
        debug_assert!(complete, "a ready message was not read whole");
        entry.peer_sent = true;
        let tag = message_tag(&entry.core);
        // Freed receive credit may bring a window update forward.
        engine.timers_dirty = true;
        engine.defer(id);
        Some(Some((len, tag)))
    }

    /// The general receive path's [`DgramShared::take_whole`] rule: the engine's news count
    /// when the look that follows may skip the poll of the sockets, because one of `ids`
    /// (the receiving endpoint's connections) has a whole message in its receive window
    /// and fewer than [`BUFFERED_TAKES_MAX`] receives in a row skipped it (this one
    /// counted); None: poll first.
    pub(crate) fn news_if_buffered(&self, mut ids: impl Iterator<Item = u64>) -> Option<u64> {
        let mut engine = self.lock();
        if engine.takes_since_poll >= BUFFERED_TAKES_MAX {
            return None;
        }
        let router = &engine.router;
        let ready = ids.any(|id| {
            router.get(id).is_some_and(|entry| {
                entry.status == Status::Open
                    && entry.core.peek_message().is_some_and(|(_, ready)| ready)
            })
        });
        if !ready {
            return None;
        }
        engine.takes_since_poll += 1;
        engine.buffered_takes += 1;
        Some(engine.news)
    }

    /// Whether connection `id` could take `len` more bytes as a new message right now.
    pub(crate) fn can_take(&self, id: u64, len: usize) -> bool {
        let engine = self.lock();
        engine
            .router
            .get(id)
            .is_some_and(|e| e.core.send_capacity() >= len)
    }

    /// Writes more of a message (tagged `tag`, 0: untagged) into connection `id`'s send
    /// window. `written` counts the bytes taken so far, `started` whether the message was
    /// announced. True once all of `data` is taken.
    pub(crate) fn write(
        &self,
        id: u64,
        tag: WireTag,
        data: &[u8],
        written: &mut usize,
        started: &mut bool,
    ) -> std::result::Result<bool, Failure> {
        let mut engine = self.lock();
        let kind = self.kind;
        let entry = engine.open_entry(kind, id)?;
        if !*started {
            if start_message(&mut entry.core, data.len() as u64, tag).is_err() {
                return Ok(false);
            }
            *started = true;
        }
        while *written < data.len() {
            let n = entry.core.write_message(&data[*written..]);
            if n == 0 {
                break;
            }
            *written += n;
        }
        let done = *written == data.len();
        engine.flush(id);
        Ok(done)
    }

    /// Takes the next message of connection `id` into `dest`: its length and tag. A
    /// message that does not fit the receive window is read as it arrives (blocking even
    /// in a non-blocking call once its first bytes are here), except by a posted
    /// receive's look (`dest` is [`Dest::Posted`], not waiting): a message not whole yet
    /// is bound to that receive instead, under `bind_token` ([`Engine::bind_next`]; `bound`
    /// set in `dest`, nothing taken).
    pub(crate) fn take(
        &self,
        ctx: &LocalRank,
        (id, bind_token): (u64, u64),
        dest: &mut Dest<'_>,
        wait: bool,
        config: &Config,
    ) -> std::result::Result<Option<(usize, WireTag)>, DgramTake> {
        let mut engine = self.lock();
        let Some(entry) = engine.router.get_mut(id) else {
            return Err(DgramTake::Closed);
        };
        let Some(len) = entry.core.peek_message_len() else {
            return match &entry.status {
                Status::Failed(why) => Err(DgramTake::Failed(why.clone())),
                Status::Closed => Err(DgramTake::Closed),
                _ => Ok(None),
            };
        };
        entry.peer_sent = true;
        // The limit before anything is sized by the announcement (the edge ends with the
        // error). The buffer is then made whole at once, not grown as frames arrive: the
        // core places frames that overtook others at their offsets in it.
        Error::check_announced(entry.peer, self.kind.name(), len, config.max_message_bytes)
            .map_err(DgramTake::Error)?;
        if let (Dest::Posted { buf, bound, .. }, false) = (&mut *dest, wait) {
            if engine.bind_next(id, bind_token, buf, config.max_message_bytes) {
                *bound = true;
                return Ok(None);
            }
        }
        let window = engine.base.recv_window_bytes as u64;
        // Checked before anything is consumed: a too-small buffer leaves the message queued.
        let buf = dest.prepare(len).map_err(DgramTake::Error)?;
        // Non-blocking: deliver only a whole message (one that fits the window).
        let entry = engine.router.get(id).expect("looked up above");
        if !wait && len <= window / 2 && !entry.core.message_ready() {
            return Ok(None);
        }
        let len = len as usize;
        let mut filled = 0usize;
        let mut waited = crate::transport::wait::Wait::new(config);
        // Freed receive credit may bring a window update forward.
        engine.timers_dirty = true;
        loop {
            let entry = engine.router.get_mut(id).expect("looked up above");
            let (n, complete) = entry.core.read_message(&mut buf[filled..len]);
            filled += n;
            let tag = message_tag(&entry.core);
            if complete {
                engine.defer(id);
                return Ok(Some((len, tag)));
            }
            if let Status::Failed(why) = &entry.status {
                let failed = DgramTake::Failed(format!("{why} (in the middle of a message)"));
                entry.core.detach_reader(&buf[filled..len]);
                return Err(failed);
            }
            engine.flush(id);
            // What continues the message goes straight into the caller's buffer (one copy
            // instead of two: into the receive window, then out of it), also frames ahead of
            // the next byte (a striped connection's overtake each other all the time): the
            // core places them and counts them once the bytes before them are in; every
            // read_message above gets the same buffer, at the next unread byte.
            let mut reader = Some(Reader {
                id,
                out: &mut buf[filled..len],
                placed: 0,
            });
            // Only as much as the message still needs, so that little of the next one goes
            // through the receive window.
            let budget = RECV_BUDGET_BYTES.min(len - filled);
            engine.poll_into(Some(ctx), self, &mut reader, budget, None);
            let placed = reader.map_or(0, |r| r.placed);
            filled += placed;
            if filled == len {
                // Completed by those datagrams: the core has ended the message.
                engine.defer(id);
                return Ok(Some((len, tag)));
            }
            if n == 0 && placed == 0 {
                drop(engine);
                let waited_out = wait_engine(ctx, self, &mut waited);
                engine = self.lock();
                if let Err(e) = waited_out {
                    // Frames that overtook others may sit in `buf` (placed ahead by the
                    // core): they go back to the connection's receive buffer.
                    if let Some(entry) = engine.router.get_mut(id) {
                        entry.core.detach_reader(&buf[filled..len]);
                    }
                    return Err(DgramTake::Error(e));
                }
            }
        }
    }

    /// The tag of the message a look would take next on connection `id` (one a
    /// `BufferTooSmall` left whole; its header has arrived): the one being read, else the
    /// next in order (`ReliableConnection::peek_header`). Whether it is an active message
    /// (a receive whose buffer it does not fit hands it to its handler), and its tag, which
    /// the endpoint matches before the payload moves.
    pub(crate) fn next_tag(&self, id: u64) -> WireTag {
        let engine = self.lock();
        let Some(core) = engine.router.get(id).map(|e| &e.core) else {
            return WireTag::default();
        };
        if core.reading_message() {
            return message_tag(core);
        }
        match core.peek_header() {
            Some((_, value)) => WireTag {
                value,
                am: core.peek_is_active() == Some(true),
            },
            None => WireTag::default(),
        }
    }

    /// Whether connection `id` has the start of a message to read.
    pub(crate) fn readable(&self, id: u64) -> bool {
        let engine = self.lock();
        engine
            .router
            .get(id)
            .is_some_and(|e| e.core.peek_message_len().is_some() || e.status != Status::Open)
    }

    /// Whether connection `id`'s read-ahead is full: a message has begun arriving that its
    /// receive window cannot hold whole, or the window is nearly full of what this endpoint
    /// has not taken (the peer cannot send more until it does). With the bytes of the
    /// stream the peer acknowledged (a blocking send's progress).
    pub(crate) fn read_ahead_full(&self, id: u64) -> (bool, u64) {
        let engine = self.lock();
        let window = engine.base.recv_window_bytes as u64;
        engine.router.get(id).map_or((false, 0), |e| {
            let full = e.core.peek_message_len().is_some_and(|len| {
                len + 8 > window || e.core.stats().recv_buffered_bytes + NEARLY_FULL_BYTES >= window
            });
            (full, e.core.acked_bytes())
        })
    }

    /// Whether the peer has sent a message on connection `id` (one it did not open).
    pub(crate) fn peer_sent(&self, id: u64) -> bool {
        self.lock().router.get(id).is_some_and(|e| e.peer_sent)
    }

    /// Whether everything written to connection `id` was acknowledged (true for a
    /// connection that failed or is gone: nothing more will be).
    pub(crate) fn all_acked(&self, id: u64) -> bool {
        let engine = self.lock();
        engine.router.get(id).is_none_or(|e| {
            e.core.all_acked() || matches!(e.status, Status::Failed(_) | Status::Closed)
        })
    }

    /// Whether connection `id`'s close is settled: its Close acknowledged by the peer, or the
    /// connection closed, failed or gone. Also returns its current RTO.
    pub(crate) fn close_settled(&self, id: u64) -> (bool, Duration) {
        let engine = self.lock();
        match engine.router.get(id) {
            None => (true, Duration::ZERO),
            Some(e) => (
                e.core.close_acknowledged()
                    || matches!(e.core.state(), State::Closed | State::Failed)
                    || matches!(e.status, Status::Failed(_) | Status::Closed),
                Duration::from_nanos(e.core.stats().rto_ns),
            ),
        }
    }

    /// The endpoint is done with connection `id`: close it gracefully; it is forgotten
    /// once the close completes or fails.
    pub(crate) fn close(&self, id: u64) {
        let mut engine = self.lock();
        let now = engine.now();
        if let Some(entry) = engine.router.get_mut(id) {
            entry.abandoned = true;
            entry.core.close(now);
        }
        engine.flush(id);
    }
}

/// Why a datagram connection yielded no message.
pub(crate) enum DgramTake {
    /// Closed gracefully by the peer: nothing more will come.
    Closed,
    /// The connection failed (peer unreachable, reset): reported once.
    Failed(String),
    /// An error for the caller (BufferTooSmall, timeout).
    Error(crate::error::Error),
}

/// One step of waiting for the datagram engine to have news (the engine's lock not held):
/// the rank's meanwhile (the engine was just polled; peers' one-sided requests served),
/// then [`wait_fd`](crate::transport::wait::wait_fd) on the engine's descriptor, sleeping
/// no longer than its next protocol timer, nor long while request connections it does not
/// watch may have requests ([`LocalRank::blind_sleep`]).
pub(crate) fn wait_engine(
    ctx: &LocalRank,
    engine: &DgramShared,
    wait: &mut crate::transport::wait::Wait,
) -> crate::error::Result<()> {
    ctx.meanwhile(true);
    crate::transport::wait::wait_fd(
        engine.raw_fd(),
        libc::POLLIN,
        || ctx.blind_sleep(crate::transport::wait::SLEEP_SLICE),
        wait,
        "waiting for the rest of a message",
        || true,
    )
}

/// The tag of the message `core` is reading, or read last (an active message's word).
pub(super) fn message_tag(core: &ReliableConnection) -> WireTag {
    WireTag {
        value: core.message_tag(),
        am: core.message_is_active(),
    }
}

/// Starts the next message of `len` bytes on `core` with `tag`: tagged (tag 0: untagged),
/// or an active message.
pub(super) fn start_message(
    core: &mut ReliableConnection,
    len: u64,
    tag: WireTag,
) -> std::result::Result<(), SendError> {
    if tag.am {
        core.start_message_active(len, tag.value)
    } else {
        core.start_message_tagged(len, tag.value)
    }
}
