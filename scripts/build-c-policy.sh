#!/usr/bin/env bash
# Builds a policy written in C against sdk/c/airtime_policy.h into a core wasm32 module:
#
#   scripts/build-c-policy.sh OUT.wasm [SOURCE.c]     (SOURCE defaults to policies/c-first-fit/first_fit.c)
#
# Freestanding: clang's wasm32 target and wasm-ld (lld), no libc, no WASI. The module exports
# `memory` (wasm-ld's default), the ABI's three functions and, when the policy defines it, the
# optional `airtime_validate_params`; its only imports are the ones the header declares
# (airtime.log, airtime.fail): a symbol left undefined fails the link instead of becoming an import
# the host would refuse. CLANG overrides the compiler (CLANG=clang-18).
#
# Exit status 2, with the message below, when clang or wasm-ld is missing or cannot target wasm32
# (the tests skip then); 1 for any other failure (a compile error is an error, not a skip).
set -euo pipefail
caller_dir="$PWD"
cd "$(dirname "$0")/.."

skip() {
  echo "skipping the C policy: clang's wasm32 target (clang + lld) is not installed" >&2
  echo "  ($1; Debian: apt-get install -y clang lld)" >&2
  exit 2
}

[ $# -ge 1 ] || { echo "usage: $0 OUT.wasm [SOURCE.c]" >&2; exit 1; }
absolute() { case "$1" in /*) echo "$1" ;; *) echo "$caller_dir/$1" ;; esac; }
out="$(absolute "$1")"
source="$(if [ $# -ge 2 ]; then absolute "$2"; else echo policies/c-first-fit/first_fit.c; fi)"
clang="${CLANG:-clang}"

command -v "$clang" >/dev/null 2>&1 || skip "no $clang"
command -v wasm-ld >/dev/null 2>&1 || skip "no wasm-ld"

flags=(
  --target=wasm32-unknown-unknown -O2 -std=c11 -Wall -Wextra
  -ffreestanding -nostdlib
  # memcpy/memset the compiler emits (struct copies) become memory.copy/memory.fill, not imports.
  -mbulk-memory
  -I sdk/c
  -Wl,--no-entry
  -Wl,--export=airtime_abi_version -Wl,--export=airtime_alloc -Wl,--export=airtime_evaluate
  # Optional (ABI 1.1): exported when the policy defines it.
  -Wl,--export-if-defined=airtime_validate_params
  # The C stack below the data: an overflow runs off address 0 and traps instead of overwriting.
  -Wl,--stack-first -Wl,-z,stack-size=262144
)

probe_dir="$(mktemp -d)"
trap 'rm -rf "$probe_dir"' EXIT
printf 'int airtime_abi_version(void) { return 1; }\n' >"$probe_dir/probe.c"
if ! "$clang" --target=wasm32-unknown-unknown -nostdlib -Wl,--no-entry -Wl,--export=airtime_abi_version \
  -o "$probe_dir/probe.wasm" "$probe_dir/probe.c" 2>"$probe_dir/probe.log"; then
  skip "$clang cannot link for wasm32: $(head -n1 "$probe_dir/probe.log")"
fi

mkdir -p "$(dirname "$out")"
"$clang" "${flags[@]}" -o "$out" "$source"
