//! Eager messages on a shared-memory ring: a message of up to `shm_eager_max` bytes is
//! copied into the ring in fragments of at most `shm_frag_bytes` (the first a `Msg`
//! record, the rest `Cont`), so the receiver copies out while the sender copies in.

use quiver_transport::notify::RemoteDoorbell;
use quiver_transport::ring::{Consumer, Kind, Producer, Record, RingError};

/// Payload lengths of the fragments of a `len`-byte eager message.
pub(crate) fn frag_lens(len: u64, frag: u64) -> impl Iterator<Item = u64> + Clone {
    let count = if len == 0 { 1 } else { len.div_ceil(frag) };
    (0..count).map(move |i| (len - i * frag).min(frag))
}

/// Writes as many fragments of an eager message as fit; `Ok(true)` when all are written.
pub(crate) fn write_eager_raw(
    ring: &mut Producer,
    data: &[u8],
    written: &mut usize,
    started: &mut bool,
    frag: usize,
) -> std::result::Result<bool, RingError> {
    let total = data.len() as u64;
    loop {
        let end = (*written + frag).min(data.len());
        let kind = if *started { Kind::Cont } else { Kind::Msg };
        if !ring.try_write(kind, total, &data[*written..end])? {
            return Ok(false);
        }
        *started = true;
        *written = end;
        if end == data.len() {
            return Ok(true);
        }
    }
}

/// [`write_eager_raw`] followed by a doorbell ring if anything was written.
pub(crate) fn write_eager(
    ring: &mut Producer,
    bell: &RemoteDoorbell,
    data: &[u8],
    written: &mut usize,
    started: &mut bool,
    frag: usize,
) -> std::result::Result<bool, RingError> {
    let before = (*written, *started);
    let done = write_eager_raw(ring, data, written, started, frag)?;
    if (*written, *started) != before {
        bell.ring();
    }
    Ok(done)
}

/// Whether every fragment of the message starting with `first` is in the ring already.
pub(crate) fn all_fragments_present(
    ring: &Consumer,
    first: &Record,
) -> std::result::Result<bool, RingError> {
    let mut pos = first.pos + first.size;
    let mut filled = first.frag_len;
    while filled < first.total_len {
        if pos - first.pos > ring.capacity() {
            return Err(RingError::Corrupt {
                field: "total_len",
                value: first.total_len,
                reason: "fragments of one message exceed the ring",
            });
        }
        match ring.record_at(pos)? {
            None => return Ok(false),
            Some(rec) if rec.kind == Kind::Pad => pos += rec.size,
            Some(rec) if rec.kind == Kind::Cont => {
                filled += rec.frag_len;
                pos += rec.size;
            }
            Some(_) => {
                return Err(RingError::Corrupt {
                    field: "kind",
                    value: 0,
                    reason: "message interrupted by another record",
                })
            }
        }
    }
    Ok(true)
}
