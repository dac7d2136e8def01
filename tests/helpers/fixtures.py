"""Fixtures shared by every test of the repository, the plugins' included (the root ``conftest.py`` loads this
module as a pytest plugin).

* ``isolated``: a process environment in which no installed plugin is discovered (so tests do not depend on
  which plugins other distributions of this repository happen to have installed) and none is blocked.
* ``cpu_manager``: a plugin manager holding only the core and the reference cpu plugin.
* ``make_distribution``/``run_python``: build a real (tiny) distribution on disk and run Python code in a
  subprocess that discovers it through ``importlib.metadata``.
* ``forked_python``: ``run_python`` forked from the ``prewarmed`` interpreter.
* ``prewarmed``: run a Python program as ``python script.py`` does, in a process forked from an interpreter that
  has imported torch (``helpers.prewarmed``): one per test process, started at its first use.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from helpers.prewarmed import Prewarmed, close_shared, shared

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    """Turn entry-point discovery off and clear any plugin block list for the duration of a test."""
    monkeypatch.setenv("ACCELKIT_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("ACCELKIT_BLOCK_PLUGINS", raising=False)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def cpu_plugin() -> Any:
    """The reference cpu plugin's entry-point module, to pass in ``plugins=[...]`` when autoload is off."""
    import accelkit_cpu.plugin

    return accelkit_cpu.plugin


@pytest.fixture
def cpu_manager(isolated: None, cpu_plugin: Any) -> Any:
    """A :class:`~accelkit.plugins.manager.PluginManager` with the core and the cpu plugin only."""
    from accelkit.plugins.manager import PluginManager

    manager = PluginManager(autoload=False)
    manager.add_plugin(cpu_plugin, name="cpu")
    return manager


def _write_distribution(root: Path, name: str, version: str, entry_points: dict[str, str],
                        modules: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for module, source in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = ["[accelkit]"] + [f"{ep} = {target}" for ep, target in entry_points.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture(scope="session")
def make_distribution() -> Callable[..., Path]:
    """``make_distribution(root, name, version, entry_points={ep: "module"}, modules={module: source})``.

    Writes the modules and a ``<name>-<version>.dist-info`` with ``METADATA`` and ``entry_points.txt`` (group
    ``accelkit``) into ``root``; putting ``root`` on ``sys.path`` installs the distribution for
    ``importlib.metadata``.
    """
    return _write_distribution


def _run_python(code: str, path: list[Path] | tuple = (), env: dict[str, str] | None = None,
                python_flags: tuple[str, ...] = (), prewarmed: Prewarmed | None = None, timeout: float = 120) -> Any:
    """Run ``code`` in a fresh interpreter of this environment (forked from ``prewarmed`` if given) and return the
    JSON it printed last."""
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith("ACCELKIT_") and k not in ("PYTHONPATH", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                          "PL_GLOBAL_SEED", "PL_SEED_WORKERS")}
    full_env["PYTHONPATH"] = os.pathsep.join(str(p) for p in path)
    full_env.update(env or {})
    if prewarmed is not None:
        if python_flags:
            raise ValueError(f"python_flags={python_flags!r} need a fresh interpreter: use run_python, not "
                             "forked_python")
        proc = prewarmed.run(["-c", textwrap.dedent(code)], cwd=os.getcwd(), env=full_env, timeout=timeout)
    else:
        proc = subprocess.run([sys.executable, *python_flags, "-c", textwrap.dedent(code)], env=full_env,
                              capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"subprocess failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def lightning_records(root: Path, helper: str) -> Any:
    """``{scenario: record("lightning", root/scenario, scenario)}`` for every scenario of ``helpers.<helper>`` (its
    ``SCENARIOS`` and ``record``), run under Lightning's Trainer in one process of its own (Lightning's Trainer imports
    torch_xla), forked from the prewarmed interpreter (``helpers.prewarmed.shared``), on the CPU: the process sees no
    GPU, because on a GPU machine Lightning's first fit initializes CUDA (``isolate_rng`` saves its random state) and
    a later ``ddp_fork`` could not use it. Skips where Lightning is not installed."""
    return _lightning_records({helper: root})[helper]


def lightning_records_of(root: Path, helpers: Sequence[str]) -> dict[str, Any]:
    """``{helper: lightning_records(root/helper, helper)}``, all in one process: one import of Lightning (and of
    torch_xla, by its Trainer) for the several side-by-side comparisons of a test module, instead of one each."""
    return _lightning_records({helper: root / helper for helper in helpers})


def _lightning_records(roots: dict[str, Path]) -> dict[str, Any]:
    pytest.importorskip("lightning.pytorch", reason="compares with Lightning's Trainer")
    folders = {helper: str(root) for helper, root in roots.items()}
    return _run_python(f"""
        import importlib, json, logging, warnings
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        records = []
        for helper, root in {folders!r}.items():
            module = importlib.import_module("helpers." + helper)
            # written out once the helper's scenarios have run, as if in a process of its own: a record may still
            # grow later (Lightning's Profiler.__del__ runs its teardown, a hook the records hold)
            found = {{name: module.record("lightning", root + "/" + name, name) for name in module.SCENARIOS}}
            records.append(json.dumps(helper) + ": " + json.dumps(found))
        print("{{" + ", ".join(records) + "}}")
        """, path=[Path(__file__).resolve().parents[1]], env={"CUDA_VISIBLE_DEVICES": ""}, prewarmed=shared(),
                       timeout=120 * len(roots))


@pytest.fixture(scope="session")
def run_python() -> Callable[..., Any]:
    """``run_python(code, path=[...], env={...})``: run code in a subprocess; it must print JSON last."""
    return _run_python


@pytest.fixture(scope="session")
def forked_python(prewarmed: Prewarmed) -> Callable[..., Any]:
    """``forked_python(code, path=[...], env={...})``: as ``run_python``, in a process forked from the ``prewarmed``
    interpreter (torch and ``torch._dynamo`` already imported; accelkit, Lightning and torch_xla not): for code whose
    subject is not interpreter start-up, Python's default warning filters, or importing torch."""
    return functools.partial(_run_python, prewarmed=prewarmed)


@pytest.fixture(scope="session")
def prewarmed() -> Iterator[Prewarmed]:
    """``prewarmed.run(argv, cwd=..., env=..., timeout=...)``: ``python *argv`` without the torch import's cost."""
    yield shared()
    close_shared()  # with those that also imported more (``shared(imports=...)``)
