#!/usr/bin/env bash
# The project's test command (README "Test"); .ci/run calls exactly this.
# Runs: formatting and lint checks, the offline validation of the deployment files
# (deploy/validate.sh), every Rust test (unit, golden, property, integration,
# conformance), the benchmark smoke run when present, then the interop suite that drives a
# real `skua serve --dev` with the official NoLag Python SDK (nolag==2.6.0), and the Autobahn
# TestSuite's framing cases that need no echo (interop/autobahn.sh, kosoku from PyPI).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== services (Mosquitto, Redis, PostgreSQL)"
# shellcheck source=scripts/services.sh
source scripts/services.sh

echo "== cargo fmt --check"
cargo fmt --all --check

echo "== cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings

echo "== deployment files (Kubernetes overlays rendered + schema-checked, compose schema, Dockerfile lint)"
bash deploy/validate.sh

echo "== cargo test"
cargo test --workspace

echo "== build skua for the interop suite"
cargo build --quiet -p skua-server
export SKUA_BIN="$PWD/target/debug/skua"

if [ -x scripts/bench-smoke.sh ]; then
  echo "== benchmark smoke run"
  BENCH_PROFILE=dev bash scripts/bench-smoke.sh
fi

echo "== interop suite (real NoLag Python SDK), one node"
bash interop/run.sh

echo "== Autobahn TestSuite, the 140 cases that need no echo (kosoku), one node"
bash interop/autobahn.sh

if [ -n "${SKUA_TEST_MQTT_URL:-}" ] && [ -n "${SKUA_TEST_REDIS_URL:-}" ]; then
  echo "== interop suite, 2-node cluster over MQTT + Redis"
  SKUA_INTEROP_CLUSTER=1 bash interop/run.sh
elif [ "${CI:-}" = "true" ]; then
  echo "interop: the cluster run needs Mosquitto and Redis under CI=true" >&2
  exit 1
fi
