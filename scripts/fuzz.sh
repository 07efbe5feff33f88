#!/usr/bin/env bash
# Runs each fuzz target in fuzz/ for a bounded time (default 30 s each; FUZZ_SECONDS overrides):
# libFuzzer through cargo fuzz, on the stable toolchain (RUSTC_BOOTSTRAP lets it pass libFuzzer's
# -Z flags; nothing else is built that way). Installs cargo-fuzz from crates.io when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-30}"
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "airtime: installing cargo-fuzz (crates.io)"
  cargo install cargo-fuzz --locked --quiet
fi
export RUSTC_BOOTSTRAP=1
for target in $(cargo fuzz list); do
  echo "airtime: fuzzing $target for ${seconds}s"
  cargo fuzz run "$target" --sanitizer none -- -max_total_time="$seconds" -rss_limit_mb=2048
done
