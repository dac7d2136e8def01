"""Skip marks for tests whose tools may be missing from a machine, each naming what is missing and why.

The suite also runs on machines set up for another purpose (a GPU machine without network, say). There, a test
that needs a tool which is not installed is skipped with a reason that names the tool, instead of erroring:

* :func:`requires_build_tools`: the tests that build this repository's distributions or pip-install the plugin
  template do so without a package index (``python -m build --no-isolation``, ``pip install
  --no-build-isolation --no-deps``), so the build frontend and the build backend named in each
  ``pyproject.toml`` must already be installed; with build isolation they would have to be downloaded.
* :data:`requires_torch_xla`: tests that run XLA (in a subprocess; torch_xla is never imported in the pytest
  process, only looked up with ``find_spec``).
* :func:`import_or_skip`: ``pytest.importorskip`` for a module of a package that may be installed only in part (the
  GPU machine's sphinx), which leaves no part of that package imported.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement


def unmet_requirements(requirements: list[str]) -> list[str]:
    """Those of ``requirements`` (PEP 508 strings) that no installed distribution satisfies."""
    unmet = []
    for text in requirements:
        requirement = Requirement(text)
        try:
            version = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            unmet.append(text)
            continue
        if requirement.specifier and not requirement.specifier.contains(version, prereleases=True):
            unmet.append(f"{text} (installed: {version})")
    return unmet


def build_backend_requirements(*pyprojects: Path) -> list[str]:
    """The ``[build-system] requires`` of each ``pyproject.toml``, without repeats, in order."""
    seen: list[str] = []
    for path in pyprojects:
        for text in tomllib.loads(path.read_text())["build-system"]["requires"]:
            if text not in seen:
                seen.append(text)
    return seen


def requires_build_tools(*pyprojects: Path, frontend: bool = False) -> pytest.MarkDecorator:
    """Skip unless the build backends of ``pyprojects`` (and, with ``frontend``, the ``build`` package) are
    installed: these tests build without a package index, so nothing missing can be fetched."""
    needed = (["build"] if frontend else []) + build_backend_requirements(*pyprojects)
    unmet = unmet_requirements(needed)
    reason = (f"building distributions without a package index needs {', '.join(unmet)} installed in this "
              f"environment (pip install {' '.join(repr(r.split(' (')[0]) for r in unmet)})")
    return pytest.mark.skipif(bool(unmet), reason=reason)


def torch_xla_missing() -> bool:
    """Whether torch_xla is not installed (looked up, never imported)."""
    return importlib.util.find_spec("torch_xla") is None


requires_torch_xla = pytest.mark.skipif(
    torch_xla_missing(), reason="needs torch_xla, which is not installed here (pip install torch_xla, the version "
                                "matching torch)")


requires_mypy = pytest.mark.skipif(
    importlib.util.find_spec("mypy") is None,
    reason="needs mypy, the type checker of requirements-dev.txt, which is not installed here (pip install mypy)")


def import_or_skip(name: str, reason: str) -> ModuleType:
    """Module ``name``, imported; or skip the test with ``reason`` where it cannot be found.

    Unlike ``pytest.importorskip``, a failed import leaves nothing of it in ``sys.modules``: where a package is
    installed in part (``import sphinx`` works, ``sphinx.pycode`` does not), its parent would otherwise stay imported,
    and libraries that take an imported ``sphinx`` to be a whole one (scipy's docstring tools then import
    ``sphinx.ext``) would fail in whichever later test of the same process imports them.
    """
    before = set(sys.modules)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError:
        for added in set(sys.modules) - before:
            del sys.modules[added]
        pytest.skip(reason, allow_module_level=True)


def can_mount_tmpfs() -> bool:
    """Whether ``unshare -rm`` can mount a tmpfs here (a user and mount namespace of one's own): how the tests make a
    tiny file system that a write fills for real (``ENOSPC``). Containers without user namespaces cannot."""
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /tmp"],
                           capture_output=True, check=False)
    return probe.returncode == 0
