#!/usr/bin/env bash
# Runs the interop suite: the real NoLag Python SDK against a Skua binary built beforehand.
#   interop/run.sh [pytest args...]      (from the repo root or anywhere else)
# SKUA_BIN names the binary (default target/debug/skua; relative paths are from the repo root).
set -euo pipefail

# shellcheck source=interop/skua-bin.sh
source "$(dirname "${BASH_SOURCE[0]}")/skua-bin.sh" interop

venv="$here/.venv"
if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$here/requirements.txt"

cd "$root"
export PYTHONDONTWRITEBYTECODE=1
set +e
"$venv/bin/python" -m pytest "$here" -q "$@"
status=$?
set -e
exit "$status"
