"""The core and the plugin template type-check: mypy, configured in the workspace's ``pyproject.toml``
(``[tool.mypy]``: the files, the Python version, the strictness per package, the third-party libraries without type
information), reports no error. CONTRIBUTING.md states the strictness and the command."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from helpers.requirements import requires_mypy

ROOT = Path(__file__).resolve().parent.parent


def mypy_config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]


def test_the_configuration_checks_every_body_and_needs_every_annotation():
    config = mypy_config()
    # the core, and the template third parties copy (type-checked against the core's annotations, as their
    # plugins will be: a record's options given as the dict the docs show, a precision's step result)
    assert config["files"] == ["core/src/accelkit", "templates/plugin/src/accelkit_mydevice"]
    assert all((ROOT / path / "__init__.py").is_file() for path in config["files"])
    assert config["check_untyped_defs"] is True
    assert config["disallow_untyped_defs"] is True
    assert "ignore_missing_imports" not in config  # only per library, in an override


@pytest.fixture(scope="module")
def mypy_cache() -> Path:
    """mypy's cache folder (``.mypy_cache``, ignored by git), shared by this module's runs: the first fills it (30 s
    to a minute from cold), the next reads what it has already analysed (torch's stubs, the core) in seconds. A
    module-scoped fixture keeps the module's tests on one worker, one after the other (``helpers.scheduling``), so
    on a clean clone only the first run is cold and no two runs write the cache at once."""
    return ROOT / ".mypy_cache"


@pytest.mark.slow
@requires_mypy
def test_the_core_type_checks(mypy_cache: Path):
    # The run reads [tool.mypy] of the workspace's pyproject.toml. The limit only keeps a hung checker from hanging
    # the suite.
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(mypy_cache)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"mypy found errors:\n{done.stdout}{done.stderr}"
    assert "Success: no issues found" in done.stdout


@pytest.mark.slow
@requires_mypy
def test_a_read_of_an_attribute_the_trainer_lacks_is_a_type_error(tmp_path, mypy_cache: Path):
    """The Trainer's ``__getattr__`` (a sentence for a name it lacks, at run time) is hidden from the checker, so a
    misspelt ``trainer.X`` in the core (or in a user's typed code) is an error, not a silent ``Any``."""
    user = tmp_path / "user_code.py"
    user.write_text("import accelkit\n\n\ndef epoch(trainer: accelkit.Trainer) -> int:\n"
                    "    return trainer.curent_epoch + trainer.current_epoch\n")
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                           "--cache-dir", str(mypy_cache), str(user)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    assert '"Trainer" has no attribute "curent_epoch"' in done.stdout, done.stdout
    assert "current_epoch\"" not in done.stdout.replace('"curent_epoch"', "")  # the real name type-checks


#: the most ``Any`` names (in code, not prose) ``core/src`` may hold: 1,701 before issue 40 (a63c2a2), 421 after
#: it (985d394). Lower it when a change takes some away; CONTRIBUTING.md ("Type checking") says where one belongs.
ANY_BUDGET = 421


def any_names(root: Path) -> dict[str, int]:
    """How many times each ``.py`` file under ``root`` names ``Any`` in its code (docstrings and comments left out)."""
    import tokenize

    counts = {}
    for path in sorted(root.rglob("*.py")):
        with path.open("rb") as source:
            found = sum(1 for token in tokenize.tokenize(source.readline)
                        if token.type == tokenize.NAME and token.string == "Any")
        if found:
            counts[str(path.relative_to(root))] = found
    return counts


def test_any_stays_rare():
    counts = any_names(ROOT / "core" / "src")
    total = sum(counts.values())
    most = sorted(counts.items(), key=lambda item: -item[1])[:5]
    assert total <= ANY_BUDGET, (
        f"core/src names Any {total} times, more than the {ANY_BUDGET} allowed (CONTRIBUTING.md, 'Type checking': "
        f"Any only for overridden hooks' parameters, pass-through arguments and mixed-value dicts); most in {most}")


def test_the_any_count_sees_code_and_not_prose(tmp_path):
    (tmp_path / "m.py").write_text('"""Any prose."""\nfrom typing import Any  # Any comment\nx: Any = 1\n')
    assert any_names(tmp_path) == {"m.py": 2}
