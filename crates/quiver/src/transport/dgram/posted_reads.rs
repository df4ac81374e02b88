//! Receives posted in place on a datagram connection: the endpoint hands the buffers of
//! its posted receives to the engine, the protocol core places the frames of the next
//! messages straight into them, and they come back complete, too small, returned or
//! failed ([`RecvDone`]).
//!
//! Layer: the datagram transport's face to the endpoint for posted receives.

use std::collections::VecDeque;

use quiver_proto::reliable::PostedRead;

use super::connection::{Entry, Status};
use super::engine::{DgramShared, Engine};
use crate::transport::wire_tag::WireTag;

/// What became of a receive posted with [`DgramShared::post_recvs`].
#[derive(Debug)]
pub(crate) enum RecvDone {
    /// A message of `len` bytes is at the start of `buf`.
    Complete {
        token: u64,
        buf: Vec<u8>,
        len: usize,
        tag: WireTag,
    },
    /// The next message (`len` bytes) is longer than `buf`; it stays for the next receive.
    TooSmall {
        token: u64,
        buf: Vec<u8>,
        len: usize,
    },
    /// Handed back untouched: the connection ended (failed or closed) before the receive's
    /// message began; the endpoint's general receive path takes it on.
    Returned { token: u64, buf: Vec<u8> },
    /// The connection failed in the middle of the receive's message (its buffer is
    /// dropped).
    Failed { token: u64, why: String },
}

impl DgramShared {
    /// Posts receives in place on connection `id` (an endpoint's lone inbound connection):
    /// takes buffers from the front of `recvs` ((token, buffer), in posting order) as long
    /// as the protocol takes readers (`ReliableConnection::post_reader`), and keeps them.
    /// Every datagram then goes to the connection with them
    /// (`handle_datagram_posted`): frames of the next messages go straight to their
    /// receives' buffers, also while earlier messages are still arriving. They come back
    /// from [`DgramShared::collect_recvs`]. Takes none from a connection that is not open,
    /// or in the middle of a message read the general way. Returns how many were taken.
    pub(crate) fn post_recvs(&self, id: u64, recvs: &mut VecDeque<(u64, Vec<u8>)>) -> usize {
        let mut engine = self.lock();
        let Some(entry) = engine.router.get_mut(id) else {
            return 0;
        };
        if entry.status != Status::Open || entry.core.reading_message() {
            return 0;
        }
        let mut taken = 0;
        while let Some((token, buf)) = recvs.pop_front() {
            if !entry.core.post_reader(token, buf.len()) {
                recvs.push_front((token, buf));
                break;
            }
            entry.reads.0.push((token, buf));
            taken += 1;
        }
        if taken > 0 {
            // What arrived already goes in now; freed credit may bring a window update.
            entry.core.read_posted(&mut entry.reads);
            entry.peer_sent = true;
            engine.timers_dirty = true;
            engine.flush(id);
        }
        taken
    }

    /// [`Engine::bind_next`] under the engine's lock (a look binds under its own,
    /// `DgramShared::take`).
    #[cfg(test)]
    pub(crate) fn bind_next(
        &self,
        id: u64,
        token: u64,
        buf: &mut Vec<u8>,
        max_message_bytes: u64,
    ) -> bool {
        self.lock().bind_next(id, token, buf, max_message_bytes)
    }

    /// Takes back connection `id`'s receives posted in place whose message has not begun
    /// (a receive being cancelled; the connection stays open), into `done` as
    /// [`RecvDone::Returned`], in posting order; bytes already placed in their buffers go
    /// back to the connection (`ReliableConnection::withdraw_readers`). A receive whose
    /// message has begun stays and finishes with it.
    pub(crate) fn withdraw_recvs(&self, id: u64, done: &mut Vec<RecvDone>) {
        let mut engine = self.lock();
        let Some(entry) = engine.router.get_mut(id) else {
            return;
        };
        let Entry { core, reads, .. } = entry;
        let before = done.len();
        for token in core.withdraw_readers(reads) {
            if let Some(buf) = reads.take(token) {
                done.push(RecvDone::Returned { token, buf });
            }
        }
        if done.len() > before {
            engine.timers_dirty = true;
            engine.flush(id);
        }
    }

    /// Hands back what became of connection `id`'s receives posted in place, into `done`:
    /// completed or too small, in the order they finished; once the connection failed or
    /// was closed, every other one (its message not begun: returned as it was; begun: with
    /// the failure); with `withdraw` (the endpoint has other edges now), every receive
    /// whose message has not begun, returned as it was. Returns how many receives the
    /// engine still holds; None when the connection is gone (with the receives it held).
    pub(crate) fn collect_recvs(
        &self,
        id: u64,
        withdraw: bool,
        done: &mut Vec<RecvDone>,
    ) -> Option<usize> {
        let mut engine = self.lock();
        let entry = engine.router.get_mut(id)?;
        let Entry {
            core,
            reads,
            status,
            ..
        } = entry;
        if reads.0.is_empty() {
            return Some(0);
        }
        let before = done.len();
        core.read_posted(reads);
        while let Some(read) = core.poll_posted() {
            let (token, len, complete) = match read {
                PostedRead::Complete {
                    token,
                    len,
                    tag,
                    active,
                } => (
                    token,
                    len,
                    Some(WireTag {
                        value: tag,
                        am: active,
                    }),
                ),
                PostedRead::TooSmall { token, len } => (token, len, None),
            };
            let Some(buf) = reads.take(token) else {
                continue;
            };
            let len = usize::try_from(len).unwrap_or(usize::MAX);
            done.push(match complete {
                Some(tag) => RecvDone::Complete {
                    token,
                    buf,
                    len,
                    tag,
                },
                None => RecvDone::TooSmall { token, buf, len },
            });
        }
        let ended = match status {
            Status::Failed(why) => Some(why.clone()),
            Status::Closed => Some("the peer closed the connection".to_owned()),
            _ => None,
        };
        if let Some(why) = ended {
            for token in core.withdraw_readers(reads) {
                if let Some(buf) = reads.take(token) {
                    done.push(RecvDone::Returned { token, buf });
                }
            }
            for (token, _) in reads.0.drain(..) {
                done.push(RecvDone::Failed {
                    token,
                    why: format!("{why} (in the middle of a message)"),
                });
            }
        } else if withdraw {
            for token in core.withdraw_readers(reads) {
                if let Some(buf) = reads.take(token) {
                    done.push(RecvDone::Returned { token, buf });
                }
            }
        }
        let held = reads.0.len();
        if done.len() > before {
            // Freed receive credit may bring a window update forward.
            engine.timers_dirty = true;
            engine.flush(id);
        }
        Some(held)
    }
}

impl Engine {
    /// Binds one posted receive (`token`, its buffer `buf`) to connection `id`'s next
    /// message, whose envelope the caller has seen (`DgramShared::next_tag`) and matched:
    /// when that message has begun to arrive but is not whole in the receive window, fits
    /// `buf`, is within `max_message_bytes` and is no active message, and the connection
    /// is open, holds no other receive and is not in the middle of a message read the
    /// general way. The buffer moves into the engine as a posted reader
    /// (`ReliableConnection::post_reader`), which claims exactly that message (its header
    /// is next in order): what arrived is copied from the window now, every later frame
    /// goes straight into the buffer. It comes back from [`DgramShared::collect_recvs`].
    /// False (`buf` untouched): the general look takes the message.
    pub(super) fn bind_next(
        &mut self,
        id: u64,
        token: u64,
        buf: &mut Vec<u8>,
        max_message_bytes: u64,
    ) -> bool {
        let Some(entry) = self.router.get_mut(id) else {
            return false;
        };
        let bindable = entry.status == Status::Open
            && entry.reads.0.is_empty()
            && !entry.core.reading_message()
            && entry.core.peek_is_active() == Some(false)
            && entry.core.peek_message().is_some_and(|(len, ready)| {
                !ready && len <= buf.len() as u64 && len <= max_message_bytes
            });
        if !bindable || !entry.core.post_reader(token, buf.len()) {
            return false;
        }
        entry.reads.0.push((token, std::mem::take(buf)));
        // What arrived already goes in now; freed credit may bring a window update.
        entry.core.read_posted(&mut entry.reads);
        entry.peer_sent = true;
        self.timers_dirty = true;
        self.flush(id);
        true
    }
}
