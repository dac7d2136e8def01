"""The loggers write real files: CSV rows and TensorBoard event files read back with TensorBoard's own reader."""

from __future__ import annotations

import csv
import errno
import json
import os
import pickle
import subprocess
import sys
from argparse import Namespace
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from accelkit.loggers import CSVLogger, Logger, TensorBoardLogger  # noqa: E402
from helpers.fixtures import lightning_records  # noqa: E402
from helpers.guards import PYTHON, TESTS, child_env  # noqa: E402
from helpers.models import RegressionModule, quiet_trainer  # noqa: E402
from helpers.requirements import can_mount_tmpfs  # noqa: E402


def read_csv(path: str | Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


# ---------------------------------------------------------------------------------------------------- CSV
def test_csv_layout_and_versions(tmp_path):
    first = CSVLogger(tmp_path)
    assert first.name == "lightning_logs" and first.version == 0  # Lightning's default folder
    assert first.save_dir == str(tmp_path) and first.root_dir == os.path.join(tmp_path, "lightning_logs")
    assert first.log_dir == os.path.join(tmp_path, "lightning_logs", "version_0")
    first.log_metrics({"loss": 1.0}, step=0)
    first.save()
    assert first.metrics_file == tmp_path / "lightning_logs" / "version_0" / "metrics.csv"
    assert first.metrics_file.is_file()
    second = CSVLogger(tmp_path)
    assert second.version == 1  # version_0 exists
    named = CSVLogger(tmp_path, name="exp", version="run-a")
    assert named.log_dir == os.path.join(tmp_path, "exp", "run-a")
    assert isinstance(first, Logger)


def test_csv_rows_tensors_and_new_columns(tmp_path):
    logger = CSVLogger(tmp_path)
    logger.log_metrics({"loss": torch.tensor(0.5), "epoch": 0}, step=1)
    logger.save()
    logger.log_metrics({"loss": torch.tensor(0.25), "acc": torch.tensor(0.75, dtype=torch.float64)}, step=2)
    logger.log_metrics({"epoch": 1}, step=3)
    logger.save()
    rows = read_csv(logger.metrics_file)
    assert list(rows[0]) == ["acc", "epoch", "loss", "step"]  # rewritten with the wider header, sorted as Lightning
    assert [(r["step"], r["loss"], r["epoch"], r["acc"]) for r in rows] == [
        ("1", "0.5", "0", ""), ("2", "0.25", "", "0.75"), ("3", "", "1", "")]
    assert logger.rows == [{"step": 1, "loss": 0.5, "epoch": 0}, {"step": 2, "loss": 0.25, "acc": 0.75},
                           {"step": 3, "epoch": 1}]


def test_csv_appends_between_saves_and_flushes_every_n_steps(tmp_path):
    logger = CSVLogger(tmp_path, flush_logs_every_n_steps=2)
    logger.log_metrics({"x": 1.0}, step=0)
    assert not logger.metrics_file.exists()  # buffered
    logger.log_metrics({"x": 2.0}, step=1)  # (1 + 1) % 2 == 0: flushed
    assert [r["x"] for r in read_csv(logger.metrics_file)] == ["1.0", "2.0"]
    logger.log_metrics({"x": 3.0}, step=2)
    assert logger.rows[-1] == {"step": 2, "x": 3.0}  # a buffered row is visible before it is written
    logger.finalize("success")
    assert [r["x"] for r in read_csv(logger.metrics_file)] == ["1.0", "2.0", "3.0"]


def test_csv_step_defaults_and_prefix(tmp_path):
    logger = CSVLogger(tmp_path, prefix="train")
    logger.log_metrics({"loss": 3})
    logger.log_metrics({"loss": 2})
    logger.save()
    assert [(r["step"], r["train-loss"]) for r in read_csv(logger.metrics_file)] == [("0", "3"), ("1", "2")]
    # as Lightning's, the default step counts the rows not yet written: it starts again after each save (it
    # counted every row logged), and a flush comes every flush_logs_every_n_steps rows
    logger.log_metrics({"loss": 1})
    logger.log_metrics({"loss": 0}, step=10)
    logger.log_metrics({"loss": 5})
    logger.save()
    assert [r["step"] for r in read_csv(logger.metrics_file)] == ["0", "1", "0", "10", "2"]
    every_two = CSVLogger(tmp_path / "two", flush_logs_every_n_steps=2)
    for loss in range(5):
        every_two.log_metrics({"loss": loss})
    assert [(r["step"], r["loss"]) for r in read_csv(every_two.metrics_file)] == [
        ("0", "0"), ("1", "1"), ("0", "2"), ("1", "3")]


def test_csv_first_write_replaces_a_former_runs_file(tmp_path):
    for value in (1.0, 2.0):
        logger = CSVLogger(tmp_path, version=0)
        logger.log_metrics({"v": value}, step=0)
        if value == 1.0:
            logger.save()
        else:
            with pytest.warns(UserWarning, match=r"metrics.csv of a former run in version 0 is replaced"):
                logger.save()
    assert [r["v"] for r in read_csv(logger.metrics_file)] == ["2.0"]


def test_csv_keeps_the_rows_an_earlier_stage_of_the_run_wrote_from_another_process(tmp_path):
    """Under ddp_spawn the fit and the test after it write from two workers, each with a copy of the logger made
    before its folder had a file: the test's first write keeps the fit's rows and columns (it replaced them)."""
    logger = CSVLogger(tmp_path)
    assert logger.version == 0  # claimed by the Trainer before the workers start
    fit_worker = pickle.loads(pickle.dumps(logger))
    fit_worker.log_metrics({"train_loss": 0.5}, step=0)
    fit_worker.log_metrics({"val_loss": 0.4}, step=1)
    fit_worker.save()
    test_worker = pickle.loads(pickle.dumps(logger))
    test_worker.log_metrics({"test_loss": 0.3}, step=1)
    test_worker.save()
    rows = read_csv(logger.metrics_file)
    assert list(rows[0]) == ["step", "test_loss", "train_loss", "val_loss"]
    assert [(r["train_loss"], r["val_loss"], r["test_loss"]) for r in rows] == [
        ("0.5", "", ""), ("", "0.4", ""), ("", "", "0.3")]


def test_csv_hyperparameters(tmp_path):
    logger = CSVLogger(tmp_path)
    logger.log_hyperparams({"lr": 0.1, "layers": [2, 3]})
    logger.log_hyperparams(Namespace(batch_size=32))
    assert os.listdir(logger.log_dir) == ["hparams.yaml"]  # Lightning's file only (no hparams.csv)
    assert (Path(logger.log_dir) / "hparams.yaml").read_text() == "batch_size: 32\nlayers:\n- 2\n- 3\nlr: 0.1\n"
    with pytest.raises(TypeError, match="extra arguments"):
        logger.log_hyperparams({"a": 1}, {"metric": 1.0})


@pytest.mark.slow  # imports Lightning
def test_csv_files_are_lightnings(tmp_path):
    """The same calls on accelkit's and Lightning's ``CSVLogger`` leave the same files, byte for byte: ``metrics.csv``
    (every column name sorted, ``step`` among them, rewritten when a name is new) and ``hparams.yaml``, nothing else
    (accelkit wrote an extra ``hparams.csv`` and kept the columns in their first-logged order)."""
    pytest.importorskip("lightning.pytorch", reason="compares with Lightning's CSVLogger")
    from lightning.pytorch.loggers import CSVLogger as LightningCSVLogger

    written = {}
    for name, kind in (("accelkit", CSVLogger), ("lightning", LightningCSVLogger)):
        logger = kind(tmp_path / name)
        logger.log_hyperparams({"lr": 0.1, "hidden": 8, "name": "net"})
        logger.log_metrics({"train_loss": torch.tensor(0.5), "epoch": 0}, step=0)
        logger.log_metrics({"train_loss": 0.25, "epoch": 0}, step=1)
        logger.save()
        logger.log_metrics({"val_loss": torch.tensor(0.75), "b_metric": 2.0, "epoch": 0}, step=1)
        logger.log_metrics({"train_loss": 0.125, "epoch": 1}, step=2)
        logger.save()
        logger.log_metrics({"train_loss": 0.0625})  # the default step: the rows not yet written
        logger.log_metrics({"train_loss": 0.03125})
        logger.finalize("success")
        folder = Path(logger.log_dir)
        written[name] = {file.name: file.read_text() for file in sorted(folder.iterdir())}
    assert list(written["accelkit"]) == ["hparams.yaml", "metrics.csv"]
    assert written["accelkit"] == written["lightning"]
    assert written["accelkit"]["metrics.csv"].splitlines()[0] == "b_metric,epoch,step,train_loss,val_loss"


@pytest.fixture(scope="module")
def lightning_stage_logs(tmp_path_factory) -> dict[str, Any]:
    """What Lightning's ``validate`` and ``test`` without a fit leave in a CSVLogger's folder (one process)."""
    return lightning_records(tmp_path_factory.mktemp("lightning_stage_logs"), "stage_logs")


@pytest.mark.slow  # Lightning's runs in a process of their own
@pytest.mark.parametrize("stage", ["validate", "test"])
def test_a_stage_without_fit_writes_lightnings_csv_files(tmp_path, lightning_stage_logs, stage):
    """A ``validate``/``test`` with no ``fit`` before it logs the module's hyper-parameters too, as Lightning logs
    them at the start of every stage: the same ``hparams.yaml`` and ``metrics.csv`` header (accelkit logged them
    when a fit started only, so such a folder had no ``hparams.yaml``)."""
    from helpers.stage_logs import record

    ours = record("accelkit", str(tmp_path), stage)
    assert ours == lightning_stage_logs[stage]
    assert ours == {"files": "hparams.yaml metrics.csv", "metrics.csv header": f"epoch,step,{stage}_loss",
                    "hparams.yaml": "label: net\nwidth: 4\n"}


def test_csv_rejects_what_is_not_a_number(tmp_path):
    logger = CSVLogger(tmp_path)
    with pytest.raises(ValueError, match="'name'.*not a number"):
        logger.log_metrics({"name": "abc"}, step=0)
    with pytest.raises(ValueError, match="'vec'.*shape \\(3,\\)"):
        logger.log_metrics({"vec": torch.ones(3)}, step=0)


def test_loggers_write_only_on_rank_zero(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")  # torchrun's variables, before a process group exists
    monkeypatch.setenv("WORLD_SIZE", "2")
    csv_logger = CSVLogger(tmp_path, version=0)
    csv_logger.log_metrics({"x": 1.0}, step=0)
    csv_logger.log_hyperparams({"a": 1})
    csv_logger.save()
    tb = TensorBoardLogger(tmp_path, version=0)
    tb.log_metrics({"x": 1.0}, step=0)
    tb.experiment.add_text("note", "not written")  # silently absorbed off rank zero, as in Lightning
    assert not list(tmp_path.rglob("*"))
    monkeypatch.setenv("WORLD_SIZE", "1")  # a stray RANK outside a multi-process job does not silence them
    csv_logger.log_metrics({"x": 1.0}, step=0)
    csv_logger.save()
    assert csv_logger.metrics_file.is_file()


def test_a_custom_loggers_experiment_is_created_on_rank_zero_only(monkeypatch):
    """A Logger subclass written as Lightning's custom-logger recipe (Novartis/AEGIS's ``CurveLogger`` imports the
    decorator so) ports by its import: ``rank_zero_experiment`` from ``accelkit.loggers.logger``."""
    from accelkit.loggers.logger import Logger as LightningPathLogger
    from accelkit.loggers.logger import rank_zero_experiment

    created = []

    class CurveLogger(LightningPathLogger):
        name, version = "curves", "0"

        @property
        @rank_zero_experiment
        def experiment(self) -> dict:
            """The experiment: one dict, created when first asked for."""
            created.append(1)
            return {"runs": []}

        def log_metrics(self, metrics: dict, step: int | None = None) -> None:
            pass

        def log_hyperparams(self, params: Any) -> None:
            pass

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    silent = CurveLogger().experiment
    silent.add_scalar("x", 1.0)  # absorbed, as on Lightning's other ranks
    assert not silent and created == []
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert CurveLogger().experiment == {"runs": []} and created == [1]
    assert CurveLogger.experiment.__doc__ == "The experiment: one dict, created when first asked for."


# ---------------------------------------------------------------------------------------------------- TensorBoard
def accumulate(log_dir: str):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(log_dir)
    events.Reload()
    return events


def test_tensorboard_scalars_are_written_with_their_steps(tmp_path):
    logger = TensorBoardLogger(tmp_path)
    assert logger.name == "lightning_logs" and logger.version == 0
    assert logger.log_dir == os.path.join(tmp_path, "lightning_logs", "version_0")
    for step in range(4):
        logger.log_metrics({"loss": torch.tensor(1.0 / (step + 1)), "epoch": step // 2}, step=step)
    logger.finalize("success")
    events = accumulate(logger.log_dir)
    assert [(e.step, e.value) for e in events.Scalars("loss")] == [
        (0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3)), (3, 0.25)]
    assert [e.value for e in events.Scalars("epoch")] == [0, 0, 1, 1]
    assert TensorBoardLogger(tmp_path).version == 1


def test_tensorboard_prefix_sub_dir_and_string_version(tmp_path):
    logger = TensorBoardLogger(tmp_path, name="exp", version="fold-1", prefix="val", sub_dir="inner")
    assert logger.log_dir == os.path.join(tmp_path, "exp", "fold-1", "inner")
    logger.log_metrics({"acc": 0.5}, step=7)
    logger.save()
    assert [(e.step, e.value) for e in accumulate(logger.log_dir).Scalars("val-acc")] == [(7, 0.5)]
    logger.finalize("success")


def hparams_in(log_dir: str) -> dict:
    from tensorboard.plugins.hparams import plugin_data_pb2

    content = accumulate(log_dir).SummaryMetadata("_hparams_/session_start_info").plugin_data.content
    data = plugin_data_pb2.HParamsPluginData.FromString(content)
    return {name: value.WhichOneof("kind") and getattr(value, value.WhichOneof("kind"))
            for name, value in data.session_start_info.hparams.items()}


def test_tensorboard_hyperparameters_and_default_hp_metric(tmp_path):
    logger = TensorBoardLogger(tmp_path)
    logger.log_hyperparams({"lr": 0.01, "optimizer": torch.optim.Adam, "net": {"width": 64, "act": "relu"},
                            "shape": (2, 3), "flag": True})
    logger.finalize("success")
    assert hparams_in(logger.log_dir) == {"lr": 0.01, "optimizer": "Adam", "net/width": 64.0, "net/act": "relu",
                                          "shape": "(2, 3)", "flag": True}
    assert [(e.step, e.value) for e in accumulate(logger.log_dir).Scalars("hp_metric")] == [(0, -1.0)]
    assert logger.hparams["net"] == {"width": 64, "act": "relu"}



class SavesNothing(RegressionModule):
    """Calls ``save_hyperparameters()`` with no ``__init__`` argument to save (korintia/Variational-Autoencoder's
    ``VAE`` does: its settings are local variables)."""

    def __init__(self) -> None:
        super().__init__()
        self.save_hyperparameters()


def test_a_module_saving_no_hyperparameters_still_logs_them_with_the_default_hp_metric(tmp_path):
    """As Lightning: the loggers get the empty set, so TensorBoard shows ``hp_metric`` -1 at step 0 (accelkit skipped
    an empty set, and the run's TensorBoard lacked the ``hp_metric`` Lightning's had)."""
    logger = TensorBoardLogger(tmp_path)
    quiet_trainer(tmp_path, max_epochs=1, logger=logger, enable_model_summary=False).fit(SavesNothing())
    assert [(e.step, e.value) for e in accumulate(logger.log_dir).Scalars("hp_metric")] == [(0, -1.0)]

def test_tensorboard_hyperparameters_with_a_metric_or_none(tmp_path):
    with_metric = TensorBoardLogger(tmp_path, version=0)
    with_metric.log_hyperparams(Namespace(lr=0.1), metrics={"best_acc": 0.9})
    with_metric.finalize("success")
    assert [e.value for e in accumulate(with_metric.log_dir).Scalars("best_acc")] == [pytest.approx(0.9)]
    without = TensorBoardLogger(tmp_path, version=1, default_hp_metric=False)
    without.log_hyperparams({"lr": 0.1})
    without.finalize("success")
    assert without.hparams == {"lr": 0.1}
    assert os.listdir(without.log_dir) == ["hparams.yaml"]  # no event file: nothing for TensorBoard to show


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 2)
        self.example_input_array = torch.zeros(1, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x).relu()


def test_tensorboard_graph(tmp_path):
    logger = TensorBoardLogger(tmp_path, log_graph=True)
    logger.log_graph(Tiny())
    logger.finalize("success")
    assert accumulate(logger.log_dir).Tags()["graph"] is True
    off = TensorBoardLogger(tmp_path)  # log_graph=False: documented no-op
    off.log_graph(Tiny())
    assert os.listdir(off.log_dir) == []  # its version folder is claimed, but nothing is written
    no_input = TensorBoardLogger(tmp_path, log_graph=True)
    with pytest.warns(UserWarning, match="example_input_array"):
        no_input.log_graph(torch.nn.Linear(2, 2))


def test_tensorboard_pickles_without_its_writer(tmp_path):
    logger = TensorBoardLogger(tmp_path)
    logger.log_metrics({"a": 1.0}, step=0)
    copy = pickle.loads(pickle.dumps(logger))
    assert copy._experiment is None and copy.log_dir == logger.log_dir
    copy.log_metrics({"a": 2.0}, step=1)  # the copy opens its own event file in the same directory
    copy.finalize("success")
    logger.finalize("success")
    assert sorted(e.value for e in accumulate(logger.log_dir).Scalars("a")) == [1.0, 2.0]


def test_tensorboard_rejects_unknown_writer_arguments(tmp_path):
    with pytest.raises(TypeError, match="'flush_every'"):
        TensorBoardLogger(tmp_path, flush_every=3)


@pytest.mark.slow  # starts a process
def test_missing_tensorboard_is_a_clear_error_and_import_accelkit_does_not_load_it(tmp_path, prewarmed):
    # forked from the prewarmed interpreter: torch imported, accelkit and tensorboard not
    code = (
        "import sys, importlib.util\n"
        "import accelkit, accelkit.loggers\n"
        "assert 'tensorboard' not in sys.modules, 'import accelkit loaded tensorboard'\n"
        "real = importlib.util.find_spec\n"
        "importlib.util.find_spec = lambda name, *a: None if name == 'tensorboard' else real(name, *a)\n"
        "try:\n"
        f"    accelkit.loggers.TensorBoardLogger({str(tmp_path)!r})\n"
        "except ModuleNotFoundError as error:\n"
        "    print(error)\n"
    )
    result = prewarmed.run(["-c", code], cwd=tmp_path, env=dict(os.environ), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "pip install tensorboard" in result.stdout and 'pip install "accelkit[tensorboard]"' in result.stdout


def test_a_trainer_fit_writes_tensorboard_events(tmp_path):
    logger = TensorBoardLogger(tmp_path, name="tb")
    trainer = quiet_trainer(tmp_path, max_epochs=2, logger=logger, log_every_n_steps=1)
    trainer.fit(RegressionModule())
    logger.finalize("success")
    events = accumulate(logger.log_dir)
    steps = [e.step for e in events.Scalars("train_loss_step")]
    assert steps == sorted(steps) and len(steps) == trainer.global_step
    assert len(events.Scalars("train_loss_epoch")) == 2


def test_csv_flushes_rows_whose_steps_skip_the_multiples(tmp_path):
    """The Trainer logs at steps 50, 100, ... (log_every_n_steps=50); with flush_logs_every_n_steps=100 the
    rows reach the file at step 100 instead of only when the run ends."""
    logger = CSVLogger(tmp_path)
    logger.log_metrics({"x": 1.0}, step=50)
    assert not logger.metrics_file.exists()
    logger.log_metrics({"x": 2.0}, step=100)
    assert [r["x"] for r in read_csv(logger.metrics_file)] == ["1.0", "2.0"]


class LogsOnce(RegressionModule):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if batch_idx == 0 and self.current_epoch == 0:
            self.log("once", 123.0)
        return super().training_step(batch, batch_idx)


def test_a_value_logged_once_is_written_once(tmp_path):
    trainer = quiet_trainer(tmp_path, max_epochs=1, logger=CSVLogger(tmp_path), log_every_n_steps=1)
    trainer.fit(LogsOnce())
    rows = [row for row in trainer.logger.rows if "once" in row]
    assert [row["step"] for row in rows] == [0]  # the first batch's row is at step 0, as in Lightning


# ---------------------------------------------------------------------------------------------- failed writes
def _full_disk_run(folder: Path, kind: str) -> dict[str, Any]:
    """``helpers.full_disk_logging`` on a 256 KiB tmpfs mounted at ``folder`` and filled up to 8 KiB."""
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=256k tmpfs {folder} && exec "
                           f"{PYTHON} -m helpers.full_disk_logging {folder} {kind} fill"],
                          capture_output=True, text=True, env=child_env(), timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # starts a process
@pytest.mark.skipif(not can_mount_tmpfs(), reason="needs unshare -rm to mount a tiny tmpfs")
@pytest.mark.parametrize("kind, name, file", [("tensorboard", "TensorBoardLogger", "events.out.tfevents."),
                                              ("csv", "CSVLogger", "metrics.csv")])
def test_a_full_disk_under_a_logger_is_an_error_naming_the_logger_and_its_file(tmp_path, kind, name, file):
    """A real full disk (a tmpfs filled up): the fit ends with a LoggerWriteError (an OSError, errno ENOSPC) that
    names the logger and the file it was writing, not TensorBoard's bare ``OSError: [Errno 28]``."""
    folder = tmp_path / "small"
    folder.mkdir()
    error_class, code, message, path = _full_disk_run(folder, kind)["error"]
    assert error_class == "LoggerWriteError" and code == errno.ENOSPC
    assert path.startswith(str(folder / "lightning_logs" / "version_0" / file)), path
    assert message.startswith(f"{name} could not write {path!r}: the disk is full"), message


@pytest.mark.slow  # starts a process
def test_a_tensorboard_write_past_the_file_size_limit_names_the_logger_and_its_event_file(tmp_path, forked_python):
    """The same with a file size limit (RLIMIT_FSIZE, which needs no mount): EFBIG, named with the event file."""
    out = forked_python(f"""
        import json, resource
        resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384))  # the limit is the child's own
        from helpers.full_disk_logging import fit_until_writes_fail
        print(json.dumps(fit_until_writes_fail({str(tmp_path)!r}, "tensorboard")))
        """, path=[TESTS])
    error_class, code, message, path = out["error"]
    assert error_class == "LoggerWriteError" and code == errno.EFBIG
    assert path.startswith(str(tmp_path / "lightning_logs" / "version_0" / "events.out.tfevents.")), path
    assert message.startswith(f"TensorBoardLogger could not write {path!r}: the file is larger than this process "
                              "may write (ulimit -f)"), message
