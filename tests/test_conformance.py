"""The conformance suite: Lightning-style scripts (``tests/conformance/*.py``) whose only change from Lightning
code is the import, each run as its own program: in a process forked from an interpreter that has imported torch
(``helpers.prewarmed``: the script's ``__main__``, ``sys.argv``, ``sys.path``, environment and exit as a fresh
interpreter's; half of a script's cost was importing torch), and in a fresh interpreter on XLA.

Every script asserts its own outcomes (loss fell, files exist, per-rank counts, hooks ran) and prints
``CONFORMANCE OK <name>``. Each runs on ``cpu`` with one process and, unless one process is its subject, on
``ddp_fork`` with two; a few also on ``ddp_spawn`` (``SPAWN_SCRIPTS``) and on XLA (PJRT on the host CPU, a
subprocess like the xla_spawn plugin's tests; torch_xla is never imported here).

The ports of issue 38.6 (``SIDE_BY_SIDE``) also run on Lightning 2.6.6, their imports switched back by the
``# was:`` comments, and each run's reported numbers, files, logged rows and scalars and checkpoints are compared
with accelkit's (``test_side_by_side_with_lightning``; on ``ddp_spawn`` too where the program's checks hold there).
"""

from __future__ import annotations

import ast
import csv
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from helpers.prewarmed import Prewarmed, shared

CONFORMANCE = Path(__file__).resolve().parent / "conformance"
SCRIPTS = sorted(p.stem for p in CONFORMANCE.glob("*.py") if not p.name.startswith("_"))
XLA_SCRIPTS = ["boring", "datamodule", "hparams"]
#: Ports of Lightning users' single-device programs, and programs whose subject is not distribution (a YAML file, a
#: study of trials): they run on one process only. A second run under ddp_spawn would repeat what the scripts above
#: prove about two processes, at about 25 s each, and the suite has a 10-minute budget.
ONE_PROCESS_ONLY = {"cli_yaml", "optuna_pruning", "user_audio_autoencoder", "user_cli_subclass_mode", "user_csv_mlp",
                    "user_dict_batch_writer", "user_early_stopping_subclass", "user_epoch_mean_callback",
                    "user_hydra_autoencoder", "user_lstm", "user_plateau_classifier", "user_printing_callback",
                    "user_transformer_curves",
                    # issue 38.6's ports: single-device programs whose checks read the caller's objects (a notebook,
                    # a model zoo's module, LBFGS on one batch); the same checks fail under Lightning's ddp_fork;
                    # under its ddp_spawn all but user_bolts_vae's do (SIDE_BY_SIDE_SPAWN: run there on both)
                    "user_bolts_logistic_regression", "user_bolts_vae", "user_cifar_onecycle", "user_glue_transformer",
                    "user_sine_lbfgs", "user_torchgeo_datamodule", "user_uvadlc_resnet", "user_uvadlc_transformer",
                    "user_wgan_gp"}
DDP_SCRIPTS = [name for name in SCRIPTS if name not in ONE_PROCESS_ONLY]
#: the users' ports of issue 38.6, also run on Lightning 2.6.6 by ``test_side_by_side_with_lightning``
SIDE_BY_SIDE = ["user_bolts_logistic_regression", "user_bolts_vae", "user_cifar_onecycle", "user_glue_transformer",
                "user_hydra_template_mnist", "user_sine_lbfgs", "user_torchgeo_datamodule", "user_uvadlc_resnet",
                "user_uvadlc_transformer", "user_wgan_gp"]
#: one CPU process on accelkit alone: every script but those the side-by-side test runs (on accelkit and on
#: Lightning) where Lightning is installed
CPU_SCRIPTS = [name for name in SCRIPTS
               if name not in SIDE_BY_SIDE or importlib.util.find_spec("lightning") is None]
# Every DDP script runs on two processes with ddp_fork: the same strategy, samplers, collectives, rank-zero
# decisions and result hand-back as ddp_spawn, and the same pickling (the launcher pickles the run, Trainer, module,
# loaders, DataModule, callbacks and logger, into a file that every worker unpickles, whichever the start method:
# ``SpawnLauncher.payload``/``worker_entry``), with workers forked instead of started as fresh interpreters (a
# ddp_spawn run of a script starts one pair of interpreters per stage, each importing torch: 70% of its time).
# What only a spawned worker does - unpickle the run in a fresh interpreter that imported nothing but the user's
# script again, so the script's classes resolve through that import and what they pickle must not rely on the
# caller's process - is run by these scripts on ddp_spawn too:
SPAWN_SCRIPTS = [
    "boring",  # the whole stage sequence (validate, fit, validate, test, predict) in fresh workers, results back;
    # the script's Module and Dataset classes re-imported; the default logger (TensorBoard) re-created in workers
    "compiled",  # torch.compile's settings unpickled where torch._dynamo was never imported, the forward compiled
    # again there, every stage; a DataModule defined in the script, its setup run in each fresh worker
    "lightning_callbacks",  # callbacks written for Lightning, unpickled with their state where the worker imports
    # Lightning itself (the script's own import), not the caller's already-imported copy; the script's own callback,
    # its folder and tag pickled to fresh workers, writing from every rank
]
#: DDP scripts whose ddp_spawn run was dropped, and the script whose ddp_spawn run still proves its spawn-specific
#: claim (a ddp_spawn run of each cost 13-42 CPU-s; each still runs on ddp_fork, where the same objects are pickled
#: and unpickled):
SPAWN_COVERED_ELSEWHERE = {
    # a DataModule pickled to fresh workers, prepare_data/setup per process: the prepare_data/setup calls and the
    # pickled DataModule are the same under ddp_fork; a script-defined DataModule re-created in fresh workers with
    # setup per process, every stage: "compiled"
    "datamodule": "compiled",
    # the logger's folder chosen by the caller and its writer re-created in workers: the pickled logger and the
    # writer made from it are the same under ddp_fork; the default TensorBoard logger re-created in fresh workers,
    # every stage: "boring"
    "tensorboard_logging": "boring",
    # a callback writing from every rank, its folder and state pickled to the workers: the same pickling under
    # ddp_fork; a script-defined callback with its folder re-created in fresh workers and writing from every rank:
    # "lightning_callbacks"; predict in fresh workers: "boring"
    "prediction_writer": "lightning_callbacks",
}


def test_the_suite_has_the_scripts_the_issue_asks_for() -> None:
    wanted = {"boring", "gan", "datamodule", "callbacks", "hparams", "schedulers", "sampler", "warmup", "metric",
              "multi_val", "limits"}
    assert wanted <= set(SCRIPTS), sorted(wanted - set(SCRIPTS))
    for name in SCRIPTS:
        source = (CONFORMANCE / f"{name}.py").read_text()
        assert "import lightning" not in source.replace("# was: import lightning", ""), name
        assert 'if __name__ == "__main__":' in source, name
        assert f'ok("{name}")' in source, f"{name}.py must end with ok({name!r})"


def test_the_base_classes_go_by_lightnings_names() -> None:
    """``L.LightningModule`` / ``L.LightningDataModule`` are accelkit's classes themselves, so the scripts change
    only their imports (``import accelkit as L``; ``from accelkit import LightningModule``)."""
    import accelkit

    assert accelkit.LightningModule is accelkit.Module
    assert accelkit.LightningDataModule is accelkit.DataModule
    for name in SCRIPTS:
        source = (CONFORMANCE / f"{name}.py").read_text()
        assert " as LightningModule" not in source and " as LightningDataModule" not in source, name
    assert "class BoringModel(L.LightningModule)" in (CONFORMANCE / "boring.py").read_text()


def test_the_scripts_run_on_ddp_spawn_are_distributed_scripts() -> None:
    assert SPAWN_SCRIPTS and set(SPAWN_SCRIPTS) <= set(DDP_SCRIPTS), sorted(set(SPAWN_SCRIPTS) - set(DDP_SCRIPTS))
    # a script whose ddp_spawn run was dropped names a script still run on ddp_spawn that covers its claim
    assert set(SPAWN_COVERED_ELSEWHERE) <= set(DDP_SCRIPTS) - set(SPAWN_SCRIPTS), SPAWN_COVERED_ELSEWHERE
    assert set(SPAWN_COVERED_ELSEWHERE.values()) <= set(SPAWN_SCRIPTS), SPAWN_COVERED_ELSEWHERE


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACCELKIT_", "PJRT_", "XRT_", "TPU_")) and k not in (
               "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "PYTHONPATH")}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def _run(name: str, tmp_path: Path, *options: str, env: dict[str, str] | None = None, timeout: float = 300,
         prewarmed: Prewarmed | None = None, folder: Path = CONFORMANCE) -> str:
    """Run the script ``name`` (in ``folder``) with ``options``: forked from ``prewarmed`` if given, else in a fresh
    interpreter; its standard output."""
    command = [sys.executable, str(folder / f"{name}.py"), "--root", str(tmp_path), *options]
    if prewarmed is not None:
        proc = prewarmed.run(command[1:], cwd=tmp_path, env=env or _env(), timeout=timeout)
    else:
        proc = subprocess.run(command, cwd=tmp_path, env=env or _env(), capture_output=True, text=True,
                              timeout=timeout)
    output = f"$ {' '.join(command)}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-8000:]}"
    assert proc.returncode == 0, f"{name} failed (exit {proc.returncode})\n{output}"
    assert f"CONFORMANCE OK {name}" in proc.stdout, f"{name} did not report success\n{output}"
    return proc.stdout


#: scripts that need a library the project's dev requirements install but a GPU machine's kit may not
NEEDS = {"optuna_pruning": ("optuna", "optuna_integration", "lightning")}


def installed(name: str) -> bool:
    """Whether the top-level package ``name`` can be imported. One already imported counts without a look-up:
    ``optuna_integration`` replaces its module with a lazy one whose ``__spec__`` is ``None``, so ``find_spec`` raises
    ``ValueError`` in a worker where an earlier test imported it."""
    return sys.modules.get(name) is not None or importlib.util.find_spec(name) is not None


@pytest.mark.slow
@pytest.mark.parametrize("name", CPU_SCRIPTS)
def test_on_cpu(name: str, tmp_path: Path, prewarmed: Prewarmed) -> None:
    missing = [lib for lib in NEEDS.get(name, ()) if not installed(lib)]
    if missing:
        pytest.skip(f"{name} needs {', '.join(missing)} (not installed)")
    _run(name, tmp_path, "--accelerator", "cpu", "--devices", "1", prewarmed=prewarmed)


@pytest.mark.slow
@pytest.mark.parametrize("name", DDP_SCRIPTS)
def test_on_ddp_fork(name: str, tmp_path: Path, prewarmed: Prewarmed) -> None:
    _run(name, tmp_path, "--accelerator", "cpu", "--devices", "2", "--strategy", "ddp_fork", prewarmed=prewarmed)


@pytest.mark.slow
@pytest.mark.parametrize("name", SPAWN_SCRIPTS)
def test_on_ddp_spawn(name: str, tmp_path: Path, prewarmed: Prewarmed) -> None:
    _run(name, tmp_path, "--accelerator", "cpu", "--devices", "2", "--strategy", "ddp_spawn", prewarmed=prewarmed)


@pytest.mark.slow
@pytest.mark.xla
@pytest.mark.skipif(importlib.util.find_spec("torch_xla") is None, reason="torch_xla is not installed")
@pytest.mark.parametrize("name", XLA_SCRIPTS)
def test_on_xla(name: str, tmp_path: Path, prewarmed: Prewarmed) -> None:
    env = _env(PJRT_DEVICE="CPU", CPU_NUM_DEVICES="1")
    _run(name, tmp_path, "--accelerator", "tpu", "--devices", "1", env=env, timeout=400, prewarmed=prewarmed)


# --- side by side with Lightning ---------------------------------------------------------------------------------
#: The ports run on Lightning too (issue 38.6): each script, with its imports switched back, on Lightning and on
#: accelkit (CPU, one process), the two runs' reports and files compared (:func:`compare_runs`).
#: (SIDE_BY_SIDE, above with the script lists: ``test_on_cpu`` leaves them to the side-by-side test where Lightning is
#: installed, which runs their accelkit side and its checks too.)
#: A ported import keeps the Lightning statement it replaced in a comment: ``import accelkit as L  # was: import
#: lightning as L``; in a parenthesised ``from accelkit.x import (...)`` every name's line carries its own.
WAS = re.compile(r"^(?P<code>.*?)\s+# was: (?P<was>(?:import|from) lightning\b.*)$")
OPENS_BLOCK = re.compile(r"^from accelkit[\w.]* import \($")
#: How close accelkit's numbers must be to Lightning's. Both runs seed the same generators, build the same module
#: and feed it the same batches in the same order on one CPU process, so training gives the same floats; what each
#: framework computes by itself (an epoch's mean of a logged value, weighted by batch size) may add in another order,
#: which moves float32's last bits (about 6e-8 each): 1e-6 allows that, and a missed or extra step or batch moves
#: these metrics by 1e-3 or more.
SIDE_RELATIVE, SIDE_ABSOLUTE = 1e-6, 1e-9
NUMBERS = re.compile(r"^CONFORMANCE NUMBERS (.*)$", re.MULTILINE)


def _side_by_side_env() -> dict[str, str]:
    """Both sides' environment: the process sees no GPU (Lightning's first fit would initialize CUDA otherwise)."""
    return _env(CUDA_VISIBLE_DEVICES="")


def lightning_source(source: str) -> str:
    """``source`` with every accelkit import marked ``# was: <statement>`` replaced by that statement."""
    lines: list[str] = []
    block: list[str] | None = None
    for number, line in enumerate(source.splitlines(), 1):
        marked = WAS.match(line)
        if block is not None:
            if line.strip() == ")":
                lines += block
                block = None
            elif marked:
                block.append(marked["was"])
            else:
                raise ValueError(f"line {number}: {line!r} in a ported import has no '# was: <Lightning import>'")
        elif OPENS_BLOCK.match(line):
            block = []
        else:
            lines.append(marked["was"] if marked else line)
    return "\n".join(lines) + "\n"


def _statements(source: str, imports: bool) -> list[str]:
    tree = ast.parse(source)
    return [ast.dump(node) for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom) == imports]


@pytest.mark.parametrize("name", SIDE_BY_SIDE)
def test_the_lightning_copy_of_a_port_differs_in_its_imports_only(name: str) -> None:
    source = (CONFORMANCE / f"{name}.py").read_text()
    copy = lightning_source(source)
    assert _statements(copy, imports=False) == _statements(source, imports=False)
    assert not re.search(r"^\s*(from|import) accelkit\b", copy, re.MULTILINE), f"{name}: an unmarked accelkit import"
    assert not re.search(r"\baccelkit\.\w", copy), f"{name}: uses accelkit by a name the imports do not switch"
    switched = set(_statements(source, imports=True)) - set(_statements(copy, imports=True))
    assert switched and all("accelkit" in statement for statement in switched), (name, switched)
    bound = {alias.asname or alias.name for node in ast.parse(copy).body if isinstance(node, ast.ImportFrom)
             and (node.module or "").startswith("lightning") for alias in node.names}
    ported = {alias.asname or alias.name for node in ast.parse(source).body if isinstance(node, ast.ImportFrom)
              and (node.module or "").startswith("accelkit") for alias in node.names}
    assert bound == ported, f"{name}: the Lightning imports bind {sorted(bound)}, the port's {sorted(ported)}"


def test_a_ported_import_without_its_lightning_statement_is_refused() -> None:
    source = "from accelkit.callbacks import (\n    Timer,  # was: from lightning.pytorch.callbacks import Timer\n" \
             "    EarlyStopping,\n)\n"
    with pytest.raises(ValueError, match="line 3: '    EarlyStopping,' in a ported import has no '# was: "):
        lightning_source(source)


def _close(ours: Any, theirs: Any, where: str) -> list[str]:
    """Where ``ours`` and ``theirs`` (JSON data) differ: other keys or lengths, other values, floats beyond the
    tolerance."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        if sorted(ours) != sorted(theirs):
            return [f"{where}: keys {sorted(ours)} (accelkit) != {sorted(theirs)} (Lightning)"]
        return [d for key in ours for d in _close(ours[key], theirs[key], f"{where}[{key!r}]")]
    if isinstance(ours, list) and isinstance(theirs, list):
        if len(ours) != len(theirs):
            return [f"{where}: {len(ours)} items (accelkit) != {len(theirs)} (Lightning)"]
        return [d for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) for d in _close(a, b, f"{where}[{i}]")]
    if isinstance(ours, float) or isinstance(theirs, float):
        if isinstance(ours, int | float) and isinstance(theirs, int | float) and (
                math.isclose(ours, theirs, rel_tol=SIDE_RELATIVE, abs_tol=SIDE_ABSOLUTE)
                or (math.isnan(ours) and math.isnan(theirs))):
            return []
    elif type(ours) is type(theirs) and ours == theirs:  # counts, names, flags: exactly
        return []
    return [f"{where}: {ours!r} (accelkit) != {theirs!r} (Lightning)"]


def _number(text: str) -> Any:
    try:
        return float(text)
    except ValueError:
        return text


def _event_scalars(folder: Path) -> list[tuple[str, int, float]]:
    """Every scalar in the TensorBoard event files under ``folder``, as (tag, step, value), sorted."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    found = []
    for path in folder.rglob("events.out.tfevents.*"):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    found.append((value.tag, event.step, value.simple_value))
                elif value.HasField("tensor") and len(value.tensor.float_val) == 1:
                    found.append((value.tag, event.step, value.tensor.float_val[0]))
    return sorted(found)


def _checkpoint(path: Path) -> dict[str, Any]:
    """What both frameworks store the same way in a checkpoint: the weights, the counts, the hyper-parameters."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    return {"state_dict": {key: tensor.tolist() for key, tensor in state["state_dict"].items()},
            "epoch": state["epoch"], "global_step": state["global_step"],
            "hyper_parameters": dict(state.get("hyper_parameters", {}))}


def run_record(root: Path, stdout: str) -> dict[str, Any]:
    """What a run reported and wrote: its ``CONFORMANCE NUMBERS`` line, the files under ``root`` (the TensorBoard
    event files as one name: Lightning starts an event file per stage, accelkit one per process and version, as
    ``docs/migrating-from-lightning.rst`` says; their scalars are compared together), every ``metrics.csv``'s rows,
    every event file's scalars and every checkpoint's weights, counts and hyper-parameters."""
    reports = NUMBERS.findall(stdout)
    assert len(reports) == 1, f"one CONFORMANCE NUMBERS line wanted, found {len(reports)}:\n{stdout[-4000:]}"
    files = sorted({re.sub(r"events\.out\.tfevents\..*", "events.out.tfevents.*", path.relative_to(root).as_posix())
                    for path in root.rglob("*") if path.is_file()})
    record: dict[str, Any] = {"numbers": json.loads(reports[0]), "files": files}
    for path in sorted(root.rglob("metrics.csv")):
        with open(path, newline="") as handle:
            rows = [{key: _number(value) for key, value in row.items()} for row in csv.DictReader(handle)]
        record[path.relative_to(root).as_posix()] = rows
    events = sorted({path.parent for path in root.rglob("events.out.tfevents.*")})
    for folder in events:
        record[f"{folder.relative_to(root).as_posix()}/events"] = [list(scalar) for scalar in _event_scalars(folder)]
    for path in sorted(root.rglob("*.ckpt")):
        record[path.relative_to(root).as_posix()] = _checkpoint(path)
    return record


GUIDE = CONFORMANCE.parents[1] / "docs" / "migrating-from-lightning.rst"


def last_ckpt_follows_the_run(ours: dict[str, Any], lightning: dict[str, Any]) -> None:
    """The guide's row "``last.ckpt`` with ``save_last=True`` and a ``monitor``": accelkit's ``last.ckpt`` holds the
    state at the run's end; Lightning 2.6.6's stays a copy of the newest top-k file once the value stops improving."""
    assert "   * - ``last.ckpt`` with ``save_last=True`` and a ``monitor``, at a save whose value is not among the " \
           "top k\n     - not written\n     - written\n     - differs: " in GUIDE.read_text()
    last, best = "checkpoints/last.ckpt", f"checkpoints/{lightning['numbers']['best']}"
    assert not _close(lightning[last], lightning[best], "Lightning's last.ckpt and best")
    assert lightning[last]["global_step"] < lightning["numbers"]["steps"], "Lightning's last.ckpt is the run's end"
    assert ours[last]["global_step"] == ours["numbers"]["steps"], "accelkit's last.ckpt is not the run's end"
    del ours[last], lightning[last]


def the_caller_holds_rank_zeros_state(ours: dict[str, Any], lightning: dict[str, Any]) -> None:
    """The guide's Trainer attributes: after a ``ddp_spawn`` fit Lightning's caller reads ``global_step`` 0 and its
    ``ModelCheckpoint`` gets only the best path back (``best_model_score`` None); accelkit's caller holds rank 0's
    counts and the callback's state (user_bolts_vae: 4 epochs of 8 batches a process)."""
    guide = " ".join(GUIDE.read_text().split())
    assert "Unlike Lightning's caller, it also holds rank 0's ``current_epoch``, ``global_step``" in guide
    assert "a spawned run hands its state back to the caller's instance" in guide
    assert (lightning["numbers"]["steps"], lightning["numbers"]["best_score"]) == (0, None), lightning["numbers"]
    assert ours["numbers"]["steps"] == 4 * 512 // 32 // 2 and isinstance(ours["numbers"]["best_score"], float)
    for record in (ours, lightning):
        del record["numbers"]["steps"], record["numbers"]["best_score"]


#: Deliberate differences, by script and strategy: each checks that the two runs differ as the migration guide
#: says, then takes what differs out of the comparison.
KNOWN_DIFFERENCES = {("user_hydra_template_mnist", "auto"): last_ckpt_follows_the_run,
                     ("user_bolts_vae", "ddp_spawn"): the_caller_holds_rank_zeros_state}


def compare_runs(name: str, ours: dict[str, Any], lightning: dict[str, Any], strategy: str = "auto") -> None:
    """Fail with every place where accelkit's run record differs from Lightning's beyond the guide's differences."""
    if (name, strategy) in KNOWN_DIFFERENCES:
        KNOWN_DIFFERENCES[name, strategy](ours, lightning)
    differences = _close(ours, lightning, name)
    assert not differences, f"{name}: accelkit's run differs from Lightning's:\n" + "\n".join(differences[:20])


@pytest.fixture
def lightning_prewarmed(prewarmed: Prewarmed) -> Prewarmed:
    """A :class:`Prewarmed` interpreter that has also imported what every Lightning program here imports:
    ``lightning.pytorch`` (about 2 CPU-s a program) and, where it is installed, ``torch_xla``, which Lightning's
    ``Trainer()`` imports to count TPUs (about 2 CPU-s more; the import reads the environment, so the interpreter
    starts with the runs' own), for the Lightning side of the comparisons only: accelkit's side runs forked from
    ``prewarmed``, where neither was imported. One per test process (``helpers.prewarmed.shared``), ended with
    ``prewarmed`` (not a fixture of a wider scope here, which would keep this module's tests on one xdist worker)."""
    imports = ["lightning", "lightning.pytorch"]
    if importlib.util.find_spec("torch_xla") is not None:
        imports.append("torch_xla")
    # one per process: the key leaves out what pytest changes per test (PYTEST_CURRENT_TEST)
    return shared(imports, {k: v for k, v in _side_by_side_env().items() if not k.startswith("PYTEST_")})


def side_by_side(name: str, tmp_path: Path, prewarmed: Prewarmed, lightning_prewarmed: Prewarmed, *options: str,
                 strategy: str = "auto") -> None:
    """Run the port ``name`` with ``options`` on Lightning (its imports switched back; forked from
    ``lightning_prewarmed``) and on accelkit (forked from ``prewarmed``), and compare."""
    copy = tmp_path / "lightning_scripts"
    copy.mkdir()
    shutil.copy(CONFORMANCE / "_cli.py", copy)
    (copy / f"{name}.py").write_text(lightning_source((CONFORMANCE / f"{name}.py").read_text()))
    records = {}
    for framework, folder, forking in (("lightning", copy, lightning_prewarmed), ("accelkit", CONFORMANCE, prewarmed)):
        root = tmp_path / framework
        root.mkdir()
        stdout = _run(name, root, "--accelerator", "cpu", "--strategy", strategy, *options, prewarmed=forking,
                      folder=folder, env=_side_by_side_env(), timeout=600)
        records[framework] = run_record(root, stdout)
    compare_runs(name, records["accelkit"], records["lightning"], strategy)


needs_lightning = pytest.mark.skipif(importlib.util.find_spec("lightning") is None,
                                     reason="needs Lightning (a dev requirement), to compare with")


@pytest.mark.slow
@needs_lightning
@pytest.mark.parametrize("name", SIDE_BY_SIDE)
def test_side_by_side_with_lightning(name: str, tmp_path: Path, prewarmed: Prewarmed,
                                     lightning_prewarmed: Prewarmed) -> None:
    """The script passes its own checks on Lightning and on accelkit, and both runs report the same numbers, write
    the same files (checkpoint names, log folders) and log the same rows and scalars; one CPU process each."""
    side_by_side(name, tmp_path, prewarmed, lightning_prewarmed, "--devices", "1")


#: The ports whose checks hold on two processes under Lightning 2.6.6's ddp_spawn, run so on both frameworks. The
#: others read what only the caller's process has after a spawned fit, and fail on Lightning too (run by hand,
#: 2 CPU processes): user_bolts_logistic_regression (``trainer.optimizers`` is empty in the caller),
#: user_uvadlc_transformer (so is ``trainer.optimizers``), user_glue_transformer (``total_steps`` is set on the
#: workers' copies of the module), user_torchgeo_datamodule (the marks are recorded on the workers' copies),
#: user_cifar_onecycle and user_uvadlc_resnet (the caller's logger takes a new ``version_N`` after the fit),
#: user_sine_lbfgs (``return_predictions=True`` is refused under spawn), user_wgan_gp (DDP refuses the generator's
#: parameters unused in the critic's step) and user_hydra_template_mnist, which runs on ddp_fork in
#: ``test_on_ddp_fork`` (accelkit only; it and Lightning 2.6.6 pass there, per commit cec9ab2).
SIDE_BY_SIDE_SPAWN = ["user_bolts_vae"]


@pytest.mark.slow
@needs_lightning
@pytest.mark.parametrize("name", SIDE_BY_SIDE_SPAWN)
def test_side_by_side_with_lightning_on_ddp_spawn(name: str, tmp_path: Path, prewarmed: Prewarmed,
                                                  lightning_prewarmed: Prewarmed) -> None:
    """As :func:`test_side_by_side_with_lightning`, on two processes started by ``ddp_spawn``."""
    side_by_side(name, tmp_path, prewarmed, lightning_prewarmed, "--devices", "2", strategy="ddp_spawn")
