# Sourced by interop/run.sh and interop/autobahn.sh: sets `here` and `root` and exports
# SKUA_BIN (default target/debug/skua; relative paths are from the repo root), or exits 2 when
# the binary is not there. $1 names the caller in the error lines.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
bin="${SKUA_BIN:-target/debug/skua}"
case "$bin" in /*) ;; *) bin="$root/$bin" ;; esac
if [[ ! -x "$bin" ]]; then
    echo "$1: Skua binary not found at $bin" >&2
    echo "$1: build it first (cargo build -p skua-server) or set SKUA_BIN" >&2
    exit 2
fi
export SKUA_BIN="$bin"
