//! [`Engine::receive_uring`]: taking what an io_uring link received and dispatching it,
//! each datagram read where the kernel put it (its provided buffer), the buffer given back
//! right after.
//!
//! Layer: the engine's receive path for one kind of link socket (`uring_io`); the routing
//! is `receive`'s ([`Engine::dispatch`]).

use quiver_proto::reliable::Nanos;

use super::engine::{DgramShared, Engine};
use super::receive::{Reader, RECV_BATCH};
use super::udp_io::Socket;
use super::uring_io::UringArrival;
use crate::transport::local::LocalRank;

impl Engine {
    /// Takes what io_uring link `path` received (at most [`RECV_BATCH`] datagrams, and
    /// about `budget` bytes) and dispatches it; what the dispatches answered (acks, Resets)
    /// leaves with one submission at the end. Returns the bytes taken.
    #[allow(clippy::too_many_arguments)] // dispatch's, less the datagram.
    #[inline]
    pub(super) fn receive_uring(
        &mut self,
        path: usize,
        now: Nanos,
        ctx: Option<&LocalRank>,
        shared: &DgramShared,
        touched: &mut Vec<u64>,
        reader: &mut Option<Reader<'_>>,
        budget: usize,
    ) -> usize {
        let mut bytes = 0;
        for _ in 0..RECV_BATCH {
            let Socket::Uring(io) = &mut self.sockets[path] else {
                unreachable!()
            };
            let mut rx = std::mem::take(&mut self.rx);
            let arrival = io.recv_next(&mut rx);
            match arrival {
                None => {
                    self.rx = rx;
                    break;
                }
                Some(UringArrival::InBuffer {
                    buffer,
                    payload,
                    from,
                    truncated,
                }) => {
                    self.rx = rx;
                    bytes += payload.len();
                    if truncated {
                        self.refused.truncated += 1;
                    } else {
                        let datagram = &buffer[payload];
                        self.dispatch(datagram, from, path, now, ctx, shared, touched, reader);
                    }
                    if let Socket::Uring(io) = &mut self.sockets[path] {
                        io.release(buffer);
                    }
                }
                Some(UringArrival::Copied { len, from }) => {
                    bytes += len;
                    self.dispatch(&rx[..len], from, path, now, ctx, shared, touched, reader);
                    self.rx = rx;
                }
            }
            if bytes >= budget {
                break;
            }
        }
        if let Socket::Uring(io) = &mut self.sockets[path] {
            io.flush();
        }
        bytes
    }
}
