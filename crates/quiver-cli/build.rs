//! Records the commit this build was made from, for the bench's JSON records and `quiver
//! info`: `git rev-parse HEAD` in the source tree when git and a repository are there, else
//! "unknown" (a build from a source archive). The build script runs again when HEAD or the
//! branch it names moves, so the recorded commit follows `git commit` and `git checkout`.
//! Uncommitted changes are not marked: the commit names the last committed state.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    Some(text.trim().to_string()).filter(|text| !text.is_empty())
}

/// Asks for a rerun when `git_path` (a path inside the repository's git directory) changes,
/// when it exists (a path that does not exist would make every build rerun the script).
fn watch(git_path: &str) {
    if let Some(path) = git(&["rev-parse", "--git-path", git_path]) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let commit = git(&["rev-parse", "HEAD"])
        .filter(|hash| hash.len() >= 7 && hash.bytes().all(|b| b.is_ascii_hexdigit()))
        .unwrap_or_else(|| "unknown".to_string());
    watch("HEAD");
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch(&branch);
    }
    watch("packed-refs");
    println!("cargo:rustc-env=BUILD_GIT_COMMIT={commit}");
}
