"""accelkit-wandb against real offline wandb runs: what each run recorded is read back from the run's own file
(``run-<id>.wandb``, wandb's record log), with no network."""

from __future__ import annotations

import errno
import glob
import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit
from accelkit.callbacks import ModelCheckpoint
from accelkit.errors import LoggerWriteError

wandb = pytest.importorskip("wandb")
pytest.importorskip("accelkit_wandb", reason="the accelkit-wandb plugin is not installed")

from accelkit_wandb import WandbLogger  # noqa: E402 - only where wandb imports


# --------------------------------------------------------------------------------------------- reading runs back
def _wandb_core_children() -> list[int]:
    """The wandb-core service processes started by this process (read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and b"wandb-core" in command:
            found.append(int(entry.name))
    return found


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """wandb offline with every folder it writes under ``tmp_path``; afterwards the run is finished and wandb's
    service process is gone."""
    for name in [n for n in os.environ if n.startswith("WANDB_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for name, folder in (("WANDB_DIR", "wandb_dir"), ("WANDB_DATA_DIR", "data"), ("WANDB_CACHE_DIR", "cache"),
                         ("WANDB_CONFIG_DIR", "config")):
        (tmp_path / folder).mkdir()
        monkeypatch.setenv(name, str(tmp_path / folder))
    yield tmp_path
    wandb.finish()
    wandb.teardown()
    assert _wandb_core_children() == [], "wandb's service process outlived the test"


def _records(path: str) -> list[Any]:
    """The protobuf records of a ``.wandb`` file: a 7-byte header (``:W&B``, magic, version), then LevelDB-log
    style blocks of 32 KiB whose chunks (CRC, length, type: full, first, middle, last) carry the records."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a wandb run file"
    records, pending, position, block = [], b"", 7, 32768
    while position + 7 <= len(data):
        room = block - position % block
        if room < 7:  # a block's tail too short for a chunk header is padding
            position += room
            continue
        _, length, kind = struct.unpack("<IHB", data[position:position + 7])
        position += 7
        if kind == 0:  # zero padding up to the block's end
            position += room - 7
            continue
        pending += data[position:position + length]
        position += length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def read_run(save_dir: Path | str) -> dict[str, Any]:
    """What the one offline run under ``save_dir`` recorded: its id and project, history rows (names to values,
    wandb's own ``_step``/``_timestamp``/``_runtime`` left out), config, and model artifacts. The run in progress
    is finished and wandb's service stopped first: offline, ``wandb.finish()`` returns before the service has
    written the file, which is complete once the service has exited."""
    wandb.finish()
    wandb.teardown()
    files = glob.glob(os.path.join(save_dir, "wandb", "offline-run-*", "run-*.wandb"))
    assert len(files) == 1, f"expected one offline run under {save_dir}, found {files}"
    run: dict[str, Any] = {"history": [], "config": {}, "artifacts": []}
    records = _records(files[0])
    assert records and records[-1].WhichOneof("record_type") == "exit", f"{files[0]} ends before the run's exit"
    for record in records:
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run["id"], run["project"], run["name"] = record.run.run_id, record.run.project, record.run.display_name
            run["config"].update({u.key: json.loads(u.value_json) for u in record.run.config.update})
        elif kind == "config":
            run["config"].update({u.key: json.loads(u.value_json) for u in record.config.update})
        elif kind == "history":
            row = {"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in record.history.item}
            run["history"].append({k: v for k, v in row.items() if not k.startswith("_")})
        elif kind == "artifact":
            run["artifacts"].append({"name": record.artifact.name, "type": record.artifact.type,
                                     "aliases": list(record.artifact.aliases),
                                     "metadata": json.loads(record.artifact.metadata or "{}"),
                                     "files": [e.path for e in record.artifact.manifest.contents]})
    run["config"].pop("_wandb", None)
    return run


def steps_of(history: list[dict[str, Any]], name: str) -> list[tuple[int, float]]:
    """``(trainer/global_step, value)`` of every row that logged ``name``."""
    return [(row["trainer/global_step"], row[name]) for row in history if name in row]


# --------------------------------------------------------------------------------------------- the module
def tiny_class(base: type) -> type:
    """The same small classifier on accelkit's or Lightning's Module, for side-by-side runs."""

    class Tiny(base):  # type: ignore[misc, valid-type]
        def __init__(self, hidden: int = 6, lr: float = 0.1, activation: type = nn.ReLU,
                     optimizer: dict | None = None) -> None:
            super().__init__()
            self.save_hyperparameters()
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Linear(3, hidden), activation(), nn.Linear(hidden, 2))
            x = torch.randn(64, 3, generator=torch.Generator().manual_seed(0))
            self.data = TensorDataset(x, (x[:, 0] > 0).long())

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = F.cross_entropy(self.net(x), y)
            self.log("train_loss", loss)
            self.log("train_epoch_loss", loss, on_step=False, on_epoch=True)
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

    return Tiny


Tiny = tiny_class(accelkit.Module)
Tiny.__qualname__ = "Tiny"  # pickled by reference for ddp_spawn's workers (this module is on their sys.path)
HPARAMS = {"hidden": 6, "lr": 0.1, "activation": nn.ReLU, "optimizer": {"name": "sgd", "momentum": 0.0}}


def fit(root: Path, logger: Any, **options: Any) -> accelkit.Trainer:
    settings = {"accelerator": "cpu", "default_root_dir": root, "max_epochs": 2, "log_every_n_steps": 3,
                "enable_progress_bar": False, "enable_model_summary": False, **options}
    trainer = accelkit.Trainer(logger=logger, **settings)
    trainer.fit(Tiny(**HPARAMS))
    return trainer


# --------------------------------------------------------------------------------------------- tests
@pytest.mark.slow
def test_fit_logs_metrics_at_lightnings_steps_and_the_hyperparameters(offline):
    save_dir = offline / "runs"
    logger = WandbLogger(project="tiny", name="first", save_dir=save_dir, prefix="p")
    trainer = fit(offline, [logger, accelkit.loggers.CSVLogger(offline / "csv")])
    assert wandb.run is not None and wandb.run.id == logger.version  # still open for a later validate/test
    run = read_run(save_dir)
    assert (run["id"], run["project"], run["name"]) == (logger.version, "tiny", "first") and logger.name == "tiny"
    assert run["config"] == {"hidden": 6, "lr": 0.1, "activation": "ReLU",
                             "optimizer": {"name": "sgd", "momentum": 0.0}}
    rows = trainer.loggers[1].rows
    for name in ("train_loss", "train_epoch_loss", "val_loss"):
        from_csv = [(int(r["step"]), float(r[name])) for r in rows if r.get(name) not in (None, "")]
        from_wandb = steps_of(run["history"], f"p-{name}")
        assert len(from_csv) >= 2 and [s for s, _ in from_wandb] == [s for s, _ in from_csv], name
        assert [v for _, v in from_wandb] == pytest.approx([v for _, v in from_csv]), name
    assert all("trainer/global_step" in row for row in run["history"])
    assert run["artifacts"] == []  # log_model=False, Lightning's default


@pytest.mark.slow
def test_the_same_as_lightnings_wandb_logger_on_the_same_module(offline, forked_python):
    """Lightning's WandbLogger on Lightning's Trainer (in a subprocess: Lightning imports torch_xla) and accelkit's
    on accelkit's, both offline, record the same rows (names, steps, values) and the same config."""
    pytest.importorskip("lightning.pytorch", reason="compares with Lightning's Trainer")
    forked_python(f"""
        import json
        import lightning.pytorch as pl
        from lightning.pytorch.loggers import WandbLogger
        from test_wandb_logger import HPARAMS, tiny_class

        logger = WandbLogger(project="p", save_dir={str(offline / "lightning")!r})
        pl.Trainer(accelerator="cpu", logger=logger, default_root_dir={str(offline / "l")!r}, max_epochs=2,
                   log_every_n_steps=3, enable_progress_bar=False, enable_model_summary=False,
                   enable_checkpointing=False).fit(tiny_class(pl.LightningModule)(**HPARAMS))
        print(json.dumps(logger.version))
        """, path=[Path(__file__).resolve().parent])
    fit(offline, WandbLogger(project="p", save_dir=offline / "accelkit"), enable_checkpointing=False)
    theirs, ours = read_run(offline / "lightning"), read_run(offline / "accelkit")
    assert ours["config"] == theirs["config"] and len(theirs["history"]) >= 6
    assert [sorted(row) for row in ours["history"]] == [sorted(row) for row in theirs["history"]]
    for mine, lightning in zip(ours["history"], theirs["history"], strict=True):
        assert mine == pytest.approx(lightning, rel=1e-5)


@pytest.mark.slow
def test_log_model_all_records_one_artifact_per_checkpoint(offline):
    logger = WandbLogger(save_dir=offline / "runs", log_model="all", checkpoint_name="tiny-model")
    checkpoint = ModelCheckpoint(monitor="val_loss", save_top_k=-1, filename="{epoch}")
    fit(offline, logger, callbacks=[checkpoint], max_epochs=3)
    artifacts = read_run(offline / "runs")["artifacts"]
    saved = sorted(Path(checkpoint.dirpath).glob("*.ckpt"))
    assert len(saved) == 3 and len(artifacts) == 3
    assert [a["metadata"]["original_filename"] for a in artifacts] == [p.name for p in saved]
    assert {a["name"] for a in artifacts} == {"tiny-model"} and {a["type"] for a in artifacts} == {"model"}
    assert all(a["files"] == ["model.ckpt"] for a in artifacts)
    best = Path(checkpoint.best_model_path).name
    assert [sorted(a["aliases"]) for a in artifacts if a["metadata"]["original_filename"] == best] == [
        ["best", "latest"]]  # wandb records the aliases in an order of its own
    assert artifacts[0]["metadata"]["ModelCheckpoint"]["monitor"] == "val_loss"


@pytest.mark.slow
def test_log_model_true_records_the_checkpoints_at_the_end(offline):
    logger = WandbLogger(save_dir=offline / "runs", log_model=True)
    checkpoint = ModelCheckpoint(monitor="val_loss", save_top_k=1, save_last=True)
    fit(offline, logger, callbacks=[checkpoint], max_epochs=3)
    artifacts = read_run(offline / "runs")["artifacts"]
    assert {a["name"] for a in artifacts} == {f"model-{logger.version}"}
    assert sorted(a["metadata"]["original_filename"] for a in artifacts) == sorted(
        {Path(checkpoint.best_model_path).name, "last.ckpt"})


@pytest.mark.slow
def test_ddp_spawn_logs_once_from_rank_zero_into_the_run_the_logger_names(offline):
    logger = WandbLogger(project="spawn", save_dir=offline / "runs")
    fit(offline, logger, strategy="ddp_spawn", devices=2, max_epochs=1, log_every_n_steps=1,
        enable_checkpointing=False)
    run = read_run(offline / "runs")
    assert run["id"] == logger.version and run["config"]["hidden"] == 6
    assert [step for step, _ in steps_of(run["history"], "train_loss")] == [0, 1, 2, 3]  # 4 batches per process


@pytest.mark.slow
def test_media_tables_and_watch(offline):
    logger = WandbLogger(save_dir=offline, project="media")
    model = nn.Linear(3, 2)
    logger.watch(model, log="all", log_freq=1)
    model(torch.ones(1, 3)).sum().backward()
    logger.log_text("samples", columns=["input", "label"], data=[["a", "1"], ["b", "2"]], step=4)
    logger.log_image("pictures", [torch.rand(3, 8, 8), torch.rand(3, 8, 8)], caption=["one", "two"], step=5)
    logger.unwatch(model)
    model(torch.ones(1, 3)).sum().backward()
    logger.log_metrics({"after": 1.0}, step=6)
    first, second, third = read_run(offline)["history"]
    assert first["samples/_type"] == "table-file" and first["samples/nrows"] == 2 and first["trainer/global_step"] == 4
    assert {"gradients/weight/_type", "parameters/weight/_type"} <= set(first)  # watch: histograms
    assert second["pictures/_type"] == "images/separated" and second["pictures/captions"] == ["one", "two"]
    assert second["trainer/global_step"] == 5
    assert third == {"after": 1.0, "trainer/global_step": 6}  # unwatched: no histograms
    with pytest.raises(ValueError, match="caption has 1 entries for 2 images; give one per image"):
        logger.log_image("pictures", [torch.rand(3, 8, 8)] * 2, caption=["one"])
    with pytest.raises(TypeError, match="images must be a list"):
        logger.log_image("pictures", torch.rand(3, 8, 8))


@pytest.mark.slow
def test_a_run_in_progress_is_reused_with_a_warning(offline):
    run = wandb.init(project="mine", dir=offline)
    logger = WandbLogger(project="other", save_dir=offline)
    with pytest.warns(UserWarning, match="already in progress"):
        assert logger.experiment is run
    assert logger.version == run.id


@pytest.mark.slow
def test_a_run_given_is_used_and_init_arguments_beside_it_are_warned_about(offline):
    run = wandb.init(project="mine", dir=offline)
    with pytest.warns(UserWarning, match=r"got experiment= and name='other', group='g', which only start a run"):
        logger = WandbLogger(name="other", experiment=run, group="g")
    logger.log_metrics({"x": 1.0}, step=2)
    assert logger.experiment is run and read_run(offline)["history"] == [{"x": 1.0, "trainer/global_step": 2}]


PROJECT = """
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from accelkit import LightningModule


class Net(LightningModule):
    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(3, 2)
        x = torch.randn(32, 3, generator=torch.Generator().manual_seed(0))
        self.data = TensorDataset(x, (x[:, 0] > 0).long())

    def training_step(self, batch, batch_idx):
        loss = F.cross_entropy(self.layer(batch[0]), batch[1])
        self.log("train_loss", loss)
        return loss

    def train_dataloader(self):
        return DataLoader(self.data, batch_size=8)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
"""
CONFIG = """
trainer:
  accelerator: cpu
  max_epochs: 1
  log_every_n_steps: 1
  enable_progress_bar: false
  logger:
    class_path: lightning.pytorch.loggers.WandbLogger
    init_args: {{project: cli, save_dir: {save_dir}, offline: true}}
"""


@pytest.mark.slow
def test_a_lightning_config_naming_lightnings_wandb_logger_runs_unchanged(offline, monkeypatch, capsys):
    pytest.importorskip("jsonargparse")
    import yaml

    from helpers.cli_runs import run_here

    project = offline / "project"
    project.mkdir()
    (project / "models.py").write_text(PROJECT)
    (project / "run.yaml").write_text(CONFIG.format(save_dir=offline / "runs"))
    done = run_here(project, monkeypatch, capsys, "fit", "--config", "run.yaml", "--model", "models.py:Net")
    assert done.returncode == 0, done.stderr
    run = read_run(offline / "runs")
    assert run["project"] == "cli" and run["config"] == {"lr": 0.1}
    assert [step for step, _ in steps_of(run["history"], "train_loss")] == [0, 1, 2, 3]
    saved = yaml.safe_load(next(project.rglob("config.yaml")).read_text())["trainer"]["logger"]
    assert saved["class_path"] == "accelkit_wandb.WandbLogger" and saved["init_args"]["offline"] is True


def test_logger_by_name_and_lightnings_class_path(tmp_path):
    from accelkit.cli.class_paths import translate_value

    trainer = accelkit.Trainer(accelerator="cpu", logger="wandb", default_root_dir=tmp_path)
    assert type(trainer.logger) is WandbLogger and trainer.logger.save_dir == str(tmp_path)
    for path in ("lightning.pytorch.loggers.WandbLogger", "pytorch_lightning.loggers.wandb.WandbLogger"):
        assert translate_value({"class_path": path}) == {"class_path": "accelkit_wandb.WandbLogger"}


def test_lightnings_synonyms_are_one_setting(tmp_path):
    assert WandbLogger(dir=tmp_path).save_dir == str(tmp_path)
    assert WandbLogger(id="abc").version == "abc" and WandbLogger(version="abc", id="abc").version == "abc"


@pytest.mark.parametrize(("arguments", "error", "message"), [
    ({"log_model": "best"}, ValueError, r"log_model='best' must be True \(checkpoints at the end\), 'all'"),
    ({"add_file_policy": "copy"}, ValueError, "add_file_policy='copy' must be 'mutable' or 'immutable'"),
    ({"version": "a", "id": "b"}, ValueError, "got version='a' and id='b', which name the same setting"),
    ({"save_dir": "x", "dir": "y"}, ValueError, "got save_dir='x' and dir='y', which name the same setting"),
    ({"offline": True, "mode": "online"}, ValueError, "got offline=True and mode='online'; give one of them"),
    ({"entitty": "me"}, TypeError, "wandb.init, which takes no 'entitty'; it takes .*entity"),
])
def test_bad_arguments_are_refused_with_a_sentence(arguments, error, message):
    with pytest.raises(error, match=message):
        WandbLogger(**arguments)


def test_anonymous_is_warned_about_as_wandb_ignores_it():
    with pytest.warns(UserWarning, match=r"WandbLogger\(anonymous=True\) has no effect: wandb ignores"):
        WandbLogger(anonymous=True)


# --------------------------------------------------------------------------------------------- write failures
def test_a_save_dir_that_cannot_be_written_is_an_error_naming_the_logger_and_the_folder(offline):
    """wandb, given a folder it cannot write, logs the run to the system's temporary folder with a warning only; the
    logger refuses before the run starts, naming itself and the folder (here a file stands where a folder would be
    made: a failure for every user, root included). No run is started elsewhere."""
    blocker = offline / "not_a_folder"
    blocker.write_text("a file")
    with pytest.raises(LoggerWriteError) as caught:
        fit(offline, WandbLogger(save_dir=blocker / "runs"), max_epochs=1)
    folder = str(blocker / "runs" / "wandb")
    assert caught.value.path == folder and caught.value.errno == errno.ENOTDIR
    assert str(caught.value).startswith(f"WandbLogger could not write {folder!r}: "), caught.value
    assert wandb.run is None and not glob.glob(os.path.join(os.environ["WANDB_DIR"], "**", "offline-run-*"),
                                               recursive=True)


FAILING_WRITES = """
import json, os, sys
from helpers.full_disk_logging import fill_up
from accelkit_wandb import WandbLogger

folder, case = sys.argv[1], sys.argv[2]
WandbLogger.space_check_s = 0.0  # every row: the test needs the first failure, not one within 5 s
if case == "staging":  # the small file system is wandb's data folder, where artifact files are copied first
    os.environ["WANDB_DATA_DIR"] = folder
    logger = WandbLogger(save_dir=os.path.join(os.path.dirname(folder), "runs"), log_model="all")
else:
    logger = WandbLogger(save_dir=folder)
record = None
try:
    if case == "staging":
        import types
        import torch
        checkpoint = os.path.join(os.path.dirname(folder), "big.ckpt")
        torch.save({"weights": torch.zeros(256 * 1024)}, checkpoint)  # 1 MiB, for 512 KiB of room
        logger.after_save_checkpoint(types.SimpleNamespace(
            save_top_k=1, last_model_path="", best_model_path=checkpoint, best_model_score=0.5, best_k_models={},
            monitor=None, mode="min", save_last=False, save_weights_only=False))
    if case == "full":
        logger.log_hyperparams({"a": 1})  # the run starts; then the disk fills up under wandb's service process
        record = logger.experiment.settings.sync_file
        fill_up(folder)
    for step in range(20000):
        logger.log_metrics({f"a_metric_with_a_long_name_{i}": 1.0 for i in range(20)}, step=step)
    error = None
except Exception as exc:
    error = [type(exc).__name__, getattr(exc, "errno", None), str(exc), getattr(exc, "path", None)]
print(json.dumps({"error": error, "record": record}))
"""


@pytest.mark.slow  # starts a process and wandb's service
@pytest.mark.parametrize("case", ["read-only", "full", "staging"])
def test_a_read_only_or_full_disk_is_an_error_naming_the_logger_and_the_path(offline, case):
    """A real read-only file system (before the run starts), a real full disk under the running run (whose records
    wandb's service process writes and, unchecked, loses without a word) and a full wandb data folder (where a
    checkpoint is copied for a model artifact): each is a LoggerWriteError naming WandbLogger and the folder, the
    run's record file or the staging folder."""
    # imported here: a subprocess of another test imports this module with only this folder on its path
    from helpers.guards import child_env
    from helpers.requirements import can_mount_tmpfs

    if not can_mount_tmpfs():
        pytest.skip("needs unshare -rm to mount a tiny or read-only tmpfs")
    folder = offline / "small"
    folder.mkdir()
    script = offline / "failing_writes.py"
    script.write_text(FAILING_WRITES)
    options = "size=512k,ro" if case == "read-only" else "size=512k"
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o {options} tmpfs {folder} && "
                           f"exec {sys.executable} {script} {folder} {case}"],
                          capture_output=True, text=True, env=child_env(), timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["error"] is not None, "the logger went on as if its writes had worked"
    error_class, code, message, path = out["error"]
    assert error_class == "LoggerWriteError"
    if case == "read-only":
        assert code == errno.EROFS and path == str(folder / "wandb"), out
        assert message.startswith(f"WandbLogger could not write {path!r}: the file system is read-only"), message
    elif case == "staging":
        assert code == errno.ENOSPC and path == str(folder / "artifacts" / "staging"), out
        assert message.startswith(f"WandbLogger could not write {path!r}: the disk is full"), message
    else:
        assert code == errno.ENOSPC and path == out["record"], out
        assert path.startswith(str(folder / "wandb" / "offline-run-")) and path.endswith(".wandb"), path
        assert message.startswith(f"WandbLogger could not write {path!r}: the disk is full"), message
