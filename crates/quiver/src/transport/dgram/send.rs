//! The send path of the datagram engine: flushing a connection, that is asking its
//! protocol core for every datagram it has to send and handing them to the link sockets
//! (the first small one at once, the rest gathered per socket and system call).
//!
//! Layer: the datagram transport. It drives the core's `poll_transmit`; receiving and
//! timers belong to the poll loop.

use quiver_proto::reliable::Nanos;

use super::connection::lender;
use super::engine::Engine;
use super::udp_io::{Socket, TxEntry, TX_BYTES};

/// A datagram sent alone (an answer: see [`Engine::flush`]) whose payload is in place and at
/// most this long is copied next to its header and sent with one `send`: on a connected
/// loopback socket a `send` of the copy took 60-140 ns less than a gathered `sendmmsg` of
/// the two pieces from 512 B to 1 KiB, and the same at 4 KiB (a C microbenchmark on the
/// 2-core development VM).
const LONE_COPY_MAX_BYTES: usize = 2048;

/// Payload bytes one system call of a send in place carries at most (see
/// [`Engine::flush_lent`]), so that the receiver starts on them (and acknowledges them)
/// while the rest are checksummed and sent: with 128 KiB about 13% of the bytes of 1 MiB
/// sends were still unacknowledged at the end (adopted), against 18-28% with one call
/// for all that the window allows.
const LENT_BATCH_BYTES: usize = 128 << 10;

impl Engine {
    /// Sends everything connection `id` has to send, each datagram on the socket of its
    /// path to the peer's address there.
    ///
    /// The first datagram, when it is a copied one (a small frame: an answer, an ack) or
    /// one with its payload in place that no other data frame follows (an answer of 512 B
    /// or more: `Config::udp_in_place_min`), leaves at once, before the protocol is asked
    /// for more: what a poll for more costs (at least the `poll_transmit` that finds
    /// nothing, which also runs the connection's timer bookkeeping) then runs while the
    /// datagram is on its way, not before it: on loopback the time from a request's arrival
    /// to its answer's `send` fell from 1.81 to 1.66 µs for a copied answer, and answers of
    /// 512 B to 16 KiB came 2-17% sooner once an in-place one left at once too.
    pub(super) fn flush(&mut self, id: u64) {
        self.flush_lent(id, &[]);
    }

    /// [`Engine::flush`] with `lent`, the message connection `id` is sending in place (its
    /// lent bytes: `DgramShared::send_in_place`); without it (empty) no data frame goes
    /// out while bytes are lent.
    pub(super) fn flush_lent(&mut self, id: u64, lent: &[u8]) {
        let now = self.now();
        self.flush_lent_at(id, lent, now);
    }

    /// [`Engine::flush_lent`] at `now`, the clock a poll read already (one read per poll,
    /// not one per connection it flushes).
    // Long function: the hot send path, one loop over the core's transmits that lays each
    // datagram out for its socket and sends a lone one at once; split into helpers, each
    // would need the same split borrows of the sockets, the entry and the header buffer.
    pub(super) fn flush_lent_at(&mut self, id: u64, lent: &[u8], now: Nanos) {
        #[cfg(test)]
        {
            self.flushes += 1;
        }
        self.timers_dirty = true;
        let Some(entry) = self.router.get_mut(id) else {
            return;
        };
        if !entry.posted.is_empty() {
            // A posted message larger than the window goes on as acknowledgements free room.
            self.posted_in_place_bytes += entry.lend_posted();
        }
        let sockets = &mut self.sockets;
        let in_place_min = self.in_place_min;
        let mut first = true;
        loop {
            for socket in sockets.iter_mut() {
                if let Socket::Udp(io) = socket {
                    io.tx.clear();
                    io.tx_out.clear();
                }
            }
            let mut more = true;
            let mut full = false;
            // Payload bytes laid out: a lender's flush sends at most LENT_BATCH_BYTES per
            // system call.
            let mut batch_bytes = 0usize;
            let batch_limit = if lent.is_empty() {
                usize::MAX
            } else {
                LENT_BATCH_BYTES
            };
            // Lay out at most TX_BYTES of copies and 1024 datagrams per socket and system call.
            while !full {
                let posted = &entry.posted;
                let Some(t) = entry
                    .core
                    .poll_transmit_lending(now, &mut self.header, |token| {
                        lender(lent, posted, token)
                    })
                else {
                    more = false;
                    break;
                };
                let path = t.path.min(sockets.len() - 1);
                let to = entry.paths.get(path).copied().unwrap_or(entry.to);
                batch_bytes += t.payload.len();
                match &mut sockets[path] {
                    Socket::Mem(socket) => {
                        socket.send(to, &self.header[..t.header_len], t.payload);
                    }
                    Socket::Xdp(io) => {
                        io.send(to, &self.header[..t.header_len], t.payload);
                        // A lone first datagram (an answer) leaves at once, as on udp; the
                        // rest leave together after the loop.
                        if first {
                            io.flush();
                        }
                        first = false;
                    }
                    Socket::Uring(io) => {
                        io.send(to, &self.header[..t.header_len], t.payload);
                        // As xdp: a lone first datagram leaves at once.
                        if first {
                            io.flush();
                        }
                        first = false;
                    }
                    Socket::Udp(io) => {
                        let offset = io.tx.len();
                        io.tx.extend_from_slice(&self.header[..t.header_len]);
                        match t.stream_offset {
                            Some(stream_offset) if t.payload.len() >= in_place_min => {
                                io.tx_out.push(TxEntry::InPlace {
                                    offset,
                                    header_len: t.header_len,
                                    stream_offset,
                                    payload_len: t.payload.len(),
                                });
                            }
                            _ => {
                                io.tx.extend_from_slice(t.payload);
                                io.tx_out.push(TxEntry::Copied {
                                    offset,
                                    len: t.header_len + t.payload.len(),
                                });
                            }
                        }
                        let alone = first
                            && match io.tx_out.last() {
                                Some(TxEntry::Copied { .. }) => true,
                                // A payload in place goes at once only when no data follows
                                // it (the answer, not the first frame of a stream).
                                _ => !entry.core.data_waiting(),
                            };
                        if alone {
                            // Sent before asking for more (see above). A short payload in
                            // place is copied next to its header first: one `send` costs less
                            // than a gathered `sendmmsg` (LONE_COPY_MAX_BYTES).
                            if let Some(&TxEntry::InPlace {
                                offset,
                                header_len,
                                stream_offset,
                                payload_len,
                            }) = io.tx_out.last()
                            {
                                let posted = &entry.posted;
                                let payload = (payload_len <= LONE_COPY_MAX_BYTES)
                                    .then(|| {
                                        entry.core.payload_at_lending(
                                            stream_offset,
                                            payload_len,
                                            |token| lender(lent, posted, token),
                                        )
                                    })
                                    .flatten();
                                if let Some(payload) = payload {
                                    io.tx.extend_from_slice(payload);
                                    io.tx_out.pop();
                                    io.tx_out.push(TxEntry::Copied {
                                        offset,
                                        len: header_len + payload_len,
                                    });
                                }
                            }
                            io.send_for(entry, path, to, lent);
                            io.tx.clear();
                            io.tx_out.clear();
                        }
                        first = false;
                        full = io.tx.len() >= TX_BYTES
                            || io.tx_out.len() >= 1024
                            || batch_bytes >= batch_limit;
                    }
                }
            }
            for (path, socket) in sockets.iter_mut().enumerate() {
                match socket {
                    Socket::Udp(io) if !io.tx_out.is_empty() => {
                        let to = entry.paths.get(path).copied().unwrap_or(entry.to);
                        io.send_for(entry, path, to, lent);
                    }
                    Socket::Xdp(io) => {
                        io.flush();
                        let to = entry.paths.get(path).copied().unwrap_or(entry.to);
                        io.follow_link_mtu(entry, to, now);
                    }
                    Socket::Uring(io) => {
                        io.flush();
                        let to = entry.paths.get(path).copied().unwrap_or(entry.to);
                        io.follow_path_mtu(entry, to);
                    }
                    _ => {}
                }
            }
            if !more {
                break;
            }
        }
    }
}
