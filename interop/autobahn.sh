#!/usr/bin/env bash
# Runs the Autobahn TestSuite's cases that need no echo (framing, pings, reserved bits and
# opcodes, fragmentation, UTF-8, closing handshake: 140 cases) against `skua serve --dev`,
# with kosoku from PyPI; fails if any case fails. Which cases and why: interop/autobahn.py.
#   interop/autobahn.sh                  (from the repo root or anywhere else)
# SKUA_BIN names the binary (default target/debug/skua; relative paths are from the repo root).
# kosoku is installed into interop/.venv (the interop suite's venv). If that fails the run is
# skipped with a loud line, except under CI=true, where it fails.
set -euo pipefail

# shellcheck source=interop/skua-bin.sh
source "$(dirname "${BASH_SOURCE[0]}")/skua-bin.sh" autobahn

venv="$here/.venv"
install() {
    { [[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"; } &&
        "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$here/autobahn-requirements.txt"
}
if ! install; then
    if [[ "${CI:-}" == "true" ]]; then
        echo "autobahn: cannot install kosoku (interop/autobahn-requirements.txt) under CI=true" >&2
        exit 1
    fi
    echo "autobahn: ************************************************************" >&2
    echo "autobahn: SKIPPED: cannot install kosoku; the Autobahn cases did not run" >&2
    echo "autobahn: ************************************************************" >&2
    if [[ -n "${SKUA_TEST_SKIP_LOG:-}" ]]; then
        echo "interop/autobahn.sh: cannot install kosoku; the Autobahn cases did not run" >>"$SKUA_TEST_SKIP_LOG"
    fi
    exit 0
fi

cd "$root"
export PYTHONDONTWRITEBYTECODE=1
exec "$venv/bin/python" "$here/autobahn.py"
