#!/usr/bin/env bash
# cargo-deny's advisories check (`make advisories`). The RustSec database is a git repository:
# cloned, or brought up to date, from ADVISORY_DB (a local checkout or mirror, for machines
# without GitHub) or else from github.com/rustsec/advisory-db, into the directory deny.toml's
# db-path names, then checked offline. Fails when the database cannot be had: an advisories check
# that did not run is not a pass.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${CAPI_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capi-provider-operator}
source=${ADVISORY_DB:-https://github.com/rustsec/advisory-db.git}
# cargo-deny 0.20 keeps the database of its default URL under this name inside db-path.
db="$cache/advisory-dbs/advisory-db-3157b0e258782691"
if [[ -d "$db/.git" ]]; then
  git -C "$db" fetch --quiet "$source" HEAD
  git -C "$db" reset --quiet --hard FETCH_HEAD
else
  mkdir -p "$(dirname "$db")"
  git clone --quiet --depth 1 "$source" "$db"
fi
echo "RustSec database of $(git -C "$db" log -1 --format=%cI) from $source" >&2
deny=$("$root/e2e/scripts/cargo-tool.sh" cargo-deny 0.20.2)
cd "$root"
"$deny" --offline --locked check advisories
