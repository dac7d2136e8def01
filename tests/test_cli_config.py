"""accelkit.cli.CLI and `accelkit fit|validate|test|predict --config`: real runs from YAML files in tmp_path."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

pytest.importorskip("jsonargparse")

from helpers.cli_runs import environment_as_found, project_imports, run_here  # noqa: E402
from helpers.prewarmed import Prewarmed  # noqa: E402
from helpers.summary_lines import last_checkpoint  # noqa: E402

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
def project(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "models.py").write_text(MODELS)
    (tmp_path / "main.py").write_text(LIGHTNING_SCRIPT)
    (tmp_path / "run.yaml").write_text(LIGHTNING_YAML)
    # its models.py, not another test's, and no later test sees it, nor the seed its CLI sets
    with project_imports(tmp_path), environment_as_found():
        yield tmp_path


def run(prewarmed: Prewarmed, cwd: Path, *argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python *argv`` in ``cwd`` as a program, forked from the prewarmed interpreter (``helpers.prewarmed``)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKIT_")}
    environ["PYTHONWARNINGS"] = "ignore"
    return prewarmed.run(argv, cwd=cwd, env={**environ, **(env or {})}, timeout=300)


def metrics(path: Path) -> list[dict[str, str]]:
    import csv

    with open(path) as handle:
        return list(csv.DictReader(handle))


# ------------------------------------------------------------------- a LightningCLI script, imports changed
@pytest.mark.slow  # fits in a program
def test_a_lightning_cli_script_runs_fit_then_test_from_the_saved_config(project, monkeypatch, capsys, prewarmed):
    fit = run(prewarmed, project, "main.py", "fit", "--config", "run.yaml")
    assert fit.returncode == 0, fit.stderr
    saved = project / "run" / "lightning_logs" / "version_0" / "config.yaml"
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

    # in this process (helpers.cli_runs): the fit above started the script as a program
    test = run_here(project, monkeypatch, capsys, "test", "--config", str(saved), "--ckpt_path", "run/ckpt/last.ckpt",
                    script="main.py")
    assert test.returncode == 0, test.stderr
    assert "test_acc" in test.stdout


@pytest.mark.slow  # two fits
def test_the_saved_config_repeats_the_run(project, monkeypatch, capsys):
    # both in this process (helpers.cli_runs; the test above starts the script as a program): the same
    # interpreter for both runs, so that only the configuration could make them differ
    first = run_here(project, monkeypatch, capsys, "fit", "--config", "run.yaml", script="main.py")
    assert first.returncode == 0, first.stderr
    (project / "run").rename(project / "first")
    saved = next((project / "first").rglob("config.yaml"))
    again = run_here(project, monkeypatch, capsys, "fit", "--config", str(saved), script="main.py")
    assert again.returncode == 0, again.stderr
    first_rows = metrics(next((project / "first").rglob("metrics.csv")))
    second_rows = metrics(next((project / "run").rglob("metrics.csv")))
    losses = [r["val_loss"] for r in first_rows if r.get("val_loss")]
    assert len(losses) == 3 and losses == [r["val_loss"] for r in second_rows if r.get("val_loss")]


@pytest.mark.slow  # two runs of the script, each building its parser of every Trainer argument
def test_print_config_round_trips(project, monkeypatch, capsys):
    # in this process (helpers.cli_runs): printing parses and builds the parser only
    printed = run_here(project, monkeypatch, capsys, "fit", "--config", "run.yaml", "--model.lr", "0.5",
                       "--print_config", script="main.py")
    assert printed.returncode == 0, printed.stderr
    (project / "printed.yaml").write_text(printed.stdout)
    again = run_here(project, monkeypatch, capsys, "fit", "--config", "printed.yaml", "--print_config",
                     script="main.py")
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


def test_a_parse_error_names_every_unknown_key_at_once_and_one_line_of_help(project, monkeypatch, capsys):
    from accelkit import cli

    monkeypatch.chdir(project)
    (project / "typo.yaml").write_text("trainer:\n  max_epoch: 2\n  max_time: {hours: 1}\nmodel:\n"
                                       "  init_args: {lr: 0.1}\n")
    with pytest.raises(SystemExit) as exc:
        cli.main(["fit", "--model", "models.py:Net", "--config", "typo.yaml", "--model.hiden", "3",
                  "--trainer.acclerator", "cpu", "--data", "models:Blobs", "--data.batch_sise", "4"])
    assert exc.value.code == 2
    # the keys of the file, then those of the words; the model's and the data's checked against their classes
    assert capsys.readouterr().err.splitlines() == [
        "accelkit fit: error: unknown key 'trainer.max_epoch'. Did you mean 'trainer.max_epochs'?",
        "accelkit fit: error: unknown key 'model.hiden'. Did you mean 'model.hidden'?",
        "accelkit fit: error: unknown key 'trainer.acclerator'. Did you mean 'trainer.accelerator'?",
        "accelkit fit: error: unknown key 'data.batch_sise'. Did you mean 'data.batch_size'?",
        "Run 'accelkit fit --help' to see every key and the values it accepts."]


@pytest.mark.parametrize("argv, problem", [
    (["--trainer.max_epochs", "many"], "trainer.max_epochs: value 'many' is not accepted; accepted: int, null"),
    # a model's argument: named by its key, not as "model: value NestedArg(...)", with its own type only
    (["--model.hidden", "wide"], "model.hidden: value 'wide' is not accepted; accepted: int"),
])
def test_a_bad_value_is_one_line_without_the_usage(project, monkeypatch, capsys, argv, problem):
    from accelkit import cli

    monkeypatch.chdir(project)
    with pytest.raises(SystemExit) as exc:
        cli.main(["test", "--model", "models:Net", *argv])
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"accelkit test: error: {problem}",
        "Run 'accelkit test --help' to see every key and the values it accepts."]


@pytest.mark.slow  # starts a process
def test_a_lightning_class_without_counterpart_names_ours(project, prewarmed):
    (project / "bad.yaml").write_text("trainer:\n  callbacks:\n    - class_path: "
                                      "lightning.pytorch.callbacks.EarlyStoping\n")
    done = run(prewarmed, project, "-m", "accelkit.cli", "fit", "--model", "models.py:Net", "--config", "bad.yaml")
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert "'lightning.pytorch.callbacks.EarlyStoping' has no accelkit counterpart. Did you mean 'EarlyStopping'?" \
        in done.stderr and "accelkit.callbacks.EarlyStopping" in done.stderr


# ------------------------------------------------------------------- the accelkit command
@pytest.mark.slow  # fits in a program
def test_accelkit_fit_config_with_file_targets_then_validate(project, monkeypatch, capsys, prewarmed):
    (project / "plain.yaml").write_text(textwrap.dedent('''
        trainer: {accelerator: cpu, max_epochs: 2, enable_progress_bar: false, default_root_dir: out,
                  logger: [csv, tensorboard]}
        model: {init_args: {hidden: 6}}
    '''))
    # (the class first: init_args without a class_path apply to the class already chosen)
    done = run(prewarmed, project, "-m", "accelkit.cli", "fit", "--model", "models.py:Net", "--config",
               "plain.yaml", "--data", "models:Blobs", "--data.batch_size", "8")
    assert done.returncode == 0, done.stderr
    assert "accelkit: configuration saved to" in done.stdout
    version = project / "out" / "lightning_logs" / "version_0"  # both loggers' folder, the config's and checkpoints'
    saved = yaml.safe_load((version / "config.yaml").read_text())
    assert saved["model"] == {"class_path": "models.Net", "init_args": {"hidden": 6, "lr": 0.05}}
    assert saved["data"]["init_args"]["batch_size"] == 8
    assert saved["trainer"]["logger"] == ["csv", "tensorboard"]
    assert list(version.glob("events.out.tfevents*")) and (version / "metrics.csv").is_file()
    # where the run reports it, relative to the folder it ran in (the default folder is kept as given, as Lightning's)
    reported = last_checkpoint(done.stdout)  # the default callback's one file, as Lightning's (no last.ckpt)
    assert [project / reported] == list((version / "checkpoints").iterdir()) and "epoch=1-step=" in reported
    # in this process (helpers.cli_runs): the fit above started the command as a program
    validate = run_here(project, monkeypatch, capsys, "validate",
                        "--config", "out/lightning_logs/version_0/config.yaml", "--ckpt_path", reported)
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



def test_the_seed_everything_key_seeds_as_lightnings(project, monkeypatch, tmp_path):
    """``seed_everything:`` as LightningCLI 2.6 reads it: ``"42"`` seeds with 42; ``true`` seeds with
    ``PL_GLOBAL_SEED``'s seed, else 0 with Lightning's warning (it picked a random seed); a seed outside
    0..2**32-1 is a ValueError naming it (it was used as given)."""
    monkeypatch.syspath_prepend(str(project))
    from accelkit.cli import CLI

    models = __import__("models")
    for name in ("ACCELKIT_SEED", "PL_GLOBAL_SEED"):
        monkeypatch.delenv(name, raising=False)

    def seeded(value):
        (tmp_path / "seed.yaml").write_text(f"seed_everything: {value}\n")
        cli = CLI(models.Net, models.Blobs, run=False, save_config_callback=None,
                  args=["--config", str(tmp_path / "seed.yaml"), "--trainer.accelerator=cpu", "--trainer.logger=false"])
        return cli.config["seed_everything"], os.environ["PL_GLOBAL_SEED"]

    assert seeded('"42"') == (42, "42")
    for name in ("ACCELKIT_SEED", "PL_GLOBAL_SEED"):
        monkeypatch.delenv(name)
    with pytest.warns(UserWarning, match="got no seed and found neither ACCELKIT_SEED nor PL_GLOBAL_SEED: seeding "
                                         "with 0"):
        assert seeded("true") == (0, "0")
    monkeypatch.delenv("ACCELKIT_SEED")
    monkeypatch.setenv("PL_GLOBAL_SEED", "9")
    assert seeded("true") == (9, "9")
    for value in (-1, 2**32):
        with pytest.raises(ValueError, match=f"got seed {value}, out of bounds: a seed is from 0 to 4294967295"):
            seeded(value)


def test_lightnings_yaml_parser_mode_named_by_the_program_still_maps_lightning_class_paths(project, monkeypatch):
    """``LightningCLI(..., parser_kwargs={"parser_mode": "yaml"})`` (aygalic/smolGPT's ``app/train_transformer.py``)
    names Lightning's default mode: the project's YAML, with ``lightning.pytorch.callbacks.ModelCheckpoint``, is read
    as without it (it was refused: ``trainer.callbacks: value ... is not accepted; accepted: str, null``)."""
    monkeypatch.syspath_prepend(str(project))
    monkeypatch.chdir(project)
    from accelkit.callbacks import LearningRateMonitor, ModelCheckpoint
    from accelkit.cli import CLI

    models = __import__("models")
    cli = CLI(models.Net, models.Blobs, run=False, save_config_callback=None, parser_kwargs={"parser_mode": "yaml"},
              args=["--config", "run.yaml", "--trainer.logger=false"])
    kinds = [type(c) for c in cli.trainer.callbacks]
    assert ModelCheckpoint in kinds and LearningRateMonitor in kinds, kinds
    assert cli.parser.parser_mode == "accelkit_yaml"

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


def test_the_optimizer_warning_names_the_users_classes_never_accelkits_own(project, monkeypatch, capsys, tmp_path):
    """``--optimizer`` replacing the module's ``configure_optimizers`` warns naming the user's module (as
    Lightning's ``MyModel.configure_optimizers will be overridden``), the configured classes, and a CLI class only
    where the user's subclass overrides ``configure_optimizers``: never the ``accelkit`` command's internal class."""
    monkeypatch.syspath_prepend(str(project))
    from accelkit.cli import CLI

    models = __import__("models")
    args = ["--trainer.accelerator=cpu", "--trainer.logger=false", f"--trainer.default_root_dir={tmp_path}",
            "--optimizer=SGD", "--optimizer.lr=0.3"]
    with pytest.warns(UserWarning, match="configure_optimizers is overridden") as plain:
        CLI(models.Net, models.Blobs, run=False, args=args)
    assert [str(w.message) for w in plain if "configure_optimizers" in str(w.message)] == [
        "Net.configure_optimizers is overridden by the configuration's --optimizer SGD; leave out --optimizer to "
        "train with Net's own"]

    class MyCLI(CLI):
        @staticmethod
        def configure_optimizers(module, optimizer, lr_scheduler=None):
            return optimizer

    with pytest.warns(UserWarning, match=r"--optimizer SGD and --lr_scheduler StepLR through "
                                         r"MyCLI.configure_optimizers; leave out --optimizer"):
        MyCLI(models.Net, models.Blobs, run=False, args=[*args, "--lr_scheduler=StepLR",
                                                          "--lr_scheduler.step_size=1"])
    with pytest.warns(UserWarning, match="configure_optimizers is overridden") as command:
        done = run_here(project, monkeypatch, capsys, "fit", "models:Net", "--data", "models:Blobs", *args,
                        "--trainer.fast_dev_run=true")
        assert done.returncode == 0, done.stdout + done.stderr
    said = [str(w.message) for w in command if "configure_optimizers" in str(w.message)]
    # not "(CommandCLI.configure_optimizers)" (the first warning may be seed_everything's: no seed given or found)
    assert said == [str(w.message) for w in plain if "configure_optimizers" in str(w.message)], said


@pytest.mark.slow  # fits in a program
def test_ddp_spawn_runs_from_a_config(project, prewarmed):
    done = run(prewarmed, project, "main.py", "fit", "--config", "run.yaml", "--trainer.devices", "2",
               "--trainer.strategy", "ddp_spawn", "--trainer.max_epochs", "1")
    assert done.returncode == 0, done.stderr
    assert len(list((project / "run").rglob("config.yaml"))) == 1


@pytest.mark.slow  # starts a process
def test_import_accelkit_stays_free_of_jsonargparse_tensorboard_and_mlflow():
    """What ``import accelkit`` loads, and then what building a Trainer adds (plugin discovery included): neither
    loads the CLI's, the loggers' or Lightning's libraries, torch_xla, or torch's compile machinery (``torch._dynamo``
    with sympy and triton: about 1.2 CPU-s of every start-up, which only a run's first optimizer or DDP needs)."""
    code = ("import sys, json, accelkit, accelkit.cli.main, accelkit.loggers\n"
            "LATER = ('jsonargparse', 'tensorboard', 'mlflow', 'lightning', 'torch_xla', 'torch._dynamo', 'sympy')\n"
            "first = sorted(m for m in ('accelkit_mlflow', *LATER) if m in sys.modules)\n"
            "accelkit.Trainer(accelerator='cpu', devices=1, logger=False)\n"
            "print(json.dumps([first, sorted(m for m in LATER if m in sys.modules)]))")
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [[], []]


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


# ------------------------------------------------------------------- what a configuration file can build
UNTRUSTED_MODELS = textwrap.dedent('''
    from typing import Any, Callable, Optional

    import torch

    import accelkit


    class Loose(accelkit.Module):
        """Arguments typed Any, object, not typed, inside containers, and Callable."""

        def __init__(self, extra: Any = None, untyped=None, nested: dict[str, Any] = None, items: list[Any] = None,
                     maybe: Optional[Any] = None, anything: object = None, factory: Callable = None,
                     scheduler: torch.optim.lr_scheduler.LRScheduler = None):
            super().__init__()
            self.given = dict(extra=extra, untyped=untyped, nested=nested, items=items, maybe=maybe,
                              anything=anything, factory=factory)
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):
            return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(4, 2)), batch_size=2)


    def leave_mark(path):
        """A function with an effect, which no import path policy knows: only accelkit's rule keeps it uncalled."""
        open(path, "w").close()
''')

# a module whose import leaves a mark: naming it in a configuration must not import it
IMPORT_MARKER_MODULE = ('import pathlib\npathlib.Path(__file__).with_name("IMPORTED").touch()\n\n'
                        'class Thing:\n    pass\n')


def shell(marker: Path) -> dict:
    return {"class_path": "os.system", "init_args": {"command": f"touch {marker}"}}


@pytest.fixture
def loose(tmp_path: Path, monkeypatch) -> Iterator[Path]:
    (tmp_path / "loose_models.py").write_text(UNTRUSTED_MODELS)
    (tmp_path / "marks_on_import.py").write_text(IMPORT_MARKER_MODULE)
    with project_imports(tmp_path), environment_as_found():
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.chdir(tmp_path)
        yield tmp_path


def build(tmp_path: Path, init_args: dict) -> object:
    from accelkit.cli import CLI

    return CLI(run=False, args={"model": {"class_path": "loose_models.Loose", "init_args": init_args},
                                "trainer": {"logger": False, "default_root_dir": str(tmp_path)}})


@pytest.mark.parametrize("argument, value, given", [
    ("extra", lambda m: shell(m), lambda m: shell(m)),
    ("nested", lambda m: {"x": shell(m)}, lambda m: {"x": shell(m)}),
    ("items", lambda m: [shell(m)], lambda m: [shell(m)]),
    ("maybe", lambda m: shell(m), lambda m: shell(m)),
    ("anything", lambda m: shell(m), lambda m: shell(m)),
])
@pytest.mark.filterwarnings("error::DeprecationWarning")  # nothing named is looked up: no import path warning either
def test_a_class_path_for_an_argument_typed_any_stays_plain_data(loose, argument, value, given):
    marker = loose / "MARKER"
    with pytest.warns(UserWarning, match="naming class_path 'os.system' .* stays plain data"):
        cli = build(loose, {argument: value(marker)})
    assert not marker.exists(), "the configuration ran a shell command"
    assert cli.model.given[argument] == given(marker)


def test_a_class_path_for_an_argument_typed_any_imports_nothing(loose):
    import sys

    from accelkit.cli import CLI

    (loose / "e.yaml").write_text(yaml.safe_dump({"trainer": {"logger": False, "default_root_dir": str(loose)},
                                                  "model": {"class_path": "loose_models.Loose", "init_args": {
                                                      "extra": {"class_path": "marks_on_import.Thing"}}}}))
    # a file, then the command line (jsonargparse merges the two, looking up the classes named on both sides)
    override = json.dumps({"class_path": "marks_on_import.Thing", "init_args": {"a": 1}})
    with pytest.warns(UserWarning, match="'marks_on_import.Thing'"):
        cli = CLI(run=False, args=["--config", "e.yaml", "--model.init_args.extra", override])
    assert cli.model.given["extra"] == {"class_path": "marks_on_import.Thing", "init_args": {"a": 1}}
    assert "marks_on_import" not in sys.modules and not (loose / "IMPORTED").exists()


@pytest.mark.parametrize("value", [{"class_path": "torch.nn.MSELoss"}, [{"class_path": "marks_on_import.Thing"}]])
def test_a_class_path_for_an_untyped_argument_is_refused_at_parse_time_naming_it_and_the_annotation(loose, capsys,
                                                                                                    value):
    """A template's untyped ``criterion`` given a class_path reached the module as a dict (only a warning), to fail
    later as "'dict' object is not callable": it is refused when the configuration is parsed, naming the argument
    and the annotation that builds it, and nothing it names is imported."""
    import sys

    (loose / "u.yaml").write_text(yaml.safe_dump({
        "trainer": {"logger": False, "default_root_dir": str(loose)},
        "model": {"class_path": "loose_models.Loose", "init_args": {"untyped": value}}}))
    from accelkit.cli import CLI

    with pytest.raises(SystemExit):
        CLI(run=False, args=["--config", "u.yaml"])
    error = capsys.readouterr().err.splitlines()[0]
    name = str(value).split("'class_path': '")[1].split("'")[0]
    assert error.endswith(f"error: model.init_args.untyped: class_path {name!r} is given for an argument without a "
                          "type annotation: accelkit builds a class_path only where the annotation asks for a class, "
                          f"and does not pass the dict on. Annotate the argument with a class it accepts "
                          f"({name.rpartition('.')[2]} itself or a base class of it, such as torch.nn.Module) to have "
                          "it built, or with Any or dict to receive the dict as data"), error
    assert "marks_on_import" not in sys.modules and not (loose / "IMPORTED").exists()


def test_a_class_path_naming_a_function_is_refused_before_it_is_called(loose):
    from accelkit.errors import ConfigurationError

    marker = loose / "MARKER"
    with pytest.raises(ConfigurationError, match=r"model.init_args.factory: class_path 'loose_models.leave_mark' names "
                                                 r"a function, not a class; a configuration builds only classes"):
        build(loose, {"factory": {"class_path": "loose_models.leave_mark", "init_args": {"path": str(marker)}}})
    assert not marker.exists()


@pytest.mark.filterwarnings("error::DeprecationWarning")  # jsonargparse 4.53 warns that version 5 will refuse it
def test_a_class_path_jsonargparse_denies_is_refused_without_a_deprecation_warning(loose, capsys):
    marker = loose / "MARKER"
    with pytest.raises(SystemExit):
        build(loose, {"factory": shell(marker)})
    assert not marker.exists()
    error = capsys.readouterr().err.splitlines()[0]
    if "is refused" in error:  # jsonargparse with an import path policy (4.53 and later)
        assert error.endswith("error: model: class_path 'os.system' is refused: jsonargparse denies importing 'os' "
                              "from a configuration (it can run commands or code); name a class there")
    else:  # an older jsonargparse: accelkit's own refusal of a function
        assert "class_path 'os.system' names a function" in error


def test_the_cli_extra_pins_the_jsonargparse_range_class_path_safety_needs():
    """class_path_safety replaces two private jsonargparse functions, which a version 5 may change: the extra allows
    only the versions that have them (the range its import error names), the installed one among them."""
    import tomllib
    from importlib.metadata import version

    from packaging.requirements import Requirement

    core = Path(__file__).resolve().parents[1] / "core" / "pyproject.toml"
    (extra,) = tomllib.loads(core.read_text())["project"]["optional-dependencies"]["cli"]
    required = Requirement(extra)
    assert required.name == "jsonargparse" and set(required.specifier) == set(Requirement("x>=4.27,<5").specifier)
    assert version("jsonargparse") in required.specifier


def test_a_class_path_where_a_class_is_annotated_is_still_built(loose, capsys):
    import torch

    cli = build(loose, {"factory": {"class_path": "torch.nn.ReLU"}})
    assert isinstance(cli.model.given["factory"], torch.nn.ReLU)
    # ...and only a subclass of the annotation (jsonargparse's check, kept)
    with pytest.raises(SystemExit):
        build(loose, {"scheduler": {"class_path": "torch.nn.ReLU"}})
    assert "torch.nn.ReLU" in capsys.readouterr().err


@pytest.mark.slow  # two fits in programs
def test_accelkit_fit_does_not_run_a_shell_command_from_a_config_nor_from_its_saved_config(loose, prewarmed):
    marker = loose / "MARKER"
    (loose / "e.yaml").write_text(yaml.safe_dump({
        "trainer": {"accelerator": "cpu", "max_steps": 1, "enable_progress_bar": False, "default_root_dir": "out"},
        "model": {"class_path": "loose_models.Loose",
                  "init_args": {"extra": shell(marker), "nested": {"x": shell(marker)}}},
    }))
    first = run(prewarmed, loose, "-m", "accelkit.cli", "fit", "--config", "e.yaml")
    assert first.returncode == 0, first.stderr
    assert not marker.exists()
    saved_path = next((loose / "out").rglob("config.yaml"))
    saved = yaml.safe_load(saved_path.read_text())
    assert saved["model"]["init_args"]["extra"] == shell(marker) == saved["model"]["init_args"]["nested"]["x"]
    again = run(prewarmed, loose, "-m", "accelkit.cli", "fit", "--config", str(saved_path),
                "--trainer.default_root_dir", "again")
    assert again.returncode == 0, again.stderr
    assert not marker.exists()


# ------------------------------------------------------------------- Lightning's YAML files, read as YAML
COMMENTED_YAML = textwrap.dedent('''
    # logger:
    #   class_path: lightning.pytorch.loggers.wandb.WandbLogger   (off for now)
    trainer:
      logger: false
      callbacks:
        - class_path: lightning.pytorch.callbacks.ModelSummary   # ours: accelkit.callbacks.ModelSummary
          init_args: {max_depth: 2}
        # - class_path: lightning.pytorch.callbacks.EMAWeightAveraging
    model:
      class_path: loose_models.Loose
      init_args:
        untyped: "lightning.pytorch.loggers.WandbLogger and lightning.pytorch.Trainer, in a sentence"
        nested:
          _target_: lightning.pytorch.callbacks.early_stopping.EarlyStopping
          lightning.pytorch.callbacks.Timer: a key, left alone
''')


def test_a_lightning_yaml_is_translated_as_yaml_not_text(loose):
    from accelkit.callbacks import ModelSummary
    from accelkit.cli import CLI

    (loose / "commented.yaml").write_text(COMMENTED_YAML)
    cli = CLI(run=False, args=["--config", "commented.yaml", "--trainer.default_root_dir", str(loose)])
    summaries = [c for c in cli.trainer.callbacks if isinstance(c, ModelSummary)]
    assert len(summaries) == 1 and summaries[0].max_depth == 2
    given = cli.model.given
    assert given["untyped"] == "lightning.pytorch.loggers.WandbLogger and lightning.pytorch.Trainer, in a sentence"
    assert given["nested"] == {"_target_": "accelkit.callbacks.EarlyStopping",
                               "lightning.pytorch.callbacks.Timer": "a key, left alone"}


def supported_lightning_classes() -> list[tuple[str, str]]:
    """(Lightning class path, accelkit object path) for every class the migration table says accelkit has."""
    import importlib

    from helpers.migration_table import SECTION_BY_KEY, load_rows

    found = [("lightning.pytorch.LightningModule", "accelkit.Module"),
             ("lightning.pytorch.LightningDataModule", "accelkit.DataModule"), ("lightning.pytorch.Trainer",
                                                                                "accelkit.Trainer")]
    for row in load_rows().values():
        if not (row.exists and SECTION_BY_KEY[row.section].home and row.name[:1].isupper()):
            continue
        module, _, name = row.mirror_path.rpartition(".")
        try:
            obj = getattr(importlib.import_module(module), name)
        except ImportError:  # a plugin's class (accelkit_mlflow) where the plugin is not installed
            continue
        if isinstance(obj, type):
            found.append((f"lightning.pytorch.{row.section}.{row.name}", row.mirror_path))
    return found


def test_every_supported_lightning_class_path_translates_to_its_accelkit_class():
    from accelkit.cli.class_paths import accelkit_class_path
    from accelkit.cli.saved_config import import_class_path

    pairs = supported_lightning_classes()
    assert len(pairs) > 30 and ("lightning.pytorch.callbacks.ModelSummary", "accelkit.callbacks.ModelSummary") in pairs
    wrong = {}
    for lightning_path, ours in pairs:
        for spelling in (lightning_path, lightning_path.replace("lightning.pytorch.", "pytorch_lightning.")):
            try:
                translated = accelkit_class_path(spelling)
            except Exception as exc:  # noqa: BLE001 - collected, reported together
                wrong[spelling] = repr(exc)
                continue
            if import_class_path(translated) is not import_class_path(ours):
                wrong[spelling] = translated
    assert not wrong, wrong


def test_command_line_words_translate_whole_class_paths_only():
    from accelkit.cli.class_paths import translate_value, translate_word

    assert translate_word("--trainer.callbacks+=lightning.pytorch.callbacks.ModelSummary") == \
        "--trainer.callbacks+=accelkit.callbacks.ModelSummary"
    assert translate_word("pytorch_lightning.loggers.CSVLogger") == "accelkit.loggers.CSVLogger"
    assert translate_word("--model.note=use lightning.pytorch.Trainer") == "--model.note=use lightning.pytorch.Trainer"
    # a whole Lightning path accelkit lacks, outside a class_path, is left for the parser to judge
    assert translate_value({"note": "lightning.pytorch.loggers.CometLogger"}) == {
        "note": "lightning.pytorch.loggers.CometLogger"}


# ------------------------------------------------------------------- one fit command, configurations that load back
def printed_config(cwd: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, *argv: str) -> str:
    done = run_here(cwd, monkeypatch, capsys, *argv, "--print_config")
    assert done.returncode == 0, done.stderr
    return done.stdout


def reported(stdout: str, what: str) -> str:
    """The path of an ``accelkit: <what> ...`` line of the command's output."""
    line = next(line for line in stdout.splitlines() if line.startswith(f"accelkit: {what}"))
    return line.split(what, 1)[1].split(" (")[0].strip()


@pytest.mark.slow  # a fit in a program, four commands in this process
@pytest.mark.parametrize("model, data, written", [
    ("lib/nets.py:Net", "lib/nets.py:Blobs", "lib/nets.py:Net"),  # a file outside the current folder: kept as a file
    ("models:Net", "models.Blobs", "models.Net"),  # importable from here: a dotted class path
])
def test_print_config_then_config_then_test_config_round_trip(project, monkeypatch, capsys, model, data, written,
                                                              prewarmed):
    (project / "lib").mkdir()
    (project / "lib" / "nets.py").write_text(MODELS)
    # printing, the test and the refusal run in this process (helpers.cli_runs); the fit starts the command
    first = printed_config(project, monkeypatch, capsys, "fit", model, "--data", data, "--accelerator", "cpu",
                           "--init", "hidden=6", "--no-progress-bar")
    assert yaml.safe_load(first)["model"]["class_path"] == written
    (project / "printed.yaml").write_text(first)
    assert printed_config(project, monkeypatch, capsys, "fit", "--config", "printed.yaml") == first  # loads back
    fit = run(prewarmed, project, "-m", "accelkit.cli", "fit", "--config", "printed.yaml")
    assert fit.returncode == 0, fit.stderr
    saved_path = reported(fit.stdout, "configuration saved to")
    saved = yaml.safe_load(Path(saved_path).read_text())
    # the first-run defaults of either spelling: 20 epochs, a step logged every 10, seed 0, the held-out test after
    # the fit
    assert saved["trainer"]["max_epochs"] == 20 and saved["seed_everything"] == 0
    assert saved["trainer"]["log_every_n_steps"] == 10
    assert saved["model"] == {"class_path": written, "init_args": {"hidden": 6, "lr": 0.05}}
    assert "accelkit: held-out test_acc = " in fit.stdout
    test = run_here(project, monkeypatch, capsys, "test", "--config", saved_path, "--ckpt_path",
                    last_checkpoint(fit.stdout))
    assert test.returncode == 0 and "test_acc" in test.stdout, test.stderr
    missing = run_here(project, monkeypatch, capsys, "test", "--config", saved_path, "--ckpt_path", "nope.ckpt")
    assert missing.returncode != 0 and missing.stderr.splitlines() == [
        f"accelkit: error: --ckpt_path 'nope.ckpt' does not exist (looked for from {project}); give a checkpoint "
        "file, a sharded checkpoint folder, 'last' or 'best'"], missing.stderr


def test_two_projects_with_a_same_named_module_run_one_after_the_other_in_one_process(tmp_path, monkeypatch, capsys):
    # a module of that name already imported (as a helper script imported by another test once left ``models``)
    stranger = types.ModuleType("nets")
    monkeypatch.setitem(sys.modules, "nets", stranger)
    path = list(sys.path)
    hidden = {}
    for name, width in (("first", 3), ("second", 7)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "nets.py").write_text(MODELS.replace("hidden: int = 8", f"hidden: int = {width}"))
        done = run_here(tmp_path / name, monkeypatch, capsys, "fit", "nets:Net", "--accelerator", "cpu",
                        "--print_config")
        assert done.returncode == 0, done.stderr
        hidden[name] = yaml.safe_load(done.stdout)["model"]["init_args"]["hidden"]
    assert hidden == {"first": 3, "second": 7}  # each project's own nets.py
    assert sys.modules["nets"] is stranger and sys.path == path  # left as found


def test_a_cli_run_here_leaves_the_environment_as_it_found_it(project, monkeypatch, capsys):
    # a CLI seeds (ACCELKIT_SEED, for the processes it would start) even when it does not run: a later test of this
    # process would otherwise train with that seed
    (project / "build.py").write_text("from accelkit.cli import CLI\nfrom models import Blobs, Net\n\n"
                                      "CLI(Net, Blobs, run=False, args=['--trainer.accelerator=cpu', "
                                      "'--trainer.logger=false'])\nprint('seeded', __import__('os').environ"
                                      "['ACCELKIT_SEED'])\n")
    before = {name: value for name, value in os.environ.items() if name != "PYTEST_CURRENT_TEST"}
    done = run_here(project, monkeypatch, capsys, script="build.py")
    assert done.returncode == 0 and "seeded" in done.stdout, done.stderr
    assert {name: value for name, value in os.environ.items() if name != "PYTEST_CURRENT_TEST"} == before


@pytest.mark.parametrize("command", ["fit", "validate", "test", "predict"])
def test_a_command_builds_the_parser_of_its_own_stage_only(project, monkeypatch, capsys, command):
    """``accelkit validate`` (and each command) builds the main parser and its own, not those of the three other
    stages (which cost more than the rest of parsing); its help and errors are those of the same parser."""
    from accelkit.cli import CLI

    built: list[str] = []
    init_parser = CLI.init_parser

    def counted(self: CLI, **kwargs: object) -> object:
        built.append(str(kwargs.get("description", "main"))[:20])
        return init_parser(self, **kwargs)

    monkeypatch.setattr(CLI, "init_parser", counted)
    done = run_here(project, monkeypatch, capsys, command, "--model", "models.py:Net", "--print_config")
    assert done.returncode == 0, done.stderr
    assert "class_path: models.Net" in done.stdout
    assert len(built) == 2, built  # the main parser and the command's
    built.clear()
    helped = run_here(project, monkeypatch, capsys, command, "--help")
    assert helped.returncode == 0 and f"Trainer.{command}: " in helped.stdout and len(built) == 2


def test_both_spellings_of_fit_are_one_command(project, monkeypatch, capsys):
    from accelkit import cli

    monkeypatch.chdir(project)

    def printed(*argv: str) -> str:
        with pytest.raises(SystemExit) as exc:
            cli.main(["fit", *argv, "--print_config"])
        assert exc.value.code == 0
        return capsys.readouterr().out

    short = printed("models.py:Net", "--max-epochs", "3", "--accelerator", "cpu", "--init", "hidden=5", "--seed",
                    "7", "--no-test", "--no-progress-bar", "--ckpt-path", "last")
    long = printed("--model", "models.py:Net", "--trainer.max_epochs", "3", "--trainer.accelerator", "cpu",
                   "--model.hidden", "5", "--seed_everything", "7", "--test_after_fit", "false",
                   "--trainer.enable_progress_bar", "false", "--ckpt_path", "last")
    assert short == long
    config = yaml.safe_load(short)
    assert config["trainer"]["max_epochs"] == 3 and config["model"]["init_args"]["hidden"] == 5
    assert config["seed_everything"] == 7 and config["ckpt_path"] == "last"
    assert "test_after_fit" not in config  # the command's choice: a script's CLI reads the file too


def test_the_model_named_first_wins_over_a_config_files_model(project, monkeypatch, capsys):
    """``accelkit fit other.py:Wide --config run.yaml`` trained the ``model:`` of the file (later wins), silently
    dropping the model the command named; the named one is used, with the file's ``init_args``."""
    (project / "other.py").write_text("from models import Net\n\n\nclass Wide(Net):\n    pass\n")
    (project / "net.yaml").write_text("model:\n  class_path: models.Net\n  init_args:\n    hidden: 9\n")
    (project / "hidden.yaml").write_text("model:\n  init_args:\n    hidden: 3\n")
    named = yaml.safe_load(printed_config(project, monkeypatch, capsys, "fit", "other.py:Wide", "--config",
                                          "net.yaml"))
    assert named["model"] == {"class_path": "other.Wide", "init_args": {"hidden": 9, "lr": 0.05}}
    # a file giving only init_args, and --init after it, still apply to the named model
    both = yaml.safe_load(printed_config(project, monkeypatch, capsys, "fit", "models.py:Net", "--config=hidden.yaml",
                                         "-c", "net.yaml", "--init", "lr=0.5"))
    assert both["model"] == {"class_path": "models.Net", "init_args": {"hidden": 9, "lr": 0.5}}


@pytest.mark.parametrize("ckpt_path, message", [
    ("nope.ckpt", "--ckpt_path 'nope.ckpt' does not exist (looked for from {project}); give a checkpoint file, a "
                  "sharded checkpoint folder, 'last' or 'best'"),
    ("best", "--ckpt_path 'best' names the best checkpoint of a fit in the same run, and 'accelkit validate' has "
             "none; give the checkpoint file (the fit printed its path) or 'last'"),
])
def test_a_missing_checkpoint_is_one_line(project, monkeypatch, capsys, ckpt_path, message):
    from accelkit import cli

    monkeypatch.chdir(project)
    code = cli.main(["validate", "--model", "models:Net", "--data", "models:Blobs", "--trainer.logger", "false",
                     "--ckpt_path", ckpt_path])
    assert code == 1
    assert capsys.readouterr().err.splitlines() == [f"accelkit: error: {message.format(project=project)}"]


def test_a_missing_config_file_is_one_line(project, monkeypatch, capsys):
    from accelkit import cli

    monkeypatch.chdir(project)
    with pytest.raises(SystemExit) as exc:
        cli.main(["fit", "--config", "nope.yaml"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"accelkit fit: error: config: File does not exist: '{project / 'nope.yaml'}'",
        "Run 'accelkit fit --help' to see every key and the values it accepts."]


def test_an_existing_configuration_is_one_line(project, monkeypatch, capsys):
    from accelkit import cli

    monkeypatch.chdir(project)
    (project / "config.yaml").write_text("# a former run's\n")
    code = cli.main(["fit", "models:Net", "--data", "models:Blobs", "--logger", "false", "--max-epochs", "1",
                     "--accelerator", "cpu", "--no-progress-bar"])
    assert code == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [f"accelkit: error: {project / 'config.yaml'} exists already: a former run's configuration. Delete "
                   "it, choose another trainer.default_root_dir, pass save_config_kwargs={'overwrite': True}, or "
                   "save_config_callback=None"]


def test_a_module_named_by_its_module_path_after_its_file_is_saved_by_its_module_path(tmp_path, monkeypatch):
    """Two commands in one process (a notebook, a test session), in two projects: the second names its own module
    by its module path, and its configuration is saved by that path, not as the first project's file."""
    import accelkit
    from accelkit.cli import class_paths
    from accelkit.cli.saved_config import file_form_class_paths

    monkeypatch.setattr(class_paths, "FILE_MODULES", {})
    monkeypatch.setattr(sys, "path", list(sys.path))
    for folder in (tmp_path / "a" / "lib", tmp_path / "b"):
        folder.mkdir(parents=True)
        (folder / "twice_named.py").write_text(MODELS)
    text = "model:\n  class_path: twice_named.Net\n"
    try:
        monkeypatch.chdir(tmp_path / "a")
        class_paths.load_class("lib/twice_named.py:Net", accelkit.Module, "accelkit.Module")
        assert file_form_class_paths(text) == "model:\n  class_path: lib/twice_named.py:Net\n"
        sys.modules.pop("twice_named")
        monkeypatch.chdir(tmp_path / "b")
        class_paths.load_class("twice_named:Net", accelkit.Module, "accelkit.Module")
        assert file_form_class_paths(text) == text
    finally:
        sys.modules.pop("twice_named", None)


# ------------------------------------------------------------------- bounded configuration files
def test_an_alias_bomb_configuration_is_refused_before_it_is_expanded(loose, forked_python):
    """A 1 KB configuration of nine levels of aliases (ten billion values) is refused when it is read, with the bound
    in the message; in a subprocess, bounded by its timeout, so that a regression fails instead of hanging."""
    import accelkit

    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    (loose / "bomb.yaml").write_text("\n".join(lines) + "\nmodel:\n  class_path: loose_models.Loose\n"
                                     "  init_args: {extra: *a9}\n")
    out = forked_python(f"""
        import contextlib, io, json, sys
        sys.path[:0] = [{str(Path(accelkit.__file__).resolve().parents[1])!r}, {str(loose)!r}]
        from accelkit.cli import CLI
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                CLI(run=False, args=["--config", "bomb.yaml"])
                code = 0
            except SystemExit as stop:
                code = stop.code
        print(json.dumps({{"code": code, "err": err.getvalue()}}))
        """)
    assert out["code"] == 2
    assert "the configuration stands for more than 1,000,000 values once its aliases" in out["err"]


# ------------------------------------------------------------------- file-form class paths: imported only for a class
# a file whose import leaves a mark next to it: a configuration naming it must not run it unless a class is asked for
MARKS_WHEN_RUN = 'import pathlib\npathlib.Path(__file__).with_name("RAN").touch()\n\nclass X:\n    pass\n'

HOLDER = textwrap.dedent('''
    from typing import Any, Optional

    import torch

    import accelkit


    class Holder(accelkit.Module):
        """Arguments typed Any, dict[str, Any] and Optional[type], and one that asks for a module."""

        def __init__(self, extra: Any = None, nested: dict[str, Any] = None, kind: Optional[type] = None,
                     net: torch.nn.Module = None):
            super().__init__()
            self.given = dict(extra=extra, nested=nested, kind=kind, net=net)
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):
            return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(4, 2)), batch_size=2)
''')


@pytest.fixture
def holder(tmp_path: Path, monkeypatch) -> Iterator[Path]:
    (tmp_path / "holder_models.py").write_text(HOLDER)
    (tmp_path / "some" / "dir").mkdir(parents=True)
    (tmp_path / "some" / "dir" / "evil.py").write_text(MARKS_WHEN_RUN)
    with project_imports(tmp_path, also=("evil",)), environment_as_found():
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.chdir(tmp_path)
        yield tmp_path


EVIL = {"class_path": "some/dir/evil.py:X", "init_args": {}}


def build_holder(folder: Path, init_args: dict) -> object:
    """A CLI (run=False) of ``holder_models.Holder`` given ``init_args`` by a ``--config`` file."""
    from accelkit.cli import CLI

    (folder / "holder.yaml").write_text(yaml.safe_dump({
        "model": {"class_path": "holder_models.Holder", "init_args": init_args},
        "trainer": {"logger": False, "default_root_dir": str(folder)}}))
    return CLI(run=False, args=["--config", "holder.yaml"])


@pytest.mark.parametrize("argument, value", [("extra", EVIL), ("nested", {"x": EVIL})])
def test_a_file_form_class_path_in_an_argument_typed_any_never_runs_the_file(holder, argument, value):
    import sys


    path = list(sys.path)
    with pytest.warns(UserWarning, match="'some/dir/evil.py:X' .* stays plain data"):
        cli = build_holder(holder, {argument: value})
    assert not (holder / "some" / "dir" / "RAN").exists(), "the configuration ran the file"
    assert "evil" not in sys.modules and sys.path == path
    assert cli.model.given[argument] == value


def test_a_file_form_class_path_for_optional_type_is_refused_before_the_file_runs(holder, capsys):
    import sys


    with pytest.raises(SystemExit):
        build_holder(holder, {"kind": EVIL})
    assert not (holder / "some" / "dir" / "RAN").exists(), "the file ran before the value was refused"
    assert "evil" not in sys.modules
    error = capsys.readouterr().err.splitlines()[0]
    assert error.endswith('error: model.init_args.kind: value "{\'class_path\': \'some/dir/evil.py:X\', '
                          '\'init_args\': {}}" is not accepted; accepted: a class named by its import path (a string '
                          'such as torch.nn.ReLU, not a class_path dict), null'), error


def test_a_replayed_saved_config_never_runs_a_file_named_in_an_any_argument(holder):
    import sys

    import yaml

    from accelkit.cli import CLI

    (holder / "e.yaml").write_text(yaml.safe_dump({
        "trainer": {"accelerator": "cpu", "max_steps": 1, "logger": False, "enable_progress_bar": False,
                    "enable_checkpointing": False, "enable_model_summary": False, "default_root_dir": "out"},
        "model": {"class_path": "holder_models.Holder", "init_args": {"extra": EVIL, "nested": {"x": EVIL}}}}))
    with pytest.warns(UserWarning, match="stays plain data"):
        CLI(args=["fit", "--config", "e.yaml"])
    saved = next((holder / "out").rglob("config.yaml"))
    assert yaml.safe_load(saved.read_text())["model"]["init_args"]["extra"] == EVIL
    with pytest.warns(UserWarning, match="stays plain data"):
        again = CLI(args=["fit", "--config", str(saved), "--trainer.default_root_dir", "again"])
    assert again.model.given["extra"] == EVIL
    assert not (holder / "some" / "dir" / "RAN").exists() and "evil" not in sys.modules


def test_a_file_form_class_path_where_a_class_is_asked_for_imports_that_file_only(holder):
    """The file is imported under its stem where the annotation asks for a class; its folder is on ``sys.path`` only
    while it runs (it imports its neighbour), so afterwards neither ``sys.path`` nor the modules a later import finds
    have changed: the neighbour, and a ``json.py`` in the same folder, are not importable from there."""
    import importlib.util
    import sys


    lib = holder / "lib"
    lib.mkdir()
    (lib / "neighbour.py").write_text("import torch\n\nclass Block(torch.nn.Linear):\n    pass\n")
    (lib / "nets.py").write_text("from neighbour import Block\n\nclass Net(Block):\n    def __init__(self):\n"
                                 "        super().__init__(2, 2)\n")
    (lib / "json.py").write_text("raise RuntimeError('not the json module')\n")
    path = list(sys.path)
    cli = build_holder(holder, {"net": {"class_path": "lib/nets.py:Net"}})
    assert type(cli.model.given["net"]).__name__ == "Net" and type(cli.model.given["net"]).__module__ == "nets"
    assert sys.path == path
    assert importlib.util.find_spec("neighbour") is None or "neighbour" in sys.modules
    sys.modules.pop("neighbour", None)
    assert importlib.util.find_spec("neighbour") is None, "the file's folder stayed on the import path"
    assert not (holder / "some" / "dir" / "RAN").exists()


@pytest.mark.slow  # two ddp_spawn workers
def test_ddp_spawn_workers_import_a_file_form_model_without_its_folder_on_the_path(tmp_path, prewarmed):
    """The workers unpickle the model by its module name (``nets``): the launching process passes the one file it
    imported by that name (``accelkit.utilities.file_modules``), not its folder on ``sys.path``."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "nets.py").write_text(MODELS)
    done = run(prewarmed, tmp_path, "-m", "accelkit.cli", "fit", "--model", "lib/nets.py:Net", "--data",
               "lib/nets.py:Blobs", "--trainer.accelerator", "cpu", "--trainer.strategy", "ddp_spawn",
               "--trainer.devices", "2", "--trainer.max_steps", "2", "--trainer.logger", "false",
               "--trainer.enable_checkpointing", "false", "--trainer.enable_progress_bar", "false")
    assert done.returncode == 0, done.stdout + done.stderr


# ------------------------------------------------------------------- optimizer and scheduler short names
#: values for the required arguments of torch's schedulers, by name
SCHEDULER_ARGUMENTS = {"step_size": "2", "milestones": "[1, 2]", "gamma": "0.5", "T_max": "4", "T_0": "3",
                       "base_lr": "0.01", "max_lr": "0.1", "total_steps": "10"}
#: torch's schedulers whose required argument is a function (``lr_lambda``): given by its import path, a function of
#: the program's own module, as Lightning 2.6.6's LightningCLI takes it
SCHEDULERS_OF_FUNCTIONS = {"LambdaLR", "MultiplicativeLR"}
#: torch's schedulers made of other schedulers, each of which needs the optimizer: no configuration can give them,
#: in Lightning 2.6.6's LightningCLI neither ("the following arguments are required: optimizer"); refused with a
#: sentence saying to build them in configure_optimizers
SCHEDULERS_OF_SCHEDULERS = {"SequentialLR", "ChainedScheduler"}


def torch_classes(module: types.ModuleType, base: type) -> list[type]:
    import inspect

    return sorted((value for name, value in vars(module).items() if inspect.isclass(value) and issubclass(value, base)
                   and value is not base and not name.startswith("_") and value.__module__.startswith("torch.optim")),
                  key=lambda cls: cls.__name__)


def optimizers_built(tmp_path: Path, *words: str) -> tuple:
    """The optimizer and scheduler a CLI of a one-layer Module builds from ``words``."""
    import torch

    import accelkit
    from accelkit.cli import CLI

    class OneLayer(accelkit.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 2, bias=False)  # 2-D parameters only, which torch's Muon requires

    cli = CLI(OneLayer, run=False, args=["--trainer.logger", "false", "--trainer.default_root_dir", str(tmp_path),
                                         *words])
    built = cli.model.configure_optimizers()
    if isinstance(built, torch.optim.Optimizer):  # no lr_scheduler given
        return built, None
    if isinstance(built, dict):
        return built["optimizer"], built["lr_scheduler"]["scheduler"]
    optimizers, schedulers = built
    return optimizers[0], schedulers[0]


def test_every_torch_scheduler_and_optimizer_is_accepted_by_its_short_name(tmp_path, monkeypatch):
    """``--lr_scheduler ReduceLROnPlateau`` was refused (``accepted: null``): jsonargparse found two classes of that
    name, torch's and accelkit.cli's, as accelkit paired torch's with LRScheduler. As in Lightning, the short name is
    accelkit.cli.ReduceLROnPlateau (Lightning's is lightning.pytorch.cli's), and every other torch scheduler and
    optimizer is its torch class; ``LambdaLR`` and ``MultiplicativeLR`` take their ``lr_lambda`` as the import path
    of a function of the program's module, as LightningCLI does (``SequentialLR`` and ``ChainedScheduler``, refused
    as by LightningCLI: the next test)."""
    import inspect

    import torch

    from accelkit.cli import ReduceLROnPlateau

    schedulers = torch_classes(torch.optim.lr_scheduler, torch.optim.lr_scheduler.LRScheduler)
    assert {"StepLR", "OneCycleLR", "ReduceLROnPlateau", "CosineAnnealingWarmRestarts"} <= {c.__name__
                                                                                            for c in schedulers}
    (tmp_path / "lr_functions.py").write_text("def warm(epoch):\n    return min(1.0, (epoch + 1) / 4)\n")
    checked = []
    with project_imports(tmp_path):
        monkeypatch.syspath_prepend(str(tmp_path))
        for cls in schedulers:
            if cls.__name__ in SCHEDULERS_OF_SCHEDULERS:
                continue
            required = [p.name for p in list(inspect.signature(cls.__init__).parameters.values())[2:]
                        if p.default is inspect.Parameter.empty and p.kind is p.POSITIONAL_OR_KEYWORD]
            words = [f"--lr_scheduler.{name}={SCHEDULER_ARGUMENTS.get(name, 'lr_functions.warm')}"
                     for name in required]
            if cls is torch.optim.lr_scheduler.ReduceLROnPlateau:
                words.append("--lr_scheduler.monitor=val_loss")
            if cls is torch.optim.lr_scheduler.OneCycleLR:  # optional in the signature, needed by the constructor
                words.append("--lr_scheduler.total_steps=10")
            _, scheduler = optimizers_built(tmp_path, "--optimizer", "SGD", "--optimizer.lr", "0.1",
                                            "--lr_scheduler", cls.__name__, *words)
            expected = ReduceLROnPlateau if cls is torch.optim.lr_scheduler.ReduceLROnPlateau else cls
            assert type(scheduler) is expected, cls
            if cls.__name__ in SCHEDULERS_OF_FUNCTIONS:
                assert [f.__module__ + "." + f.__name__ for f in scheduler.lr_lambdas] == ["lr_functions.warm"]
            checked.append(cls.__name__)
        del scheduler
    assert set(checked) == {c.__name__ for c in schedulers} - SCHEDULERS_OF_SCHEDULERS
    assert SCHEDULERS_OF_FUNCTIONS <= set(checked)
    for cls in torch_classes(torch.optim, torch.optim.Optimizer):
        optimizer, _ = optimizers_built(tmp_path, "--optimizer", cls.__name__, "--optimizer.lr", "0.01",
                                        "--lr_scheduler", "StepLR", "--lr_scheduler.step_size", "2")
        assert type(optimizer) is cls


@pytest.mark.parametrize("name", sorted(SCHEDULERS_OF_SCHEDULERS))
def test_a_scheduler_made_of_schedulers_is_refused_saying_to_build_it_in_configure_optimizers(tmp_path, capsys,
                                                                                               name):
    """Lightning 2.6.6's LightningCLI refuses ``SequentialLR`` and ``ChainedScheduler`` by any name ("the following
    arguments are required: optimizer", for the schedulers inside); so does accelkit, now saying why and what to do
    (it said ``value "Namespace(...)" is not accepted; accepted: null``), on the command line and in a YAML file."""
    schedulers = '[{"class_path": "StepLR", "init_args": {"step_size": 2}}]'
    milestones = ["--lr_scheduler.milestones", "[2]"] if name == "SequentialLR" else []
    (tmp_path / "chain.yaml").write_text(
        f"lr_scheduler: {{class_path: {name}, init_args: {{schedulers: {schedulers}"
        + (", milestones: [2]" if milestones else "") + "}}\n")
    for words in (["--lr_scheduler", name, "--lr_scheduler.schedulers", schedulers, *milestones],
                  ["--config", str(tmp_path / "chain.yaml")]):
        with pytest.raises(SystemExit):
            optimizers_built(tmp_path, "--optimizer", "SGD", "--optimizer.lr", "0.1", *words)
        error = capsys.readouterr().err.splitlines()[0]
        assert error.endswith(
            f"error: lr_scheduler: torch.optim.lr_scheduler.{name} takes other schedulers (schedulers: "
            "torch.optim.lr_scheduler.StepLR), which a configuration cannot build: each needs the optimizer, and only "
            "the scheduler under lr_scheduler is given it (as in Lightning's LightningCLI); build "
            f"{name} in the Module's configure_optimizers instead"), error


def test_a_users_own_optimizer_by_its_short_name_and_a_torch_name_it_shares(tmp_path, monkeypatch, capsys):
    """A user's own optimizer subclass, defined in the program's module, by its short name in ``optimizer:`` and on
    the command line, as Lightning 2.6.6's LightningCLI finds it; one named as torch's (``SGD``) makes the short name
    ambiguous, refused naming both as LightningCLI refuses it ("Multiple subclasses with name SGD"), and either
    full class path picks its class."""
    import torch

    (tmp_path / "own_optimizers.py").write_text(textwrap.dedent('''
        import torch

        class WarmSGD(torch.optim.SGD):
            pass

        class SGD(torch.optim.SGD):
            pass
    '''))
    (tmp_path / "own.yaml").write_text("optimizer: {class_path: WarmSGD, init_args: {lr: 0.2, momentum: 0.5}}\n")
    try:
        with project_imports(tmp_path):  # forgets the module, and jsonargparse's parsers of its classes, after
            monkeypatch.syspath_prepend(str(tmp_path))
            _build_with_own_optimizers(tmp_path, capsys)
    finally:
        gc.collect()  # the classes live in reference cycles: until collected, torch's SGD still lists them
    assert [c for c in torch.optim.SGD.__subclasses__() if c.__module__ == "own_optimizers"] == []


def _build_with_own_optimizers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The checks of the test above, in a frame of their own: its locals, which hold the user's classes, are gone
    when it returns, so that they can be collected."""
    import torch

    own = __import__("own_optimizers")
    optimizer, _ = optimizers_built(tmp_path, "--config", str(tmp_path / "own.yaml"))
    assert type(optimizer) is own.WarmSGD and optimizer.defaults["lr"] == 0.2 and \
        optimizer.defaults["momentum"] == 0.5
    optimizer, _ = optimizers_built(tmp_path, "--optimizer", "WarmSGD", "--optimizer.lr", "0.1")
    assert type(optimizer) is own.WarmSGD and optimizer.defaults["lr"] == 0.1
    with pytest.raises(SystemExit):
        optimizers_built(tmp_path, "--optimizer", "SGD", "--optimizer.lr", "0.1")
    error = capsys.readouterr().err.splitlines()[0]
    assert error.endswith("error: optimizer: the class name 'SGD' names torch.optim.SGD, own_optimizers.SGD; "
                          "give the full class path of the one meant"), error
    for path, cls in (("torch.optim.SGD", torch.optim.SGD), ("own_optimizers.SGD", own.SGD)):
        optimizer, _ = optimizers_built(tmp_path, "--optimizer", path, "--optimizer.lr", "0.1")
        assert type(optimizer) is cls


def test_a_scheduler_short_name_in_a_yaml_and_a_users_own_subclass(tmp_path, monkeypatch):
    import torch

    from accelkit.cli import ReduceLROnPlateau

    (tmp_path / "sched.yaml").write_text(textwrap.dedent('''
        optimizer: {class_path: Adam, init_args: {lr: 0.01}}
        lr_scheduler: {class_path: ReduceLROnPlateau, init_args: {monitor: val_loss, patience: 2}}
    '''))
    _, scheduler = optimizers_built(tmp_path, "--config", str(tmp_path / "sched.yaml"))
    assert type(scheduler) is ReduceLROnPlateau and scheduler.monitor == "val_loss" and scheduler.patience == 2
    # the user's own subclass by its short name, as Lightning finds it: a subclass imported by the program
    (tmp_path / "own_schedulers.py").write_text(textwrap.dedent('''
        import torch

        class WarmStep(torch.optim.lr_scheduler.StepLR):
            pass
    '''))
    with project_imports(tmp_path):
        monkeypatch.syspath_prepend(str(tmp_path))
        own = __import__("own_schedulers")
        _, scheduler = optimizers_built(tmp_path, "--optimizer", "SGD", "--optimizer.lr", "0.1", "--lr_scheduler",
                                        "WarmStep", "--lr_scheduler.step_size", "2")
        assert type(scheduler) is own.WarmStep and isinstance(scheduler, torch.optim.lr_scheduler.StepLR)


def test_a_short_name_two_classes_share_is_refused_naming_both_as_lightning_does(tmp_path, monkeypatch, capsys):
    """A user's ``StepLR`` subclass shares torch's short name: Lightning 2.6 refuses ``--lr_scheduler StepLR`` then
    (jsonargparse: "Multiple subclasses with name StepLR"), and so does accelkit, in one line naming both classes
    (it said only ``accepted: path, dot, null``); the full class path picks one."""
    import torch

    (tmp_path / "own_steps.py").write_text("import torch\n\nclass StepLR(torch.optim.lr_scheduler.StepLR):\n"
                                           "    pass\n")
    with project_imports(tmp_path):
        monkeypatch.syspath_prepend(str(tmp_path))
        own = __import__("own_steps")
        with pytest.raises(SystemExit):
            optimizers_built(tmp_path, "--optimizer", "SGD", "--optimizer.lr", "0.1", "--lr_scheduler", "StepLR",
                             "--lr_scheduler.step_size", "2")
        error = capsys.readouterr().err.splitlines()[0]
        assert error.endswith("error: lr_scheduler: the class name 'StepLR' names torch.optim.lr_scheduler.StepLR, "
                              "own_steps.StepLR; give the full class path of the one meant"), error
        _, scheduler = optimizers_built(tmp_path, "--optimizer", "SGD", "--optimizer.lr", "0.1", "--lr_scheduler",
                                        "own_steps.StepLR", "--lr_scheduler.step_size", "2")
        assert type(scheduler) is own.StepLR and type(scheduler) is not torch.optim.lr_scheduler.StepLR
    del own, scheduler, _
    gc.collect()  # the class lives in a reference cycle: until collected, torch's StepLR still lists it as a subclass
    assert [c for c in torch.optim.lr_scheduler.StepLR.__subclasses__() if c.__module__ == "own_steps"] == []
