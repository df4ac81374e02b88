//! The spill file of an endpoint's unexpected messages: the payloads that would take the
//! memory the matcher holds over `QUIVER_UNEXPECTED_BYTES` wait here, their envelopes in
//! the matcher (docs/decisions/0099-unexpected-messages-spill-to-a-file.md).
//!
//! - The file is made on the first spill, in `QUIVER_SPILL_DIR`, unlinked from the start
//!   (`O_TMPFILE`, or created and removed at once where the file system has no
//!   `O_TMPFILE`), mode 0600: nothing is left behind, whatever way the process ends.
//! - A payload is written at the first free extent that fits it (or appended) with one
//!   positioned write, and read back with one positioned read straight into the buffer of
//!   the receive that matched it (no copy beyond the read).
//! - Space is reused: a freed extent joins its free neighbours; one at the end shortens
//!   the file, and the file is truncated to nothing once no spilled payload remains.
//! - Failures are typed ([`SpillError`], naming the directory); the endpoint then keeps
//!   the payload in memory (nothing is dropped) and warns once (`warn_once`).
//!
//! Layer: the endpoint's own; imports nothing of quiver's but the error type. The matcher
//! (`matching.rs`) knows a spilled payload only as the [`Spilled`] it keeps.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::Error;

/// Where one spilled payload is in the spill file.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Spilled {
    offset: u64,
    len: u64,
}

impl Spilled {
    /// Payload bytes.
    pub(crate) fn len(&self) -> usize {
        self.len as usize
    }
}

/// A spill file failed: creating it, writing a payload or reading one back.
#[derive(Debug, thiserror::Error)]
#[error("{what} the spill file in {}: {source}", .dir.display())]
pub(crate) struct SpillError {
    /// "creating", "writing to" or "reading from".
    what: &'static str,
    /// The spill directory (`QUIVER_SPILL_DIR`).
    dir: PathBuf,
    #[source]
    source: io::Error,
}

impl From<SpillError> for Error {
    fn from(e: SpillError) -> Error {
        Error::io(
            format!("{} the spill file in {}", e.what, e.dir.display()),
            e.source,
        )
    }
}

/// One endpoint's spill file (see the module doc).
#[derive(Debug)]
pub(crate) struct SpillFile {
    dir: PathBuf,
    /// Made on the first spill.
    file: Option<File>,
    /// The end of the extents in use or free.
    end: u64,
    /// Free extents below `end`, offset to length, never two adjacent.
    free: BTreeMap<u64, u64>,
    /// Payloads spilled and not yet read back or released.
    live: u64,
    /// Whether a failure was already reported (one warning per endpoint).
    warned: bool,
}

impl SpillFile {
    /// A spill store in `dir`; nothing is created before the first [`SpillFile::write`].
    pub(crate) fn new(dir: PathBuf) -> SpillFile {
        SpillFile {
            dir,
            file: None,
            end: 0,
            free: BTreeMap::new(),
            live: 0,
            warned: false,
        }
    }

    /// Writes `payload` to the file (made now if it is the first).
    ///
    /// # Errors
    /// [`SpillError`] when the file cannot be made or the write fails (disk full): nothing
    /// is kept of the payload, the caller still has it.
    pub(crate) fn write(&mut self, payload: &[u8]) -> Result<Spilled, SpillError> {
        let len = payload.len() as u64;
        if self.file.is_none() {
            self.file = Some(create(&self.dir).map_err(|e| self.error("creating", e))?);
        }
        let file = self.file.as_ref().expect("made above");
        let (offset, appended) = match self.free.iter().find(|(_, free)| **free >= len) {
            Some((&offset, &free)) => {
                self.free.remove(&offset);
                if free > len {
                    self.free.insert(offset + len, free - len);
                }
                (offset, false)
            }
            None => (self.end, true),
        };
        if let Err(e) = file.write_all_at(payload, offset) {
            if appended {
                // A short write past the end leaves nothing in use there.
                let _ = file.set_len(self.end);
            } else {
                self.release_extent(offset, len);
            }
            return Err(self.error("writing to", e));
        }
        if appended {
            self.end += len;
        }
        self.live += 1;
        Ok(Spilled { offset, len })
    }

    /// Reads `spilled` back into `buf` (at least its length) with one positioned read, and
    /// frees its space.
    ///
    /// # Errors
    /// [`SpillError`] when the read fails; its space is freed all the same.
    pub(crate) fn read_into(&mut self, spilled: Spilled, buf: &mut [u8]) -> Result<(), SpillError> {
        let len = spilled.len();
        let read = match &self.file {
            Some(file) => file.read_exact_at(&mut buf[..len], spilled.offset),
            None => Err(io::Error::other("no spill file")),
        };
        self.release(spilled);
        read.map_err(|e| self.error("reading from", e))
    }

    /// Frees `spilled`'s space without reading it.
    pub(crate) fn release(&mut self, spilled: Spilled) {
        self.live -= 1;
        if self.live == 0 {
            // Nothing spilled remains: the file gives its space back whole.
            self.free.clear();
            self.end = 0;
            if let Some(file) = &self.file {
                let _ = file.set_len(0);
            }
            return;
        }
        self.release_extent(spilled.offset, spilled.len);
    }

    /// Reports `error` once per endpoint: the payload stays in memory beyond the bound.
    pub(crate) fn warn_once(&mut self, error: &SpillError) {
        if std::mem::replace(&mut self.warned, true) {
            return;
        }
        tracing::warn!(
            target: crate::log::ENDPOINT_LOG,
            dir = %self.dir.display(),
            %error,
            "an unexpected message beyond QUIVER_UNEXPECTED_BYTES could not be spilled and is kept in memory (MatchingStats::spill_failures counts them); set QUIVER_SPILL_DIR to a writable directory on a disk with free space"
        );
    }

    /// Bytes the file spans now (in use or free), for tests.
    #[cfg(test)]
    fn file_len(&self) -> u64 {
        self.file
            .as_ref()
            .map_or(0, |f| f.metadata().map_or(0, |m| m.len()))
    }

    /// Gives the extent back to the free list, joined with its free neighbours; a free
    /// extent at the end shortens the file.
    fn release_extent(&mut self, mut offset: u64, mut len: u64) {
        if len == 0 {
            return;
        }
        if let Some((&before, &before_len)) = self.free.range(..offset).next_back() {
            if before + before_len == offset {
                self.free.remove(&before);
                offset = before;
                len += before_len;
            }
        }
        if let Some(after_len) = self.free.remove(&(offset + len)) {
            len += after_len;
        }
        if offset + len == self.end {
            self.end = offset;
            if let Some(file) = &self.file {
                let _ = file.set_len(offset);
            }
        } else {
            self.free.insert(offset, len);
        }
    }

    fn error(&self, what: &'static str, source: io::Error) -> SpillError {
        SpillError {
            what,
            dir: self.dir.clone(),
            source,
        }
    }
}

/// An unlinked file in `dir`, mode 0600: `O_TMPFILE`, else created under a name of its own
/// and removed at once.
fn create(dir: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true).write(true).mode(0o600);
    match options.clone().custom_flags(libc::O_TMPFILE).open(dir) {
        Ok(file) => return Ok(file),
        // The file system has no O_TMPFILE (older kernels say EISDIR).
        Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EISDIR)) => {}
        Err(e) => return Err(e),
    }
    for n in 0u32.. {
        let path = dir.join(format!(".quiver-spill-{}-{n}", std::process::id()));
        match options.clone().create_new(true).open(&path) {
            Ok(file) => {
                std::fs::remove_file(&path)?;
                return Ok(file);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 1000 => {}
            Err(e) => return Err(e),
        }
    }
    unreachable!("the loop returns")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("quiver-spill-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn bytes(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    }

    /// Payloads come back byte-exact, in any order; freed space is reused before the file
    /// grows; the file is empty once nothing is spilled, and it never had a name in the
    /// directory.
    #[test]
    fn write_read_and_reuse() {
        let dir = scratch_dir("reuse");
        let mut spill = SpillFile::new(dir.clone());
        assert!(spill.file.is_none(), "made lazily");
        let a = spill.write(&bytes(1000, 1)).unwrap();
        let b = spill.write(&bytes(3000, 2)).unwrap();
        let c = spill.write(&bytes(500, 3)).unwrap();
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "unlinked");
        assert_eq!(spill.file_len(), 4500);
        let mut buf = vec![0u8; 4000];
        spill.read_into(b, &mut buf).unwrap();
        assert!(buf[..3000] == bytes(3000, 2)[..]);
        // The freed middle takes the next payload that fits: the file does not grow.
        let d = spill.write(&bytes(2000, 4)).unwrap();
        assert_eq!(d.offset, 1000);
        assert_eq!(spill.file_len(), 4500);
        spill.read_into(a, &mut buf).unwrap();
        assert!(buf[..1000] == bytes(1000, 1)[..]);
        spill.read_into(d, &mut buf).unwrap();
        assert!(buf[..2000] == bytes(2000, 4)[..]);
        // 0..3000 free and joined: a 2500-byte payload goes at 0.
        let e = spill.write(&bytes(2500, 5)).unwrap();
        assert_eq!(e.offset, 0);
        spill.read_into(c, &mut buf).unwrap();
        assert!(buf[..500] == bytes(500, 3)[..]);
        // The tail freed: the file ends where the last payload in use does.
        assert_eq!(spill.file_len(), 2500);
        spill.release(e);
        assert_eq!(spill.file_len(), 0, "truncated once nothing is spilled");
        assert_eq!(spill.live, 0);
        std::fs::remove_dir(&dir).unwrap();
    }

    /// A spill directory that does not exist: a typed error naming it, nothing written,
    /// and the next write tries again.
    #[test]
    fn a_missing_directory_is_a_typed_error() {
        let dir = PathBuf::from("/nonexistent/quiver-spill-test");
        let mut spill = SpillFile::new(dir);
        let e = spill.write(&[1, 2, 3]).unwrap_err();
        assert_eq!(e.what, "creating");
        assert_eq!(e.source.kind(), io::ErrorKind::NotFound);
        assert!(
            e.to_string().contains("/nonexistent/quiver-spill-test"),
            "{e}"
        );
        assert!(matches!(Error::from(e), Error::Io { what, .. } if what.contains("/nonexistent")));
        assert!(spill.write(&[1]).is_err());
        assert_eq!(spill.live, 0);
    }

    /// Mode 0600 where the name-and-remove fallback creates it (and `O_TMPFILE` alike).
    #[test]
    fn the_file_is_private() {
        use std::os::unix::fs::MetadataExt;
        let dir = scratch_dir("mode");
        let file = create(&dir).unwrap();
        assert_eq!(file.metadata().unwrap().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir(&dir).unwrap();
    }
}
