"""The README's control-plane walk-through: `skua admin` provisions a room and an actor on a
running dev server, then the real SDK uses them (interop/provision_example.py, shown verbatim in
the README)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import skua_bin

EXAMPLE = Path(__file__).resolve().parent / "provision_example.py"
DEV_ADMIN_KEY = "skua-dev-admin-key"
GRPC_LINE = "skua grpc listening on "


def grpc_addresses(server) -> list[str]:
    """The gRPC address each node printed (the line follows `skua listening on`)."""
    nodes = getattr(server, "nodes", [server])
    deadline = time.monotonic() + 10
    while True:
        found = [next((l[len(GRPC_LINE):].strip() for l in n.stdout if l.startswith(GRPC_LINE)), None) for n in nodes]
        if all(found):
            return found
        assert time.monotonic() < deadline, f"no '{GRPC_LINE}…' line: {[n.stdout for n in nodes]}"
        time.sleep(0.05)


def admin(addr: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(skua_bin()), "admin", "--server", f"http://{addr}", *args],
        env={**os.environ, "SKUA_ADMIN_KEY": DEV_ADMIN_KEY},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_readme_provisioning_then_sdk(skua_factory):
    assert len(EXAMPLE.read_text().splitlines()) <= 35, "keep the README example short"
    server = skua_factory("--grpc-listen", "127.0.0.1:0")
    addrs = grpc_addresses(server)
    # A cluster run shares one Postgres registry across tests: start from a clean slate.
    admin(addrs[0], "actors", "delete", "worker-3")
    admin(addrs[0], "rooms", "delete", "demo", "lobby-7")

    created = admin(addrs[0], "rooms", "create", "demo", "lobby-7")
    assert created.returncode == 0, created.stderr
    assert created.stdout.strip() == "room demo/lobby-7 (static, public)"
    actor = admin(addrs[0], "--json", "actors", "create", "--type", "agent", "worker-3")
    assert actor.returncode == 0, actor.stderr
    token = json.loads(actor.stdout)["access_token"]
    assert token.startswith("at_live_")
    # Every node serves the new room and token once it has read the registry version; a read
    # through its own API makes it do so now (otherwise within a second).
    for addr in addrs:
        assert admin(addr, "actors", "get", "worker-3").returncode == 0

    result = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        env={**os.environ, "SKUA_URL": server.url, "WORKER_TOKEN": token},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, f"exit {result.returncode}\n--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
    assert "worker-3 received {'job': 42} from bob" in result.stdout, result.stdout
    assert result.stderr == "", result.stderr

    gone = admin(addrs[0], "actors", "delete", "worker-3")
    assert gone.returncode == 0 and gone.stdout.strip() == "deleted (2 objects)", gone
    again = admin(addrs[0], "actors", "get", "worker-3")
    assert again.returncode == 1 and again.stderr.strip() == 'skua admin: NotFound: actor "worker-3" not found'
