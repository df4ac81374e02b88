//! How a datagram of the raw udp stream says where its bytes belong.
//!
//! - `Plain`: its stream offset (u64 LE), then the bytes: the floor of any protocol over
//!   udp sockets.
//! - `Tagged`: a compact Stream frame of quiver's wire format (16-byte header), then the
//!   bytes. The sender computes the frame's authenticator over header and bytes, the
//!   receiver verifies it before it checks the bytes. That authenticator is how the job key
//!   protects every datagram transport (a keyed CRC-64 of every byte and one AES block,
//!   decision 0067), so this is the floor of a datagram transport that is protected as
//!   quiver's are: the same links and CPUs, one pass of the authenticator over each byte on
//!   each side, and still no protocol, no copy and no retransmission.

use quiver_wire::frame::{
    parse_stream_split, FrameHeader, FrameKey, FrameKeys, FrameType, FRAME_SECRET_LEN,
    STREAM_HEADER_LEN,
};

/// Bytes of the plain layout's offset.
const OFFSET_BYTES: usize = 8;
/// The connection id both sides of the tagged stream use.
const CONNECTION_ID: u64 = 0x5157_5241_5754_4147;
/// The secret both sides derive their keys from: the stream measures the authenticator's
/// cost, not a key exchange.
const SECRET: [u8; FRAME_SECRET_LEN] = *b"quiver-bench raw tagged stream.!";

/// A datagram's layout, and the keys of the tagged one.
pub(crate) enum RawFraming {
    Plain,
    Tagged(Box<TaggedKeys>),
}

/// The keys of the tagged stream: Stream frames take the connection's key.
pub(crate) struct TaggedKeys {
    job: FrameKey,
    connection: FrameKey,
}

impl RawFraming {
    /// The layout of the `tagged` stream or of the plain one.
    pub(crate) fn new(tagged: bool) -> RawFraming {
        if !tagged {
            return RawFraming::Plain;
        }
        let key = FrameKey::new(&SECRET);
        RawFraming::Tagged(Box::new(TaggedKeys {
            job: key.clone(),
            connection: key,
        }))
    }

    /// Bytes before a datagram's stream bytes.
    pub(crate) fn header_bytes(&self) -> usize {
        match self {
            RawFraming::Plain => OFFSET_BYTES,
            RawFraming::Tagged(_) => STREAM_HEADER_LEN,
        }
    }

    /// Writes into `out` (`header_bytes` long) the header of the `index`th datagram, whose
    /// stream bytes are `bytes` at `offset`.
    ///
    /// # Errors
    /// The frame could not be made (a payload too long for a frame).
    pub(crate) fn write_header(
        &self,
        index: u64,
        offset: u64,
        bytes: &[u8],
        out: &mut [u8],
    ) -> Result<(), String> {
        match self {
            RawFraming::Plain => out.copy_from_slice(&offset.to_le_bytes()),
            RawFraming::Tagged(keys) => {
                let mut header = FrameHeader::new(FrameType::Stream, CONNECTION_ID, 0);
                header.packet_number = index;
                header.stream_offset = offset;
                header
                    .emit(keys.frame_keys(), out, bytes)
                    .map_err(|error| format!("making a Stream frame: {error}"))?;
            }
        }
        Ok(())
    }

    /// The index of `datagram` in a stream of `payload`-byte datagrams, once its header is
    /// good (the tagged layout: its authenticator verified), and the offset its bytes belong
    /// at.
    ///
    /// # Errors
    /// A length, offset or authenticator that the sender could not have sent.
    pub(crate) fn locate(&self, datagram: &[u8], payload: usize) -> Result<(u64, u64), String> {
        let header_bytes = self.header_bytes();
        if datagram.len() != header_bytes + payload {
            return Err(format!("a datagram of {} bytes", datagram.len()));
        }
        let (header, bytes) = datagram.split_at(header_bytes);
        match self {
            RawFraming::Plain => {
                let mut offset = [0u8; OFFSET_BYTES];
                offset.copy_from_slice(header);
                let offset = u64::from_le_bytes(offset);
                if offset % payload as u64 != 0 {
                    return Err(format!("a datagram at offset {offset}"));
                }
                Ok((offset / payload as u64, offset))
            }
            RawFraming::Tagged(keys) => {
                let frame = parse_stream_split(header, bytes, CONNECTION_ID, keys.frame_keys())
                    .map_err(|error| format!("a datagram refused: {error}"))?;
                // The frame carries the low 32 bits of both; a run stays far below 2^32
                // datagrams.
                let index = frame.packet_number;
                let offset = index * payload as u64;
                if frame.stream_offset != u64::from(offset as u32) {
                    return Err(format!(
                        "datagram {index} at offset {}",
                        frame.stream_offset
                    ));
                }
                Ok((index, offset))
            }
        }
    }
}

impl TaggedKeys {
    fn frame_keys(&self) -> FrameKeys<'_> {
        FrameKeys {
            job: &self.job,
            connection: Some(&self.connection),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datagram(framing: &RawFraming, index: u64, bytes: &[u8]) -> Vec<u8> {
        let mut header = vec![0u8; framing.header_bytes()];
        let offset = index * bytes.len() as u64;
        framing
            .write_header(index, offset, bytes, &mut header)
            .expect("a header");
        [header, bytes.to_vec()].concat()
    }

    #[test]
    fn both_layouts_locate_what_they_wrote() {
        let bytes = vec![0xA5u8; 1464];
        for framing in [RawFraming::new(false), RawFraming::new(true)] {
            let sent = datagram(&framing, 4242, &bytes);
            assert_eq!(framing.locate(&sent, bytes.len()), Ok((4242, 4242 * 1464)));
            assert!(framing.locate(&sent[..100], bytes.len()).is_err());
        }
    }

    #[test]
    fn the_tagged_layout_refuses_a_changed_byte() {
        let framing = RawFraming::new(true);
        let bytes = vec![7u8; 512];
        let mut sent = datagram(&framing, 9, &bytes);
        assert!(framing.locate(&sent, bytes.len()).is_ok());
        let last = sent.len() - 1;
        sent[last] ^= 1;
        assert!(framing.locate(&sent, bytes.len()).is_err());
    }
}
