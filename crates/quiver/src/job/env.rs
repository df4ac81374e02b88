//! Reading the job from environment variables: `quiver run`'s (`QUIVER_RANK`,
//! `QUIVER_SIZE`, `QUIVER_JOB_ID`, `QUIVER_JOB_KEY`, `QUIVER_ADDRS`, `QUIVER_LINKS`), the
//! launchers' rank variables, and the job key from `QUIVER_JOB_KEY`/`QUIVER_JOB_KEY_FILE`.

use std::net::SocketAddr;

use super::info::{Bootstrap, JobInfo};
use super::node::node_share;
use super::variables::{ADDRS, JOB_ID, JOB_KEY, JOB_KEY_FILE, LINKS, RANK, SIZE};
use crate::error::{Error, Result};

/// Looks up an environment variable (a map in tests).
pub(crate) type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Launcher variables that give rank and size, in the order they are looked at.
pub(crate) const RANK_VARIABLES: [(&str, &str); 3] = [
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
];

/// Largest job the bootstraps accept (it bounds the rendezvous answer).
pub(crate) const MAX_RANKS: u32 = 1 << 16;

/// The job `quiver run` describes in the environment: `QUIVER_RANK`, `QUIVER_SIZE`,
/// `QUIVER_JOB_ID` (16 hex digits), `QUIVER_JOB_KEY` (64 hex digits), and `QUIVER_ADDRS`
/// / `QUIVER_LINKS` when network transports are used.
///
/// # Errors
/// [`Error::Config`] naming the missing or malformed variable (never a key's value).
pub(crate) fn quiver_run(get: Lookup<'_>) -> Result<JobInfo> {
    let var = |k: &str| {
        get(k).ok_or_else(|| {
            Error::Config(format!(
                "{k} is not set: start the program with `quiver run -n N -- PROGRAM`, \
                 or set QUIVER_RANK, QUIVER_SIZE, QUIVER_JOB_ID and QUIVER_JOB_KEY"
            ))
        })
    };
    let num = |k: &str| -> Result<u32> {
        let v = var(k)?;
        v.trim()
            .parse()
            .map_err(|_| Error::Config(format!("{k}={v:?}: expected a whole number")))
    };
    let rank = num(RANK)?;
    let size = num(SIZE)?;
    let id_text = var(JOB_ID)?;
    let job_id = parse_hex::<8>(&id_text)
        .map(u64::from_be_bytes)
        .ok_or_else(|| {
            Error::Config(format!("QUIVER_JOB_ID={id_text:?}: expected 16 hex digits"))
        })?;
    let key_text = var(JOB_KEY)?;
    let key = parse_hex::<32>(&key_text).ok_or_else(|| {
        Error::Config("QUIVER_JOB_KEY: expected 64 hex digits (the value is not shown)".into())
    })?;
    let addrs = match get(ADDRS) {
        Some(text) => parse_addrs(&text)?,
        None => Vec::new(),
    };
    let links = match get(LINKS) {
        Some(text) => crate::config::parse_links(&text)?,
        None => Vec::new(),
    };
    Ok(JobInfo {
        rank,
        size,
        job_id,
        key,
        addrs,
        links,
        bootstrap: Bootstrap::QuiverRun,
        node: node_share(get)?,
    })
}

/// Rank and size from the first launcher's variables that are set ([`RANK_VARIABLES`]).
///
/// # Errors
/// [`Error::Config`] when none is set, a size is missing, or they do not make a job.
pub(crate) fn launcher_rank(get: Lookup<'_>) -> Result<(u32, u32)> {
    for (rank_var, size_var) in RANK_VARIABLES {
        let Some(rank_text) = get(rank_var) else {
            continue;
        };
        let number = |var: &str, text: &str| -> Result<u32> {
            text.trim()
                .parse()
                .map_err(|_| Error::Config(format!("{var}={text:?}: expected a whole number")))
        };
        let rank = number(rank_var, &rank_text)?;
        let size_text = get(size_var)
            .ok_or_else(|| Error::Config(format!("{rank_var} is set but {size_var} is not")))?;
        let size = number(size_var, &size_text)?;
        if size == 0 || size > MAX_RANKS || rank >= size {
            return Err(Error::Config(format!(
                "{rank_var}={rank}, {size_var}={size}: not a rank of a job of 1 to {MAX_RANKS} \
                 ranks"
            )));
        }
        return Ok((rank, size));
    }
    Err(Error::Config(format!(
        "the rendezvous bootstrap needs the rank and size from the launcher: none of {} is set",
        RANK_VARIABLES
            .iter()
            .map(|(r, s)| format!("{r}/{s}"))
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

/// The job key from `QUIVER_JOB_KEY` (64 hex digits) or the file `QUIVER_JOB_KEY_FILE`
/// holds (the same 64 hex digits), if either is set.
///
/// # Errors
/// [`Error::Config`] for a malformed key (its value is not shown) or a key file others may
/// read or write, [`Error::Io`] for a file that cannot be read.
pub(crate) fn key_from_env(get: Lookup<'_>) -> Result<Option<[u8; 32]>> {
    let (text, source) = match (get(JOB_KEY), get(JOB_KEY_FILE)) {
        (Some(text), _) => (text, "QUIVER_JOB_KEY".to_owned()),
        (None, Some(path)) => (read_key_file(&path)?, format!("QUIVER_JOB_KEY_FILE={path}")),
        (None, None) => return Ok(None),
    };
    parse_hex::<32>(&text).map(Some).ok_or_else(|| {
        Error::Config(format!(
            "{source}: expected 64 hex digits (the value is not shown)"
        ))
    })
}

/// Permission bits a key file must not have: any access by its group or by others. As ssh
/// does for a private key, such a file is refused, not read: whoever else can read it can
/// join the job, and whoever can write it can choose its key.
const KEY_FILE_FORBIDDEN_MODE: u32 = 0o077;

/// The text of the key file at `path`, once its permissions were found to keep it to its
/// owner. The permissions are those of the file opened (`fstat` of the descriptor read),
/// so the file cannot be swapped between the check and the read.
///
/// # Errors
/// [`Error::Config`] naming the file and its mode when its group or others have any
/// access; [`Error::Io`] when it cannot be opened or read.
fn read_key_file(path: &str) -> Result<String> {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;

    let what = || format!("reading the job key from QUIVER_JOB_KEY_FILE={path}");
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(what(), e))?;
    let mode = file
        .metadata()
        .map_err(|e| Error::io(what(), e))?
        .permissions()
        .mode();
    if mode & KEY_FILE_FORBIDDEN_MODE != 0 {
        return Err(Error::Config(format!(
            "QUIVER_JOB_KEY_FILE={path}: permissions {:04o} are too open: a job key must be \
             accessible by its owner only (`chmod 600 {path}`); the key was not read",
            mode & 0o7777
        )));
    }
    let mut text = String::new();
    file.read_to_string(&mut text)
        .map_err(|e| Error::io(what(), e))?;
    Ok(text)
}

/// Parses `QUIVER_ADDRS`: one `ip:port` per rank, comma-separated, in rank order.
///
/// # Errors
/// [`Error::Config`] naming the bad entry.
pub(crate) fn parse_addrs(text: &str) -> Result<Vec<SocketAddr>> {
    text.split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .enumerate()
        .map(|(rank, entry)| {
            entry.parse::<SocketAddr>().map_err(|_| {
                Error::Config(format!(
                    "QUIVER_ADDRS: entry {rank} ({entry:?}) is not an ip:port address"
                ))
            })
        })
        .collect()
}

/// `2 * N` hex digits as `N` bytes; None for any other text.
pub(crate) fn parse_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let s = s.trim().as_bytes();
    if s.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in s.chunks(2).enumerate() {
        let text = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(text, 16).ok()?;
    }
    Some(out)
}

/// Bytes as lower-case hex digits.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::HashMap;

    use super::*;

    /// A [`Lookup`] over fixed pairs.
    pub(crate) fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k: &str| map.get(k).cloned()
    }

    #[test]
    fn hex_parsing() {
        assert_eq!(parse_hex::<2>("0aFF"), Some([0x0a, 0xff]));
        assert_eq!(parse_hex::<2>("0aF"), None);
        assert_eq!(parse_hex::<2>("zz00"), None);
    }

    #[test]
    fn addrs_parse() {
        let a = parse_addrs("127.0.0.1:7000, 10.77.1.2:7001,[::1]:9").unwrap();
        assert_eq!(a.len(), 3);
        assert_eq!(a[1].port(), 7001);
        assert!(a[0].ip().is_loopback() && a[2].ip().is_loopback() && !a[1].ip().is_loopback());
        let e = parse_addrs("127.0.0.1:7000,nonsense").unwrap_err();
        assert!(e.to_string().contains("entry 1"));
    }

    #[test]
    fn launcher_variables() {
        let r = |pairs: &[(&str, &str)]| launcher_rank(&lookup(pairs));
        assert_eq!(
            r(&[("PMI_RANK", "2"), ("PMI_SIZE", "4"), ("SLURM_PROCID", "9")]).unwrap(),
            (2, 4)
        );
        assert_eq!(
            r(&[("SLURM_PROCID", "1"), ("SLURM_NTASKS", "2")]).unwrap(),
            (1, 2)
        );
        assert!(r(&[("PMI_RANK", "4"), ("PMI_SIZE", "4")]).is_err());
        assert!(r(&[("PMI_RANK", "x"), ("PMI_SIZE", "4")]).is_err());
        let e = r(&[("OMPI_COMM_WORLD_RANK", "0")]).unwrap_err().to_string();
        assert!(e.contains("OMPI_COMM_WORLD_SIZE"), "{e}");
        assert!(r(&[]).is_err());
    }

    #[test]
    fn keys_from_the_environment() {
        let k = |pairs: &[(&str, &str)]| key_from_env(&lookup(pairs));
        assert_eq!(k(&[]).unwrap(), None);
        let hex64 = "ab".repeat(32);
        assert_eq!(k(&[("QUIVER_JOB_KEY", &hex64)]).unwrap(), Some([0xab; 32]));
        let e = k(&[("QUIVER_JOB_KEY", "abc")]).unwrap_err().to_string();
        assert!(e.contains("64 hex digits") && !e.contains("abc\""), "{e}");
        let dir = std::env::temp_dir().join(format!("quiver-key-{}", std::process::id()));
        std::fs::write(&dir, format!("{hex64}\n")).unwrap();
        set_mode(&dir, 0o600);
        let from_file = k(&[("QUIVER_JOB_KEY_FILE", dir.to_str().unwrap())]);
        std::fs::remove_file(&dir).unwrap();
        assert_eq!(from_file.unwrap(), Some([0xab; 32]));
        assert!(k(&[("QUIVER_JOB_KEY_FILE", "/nonexistent/quiver-key")]).is_err());
    }

    fn set_mode(path: &std::path::Path, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_key_file_others_may_access_is_refused() {
        let k = |pairs: &[(&str, &str)]| key_from_env(&lookup(pairs));
        let path = std::env::temp_dir().join(format!("quiver-open-key-{}", std::process::id()));
        std::fs::write(&path, format!("{}\n", "cd".repeat(32))).unwrap();
        let name = path.to_str().unwrap();
        for mode in [0o644, 0o640, 0o604, 0o620, 0o602, 0o610] {
            set_mode(&path, mode);
            let error = k(&[("QUIVER_JOB_KEY_FILE", name)]).unwrap_err();
            let text = error.to_string();
            assert!(matches!(error, Error::Config(_)), "{mode:o}: {error:?}");
            assert!(
                text.contains(&format!("{mode:04o}")) && text.contains("chmod 600"),
                "{text}"
            );
            assert!(
                !text.contains(&"cd".repeat(32)),
                "the key must not show: {text}"
            );
        }
        for mode in [0o600, 0o400] {
            set_mode(&path, mode);
            assert_eq!(
                k(&[("QUIVER_JOB_KEY_FILE", name)]).unwrap(),
                Some([0xcd; 32]),
                "{mode:o}"
            );
        }
        std::fs::remove_file(&path).unwrap();
    }
}
