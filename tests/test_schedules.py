"""What a fit runs, and when, compared with Lightning 2.6.6's Trainer on the same Module: the training and
validation batches with their epochs, steps and learning rates, when the loaders are built, the epoch ends, the
training hooks, the checkpoint files and the end state, under the Trainer options that decide the schedule
(``tests/helpers/schedules.py`` lists the scenarios)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers.fixtures import lightning_records  # noqa: E402
from helpers.schedules import SCENARIOS, record  # noqa: E402


@pytest.fixture(scope="module")
def lightning_schedules(tmp_path_factory) -> dict[str, dict[str, Any]]:
    """Every scenario under Lightning's Trainer, in one process (Lightning's Trainer imports torch_xla), on the CPU."""
    return lightning_records(tmp_path_factory.mktemp("lightning_schedules"), "schedules")


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_fit_runs_lightnings_schedule(tmp_path, lightning_schedules, scenario):
    """The same batches, steps, learning rates, loader builds, hooks, checkpoint files and end state as Lightning's
    Trainer. Among them, each of which differed before: the validation loaders are built when training starts only
    if its first epoch validates, else right before the first validation (``check_val_every_n_epoch=2``, and with
    ``reload_dataloaders_every_n_epochs``, before the next validation); a fit with no training batch to run
    (``max_epochs=0``, ``max_steps=0``, ``limit_train_batches=0``) calls neither ``on_train_start`` nor
    ``on_train_end`` (``limit_train_batches=0``: not ``train_dataloader()`` either); a ``ModelCheckpoint`` monitoring a
    validation metric with ``check_val_every_n_epoch=2`` saves after the validation instead of failing at the end of
    the first epoch."""
    assert record("accelkit", str(tmp_path), scenario) == lightning_schedules[scenario]
