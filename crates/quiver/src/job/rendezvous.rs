//! The rendezvous bootstrap, for launchers without PMIx: rank and size from
//! `OMPI_COMM_WORLD_RANK`/`_SIZE`, `PMI_RANK`/`PMI_SIZE` or `SLURM_PROCID`/`SLURM_NTASKS`;
//! the key from `QUIVER_JOB_KEY` or `QUIVER_JOB_KEY_FILE`; rank 0 listens at
//! `QUIVER_RENDEZVOUS=host:port`, every other rank sends it its address there, and rank 0
//! answers everyone with the job id and all addresses.
//!
//! One TCP connection per rank r > 0 to rank 0, four messages:
//!
//!   r -> 0  HELLO   rank u32 | size u32 | nonce [16]
//!   0 -> r  IDENT   job_id u64 | nonce [16]                (r binds its sockets now)
//!   r -> 0  ADDR    rank u32 | nonce [16] | job_id u64 | len u16 | address text
//!   0 -> r  ANSWER  job_id u64 | nonce [16] | count u32 | count x (len u16 | address text)
//!
//! Each is framed as  length u32 | magic "QVRZ" | version u8 | kind u8 | payload | MAC [32],
//! big-endian, the MAC a keyed BLAKE3 hash (the job key) of everything between the length
//! and the MAC. The nonce is the rank's, drawn per run: an answer cannot be replayed to
//! another rank, and the job id (rank 0's, drawn per run) ties an ADDR to this run.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::env::{key_from_env, launcher_rank};
use super::info::{Bootstrap, JobInfo, NetworkBinder};
use super::node::node_share;
use super::placement::{
    address_text, bind_address, enter_netns, networked, parse_published, settle,
};
use super::variables::RENDEZVOUS;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::random::random;

/// Frame magic of the rendezvous messages.
const RENDEZVOUS_MAGIC: &[u8; 4] = b"QVRZ";
/// Version of the rendezvous messages.
const RENDEZVOUS_VERSION: u8 = 1;
const KIND_HELLO: u8 = 1;
const KIND_IDENT: u8 = 2;
const KIND_ADDR: u8 = 3;
const KIND_ANSWER: u8 = 4;
/// MAC length (keyed BLAKE3).
const MAC_BYTES: usize = 32;
/// Magic, version, kind.
const FRAME_HEADER_BYTES: usize = 6;
/// Longest address text accepted (an IPv6 address with scope and port fits).
const MAX_ADDRESS_TEXT: usize = 64;
/// How long rank 0 waits for each message of one connection before dropping it (a
/// stranger cannot hold the rendezvous longer than this).
const RANK_MESSAGE_TIMEOUT: Duration = Duration::from_secs(10);

/// Learns the job through rank 0 at `QUIVER_RENDEZVOUS` (module docs).
///
/// # Errors
/// [`Error::Config`] for missing or malformed variables, [`Error::Io`] when the exchange
/// with rank 0 fails or times out, and the errors of binding the network sockets.
pub(crate) fn bootstrap(config: &Config, network: &mut dyn NetworkBinder) -> Result<JobInfo> {
    let get = |k: &str| std::env::var(k).ok();
    let (rank, size) = launcher_rank(&get)?;
    let text = get(RENDEZVOUS).ok_or_else(|| {
        Error::Config(
            "QUIVER_RENDEZVOUS is not set: the fallback bootstrap needs host:port, an address \
             of rank 0's node where rank 0 listens and every rank can connect"
                .into(),
        )
    })?;
    let key = key_from_env(&get)?.ok_or_else(|| {
        Error::Config(
            "the rendezvous bootstrap needs the job key in QUIVER_JOB_KEY (64 hex digits) or in \
             the file QUIVER_JOB_KEY_FILE names, the same for every rank \
             (e.g. `head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'`)"
                .into(),
        )
    })?;
    enter_netns(&get, rank, size)?;
    let point = text
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            Error::Config(format!(
                "QUIVER_RENDEZVOUS={text:?}: expected host:port (an address of rank 0's node)"
            ))
        })?;
    let deadline = Instant::now() + config.connect_timeout;
    let mut bind = |job_id: u64| -> Result<Option<std::net::SocketAddr>> {
        let own = if networked(config) {
            Some(bind_address(&get, false, Some(point))?)
        } else {
            None
        };
        network.bind(own, job_id, key)
    };
    let rendezvous = Rendezvous {
        point,
        text: &text,
        key: &key,
        rank,
        size,
        deadline,
    };
    let (job_id, texts) = if rank == 0 {
        rendezvous.host(&mut bind)?
    } else {
        rendezvous.join(&mut bind)?
    };
    let addrs = parse_published(&texts)?;
    let job = JobInfo {
        rank,
        size,
        job_id,
        key,
        addrs,
        links: Vec::new(),
        bootstrap: Bootstrap::Rendezvous,
        node: node_share(&get)?,
    };
    Ok(settle(job, config, network))
}

/// One rank's side of the exchange through rank 0.
struct Rendezvous<'a> {
    /// Where rank 0 listens.
    point: SocketAddr,
    /// `QUIVER_RENDEZVOUS` as given, for messages.
    text: &'a str,
    key: &'a [u8; 32],
    rank: u32,
    size: u32,
    deadline: Instant,
}

/// Binds this rank's network sockets for job `job_id`: the address bound, if any.
type Bind<'b> = dyn FnMut(u64) -> Result<Option<SocketAddr>> + 'b;

impl Rendezvous<'_> {
    /// Rank 0's side: draws the job id, binds, and answers every other rank. Returns the
    /// job id and every rank's address text.
    fn host(&self, bind: &mut Bind<'_>) -> Result<(u64, Vec<String>)> {
        let Rendezvous {
            point,
            text,
            key,
            size,
            deadline,
            ..
        } = *self;
        let listener = TcpListener::bind(point).map_err(|e| {
            Error::io(
                format!(
                    "rank 0 listening at QUIVER_RENDEZVOUS={text} (is it an address of rank 0's \
                     node, and is the port free?)"
                ),
                e,
            )
        })?;
        let job_id = u64::from_ne_bytes(random());
        let bound = bind(job_id)?;
        let texts = serve_rendezvous(&listener, key, size, job_id, address_text(bound), deadline)?;
        Ok((job_id, texts))
    }

    /// Another rank's side: says hello to rank 0, learns the job id, binds, sends its
    /// address and reads everyone's. Returns the job id and every rank's address text.
    fn join(&self, bind: &mut Bind<'_>) -> Result<(u64, Vec<String>)> {
        let Rendezvous {
            point,
            text,
            key,
            rank,
            size,
            deadline,
        } = *self;
        let mut stream = connect_rank0(point, text, deadline)?;
        let nonce: [u8; 16] = random();
        let mut hello = Vec::with_capacity(24);
        hello.extend_from_slice(&rank.to_be_bytes());
        hello.extend_from_slice(&size.to_be_bytes());
        hello.extend_from_slice(&nonce);
        let talk = |e: io::Error| Error::io(format!("rendezvous with rank 0 at {text}"), e);
        write_frame(&mut stream, key, KIND_HELLO, &hello).map_err(talk)?;
        let ident = read_frame(&mut stream, key, KIND_IDENT, 8 + 16, deadline).map_err(talk)?;
        let mut cursor = Cursor::new(&ident);
        let job_id = cursor.u64().map_err(talk)?;
        if cursor.bytes::<16>().map_err(talk)? != nonce {
            return Err(talk(invalid(
                "rank 0's answer is not for this rank's request",
            )));
        }
        let bound = bind(job_id)?;
        let own_text = address_text(bound);
        let mut addr = Vec::with_capacity(32 + own_text.len());
        addr.extend_from_slice(&rank.to_be_bytes());
        addr.extend_from_slice(&nonce);
        addr.extend_from_slice(&job_id.to_be_bytes());
        put_text(&mut addr, &own_text);
        write_frame(&mut stream, key, KIND_ADDR, &addr).map_err(talk)?;
        let max = 8 + 16 + 4 + size as usize * (2 + MAX_ADDRESS_TEXT);
        let answer = read_frame(&mut stream, key, KIND_ANSWER, max, deadline).map_err(talk)?;
        let mut cursor = Cursor::new(&answer);
        if cursor.u64().map_err(talk)? != job_id || cursor.bytes::<16>().map_err(talk)? != nonce {
            return Err(talk(invalid(
                "rank 0's answer is not for this rank's request",
            )));
        }
        if cursor.u32().map_err(talk)? != size {
            return Err(talk(invalid("rank 0 runs a job of another size")));
        }
        let texts = (0..size)
            .map(|_| cursor.text())
            .collect::<io::Result<Vec<String>>>()
            .map_err(talk)?;
        Ok((job_id, texts))
    }
}

/// Connects to rank 0's rendezvous, retrying while it is not listening yet.
fn connect_rank0(point: SocketAddr, text: &str, deadline: Instant) -> Result<TcpStream> {
    let mut backoff = Duration::from_millis(5);
    loop {
        let now = Instant::now();
        let left = deadline.saturating_duration_since(now);
        match TcpStream::connect_timeout(&point, left.max(Duration::from_millis(1))) {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(e) if Instant::now() >= deadline => {
                return Err(Error::io(
                    format!(
                        "connecting to rank 0 at QUIVER_RENDEZVOUS={text} (gave up at the \
                         connect timeout, QUIVER_CONNECT_TIMEOUT_MS)"
                    ),
                    e,
                ))
            }
            Err(_) => {
                std::thread::sleep(backoff.min(deadline.saturating_duration_since(Instant::now())));
                backoff = (backoff * 2).min(Duration::from_millis(100));
            }
        }
    }
}

/// A rank that has told rank 0 its address and waits for the answer.
struct Waiting {
    nonce: [u8; 16],
    stream: TcpStream,
}

/// Rank 0's side: accepts until every other rank has sent its address, then answers them
/// all. Returns every rank's address text.
fn serve_rendezvous(
    listener: &TcpListener,
    key: &[u8; 32],
    size: u32,
    job_id: u64,
    own_text: String,
    deadline: Instant,
) -> Result<Vec<String>> {
    let mut texts: Vec<Option<String>> = vec![None; size as usize];
    texts[0] = Some(own_text);
    let mut waiting: Vec<Waiting> = Vec::new();
    let mut missing = size - 1;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::io("configuring the rendezvous listener", e))?;
    while missing > 0 {
        let now = Instant::now();
        if now >= deadline {
            let absent: Vec<String> = texts
                .iter()
                .enumerate()
                .filter(|(_, t)| t.is_none())
                .map(|(r, _)| r.to_string())
                .collect();
            return Err(Error::io(
                "rank 0 waiting at the rendezvous",
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "ranks {} did not arrive within the connect timeout \
                         (QUIVER_CONNECT_TIMEOUT_MS): are they running, with the same job key \
                         and QUIVER_RENDEZVOUS?",
                        absent.join(",")
                    ),
                ),
            ));
        }
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io("accepting at the rendezvous", e)),
        };
        // A connection that does not complete (a stranger, a wrong key, a rank that died)
        // is dropped; the ranks that matter retry or report their own failure.
        if let Ok((rank, text, nonce, stream)) = greet(stream, key, size, job_id, deadline) {
            if texts[rank as usize].is_none() {
                texts[rank as usize] = Some(text);
                waiting.push(Waiting { nonce, stream });
                missing -= 1;
            }
        }
    }
    let texts: Vec<String> = texts.into_iter().map(Option::unwrap_or_default).collect();
    let mut answer = Vec::with_capacity(28 + texts.len() * 24);
    for mut w in waiting {
        answer.clear();
        answer.extend_from_slice(&job_id.to_be_bytes());
        answer.extend_from_slice(&w.nonce);
        answer.extend_from_slice(&size.to_be_bytes());
        for t in &texts {
            put_text(&mut answer, t);
        }
        // A rank that went away in the meantime reports its own failure.
        let _ = write_frame(&mut w.stream, key, KIND_ANSWER, &answer);
    }
    Ok(texts)
}

/// Runs HELLO / IDENT / ADDR with one connecting rank.
fn greet(
    mut stream: TcpStream,
    key: &[u8; 32],
    size: u32,
    job_id: u64,
    deadline: Instant,
) -> io::Result<(u32, String, [u8; 16], TcpStream)> {
    stream.set_nonblocking(false)?;
    let _ = stream.set_nodelay(true);
    let step = (Instant::now() + RANK_MESSAGE_TIMEOUT).min(deadline);
    let hello = read_frame(&mut stream, key, KIND_HELLO, 24, step)?;
    let mut cursor = Cursor::new(&hello);
    let (rank, their_size, nonce) = (cursor.u32()?, cursor.u32()?, cursor.bytes::<16>()?);
    if their_size != size || rank == 0 || rank >= size {
        return Err(invalid("rank or size do not fit this job"));
    }
    let mut ident = Vec::with_capacity(24);
    ident.extend_from_slice(&job_id.to_be_bytes());
    ident.extend_from_slice(&nonce);
    write_frame(&mut stream, key, KIND_IDENT, &ident)?;
    let step = (Instant::now() + RANK_MESSAGE_TIMEOUT).min(deadline);
    let addr = read_frame(&mut stream, key, KIND_ADDR, 30 + MAX_ADDRESS_TEXT, step)?;
    let mut cursor = Cursor::new(&addr);
    if cursor.u32()? != rank || cursor.bytes::<16>()? != nonce || cursor.u64()? != job_id {
        return Err(invalid("address message of another request"));
    }
    let text = cursor.text()?;
    Ok((rank, text, nonce, stream))
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

fn mac(key: &[u8; 32], body: &[u8]) -> blake3::Hash {
    blake3::keyed_hash(key, body)
}

fn write_frame(stream: &mut TcpStream, key: &[u8; 32], kind: u8, payload: &[u8]) -> io::Result<()> {
    let mut body = Vec::with_capacity(4 + FRAME_HEADER_BYTES + payload.len() + MAC_BYTES);
    let len = (FRAME_HEADER_BYTES + payload.len() + MAC_BYTES) as u32;
    body.extend_from_slice(&len.to_be_bytes());
    body.extend_from_slice(RENDEZVOUS_MAGIC);
    body.push(RENDEZVOUS_VERSION);
    body.push(kind);
    body.extend_from_slice(payload);
    let tag = mac(key, &body[4..]);
    body.extend_from_slice(tag.as_bytes());
    stream.write_all(&body)
}

/// Reads one frame of `kind` whose payload is at most `max_payload` bytes, by `deadline`,
/// and checks its MAC. Returns the payload.
fn read_frame(
    stream: &mut TcpStream,
    key: &[u8; 32],
    kind: u8,
    max_payload: usize,
    deadline: Instant,
) -> io::Result<Vec<u8>> {
    let mut read = |buf: &mut [u8]| -> io::Result<()> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "rendezvous timed out",
            ));
        }
        stream.set_read_timeout(Some(left))?;
        stream.read_exact(buf).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the peer closed the connection (wrong job key, or another job's rendezvous?)",
            ),
            _ => e,
        })
    };
    let mut len = [0u8; 4];
    read(&mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    if !(FRAME_HEADER_BYTES + MAC_BYTES..=FRAME_HEADER_BYTES + max_payload + MAC_BYTES)
        .contains(&len)
    {
        return Err(invalid("rendezvous message of an impossible length"));
    }
    let mut body = vec![0u8; len];
    read(&mut body)?;
    let (signed, tag) = body.split_at(len - MAC_BYTES);
    let tag: [u8; MAC_BYTES] = tag.try_into().map_err(|_| invalid("short MAC"))?;
    if &signed[..4] != RENDEZVOUS_MAGIC || signed[4] != RENDEZVOUS_VERSION || signed[5] != kind {
        return Err(invalid("not a quiver rendezvous message of this version"));
    }
    // blake3::Hash compares in constant time.
    if mac(key, signed) != blake3::Hash::from(tag) {
        return Err(invalid(
            "rendezvous message with a wrong MAC: the ranks do not share the job key",
        ));
    }
    Ok(signed[FRAME_HEADER_BYTES..].to_vec())
}

fn put_text(out: &mut Vec<u8>, text: &str) {
    let bytes = &text.as_bytes()[..text.len().min(MAX_ADDRESS_TEXT)];
    out.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// Reads big-endian fields off a payload, failing (never panicking) past its end.
struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Cursor { rest: bytes }
    }

    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        if self.rest.len() < n {
            return Err(invalid("rendezvous message too short"));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn bytes<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u32(&mut self) -> io::Result<u32> {
        self.bytes::<4>().map(u32::from_be_bytes)
    }

    fn u64(&mut self) -> io::Result<u64> {
        self.bytes::<8>().map(u64::from_be_bytes)
    }

    fn text(&mut self) -> io::Result<String> {
        let len = u16::from_be_bytes(self.bytes::<2>()?) as usize;
        if len > MAX_ADDRESS_TEXT {
            return Err(invalid("address text too long"));
        }
        String::from_utf8(self.take(len)?.to_vec()).map_err(|_| invalid("address text not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_authenticated() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut client = TcpStream::connect(addr).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        let key = [5u8; 32];
        let deadline = Instant::now() + Duration::from_secs(5);
        write_frame(&mut client, &key, KIND_HELLO, b"0123").unwrap();
        assert_eq!(
            read_frame(&mut server, &key, KIND_HELLO, 24, deadline).unwrap(),
            b"0123"
        );
        // Wrong key.
        write_frame(&mut client, &[6u8; 32], KIND_HELLO, b"0123").unwrap();
        let e = read_frame(&mut server, &key, KIND_HELLO, 24, deadline).unwrap_err();
        assert!(e.to_string().contains("wrong MAC"), "{e}");
        // Wrong kind.
        write_frame(&mut client, &key, KIND_ADDR, b"0123").unwrap();
        assert!(read_frame(&mut server, &key, KIND_HELLO, 24, deadline).is_err());
        // Too long for what is expected: refused before reading it.
        write_frame(&mut client, &key, KIND_HELLO, &[0u8; 100]).unwrap();
        let e = read_frame(&mut server, &key, KIND_HELLO, 24, deadline).unwrap_err();
        assert!(e.to_string().contains("impossible length"), "{e}");
        // Truncated payload fields never panic.
        let mut c = Cursor::new(&[0u8, 1, 2]);
        assert!(c.u32().is_err());
        let mut c = Cursor::new(&[0u8, 200, 1]);
        assert!(c.text().is_err());
    }
}
