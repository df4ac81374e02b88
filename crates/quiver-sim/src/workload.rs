//! Applications: a scripted sender and a verifying receiver.
//!
//! Layer: test infrastructure, under `sim.rs`. It owns the scripts and the byte checks; it
//! must not touch a connection except through its two traits.
//!
//! Message contents are a pure function of (stream seed, message index, byte offset), so
//! the receiver checks every byte it reads by regenerating it: nothing is stored, and a
//! message delivered twice, out of order, truncated or changed is caught on the first bad
//! byte (the index is part of the content, so message 3 delivered where 4 is expected
//! differs). The apps talk to a connection through two small traits so they can be tested
//! without the protocol core.

use quiver_proto::reliable::{PostedBuffers, PostedRead};

use crate::rng::{mix64, SimRng};

/// Largest chunk the apps move per call (bounds the scratch buffers).
pub const APP_CHUNK_BYTES: usize = 64 * 1024;

/// The sending half of a connection, as an application sees it.
pub trait MessageWriter {
    /// Starts a message of `length_bytes` with `tag` (0: untagged); false when the
    /// connection cannot take one now.
    fn start_message(&mut self, length_bytes: u64, tag: u64) -> bool;
    /// Writes the next bytes of the current message; returns how many were taken.
    fn write_message(&mut self, data: &[u8]) -> usize;
    /// Bytes the connection can take now.
    fn send_capacity(&self) -> usize;
    /// Lends up to `len` next bytes of the current message without copying them (the
    /// sender keeps the message and passes it with every transmit); returns how many.
    /// A connection that cannot lend takes none.
    fn lend_message(&mut self, _len: u64) -> u64 {
        0
    }
    /// Lent bytes neither acknowledged nor adopted: the sender keeps its message meanwhile.
    fn lent_bytes(&self) -> u64 {
        0
    }
    /// Copies up to `max_bytes` of the lent, unacknowledged bytes from `message` into the
    /// connection (the highest first); returns how many.
    fn adopt_lent(&mut self, _message: &[u8], _max_bytes: u64) -> u64 {
        0
    }
    /// Lends up to `len` next bytes of the current message under `token` (a posted send:
    /// the sender keeps the message until the token is released); returns how many.
    fn lend_message_as(&mut self, _token: u64, _len: u64) -> u64 {
        0
    }
    /// The token of a message lent with `lend_message_as` that the connection no longer
    /// needs (all acknowledged, or the connection failed).
    fn poll_released(&mut self) -> Option<u64> {
        None
    }
}

/// How a sender hands messages over in place (lends them, as a udp send in place does)
/// instead of writing them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LendPolicy {
    /// Messages at least this long are lent; shorter ones are written.
    pub min_message_bytes: u64,
    /// Once a message is all lent, each pump adopts this many of its unacknowledged bytes
    /// (0: none, the sender waits for the acknowledgements; `u64::MAX`: all at once).
    /// Unused with `posted_window`.
    pub adopt_step_bytes: u64,
    /// 0: one message lent at a time, adopted per `adopt_step_bytes` (a blocking send in
    /// place). N > 0: posted sends: each message is lent under its index as the token and
    /// never adopted; the sender goes on with the next while up to N messages are lent,
    /// and reuses a message's buffer (overwritten) only once its token is released.
    pub posted_window: usize,
}

/// A message the sender lent under a token (a posted send), and its buffer.
#[derive(Debug)]
struct Posted {
    token: u64,
    buffer: Vec<u8>,
    /// The connection released it: the buffer was overwritten and waits for reuse (a
    /// read from it now arrives wrong).
    released: bool,
}

/// The receiving half of a connection, as an application sees it.
pub trait MessageReader {
    /// Length of the next in-order message, once it has started to arrive.
    fn peek_message_len(&self) -> Option<u64>;
    /// The tag of the message being read, or of the last one read.
    fn message_tag(&self) -> u64;
    /// Reads the next bytes of the current message: (bytes copied, message complete).
    fn read_message(&mut self, out: &mut [u8]) -> (usize, bool);
    /// Posts a reader of `capacity` bytes under `token` (`ReliableConnection::post_reader`);
    /// false when not taken (the default: a reader without posted readers).
    fn post_reader(&mut self, _token: u64, _capacity: usize) -> bool {
        false
    }
    /// Lets the posted readers claim and read what they can (`read_posted`).
    fn read_posted(&mut self, _buffers: &mut dyn PostedBuffers) {}
    /// The next posted reader that finished (`poll_posted`).
    fn poll_posted(&mut self) -> Option<PostedRead> {
        None
    }
}

/// A receiver that reads with posted readers (`ReliableConnection::post_reader`) instead of
/// `read_message`: datagrams reach the connection with `handle_datagram_posted`, so frames
/// of the next messages go straight to their readers' buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostedReceives {
    /// Readers kept posted (at least 1).
    pub window: usize,
    /// Every `small_every`-th reader (0: none) gets a buffer of [`SMALL_READER_BYTES`]:
    /// most messages are longer, so it finishes `TooSmall` and its message goes to the next.
    pub small_every: u64,
}

/// Capacity of the deliberately small posted readers ([`PostedReceives::small_every`]).
pub const SMALL_READER_BYTES: usize = 1000;

/// Posted readers' buffers (token, buffer), in posting order.
#[derive(Debug, Default)]
pub struct ReaderBuffers(Vec<(u64, Vec<u8>)>);

impl PostedBuffers for ReaderBuffers {
    fn buffer(&mut self, token: u64) -> Option<&mut [u8]> {
        self.0
            .iter_mut()
            .find(|(held, _)| *held == token)
            .map(|(_, buffer)| buffer.as_mut_slice())
    }
}

/// The tag message `message_index` is sent with (deterministic; 0 for about a quarter of
/// the messages: untagged).
pub fn message_tag(stream_seed: u64, message_index: u64) -> u64 {
    let tag = mix64(stream_seed ^ 0x7461_6773 ^ mix64(message_index.wrapping_add(7)));
    // A quarter of the messages untagged, so that tagged and untagged ones interleave.
    if tag & 3 == 0 {
        0
    } else {
        tag
    }
}

/// Fills `out` with the bytes of message `message_index` starting at `offset`.
pub fn fill_content(stream_seed: u64, message_index: u64, offset: u64, out: &mut [u8]) {
    let key = mix64(stream_seed ^ mix64(message_index.wrapping_add(1)));
    let mut position = offset;
    let mut written = 0;
    while written < out.len() {
        let word = mix64(key ^ (position >> 3)).to_le_bytes();
        let start = (position & 7) as usize;
        let take = (8 - start).min(out.len() - written);
        out[written..written + take].copy_from_slice(&word[start..start + take]);
        written += take;
        position += take as u64;
    }
}

/// A list of message sizes plus the seed their contents derive from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageScript {
    /// Seed of the contents.
    pub stream_seed: u64,
    /// Size of each message in bytes, in sending order.
    pub sizes: Vec<u64>,
}

impl MessageScript {
    /// `count` messages with sizes drawn from a mix: empty, tiny, about one datagram, and
    /// multi-datagram up to `max_bytes`.
    pub fn mixed(rng: &mut SimRng, count: usize, max_bytes: u64) -> Self {
        let sizes = (0..count)
            .map(|_| match rng.below(8) {
                0 => 0,
                1 | 2 => rng.range_inclusive(1, 16.min(max_bytes)),
                3 | 4 => rng.range_inclusive(1, 1500.min(max_bytes)),
                _ => rng.range_inclusive(1, max_bytes),
            })
            .collect();
        Self {
            stream_seed: rng.next_u64(),
            sizes,
        }
    }

    /// Messages of exactly the given sizes.
    pub fn fixed(stream_seed: u64, sizes: Vec<u64>) -> Self {
        Self { stream_seed, sizes }
    }

    /// Sum of all sizes.
    pub fn total_bytes(&self) -> u64 {
        self.sizes.iter().sum()
    }
}

/// Writes the script's messages into a connection as fast as it takes them.
#[derive(Debug)]
pub struct SenderApp {
    script: MessageScript,
    next_message: usize,
    offset_bytes: u64,
    in_message: bool,
    scratch: Vec<u8>,
    bytes_written: u64,
    /// Lends messages instead of writing them when set.
    lend: Option<LendPolicy>,
    /// The message being lent (all of it), or empty. Overwritten once its lend is over,
    /// as an application reusing its buffer would: a byte the connection read from it too
    /// late arrives wrong.
    lent: Vec<u8>,
    /// Bytes adopted so far.
    bytes_adopted: u64,
    /// Posted messages not yet released, and released ones whose buffers wait for reuse.
    posted: Vec<Posted>,
    /// Posted messages whose tokens were released.
    posted_released: u64,
    /// Messages posted (lent under a token).
    posted_total: u64,
}

impl SenderApp {
    /// A sender at the start of `script`.
    pub fn new(script: MessageScript) -> Self {
        Self {
            script,
            next_message: 0,
            offset_bytes: 0,
            in_message: false,
            scratch: vec![0; APP_CHUNK_BYTES],
            bytes_written: 0,
            lend: None,
            lent: Vec::new(),
            bytes_adopted: 0,
            posted: Vec::new(),
            posted_released: 0,
            posted_total: 0,
        }
    }

    /// A sender that lends its messages per `policy` (see [`LendPolicy`]).
    pub fn lending(script: MessageScript, policy: Option<LendPolicy>) -> Self {
        Self {
            lend: policy,
            ..Self::new(script)
        }
    }

    /// The message whose bytes the connection may have lent (pass it to
    /// `poll_transmit_lent`); empty when none is being lent.
    pub fn lent_message(&self) -> &[u8] {
        &self.lent
    }

    /// The message posted under `token` (see [`LendPolicy::posted_window`]), also after
    /// its release until its buffer is reused (then overwritten).
    pub fn posted_message(&self, token: u64) -> Option<&[u8]> {
        self.posted
            .iter()
            .find(|posted| posted.token == token)
            .map(|posted| posted.buffer.as_slice())
    }

    /// Messages posted and not yet released by the connection.
    pub fn posted_outstanding(&self) -> u64 {
        self.posted_total - self.posted_released
    }

    /// Bytes of lent messages the connection copied after all (adopted).
    pub fn bytes_adopted(&self) -> u64 {
        self.bytes_adopted
    }

    /// True when every message has been fully handed to the connection.
    pub fn is_done(&self) -> bool {
        self.next_message == self.script.sizes.len()
    }

    /// Bytes handed to the connection so far.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// Messages in the script.
    pub fn messages_scripted(&self) -> usize {
        self.script.sizes.len()
    }

    /// Messages fully handed to the connection so far.
    pub fn messages_written(&self) -> usize {
        self.next_message
    }

    /// Hands the connection as much as it takes now; returns bytes written by this call.
    pub fn pump(&mut self, connection: &mut dyn MessageWriter) -> u64 {
        let mut written_now = 0;
        self.take_released(connection);
        let window = self.lend.map_or(0, |policy| policy.posted_window);
        while self.next_message < self.script.sizes.len() {
            let size = self.script.sizes[self.next_message];
            if !self.in_message {
                let lends = self
                    .lend
                    .is_some_and(|policy| size > 0 && size >= policy.min_message_bytes);
                if window > 0 && lends && self.posted_outstanding() >= window as u64 {
                    break;
                }
                let tag = message_tag(self.script.stream_seed, self.next_message as u64);
                if !connection.start_message(size, tag) {
                    break;
                }
                if window > 0 && lends {
                    self.in_message = true;
                    self.offset_bytes = 0;
                    self.post_current(size);
                    written_now += self.pump_posted(connection, size);
                    if self.in_message {
                        break;
                    }
                    continue;
                }
                self.in_message = true;
                self.offset_bytes = 0;
                if self
                    .lend
                    .is_some_and(|policy| size > 0 && size >= policy.min_message_bytes)
                {
                    // Invariant: scripts hold messages that fit memory (the sims make them).
                    self.lent.resize(size as usize, 0);
                    fill_content(
                        self.script.stream_seed,
                        self.next_message as u64,
                        0,
                        &mut self.lent,
                    );
                }
            }
            if window > 0 && self.posted_message(self.next_message as u64).is_some() {
                written_now += self.pump_posted(connection, size);
                if self.in_message {
                    break;
                }
                continue;
            }
            if !self.lent.is_empty() {
                let lent_now = self.pump_lent(connection, size);
                written_now += lent_now;
                if self.in_message {
                    break;
                }
                continue;
            }
            let remaining = size - self.offset_bytes;
            if remaining > 0 {
                let chunk = remaining
                    .min(connection.send_capacity() as u64)
                    .min(APP_CHUNK_BYTES as u64) as usize;
                if chunk == 0 {
                    break;
                }
                let buffer = &mut self.scratch[..chunk];
                fill_content(
                    self.script.stream_seed,
                    self.next_message as u64,
                    self.offset_bytes,
                    buffer,
                );
                let taken = connection.write_message(buffer);
                assert!(
                    taken <= chunk,
                    "write_message took {taken} of {chunk} bytes"
                );
                self.offset_bytes += taken as u64;
                self.bytes_written += taken as u64;
                written_now += taken as u64;
                if taken == 0 {
                    break;
                }
            }
            if self.offset_bytes == size {
                self.in_message = false;
                self.next_message += 1;
            }
        }
        written_now
    }

    /// Marks the messages whose tokens the connection released, and overwrites their
    /// buffers (an application reusing them). [`Self::pump`] does this first.
    pub fn take_released(&mut self, connection: &mut dyn MessageWriter) {
        while let Some(token) = connection.poll_released() {
            let posted = self
                .posted
                .iter_mut()
                .find(|posted| posted.token == token && !posted.released);
            let Some(posted) = posted else {
                panic!("token {token} released but not posted (or released twice)");
            };
            posted.released = true;
            for (index, byte) in posted.buffer.iter_mut().enumerate() {
                *byte = !(index as u8) ^ 0xa5;
            }
            self.posted_released += 1;
        }
    }

    /// Puts the current message (of `size` bytes) in a posted buffer: a released one's
    /// (the oldest) when there is one, else a new one.
    fn post_current(&mut self, size: u64) {
        let reused = self.posted.iter().position(|posted| posted.released);
        let mut buffer = match reused {
            Some(index) => self.posted.remove(index).buffer,
            None => Vec::new(),
        };
        // Invariant: scripts hold messages that fit memory (the sims make them).
        buffer.resize(size as usize, 0);
        fill_content(
            self.script.stream_seed,
            self.next_message as u64,
            0,
            &mut buffer,
        );
        self.posted.push(Posted {
            token: self.next_message as u64,
            buffer,
            released: false,
        });
        self.posted_total += 1;
    }

    /// Lends the current message's bytes from `offset_bytes` on with `lend` (which lends up
    /// to the count it is given and returns how many it took) until it takes none or the
    /// message of `size` bytes is all lent. Returns the bytes lent.
    fn lend_rest(&mut self, size: u64, mut lend: impl FnMut(u64) -> u64) -> u64 {
        let mut lent_now = 0;
        while self.offset_bytes < size {
            let asked = size - self.offset_bytes;
            let taken = lend(asked);
            assert!(
                taken <= asked,
                "the connection lent {taken} of {asked} bytes"
            );
            if taken == 0 {
                break;
            }
            self.offset_bytes += taken;
            self.bytes_written += taken;
            lent_now += taken;
        }
        lent_now
    }

    /// Lends more of the current posted message; the sender moves on to the next message
    /// once all of it is lent (not acknowledged). Returns the bytes lent by this call.
    fn pump_posted(&mut self, connection: &mut dyn MessageWriter, size: u64) -> u64 {
        let token = self.next_message as u64;
        let lent_now = self.lend_rest(size, |len| connection.lend_message_as(token, len));
        if self.offset_bytes == size {
            self.in_message = false;
            self.next_message += 1;
        }
        lent_now
    }

    /// Lends more of the current message (all of it in `lent`), adopts per the policy once
    /// all is lent, and ends the message once nothing is lent any more. Returns the bytes
    /// lent by this call.
    fn pump_lent(&mut self, connection: &mut dyn MessageWriter, size: u64) -> u64 {
        let lent_now = self.lend_rest(size, |len| connection.lend_message(len));
        if self.offset_bytes < size {
            return lent_now;
        }
        let step = self.lend.map_or(u64::MAX, |policy| policy.adopt_step_bytes);
        if step > 0 {
            self.bytes_adopted += connection.adopt_lent(&self.lent, step);
        }
        if connection.lent_bytes() > 0 {
            return lent_now;
        }
        // The lend is over: the connection must not read the message any more.
        for (index, byte) in self.lent.iter_mut().enumerate() {
            *byte = !(index as u8);
        }
        self.lent.clear();
        self.in_message = false;
        self.next_message += 1;
        lent_now
    }
}

/// Reads messages from a connection and checks each byte against the script.
#[derive(Debug)]
pub struct ReceiverApp {
    script: MessageScript,
    next_message: usize,
    offset_bytes: u64,
    scratch: Vec<u8>,
    expected: Vec<u8>,
    bytes_read: u64,
    /// Reads with posted readers instead (see [`PostedReceives`]).
    posted: Option<PostedReceives>,
    buffers: ReaderBuffers,
    next_token: u64,
    /// Readers that finished `TooSmall`.
    too_small: u64,
}

impl ReceiverApp {
    /// A receiver expecting `script` from its start.
    pub fn new(script: MessageScript) -> Self {
        Self {
            script,
            next_message: 0,
            offset_bytes: 0,
            scratch: vec![0; APP_CHUNK_BYTES],
            expected: vec![0; APP_CHUNK_BYTES],
            bytes_read: 0,
            posted: None,
            buffers: ReaderBuffers::default(),
            next_token: 0,
            too_small: 0,
        }
    }

    /// A receiver expecting `script` that reads per `posted` (None: with `read_message`).
    pub fn posting(script: MessageScript, posted: Option<PostedReceives>) -> Self {
        Self {
            posted,
            ..Self::new(script)
        }
    }

    /// The posted readers' buffers, for `handle_datagram_posted`; None when this receiver
    /// does not post.
    pub fn posted_buffers(&mut self) -> Option<&mut ReaderBuffers> {
        self.posted.is_some().then_some(&mut self.buffers)
    }

    /// Bytes the connection may count as read before this receiver does: with posted
    /// readers, a message being read into its buffer is counted only once whole.
    pub fn unseen_read_bytes(&self) -> u64 {
        if self.posted.is_some() {
            self.script.sizes.iter().copied().max().unwrap_or(0)
        } else {
            0
        }
    }

    /// Posted readers that finished `TooSmall`.
    pub fn too_small(&self) -> u64 {
        self.too_small
    }

    /// Messages completely received and verified.
    pub fn messages_received(&self) -> usize {
        self.next_message
    }

    /// Bytes received and verified.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// True when the whole script has been received.
    pub fn is_done(&self) -> bool {
        self.next_message == self.script.sizes.len()
    }

    /// Reads up to `max_bytes` (and whatever empty messages are ready) and verifies them.
    /// Returns the bytes read by this call.
    ///
    /// # Errors
    /// A description of the first violation: an extra message, a wrong length, wrong bytes,
    /// or a message completing early or late.
    pub fn pump(
        &mut self,
        connection: &mut dyn MessageReader,
        max_bytes: u64,
    ) -> Result<u64, String> {
        if let Some(posted) = self.posted {
            return self.pump_posted(connection, posted);
        }
        let mut read_now = 0u64;
        loop {
            if self.offset_bytes == 0 {
                let Some(length) = connection.peek_message_len() else {
                    break;
                };
                let Some(&expected) = self.script.sizes.get(self.next_message) else {
                    return Err(format!(
                        "extra message of {length} bytes delivered after all {} scripted \
                         messages (duplicate delivery?)",
                        self.script.sizes.len()
                    ));
                };
                if length != expected {
                    return Err(format!(
                        "message {} announced with length {length}, expected {expected}",
                        self.next_message
                    ));
                }
            }
            let size = self.script.sizes[self.next_message];
            let remaining = size - self.offset_bytes;
            let budget = max_bytes - read_now;
            if remaining > 0 && budget == 0 {
                break;
            }
            let chunk = remaining.min(budget).min(APP_CHUNK_BYTES as u64) as usize;
            // A buffer as large as the chunk: a core that copies more than the message has
            // left shows up as a length or content error.
            let (count, complete) = connection.read_message(&mut self.scratch[..chunk.max(1)]);
            self.verify_chunk(count, complete, size)?;
            read_now += count as u64;
            if complete {
                let expected_tag = message_tag(self.script.stream_seed, self.next_message as u64);
                let tag = connection.message_tag();
                if tag != expected_tag {
                    return Err(format!(
                        "message {} read with tag {tag:#x}, expected {expected_tag:#x}",
                        self.next_message
                    ));
                }
                self.next_message += 1;
                self.offset_bytes = 0;
            } else if count == 0 {
                break;
            }
        }
        Ok(read_now)
    }

    /// [`Self::pump`] with posted readers: takes the finished ones (verifying each message
    /// whole), posts new ones up to the window, and lets them read.
    fn pump_posted(
        &mut self,
        connection: &mut dyn MessageReader,
        posted: PostedReceives,
    ) -> Result<u64, String> {
        let mut read_now = 0u64;
        loop {
            let mut progress = false;
            while let Some(done) = connection.poll_posted() {
                progress = true;
                read_now += self.finished(done)?;
            }
            let largest = self.script.sizes.iter().copied().max().unwrap_or(0) as usize;
            while self.buffers.0.len() < posted.window.max(1) {
                let small = posted.small_every > 0
                    && self.next_token % posted.small_every == posted.small_every - 1;
                let capacity = if small { SMALL_READER_BYTES } else { largest };
                if !connection.post_reader(self.next_token, capacity) {
                    break;
                }
                self.buffers.0.push((self.next_token, vec![0xA5; capacity]));
                self.next_token += 1;
            }
            connection.read_posted(&mut self.buffers);
            while let Some(done) = connection.poll_posted() {
                progress = true;
                read_now += self.finished(done)?;
            }
            if !progress {
                return Ok(read_now);
            }
        }
    }

    /// A posted reader finished: verifies its message (or its being too small). Returns
    /// the bytes read.
    fn finished(&mut self, done: PostedRead) -> Result<u64, String> {
        match done {
            PostedRead::Complete {
                token, len, tag, ..
            } => {
                if self.buffers.0.first().map(|(held, _)| *held) != Some(token) {
                    return Err(format!(
                        "posted reader {token} completed out of posting order"
                    ));
                }
                let (_, buffer) = self.buffers.0.remove(0);
                let index = self.next_message;
                let Some(&size) = self.script.sizes.get(index) else {
                    return Err(format!(
                        "extra message of {len} bytes delivered after all {} scripted messages",
                        self.script.sizes.len()
                    ));
                };
                if len != size {
                    return Err(format!(
                        "message {index} delivered with length {len}, expected {size}"
                    ));
                }
                let expected_tag = message_tag(self.script.stream_seed, index as u64);
                if tag != expected_tag {
                    return Err(format!(
                        "message {index} delivered with tag {tag:#x}, expected {expected_tag:#x}"
                    ));
                }
                let mut offset = 0usize;
                while offset < len as usize {
                    let count = (len as usize - offset).min(APP_CHUNK_BYTES);
                    let expected = &mut self.expected[..count];
                    fill_content(
                        self.script.stream_seed,
                        index as u64,
                        offset as u64,
                        expected,
                    );
                    if buffer[offset..offset + count] != *expected {
                        let first_bad = (0..count)
                            .find(|&at| buffer[offset + at] != expected[at])
                            .unwrap_or(0);
                        return Err(format!(
                            "message {index} of {size} bytes (posted reader {token}): wrong \
                             byte at offset {}",
                            offset + first_bad
                        ));
                    }
                    offset += count;
                }
                self.next_message += 1;
                self.bytes_read += len;
                Ok(len)
            }
            PostedRead::TooSmall { token, len } => {
                let Some(at) = self.buffers.0.iter().position(|(held, _)| *held == token) else {
                    return Err(format!("unknown posted reader {token} finished"));
                };
                let (_, buffer) = self.buffers.0.remove(at);
                if len <= buffer.len() as u64 {
                    return Err(format!(
                        "posted reader {token} of {} bytes refused a message of {len}",
                        buffer.len()
                    ));
                }
                if buffer.iter().any(|&byte| byte != 0xA5) {
                    return Err(format!("posted reader {token} refused, yet written to"));
                }
                self.too_small += 1;
                Ok(0)
            }
        }
    }

    fn verify_chunk(&mut self, count: usize, complete: bool, size: u64) -> Result<(), String> {
        let index = self.next_message;
        if self.offset_bytes + count as u64 > size {
            return Err(format!(
                "message {index}: read past its end ({} + {count} > {size} bytes)",
                self.offset_bytes
            ));
        }
        let expected = &mut self.expected[..count];
        fill_content(
            self.script.stream_seed,
            index as u64,
            self.offset_bytes,
            expected,
        );
        if self.scratch[..count] != *expected {
            let first_bad = (0..count)
                .find(|&position| self.scratch[position] != expected[position])
                .unwrap_or(0);
            return Err(format!(
                "message {index} of {size} bytes: wrong byte at offset {} (got {:#04x}, \
                 expected {:#04x})",
                self.offset_bytes + first_bad as u64,
                self.scratch[first_bad],
                expected[first_bad]
            ));
        }
        self.offset_bytes += count as u64;
        self.bytes_read += count as u64;
        let at_end = self.offset_bytes == size;
        if complete != at_end {
            return Err(format!(
                "message {index}: completion flag {complete} at offset {} of {size} bytes",
                self.offset_bytes
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    /// An in-memory pipe with a byte capacity: messages as (length, bytes so far).
    struct Pipe {
        capacity_bytes: usize,
        buffered_bytes: usize,
        messages: VecDeque<(u64, VecDeque<u8>)>,
        /// The tags of the messages in `messages`, and of the last one read.
        tags: VecDeque<u64>,
        last_tag: u64,
        writing: Option<u64>,
        read_so_far: u64,
    }

    impl Pipe {
        fn new(capacity_bytes: usize) -> Self {
            Self {
                capacity_bytes,
                buffered_bytes: 0,
                messages: VecDeque::new(),
                tags: VecDeque::new(),
                last_tag: 0,
                writing: None,
                read_so_far: 0,
            }
        }
    }

    impl MessageWriter for Pipe {
        fn start_message(&mut self, length_bytes: u64, tag: u64) -> bool {
            if self.writing.is_some() {
                return false;
            }
            self.messages.push_back((length_bytes, VecDeque::new()));
            self.tags.push_back(tag);
            if length_bytes > 0 {
                self.writing = Some(length_bytes);
            }
            true
        }
        fn write_message(&mut self, data: &[u8]) -> usize {
            let Some(left) = self.writing else { return 0 };
            let take = data.len().min(self.send_capacity()).min(left as usize);
            let last = self.messages.back_mut().expect("started");
            last.1.extend(&data[..take]);
            self.buffered_bytes += take;
            if left as usize == take {
                self.writing = None;
            } else {
                self.writing = Some(left - take as u64);
            }
            take
        }
        fn send_capacity(&self) -> usize {
            self.capacity_bytes - self.buffered_bytes
        }
    }

    impl MessageReader for Pipe {
        fn peek_message_len(&self) -> Option<u64> {
            let (length, bytes) = self.messages.front()?;
            (*length == 0 || !bytes.is_empty() || self.read_so_far > 0).then_some(*length)
        }
        fn message_tag(&self) -> u64 {
            if self.read_so_far > 0 {
                self.tags.front().copied().unwrap_or(0)
            } else {
                self.last_tag
            }
        }
        fn read_message(&mut self, out: &mut [u8]) -> (usize, bool) {
            let Some((length, bytes)) = self.messages.front_mut() else {
                return (0, false);
            };
            let take = out.len().min(bytes.len());
            for slot in out.iter_mut().take(take) {
                *slot = bytes.pop_front().expect("counted");
            }
            self.buffered_bytes -= take;
            self.read_so_far += take as u64;
            let complete = self.read_so_far == *length;
            if complete {
                self.messages.pop_front();
                self.last_tag = self.tags.pop_front().unwrap_or(0);
                self.read_so_far = 0;
            }
            (take, complete)
        }
    }

    #[test]
    fn content_is_deterministic_and_offset_addressable() {
        let mut whole = vec![0u8; 100];
        fill_content(9, 3, 0, &mut whole);
        for start in 0..100 {
            let mut part = vec![0u8; 100 - start];
            fill_content(9, 3, start as u64, &mut part);
            assert_eq!(part, whole[start..]);
        }
        let mut other = vec![0u8; 100];
        fill_content(9, 4, 0, &mut other);
        assert_ne!(other, whole);
    }

    #[test]
    fn sender_and_receiver_agree_through_a_small_pipe() {
        let mut rng = SimRng::new(5);
        let script = MessageScript::mixed(&mut rng, 50, 20_000);
        let mut sender = SenderApp::new(script.clone());
        let mut receiver = ReceiverApp::new(script.clone());
        let mut pipe = Pipe::new(3000);
        for _ in 0..100_000 {
            sender.pump(&mut pipe);
            receiver.pump(&mut pipe, 700).expect("valid stream");
            if receiver.is_done() {
                break;
            }
        }
        assert!(sender.is_done());
        assert!(receiver.is_done());
        assert_eq!(receiver.bytes_read(), script.total_bytes());
    }

    #[test]
    fn receiver_catches_corruption_duplicates_and_wrong_lengths() {
        let script = MessageScript::fixed(1, vec![10, 0, 5]);
        // Corrupted byte.
        let mut pipe = Pipe::new(100);
        let mut sender = SenderApp::new(script.clone());
        sender.pump(&mut pipe);
        pipe.messages[0].1[4] ^= 1;
        let error = ReceiverApp::new(script.clone())
            .pump(&mut pipe, u64::MAX)
            .expect_err("corrupt");
        assert!(error.contains("wrong byte at offset 4"), "{error}");
        // Duplicate of the last message.
        let mut pipe = Pipe::new(100);
        SenderApp::new(script.clone()).pump(&mut pipe);
        let last = pipe.messages[2].clone();
        pipe.messages.push_back(last);
        let error = ReceiverApp::new(script.clone())
            .pump(&mut pipe, u64::MAX)
            .expect_err("duplicate");
        assert!(error.contains("extra message"), "{error}");
        // Messages swapped.
        let mut pipe = Pipe::new(100);
        SenderApp::new(MessageScript::fixed(1, vec![10, 10])).pump(&mut pipe);
        pipe.messages.swap(0, 1);
        let error = ReceiverApp::new(MessageScript::fixed(1, vec![10, 10]))
            .pump(&mut pipe, u64::MAX)
            .expect_err("reordered");
        assert!(error.contains("message 0"), "{error}");
        // Wrong length.
        let mut pipe = Pipe::new(100);
        SenderApp::new(MessageScript::fixed(1, vec![11])).pump(&mut pipe);
        let error = ReceiverApp::new(MessageScript::fixed(1, vec![10]))
            .pump(&mut pipe, u64::MAX)
            .expect_err("length");
        assert!(error.contains("length 11"), "{error}");
    }
}
