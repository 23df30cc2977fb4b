#!/usr/bin/env bash
# Runs the cargo-fuzz targets in fuzz/ for SECONDS each (default 20; `make fuzz` uses 300).
#   fuzz.sh [SECONDS] [TARGET...]
# FUZZ_SANITIZER (default address) picks the instrumentation; `make fuzz-short` uses none: the targets
# are safe Rust, a panic is the finding, and AddressSanitizer roughly doubles the build and halves the
# executions of a 20-s run. The long `make fuzz` keeps AddressSanitizer for the unsafe code of dependencies.
# Needs the nightly toolchain (libFuzzer's instrumentation) and cargo-fuzz; installs cargo-fuzz
# from crates.io into the cache, and fails when no nightly toolchain can be had.
# Corpora live in the cache, so runs build on each other; a crash fails the run and leaves its
# input in fuzz/artifacts/<target>/ to turn into a regression test.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
seconds=${1:-20}
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(substitution metadata pipeline yaml_differential)
cache=${CAPI_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capi-provider-operator}
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "fuzz: installing the nightly toolchain" >&2
  if ! rustup toolchain install nightly --profile minimal >&2; then
    echo "fuzz: FAIL: no nightly Rust toolchain could be installed (libFuzzer needs it)" >&2
    exit 1
  fi
fi
fuzz_bin="$cache/cargo-fuzz/bin"
if [[ ! -x "$fuzz_bin/cargo-fuzz" ]]; then
  echo "fuzz: installing cargo-fuzz into $fuzz_bin" >&2
  cargo install --locked --root "$cache/cargo-fuzz" cargo-fuzz >&2
fi
export PATH="$fuzz_bin:$PATH"
export CARGO_TARGET_DIR="$cache/fuzz-target"
cd "$root/fuzz"
# Build first, so a build failure fails the run instead of disappearing in the filtered output.
sanitizer=${FUZZ_SANITIZER:-address}
# cargo-fuzz has no --locked; this check fails the run when fuzz/Cargo.lock lacks a package the
# workspace now uses, instead of the build rewriting the committed lock in the tree.
if ! cargo +nightly metadata --locked --format-version 1 >/dev/null; then
  echo "fuzz: fuzz/Cargo.lock is stale: run 'cargo +nightly update -w' in fuzz/ and commit it" >&2
  exit 1
fi
cargo +nightly fuzz build --sanitizer "$sanitizer" >&2
for t in "${targets[@]}"; do
  corpus="$cache/fuzz-corpus/$t"
  mkdir -p "$corpus"
  seeds=()
  [[ -d "$root/fuzz/seeds/$t" ]] && seeds=("$root/fuzz/seeds/$t")
  echo "fuzz: $t for ${seconds}s" >&2
  log="$cache/fuzz-$t.log"
  status=0
  cargo +nightly fuzz run --sanitizer "$sanitizer" "$t" "$corpus" "${seeds[@]}" -- \
    -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 -print_final_stats=1 \
    >"$log" 2>&1 || status=$?
  grep -E '^(stat::number_of_executed_units|stat::new_units_added|SUMMARY)' "$log" >&2 || true
  if [[ $status -ne 0 ]]; then
    echo "fuzz: $t failed (exit $status); last lines of $log:" >&2
    tail -30 "$log" >&2
    exit 1
  fi
  if compgen -G "$root/fuzz/artifacts/$t/crash-*" >/dev/null; then
    echo "fuzz: $t crashed; inputs in fuzz/artifacts/$t/" >&2
    exit 1
  fi
done
echo "fuzz: ${#targets[@]} targets ran ${seconds}s each without a crash" >&2
