//! One rank of `quiver bench busy`: the algorithms over quiver's public API, the same as
//! `mpi_busy.c` runs over MPI (its header describes them), point by point.
//!
//! Every point starts with a barrier, runs its warm-up iterations with their results
//! checked, a barrier, then the timed iterations; rank 0 prints one `RESULT` line per
//! point (the format of [`Measured::parse`](super::report::Measured::parse)). Data moves on
//! endpoint 0, barriers on endpoint 1, so a barrier's message is never taken for data.
//! Within a point a rank receives only from the peers the algorithm names (its pair
//! partner, its left neighbour, the server), and the barriers keep points apart.

use std::time::Instant;

use quiver::{Addr, Connection, Context, Endpoint};

use super::plan::{warmup_of, Algorithm, Point};

/// The endpoint port of the algorithms' data.
const DATA_PORT: u16 = 0;
/// The endpoint port of the barriers.
const SYNC_PORT: u16 = 1;

/// Runs every point as one rank of the job `Context::from_env` finds (started by the
/// bench with its transport and settings in the environment).
///
/// # Errors
/// What failed: the context, an endpoint, a connection, a send or receive, or a wrong
/// result (naming the algorithm and the iteration).
pub fn run(points: &[Point]) -> Result<(), String> {
    let context = Context::from_env().map_err(|e| format!("joining the job: {e}"))?;
    let mut rank = Rank::open(&context)?;
    for point in points {
        rank.barrier()?;
        let per_iteration_s = match point.algorithm {
            Algorithm::Pingpong => rank.pingpong(point)?,
            Algorithm::Ring => rank.ring(point)?,
            Algorithm::Reqrep => rank.reqrep(point)?,
        };
        if rank.rank == 0 {
            println!(
                "RESULT algorithm={} size={} iters={} time_us={:.4}",
                point.algorithm.as_str(),
                point.size,
                point.iters,
                per_iteration_s * 1e6
            );
        }
    }
    rank.barrier()
}

/// This rank's endpoints and the connections it has opened.
struct Rank {
    rank: u32,
    size: u32,
    data: Endpoint,
    sync: Endpoint,
    data_to: Vec<Option<Connection>>,
    sync_to: Vec<Option<Connection>>,
}

impl Rank {
    fn open(context: &Context) -> Result<Rank, String> {
        let endpoint = |port| {
            context
                .endpoint(port)
                .map_err(|e| format!("opening endpoint {port}: {e}"))
        };
        let size = context.size();
        if size < 2 {
            return Err("the busy bench needs at least 2 ranks".to_string());
        }
        Ok(Rank {
            rank: context.rank(),
            size,
            data: endpoint(DATA_PORT)?,
            sync: endpoint(SYNC_PORT)?,
            data_to: vec![None; size as usize],
            sync_to: vec![None; size as usize],
        })
    }

    /// The data connection to `peer`, opened on first use.
    fn data_to(&mut self, peer: u32) -> Result<Connection, String> {
        connection(&mut self.data, &mut self.data_to, peer, DATA_PORT)
    }

    /// Every rank waits here until all have arrived (through rank 0, on the sync endpoint).
    fn barrier(&mut self) -> Result<(), String> {
        let mut byte = [0u8; 1];
        let failed = |e: quiver::Error| format!("barrier: {e}");
        if self.rank == 0 {
            for _ in 1..self.size {
                self.sync.recv(&mut byte).map_err(failed)?;
            }
            for peer in 1..self.size {
                let to = connection(&mut self.sync, &mut self.sync_to, peer, SYNC_PORT)?;
                self.sync.send(to, &byte).map_err(failed)?;
            }
        } else {
            let to = connection(&mut self.sync, &mut self.sync_to, 0, SYNC_PORT)?;
            self.sync.send(to, &byte).map_err(failed)?;
            self.sync.recv(&mut byte).map_err(failed)?;
        }
        Ok(())
    }

    /// Pairs 2k, 2k+1 ping-pong; rank 0's one-way time in seconds.
    fn pingpong(&mut self, point: &Point) -> Result<f64, String> {
        let partner = self.rank ^ 1;
        let warmup = warmup_of(point.iters);
        let mut buffer = vec![0u8; point.size];
        let conn = if partner < self.size {
            Some(self.data_to(partner)?)
        } else {
            None
        };
        let mut started = Instant::now();
        for i in 0..warmup + point.iters {
            let check = i < warmup;
            if i == warmup {
                self.barrier()?;
                started = Instant::now();
            }
            let Some(conn) = conn else { continue };
            let failed = |e: quiver::Error| format!("pingpong iteration {i}: {e}");
            let (ping, pong) = (((i + 1) & 0xff) as u8, ((i + 2) & 0xff) as u8);
            if self.rank.is_multiple_of(2) {
                if check {
                    buffer.fill(ping);
                }
                self.data.send(conn, &buffer).map_err(failed)?;
                let (len, _) = self.data.recv(&mut buffer).map_err(failed)?;
                if check && (len != point.size || buffer.iter().any(|&b| b != pong)) {
                    return Err(format!("pingpong iteration {i}: wrong reply"));
                }
            } else {
                let (len, _) = self.data.recv(&mut buffer).map_err(failed)?;
                if check {
                    if len != point.size || buffer.iter().any(|&b| b != ping) {
                        return Err(format!("pingpong iteration {i}: wrong message"));
                    }
                    buffer.fill(pong);
                }
                self.data.send(conn, &buffer).map_err(failed)?;
            }
        }
        Ok(started.elapsed().as_secs_f64() / point.iters as f64 / 2.0)
    }

    /// Ring allreduce of `size / 8` u64; rank 0's time per allreduce in seconds.
    fn ring(&mut self, point: &Point) -> Result<f64, String> {
        let n = point.size / 8;
        let right = self.data_to((self.rank + 1) % self.size)?;
        let mut data = vec![0u8; n * 8];
        let mut incoming = vec![0u8; (n / self.size as usize + 1) * 8];
        let warmup = warmup_of(point.iters);
        for round in 0..warmup {
            for (i, word) in data.chunks_exact_mut(8).enumerate() {
                word.copy_from_slice(&value(self.rank, i, round).to_le_bytes());
            }
            incoming = self.allreduce(right, &mut data, incoming)?;
            for (i, word) in data.chunks_exact(8).enumerate() {
                let want = (0..self.size).fold(0u64, |sum, r| sum.wrapping_add(value(r, i, round)));
                if read_word(word) != want {
                    return Err(format!("ring round {round}: element {i} is wrong"));
                }
            }
        }
        self.barrier()?;
        let started = Instant::now();
        for _ in 0..point.iters {
            incoming = self.allreduce(right, &mut data, incoming)?;
        }
        Ok(started.elapsed().as_secs_f64() / point.iters as f64)
    }

    /// Sums `data` (u64, little-endian) over every rank: reduce-scatter, then allgather.
    /// `incoming` holds one chunk and is handed back for the next call.
    fn allreduce(
        &mut self,
        right: Connection,
        data: &mut [u8],
        mut incoming: Vec<u8>,
    ) -> Result<Vec<u8>, String> {
        let (rank, size) = (self.rank, self.size);
        let n = data.len() / 8;
        for step in 0..size - 1 {
            let send = (rank + size - step) % size;
            let recv = (rank + 2 * size - step - 1) % size;
            let got;
            (incoming, got) = self.exchange(right, &data[bytes(send, size, n)], incoming)?;
            let mine = &mut data[bytes(recv, size, n)];
            if got != mine.len() {
                return Err(format!("ring: a chunk of {got} B, expected {}", mine.len()));
            }
            for (mine, theirs) in mine.chunks_exact_mut(8).zip(incoming.chunks_exact(8)) {
                let sum = read_word(mine).wrapping_add(read_word(theirs));
                mine.copy_from_slice(&sum.to_le_bytes());
            }
        }
        for step in 0..size - 1 {
            let send = (rank + 1 + size - step) % size;
            let recv = (rank + size - step) % size;
            let got;
            (incoming, got) = self.exchange(right, &data[bytes(send, size, n)], incoming)?;
            let mine = &mut data[bytes(recv, size, n)];
            if got != mine.len() {
                return Err(format!("ring: a chunk of {got} B, expected {}", mine.len()));
            }
            mine.copy_from_slice(&incoming[..got]);
        }
        Ok(incoming)
    }

    /// Sends `chunk` to the right neighbour and receives the left one's into `incoming`
    /// (the receive posted first, as `MPI_Sendrecv` does); returns the buffer and the
    /// length received.
    fn exchange(
        &mut self,
        right: Connection,
        chunk: &[u8],
        incoming: Vec<u8>,
    ) -> Result<(Vec<u8>, usize), String> {
        let failed = |e: quiver::Error| format!("ring exchange: {e}");
        let posted = self.data.post_recv(incoming).map_err(failed)?;
        self.data.send(right, chunk).map_err(failed)?;
        let done = self.data.wait_recv(posted).map_err(failed)?;
        Ok((done.buf, done.len))
    }

    /// Rank 0 serves, the others ask; the server's time per request of one client (its
    /// clients' mean round trip) in seconds.
    fn reqrep(&mut self, point: &Point) -> Result<f64, String> {
        let warmup = warmup_of(point.iters);
        let mut buffer = vec![0u8; point.size];
        let mut started = Instant::now();
        for (phase, count) in [(0, warmup), (1, point.iters)] {
            if phase == 1 {
                self.barrier()?;
                started = Instant::now();
            }
            if self.rank == 0 {
                for i in 0..count * u64::from(self.size - 1) {
                    let failed = |e: quiver::Error| format!("serving request {i}: {e}");
                    let (len, from) = self.data.recv(&mut buffer).map_err(failed)?;
                    if len != point.size {
                        return Err(format!("a request of {len} B from {from:?}"));
                    }
                    let reply = answer(read_word(&buffer[..8]));
                    buffer[..8].copy_from_slice(&reply.to_le_bytes());
                    let to = self.data_to(from.rank)?;
                    self.data.send(to, &buffer).map_err(failed)?;
                }
            } else {
                let server = self.data_to(0)?;
                for i in 0..count {
                    let failed = |e: quiver::Error| format!("request {i}: {e}");
                    let request = (u64::from(self.rank) << 48) ^ i;
                    buffer[..8].copy_from_slice(&request.to_le_bytes());
                    self.data.send(server, &buffer).map_err(failed)?;
                    let (len, from) = self.data.recv(&mut buffer).map_err(failed)?;
                    if phase == 0
                        && (len != point.size || read_word(&buffer[..8]) != answer(request))
                    {
                        return Err(format!(
                            "request {i}: wrong reply from {from:?} ({len} B, first word {:#x}, expected {:#x})",
                            read_word(&buffer[..8]),
                            answer(request)
                        ));
                    }
                }
            }
        }
        Ok(started.elapsed().as_secs_f64() / point.iters as f64)
    }
}

/// The connection from `endpoint` to `peer`'s endpoint `port`, opened on first use.
fn connection(
    endpoint: &mut Endpoint,
    opened: &mut [Option<Connection>],
    peer: u32,
    port: u16,
) -> Result<Connection, String> {
    if let Some(conn) = opened[peer as usize] {
        return Ok(conn);
    }
    let conn = endpoint
        .connect(Addr::new(peer, port))
        .map_err(|e| format!("connecting to rank {peer}: {e}"))?;
    opened[peer as usize] = Some(conn);
    Ok(conn)
}

/// Rank `rank`'s element `i` in warm-up round `round` (as `mpi_busy.c`'s `value`).
fn value(rank: u32, i: usize, round: u64) -> u64 {
    (u64::from(rank) + 1)
        .wrapping_mul(i as u64 + 1)
        .wrapping_add(round << 32)
}

/// The byte range of chunk `c` of `n` u64 cut into `size` chunks.
fn bytes(c: u32, size: u32, n: usize) -> std::ops::Range<usize> {
    let (c, size) = (c as usize, size as usize);
    (c * n / size * 8)..((c + 1) * n / size * 8)
}

/// What the server answers to a request whose first word is `request`.
fn answer(request: u64) -> u64 {
    request.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5bd1_e995
}

fn read_word(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[..8]);
    u64::from_le_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_vector_once() {
        for size in 2..9u32 {
            for n in [1usize, 3, 8, 1000] {
                let mut covered = 0;
                for c in 0..size {
                    let range = bytes(c, size, n);
                    assert_eq!(range.start, covered);
                    covered = range.end;
                }
                assert_eq!(covered, n * 8);
            }
        }
    }
}
