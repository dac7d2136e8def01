"""accelkit.cli.CLI and `accelkit fit|validate|test|predict --config`: real runs from YAML files in tmp_path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

pytest.importorskip("jsonargparse")

MODELS = textwrap.dedent('''
    import torch
    from torch import nn
    from torch.nn import functional as F
    from torch.utils.data import DataLoader, TensorDataset

    import accelkit


    class Blobs(accelkit.DataModule):
        """Two Gaussian blobs, the same every time."""

        def __init__(self, batch_size: int = 16, size: int = 96):
            super().__init__()
            self.batch_size, self.size = batch_size, size

        def setup(self, stage):
            g = torch.Generator().manual_seed(0)
            x = torch.randn(self.size, 4, generator=g)
            self.data = TensorDataset(x, (x.sum(1) > 0).long())

        def train_dataloader(self):
            return DataLoader(self.data, batch_size=self.batch_size, shuffle=True)

        def val_dataloader(self):
            return DataLoader(self.data, batch_size=self.batch_size)

        def test_dataloader(self):
            return DataLoader(self.data, batch_size=self.batch_size)


    class Net(accelkit.Module):
        """A small classifier."""

        def __init__(self, hidden: int = 8, lr: float = 0.05):
            super().__init__()
            self.save_hyperparameters()
            self.net = nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, 2))

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = F.cross_entropy(self.net(x), y)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", F.cross_entropy(self.net(x), y))

        def test_step(self, batch, batch_idx):
            x, y = batch
            self.log("test_acc", (self.net(x).argmax(1) == y).float().mean())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
''')

# A script written for LightningCLI; only its imports were changed.
LIGHTNING_SCRIPT = textwrap.dedent('''
    from accelkit.cli import CLI as LightningCLI  # was: from lightning.pytorch.cli import LightningCLI
    from models import Blobs, Net


    class MyCLI(LightningCLI):
        def add_arguments_to_parser(self, parser):
            parser.link_arguments("data.batch_size", "model.hidden")


    if __name__ == "__main__":
        MyCLI(Net, Blobs, seed_everything_default=3)
''')

# The YAML a Lightning user already has: Lightning's class paths, a scheduler, callbacks, a logger.
LIGHTNING_YAML = textwrap.dedent('''
    seed_everything: 1
    trainer:
      accelerator: cpu
      max_epochs: 3
      enable_progress_bar: false
      enable_model_summary: false
      default_root_dir: run
      enable_autolog_hparams: true
      model_registry: null
      callbacks:
        - class_path: lightning.pytorch.callbacks.ModelCheckpoint
          init_args: {monitor: val_loss, save_last: true, dirpath: run/ckpt}
        - class_path: lightning.pytorch.callbacks.LearningRateMonitor
      logger:
        class_path: lightning.pytorch.loggers.CSVLogger
        init_args: {save_dir: run}
    data:
      batch_size: 12
    optimizer:
      class_path: torch.optim.Adam
      init_args: {lr: 0.02}
    lr_scheduler:
      class_path: lightning.pytorch.cli.ReduceLROnPlateau
      init_args: {monitor: val_loss, patience: 1}
''')


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "models.py").write_text(MODELS)
    (tmp_path / "main.py").write_text(LIGHTNING_SCRIPT)
    (tmp_path / "run.yaml").write_text(LIGHTNING_YAML)
    return tmp_path


def run(cwd: Path, *argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKIT_")}
    environ["PYTHONWARNINGS"] = "ignore"
    return subprocess.run([sys.executable, *argv], check=False, cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**environ, **(env or {})})


def metrics(path: Path) -> list[dict[str, str]]:
    import csv

    with open(path) as handle:
        return list(csv.DictReader(handle))


# ------------------------------------------------------------------- a LightningCLI script, imports changed
@pytest.mark.slow  # fits in a fresh interpreter
def test_a_lightning_cli_script_runs_fit_then_test_from_the_saved_config(project):
    fit = run(project, "main.py", "fit", "--config", "run.yaml")
    assert fit.returncode == 0, fit.stderr
    saved = project / "run" / "lightning_logs" / "version_0" / "config.yaml"
    saved = saved if saved.exists() else project / "run" / "logs" / "version_0" / "config.yaml"
    config = yaml.safe_load(saved.read_text())
    # Lightning's class paths became accelkit's; the link filled model.hidden; the chosen seed is recorded.
    assert [c["class_path"] for c in config["trainer"]["callbacks"]] == [
        "accelkit.callbacks.ModelCheckpoint", "accelkit.callbacks.LearningRateMonitor"]
    assert config["trainer"]["logger"]["class_path"] == "accelkit.loggers.CSVLogger"
    assert config["lr_scheduler"]["class_path"] == "accelkit.cli.ReduceLROnPlateau"
    # the fixed classes are named too (every command reads the file), and the link's value is written
    assert config["seed_everything"] == 1 and config["data"]["init_args"]["batch_size"] == 12
    assert config["model"]["class_path"] == "models.Net" and config["model"]["init_args"]["hidden"] == 12
    rows = metrics(saved.parent / "metrics.csv")
    assert any(r.get("lr-Adam") for r in rows), "LearningRateMonitor saw the configured Adam"
    assert (project / "run" / "ckpt" / "last.ckpt").exists()

    test = run(project, "main.py", "test", "--config", str(saved), "--ckpt_path", "run/ckpt/last.ckpt")
    assert test.returncode == 0, test.stderr
    assert "test_acc" in test.stdout


@pytest.mark.slow  # fits in a fresh interpreter
def test_the_saved_config_repeats_the_run(project):
    first = run(project, "main.py", "fit", "--config", "run.yaml")
    assert first.returncode == 0, first.stderr
    (project / "run").rename(project / "first")
    saved = next((project / "first").rglob("config.yaml"))
    again = run(project, "main.py", "fit", "--config", str(saved))
    assert again.returncode == 0, again.stderr
    first_rows = metrics(next((project / "first").rglob("metrics.csv")))
    second_rows = metrics(next((project / "run").rglob("metrics.csv")))
    losses = [r["val_loss"] for r in first_rows if r.get("val_loss")]
    assert len(losses) == 3 and losses == [r["val_loss"] for r in second_rows if r.get("val_loss")]


@pytest.mark.slow  # fits in a fresh interpreter
def test_print_config_round_trips(project):
    printed = run(project, "main.py", "fit", "--config", "run.yaml", "--model.lr", "0.5", "--print_config")
    assert printed.returncode == 0, printed.stderr
    (project / "printed.yaml").write_text(printed.stdout)
    again = run(project, "main.py", "fit", "--config", "printed.yaml", "--print_config")
    assert again.returncode == 0, again.stderr
    assert again.stdout == printed.stdout
    assert yaml.safe_load(printed.stdout)["model"]["lr"] == 0.5


@pytest.mark.parametrize("argv, expected", [
    (["--trainer.max_epoch", "3"], ["unknown key 'trainer.max_epoch'", "Did you mean 'trainer.max_epochs'?"]),
    (["--model.hiden", "3"], ["unknown key 'model.hiden'", "Did you mean 'model.hidden'?"]),
    (["--trainer.max_epochs", "many"], ["trainer.max_epochs: value 'many' is not accepted; accepted: int, null"]),
    (["--trainer.deterministic", "maybe"], ["trainer.deterministic: value 'maybe'", "Literal['warn'], bool"]),
])
def test_bad_keys_and_values_are_named_with_what_works(project, monkeypatch, capsys, argv, expected):
    monkeypatch.syspath_prepend(str(project))
    monkeypatch.chdir(project)
    from accelkit.cli import CLI

    models = __import__("models")
    with pytest.raises(SystemExit):
        CLI(models.Net, models.Blobs, args=["fit", "--config", "run.yaml", *argv])
    err = capsys.readouterr().err
    for text in expected:
        assert text in err, err


def test_a_lightning_class_without_counterpart_names_ours(project):
    (project / "bad.yaml").write_text("trainer:\n  callbacks:\n    - class_path: "
                                      "lightning.pytorch.callbacks.EarlyStoping\n")
    done = run(project, "-m", "accelkit.cli", "fit", "--model", "models.py:Net", "--config", "bad.yaml")
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert "'lightning.pytorch.callbacks.EarlyStoping' has no accelkit counterpart. Did you mean 'EarlyStopping'?" \
        in done.stderr and "accelkit.callbacks.EarlyStopping" in done.stderr


# ------------------------------------------------------------------- the accelkit command
@pytest.mark.slow  # fits in a fresh interpreter
def test_accelkit_fit_config_with_file_targets_then_validate(project):
    (project / "plain.yaml").write_text(textwrap.dedent('''
        trainer: {accelerator: cpu, max_epochs: 2, enable_progress_bar: false, default_root_dir: out,
                  logger: [csv, tensorboard]}
        model: {init_args: {hidden: 6}}
    '''))
    # (the class first: init_args without a class_path apply to the class already chosen)
    done = run(project, "-m", "accelkit.cli", "fit", "--model", "models.py:Net", "--config", "plain.yaml",
               "--data", "models:Blobs", "--data.batch_size", "8")
    assert done.returncode == 0, done.stderr
    assert "accelkit: configuration saved to" in done.stdout
    saved = yaml.safe_load((project / "out" / "logs" / "version_0" / "config.yaml").read_text())
    assert saved["model"] == {"class_path": "models.Net", "init_args": {"hidden": 6, "lr": 0.05}}
    assert saved["data"]["init_args"]["batch_size"] == 8
    assert saved["trainer"]["logger"] == ["csv", "tensorboard"]
    assert list((project / "out" / "lightning_logs").rglob("events.out.tfevents*")) or \
        list((project / "out").rglob("events.out.tfevents*"))
    validate = run(project, "-m", "accelkit.cli", "validate", "--config", "out/logs/version_0/config.yaml",
                   "--ckpt_path", "out/checkpoints/last.ckpt")
    assert validate.returncode == 0, validate.stderr
    assert "val_loss" in validate.stdout


def test_cli_run_false_builds_model_data_and_trainer(project, monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(project))
    from accelkit.cli import CLI

    models = __import__("models")
    cli = CLI(models.Net, models.Blobs, run=False, args=[
        "--trainer.accelerator=cpu", "--trainer.logger=false", f"--trainer.default_root_dir={tmp_path}",
        "--model.hidden=5", "--trainer.callbacks+=EarlyStopping", "--trainer.callbacks.monitor=val_loss",
        "--optimizer=SGD", "--optimizer.lr=0.3"])
    assert isinstance(cli.model, models.Net) and cli.model.hparams["hidden"] == 5
    assert isinstance(cli.datamodule, models.Blobs)
    assert [type(c).__name__ for c in cli.trainer.callbacks][:2] == ["EarlyStopping", "SaveConfigCallback"]
    optimizer = cli.model.configure_optimizers()
    assert type(optimizer).__name__ == "SGD" and optimizer.param_groups[0]["lr"] == 0.3
    assert cli.trainer.loggers == []


def test_dict_args_and_trainer_defaults(project, monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(project))
    from accelkit.callbacks import LearningRateMonitor
    from accelkit.cli import CLI

    models = __import__("models")
    monitor = LearningRateMonitor()
    cli = CLI(models.Net, models.Blobs, run=False, save_config_callback=None,
              trainer_defaults={"max_epochs": 7, "callbacks": [monitor], "accelerator": "cpu"},
              args={"trainer": {"default_root_dir": str(tmp_path), "logger": "csv"}, "model": {"lr": 0.2}})
    assert cli.trainer.max_epochs == 7 and monitor in cli.trainer.callbacks
    assert type(cli.trainer.loggers[0]).__name__ == "CSVLogger" and cli.model.hparams["lr"] == 0.2


@pytest.mark.slow  # fits in a fresh interpreter
def test_ddp_spawn_runs_from_a_config(project):
    done = run(project, "main.py", "fit", "--config", "run.yaml", "--trainer.devices", "2", "--trainer.strategy",
               "ddp_spawn", "--trainer.max_epochs", "1")
    assert done.returncode == 0, done.stderr
    assert len(list((project / "run").rglob("config.yaml"))) == 1


def test_import_accelkit_stays_free_of_jsonargparse_tensorboard_and_mlflow():
    code = ("import sys, json, accelkit, accelkit.cli.main, accelkit.loggers\n"
            "print(json.dumps(sorted(m for m in ('jsonargparse', 'tensorboard', 'mlflow', 'accelkit_mlflow') "
            "if m in sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


EXTRAS_PLUGIN = '''
import accelkit
from accelkit.records import CallbackRecord

ACCELKIT_API = ">=1.3,<2"


class Ema(accelkit.Callback):
    pass


@accelkit.hookimpl
def accelkit_register_callbacks():
    return [CallbackRecord("ema", Ema)]
'''


def test_a_plugin_callback_by_name_on_the_command_line(project, monkeypatch, tmp_path, make_distribution):
    make_distribution(tmp_path / "site", "acme-extras", "1.0.0", {"acmeextras": "acme_extras_plugin"},
                      {"acme_extras_plugin": EXTRAS_PLUGIN})
    for name in [n for n in os.environ if n.startswith("ACCELKIT_")]:
        monkeypatch.delenv(name)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.syspath_prepend(str(project))
    from accelkit.cli import CLI

    models = __import__("models")
    try:
        cli = CLI(models.Net, models.Blobs, run=False, args=[
            "--trainer.accelerator=cpu", "--trainer.logger=false", f"--trainer.default_root_dir={tmp_path}",
            "--trainer.callbacks=ema"])
        assert [type(c).__name__ for c in cli.trainer.callbacks][:2] == ["Ema", "SaveConfigCallback"]
    finally:
        sys.modules.pop("acme_extras_plugin", None)
