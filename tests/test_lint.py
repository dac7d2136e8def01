"""ruff, configured in pyproject.toml (pycodestyle, pyflakes, import sorting, bugbear, pyupgrade; 120 columns), finds
nothing in the whole repository: the core, the plugins and the tests, and the benchmarks, the plugin template (what
third parties copy), the examples and the docs' code.

Not marked slow although it starts a process: ruff is a native program that checks the whole tree in well under a
second, without importing anything of ours.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.requirements import unmet_requirements

ROOT = Path(__file__).resolve().parents[1]
#: what ruff checks, relative to the repository root: all of it (what git ignores, such as .venv, is skipped)
CHECKED = (".",)


def pinned(tool: str) -> str:
    """The ``tool==version`` line of requirements-dev.txt (the version whose rules the tree is kept clean for)."""
    found = re.search(rf"^{tool}==\S+", (ROOT / "requirements-dev.txt").read_text(), re.M)
    assert found, f"requirements-dev.txt pins no version of {tool}"
    return found.group(0)


def test_ruff_finds_nothing():
    unmet = unmet_requirements([pinned("ruff")])
    if unmet:
        pytest.skip(f"needs {unmet[0]}: another version checks other rules (pip install -r requirements-dev.txt)")
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
                           *CHECKED], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"ruff check {' '.join(CHECKED)} found:\n{proc.stdout}{proc.stderr}"


def test_every_python_file_of_the_repository_is_checked():
    """What ruff reads is every tracked Python file: a folder left out (benchmarks/ and templates/ once were) would
    collect findings unseen."""
    unmet = unmet_requirements([pinned("ruff")])
    if unmet:
        pytest.skip(f"needs {unmet[0]}: another version reads other files (pip install -r requirements-dev.txt)")
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    if tracked.returncode != 0:
        pytest.skip(f"needs a git checkout to list the tracked files: {tracked.stderr.strip()}")
    listed = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--show-files", *CHECKED],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    checked = {Path(line).resolve() for line in listed.stdout.splitlines() if line.endswith(".py")}
    missed = sorted(name for name in tracked.stdout.splitlines() if (ROOT / name).resolve() not in checked)
    assert not missed, f"ruff check {' '.join(CHECKED)} does not read {missed}"
