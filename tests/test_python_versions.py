"""Small truths (issue 17, item 4): the Python versions the distributions claim are the ones that work, and
CONTRIBUTING's release steps work with the dev requirements.

The distributions claimed Python >= 3.10 while the core imports ``tomllib`` (new in 3.11) and nothing ran under
3.10; the claim moved to what is tested. The release steps named ``twine``, which was no dev requirement."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers.guards import REPO  # noqa: E402

PYPROJECTS = [REPO / "core" / "pyproject.toml", *sorted((REPO / "plugins").glob("*/pyproject.toml")),
              REPO / "templates" / "plugin" / "pyproject.toml"]


def claimed(path: Path) -> SpecifierSet:
    return SpecifierSet(tomllib.loads(path.read_text())["project"]["requires-python"])


def lowest_claimed() -> tuple[int, int]:
    """The lowest ``3.x`` every distribution accepts."""
    specs = [claimed(p) for p in PYPROJECTS]
    return next((3, minor) for minor in range(6, 30) if all(f"3.{minor}.0" in s for s in specs))


def interpreter(version: tuple[int, int]) -> str | None:
    """A Python of exactly ``version`` installed here (this one, ``python3.X`` on PATH, or pyenv's)."""
    if sys.version_info[:2] == version:
        return sys.executable
    name = f"python{version[0]}.{version[1]}"
    found = shutil.which(name)
    if found:
        return found
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for candidate in sorted(pyenv.glob(f"{version[0]}.{version[1]}.*")):
        if (candidate / "bin" / "python").exists():
            return str(candidate / "bin" / "python")
    return None


def test_every_distribution_claims_the_same_python_versions():
    claims = {str(p.relative_to(REPO)): str(claimed(p)) for p in PYPROJECTS}
    assert set(claims.values()) == {">=3.11"}, claims


def test_the_core_needs_what_the_claim_excludes():
    # the lowest claimed version is the first one whose standard library has every module the core imports
    assert lowest_claimed() == (3, 11)
    sources = "\n".join(p.read_text() for p in (REPO / "core" / "src" / "accelkit").rglob("*.py"))
    assert re.search(r"^import tomllib$", sources, re.MULTILINE), "tomllib (3.11) is why 3.10 is not claimed"


@pytest.mark.slow
def test_the_core_and_plugins_import_under_the_lowest_claimed_python(tmp_path):
    version = lowest_claimed()
    python = interpreter(version)
    if python is None:
        pytest.skip(f"no Python {version[0]}.{version[1]} is installed here")
    has_torch = subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0
    if not has_torch:
        pytest.skip(f"the Python {version[0]}.{version[1]} installed here ({python}) has no torch to import the "
                    "core with")
    code = ("import accelkit, accelkit_cpu, accelkit_fsdp; "
            f"t = accelkit.Trainer(accelerator='cpu', devices=1, logger=False, default_root_dir={str(tmp_path)!r}); "
            "print('imported', t.strategy.name)")
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "imported" in done.stdout, done.stderr[-3000:]


def release_build_command() -> list[str]:
    """Step 3 of CONTRIBUTING's release steps, for one distribution (``$d``)."""
    text = (REPO / "CONTRIBUTING.md").read_text()
    line = next(line for line in text.splitlines() if "-m build" in line and line.strip().startswith("for d in"))
    body = line.split("; do ", 1)[1].rsplit("; done", 1)[0]
    return shlex.split(body)


@pytest.mark.slow
def test_the_release_steps_build_and_check_a_distribution(tmp_path):
    command = release_build_command()
    assert command[:3] == [".venv/bin/python", "-m", "build"] and command[-1] == "$d", command
    if importlib.util.find_spec("twine") is None:
        pytest.skip("twine (a dev requirement since issue 17) is not installed in this environment: "
                    "reinstall requirements-dev.txt")
    outdir = command.index("--outdir") + 1
    command[0], command[outdir], command[-1] = sys.executable, str(tmp_path / "dist"), "core"
    built = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    if built.returncode != 0 and "No matching distribution found" in built.stdout + built.stderr:
        pytest.skip("python -m build needs a package index for its isolated build environment, and none answers")
    assert built.returncode == 0, (built.stdout + built.stderr)[-3000:]
    artifacts = sorted(str(p) for p in (tmp_path / "dist").iterdir())
    assert len(artifacts) == 2, artifacts  # the sdist and the wheel
    checked = subprocess.run([sys.executable, "-m", "twine", "check", *artifacts], capture_output=True, text=True,
                             timeout=120)
    assert checked.returncode == 0 and checked.stdout.count("PASSED") == 2, checked.stdout + checked.stderr
