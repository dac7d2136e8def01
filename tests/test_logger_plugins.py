"""A third party's tracker plugs in by name through the ``accelkit_register_loggers`` hook."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accelkit  # noqa: E402
from accelkit.loggers import CSVLogger  # noqa: E402
from accelkit.records import LoggerRecord  # noqa: E402
from helpers.models import RegressionModule  # noqa: E402


class NotebookLogger(CSVLogger):
    """A tracker of a third party (a CSV logger under another name, so the test can read what it wrote)."""


class TrackerPlugin:
    ACCELKIT_API = ">=1.1,<2"

    @accelkit.hookimpl
    def accelkit_register_loggers(self):
        return [LoggerRecord("notebook", NotebookLogger, aliases=("nb",), description="writes to a notebook")]


def test_a_plugin_logger_is_chosen_by_name_and_records_the_run(tmp_path):
    trainer = accelkit.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger="nb", plugins=[TrackerPlugin()],
                               enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    assert [type(logger) for logger in trainer.loggers] == [NotebookLogger]
    trainer.fit(RegressionModule())
    metrics = open(trainer.loggers[0].metrics_file).read()
    assert "train_loss" in metrics


def test_an_unknown_logger_name_lists_the_registered_ones(tmp_path):
    with pytest.raises(Exception) as info:
        accelkit.Trainer(accelerator="cpu", devices=1, logger="notebok", plugins=[TrackerPlugin()],
                         default_root_dir=tmp_path)
    message = str(info.value)
    assert "notebok" in message and "notebook" in message and "csv" in message
