"""Run pytest as on a machine that lacks the optional distributions:
``python tests/helpers/without_optional.py [pytest arguments]`` from the repository root.

A GPU machine set up for the suite gets the core and the ``cpu``, ``cuda`` and ``fsdp`` plugins only (the wheels a GPU
user installs): no XLA or MLflow plugin, no torch_xla, mlflow or optuna, and there a partial sphinx (``import sphinx``
works, its submodules do not). This runs pytest with the same things absent from its process: their modules cannot be
found (``importlib.util.find_spec`` says ``None``, an import raises :class:`ModuleNotFoundError`) and their
distributions are not listed (so no entry point of theirs loads). A test that would error on that machine instead of
skipping errors here too, without a GPU machine. The tests run in this one process (``-n 0`` is added): the processes
they start, xdist's workers among them, still see everything.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

#: distributions the GPU kit does not install (normalised names)
ABSENT_DISTRIBUTIONS = frozenset({
    "accelkit-xla-bf16", "accelkit-xla-spawn", "accelkit-xla-spawn-debug", "accelkit-xla-spmd", "accelkit-mlflow",
    "torch-xla", "mlflow", "mlflow-skinny", "optuna", "optuna-integration", "wandb"})
#: top-level modules that cannot be imported there (wandb too: the kit installs accelkit-wandb, not wandb)
ABSENT_MODULES = frozenset({
    "torch_xla", "accelkit_xla_bf16", "accelkit_xla_spawn", "accelkit_xla_spawn_debug", "accelkit_xla_spmd",
    "accelkit_mlflow", "mlflow", "optuna", "optuna_integration", "wandb"})
#: packages present there in part: the package imports, none of its other submodules does
PARTIAL_PACKAGES = frozenset({"sphinx"})


#: the submodules of :data:`PARTIAL_PACKAGES` that their ``__init__`` imports (found by :func:`hide`)
PARTS: set[str] = set()


def is_absent(name: str) -> bool:
    """Whether module ``name`` cannot be imported on that machine."""
    top, _, rest = name.partition(".")
    return top in ABSENT_MODULES or (top in PARTIAL_PACKAGES and bool(rest) and name not in PARTS)


class Hiding:
    """A finder of ``sys.meta_path`` that finds nothing :func:`is_absent` names, and asks ``finder`` the rest."""

    def __init__(self, finder: Any) -> None:
        self.finder = finder

    def find_spec(self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> Any:
        """``None`` for an absent module; otherwise what the wrapped finder finds."""
        if is_absent(name):
            return None
        find = getattr(self.finder, "find_spec", None)
        return find(name, path, target) if find is not None else None

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.finder, attribute)


def _normalised(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def hide() -> None:
    """Make this process look like the GPU kit's: call before pytest (or anything that looks modules up) starts."""
    found = [name for name in sys.modules if name.partition(".")[0] in ABSENT_MODULES]
    if found:
        raise RuntimeError(f"already imported, so they cannot be hidden: {', '.join(sorted(found))}")
    for package in PARTIAL_PACKAGES:  # what importing the package imports stays importable, then is forgotten
        if package not in sys.modules and importlib.util.find_spec(package) is not None:
            before = set(sys.modules)
            importlib.import_module(package)
            PARTS.update(name for name in set(sys.modules) - before if name.startswith(f"{package}."))
            for name in [package, *PARTS]:
                sys.modules.pop(name, None)
    sys.meta_path[:] = [Hiding(finder) for finder in sys.meta_path]
    listed, one = importlib.metadata.distributions, importlib.metadata.distribution

    def distributions(**kwargs: Any) -> Iterator[importlib.metadata.Distribution]:
        return (d for d in listed(**kwargs) if _normalised(d.metadata["Name"] or "") not in ABSENT_DISTRIBUTIONS)

    def distribution(name: str) -> importlib.metadata.Distribution:
        if _normalised(name) in ABSENT_DISTRIBUTIONS:
            raise importlib.metadata.PackageNotFoundError(name)
        return one(name)

    # entry_points(), version() and packages_distributions() look these two up in their module when called
    importlib.metadata.distributions = distributions
    importlib.metadata.distribution = distribution


if __name__ == "__main__":
    del sys.path[0]  # this script's folder: the helpers are imported as helpers.<module> only
    hide()
    import pytest

    sys.exit(pytest.main([*sys.argv[1:], "-n", "0"]))
