//! Where a result comes from: the version and commit of the build and the machine it ran
//! on. The bench stamps every JSON record with it ([`Provenance`]); `quiver info` shows it.

use serde::{Deserialize, Serialize};

/// The version of the bench's JSON records: raised when a field changes meaning or goes
/// away (adding a field does not raise it; readers ignore fields they do not know).
pub const RECORD_SCHEMA_VERSION: u32 = 1;

/// quiver's version (the workspace's, shared by every crate).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit this build was made from (`git rev-parse HEAD` at build time), or "unknown"
/// when it was built outside a git repository.
pub const COMMIT: &str = env!("BUILD_GIT_COMMIT");

/// The fields every bench JSON record carries besides its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// [`RECORD_SCHEMA_VERSION`] when written.
    pub schema_version: u32,
    /// The host name of the machine that wrote the record (`/proc/sys/kernel/hostname`).
    pub host: String,
    /// quiver's version ([`VERSION`]).
    pub quiver_version: String,
    /// The build's commit ([`COMMIT`]).
    pub commit: String,
}

impl Provenance {
    /// This process's build on this machine.
    pub fn current() -> Provenance {
        Provenance {
            schema_version: RECORD_SCHEMA_VERSION,
            host: quiver::profile::MachineIdentity::current().hostname,
            quiver_version: VERSION.to_string(),
            commit: COMMIT.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_is_named() {
        let here = Provenance::current();
        assert_eq!(here.schema_version, RECORD_SCHEMA_VERSION);
        assert!(!here.host.is_empty());
        assert_eq!(here.quiver_version, env!("CARGO_PKG_VERSION"));
        assert!(
            here.commit == "unknown"
                || (here.commit.len() >= 7 && here.commit.bytes().all(|b| b.is_ascii_hexdigit())),
            "{}",
            here.commit
        );
    }
}
