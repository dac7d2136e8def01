"""The ``run`` exercises of the migration table's module sections: ``lightning.pytorch.callbacks``, ``strategies``,
``loggers``, ``tuner`` and ``utilities`` under accelkit's mirror paths. Each constructs the name as Lightning's
documentation does, runs it in a tiny CPU fit (or calls it), and asserts what the documentation promises.
Importing this module registers them into ``helpers.migration_exercises.RUNS``."""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from accelkit import callbacks as cb
from accelkit import loggers as lg
from accelkit import strategies as st
from accelkit import utilities as ut
from helpers.migration_exercises import FAILURE, Net, SharedModule, Workspace, exercise, fit, loader, trainer

CALLBACKS, STRATEGIES, LOGGERS, TUNER, UTILITIES = "callbacks", "strategies", "loggers", "tuner", "utilities"


def _csv_metrics(run: Any) -> list[dict[str, str]]:
    with open(Path(run.log_dir) / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


# --------------------------------------------------------------------------------------------- callbacks
class Backbone(Net):
    """A ``backbone`` and a ``head``: what ``BackboneFinetuning`` and ``BaseFinetuning`` work on."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(self.backbone(x))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(filter(lambda p: p.requires_grad, self.parameters()), lr=0.1)


class HeadFirst(cb.BaseFinetuning):
    """Freezes the backbone before fit, unfreezes it into a new parameter group at epoch 1 (Lightning's example)."""

    def freeze_before_training(self, pl_module: Any) -> None:
        self.freeze(pl_module.backbone)

    def finetune_function(self, pl_module: Any, epoch: int, optimizer: Any) -> None:
        if epoch == 1:
            self.unfreeze_and_add_param_group(pl_module.backbone, optimizer)


def _groups_grow(ws: Workspace, callback: Any) -> None:
    groups: list[int] = []
    fit(ws.fresh(), Backbone(), max_epochs=2, callbacks=[callback],
        probe=lambda t, m: groups.append(len(t.optimizers[0].param_groups)))
    assert groups == [1, 1, 2, 2], f"param groups per batch: {groups}"


@exercise(CALLBACKS, "BaseFinetuning")
def _base_finetuning(ws: Workspace) -> None:
    _groups_grow(ws, HeadFirst())


@exercise(CALLBACKS, "BackboneFinetuning")
def _backbone_finetuning(ws: Workspace) -> None:
    _groups_grow(ws, cb.BackboneFinetuning(unfreeze_backbone_at_epoch=1))


class Writer(cb.BasePredictionWriter):
    """Keeps each batch's predictions and indices (``write_interval="batch"``)."""

    def __init__(self) -> None:
        super().__init__(write_interval="batch")
        self.written: list[tuple[Any, Any]] = []

    def write_on_batch_end(self, trainer: Any, pl_module: Any, prediction: Any, batch_indices: Any, batch: Any,
                           batch_idx: int, dataloader_idx: int) -> None:
        self.written.append((prediction.shape, list(batch_indices)))


@exercise(CALLBACKS, "BasePredictionWriter")
def _prediction_writer(ws: Workspace) -> None:
    writer = Writer()
    run = trainer(ws.fresh(), callbacks=[writer])
    run.predict(Net(), return_predictions=False)
    assert writer.written == [((4, 1), [0, 1, 2, 3]), ((4, 1), [4, 5, 6, 7])], writer.written


@exercise(CALLBACKS, "Callback")
def _callback(ws: Workspace) -> None:
    seen: list[int] = []

    class Mine(cb.Callback):
        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            seen.append(batch_idx)

    fit(ws.fresh(), callbacks=[Mine()], max_epochs=2)
    assert seen == [0, 1, 0, 1]


@exercise(CALLBACKS, "Checkpoint")
def _checkpoint(ws: Workspace) -> None:
    class Mine(cb.Checkpoint):
        pass

    mine = Mine()
    run = fit(ws.fresh(), callbacks=[mine, cb.ModelCheckpoint(dirpath=ws.fresh())], enable_checkpointing=True)[0]
    assert issubclass(cb.ModelCheckpoint, cb.Checkpoint) and mine in run.checkpoint_callbacks
    assert len(run.checkpoint_callbacks) == 2


@exercise(CALLBACKS, "DeviceStatsMonitor")
def _device_stats(ws: Workspace) -> None:
    import importlib.util

    if importlib.util.find_spec("psutil") is None:  # the host's figures need psutil, as Lightning's
        try:
            fit(ws.fresh(), callbacks=[cb.DeviceStatsMonitor()], logger=lg.CSVLogger(ws.fresh()))
        except ModuleNotFoundError as error:
            assert "pip install psutil" in str(error)
            return
        raise AssertionError("DeviceStatsMonitor ran on the CPU without psutil")
    run = fit(ws.fresh(), callbacks=[cb.DeviceStatsMonitor()], logger=lg.CSVLogger(ws.fresh()), log_every_n_steps=1)[0]
    logged = {key for row in _csv_metrics(run) for key, value in row.items() if value}
    assert "train_loss" in logged
    for hook in ("on_train_batch_start", "on_train_batch_end"):  # Lightning's names for the host's figures
        assert {f"DeviceStatsMonitor.{hook}/{name}" for name in ("cpu_percent", "cpu_vm_percent",
                                                                 "cpu_swap_percent")} <= logged, logged


@exercise(CALLBACKS, "EarlyStopping")
def _early_stopping(ws: Workspace) -> None:
    stopper = cb.EarlyStopping(monitor="val_loss", mode="max", min_delta=1e9, patience=0)
    run = fit(ws.fresh(), callbacks=[stopper], max_epochs=5)[0]
    assert run.current_epoch == 2 and stopper.stopped_epoch == 1 and run.early_stopping_callback is stopper


@exercise(CALLBACKS, "GradientAccumulationScheduler")
def _accumulation(ws: Workspace) -> None:
    run = fit(ws.fresh(), callbacks=[cb.GradientAccumulationScheduler(scheduling={1: 2})], max_epochs=2)[0]
    assert run.global_step == 3, "epoch 0: two steps of one batch; epoch 1: one step of two batches"


@exercise(CALLBACKS, "LambdaCallback")
def _lambda(ws: Workspace) -> None:
    from helpers.migration_table import lightning_names

    hooks = lightning_names()["signatures"]["callbacks.LambdaCallback"]
    seen: list[str] = []
    batches: list[int] = []
    functions = {hook: (lambda *args, hook=hook: seen.append(hook)) for hook in hooks}
    functions["on_train_batch_end"] = lambda t, m, out, b, i: batches.append(i)
    run = trainer(ws.fresh(), callbacks=[cb.LambdaCallback(**functions)], num_sanity_val_steps=1)
    module = Net()
    run.fit(module)
    run.save_checkpoint(ws.fresh() / "lambda.ckpt")
    run.validate(module), run.test(module), run.predict(module)
    assert batches == [0, 1]
    never = sorted(set(hooks) - set(seen) - {"on_train_batch_end", "on_exception", "on_load_checkpoint"})
    assert not never, f"LambdaCallback never called {never}"


@exercise(CALLBACKS, "LearningRateMonitor")
def _lr_monitor(ws: Workspace) -> None:
    monitor = cb.LearningRateMonitor(logging_interval="step")
    run = fit(ws.fresh(), callbacks=[monitor], logger=lg.CSVLogger(ws.fresh()), log_every_n_steps=1)[0]
    assert [float(row["lr-SGD"]) for row in _csv_metrics(run) if row.get("lr-SGD")] == [0.1, 0.1]


@exercise(CALLBACKS, "ModelCheckpoint")
def _model_checkpoint(ws: Workspace) -> None:
    folder = ws.fresh()
    checkpoint = cb.ModelCheckpoint(dirpath=folder, monitor="val_loss", save_top_k=1, save_last=True)
    fit(ws.fresh(), callbacks=[checkpoint], max_epochs=2, enable_checkpointing=True)
    assert Path(checkpoint.best_model_path).is_file() and (folder / "last.ckpt").is_file()
    assert checkpoint.best_model_score is not None and len(list(folder.glob("epoch=*.ckpt"))) == 1


def _summary_output(ws: Workspace, summary: Any) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        fit(ws.fresh(), Backbone(), callbacks=[summary], enable_model_summary=True)
    return out.getvalue()


@exercise(CALLBACKS, "ModelSummary")
def _model_summary(ws: Workspace) -> None:
    shallow, deep = _summary_output(ws, cb.ModelSummary(max_depth=1)), _summary_output(ws, cb.ModelSummary(max_depth=2))
    assert "backbone" in shallow and "25" in shallow and "Total params" in deep


@exercise(CALLBACKS, "RichModelSummary")
def _rich_model_summary(ws: Workspace) -> None:
    pytest.importorskip("rich")
    text = _summary_output(ws, cb.RichModelSummary(max_depth=1))
    assert "backbone" in text and "Total params" in text


@exercise(CALLBACKS, "OnExceptionCheckpoint")
def _on_exception(ws: Workspace) -> None:
    folder = ws.fresh()
    with pytest.raises(RuntimeError, match=FAILURE):
        fit(ws.fresh(), SharedModule(fail=True), callbacks=[cb.OnExceptionCheckpoint(dirpath=folder)],
            enable_checkpointing=True)
    assert "state_dict" in torch.load(folder / "on_exception.ckpt", weights_only=True)


@exercise(CALLBACKS, "StochasticWeightAveraging")
def _swa(ws: Workspace) -> None:
    weights: list[torch.Tensor] = []

    class Keep(cb.Callback):
        def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            weights.append(pl_module.layer.weight.detach().clone())

    module = Net()
    fit(ws.fresh(), module, max_epochs=3, callbacks=[cb.StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=1),
                                                    Keep()])
    assert torch.isfinite(module.layer.weight).all() and len(weights) == 3
    assert not any(torch.equal(module.layer.weight, w) for w in weights), "the averaged weights are not a mean"


@exercise(CALLBACKS, "Timer")
def _timer(ws: Workspace) -> None:
    timer = cb.Timer()
    fit(ws.fresh(), callbacks=[timer])
    assert timer.time_elapsed("train") > 0 and timer.start_time("train") is not None
    stopped = fit(ws.fresh(), callbacks=[cb.Timer(duration="00:00:00:00")], max_epochs=5)[0]
    assert stopped.global_step <= 1, "a Timer whose duration is spent stops the run within a batch"


def _bar_run(ws: Workspace, bar: Any) -> Any:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(err):
        run = fit(ws.fresh(), callbacks=[bar], enable_progress_bar=True, max_epochs=2)[0]
    return run, err.getvalue()


@exercise(CALLBACKS, "TQDMProgressBar")
def _tqdm(ws: Workspace) -> None:
    class Quiet(cb.TQDMProgressBar):
        def get_metrics(self, trainer: Any, pl_module: Any) -> dict[str, Any]:
            metrics = super().get_metrics(trainer, pl_module)
            metrics.pop("v_num", None)
            metrics["mine"] = 7
            return metrics

    bar = Quiet(refresh_rate=1)
    run, text = _bar_run(ws, bar)
    assert run.progress_bar_callback is bar and bar.total_train_batches == 2
    assert "mine=7" in text and "train_loss" in text


@exercise(CALLBACKS, "ProgressBar")
def _progress_bar(ws: Workspace) -> None:
    class Lines(cb.ProgressBar):
        def __init__(self) -> None:
            super().__init__()
            self.enabled, self.lines = True, []

        def disable(self) -> None:
            self.enabled = False

        def enable(self) -> None:
            self.enabled = True

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.lines.append((batch_idx, self.total_train_batches, sorted(self.get_metrics(trainer, pl_module))))

    bar = Lines()
    run = fit(ws.fresh(), callbacks=[bar], enable_progress_bar=True, log_every_n_steps=1)[0]
    assert run.progress_bar_callback is bar and [line[:2] for line in bar.lines] == [(0, 2), (1, 2)]
    # computed when read, as in Lightning: each batch end shows its own step's prog_bar value
    assert [line[2] for line in bar.lines] == [["train_loss"], ["train_loss"]], bar.lines


@exercise(CALLBACKS, "RichProgressBar")
def _rich_bar(ws: Workspace) -> None:
    pytest.importorskip("rich")
    bar = cb.RichProgressBar()
    run, _ = _bar_run(ws, bar)
    assert run.progress_bar_callback is bar and bar.total_train_batches == 2


# --------------------------------------------------------------------------------------------- strategies
@exercise(STRATEGIES, "Strategy")
def _strategy(ws: Workspace) -> None:
    run = fit(ws.fresh())[0]
    strategy = run.strategy
    assert isinstance(strategy, st.Strategy) and issubclass(st.SingleDeviceStrategy, st.Strategy)
    assert torch.equal(strategy.reduce(torch.tensor(3.0)), torch.tensor(3.0)) and strategy.broadcast(5) == 5
    strategy.barrier()
    assert strategy.root_device == torch.device("cpu") and strategy.is_global_zero


@exercise(STRATEGIES, "SingleDeviceStrategy")
def _single_device(ws: Workspace) -> None:
    strategy = st.SingleDeviceStrategy()
    module = Net()
    before = module.layer.weight.detach().clone()
    run = fit(ws.fresh(), module, strategy=strategy)[0]
    assert run.strategy is strategy and not torch.equal(before, module.layer.weight)


@exercise(STRATEGIES, "DDPStrategy")
def _ddp(ws: Workspace) -> None:
    strategy = st.DDPStrategy()
    module = Net()
    before = module.layer.weight.detach().clone()
    run = fit(ws.fresh(), module, strategy=strategy)[0]
    assert run.strategy is strategy and run.world_size == 1 and not torch.equal(before, module.layer.weight)


@exercise(STRATEGIES, "ParallelStrategy")
def _parallel(ws: Workspace) -> None:
    seen: list[Any] = []
    fit(ws.fresh(), strategy="ddp", probe=lambda t, m: seen.append(
        (isinstance(t.strategy, st.ParallelStrategy), t.strategy.num_processes,
         t.strategy.reduce_boolean_decision(True), list(t.strategy.parallel_devices))))
    assert seen[0] == (True, 1, True, [torch.device("cpu")]), seen[0]
    assert not isinstance(fit(ws.fresh())[0].strategy, st.ParallelStrategy)


# --------------------------------------------------------------------------------------------- loggers
@exercise(LOGGERS, "Logger")
def _logger(ws: Workspace) -> None:
    class Mine(lg.Logger):
        def __init__(self) -> None:
            super().__init__()
            self.metrics: list[dict[str, Any]] = []
            self.params: dict[str, Any] = {}

        @property
        def name(self) -> str:
            return "mine"

        @property
        def version(self) -> int:
            return 0

        def log_metrics(self, metrics: Any, step: Any = None) -> None:
            self.metrics.append(dict(metrics))

        def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
            self.params.update(dict(params))

    mine = Mine()
    fit(ws.fresh(), logger=mine, log_every_n_steps=1)
    assert mine.params == {"lr": 0.1} and any("train_loss" in m for m in mine.metrics)


@exercise(LOGGERS, "CSVLogger")
def _csv_logger(ws: Workspace) -> None:
    run = fit(ws.fresh(), logger=lg.CSVLogger(ws.fresh(), name="exp"), log_every_n_steps=1)[0]
    steps = [int(row["step"]) for row in _csv_metrics(run) if row.get("train_loss")]
    assert len(steps) == 2 and steps[0] < steps[1]
    assert "lr: 0.1" in (Path(run.log_dir) / "hparams.yaml").read_text()


@exercise(LOGGERS, "TensorBoardLogger")
def _tensorboard(ws: Workspace) -> None:
    pytest.importorskip("tensorboard")
    run = fit(ws.fresh(), logger=lg.TensorBoardLogger(ws.fresh()), log_every_n_steps=1)[0]
    assert list(Path(run.log_dir).glob("events.out.tfevents.*"))


@exercise(LOGGERS, "MLFlowLogger")
def _mlflow(ws: Workspace) -> None:
    pytest.importorskip("mlflow")
    from accelkit_mlflow import MLFlowLogger

    folder = ws.fresh()
    logger = MLFlowLogger(experiment_name="exp", tracking_uri=(folder / "mlruns").as_uri())
    fit(ws.fresh(), logger=logger, log_every_n_steps=1)
    metric_files = list((folder / "mlruns").rglob("train_loss"))
    assert metric_files, f"no train_loss metric under {folder / 'mlruns'}"


@exercise(LOGGERS, "WandbLogger", slow=True)  # wandb starts its service process
def _wandb(ws: Workspace) -> None:
    pytest.importorskip("wandb")
    import wandb

    from accelkit_wandb import WandbLogger

    folder = ws.fresh()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WANDB_MODE", "offline")  # no network
        patch.setenv("WANDB_SILENT", "true")
        logger = WandbLogger(project="exp", save_dir=folder)
        fit(ws.fresh(), logger=logger, log_every_n_steps=1)
        wandb.finish()
        wandb.teardown()  # offline, the run's file is complete once wandb's service has exited
    files = list(folder.glob(f"wandb/offline-run-*-{logger.version}/run-{logger.version}.wandb"))
    assert files and b"train_loss" in files[0].read_bytes(), f"no train_loss in a wandb run under {folder}"


# --------------------------------------------------------------------------------------------- tuner
@exercise(TUNER, "Tuner")
def _tuner(ws: Workspace) -> None:
    from accelkit.tuner import Tuner

    module = Net(lr=1e-3)
    run = trainer(ws.fresh(), max_epochs=20, limit_train_batches=None)
    finder = Tuner(run).lr_find(module, min_lr=1e-4, max_lr=1.0, num_training=30, early_stop_threshold=None)
    suggestion = finder.suggestion()
    assert len(finder.results["lr"]) == 30 and 1e-4 <= suggestion <= 1.0 and module.lr == suggestion
    assert run.global_step == 0, "lr_find puts the Trainer back as it was"


# --------------------------------------------------------------------------------------------- utilities
@exercise(UTILITIES, "AttributeDict")
def _attribute_dict(ws: Workspace) -> None:
    values = ut.AttributeDict(lr=0.1)
    values.batch_size = 8
    assert values["batch_size"] == 8 and values.lr == 0.1 and dict(values) == {"lr": 0.1, "batch_size": 8}


class TwoLoaders(Net):
    """Trains on a :class:`CombinedLoader` of two loaders (batches arrive as a dict)."""

    def train_dataloader(self) -> Any:
        return ut.CombinedLoader({"a": loader(), "b": loader(n=4)}, mode="max_size_cycle")

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.keys = sorted(batch)
        return super().training_step(batch["a"], batch_idx) + super().training_step(batch["b"], batch_idx)


@exercise(UTILITIES, "LightningEnum")
def _lightning_enum(ws: Workspace) -> None:
    class Mode(ut.LightningEnum):
        FAST = "fast"

    assert Mode.FAST == "FAST" and Mode.FAST in {"fast"} and Mode.from_str("fast") is Mode.FAST
    assert str(Mode.FAST) == "Mode.FAST" and Mode.FAST.value == "fast"
    seen = []
    module = Net()
    module.setup = seen.append  # type: ignore[method-assign]
    fit(ws.fresh(), module)
    assert seen == ["fit"] and repr(seen[0]) == "<TrainerFn.FITTING: 'fit'>"


@exercise(UTILITIES, "CombinedLoader")
def _combined_loader(ws: Workspace) -> None:
    combined = ut.CombinedLoader({"a": DataLoader(range(4), batch_size=2), "b": DataLoader(range(6), batch_size=2)},
                                 mode="max_size_cycle")
    batches = list(combined)
    assert len(combined) == 3 and [b[1] for b in batches] == [0, 1, 2]
    assert batches[2][0]["a"].tolist() == [0, 1] and batches[2][0]["b"].tolist() == [4, 5]
    module = TwoLoaders()
    assert fit(ws.fresh(), module, limit_train_batches=None)[0].global_step == 2 and module.keys == ["a", "b"]


@exercise(UTILITIES, "grad_norm")
def _grad_norm(ws: Workspace) -> None:
    module = Net()
    module(torch.randn(3, 4)).sum().backward()
    norms = ut.grad_norm(module, norm_type=2)
    expected = torch.cat([p.grad.flatten() for p in module.parameters()]).norm()
    assert set(norms) == {"grad_2.0_norm/layer.weight", "grad_2.0_norm/layer.bias", "grad_2.0_norm_total"}
    assert torch.allclose(norms["grad_2.0_norm_total"], expected)


@exercise(UTILITIES, "move_data_to_device")
def _move(ws: Workspace) -> None:
    moved = ut.move_data_to_device({"x": torch.ones(2), "rest": [torch.zeros(1), "text"]}, torch.device("cpu"))
    assert moved["x"].device.type == "cpu" and moved["rest"][1] == "text" and torch.equal(moved["rest"][0],
                                                                                        torch.zeros(1))


@exercise(UTILITIES, "rank_zero_only")
def _rank_zero_only(ws: Workspace) -> None:
    @ut.rank_zero_only
    def answer() -> int:
        return 42

    def other() -> int:
        return 42

    assert answer() == 42 and ut.rank_zero_only.rank == 0
    ut.rank_zero_only.rank = 1  # as on another rank (Lightning's attribute, which the Trainer sets per worker)
    try:
        assert answer() is None and ut.rank_zero_only(other, default=-1)() == -1
    finally:
        ut.rank_zero_only.rank = 0


@exercise(UTILITIES, "rank_zero_warn", "rank_zero_deprecation")
def _rank_zero_warnings(ws: Workspace) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ut.rank_zero_warn("a warning from rank zero")
        ut.rank_zero_deprecation("a deprecation from rank zero")
    found = {(issubclass(w.category, DeprecationWarning), str(w.message)) for w in caught}
    assert (False, "a warning from rank zero") in found and (True, "a deprecation from rank zero") in found


@exercise(UTILITIES, "rank_zero_info")
def _rank_zero_logging(ws: Workspace) -> None:
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append  # type: ignore[method-assign]
    # as Lightning's package logger, accelkit's is at INFO: a debug line shows once the program lowers it
    package = logging.getLogger("accelkit")
    previous = package.level
    package.addHandler(handler)
    try:
        ut.rank_zero_info("an info line")
        ut.rank_zero_debug("a hidden debug line")
        package.setLevel(logging.DEBUG)
        ut.rank_zero_debug("a debug line")
    finally:
        package.removeHandler(handler)
        package.setLevel(previous)
    assert [(r.levelno, r.getMessage()) for r in records] == [(logging.INFO, "an info line"),
                                                              (logging.DEBUG, "a debug line")]
