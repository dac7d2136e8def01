"""The core holds no dead function: every function defined at the top level of a module of ``core/src/accelkit``
is named somewhere else in the repository (the core, the plugins, the tests, the docs, the examples), besides its
own definition. A function nothing calls, exports or documents is found here, not by a reader years later.

Methods are not checked: hooks and overrides are called by name through classes the checker cannot follow.
"""

from __future__ import annotations

import ast
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = "core/src/accelkit/"
#: functions Python itself calls by their name (a module's attribute look-up and listing)
CALLED_BY_PYTHON = {"__getattr__", "__dir__"}
#: the tracked files whose words count as a use
TEXT = ("*.py", "*.rst", "*.md", "*.toml", "*.txt", "*.cfg", "*.yaml", "*.json", "*.sh")


def tracked_files() -> list[str]:
    done = subprocess.run(["git", "ls-files", *TEXT], cwd=ROOT, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        pytest.skip(f"needs a git checkout to list the repository's files: {done.stderr.strip()}")
    return done.stdout.split()


def unreferenced_functions(root: Path, files: list[str]) -> list[str]:
    """``path:line name`` of each top-level function of the core whose name occurs only once (its definition) in
    ``files`` (relative to ``root``)."""
    texts = {name: (root / name).read_text(errors="replace") for name in files if (root / name).is_file()}
    words = Counter(word for text in texts.values() for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
    unused = []
    for name, text in texts.items():
        if not (name.startswith(CORE) and name.endswith(".py")):
            continue
        for node in ast.parse(text, filename=name).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name not in CALLED_BY_PYTHON \
                    and words[node.name] <= 1:
                unused.append(f"{name}:{node.lineno} {node.name}")
    return unused


def test_every_top_level_function_of_the_core_is_used_somewhere():
    unused = unreferenced_functions(ROOT, tracked_files())
    assert not unused, ("functions named nowhere but in their definition (remove them, or use, export or "
                        f"document them): {unused}")


def test_a_function_named_nowhere_else_is_found(tmp_path):
    # the check reads what it is given: one core module with a used and an unused function, and a user of one
    module = tmp_path / CORE / "tool.py"
    module.parent.mkdir(parents=True)
    module.write_text("def wanted():\n    return 1\n\n\ndef forgotten_helper():\n    return wanted()\n")
    (tmp_path / "user.py").write_text("from accelkit.tool import wanted\n")
    assert unreferenced_functions(tmp_path, [f"{CORE}tool.py", "user.py"]) == [f"{CORE}tool.py:5 forgotten_helper"]
