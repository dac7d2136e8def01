"""Issue 16, item 5: the ``config.yaml`` a ``fit`` run saves drives ``validate``, ``test`` and ``predict``, through
the same LightningCLI script (``CLI(run=True)`` sub-commands) and through the ``accelkit`` command, in both
directions: a script built for fixed classes saves the class paths too (and the values its argument links filled
in), and reads the class-path form the ``accelkit`` command saves.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

pytest.importorskip("jsonargparse")

from helpers.cli_runs import environment_as_found, project_imports, run_here  # noqa: E402
from helpers.prewarmed import Prewarmed  # noqa: E402

MODELS = textwrap.dedent('''
    import torch
    from torch import nn
    from torch.nn import functional as F
    from torch.utils.data import DataLoader, TensorDataset

    from accelkit import DataModule as LightningDataModule
    from accelkit import Module as LightningModule


    class Blobs(LightningDataModule):
        def __init__(self, batch_size: int = 8, size: int = 64):
            super().__init__()
            self.save_hyperparameters()

        def setup(self, stage):
            generator = torch.Generator().manual_seed(0)
            x = torch.randn(self.hparams.size, 4, generator=generator)
            self.data = TensorDataset(x, (x.sum(dim=1) > 0).long())

        def train_dataloader(self):
            return DataLoader(self.data, batch_size=self.hparams.batch_size, shuffle=True)

        def val_dataloader(self):
            return DataLoader(self.data, batch_size=self.hparams.batch_size)

        test_dataloader = val_dataloader
        predict_dataloader = val_dataloader


    class Net(LightningModule):
        def __init__(self, hidden: int = 8, lr: float = 0.05):
            super().__init__()
            self.save_hyperparameters()
            self.net = nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, 2))

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.cross_entropy(self(x), y)

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", F.cross_entropy(self(x), y))

        def test_step(self, batch, batch_idx):
            x, y = batch
            self.log("test_acc", (self(x).argmax(1) == y).float().mean())

        def predict_step(self, batch, batch_idx):
            return self(batch[0]).argmax(1)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
''')

# A LightningCLI script with fixed classes and an argument link; only its imports were changed.
SCRIPT = textwrap.dedent('''
    from accelkit.cli import CLI as LightningCLI  # was: from lightning.pytorch.cli import LightningCLI
    from models import Blobs, Net


    class MyCLI(LightningCLI):
        def add_arguments_to_parser(self, parser):
            parser.link_arguments("data.batch_size", "model.hidden")


    if __name__ == "__main__":
        MyCLI(Net, Blobs, seed_everything_default=5)
''')

CONFIG = textwrap.dedent('''
    trainer:
      accelerator: cpu
      max_epochs: 2
      enable_progress_bar: false
      enable_model_summary: false
      default_root_dir: run
      callbacks:
        - class_path: lightning.pytorch.callbacks.ModelCheckpoint
          init_args: {dirpath: run/ckpt, save_last: true}
    data:
      batch_size: 12
''')


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "models.py").write_text(MODELS)
    (tmp_path / "main.py").write_text(SCRIPT)
    (tmp_path / "run.yaml").write_text(CONFIG)
    # its models.py, not another test's, and no later test sees it, nor the seed its CLI sets
    with project_imports(tmp_path), environment_as_found():
        yield tmp_path


def run(prewarmed: Prewarmed, cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    """``python *argv`` in ``cwd`` as a program, forked from the prewarmed interpreter (``helpers.prewarmed``)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKIT_")}
    environ["PYTHONWARNINGS"] = "ignore"
    environ["PYTHONPATH"] = str(cwd)  # the accelkit command finds the project's classes, as from its folder
    proc = prewarmed.run(argv, cwd=cwd, env=environ, timeout=300)
    assert proc.returncode == 0, f"$ {' '.join(argv)}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


def accelkit_command(*words: str) -> list[str]:
    return ["-m", "accelkit.cli", *words]


def metric(output: str, name: str) -> float:
    for line in output.splitlines():
        if line.strip().startswith(name):
            return float(line.split("|")[1])
    raise AssertionError(f"{name} not in the output:\n{output}")


def saved_config(project: Path) -> Path:
    found = sorted(project.glob("run/*/version_*/config.yaml"))
    assert len(found) == 1, found
    return found[0]


@pytest.mark.slow
def test_a_fit_config_saved_by_a_fixed_class_cli_drives_every_stage_of_both_commands(project, monkeypatch, capsys,
                                                                                     prewarmed):
    run(prewarmed, project, "main.py", "fit", "--config", "run.yaml")
    saved = saved_config(project)
    config = yaml.safe_load(saved.read_text())
    # the classes are named and the linked value is written, so a command without the link builds the same model
    assert config["model"] == {"class_path": "models.Net", "init_args": {"hidden": 12, "lr": 0.05}}
    assert config["data"]["class_path"] == "models.Blobs" and config["data"]["init_args"]["batch_size"] == 12
    checkpoint = ["--ckpt_path", "run/ckpt/last.ckpt"]
    results = {}
    # the later stages run in this process (helpers.cli_runs): the fit above started the script as a program
    for name, script in (("script", "main.py"), ("accelkit", None)):
        stages = {}
        for stage in ("validate", "test", "predict"):
            done = run_here(project, monkeypatch, capsys, stage, "--config", str(saved), *checkpoint, script=script)
            assert done.returncode == 0, f"{name} {stage}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
            stages[stage] = done.stdout
        results[name] = (metric(stages["validate"], "val_loss"), metric(stages["test"], "test_acc"))
    assert results["script"] == results["accelkit"], results  # the same model and data through both commands


@pytest.mark.slow
def test_a_fit_config_saved_by_the_accelkit_command_drives_a_fixed_class_cli(project, monkeypatch, capsys, prewarmed):
    # the script links model.hidden to data.batch_size (12): the command, which has no link, is given the same
    run(prewarmed, project, *accelkit_command("fit", "--model", "models:Net", "--data", "models:Blobs", "--config",
                                              "run.yaml", "--model.hidden", "12"))
    saved = saved_config(project)
    assert yaml.safe_load(saved.read_text())["model"]["class_path"] == "models.Net"
    tested = run_here(project, monkeypatch, capsys, "test", "--config", str(saved), "--ckpt_path", "run/ckpt/last.ckpt",
                      script="main.py")  # in this process: the fit above started the accelkit command as a program
    assert tested.returncode == 0, tested.stderr[-4000:]
    assert 0.0 <= metric(tested.stdout, "test_acc") <= 1.0, tested.stdout


def test_a_fixed_class_cli_refuses_a_config_naming_another_class(project):
    sys.path.insert(0, str(project))  # put back by the fixture, which forgets the project's modules
    from models import Blobs, Net

    from accelkit.cli import CLI
    from accelkit.cli.saved_config import ClassPathMismatch, accept_class_paths

    given = {"model": {"class_path": "models.Net", "init_args": {"hidden": 3}}, "data": {"batch_size": 4}}
    assert accept_class_paths(given, {"model": Net, "data": Blobs}) == {"model": {"hidden": 3},
                                                                          "data": {"batch_size": 4}}
    nested = {"test": {"model": {"class_path": "Net", "init_args": {"lr": 0.5}}}}
    assert accept_class_paths(nested, {"model": Net}) == {"test": {"model": {"lr": 0.5}}}
    with pytest.raises(ClassPathMismatch, match="model.class_path is 'models.Blobs', but this command builds"):
        accept_class_paths({"model": {"class_path": "models.Blobs"}}, {"model": Net})
    # a class of another name is refused without importing the module that names it
    (project / "marks_on_import.py").write_text('import pathlib\npathlib.Path(__file__).with_name("IMPORTED")'
                                                '.touch()\nclass Other:\n    pass\n')
    with pytest.raises(ClassPathMismatch, match="model.class_path is 'marks_on_import.Other'"):
        accept_class_paths({"model": {"class_path": "marks_on_import.Other"}}, {"model": Net})
    assert "marks_on_import" not in sys.modules and not (project / "IMPORTED").exists()
    cli = CLI(Net, Blobs, run=False, args={"model": {"class_path": "models.Net", "init_args": {"hidden": 3}},
                                           "trainer": {"accelerator": "cpu", "logger": False}})
    assert cli.model.hparams.hidden == 3

