//! Message sizes for `quiver bench`: parsing `--sizes` lists and printing sizes.
//!
//! A size is a decimal count of bytes with an optional binary suffix: `K` (2^10), `M` (2^20)
//! or `G` (2^30), in either case, optionally followed by `B` or `iB` (`8`, `1K`, `64KiB`,
//! `1M`). Pure functions, no I/O.

use std::fmt;

/// Smallest message size the bench accepts, in bytes.
pub const MIN_SIZE_BYTES: u64 = 1;
/// Largest message size the bench accepts, in bytes (1 GiB).
pub const MAX_SIZE_BYTES: u64 = 1 << 30;

/// Why a `--sizes` list was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SizeError {
    /// The list has no entries.
    Empty,
    /// An entry is not a number with an optional K/M/G suffix.
    Malformed(String),
    /// An entry is outside [MIN_SIZE_BYTES, MAX_SIZE_BYTES].
    OutOfRange(String),
}

impl fmt::Display for SizeError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizeError::Empty => write!(formatter, "the size list is empty"),
            SizeError::Malformed(entry) => write!(
                formatter,
                "'{entry}' is not a size (expected a number of bytes with an optional K, M or G suffix, e.g. 8,1K,1M)"
            ),
            SizeError::OutOfRange(entry) => write!(
                formatter,
                "size '{entry}' is out of range (1 byte to 1G)"
            ),
        }
    }
}

/// Parses one size such as `8`, `4K`, `64KiB`, `1M` or `1G` into bytes (suffixes are powers
/// of 1024).
///
/// # Errors
/// [`SizeError::Malformed`] for anything else, [`SizeError::OutOfRange`] for 0 or more than 1G.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let entry = text.trim();
    let bytes = quiver::parse_size(entry).map_err(|error| match error {
        quiver::SizeParseError::Malformed => SizeError::Malformed(entry.to_string()),
        quiver::SizeParseError::Overflow => SizeError::OutOfRange(entry.to_string()),
    })?;
    if !(MIN_SIZE_BYTES..=MAX_SIZE_BYTES).contains(&bytes) {
        return Err(SizeError::OutOfRange(entry.to_string()));
    }
    Ok(bytes)
}

/// Parses a comma-separated size list (`8,1K,1M`) into ascending, de-duplicated byte counts.
///
/// # Errors
/// [`SizeError::Empty`] for a list without entries, or the first entry's error.
pub fn parse_size_list(text: &str) -> Result<Vec<u64>, SizeError> {
    let mut sizes = text
        .split(',')
        .filter(|entry| !entry.trim().is_empty())
        .map(parse_size)
        .collect::<Result<Vec<u64>, SizeError>>()?;
    if sizes.is_empty() {
        return Err(SizeError::Empty);
    }
    sizes.sort_unstable();
    sizes.dedup();
    Ok(sizes)
}

/// Formats a byte count for a table: `8 B`, `4 KiB`, `1 MiB`, or bytes when not a whole
/// multiple (`1500 B`).
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (unit_bytes, unit_name) in UNITS {
        if bytes >= unit_bytes && bytes.is_multiple_of(unit_bytes) {
            return format!("{} {unit_name}", bytes / unit_bytes);
        }
    }
    format!("{bytes} B")
}

/// Formats sizes as a plain comma-separated byte list (`8,65536`), as passed to the ranks.
pub fn format_size_list(sizes: &[u64]) -> String {
    sizes
        .iter()
        .map(u64::to_string)
        .collect::<Vec<String>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_suffixed_sizes() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("1K"), Ok(1024));
        assert_eq!(parse_size("1k"), Ok(1024));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("4kb"), Ok(4096));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("3m"), Ok(3 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size(" 16B "), Ok(16));
    }

    #[test]
    fn rejects_malformed_sizes() {
        for bad in ["", "K", "1.5K", "1KK", "-8", "1T", "eight", "8 K", "0x10"] {
            assert!(
                matches!(parse_size(bad), Err(SizeError::Malformed(_))),
                "{bad:?} should be malformed, got {:?}",
                parse_size(bad)
            );
        }
    }

    #[test]
    fn rejects_out_of_range_sizes() {
        assert!(matches!(parse_size("0"), Err(SizeError::OutOfRange(_))));
        assert!(matches!(parse_size("0K"), Err(SizeError::OutOfRange(_))));
        assert!(matches!(parse_size("2G"), Err(SizeError::OutOfRange(_))));
        assert!(matches!(
            parse_size("99999999999999999999999"),
            Err(SizeError::OutOfRange(_))
        ));
        assert!(matches!(
            parse_size("17179869184G"),
            Err(SizeError::OutOfRange(_))
        ));
    }

    #[test]
    fn parses_lists_sorted_and_deduplicated() {
        assert_eq!(parse_size_list("8,1K,1M"), Ok(vec![8, 1024, 1 << 20]));
        assert_eq!(
            parse_size_list("1M,8,8,1024,1K"),
            Ok(vec![8, 1024, 1 << 20])
        );
        assert_eq!(parse_size_list("8,"), Ok(vec![8]));
        assert_eq!(parse_size_list(""), Err(SizeError::Empty));
        assert_eq!(parse_size_list(" , "), Err(SizeError::Empty));
        assert_eq!(
            parse_size_list("8,x"),
            Err(SizeError::Malformed("x".to_string()))
        );
    }

    #[test]
    fn formats_sizes() {
        assert_eq!(format_size(8), "8 B");
        assert_eq!(format_size(1500), "1500 B");
        assert_eq!(format_size(4096), "4 KiB");
        assert_eq!(format_size(1 << 20), "1 MiB");
        assert_eq!(format_size(3 << 30), "3 GiB");
        assert_eq!(format_size_list(&[8, 65536]), "8,65536");
        assert_eq!(
            parse_size_list(&format_size_list(&[8, 65536])),
            Ok(vec![8, 65536])
        );
    }
}
