"""The README's Python example is byte for byte interop/readme_example.py, which
test_readme_example.py runs against a real server: so the README example is tested."""
from pathlib import Path

HERE = Path(__file__).parent


def test_readme_shows_the_tested_example():
    readme = (HERE.parent / "README.md").read_text()
    example = (HERE / "readme_example.py").read_text()
    assert "```python\n" + example + "```\n" in readme


def test_readme_shows_the_tested_provisioning_example():
    readme = (HERE.parent / "README.md").read_text()
    example = (HERE / "provision_example.py").read_text()
    assert "```python\n" + example + "```\n" in readme


def test_readme_shows_the_tested_rest_example():
    readme = (HERE.parent / "README.md").read_text()
    example = (HERE / "rest_example.py").read_text()
    assert "```python\n" + example + "```\n" in readme


def test_ci_runs_the_readme_test_command_under_ci_true():
    readme = (HERE.parent / "README.md").read_text()
    command = readme.split("## Test\n", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0].strip()
    ci = (HERE.parent / ".ci" / "run").read_text().splitlines()
    assert "export CI=true" in ci
    assert ci[-1] == f"exec bash {command}"
