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
export PYTHONDONTWRITEBYTECODE=1
exec "$venv/bin/python" "$here/validate.py"
