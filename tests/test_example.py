"""The digits example through the ``accelkit`` command, exactly as the README runs it (the command's script forked
from an interpreter that has imported torch, ``helpers.prewarmed``: the import is a third of a one-process run)."""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers.guards import REPO, child_env  # noqa: E402
from helpers.prewarmed import Prewarmed  # noqa: E402

pytestmark = pytest.mark.slow

ACCELKIT = Path(sys.executable).parent / "accelkit"
EXAMPLE = f"{REPO / 'examples' / 'digits.py'}:DigitsClassifier"


def run_fit(prewarmed: Prewarmed, tmp_path: Path, *extra: str, timeout: float) -> str:
    """Run ``accelkit fit`` on the example in ``tmp_path`` (logs and checkpoints land there); its stdout. It prints
    no warning: a newcomer's first command (the README's) opens with none."""
    proc = prewarmed.run([str(ACCELKIT), "fit", EXAMPLE, *extra], cwd=tmp_path, env=child_env(), timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "warning" not in (proc.stdout + proc.stderr).lower(), proc.stdout + proc.stderr
    return proc.stdout


def logged(version: Path, name: str) -> list[float]:
    """The values of metric ``name`` the default logger wrote into the version folder (TensorBoard's events, or
    the CSV logger's metrics.csv where tensorboard is not installed)."""
    if (version / "metrics.csv").is_file():
        with open(version / "metrics.csv", newline="") as handle:
            return [float(row[name]) for row in csv.DictReader(handle) if row.get(name)]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(version))
    events.Reload()
    return [event.value for event in events.Scalars(name)]


def held_out_accuracy(stdout: str) -> float:
    match = re.search(r"held-out test_acc = ([0-9.]+)", stdout)
    assert match, stdout
    return float(match.group(1))


def test_digits_defaults_reach_95_percent(tmp_path, prewarmed):
    stdout = run_fit(prewarmed, tmp_path, timeout=300)
    assert "devices=[0] strategy=single_device precision=32-true" in stdout
    assert held_out_accuracy(stdout) >= 0.95, stdout
    version = tmp_path / "lightning_logs" / "version_0"  # the run's folder, as Lightning lays it out
    written = list((version / "checkpoints").iterdir())  # Lightning's default: one epoch=E-step=S.ckpt
    assert len(written) == 1 and written[0].name.startswith("epoch="), written
    assert f"(best {written[0]})" in stdout  # the end-of-fit summary names this run's file
    # The loss falls: the default logger's per-step train_loss (every 10 steps, the command's first-run default:
    # twice an epoch of 20 batches) and per-epoch val_loss.
    train, val = logged(version, "train_loss"), logged(version, "val_loss")
    assert len(train) == 40 and len(val) == 20
    assert max(train[-3:]) < 0.5 * train[0], train
    assert val[-1] < 0.5 * val[0], val


def test_digits_two_process_ddp_spawn(tmp_path, prewarmed):
    # accelerator named: on a machine with one GPU, "auto" would pick it and two devices would not exist
    stdout = run_fit(prewarmed, tmp_path, "--accelerator", "cpu", "--devices", "2", "--strategy", "ddp_spawn",
                        "--no-progress-bar", timeout=180)
    assert "devices=[0, 1] strategy=ddp_spawn" in stdout
    # 1,257 training digits: each rank reads ceil(1257 / 2) = 629 of them, 10 batches of 64 per epoch
    assert "fit stopped: max_epochs=20 reached; 20 epoch(s), 200 step(s)" in stdout
    assert held_out_accuracy(stdout) >= 0.95, stdout
