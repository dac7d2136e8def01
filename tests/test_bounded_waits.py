"""Distributed runs whose ranks disagree end with a message naming the rank, instead of waiting 30 minutes.
Real two-process ddp_spawn runs on gloo."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import accelkit
from accelkit.errors import ConfigurationError

HELPER = Path(__file__).parent / "helpers" / "stall_fit.py"


def _run(tmp_path: Path, mode: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(HELPER), str(tmp_path), mode], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_a_stuck_rank_fails_the_run_at_the_collective_timeout_naming_it(tmp_path):
    done = _run(tmp_path, "stuck")
    assert done.returncode != 0
    # the watchdog's diagnosis (printed when the wait passes a tenth of the timeout, and attached to the error)
    assert "rank 1 is behind (not in a collective)" in done.stderr, done.stderr[-3000:]
    assert "rank 1: step 1, batch 1, in training_step" in done.stderr
    assert "rank 0: step 1, batch 1, in backward" in done.stderr
    assert "collective_timeout" in done.stderr


@pytest.mark.slow
def test_none_from_training_step_on_one_rank_fails_at_once_with_the_reason(tmp_path):
    done = _run(tmp_path, "none")
    assert done.returncode != 0
    assert "training_step returned None on rank 1 (batch 1, step 1) in a run of 2 processes" in done.stderr, \
        done.stderr[-3000:]


@pytest.mark.slow
def test_uneven_batch_counts_run_the_smallest_count_on_every_rank_and_say_so(tmp_path):
    done = _run(tmp_path, "uneven")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "different numbers of batches per rank (from 3 to 4; this rank 4): every rank runs 3" in done.stderr
    assert "done global_step=6" in done.stdout  # 2 epochs x 3 batches
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    for name, value in ranks[0]["state_dict"].items():
        assert torch.equal(value, ranks[1]["state_dict"][name]), name


@pytest.mark.parametrize("value", [0, -1, "5", float("nan"), True])
def test_a_bad_collective_timeout_is_refused_naming_it(value, tmp_path):
    with pytest.raises(ConfigurationError, match="collective_timeout="):
        accelkit.Trainer(accelerator="cpu", devices=1, collective_timeout=value, default_root_dir=tmp_path)


def test_the_collective_timeout_reaches_the_strategy(tmp_path):
    from datetime import timedelta

    trainer = accelkit.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn",
                               collective_timeout=timedelta(minutes=2), default_root_dir=tmp_path)
    assert trainer.strategy.collective_timeout_s == 120.0
    assert accelkit.Trainer(accelerator="cpu", devices=1, default_root_dir=tmp_path).strategy.collective_timeout_s \
        == 600.0
