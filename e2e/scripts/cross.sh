# shellcheck shell=bash
# Sourced by dist.sh (the plugin) and operator-image.sh (the operator's image): cross-building
# for linux/arm64 on an amd64 machine. Callers define say().

# The linker and C compiler (ring's assembly) for linux/arm64: Debian's cross gcc, whose
# libc6-dev-arm64-cross also holds the arm64 glibc the operator's image ships
# (/usr/aarch64-linux-gnu/lib).
arm64_toolchain() {
  if ! command -v aarch64-linux-gnu-gcc >/dev/null || [[ ! -d /usr/aarch64-linux-gnu/lib ]]; then
    say "installing gcc-aarch64-linux-gnu (Debian)"
    apt-get update -qq && apt-get install -y -qq --no-install-recommends gcc-aarch64-linux-gnu libc6-dev-arm64-cross >/dev/null
  fi
  export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
  export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
}
