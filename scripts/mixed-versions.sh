#!/usr/bin/env bash
# The mixed-version cluster run (issue 32, item 9; docs/operations.md, "Upgrade order for mixed
# versions"): the previous release and this build as the two nodes of one cluster, on the shared
# Mosquitto, Redis and a Postgres database that this build migrated, running
# interop/test_mixed_versions.py (publications both ways, presence both ways, a durable group's
# live delivery and replay across the nodes).
#   scripts/mixed-versions.sh
# The previous release is built from the pinned commit PREVIOUS_RELEASE below (set
# SKUA_PREVIOUS_RELEASE to try another): a `git worktree` of it built with this CARGO_TARGET_DIR,
# so the dependencies this build compiled are reused and only Skua's own crates are compiled
# again. The binary is kept as target/previous-release/skua-<commit>: later runs build nothing.
# This build's binary is SKUA_BIN (default target/debug/skua, built beforehand). Bump
# PREVIOUS_RELEASE to the released commit at each release.
#
# Needs SKUA_TEST_MQTT_URL, SKUA_TEST_REDIS_URL and SKUA_TEST_POSTGRES_URL (`source
# scripts/services.sh`) and the pinned commit in the clone's history (a shallow clone fetches it
# from its origin); without them it fails (never skips).
set -euo pipefail
cd "$(dirname "$0")/.."
PREVIOUS_RELEASE="${SKUA_PREVIOUS_RELEASE:-9c68e9b36b8be973a06de9f28fd8d599954b8cde}"
target="${CARGO_TARGET_DIR:-$PWD/target}"
new_bin="${SKUA_BIN:-$target/debug/skua}"
case "$new_bin" in /*) ;; *) new_bin="$PWD/$new_bin" ;; esac

fail() {
  echo "mixed-versions: $*" >&2
  exit 1
}
[ -x "$new_bin" ] || fail "this build's binary is not at $new_bin (cargo build -p skua-server, or set SKUA_BIN)"
for var in SKUA_TEST_MQTT_URL SKUA_TEST_REDIS_URL SKUA_TEST_POSTGRES_URL; do
  [ -n "${!var:-}" ] || fail "$var is not set (source scripts/services.sh): the cluster needs it"
done
# A shallow clone lacks it: fetch that one commit from the clone's origin first.
git cat-file -e "$PREVIOUS_RELEASE^{commit}" 2>/dev/null \
  || git fetch --quiet --depth=1 origin "$PREVIOUS_RELEASE" \
  || true
git cat-file -e "$PREVIOUS_RELEASE^{commit}" 2>/dev/null \
  || fail "the pinned previous release $PREVIOUS_RELEASE is not in this clone's history and its origin did not give it"

prev_bin="$target/previous-release/skua-$PREVIOUS_RELEASE"
if [ ! -x "$prev_bin" ]; then
  echo "== building the previous release $PREVIOUS_RELEASE (shared CARGO_TARGET_DIR: dependencies reused)"
  start=$SECONDS
  mkdir -p "$target/previous-release"
  src="$target/previous-release/src"
  git worktree remove --force "$src" >/dev/null 2>&1 || rm -rf "$src"
  git worktree prune
  git worktree add --quiet --detach "$src" "$PREVIOUS_RELEASE"
  # The build leaves the previous release at target/debug/skua (a hard link into deps/): the
  # binary there is kept aside and put back afterwards as a file of its own.
  keep="$target/previous-release/skua-this-build"
  rm -f "$keep"
  [ ! -e "$target/debug/skua" ] || cp "$target/debug/skua" "$keep"
  set +e
  (cd "$src" && SKUA_GIT_SHA="$PREVIOUS_RELEASE" CARGO_TARGET_DIR="$target" cargo build --quiet -p skua-server)
  status=$?
  set -e
  if [ "$status" -eq 0 ]; then
    cp "$target/debug/skua" "$prev_bin.tmp"
    mv "$prev_bin.tmp" "$prev_bin"
  fi
  rm -f "$target/debug/skua"
  [ ! -e "$keep" ] || mv "$keep" "$target/debug/skua"
  git worktree remove --force "$src"
  [ "$status" -eq 0 ] || fail "the previous release $PREVIOUS_RELEASE did not build"
  echo "== previous release built in $((SECONDS - start))s"
fi
cmp -s "$prev_bin" "$new_bin" && fail "$prev_bin and $new_bin are the same binary"

echo "== interop, 2-node cluster: node 0 this build, node 1 the previous release ($PREVIOUS_RELEASE)"
SKUA_INTEROP_CLUSTER=1 SKUA_BIN="$new_bin" SKUA_BIN_PEER="$prev_bin" bash interop/run.sh -k test_mixed_versions
