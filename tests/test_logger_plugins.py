"""A third party's tracker plugs in by name through the ``accelkit_register_loggers`` hook (the one registry's
rules), gets an error naming it when it cannot travel to spawned workers, and shares the ``version_<n>`` rule."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accelkit  # noqa: E402
from accelkit.errors import ConfigurationError, WorkerError  # noqa: E402
from accelkit.loggers import CSVLogger, VersionedLogger, next_version  # noqa: E402
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


class LockedTracker(CSVLogger):
    """A tracker that opens its client when it is built: a lock stands in for a socket."""

    def __init__(self, save_dir):
        super().__init__(save_dir)
        self.client = threading.Lock()


def test_a_logger_that_cannot_be_pickled_for_workers_is_named(isolated, cpu_plugin, tmp_path):
    trainer = accelkit.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", max_epochs=1,
                               logger=[CSVLogger(tmp_path), LockedTracker(tmp_path)], plugins=[cpu_plugin],
                               enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    with pytest.raises(WorkerError) as info:
        trainer.fit(RegressionModule())  # refused before any worker starts: the run is pickled first
    message = str(info.value)
    assert "the logger LockedTracker (trainer.loggers[1]) cannot be pickled" in message
    assert "trainer.loggers[1].client" in message and "_thread.lock" in message
    assert "module and datasets" not in message  # the module and the data are not at fault


def test_an_unpicklable_module_is_named_with_its_attribute(isolated, cpu_plugin, tmp_path):
    model = RegressionModule()
    model.handle = threading.Lock()
    trainer = accelkit.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", max_epochs=1, logger=False,
                               plugins=[cpu_plugin], enable_progress_bar=False, enable_model_summary=False,
                               enable_checkpointing=False, default_root_dir=tmp_path)
    with pytest.raises(WorkerError, match=r"\.handle \(_thread\.lock\) cannot be pickled"):
        trainer.fit(model)


def test_a_tracker_of_the_catalog_that_is_not_installed_names_its_distribution(isolated, cpu_plugin, tmp_path):
    with pytest.raises(ConfigurationError, match="It is provided by accelkit-mlflow: pip install accelkit-mlflow"):
        accelkit.Trainer(accelerator="cpu", logger="mlflow", plugins=[cpu_plugin], default_root_dir=tmp_path)


def test_a_third_party_logger_shares_the_version_folder_rule(tmp_path):
    for taken in ("version_0", "version_3", "version_x"):
        (tmp_path / "exp" / taken).mkdir(parents=True)
    (tmp_path / "exp" / "version_7").write_text("a file, not a run folder")
    assert next_version(tmp_path / "exp") == 4
    assert next_version(tmp_path / "nowhere") == 0

    class Notes(VersionedLogger):
        def __init__(self, save_dir):
            self.set_location(save_dir, "exp", None)

    notes = Notes(tmp_path)
    assert notes.version == 4 and notes.version_dir() == str(tmp_path / "exp" / "version_4")
