//! Builds the PMIx shim (src/shim.c) when pkg-config finds `pmix` (Debian: libpmix-dev), and
//! sets `cfg(quiver_pmix)` so the crate exposes the real client; without it the crate
//! compiles to a stub whose `Client::init` says PMIx support is not built in.
//!
//! `QUIVER_PMIX=0` skips the search (never build PMIx support); `QUIVER_PMIX=1` makes a
//! missing libpmix a build error (CI sets it, so a silent stub cannot pass for the real
//! thing). Unset: build it when found.

use std::process::Command;

include!("src/build_variable.rs");

fn pkg_config(args: &[&str]) -> Option<Vec<String>> {
    let output = Command::new("pkg-config")
        .args(args)
        .arg("pmix")
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    Some(
        String::from_utf8_lossy(&output.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect(),
    )
}

fn main() {
    println!("cargo:rerun-if-changed=src/shim.c");
    println!("cargo:rerun-if-env-changed={BUILD_VARIABLE}");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rustc-check-cfg=cfg(quiver_pmix)");
    let wanted = std::env::var(BUILD_VARIABLE).unwrap_or_default();
    let (skip, required) = match wanted.trim() {
        "0" | "off" | "no" => (true, false),
        "1" | "on" | "yes" | "required" => (false, true),
        _ => (false, false),
    };
    if skip {
        return;
    }
    let found = pkg_config(&["--cflags-only-I"]).and_then(|includes| {
        Some((
            includes,
            pkg_config(&["--libs-only-L"])?,
            pkg_config(&["--libs-only-l"])?,
        ))
    });
    let Some((includes, search, libs)) = found else {
        if required {
            panic!(
                "QUIVER_PMIX=1 but `pkg-config --cflags --libs pmix` failed: install \
                 libpmix-dev (and pkg-config), or unset QUIVER_PMIX to build without PMIx"
            );
        }
        return;
    };
    let mut build = cc::Build::new();
    build.file("src/shim.c").warnings(true);
    for include in &includes {
        build.include(include.trim_start_matches("-I"));
    }
    build.compile("quiver_pmix_shim");
    for dir in &search {
        println!(
            "cargo:rustc-link-search=native={}",
            dir.trim_start_matches("-L")
        );
    }
    for lib in &libs {
        println!(
            "cargo:rustc-link-lib=dylib={}",
            lib.trim_start_matches("-l")
        );
    }
    println!("cargo:rustc-cfg=quiver_pmix");
}
