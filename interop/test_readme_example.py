"""The README's copy-paste example runs against a dev server and exits 0."""

import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent / "readme_example.py"


def test_readme_example_runs(skua):
    assert len(EXAMPLE.read_text().splitlines()) <= 35, "keep the README example short"
    result = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        env={**os.environ, "SKUA_URL": skua.url},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, f"exit {result.returncode}\n--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
    assert "alice received {'text': 'Hello, Alice!'} from bob" in result.stdout, result.stdout
    assert "in the room: alice {'name': 'Alice', 'status': 'online'}" in result.stdout, result.stdout
    assert result.stderr == "", result.stderr
