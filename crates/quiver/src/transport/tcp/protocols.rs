//! The tcp protocols by message size: how [`super::writer`] sends a frame and how
//! [`super::reader`] receives it.

use quiver_wire::stream::HEADER_LEN;

use super::writer::TCP_COALESCE_MAX_BYTES;
use crate::config::Config;
use crate::transport::protocols::{consecutive, size_text, ProtocolRange};

/// The ranges a tcp connection uses under `config`.
pub(crate) fn ranges(config: &Config) -> Vec<ProtocolRange> {
    let header = HEADER_LEN as u64;
    let copied_max = TCP_COALESCE_MAX_BYTES as u64 - header;
    let staged_max = (config.tcp_staging_bytes as u64).saturating_sub(header);
    let staging = size_text(config.tcp_staging_bytes as u64);
    consecutive(vec![
        (
            0,
            "copied",
            format!(
                "header and payload copied into one buffer and sent with one send (frames up \
                 to {}); received into the staging buffer and copied out",
                size_text(TCP_COALESCE_MAX_BYTES as u64)
            ),
        ),
        (
            copied_max + 1,
            "staged",
            format!(
                "header and payload in one gathered write (writev), the payload not copied; \
                 received into the staging buffer ({staging}, QUIVER_TCP_STAGING_BYTES, \
                 {HEADER_LEN} B of it for the header) and copied out"
            ),
        ),
        (
            staged_max + 1,
            "direct",
            format!(
                "gathered write; read as it arrives, straight into the receive's buffer when \
                 it has one (no copy); beyond the staging buffer ({staging}, \
                 QUIVER_TCP_STAGING_BYTES)"
            ),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_follow_the_staging_buffer() {
        let ranges = ranges(&Config::default());
        let names: Vec<_> = ranges.iter().map(|r| r.protocol).collect();
        assert_eq!(names, ["copied", "staged", "direct"]);
        assert_eq!(ranges[0].last, Some(2048 - 16));
        assert_eq!(ranges[1].last, Some((256 << 10) - 16));
        let small = Config {
            tcp_staging_bytes: 4096,
            ..Config::default()
        };
        assert_eq!(super::ranges(&small)[2].first, 4096 - 16 + 1);
    }
}
