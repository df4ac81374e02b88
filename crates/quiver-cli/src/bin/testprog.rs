//! `quiver-testprog`: the rank program the integration tests start, under `quiver run` or
//! by hand. Each mode is one scenario; it prints `ok ...` or the error it was asked to
//! provoke, and exits non-zero when something is wrong.
//!
//! Modes:
//! - `alltoall MESSAGES MAX_BYTES SEED`: every rank sends MESSAGES messages of random sizes
//!   (0..=MAX_BYTES) to every other rank with posted sends, receives all, verifies every byte;
//!   then prints `transports rank R bootstrap B addr A accepted N shm S datagrams_received D`.
//! - `slow-recv MESSAGES`: rank 0 sends as fast as it can, rank 1 sleeps between receives.
//! - `send-until-error`: send 256 KiB messages to rank 1 until an error; print it.
//! - `recv-until-error`: receive until an error; print it.
//! - `serve`: connect to rank 0 and send it a hello every 50 ms (a well-behaved peer).
//! - `scribble garbage|forge|truncate|huge`: connect to rank 0, send one message, then break our
//!   ring into rank 0 by writing to its memfd through /proc/self/fd (`truncate` first tries
//!   to shrink the ring and a doorbell it maps, and says whether the kernel refused;
//!   `huge` writes a rendezvous request for three quarters of the machine's memory).
//! - `victim [pooled]`: rank 0 of `scribble`: receive (into a buffer, or pooled receives,
//!   which size their buffer by the message) until an error, print it, then receive one
//!   more message from rank 2 to show other connections still work.
//! - `survive ROUNDS MAX_BYTES SEED`: all-to-all in lockstep rounds (each rank sends one
//!   message to every live peer, then receives one from each), verifying every byte, for
//!   ROUNDS rounds. Prints `ready pid P`, then `running` after 100 rounds. A peer whose
//!   connection fails (it died or froze) is dropped with a line `lost RANK KIND after MS ms:
//!   ERROR` (MS since its last message arrived); the others go on. Ends with `ok rank R
//!   finished ROUNDS rounds, N after the first loss, with ranks [...]`.
//! - `idle`: print `started`, then sleep for 30 s without calling quiver (a live but
//!   unresponsive peer, in state `S`).
//! - `timeouts MS`: with `Endpoint::set_timeout(MS)`, a `recv` nobody sends to, then sends
//!   to rank 1 until one fails; prints `recv KIND after T ms` and `send KIND after T ms`.
//! - `connect-to RANK`: connect to RANK's endpoint 0 and send it one message; prints
//!   `ok connected` or `error KIND: MESSAGE`.
//! - `threads THREADS MESSAGES MAX_BYTES SEED`: THREADS threads share the one `Context`,
//!   thread t opening its own endpoint (port t + 1) and running `alltoall`'s exchange with
//!   port t + 1 of every other rank, verifying every byte; prints `ok rank R threads T
//!   received B bytes`, then the `transports` line of `alltoall`.
//! - `sizes MAX_BYTES` (two ranks): every size of a list from 0 B to MAX_BYTES (the edges of
//!   each protocol, powers of two and their neighbours) goes from rank 0 to rank 1 and back,
//!   verified; sends rotate through `send`, `post_send` and `try_send`, receives through
//!   `recv` and `try_recv`. Prints `ok sizes N largest L shm_without_cross_memory C`.
//! - `wait-fd ROUNDS` (two ranks): rank 1 never blocks in quiver: it sleeps in poll(2) on
//!   its endpoint's descriptor (`arm`, then poll) whenever `try_recv` or `test_*` finds
//!   nothing. Rank 0 sends ROUNDS messages (after a pause long enough for rank 1 to be
//!   asleep for the first ones, then none, a yield or 1 ms: the arm/sleep races), each
//!   answered and verified; then a posted receive of 1 MiB and a posted send of 16 MiB on
//!   rank 1, each completed while it sleeps (rank 0 waits 100 ms before acting). A sleep
//!   of 10 s without a wake-up is an error (a lost wake-up). Prints `ok rank R wait-fd
//!   ROUNDS rounds, S sleeps`.
//! - `deny-cma PROGRAM [ARGS...]` (no job needed): run PROGRAM under a seccomp filter that
//!   makes cross-memory attach fail with EPERM, as Docker's default profile does.

use std::io::Write;
use std::time::{Duration, Instant};

use quiver::{Addr, Context, Endpoint, Error};

fn main() {
    quiver::init_logging_from_env();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("deny-cma") {
        deny_cma_and_exec(&args[1..]);
    }
    let result = run(&args);
    if let Err(e) = result {
        eprintln!("quiver-testprog: {e}");
        std::process::exit(1);
    }
}

type AnyResult = Result<(), Box<dyn std::error::Error>>;

/// `deny-cma PROGRAM [ARGS...]`: runs PROGRAM where cross-memory attach fails with EPERM
/// (a seccomp filter, as in a container), so that it and its children cannot use it.
fn deny_cma_and_exec(command: &[String]) -> ! {
    use std::os::unix::process::CommandExt;
    let Some((program, rest)) = command.split_first() else {
        eprintln!("quiver-testprog: deny-cma needs a program to run");
        std::process::exit(2);
    };
    if let Err(e) = quiver_transport::seccomp::deny_cross_memory_attach() {
        eprintln!("quiver-testprog: cannot install the seccomp filter: {e}");
        std::process::exit(1);
    }
    let e = std::process::Command::new(program).args(rest).exec();
    eprintln!("quiver-testprog: cannot run {program}: {e}");
    std::process::exit(1);
}

fn run(args: &[String]) -> AnyResult {
    let mode = args.first().map(String::as_str).unwrap_or("");
    let num = |i: usize, default: u64| -> u64 {
        args.get(i)
            .and_then(|s| quiver::parse_size(s).ok())
            .unwrap_or(default)
    };
    let ctx = Context::from_env()?;
    let mut ep = ctx.endpoint(0)?;
    match mode {
        "alltoall" => alltoall(&ctx, &mut ep, num(1, 4), num(2, 1 << 20), num(3, 1)),
        "sizes" => sizes(&ctx, &mut ep, num(1, 64 << 20)),
        "slow-recv" => slow_recv(&ctx, &mut ep, num(1, 2000)),
        "send-until-error" => {
            let conn = ep.connect(Addr::new(1, 0))?;
            say("started");
            let msg = vec![7u8; 256 << 10];
            loop {
                if let Err(e) = ep.send(conn, &msg) {
                    say(&format!("error: {e}"));
                    return Ok(());
                }
            }
        }
        "recv-until-error" => {
            let mut buf = vec![0u8; 1 << 20];
            say("started");
            loop {
                if let Err(e) = ep.recv(&mut buf) {
                    say(&format!("error: {e}"));
                    return Ok(());
                }
            }
        }
        "serve" => {
            let conn = ep.connect(Addr::new(0, 0))?;
            loop {
                ep.send(conn, b"hello")?;
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        "victim" => victim(&mut ep, args.get(1).map(String::as_str) == Some("pooled")),
        "survive" => survive(&ctx, &mut ep, num(1, 3000), num(2, 64 << 10), num(3, 1)),
        "idle" => {
            say("started");
            std::thread::sleep(Duration::from_secs(30));
            Ok(())
        }
        "timeouts" => {
            let limit = Duration::from_millis(num(1, 500));
            ep.set_timeout(Some(limit));
            let conn = ep.connect(Addr::new(1, 0))?;
            let mut buf = [0u8; 64];
            let start = Instant::now();
            let e = ep
                .recv(&mut buf)
                .err()
                .ok_or("a message arrived from nobody")?;
            say(&format!(
                "recv {} after {} ms: {e}",
                kind(&e),
                start.elapsed().as_millis()
            ));
            let msg = vec![1u8; 64 << 10];
            let start = Instant::now();
            let e = loop {
                if let Err(e) = ep.send(conn, &msg) {
                    break e;
                }
            };
            say(&format!(
                "send {} after {} ms: {e}",
                kind(&e),
                start.elapsed().as_millis()
            ));
            Ok(())
        }
        "connect-to" => {
            let peer = Addr::new(num(1, 1) as u32, 0);
            match ep.connect(peer).and_then(|c| ep.send(c, b"hello")) {
                Ok(()) => say("ok connected"),
                Err(e) => say(&format!("error {}: {e}", kind(&e))),
            }
            Ok(())
        }
        "threads" => threads(&ctx, num(1, 4), num(2, 100), num(3, 64 << 10), num(4, 1)),
        "scribble" => scribble(
            &mut ep,
            args.get(1).map(String::as_str).unwrap_or("garbage"),
        ),
        "wait-fd" => wait_fd(&mut ep, num(1, 1000)),
        _ => Err(format!("unknown mode {mode:?}").into()),
    }
}

/// `wait-fd ROUNDS` (module docs).
fn wait_fd(ep: &mut Endpoint, rounds: u64) -> AnyResult {
    let rank = ep.addr().rank;
    let conn = ep.connect(Addr::new(1 - rank, 0))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut sleeps = 0u64;
    for round in 0..rounds {
        let msg = pattern(round, 8 + (round % 57) as usize);
        if rank == 0 {
            match round {
                0..=2 => std::thread::sleep(Duration::from_millis(100)),
                _ if round % 3 == 0 => {}
                _ if round % 3 == 1 => std::thread::yield_now(),
                _ => std::thread::sleep(Duration::from_millis(1)),
            }
            ep.send(conn, &msg)?;
            let (len, _) = ep.recv(&mut buf)?;
            if buf[..len] != msg[..] {
                return Err(format!("round {round}: the answer differs").into());
            }
        } else {
            let mut got = None;
            sleep_on_fd(ep, &mut sleeps, |ep| match ep.try_recv(&mut buf) {
                Ok((len, _)) => {
                    got = Some(len);
                    Ok(true)
                }
                Err(Error::WouldBlock) => Ok(false),
                Err(e) => Err(e),
            })?;
            let len = got.unwrap_or(0);
            if buf[..len] != msg[..] {
                return Err(format!("round {round}: the message differs").into());
            }
            ep.send(conn, &buf[..len])?;
        }
    }
    let (big, huge) = (pattern(7, 1 << 20), pattern(9, 16 << 20));
    if rank == 0 {
        // The posted receive: announced by rank 1, filled after a pause.
        ep.recv(&mut buf)?;
        std::thread::sleep(Duration::from_millis(100));
        ep.send(conn, &big)?;
        // The posted send: taken after a pause.
        std::thread::sleep(Duration::from_millis(100));
        let got = ep.recv_pooled()?;
        if got[..] != huge[..] {
            return Err("the posted send's message differs".into());
        }
    } else {
        let request = ep.post_recv(vec![0u8; 1 << 20])?;
        ep.send(conn, b"posted")?;
        sleep_on_fd(ep, &mut sleeps, |ep| ep.test_recv(&request))?;
        let done = ep.wait_recv(request)?;
        if done.buf[..done.len] != big[..] {
            return Err("the posted receive's message differs".into());
        }
        let request = ep.post_send(conn, huge)?;
        sleep_on_fd(ep, &mut sleeps, |ep| ep.test_send(&request))?;
        ep.wait_send(request)?;
    }
    say(&format!(
        "ok rank {rank} wait-fd {rounds} rounds, {sleeps} sleeps"
    ));
    Ok(())
}

/// Calls `ready` until it says yes; between calls, arms the endpoint and sleeps in poll(2)
/// on its descriptor (counted in `sleeps`). A sleep of 10 s that nothing ends is an error.
fn sleep_on_fd(
    ep: &mut Endpoint,
    sleeps: &mut u64,
    mut ready: impl FnMut(&mut Endpoint) -> Result<bool, Error>,
) -> AnyResult {
    use std::os::fd::AsRawFd;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready(ep)? {
        if Instant::now() > deadline {
            return Err("not done within 60 s of waking and looking".into());
        }
        if !ep.arm()? {
            continue;
        }
        let mut fds = [libc::pollfd {
            fd: ep.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        if quiver_transport::sys::poll(&mut fds, Some(Duration::from_secs(10)))? == 0 {
            return Err("a lost wake-up: 10 s asleep on the endpoint's descriptor".into());
        }
        *sleeps += 1;
    }
    Ok(())
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Deterministic content of message `index` from `src` to `dst`.
fn message(seed: u64, src: u32, dst: u32, index: u64, max: u64) -> Vec<u8> {
    let mut x = seed ^ (u64::from(src) << 40) ^ (u64::from(dst) << 20) ^ index;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    next();
    // Favour small sizes but cover the whole range: pick a magnitude, then a length.
    let magnitude = next() % (64 - max.max(1).leading_zeros() as u64 + 1);
    let len = (next() % ((1u64 << magnitude).min(max) + 1)) as usize;
    let mut v = Vec::with_capacity(len);
    for _ in 0..len.div_ceil(8) {
        v.extend_from_slice(&next().to_le_bytes());
    }
    v.truncate(len);
    v
}

fn alltoall(ctx: &Context, ep: &mut Endpoint, messages: u64, max: u64, seed: u64) -> AnyResult {
    let bytes = exchange(ctx, ep, messages, max, seed)?;
    say(&format!(
        "ok rank {} received {bytes} bytes rss_kib {}",
        ctx.rank(),
        rss_kib()
    ));
    say_transports(ctx);
    Ok(())
}

/// Threads sharing one context, each driving its own endpoint (port t + 1) through
/// `exchange` with the same port of every other rank.
fn threads(ctx: &Context, threads: u64, messages: u64, max: u64, seed: u64) -> AnyResult {
    let results: Vec<Result<u64, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let port = u16::try_from(t + 1).map_err(|e| e.to_string())?;
                    let mut ep = ctx.endpoint(port).map_err(|e| e.to_string())?;
                    exchange(ctx, &mut ep, messages, max, seed ^ (t << 56))
                        .map_err(|e| format!("thread {t}: {e}"))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a thread panicked".into())))
            .collect()
    });
    let mut bytes = 0;
    for result in results {
        bytes += result?;
    }
    say(&format!(
        "ok rank {} threads {threads} received {bytes} bytes",
        ctx.rank()
    ));
    say_transports(ctx);
    Ok(())
}

/// Every rank sends `messages` messages of random sizes to the same port of every other
/// rank with posted sends, receives all and verifies every byte. Returns the bytes
/// received.
fn exchange(
    ctx: &Context,
    ep: &mut Endpoint,
    messages: u64,
    max: u64,
    seed: u64,
) -> Result<u64, Box<dyn std::error::Error>> {
    let (me, size) = (ctx.rank(), ctx.size());
    let port = ep.addr().port;
    let peers: Vec<u32> = (0..size).filter(|&r| r != me).collect();
    let mut conns = Vec::new();
    for &p in &peers {
        conns.push(ep.connect(Addr::new(p, port))?);
    }
    let mut sends = Vec::new();
    for i in 0..messages {
        for (k, &p) in peers.iter().enumerate() {
            sends.push(ep.post_send(conns[k], message(seed, me, p, i, max))?);
        }
    }
    // "done" follows the data on every connection (connections are ordered), so a
    // rank has everything once it has every peer's data and every peer's "done". Posted
    // too: a blocking send waiting for room while the peer does the same would never
    // receive.
    for &c in &conns {
        sends.push(ep.post_send(c, b"done".to_vec())?);
    }
    let mut next_index = vec![0u64; size as usize];
    let (mut bytes, mut dones) = (0u64, 0usize);
    let expected = messages * peers.len() as u64;
    let mut received = 0u64;
    while received < expected || dones < peers.len() {
        let got = ep.recv_pooled()?;
        let src = got.src().rank;
        let index = next_index[src as usize];
        if index == messages {
            if &got[..] != b"done" {
                return Err(
                    format!("rank {me}: rank {src} sent more than {messages} messages").into(),
                );
            }
            dones += 1;
            next_index[src as usize] += 1;
            continue;
        }
        let want = message(seed, src, me, index, max);
        if got[..] != want[..] {
            return Err(format!(
                "rank {me}: message {index} from rank {src} differs ({} bytes, expected {})",
                got.len(),
                want.len()
            )
            .into());
        }
        next_index[src as usize] += 1;
        received += 1;
        bytes += got.len() as u64;
    }
    for s in sends {
        ep.wait_send(s)?;
    }
    Ok(bytes)
}

/// The sizes `sizes` sends: the protocols' edges and every power of two up to `max`, with
/// their neighbours.
fn size_list(max: u64) -> Vec<u64> {
    let mut sizes = vec![0, 1, 40, 41, 4095, 4097];
    let mut power = 64;
    while power <= max {
        sizes.extend([power - 1, power, power + 1]);
        power *= 4;
    }
    sizes.push(max);
    sizes.retain(|&size| size <= max);
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// `len` bytes of a xorshift sequence seeded with `seed`.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Sends `data` the `i`-th way: blocking, posted (then waited for), or `try_send` until it
/// is taken.
fn send_by(ep: &mut Endpoint, conn: quiver::Connection, data: Vec<u8>, i: usize) -> AnyResult {
    match i % 3 {
        0 => ep.send(conn, &data)?,
        1 => {
            let request = ep.post_send(conn, data)?;
            ep.wait_send(request)?;
        }
        _ => loop {
            match ep.try_send(conn, &data) {
                Ok(()) => break,
                Err(Error::WouldBlock) => ep.progress()?,
                Err(e) => return Err(e.into()),
            }
        },
    }
    Ok(())
}

/// Receives one message into `buf` the `i`-th way: blocking, or `try_recv` until one comes.
fn recv_by(ep: &mut Endpoint, buf: &mut [u8], i: usize) -> Result<usize, Error> {
    if i.is_multiple_of(2) {
        return Ok(ep.recv(buf)?.0);
    }
    loop {
        match ep.try_recv(buf) {
            Ok((len, _)) => return Ok(len),
            Err(Error::WouldBlock) => std::hint::spin_loop(),
            Err(e) => return Err(e),
        }
    }
}

fn sizes(ctx: &Context, ep: &mut Endpoint, max: u64) -> AnyResult {
    let me = ctx.rank();
    let peer = 1 - me;
    let conn = ep.connect(Addr::new(peer, 0))?;
    let sizes = size_list(max);
    let mut buf = vec![0u8; max as usize];
    for (i, &size) in sizes.iter().enumerate() {
        let want = pattern(i as u64, size as usize);
        if me == 0 {
            send_by(ep, conn, want.clone(), i)?;
        }
        // Rank 1 receives and sends it back; rank 0 receives the echo.
        let len = recv_by(ep, &mut buf, i + me as usize)?;
        if buf[..len] != want[..] {
            return Err(format!(
                "rank {me}: the {size}-byte message arrived as {len} different bytes"
            )
            .into());
        }
        if me == 1 {
            send_by(ep, conn, buf[..len].to_vec(), i + 1)?;
        }
    }
    say(&format!(
        "ok sizes {} largest {max} shm_without_cross_memory {}",
        sizes.len(),
        ctx.stats().shm_without_cross_memory
    ));
    Ok(())
}

/// One line saying how the job was bootstrapped and which transports carried the
/// connections this rank accepted (the launcher tests check it).
fn say_transports(ctx: &Context) {
    let stats = ctx.stats();
    say(&format!(
        "transports rank {} bootstrap {} addr {} accepted {} shm {} datagrams_received {}",
        ctx.rank(),
        ctx.bootstrap(),
        ctx.local_addr()
            .map_or_else(|| "-".to_owned(), |a| a.to_string()),
        stats.connections_accepted,
        stats.shm_connections_accepted,
        stats.datagram.map_or(0, |d| d.datagrams_received),
    ));
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn slow_recv(ctx: &Context, ep: &mut Endpoint, messages: u64) -> AnyResult {
    if ctx.rank() == 0 {
        let conn = ep.connect(Addr::new(1, 0))?;
        let start = Instant::now();
        let mut would_block = 0u64;
        for i in 0..messages {
            let msg = (i as u32).to_le_bytes().repeat(256); // 1 KiB
            match ep.try_send(conn, &msg) {
                Ok(()) => {}
                Err(Error::WouldBlock) => {
                    would_block += 1;
                    ep.send(conn, &msg)?; // now block until there is room
                }
                Err(e) => return Err(e.into()),
            }
        }
        say(&format!(
            "ok sender held back {would_block} times, {} ms",
            start.elapsed().as_millis()
        ));
        let mut buf = [0u8; 8];
        ep.recv(&mut buf)?; // wait for the receiver's confirmation
    } else {
        let back = ep.connect(Addr::new(0, 0))?;
        let mut buf = vec![0u8; 2048];
        for i in 0..messages {
            if i % 64 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
            let (n, _) = ep.recv(&mut buf)?;
            let want = (i as u32).to_le_bytes().repeat(256);
            if buf[..n] != want[..] {
                return Err(format!("message {i} lost or damaged").into());
            }
        }
        say(&format!("ok received all {messages} in order"));
        ep.send(back, b"thanks")?;
    }
    Ok(())
}

fn victim(ep: &mut Endpoint, pooled: bool) -> AnyResult {
    let mut buf = vec![0u8; 1 << 20];
    say("started");
    // First the scribbler's honest message, then its damage, then rank 2's hello and more.
    let mut seen_error = false;
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let got = if pooled {
            ep.recv_pooled().map(|b| (b.len(), b.src()))
        } else {
            ep.recv(&mut buf)
        };
        match got {
            Ok((_, src)) if src.rank == 2 && seen_error => {
                say("ok other connection still works");
                return Ok(());
            }
            Ok(_) => {}
            Err(e @ (Error::Corrupt { .. } | Error::MessageTooLarge { .. })) => {
                say(&format!("error: {e}"));
                seen_error = true;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err("no corruption detected in time".into())
}

fn scribble(ep: &mut Endpoint, how: &str) -> AnyResult {
    let conn = ep.connect(Addr::new(0, 0))?;
    ep.send(conn, b"honest")?;
    std::thread::sleep(Duration::from_millis(200));
    // Find our ring into rank 0 among our mappings, as an intruder in this process would.
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let range = maps
        .lines()
        .find(|l| l.contains("memfd:quiver-ring"))
        .and_then(|l| l.split_whitespace().next())
        .ok_or("no ring mapping found")?;
    let path = format!("/proc/self/map_files/{range}");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)?;
    use std::os::unix::fs::FileExt;
    if how == "truncate" {
        // Shrinking the ring (or a doorbell mapped here) under its reader would kill it with
        // SIGBUS: the kernel must refuse (the files are sealed). Then garbage, which the
        // reader reports as Corrupt.
        let bell = maps
            .lines()
            .find(|l| l.contains("memfd:quiver-doorbell"))
            .and_then(|l| l.split_whitespace().next())
            .ok_or("no doorbell mapping found")?;
        let bell = std::fs::OpenOptions::new()
            .write(true)
            .open(format!("/proc/self/map_files/{bell}"))?;
        for (what, target) in [("ring", &file), ("doorbell", &bell)] {
            match target.set_len(0) {
                Ok(()) => say(&format!("{what} truncated")),
                Err(e) => say(&format!("{what} truncate refused: {e}")),
            }
        }
    }
    match how {
        "garbage" | "truncate" => {
            let len = file.metadata()?.len() as usize;
            let mut x = 0x2545_f491_4f6c_dd1du64;
            let junk: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            file.write_all_at(&junk, 0)?;
        }
        "forge" => {
            // A record with a valid stamp and an impossible length, right where the reader
            // looks next (our honest message took the first 64 bytes of data).
            let mut salt = [0u8; 8];
            file.read_exact_at(&mut salt, 152)?;
            let salt = u64::from_ne_bytes(salt);
            let pos = 64u64;
            let mut rec = [0u8; 24];
            rec[..8].copy_from_slice(&((pos + 1) ^ salt).to_ne_bytes());
            rec[8] = 1; // Msg
            rec[12..16].copy_from_slice(&u32::MAX.to_ne_bytes());
            rec[16..24].copy_from_slice(&u64::MAX.to_ne_bytes());
            // Write the header fields first and the stamp last, as a real producer would.
            file.write_all_at(&rec[8..], 256 + pos + 8)?;
            file.write_all_at(&rec[..8], 256 + pos)?;
        }
        "huge" => {
            // A rendezvous request for three quarters of this machine's memory, right where
            // the reader looks next: a pooled receive would size its buffer by it.
            let memory: u64 = std::fs::read_to_string("/proc/meminfo")?
                .lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .ok_or("no MemTotal in /proc/meminfo")?
                * 1024;
            let len = memory / 4 * 3;
            let mut salt = [0u8; 8];
            file.read_exact_at(&mut salt, 152)?;
            let salt = u64::from_ne_bytes(salt);
            let pos = 64u64;
            let mut rec = [0u8; 40];
            rec[..8].copy_from_slice(&((pos + 1) ^ salt).to_ne_bytes());
            rec[8] = 3; // Rndv
            rec[12..16].copy_from_slice(&16u32.to_ne_bytes());
            rec[16..24].copy_from_slice(&len.to_ne_bytes());
            rec[24..32].copy_from_slice(&0x1000u64.to_ne_bytes());
            rec[32..40].copy_from_slice(&len.to_ne_bytes());
            file.write_all_at(&rec[8..], 256 + pos + 8)?;
            file.write_all_at(&rec[..8], 256 + pos)?;
            say(&format!("announced {len} bytes"));
        }
        other => return Err(format!("unknown scribble {other:?}").into()),
    }
    say("scribbled");
    std::thread::sleep(Duration::from_secs(30));
    Ok(())
}

/// The variant name of an error, for the tests to check.
fn kind(e: &Error) -> &'static str {
    match e {
        Error::PeerDead { .. } => "PeerDead",
        Error::PeerStopped { .. } => "PeerStopped",
        Error::PeerClosed { .. } => "PeerClosed",
        Error::SendDeadlock { .. } => "SendDeadlock",
        Error::Corrupt { .. } => "Corrupt",
        Error::Unreachable { .. } => "Unreachable",
        Error::Refused { .. } => "Refused",
        Error::WrongKey { .. } => "WrongKey",
        Error::VersionMismatch { .. } => "VersionMismatch",
        Error::PermissionDenied { .. } => "PermissionDenied",
        Error::OutOfSharedMemory { .. } => "OutOfSharedMemory",
        Error::MessageTooLarge { .. } => "MessageTooLarge",
        Error::Timeout { .. } => "Timeout",
        Error::Io { .. } => "Io",
        _ => "Other",
    }
}

fn survive(ctx: &Context, ep: &mut Endpoint, rounds: u64, max: u64, seed: u64) -> AnyResult {
    let (me, size) = (ctx.rank(), ctx.size());
    let mut live: Vec<u32> = (0..size).filter(|&r| r != me).collect();
    let mut conns = std::collections::HashMap::new();
    for &p in &live {
        conns.insert(p, ep.connect(Addr::new(p, 0))?);
    }
    say(&format!("ready pid {}", std::process::id()));
    let mut received = vec![0u64; size as usize];
    let mut last_heard = vec![Instant::now(); size as usize];
    let mut lost: Vec<u32> = Vec::new();
    let mut first_loss_round = None;
    // A failed peer: drop it (its later messages and errors are ignored).
    let mut drop_peer = |peer: u32,
                         e: &Error,
                         live: &mut Vec<u32>,
                         lost: &mut Vec<u32>,
                         last_heard: &[Instant],
                         round: u64| {
        if let Some(at) = live.iter().position(|&p| p == peer) {
            live.remove(at);
            lost.push(peer);
            first_loss_round.get_or_insert(round);
            say(&format!(
                "lost {peer} {} after {} ms: {e}",
                kind(e),
                last_heard[peer as usize].elapsed().as_millis()
            ));
        }
    };
    let failed_peer = |e: &Error| -> Option<u32> {
        match e {
            Error::PeerDead { .. }
            | Error::PeerStopped { .. }
            | Error::PeerClosed { .. }
            | Error::Unreachable { .. } => e.peer().map(|p| p.rank),
            _ => None,
        }
    };
    for round in 0..rounds {
        if round == 100 {
            say("running");
        }
        for &p in &live.clone() {
            let msg = message(seed, me, p, round, max);
            if let Err(e) = ep.send(conns[&p], &msg) {
                match failed_peer(&e) {
                    Some(peer) => drop_peer(peer, &e, &mut live, &mut lost, &last_heard, round),
                    None => return Err(e.into()),
                }
            }
        }
        while live.iter().any(|&p| received[p as usize] <= round) {
            match ep.recv_pooled() {
                Ok(got) => {
                    let src = got.src().rank;
                    if !live.contains(&src) {
                        continue;
                    }
                    let index = received[src as usize];
                    if got[..] != message(seed, src, me, index, max)[..] {
                        return Err(
                            format!("rank {me}: message {index} from rank {src} differs").into(),
                        );
                    }
                    received[src as usize] += 1;
                    last_heard[src as usize] = Instant::now();
                }
                Err(e) => match failed_peer(&e) {
                    Some(peer) => drop_peer(peer, &e, &mut live, &mut lost, &last_heard, round),
                    None => return Err(e.into()),
                },
            }
        }
    }
    let after = first_loss_round.map_or(0, |r| rounds - r);
    say(&format!(
        "ok rank {me} finished {rounds} rounds, {after} after the first loss, with ranks {live:?}, lost {lost:?}"
    ));
    Ok(())
}
