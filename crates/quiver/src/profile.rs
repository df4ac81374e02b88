//! The per-machine profile: protocol thresholds measured on this machine by `quiver tune`,
//! which [`Config::from_env`](crate::Config::from_env) loads as its defaults.
//!
//! Order of precedence for a tunable threshold (the names in [`TUNABLE_SETTINGS`]):
//! an environment variable wins, then the profile's entry for this machine, then the
//! built-in default. [`crate::Config::threshold_sources`] records which one applied, and
//! `quiver info` prints it.
//!
//! The file is JSON, at `$QUIVER_PROFILE`, else `$XDG_CONFIG_HOME/quiver/profile.json`,
//! else `$HOME/.config/quiver/profile.json` (`QUIVER_PROFILE=off` disables it). One file
//! holds entries for several machines, keyed by host name and CPU model, so a home
//! directory shared between machines keeps each machine's measurements apart:
//!
//! ```json
//! {
//!   "format": "quiver-profile-1",
//!   "machines": [
//!     {
//!       "hostname": "node7",
//!       "cpu_model": "AMD EPYC 7B13",
//!       "quiver_version": "0.1.0",
//!       "created_unix_s": 1795000000,
//!       "thresholds": { "QUIVER_SHM_EAGER_MAX": 131072, "QUIVER_TCP_STAGING_BYTES": 65536 },
//!       "evidence": "free text: what was measured"
//!     }
//!   ]
//! }
//! ```
//!
//! A file that exists but does not parse, names an unknown setting, or gives a value
//! outside its setting's range is an error ([`Error::Config`] naming the file), like a bad
//! environment variable; a file without an entry for this machine is ignored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Environment variable naming the profile file (`off`, `none` or empty: no profile).
pub const PROFILE_ENV: &str = "QUIVER_PROFILE";
/// The `format` string of the files this version reads and writes.
pub const PROFILE_FORMAT: &str = "quiver-profile-1";
/// The settings a profile may set: the protocol switch points `quiver tune` measures.
pub const TUNABLE_SETTINGS: [&str; 3] = [
    "QUIVER_SHM_EAGER_MAX",
    "QUIVER_TCP_STAGING_BYTES",
    "QUIVER_UDP_IN_PLACE_MIN",
];

/// A profile file: entries for one or more machines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileFile {
    /// Always [`PROFILE_FORMAT`].
    pub format: String,
    /// One entry per machine (host name and CPU model).
    pub machines: Vec<MachineProfile>,
}

/// The measured thresholds of one machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineProfile {
    /// Host name of the machine measured.
    pub hostname: String,
    /// CPU model of the machine measured (first `model name` of /proc/cpuinfo).
    pub cpu_model: String,
    /// Version of quiver that measured it.
    #[serde(default)]
    pub quiver_version: String,
    /// When it was measured, seconds since the Unix epoch.
    #[serde(default)]
    pub created_unix_s: u64,
    /// Setting name (one of [`TUNABLE_SETTINGS`]) to value in bytes.
    pub thresholds: BTreeMap<String, u64>,
    /// What the measurement found, for people (not read by the runtime).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub evidence: String,
}

/// Which machine this is, as profiles key it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineIdentity {
    /// Host name (`/proc/sys/kernel/hostname`).
    pub hostname: String,
    /// CPU model (first `model name` of `/proc/cpuinfo`, "unknown" without one).
    pub cpu_model: String,
}

impl MachineIdentity {
    /// The machine this process runs on.
    pub fn current() -> MachineIdentity {
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|name| name.trim().to_string())
            .unwrap_or_else(|_| "unknown".to_string());
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|text| {
                text.lines()
                    .find(|line| line.starts_with("model name"))
                    .and_then(|line| line.split_once(':'))
                    .map(|(_, model)| model.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".to_string());
        MachineIdentity {
            hostname,
            cpu_model,
        }
    }
}

/// Where a setting's value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingSource {
    /// quiver's built-in default.
    Default,
    /// This machine's entry in the profile.
    Profile,
    /// An environment variable.
    Environment,
    /// The waiting policy, because this node's ranks share their CPUs
    /// (`WaitPolicy::shm_eager_max`); the default or profile value applies otherwise.
    WaitPolicy,
}

impl SettingSource {
    /// A word for reports: "default", "profile", "environment" or the wait policy's.
    pub fn name(self) -> &'static str {
        match self {
            SettingSource::Default => "default",
            SettingSource::Profile => "profile",
            SettingSource::Environment => "environment",
            SettingSource::WaitPolicy => "wait policy (ranks share their CPUs)",
        }
    }
}

/// What configuration loading found about the profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfileState {
    /// No profile is looked for (`QUIVER_PROFILE=off`, or no `QUIVER_PROFILE`, no
    /// `XDG_CONFIG_HOME` and no `HOME`).
    Disabled,
    /// The file does not exist.
    NotFound(PathBuf),
    /// The file exists but has no entry for this machine.
    NoEntry(PathBuf),
    /// The default path cannot be read by this user (another user's home): no profile.
    Unreadable(PathBuf),
    /// This machine's entry was used.
    Loaded(PathBuf),
}

impl std::fmt::Display for ProfileState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProfileState::Disabled => {
                write!(
                    f,
                    "none ({PROFILE_ENV}=off, or neither XDG_CONFIG_HOME nor HOME)"
                )
            }
            ProfileState::NotFound(path) => {
                write!(f, "{} (not found; `quiver tune` writes it)", path.display())
            }
            ProfileState::NoEntry(path) => {
                write!(f, "{} (no entry for this machine)", path.display())
            }
            ProfileState::Loaded(path) => write!(f, "{} (loaded)", path.display()),
            ProfileState::Unreadable(path) => {
                write!(
                    f,
                    "{} (not readable by this user; defaults)",
                    path.display()
                )
            }
        }
    }
}

/// The profile path for an environment given by `get`: `$QUIVER_PROFILE`, else
/// `$XDG_CONFIG_HOME/quiver/profile.json` (when `XDG_CONFIG_HOME` is an absolute path, as
/// the XDG base directory specification requires), else
/// `$HOME/.config/quiver/profile.json`; `None` when disabled.
pub fn profile_path(get: &impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    match get(PROFILE_ENV) {
        Some(value) => {
            let value = value.trim();
            if value.is_empty() || value.eq_ignore_ascii_case("off") || value == "none" {
                None
            } else {
                Some(PathBuf::from(value))
            }
        }
        None => get("XDG_CONFIG_HOME")
            .filter(|dir| Path::new(dir).is_absolute())
            .map(PathBuf::from)
            .or_else(|| {
                get("HOME")
                    .filter(|home| !home.is_empty())
                    .map(|home| Path::new(&home).join(".config"))
            })
            .map(|config| config.join("quiver/profile.json")),
    }
}

/// Largest profile file read (a profile is a few hundred bytes per machine).
const MAX_PROFILE_BYTES: u64 = 1 << 20;

impl ProfileFile {
    /// An empty profile.
    pub fn new() -> ProfileFile {
        ProfileFile {
            format: PROFILE_FORMAT.to_string(),
            machines: Vec::new(),
        }
    }

    /// Reads and checks the profile at `path`; `Ok(None)` when the file does not exist.
    ///
    /// # Errors
    /// [`Error::Config`] naming the file when it cannot be read, is too large, does not
    /// parse, has another format, or names an unknown setting.
    pub fn load(path: &Path) -> Result<Option<ProfileFile>> {
        let bad = |what: String| Error::Config(format!("profile {}: {what}", path.display()));
        let metadata = match std::fs::metadata(path) {
            Ok(metadata) => metadata,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(bad(e.to_string())),
        };
        if metadata.len() > MAX_PROFILE_BYTES {
            return Err(bad(format!(
                "{} bytes is too large for a profile",
                metadata.len()
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let file: ProfileFile = serde_json::from_str(&text).map_err(|e| {
            bad(format!(
                "not a quiver profile ({e}); `quiver tune` rewrites it, or set {PROFILE_ENV}=off"
            ))
        })?;
        if file.format != PROFILE_FORMAT {
            return Err(bad(format!(
                "format {:?}, expected {PROFILE_FORMAT:?}",
                file.format
            )));
        }
        for machine in &file.machines {
            if let Some(name) = machine
                .thresholds
                .keys()
                .find(|name| !TUNABLE_SETTINGS.contains(&name.as_str()))
            {
                return Err(bad(format!(
                    "unknown setting {name:?} (a profile may set {})",
                    TUNABLE_SETTINGS.join(", ")
                )));
            }
        }
        Ok(Some(file))
    }

    /// This machine's entry, if any.
    pub fn entry_for(&self, machine: &MachineIdentity) -> Option<&MachineProfile> {
        self.machines.iter().find(|entry| {
            entry.hostname == machine.hostname && entry.cpu_model == machine.cpu_model
        })
    }

    /// Replaces the entry of the same machine, or adds it.
    pub fn upsert(&mut self, entry: MachineProfile) {
        self.machines
            .retain(|old| !(old.hostname == entry.hostname && old.cpu_model == entry.cpu_model));
        self.machines.push(entry);
    }

    /// Writes the profile to `path` (creating its directory), through a temporary file
    /// renamed into place so a reader never sees half a file.
    ///
    /// # Errors
    /// [`Error::Io`] when the directory or file cannot be written.
    pub fn save(&self, path: &Path) -> Result<()> {
        if let Some(directory) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(directory)
                .map_err(|e| Error::io(format!("creating {}", directory.display()), e))?;
        }
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| Error::Config(format!("encoding the profile: {e}")))?;
        let temporary = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&temporary, text + "\n")
            .and_then(|()| std::fs::rename(&temporary, path))
            .map_err(|e| {
                let _ = std::fs::remove_file(&temporary);
                Error::io(format!("writing {}", path.display()), e)
            })
    }
}

impl Default for ProfileFile {
    fn default() -> ProfileFile {
        ProfileFile::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine() -> MachineIdentity {
        MachineIdentity {
            hostname: "node7".into(),
            cpu_model: "Test CPU".into(),
        }
    }

    fn entry(eager: u64) -> MachineProfile {
        MachineProfile {
            hostname: "node7".into(),
            cpu_model: "Test CPU".into(),
            quiver_version: "0.1.0".into(),
            created_unix_s: 1,
            thresholds: BTreeMap::from([("QUIVER_SHM_EAGER_MAX".to_string(), eager)]),
            evidence: String::new(),
        }
    }

    #[test]
    fn path_from_the_environment() {
        let none = |_: &str| None;
        assert_eq!(profile_path(&none), None);
        let home = |k: &str| (k == "HOME").then(|| "/home/x".to_string());
        assert_eq!(
            profile_path(&home),
            Some(PathBuf::from("/home/x/.config/quiver/profile.json"))
        );
        let explicit = |k: &str| (k == PROFILE_ENV).then(|| "/tmp/p.json".to_string());
        assert_eq!(profile_path(&explicit), Some(PathBuf::from("/tmp/p.json")));
        let off = |k: &str| match k {
            PROFILE_ENV => Some("off".to_string()),
            _ => Some("/home/x".to_string()),
        };
        assert_eq!(profile_path(&off), None);
    }

    #[test]
    fn path_follows_xdg_config_home() {
        let both = |k: &str| match k {
            "HOME" => Some("/home/x".to_string()),
            "XDG_CONFIG_HOME" => Some("/srv/config".to_string()),
            _ => None,
        };
        assert_eq!(
            profile_path(&both),
            Some(PathBuf::from("/srv/config/quiver/profile.json"))
        );
        // Relative (or empty) values are ignored, as the specification says.
        for ignored in ["relative/config", ""] {
            let relative = |k: &str| match k {
                "HOME" => Some("/home/x".to_string()),
                "XDG_CONFIG_HOME" => Some(ignored.to_string()),
                _ => None,
            };
            assert_eq!(
                profile_path(&relative),
                Some(PathBuf::from("/home/x/.config/quiver/profile.json"))
            );
        }
        let xdg_only = |k: &str| (k == "XDG_CONFIG_HOME").then(|| "/srv/c".to_string());
        assert_eq!(
            profile_path(&xdg_only),
            Some(PathBuf::from("/srv/c/quiver/profile.json"))
        );
        let explicit = |k: &str| match k {
            PROFILE_ENV => Some("/tmp/p.json".to_string()),
            _ => Some("/srv/config".to_string()),
        };
        assert_eq!(profile_path(&explicit), Some(PathBuf::from("/tmp/p.json")));
    }

    #[test]
    fn save_load_and_key_by_machine() {
        let dir = std::env::temp_dir().join(format!("quiver-profile-test-{}", std::process::id()));
        let path = dir.join("sub/profile.json");
        assert_eq!(ProfileFile::load(&path).unwrap(), None);
        let mut file = ProfileFile::new();
        file.upsert(entry(4096));
        file.upsert(entry(8192)); // replaces the same machine's entry
        let mut other = entry(1);
        other.hostname = "other".into();
        file.upsert(other);
        file.save(&path).unwrap();
        let loaded = ProfileFile::load(&path).unwrap().expect("saved");
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(loaded.machines.len(), 2);
        let mine = loaded.entry_for(&machine()).expect("entry");
        assert_eq!(mine.thresholds["QUIVER_SHM_EAGER_MAX"], 8192);
        let stranger = MachineIdentity {
            hostname: "node7".into(),
            cpu_model: "Other CPU".into(),
        };
        assert!(loaded.entry_for(&stranger).is_none());
    }

    #[test]
    fn bad_files_are_errors_naming_the_file() {
        let dir = std::env::temp_dir().join(format!("quiver-profile-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cases = [
            ("garbage.json", "{ not json".to_string()),
            (
                "format.json",
                r#"{"format":"other","machines":[]}"#.to_string(),
            ),
            (
                "unknown.json",
                r#"{"format":"quiver-profile-1","machines":[{"hostname":"a","cpu_model":"b","thresholds":{"QUIVER_SPIN_US":1}}]}"#.to_string(),
            ),
        ];
        for (name, text) in cases {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            let error = ProfileFile::load(&path).expect_err(name);
            assert!(error.to_string().contains(name), "{error}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn current_machine_has_a_name() {
        let me = MachineIdentity::current();
        assert!(!me.hostname.is_empty());
        assert!(!me.cpu_model.is_empty());
    }
}
