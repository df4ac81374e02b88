#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for a short while (default 15 s each), starting from
# the checked-in seeds in fuzz/corpus/<target>/. New inputs libFuzzer finds go to a temporary
# directory, so the checked-in corpus stays as it is; crashes land in fuzz/artifacts/<target>/.
#
# Usage: scripts/fuzz-smoke.sh [SECONDS_PER_TARGET]   (or FUZZ_SECONDS=N)
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).
# Exits non-zero on the first target that crashes.
set -euo pipefail

seconds="${1:-${FUZZ_SECONDS:-15}}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]]; then
    echo "usage: $0 [SECONDS_PER_TARGET]" >&2
    exit 2
fi
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root/fuzz"

if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz (nightly) is missing: run 'cargo install cargo-fuzz'" >&2
    exit 2
fi

scratch="$(mktemp -d -t quiver-fuzz-smoke.XXXXXX)"
trap 'rm -rf "$scratch"' EXIT

cargo +nightly fuzz build
for target in $(cargo +nightly fuzz list); do
    mkdir -p "$scratch/corpus/$target"
    log="$scratch/$target.log"
    echo "== $target: ${seconds}s"
    if cargo +nightly fuzz run "$target" "$scratch/corpus/$target" "corpus/$target" -- \
        -max_total_time="$seconds" -timeout=10 >"$log" 2>&1; then
        # libFuzzer's last status line: runs, coverage, corpus size.
        grep -E '^#[0-9]+' "$log" | tail -n 1 || true
    else
        tail -n 40 "$log"
        echo "FAIL: $target (crash input under fuzz/artifacts/$target/)" >&2
        exit 1
    fi
done
echo "all fuzz targets ran ${seconds}s without a crash"
