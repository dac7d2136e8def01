"""accelkit-mlflow against a real MLflow file store: runs read back through MLflow's own client."""

from __future__ import annotations

import csv
import errno
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit
from helpers.guards import child_env
from helpers.requirements import can_mount_tmpfs

pytest.importorskip("mlflow")
ROOT = Path(__file__).resolve().parents[3]


class Tiny(accelkit.Module):
    def __init__(self, hidden: int = 6, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(3, hidden), nn.ReLU(), nn.Linear(hidden, 2))
        g = torch.Generator().manual_seed(0)
        x = torch.randn(64, 3, generator=g)
        self.data = TensorDataset(x, (x[:, 0] > 0).long())

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))

    def train_dataloader(self):
        return DataLoader(self.data, batch_size=8)

    def val_dataloader(self):
        return DataLoader(self.data, batch_size=16)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def test_logger_by_name_records_what_self_log_recorded(tmp_path):
    trainer = accelkit.Trainer(accelerator="cpu", logger=["csv", "mlflow"], default_root_dir=tmp_path, max_epochs=3,
                               log_every_n_steps=2, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Tiny())
    csv_logger, mlflow_logger = trainer.loggers
    assert type(mlflow_logger).__name__ == "MLFlowLogger"
    assert mlflow_logger.save_dir == str(tmp_path / "mlruns")

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_logger.tracking_uri)
    run = client.get_run(mlflow_logger.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params == {"hidden": "6", "lr": "0.1"}
    with open(Path(csv_logger.log_dir) / "metrics.csv") as handle:
        rows = list(csv.DictReader(handle))
    for name in ("train_loss", "val_loss"):
        from_csv = [(int(r["step"]), float(r[name])) for r in rows if r.get(name)]
        from_mlflow = [(m.step, m.value) for m in client.get_metric_history(mlflow_logger.run_id, name)]
        assert len(from_csv) >= 3 and [s for s, _ in sorted(from_mlflow)] == [s for s, _ in sorted(from_csv)]
        assert [v for _, v in sorted(from_mlflow)] == pytest.approx([v for _, v in sorted(from_csv)])
    artifacts = [a.path for a in client.list_artifacts(mlflow_logger.run_id, "checkpoints")]
    latest = "checkpoints/" + Path(trainer.checkpoint_callback.best_model_path).name  # the default callback's file
    assert latest in artifacts
    loaded = torch.load(client.download_artifacts(mlflow_logger.run_id, latest, str(tmp_path)), weights_only=True)
    assert loaded["global_step"] == trainer.global_step


def test_explicit_logger_with_lightning_arguments(tmp_path):
    from accelkit_mlflow import MLFlowLogger

    logger = MLFlowLogger(experiment_name="exp", run_name="first", tracking_uri=f"file:{tmp_path / 'store'}",
                          tags={"team": "a"}, prefix="p")
    trainer = accelkit.Trainer(accelerator="cpu", logger=logger, default_root_dir=tmp_path, max_epochs=1,
                               enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    trainer.fit(Tiny())
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=logger.tracking_uri)
    run = client.get_run(logger.run_id)
    assert client.get_experiment(run.info.experiment_id).name == "exp"
    assert run.data.tags["mlflow.runName"] == "first" and run.data.tags["team"] == "a"
    assert "p-val_loss" in run.data.metrics
    assert client.list_artifacts(logger.run_id) == []  # log_model=False, as Lightning's default


@pytest.mark.slow
def test_installed_alone_next_to_core_and_cpu(tmp_path, prewarmed):
    """The three wheels installed into an empty folder that comes first on sys.path; a run logged and read back.
    The run is a program forked from the prewarmed interpreter (``helpers.prewarmed``), which has imported torch
    only: accelkit and its plugins are imported afresh, from that folder, as the files the run reports say."""
    target = tmp_path / "site"
    built = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                            "--target", str(target), str(ROOT / "core"), str(ROOT / "plugins" / "cpu"),
                            str(ROOT / "plugins" / "mlflow")], check=False, capture_output=True, text=True,
                           timeout=600)
    assert built.returncode == 0, built.stderr
    code = textwrap.dedent(f'''
        import sys, json
        sys.path.insert(0, {str(target)!r})
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        sys.path.insert(1, {str(ROOT / "tests")!r})  # the shared helpers the test module imports
        import accelkit, accelkit_cpu, accelkit_mlflow
        from test_mlflow_logger import Tiny
        trainer = accelkit.Trainer(accelerator="cpu", logger="mlflow", max_epochs=2, enable_progress_bar=False,
                                   enable_model_summary=False)
        trainer.fit(Tiny())
        from mlflow.tracking import MlflowClient
        logger = trainer.loggers[0]
        run = MlflowClient(tracking_uri=logger.tracking_uri).get_run(logger.run_id)
        print(json.dumps({{"files": [accelkit.__file__, accelkit_cpu.__file__, accelkit_mlflow.__file__],
                          "val_loss": run.data.metrics["val_loss"],
                          "logged": float(trainer.callback_metrics["val_loss"])}}))
    ''')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELKIT_", "MLFLOW_"))}
    done = prewarmed.run(["-c", code], cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(f.startswith(str(target)) for f in found["files"]), found
    assert found["val_loss"] == pytest.approx(found["logged"])


FULL_STORE = """
import json, os, sys
from helpers.full_disk_logging import fill_up
from accelkit_mlflow.logger import MLFlowLogger

folder = sys.argv[1]
logger = MLFlowLogger(save_dir=os.path.join(folder, "mlruns"))
logger.log_hyperparams({"a": 1})
fill_up(folder)
try:
    for step in range(2000):
        logger.log_metrics({f"m{i}": 1.0 for i in range(20)}, step=step)
    error = None
except Exception as exc:
    error = [type(exc).__name__, getattr(exc, "errno", None), str(exc), getattr(exc, "path", None)]
print(json.dumps({"error": error, "run": os.path.join(folder, "mlruns", logger.experiment_id, logger.run_id)}))
"""


@pytest.mark.slow  # starts a process
@pytest.mark.skipif(not can_mount_tmpfs(), reason="needs unshare -rm to mount a tiny tmpfs")
def test_a_full_file_store_is_an_error_naming_the_logger_and_the_run_folder(tmp_path):
    """A real full disk under the file store (a filled tmpfs): MLflow's bare ``MlflowException: [Errno 28] No space
    left on device`` becomes a LoggerWriteError (ENOSPC) naming MLFlowLogger and the run's folder."""
    folder = tmp_path / "small"
    folder.mkdir()
    script = tmp_path / "full_store.py"
    script.write_text(FULL_STORE)
    proc = subprocess.run(["unshare", "-rm", "sh", "-c",
                           f"mount -t tmpfs -o size=512k tmpfs {folder} && exec {sys.executable} {script} {folder}"],
                          capture_output=True, text=True, env=child_env(), timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    error_class, code, message, path = out["error"]
    assert error_class == "LoggerWriteError" and code == errno.ENOSPC
    assert path == out["run"] and path.startswith(str(folder / "mlruns")), path
    assert message.startswith(f"MLFlowLogger could not write {path!r}: the disk is full"), message
