# shellcheck shell=bash
# Sourced by images.sh, operator-image.sh and real-node-up.sh: OCI images written and pushed
# with crane (go-containerregistry, built by crane.sh), reproducibly: the same files give the
# same digests.
#
# GNU tar writes each image's one layer (sorted names, time 0, numeric owners); crane does the
# rest: it compresses the layer (gzip level 1), writes the configuration (its `created` stays the
# zero time, `crane mutate` does not set it), the manifest and the index, and pushes. crane builds
# images in a registry, so the caller runs a scratch one for its own run (`crane registry serve`
# on 127.0.0.1, blobs in a directory of its work directory).
#
# The caller sets CRANE to crane.sh's output.

# oci_crane ARGS...: crane, whose progress log is shown only when it fails.
oci_crane() {
  local log status=0
  log=$(mktemp)
  "$CRANE" "$@" 2>"$log" || status=$?
  [[ $status == 0 ]] || { echo "crane $1 failed:" >&2; cat "$log" >&2; }
  rm -f "$log"
  return "$status"
}

# oci_layer OUT DIR [UID:PATH ...]: DIR's contents as an uncompressed layer: names relative to
# DIR, modes as they are there, owner root, time 0; each PATH (an empty directory) owned by UID
# (user and group) instead.
oci_layer() {
  local out=$1 dir=$2 spec top excluded=()
  shift 2
  local same=(--format=gnu --mtime=@0 --numeric-owner)
  for spec in "$@"; do excluded+=("--exclude=${spec#*:}"); done
  mapfile -t top < <(cd "$dir" && LC_ALL=C ls -A)
  tar -C "$dir" -cf "$out" "${same[@]}" --sort=name --owner=0 --group=0 --anchored "${excluded[@]}" -- "${top[@]}"
  for spec in "$@"; do
    tar -C "$dir" -rf "$out" "${same[@]}" --owner="${spec%%:*}" --group="${spec%%:*}" --no-recursion -- "${spec#*:}"
  done
}

# oci_scratch DIR: starts crane's registry on a free port of 127.0.0.1, its blobs in DIR/blobs,
# in a session of its own (the caller stops it: kill -- -"$(cat DIR/scratch.pid)"), and sets
# OCI_SCRATCH to its address.
oci_scratch() {
  local d=$1 port
  mkdir -p "$d/blobs"
  # Not holding the lock of the script that starts it (fd 9, see images.sh).
  setsid "$CRANE" registry serve --address 127.0.0.1:0 --disk "$d/blobs" >"$d/scratch.log" 2>&1 </dev/null 9>&- &
  echo $! >"$d/scratch.pid"
  for _ in $(seq 1 100); do
    port=$(sed -n 's/.*serving on port \([0-9][0-9]*\)$/\1/p' "$d/scratch.log")
    if [[ -n $port ]]; then
      OCI_SCRATCH=127.0.0.1:$port
      return 0
    fi
    kill -0 "$(cat "$d/scratch.pid")" 2>/dev/null || break
    sleep 0.05
  done
  echo "oci: crane's scratch registry did not start:" >&2
  cat "$d/scratch.log" >&2
  return 1
}

# oci_image LAYER PLATFORM ARGS...: the image of the one layer LAYER (oci_layer's) for PLATFORM
# (os/arch), working directory /, configured by crane mutate's ARGS (--entrypoint=, --cmd=,
# --user=, --env=, each in the --flag=value form) and sent where they say (-t REF pushes it there, -o FILE writes a docker archive);
# prints what crane mutate prints (REPOSITORY@DIGEST). The scratch registry holds the image of
# the layer alone.
oci_image() {
  local layer=$1 platform=$2 base arg
  shift 2
  # crane reads --entrypoint and --cmd as comma-separated lists.
  for arg in "$@"; do
    [[ $arg != --entrypoint=*,* && $arg != --cmd=*,* ]] || { echo "oci: $arg: a comma in a word" >&2; return 1; }
  done
  base=$(oci_crane append --oci-empty-base -f "$layer" -t "$OCI_SCRATCH/layer:latest") || return 1
  oci_crane mutate "$base" --set-platform "$platform" --workdir / "$@"
}

# oci_arch: this machine's architecture as OCI names it.
oci_arch() {
  case $(uname -m) in
    x86_64) echo amd64 ;;
    aarch64) echo arm64 ;;
    *) uname -m ;;
  esac
}
