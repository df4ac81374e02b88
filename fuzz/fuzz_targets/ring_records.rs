//! A shared-memory ring whose bytes a hostile peer writes: the input is a sequence of ops,
//! each followed by the consumer reading what is at its head (`peek`, the payload copied
//! out, the record consumed):
//! - an even first byte: a raw write `[offset u16][len u8][bytes]` into the ring's memfd
//!   (header and data alike, as the producer process could make them);
//! - an odd one: a genuine producer's record `[kind u8][len u8][total / 256 u8]` (so that raw
//!   writes find salted stamps and valid records to corrupt).
//!
//! Nothing may panic, hang or
//! read outside the mapping: every field read from the ring is checked
//! (`quiver_transport::ring`), a violation is an error the transport turns into
//! `Error::Corrupt` on that connection.
#![no_main]

use std::fs::File;
use std::os::unix::fs::FileExt;

use libfuzzer_sys::fuzz_target;
use quiver_transport::ring::{Consumer, Kind, Producer, DATA_OFFSET, MIN_CAPACITY};

/// Records the consumer takes after each write at most (bounds the work per input).
const READS_PER_WRITE: usize = 8;

fuzz_target!(|data: &[u8]| {
    let Ok((mut consumer, fd)) = Consumer::create(MIN_CAPACITY, 0x5157_4ba1) else {
        return;
    };
    let Ok(mut producer) = Producer::attach(&fd) else {
        return;
    };
    let file = File::from(fd);
    let len = DATA_OFFSET as u64 + MIN_CAPACITY;
    let mut input = data;
    while input.len() >= 4 {
        if input[0] & 1 == 1 {
            let kind = [Kind::Msg, Kind::Cont, Kind::Rndv, Kind::Close][usize::from(input[1]) % 4];
            let count = usize::from(input[2]);
            let total = u64::from(input[3]) << 8;
            input = &input[4..];
            let payload = vec![0xA5u8; count];
            // A corrupted ring may refuse the producer too: that is its error, not a panic.
            let _ = if kind == Kind::Rndv {
                producer.try_write_rndv(0x1000, total).map(|_| true)
            } else {
                producer.try_write(kind, total.max(count as u64), &payload)
            };
        } else {
            let offset = u64::from(u16::from_le_bytes([input[1], input[2]])) % len;
            let count = usize::from(input[3]).min(input.len() - 4);
            let bytes = &input[4..4 + count];
            input = &input[4 + count..];
            // Sealed against growing: a write past the end fails, as it would for the peer.
            let room = (len - offset) as usize;
            let _ = file.write_at(&bytes[..bytes.len().min(room)], offset);
        }
        for _ in 0..READS_PER_WRITE {
            match consumer.peek() {
                Ok(Some(record)) => {
                    assert!(record.frag_len <= MIN_CAPACITY, "{record:?}");
                    let mut payload = vec![0u8; record.frag_len as usize];
                    consumer.copy_payload(&record, &mut payload);
                    if record.kind == Kind::Rndv {
                        let _ = consumer.rndv_target(&record);
                    }
                    consumer.consume(&record);
                }
                Ok(None) | Err(_) => break,
            }
        }
    }
});
