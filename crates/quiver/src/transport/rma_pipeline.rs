//! Posted one-sided operations over the network transports: several requests outstanding
//! on one request connection at once ([`Pipeline`]), sent as the connection takes them and
//! answered in order, each completed by its reply. The transport supplies the connection's
//! bytes ([`RequestChannel`]: tcp's stream, the datagram engine's messages); the requests
//! and replies are those of the blocking operations (`quiver_wire::rma_request`).
//!
//! A posted put owns its data (the caller hands the buffer over) and a posted get its
//! buffer, returned with the completion. Blocking operations on the same edge wait until
//! the pipeline is empty first, so the replies stay in order.

use std::collections::{HashMap, VecDeque};

use quiver_wire::rma::KeyRepr;
use quiver_wire::rma_request::{ReplyRepr, ReplyStatus, RequestRepr, REPLY_LEN, REQUEST_LEN};

use crate::addr::Addr;
use crate::error::{Error, Result};
use crate::transport::local::LocalRank;
use crate::transport::rma_ops::{reply_error_for, OpInfo};

/// The bytes of one request connection, as its transport moves them, never waiting.
pub(crate) trait RequestChannel {
    /// Offers the rest of one request, the concatenation of `parts` (header, data) from byte
    /// `skip` on (`total` bytes in all; `started` says whether the transport began it);
    /// the bytes it took (0: none now).
    ///
    /// # Errors
    /// The connection ended.
    fn send(
        &mut self,
        local: &LocalRank,
        parts: (&[u8], &[u8]),
        skip: usize,
        started: &mut bool,
    ) -> Result<usize>;

    /// Takes reply bytes into `out`; how many (0: none now).
    ///
    /// # Errors
    /// The connection ended.
    fn recv(&mut self, local: &LocalRank, out: &mut [u8]) -> Result<usize>;
}

/// What a posted operation completes with: the word before (an atomic) and the bytes (a
/// get; a put's buffer back).
pub(crate) type Outcome = Result<(u64, Vec<u8>)>;

/// A request still being sent.
#[derive(Debug)]
struct Sending {
    seq: u32,
    head: [u8; REQUEST_LEN],
    /// A put's data.
    data: Vec<u8>,
    written: usize,
    started: bool,
}

/// A request sent (or being sent) whose reply has not come yet.
#[derive(Debug)]
struct Awaited {
    seq: u32,
    key: KeyRepr,
    info: OpInfo,
    /// A get's buffer (filled by the reply), or a put's data once sent (given back).
    buf: Vec<u8>,
}

/// The posted operations of one request connection (module docs).
#[derive(Debug, Default)]
pub(crate) struct Pipeline {
    sending: VecDeque<Sending>,
    awaiting: VecDeque<Awaited>,
    head: [u8; REPLY_LEN],
    head_filled: usize,
    /// The reply being read (its get data follows).
    reply: Option<ReplyRepr>,
    data_filled: usize,
    done: HashMap<u32, Outcome>,
}

impl Pipeline {
    /// Queues `request` (a put's `data`, or a get's zeroed buffer of `request.len`).
    pub(crate) fn post(
        &mut self,
        request: &RequestRepr,
        key: KeyRepr,
        info: OpInfo,
        data: Vec<u8>,
    ) {
        let (data, buf) = if info.writes && !info.atomic {
            (data, Vec::new())
        } else {
            (Vec::new(), data)
        };
        self.sending.push_back(Sending {
            seq: request.seq,
            head: request.emit(),
            data,
            written: 0,
            started: false,
        });
        self.awaiting.push_back(Awaited {
            seq: request.seq,
            key,
            info,
            buf,
        });
    }

    /// Whether nothing is outstanding.
    pub(crate) fn is_idle(&self) -> bool {
        self.sending.is_empty() && self.awaiting.is_empty()
    }

    /// Whether a request is still waiting to be written (the connection should wake the
    /// caller when it can take bytes).
    pub(crate) fn wants_to_send(&self) -> bool {
        !self.sending.is_empty()
    }

    /// Completes every outstanding request with `e` (the connection ended).
    pub(crate) fn fail(&mut self, e: &Error) {
        for awaited in self.awaiting.drain(..) {
            self.done.insert(awaited.seq, Err(duplicate(e)));
        }
        self.sending.clear();
        self.reply = None;
        self.head_filled = 0;
    }

    /// The completion of request `seq`, once it came.
    pub(crate) fn take(&mut self, seq: u32) -> Option<Outcome> {
        self.done.remove(&seq)
    }

    /// Sends what the channel takes and reads the replies that came, completing their
    /// requests. A connection that ended completes every outstanding request with its
    /// error, and is the error returned.
    ///
    /// # Errors
    /// The connection's end, or a reply that breaks the protocol (`Error::Corrupt`).
    pub(crate) fn progress(
        &mut self,
        channel: &mut dyn RequestChannel,
        local: &LocalRank,
        peer: Addr,
    ) -> Result<()> {
        let result = self
            .push(channel, local)
            .and_then(|()| self.pull(channel, local, peer));
        if let Err(e) = &result {
            self.fail(e);
        }
        result
    }

    fn push(&mut self, channel: &mut dyn RequestChannel, local: &LocalRank) -> Result<()> {
        while let Some(front) = self.sending.front_mut() {
            let total = REQUEST_LEN + front.data.len();
            let n = channel.send(
                local,
                (&front.head, &front.data),
                front.written,
                &mut front.started,
            )?;
            front.written += n;
            if front.written < total {
                return Ok(());
            }
            let sent = self.sending.pop_front().expect("the front");
            // A put's buffer goes back with its completion.
            if let Some(awaited) = self.awaiting.iter_mut().find(|a| a.seq == sent.seq) {
                if awaited.buf.is_empty() {
                    awaited.buf = sent.data;
                }
            }
        }
        Ok(())
    }

    fn pull(
        &mut self,
        channel: &mut dyn RequestChannel,
        local: &LocalRank,
        peer: Addr,
    ) -> Result<()> {
        let corrupt = |detail: String| Error::Corrupt {
            peer,
            detail: format!("one-sided reply: {detail}"),
        };
        loop {
            let Some(front) = self.awaiting.front_mut() else {
                return Ok(());
            };
            if self.sending.front().is_some_and(|s| s.seq == front.seq) {
                // The oldest request is still going out, and a target answers a request
                // only once it has read all of it: no reply can be there, so no read (a
                // large put streams without a failed read per look at the connection).
                return Ok(());
            }
            if self.reply.is_none() {
                let n = channel.recv(local, &mut self.head[self.head_filled..])?;
                self.head_filled += n;
                if self.head_filled < REPLY_LEN {
                    return Ok(());
                }
                self.head_filled = 0;
                let reply = ReplyRepr::parse(&self.head).map_err(|e| corrupt(e.to_string()))?;
                let is_get = !front.info.writes && !front.info.atomic;
                let expected = if is_get && reply.status == ReplyStatus::Done {
                    front.info.len
                } else {
                    0
                };
                if reply.seq != front.seq || reply.len != expected {
                    return Err(corrupt(format!(
                        "reply {} with {} bytes to request {}",
                        reply.seq, reply.len, front.seq
                    )));
                }
                self.reply = Some(reply);
                self.data_filled = 0;
            }
            let reply = self.reply.expect("set above");
            let want = reply.len as usize;
            while self.data_filled < want {
                let n = channel.recv(local, &mut front.buf[self.data_filled..want])?;
                if n == 0 {
                    return Ok(());
                }
                self.data_filled += n;
            }
            self.reply = None;
            let awaited = self.awaiting.pop_front().expect("the front");
            let outcome = match reply.status {
                ReplyStatus::Done => Ok((reply.value, awaited.buf)),
                status => Err(reply_error_for(
                    local,
                    peer,
                    &awaited.key,
                    awaited.info,
                    status,
                )),
            };
            self.done.insert(awaited.seq, outcome);
        }
    }
}

/// The same error again, for each request a failed connection ends.
fn duplicate(e: &Error) -> Error {
    match e {
        Error::PeerDead { peer, during } => Error::PeerDead {
            peer: *peer,
            during,
        },
        Error::PeerClosed { peer } => Error::PeerClosed { peer: *peer },
        Error::Corrupt { peer, detail } => Error::Corrupt {
            peer: *peer,
            detail: detail.clone(),
        },
        Error::Timeout { what, millis } => Error::Timeout {
            what,
            millis: *millis,
        },
        Error::Unreachable {
            peer,
            transport,
            detail,
        } => Error::Unreachable {
            peer: *peer,
            transport,
            detail: detail.clone(),
        },
        other => {
            Error::InvalidArgument(format!("the one-sided request connection failed: {other}"))
        }
    }
}

/// Where one posted operation of an endpoint stands.
#[derive(Debug)]
enum Slot {
    /// Complete (over shm at once, or taken from its edge).
    Done(Outcome),
    /// On outbound edge `index`, request number `seq`.
    Pending { index: usize, seq: u32 },
}

/// An endpoint's posted one-sided operations, by the number its request handle carries.
#[derive(Debug, Default)]
pub(crate) struct PostedTable {
    slots: HashMap<u64, Slot>,
    next: u64,
    /// Slots still pending on an edge.
    pending: usize,
}

impl PostedTable {
    /// Records an operation done at once; its number.
    pub(crate) fn done(&mut self, outcome: Outcome) -> u64 {
        self.insert(Slot::Done(outcome))
    }

    /// Records an operation pending on outbound edge `index` as request `seq`; its number.
    pub(crate) fn pending(&mut self, index: usize, seq: u32) -> u64 {
        self.pending += 1;
        self.insert(Slot::Pending { index, seq })
    }

    fn insert(&mut self, slot: Slot) -> u64 {
        self.next += 1;
        self.slots.insert(self.next, slot);
        self.next
    }

    /// Whether operations are pending on edges (the endpoint's progress moves them on).
    pub(crate) fn any_pending(&self) -> bool {
        self.pending > 0
    }

    /// Operation `id`: its outcome once complete (removed), `Ok(None)` while pending;
    /// `take_from(index, seq)` asks its edge.
    ///
    /// # Errors
    /// `Error::InvalidArgument` for a number this table does not hold.
    pub(crate) fn poll(
        &mut self,
        id: u64,
        take_from: impl FnOnce(usize, u32) -> Option<Outcome>,
    ) -> Result<Option<Outcome>> {
        let Some(slot) = self.slots.get_mut(&id) else {
            return Err(Error::InvalidArgument(format!(
                "one-sided request {id} is not posted on this endpoint (completed already?)"
            )));
        };
        if let Slot::Pending { index, seq } = *slot {
            match take_from(index, seq) {
                Some(outcome) => {
                    *slot = Slot::Done(outcome);
                    self.pending -= 1;
                }
                None => return Ok(None),
            }
        }
        match self.slots.remove(&id) {
            Some(Slot::Done(outcome)) => Ok(Some(outcome)),
            _ => unreachable!("made done above"),
        }
    }

    /// Whether operation `id` is complete, without taking it.
    ///
    /// # Errors
    /// As [`PostedTable::poll`].
    pub(crate) fn test(
        &mut self,
        id: u64,
        take_from: impl FnOnce(usize, u32) -> Option<Outcome>,
    ) -> Result<bool> {
        let Some(slot) = self.slots.get_mut(&id) else {
            return Err(Error::InvalidArgument(format!(
                "one-sided request {id} is not posted on this endpoint (completed already?)"
            )));
        };
        if let Slot::Pending { index, seq } = *slot {
            match take_from(index, seq) {
                Some(outcome) => {
                    *slot = Slot::Done(outcome);
                    self.pending -= 1;
                }
                None => return Ok(false),
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use quiver_wire::rma::{Rights, KEY_LEN};
    use quiver_wire::rma_request::RequestOp;

    use super::*;
    use crate::config::Config;
    use crate::job::JobInfo;

    /// A connection that takes at most `per_send` bytes per offer and counts reply reads.
    #[derive(Default)]
    struct Trickle {
        per_send: usize,
        taken: usize,
        reads: usize,
        replies: Vec<u8>,
    }

    impl RequestChannel for Trickle {
        fn send(
            &mut self,
            _local: &LocalRank,
            (head, data): (&[u8], &[u8]),
            skip: usize,
            started: &mut bool,
        ) -> Result<usize> {
            *started = true;
            let n = (head.len() + data.len() - skip).min(self.per_send);
            self.taken += n;
            Ok(n)
        }

        fn recv(&mut self, _local: &LocalRank, out: &mut [u8]) -> Result<usize> {
            self.reads += 1;
            let n = out.len().min(self.replies.len());
            out[..n].copy_from_slice(&self.replies[..n]);
            self.replies.drain(..n);
            Ok(n)
        }
    }

    fn key() -> KeyRepr {
        KeyRepr {
            rights: Rights::ReadWrite,
            rank: 1,
            job_id: 7,
            region: 3,
            len: 1 << 20,
            capability: [5; 16],
        }
    }

    fn put(seq: u32, len: u64) -> (RequestRepr, OpInfo) {
        let request = RequestRepr {
            op: RequestOp::Put,
            seq,
            offset: 0,
            len,
            a: 0,
            b: 0,
            key: [0; KEY_LEN],
        };
        let info = OpInfo {
            name: "put",
            writes: true,
            atomic: false,
            offset: 0,
            len,
        };
        (request, info)
    }

    /// While a put is still going out, its connection is not read for replies (none can
    /// be there yet); once it is out, its reply completes it with the data back.
    #[test]
    fn no_reply_is_read_while_the_oldest_request_is_going_out() {
        let local = LocalRank::new(JobInfo::by_hand(), Config::default(), None);
        let peer = Addr::new(1, 0);
        let mut pipeline = Pipeline::default();
        let mut channel = Trickle {
            per_send: 1000,
            ..Trickle::default()
        };
        let (request, info) = put(1, 4000);
        pipeline.post(&request, key(), info, vec![9; 4000]);
        let total = REQUEST_LEN + 4000;
        while channel.taken + 1000 < total {
            pipeline.progress(&mut channel, &local, peer).unwrap();
            assert_eq!(channel.reads, 0, "read while the put was going out");
        }
        let reply = ReplyRepr {
            status: ReplyStatus::Done,
            seq: 1,
            value: 0,
            len: 0,
        };
        channel.replies.extend_from_slice(&reply.emit());
        pipeline.progress(&mut channel, &local, peer).unwrap();
        assert_eq!(channel.taken, total);
        assert!(channel.reads > 0);
        let (_, data) = pipeline.take(1).expect("completed").unwrap();
        assert_eq!(data, vec![9; 4000]);
        assert!(pipeline.is_idle());
    }
}
