#!/usr/bin/env bash
# Offline validation of the deployment files (scripts/test.sh runs it): Kubernetes manifests
# rendered and schema-checked, docker-compose.yml schema-checked, the Dockerfile linted. See
# deploy/validate.py for every check. The tools (deploy/requirements.txt) are installed once
# into deploy/.venv; after that no network is needed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$here/requirements.txt"
# promtool (the alert rules' unit tests): Debian's `prometheus` package carries it. Installed
# here as root where apt-get exists (SKUA_TEST_NO_INSTALL=1 turns that off); without it
# validate.py skips those tests loudly, and fails under CI=true.
if ! command -v promtool >/dev/null 2>&1 && [[ $(id -u) == 0 && ${SKUA_TEST_NO_INSTALL:-} != 1 ]] \
    && command -v apt-get >/dev/null 2>&1; then
    echo "== installing promtool (apt-get install prometheus)"
    apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends \
        prometheus >/dev/null 2>&1 || echo "  note promtool could not be installed"
fi
export PYTHONDONTWRITEBYTECODE=1
exec "$venv/bin/python" "$here/validate.py"
