"""One folder per run, as Lightning lays it out: ``<root>/lightning_logs/version_<n>/{hparams.yaml, events or
metrics.csv, config.yaml, checkpoints/}``; the checkpoint a run reports is the one it wrote; ``ckpt_path="last"``
resumes the newest run; runs started together in one folder never share a version folder or a checkpoint file."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import yaml

import accelkit
from accelkit.checkpoint import load
from accelkit.loggers import CSVLogger, RunFolder, TensorBoardLogger, claim_version, default_logger
from helpers.cli_runs import Done, run_here
from helpers.models import RegressionModule
from helpers.prewarmed import Prewarmed
from helpers.summary_lines import last_checkpoint

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "digits.py"


def fit(root: Path, max_epochs: int = 1, ckpt_path: str | None = None, **kwargs) -> accelkit.Trainer:
    options = dict(accelerator="cpu", devices=1, max_epochs=max_epochs, default_root_dir=root,
                   enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    options.update(kwargs)
    trainer = accelkit.Trainer(**options)
    trainer.fit(RegressionModule(n=16), ckpt_path=ckpt_path)
    return trainer


# ------------------------------------------------------------------- the default logger and its folder
def test_the_default_logger_is_tensorboard_when_it_imports_else_csv(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    assert type(default_logger(tmp_path)) is TensorBoardLogger
    assert type(accelkit.Trainer(default_root_dir=tmp_path).logger) is TensorBoardLogger
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # neither tensorboard nor tensorboardX importable
    monkeypatch.setitem(sys.modules, "tensorboardX", None)
    logger = accelkit.Trainer(default_root_dir=tmp_path).logger
    assert type(logger) is CSVLogger and logger.root_dir == str(tmp_path / "lightning_logs")


def test_every_built_in_logger_writes_under_lightning_logs(tmp_path):
    assert CSVLogger(tmp_path).root_dir == TensorBoardLogger(tmp_path).root_dir == str(tmp_path / "lightning_logs")
    assert RunFolder(tmp_path).root_dir == str(tmp_path / "lightning_logs")


def test_a_run_keeps_its_checkpoints_hparams_and_events_in_its_version_folder(tmp_path):
    pytest.importorskip("tensorboard")
    trainer = fit(tmp_path)
    version = tmp_path / "lightning_logs" / "version_0"
    assert trainer.log_dir == str(version)
    assert trainer.checkpoint_path == version / "checkpoints" / "epoch=0-step=2.ckpt"
    assert sorted(p.name for p in (version / "checkpoints").iterdir()) == ["epoch=0-step=2.ckpt"]  # as Lightning's
    assert (version / "hparams.yaml").is_file() and list(version.glob("events.out.tfevents.*"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lightning_logs"]  # no ./checkpoints, no ./logs


def test_loggers_of_one_run_share_its_version_folder(tmp_path):
    pytest.importorskip("tensorboard")
    trainer = fit(tmp_path, logger=["csv", "tensorboard"])
    csv_logger, tb_logger = trainer.loggers
    assert csv_logger.log_dir == tb_logger.log_dir == str(tmp_path / "lightning_logs" / "version_0")
    assert sorted(p.name for p in (tmp_path / "lightning_logs").iterdir()) == ["version_0"]


def test_a_logger_without_a_folder_gets_a_version_folder_of_the_trainer(tmp_path):
    class Remote(accelkit.loggers.Logger):  # a logger sending metrics elsewhere (MLflow, a service...)
        name, version = "remote", "abc"

        def log_metrics(self, metrics, step=None):
            pass

        def log_hyperparams(self, params, *args, **kwargs):
            pass

    first, second = fit(tmp_path, logger=Remote()), fit(tmp_path, logger=Remote())
    assert first.checkpoint_path == tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "epoch=0-step=2.ckpt"
    assert second.checkpoint_path == tmp_path / "lightning_logs" / "version_1" / "checkpoints" / "epoch=0-step=2.ckpt"
    assert first.checkpoint_path.is_file() and second.checkpoint_path.is_file()


def test_tensorboard_logger_writes_hparams_yaml_and_one_event_file_over_five_stages(tmp_path):
    pytest.importorskip("tensorboard")
    trainer = fit(tmp_path)
    model = trainer.lightning_module
    for stage in (trainer.validate, trainer.test, trainer.validate, trainer.test):
        stage(model, verbose=False)
    version = Path(trainer.log_dir)
    assert yaml.safe_load((version / "hparams.yaml").read_text()) == {}  # the module saved none: Lightning's {}
    assert len(list(version.glob("events.out.tfevents.*"))) == 1


def test_tensorboard_logger_experiment_is_a_summary_writer_that_takes_images(tmp_path):
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    logger = TensorBoardLogger(tmp_path)
    assert isinstance(logger.experiment, SummaryWriter)
    logger.experiment.add_image("grid", torch.rand(1, 4, 4), 0)
    logger.log_hyperparams({"lr": 0.1, "layers": [2, 3]})
    logger.finalize("success")
    assert yaml.safe_load(Path(logger.log_dir, "hparams.yaml").read_text()) == {"lr": 0.1, "layers": [2, 3]}


# ------------------------------------------------------------------- the checkpoint a run reports
def test_two_runs_in_one_folder_report_and_resume_their_own_checkpoints(tmp_path):
    first, second = fit(tmp_path), fit(tmp_path)
    assert first.checkpoint_path != second.checkpoint_path
    assert second.checkpoint_path == tmp_path / "lightning_logs" / "version_1" / "checkpoints" / "epoch=0-step=2.ckpt"
    assert second.checkpoint_path.is_file()
    with warnings.catch_warnings(record=True) as record:  # the resumed run writes into a new folder by design
        warnings.simplefilter("always")
        third = fit(tmp_path, max_epochs=2, ckpt_path="last")
    assert not [str(w.message) for w in record if "dirpath has changed" in str(w.message)]
    assert third.ckpt_path == str(second.checkpoint_path)  # the newest run's latest checkpoint, with no last.ckpt
    assert third.checkpoint_path == tmp_path / "lightning_logs" / "version_2" / "checkpoints" / "epoch=1-step=4.ckpt"
    assert load(third.checkpoint_path)["global_step"] == third.global_step == 2 * second.global_step
    assert load(second.checkpoint_path)["global_step"] == second.global_step  # the resumed file is untouched


def test_without_a_logger_a_second_run_reports_its_versioned_file(tmp_path):
    first = fit(tmp_path, logger=False)
    second = fit(tmp_path, logger=False)
    assert first.checkpoint_path == tmp_path / "checkpoints" / "epoch=0-step=2.ckpt"
    assert second.checkpoint_path == tmp_path / "checkpoints" / "epoch=0-step=2-v1.ckpt"  # Lightning's name, reported
    assert load(second.checkpoint_path)["global_step"] == second.global_step


def test_last_skips_a_name_another_run_claimed_but_never_wrote(tmp_path):
    first = fit(tmp_path)
    claimed = tmp_path / "lightning_logs" / "version_7" / "checkpoints" / "last.ckpt"
    claimed.parent.mkdir(parents=True)
    claimed.touch()  # what a run killed while writing its first checkpoint leaves: the empty claim of the name
    resumed = fit(tmp_path, max_epochs=2, ckpt_path="last")
    assert resumed.ckpt_path == str(first.checkpoint_path)


def test_a_failed_save_releases_the_name_it_claimed(tmp_path):
    class Diverges(RegressionModule):
        def on_train_epoch_end(self):
            with torch.no_grad():
                self.layer.weight.fill_(float("nan"))

    trainer = accelkit.Trainer(accelerator="cpu", max_epochs=1, default_root_dir=tmp_path, logger=False,
                               enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    with pytest.raises(Exception, match="not finite"):
        trainer.fit(Diverges(n=16))
    assert not list((tmp_path / "checkpoints").glob("*.ckpt"))  # no empty file left under a checkpoint's name


_LAUNCHED_FITS = """
import json, sys
import accelkit
sys.path.insert(0, {tests!r})
from helpers.models import RegressionModule


def fit(strategy, max_epochs=1, ckpt_path=None):
    trainer = accelkit.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_epochs=max_epochs,
                               default_root_dir={root!r}, enable_progress_bar=False, enable_model_summary=False,
                               num_sanity_val_steps=0)
    trainer.fit(RegressionModule(n=16), ckpt_path=ckpt_path)
    return {{"checkpoint": str(trainer.checkpoint_path), "ckpt_path": trainer.ckpt_path,
            "global_step": trainer.global_step}}


if __name__ == "__main__":
    print(json.dumps([fit("ddp_fork"), fit("ddp_fork"), fit("ddp_spawn", max_epochs=2, ckpt_path="last")]))
"""


@pytest.mark.slow  # a program whose three fits start two processes each
def test_two_launched_runs_in_one_folder_report_and_resume_their_own_checkpoints(tmp_path, prewarmed):
    # The caller claims the version folder before it starts the workers (dispatch.claim_run_folders), the run
    # carries it to them pickled, and rank 0's result brings the checkpoint it wrote back: the same for either
    # start method. The two first runs fork their workers; the resumed one spawns them (fresh interpreters, which
    # know only what the pickled run tells them). Forked workers need a launching process whose thread pool has not
    # run: a program forked from the prewarmed interpreter, not this test's process.
    code = _LAUNCHED_FITS.format(tests=str(ROOT / "tests"), root=str(tmp_path))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKIT_") and k != "PYTHONPATH"}
    done = prewarmed.run(["-c", code], cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    first, second, third = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(first["checkpoint"]).parent.parent.name == "version_0"
    # the default callback's one file (no last.ckpt); "last" finds the newest of them, in the version folder before
    logs = tmp_path / "lightning_logs"
    assert second["checkpoint"] == str(logs / "version_1" / "checkpoints" / "epoch=0-step=1.ckpt")
    assert third["ckpt_path"] == second["checkpoint"]
    assert third["checkpoint"] == str(logs / "version_2" / "checkpoints" / "epoch=1-step=2.ckpt")
    assert load(third["checkpoint"])["global_step"] == third["global_step"] == 2 * second["global_step"]


# ------------------------------------------------------------------- runs started together
def _claim_after(barrier, root: str, queue) -> None:
    barrier.wait()
    queue.put(claim_version(root))


@pytest.mark.slow  # starts processes
def test_two_processes_claiming_at_once_get_distinct_versions_in_20_of_20_trials(tmp_path):
    context = multiprocessing.get_context("fork")
    for trial in range(20):
        root = str(tmp_path / f"trial{trial}")
        os.makedirs(os.path.join(root, "version_0"))  # an earlier run: both see version_1 as the next one
        barrier, queue = context.Barrier(2), context.Queue()
        workers = [context.Process(target=_claim_after, args=(barrier, root, queue)) for _ in range(2)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=60)
        assert [w.exitcode for w in workers] == [0, 0]
        assert sorted(queue.get(timeout=10) for _ in workers) == [1, 2], f"trial {trial}"


_CONCURRENT_FIT = """
import json, multiprocessing, sys
import accelkit
sys.path.insert(0, {tests!r})
from helpers.models import RegressionModule
logger = sys.argv[1] == "logger"


def fit(reports):
    trainer = accelkit.Trainer(accelerator="cpu", devices=1, max_epochs=2, default_root_dir={root!r}, logger=logger,
                               enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(RegressionModule(n=16))
    reports.put({{"log_dir": trainer.log_dir, "checkpoint": str(trainer.checkpoint_path),
                 "best": trainer.checkpoint_callback.best_model_path}})


context = multiprocessing.get_context("fork")
reports = context.Queue()
runs = [context.Process(target=fit, args=(reports,)) for _ in range(2)]
for run in runs:
    run.start()
for run in runs:
    run.join(timeout=240)
codes = [run.exitcode for run in runs]
print(json.dumps({{"codes": codes, "reports": [reports.get(timeout=10) for _ in range(codes.count(0))]}}))
"""


@pytest.mark.slow  # a program that starts two fits together, each in a process of its own
@pytest.mark.parametrize("logger", ["logger", "no-logger"])
def test_two_runs_started_together_in_one_folder_keep_their_own_folders_and_files(tmp_path, logger, prewarmed):
    # the program is forked from the prewarmed interpreter, and it forks the two runs once it has imported accelkit:
    # two processes that claim their version folders and checkpoint names at the same moment, as two programs
    # started together do (the claim is between processes, whatever started them; nothing here is about start-up)
    code = _CONCURRENT_FIT.format(tests=str(ROOT / "tests"), root=str(tmp_path))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKIT_") and k != "PYTHONPATH"}
    done = prewarmed.run(["-c", code, logger], cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["codes"] == [0, 0], done.stderr[-3000:]
    reports = result["reports"]
    # the default callback writes one file, as Lightning's (no last.ckpt): the newest is the best
    assert all(report["checkpoint"] == report["best"] for report in reports), reports
    checkpoints = {report["checkpoint"] for report in reports}
    assert len(checkpoints) == 2, reports  # one epoch file each: nothing shared, nothing overwritten
    for report in reports:
        assert load(report["checkpoint"])["global_step"] == 4
    if logger == "logger":
        assert sorted(report["log_dir"] for report in reports) == [
            str(tmp_path / "lightning_logs" / "version_0"), str(tmp_path / "lightning_logs" / "version_1")]


# ------------------------------------------------------------------- the command line
def _accelkit(prewarmed: Prewarmed, cwd: Path, *words: str) -> subprocess.CompletedProcess:
    """``accelkit *words`` as a program, forked from the prewarmed interpreter (``helpers.prewarmed``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELKIT_", "MLFLOW_")) and k != "PYTHONPATH"}
    env["PYTHONWARNINGS"] = "ignore"
    return prewarmed.run(["-m", "accelkit.cli", *words], cwd=cwd, env=env, timeout=300)


def _here(cwd: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, *words: str) -> Done:
    """``accelkit *words`` in this process (helpers.cli_runs), as :func:`_accelkit` starts it."""
    for name in [name for name in os.environ if name.startswith("MLFLOW_")]:
        monkeypatch.delenv(name)
    return run_here(cwd, monkeypatch, capsys, *words, forget=("digits",))


def _reported(done: subprocess.CompletedProcess | Done) -> Path:
    assert done.returncode == 0, done.stderr[-3000:]
    return Path(last_checkpoint(done.stdout))


@pytest.mark.slow  # three fits, the first in a program
def test_cli_file_form_runs_in_one_folder_report_and_resume_their_own_checkpoints(tmp_path, monkeypatch, capsys,
                                                                                  prewarmed):
    common = ("--max-epochs", "1", "--no-progress-bar", "--no-test", "--accelerator", "cpu")
    first = _reported(_accelkit(prewarmed, tmp_path, "fit", f"{EXAMPLE}:DigitsClassifier", *common))
    # the later runs in this process (helpers.cli_runs): the first started the command as a program
    second = _reported(_here(tmp_path, monkeypatch, capsys, "fit", f"{EXAMPLE}:DigitsClassifier", *common))
    # the default callback's one file (no last.ckpt): 20 steps an epoch
    logs = tmp_path / "lightning_logs"
    assert first == logs / "version_0" / "checkpoints" / "epoch=0-step=20.ckpt" and first.is_file()
    assert second == logs / "version_1" / "checkpoints" / "epoch=0-step=20.ckpt" and second.is_file()
    words = ("fit", f"{EXAMPLE}:DigitsClassifier", "--max-epochs", "2", "--no-progress-bar", "--no-test",
             "--accelerator", "cpu", "--ckpt-path", "last")
    third = _reported(_here(tmp_path, monkeypatch, capsys, *words))
    assert third == tmp_path / "lightning_logs" / "version_2" / "checkpoints" / "epoch=1-step=40.ckpt"
    assert load(third)["global_step"] == 2 * load(second)["global_step"]


@pytest.mark.slow  # three fits, one in a program
def test_cli_runs_with_csv_tensorboard_and_mlflow_leave_three_version_folders(tmp_path, monkeypatch, capsys,
                                                                              prewarmed):
    pytest.importorskip("mlflow")
    pytest.importorskip("tensorboard")
    reported = []
    for logger in ("csv", "tensorboard", "mlflow"):
        words = ("fit", "--model", f"{EXAMPLE}:DigitsClassifier", "--trainer.accelerator", "cpu",
                 "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1",
                 "--trainer.enable_progress_bar", "false", "--trainer.logger", logger)
        # csv and tensorboard in this process (helpers.cli_runs); mlflow, whose client keeps global state, in its own
        if logger == "mlflow":
            done = _accelkit(prewarmed, tmp_path, *words)
        else:
            done = _here(tmp_path, monkeypatch, capsys, *words)
        reported.append(_reported(done))
    versions = sorted((tmp_path / "lightning_logs").iterdir())
    assert [v.name for v in versions] == ["version_0", "version_1", "version_2"]
    for version, checkpoint in zip(versions, reported, strict=True):
        assert checkpoint == version / "checkpoints" / "epoch=0-step=2.ckpt" and checkpoint.is_file()
        assert (version / "config.yaml").is_file()
    assert (versions[0] / "metrics.csv").is_file() and list(versions[1].glob("events.out.tfevents.*"))
    assert not (tmp_path / "config.yaml").exists()
    logged = yaml.safe_load((versions[2] / "config.yaml").read_text())["trainer"]["logger"]
    assert logged == "mlflow"


_TORCHRUN_FIT = """
import json, sys
import accelkit
sys.path.insert(0, {tests!r})
from helpers.models import RegressionModule
trainer = accelkit.Trainer(accelerator="cpu", strategy="ddp", devices=2, max_epochs=1, default_root_dir={root!r},
                           enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
trainer.fit(RegressionModule(n=16))
with open({root!r} + f"/rank{{trainer.global_rank}}.json", "w") as handle:
    json.dump({{"log_dir": trainer.log_dir, "checkpoint": str(trainer.checkpoint_path)}}, handle)
"""


@pytest.mark.slow  # torchrun starts two processes
def test_processes_started_by_torchrun_agree_on_rank_zeros_version_folder(tmp_path):
    (tmp_path / "lightning_logs" / "version_0").mkdir(parents=True)  # an earlier run
    script = tmp_path / "fit.py"
    script.write_text(_TORCHRUN_FIT.format(tests=str(ROOT / "tests"), root=str(tmp_path)))
    from accelkit.strategies import find_free_port

    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKIT_") and k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                           str(find_free_port()), str(script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    reports = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    version = tmp_path / "lightning_logs" / "version_1"
    assert [r["log_dir"] for r in reports] == [str(version)] * 2
    assert [r["checkpoint"] for r in reports] == [str(version / "checkpoints" / "epoch=0-step=1.ckpt")] * 2
    assert sorted(p.name for p in (tmp_path / "lightning_logs").iterdir()) == ["version_0", "version_1"]
