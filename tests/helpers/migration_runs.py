"""The ``run`` exercises of the migration table (registered into ``helpers.migration_exercises.RUNS``) and the
triggers of its refusals (``REFUSALS``). Each uses a name as Lightning's documentation does, in a tiny CPU run or a
direct call, and asserts what the documentation promises. Importing this module registers them."""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, RandomSampler

import accelkit
from helpers.migration_exercises import Net, Workspace, dataset, exercise, fit, refusal, trainer

# --------------------------------------------------------------------------------------------- Trainer arguments
ARGUMENT = "Trainer arguments"


class StopNow(accelkit.Callback):
    """Asks the Trainer to stop at the end of every training epoch."""

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        trainer.should_stop = True


def _rows(path: Path, column: str) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return [row for row in csv.DictReader(handle) if row.get(column)]


def _weight_change(kwargs: dict[str, Any], root: Path) -> torch.Tensor:
    module = Net(lr=1.0)
    before = module.layer.weight.detach().clone()
    fit(root, module, limit_train_batches=1, **kwargs)
    return module.layer.weight.detach() - before


def _during_fit(root: Path, probe: Callable[[Any, Any], Any], **kwargs: Any) -> Any:
    """What ``probe(trainer, module)`` returned at the end of the first training batch of a fit."""
    _, _, counter = fit(root, probe=probe, **kwargs)
    return counter.probed[0]


def _probe_state(root: Path, flag: str, read: Callable[[], Any], reset: Callable[[], Any]) -> Any:
    try:
        return _during_fit(root, lambda t, m: read(), **{flag: True})
    finally:
        reset()


def _logged_steps(root: Path, every: int) -> int:
    logger = accelkit.loggers.CSVLogger(root)
    fit(root, max_epochs=2, log_every_n_steps=every, logger=logger)
    return len(_rows(Path(logger.log_dir) / "metrics.csv", "train_loss"))


def _validation_runs(root: Path, **kwargs: Any) -> int:
    return fit(root, **kwargs)[2].counts["on_validation_end"]


class Shuffled(Net):
    """:class:`Net` whose training loader shuffles."""

    def train_dataloader(self) -> Any:
        return DataLoader(dataset(), batch_size=4, shuffle=True)


def _sampler(root: Path, use: bool) -> Any:
    return _during_fit(root, lambda t, m: t.train_dataloader.sampler, module=Shuffled(), strategy="ddp",
                       use_distributed_sampler=use)


class ShardReport(accelkit.Callback):
    """In each worker, writes ``rank<N>.json``: the training sampler's class, seed, replicas and indices."""

    def __init__(self, folder: Path) -> None:
        self.folder = str(folder)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        sampler = trainer.train_dataloader.sampler
        report = {"sampler": type(sampler).__name__, "seed": getattr(sampler, "seed", None),
                  "replicas": getattr(sampler, "num_replicas", None), "indices": [int(i) for i in sampler]}
        (Path(self.folder) / f"rank{trainer.global_rank}.json").write_text(json.dumps(report))


@functools.cache
def _spawned(root: Path) -> tuple[dict[str, Any], ...]:
    """The :class:`ShardReport` of each of two ``ddp_spawn`` workers (``seed=7``, a shuffled loader)."""
    folder = root.parent / "spawned"
    folder.mkdir(exist_ok=True)
    if not list(folder.glob("rank*.json")):
        fit(root, Shuffled(), strategy="ddp_spawn", devices=2, seed=7, limit_val_batches=0,
            callbacks=[ShardReport(folder)])
    return tuple(json.loads((folder / f"rank{rank}.json").read_text()) for rank in range(2))


def _spawned_shards(root: Path) -> bool:
    """Each worker reads its own half of the shuffled data set (accelkit's ``ShardSampler``)."""
    reports = _spawned(root)
    indices = [set(report["indices"]) for report in reports]
    return [r["sampler"] for r in reports] == ["ShardSampler"] * 2 and [r["replicas"] for r in reports] == [2, 2] \
        and not indices[0] & indices[1] and indices[0] | indices[1] == set(range(8))


def _benchmark_on_cpu(root: Path) -> bool:
    """On the CPU, ``benchmark=True`` says it has no effect (there is no kernel benchmark mode)."""
    with pytest.warns(UserWarning, match="no kernel benchmark mode"):
        fit(root, benchmark=True)
    return True


class InferenceProbe(accelkit.Callback):
    """Records ``torch.is_inference_mode_enabled()`` at each validation batch."""

    def __init__(self) -> None:
        self.seen: list[bool] = []

    def on_validation_batch_start(self, *args: Any) -> None:
        self.seen.append(torch.is_inference_mode_enabled())


def _inference(root: Path, mode: bool) -> bool:
    """Inference mode in ``trainer.validate`` (inside ``fit`` Lightning validates without it, as accelkit)."""
    probe = InferenceProbe()
    run = trainer(root, inference_mode=mode, callbacks=[probe])
    run.validate(Net())
    inside_fit = InferenceProbe()
    fit(root, inference_mode=mode, callbacks=[inside_fit])
    assert inside_fit.seen == [False], inside_fit.seen
    return probe.seen[0]


def _argument_checks() -> dict[str, Callable[[Path], Any]]:
    """Each Trainer argument's check: ``True`` when the argument did what Lightning documents."""
    ddp, single = accelkit.strategies.DDPStrategy, accelkit.strategies.SingleDeviceStrategy
    return {
        "accelerator": lambda r: fit(r, accelerator="cpu")[0].strategy.root_device.type == "cpu",
        "strategy": lambda r: isinstance(fit(r, strategy="ddp")[0].strategy, ddp)
        and isinstance(fit(r, strategy=single())[0].strategy, single),
        "devices": lambda r: fit(r, devices=1)[0].num_devices == 1,
        "num_nodes": lambda r: fit(r, num_nodes=1)[0].num_nodes == 1,
        "precision": lambda r: fit(r, precision="64-true")[1].dtype == torch.float64,
        "logger": lambda r: (Path(fit(r, logger=accelkit.loggers.CSVLogger(r))[0].log_dir) / "metrics.csv").is_file(),
        "callbacks": lambda r: fit(r, callbacks=[StopNow()], max_epochs=3)[0].current_epoch == 1,
        "fast_dev_run": lambda r: fit(r, fast_dev_run=True, limit_train_batches=None)[0].global_step == 1,
        "max_epochs": lambda r: fit(r, max_epochs=2)[0].global_step == 4,
        "min_epochs": lambda r: fit(r, min_epochs=2, max_epochs=3, callbacks=[StopNow()])[0].global_step == 4,
        "max_steps": lambda r: fit(r, max_steps=3, max_epochs=5)[0].global_step == 3,
        "min_steps": lambda r: fit(r, min_steps=3, max_epochs=5, callbacks=[StopNow()])[0].global_step == 3,
        "max_time": lambda r: _max_time(r),
        "limit_train_batches": lambda r: fit(r, limit_train_batches=1)[0].global_step == 1,
        "limit_val_batches": lambda r: fit(r, limit_val_batches=2)[2].counts["on_validation_batch_end"] == 2,
        "limit_test_batches": lambda r: _stage_batches(r, "test", limit_test_batches=1) == 1,
        "limit_predict_batches": lambda r: _stage_batches(r, "predict", limit_predict_batches=1) == 1,
        "overfit_batches": lambda r: fit(r, overfit_batches=1, limit_train_batches=None)[0].num_training_batches == 1,
        "val_check_interval": lambda r: _validation_runs(r, val_check_interval=1) == 2,
        "check_val_every_n_epoch": lambda r: _validation_runs(r, check_val_every_n_epoch=2, max_epochs=2) == 1,
        "num_sanity_val_steps": lambda r: fit(r, num_sanity_val_steps=1)[2].counts["on_sanity_check_start"] == 1,
        "log_every_n_steps": lambda r: (_logged_steps(r / "a", 1), _logged_steps(r / "b", 2)) == (4, 2),
        "enable_checkpointing": lambda r: Path(fit(r, enable_checkpointing=True)[0].checkpoint_callback
                                               .best_model_path).is_file(),
        "enable_progress_bar": lambda r: isinstance(fit(r, enable_progress_bar=True)[0].progress_bar_callback,
                                                    accelkit.callbacks.ProgressBar)
        and fit(r, enable_progress_bar=False)[0].progress_bar_callback is None,
        "enable_model_summary": lambda r: any(isinstance(c, accelkit.callbacks.ModelSummary)
                                              for c in fit(r, enable_model_summary=True)[0].callbacks),
        "accumulate_grad_batches": lambda r: fit(r, accumulate_grad_batches=2)[0].global_step == 1,
        "gradient_clip_val": lambda r: float(_weight_change({"gradient_clip_val": 1e-3}, r).norm()) < 1.01e-3,
        "gradient_clip_algorithm": lambda r: float(_weight_change(
            {"gradient_clip_val": 1e-3, "gradient_clip_algorithm": "value"}, r).abs().max()) < 1.01e-3,
        "deterministic": lambda r: _probe_state(r, "deterministic", torch.are_deterministic_algorithms_enabled,
                                                lambda: torch.use_deterministic_algorithms(False)) is True,
        "benchmark": lambda r: _benchmark_on_cpu(r),
        "inference_mode": lambda r: (_inference(r, True), _inference(r, False)) == (True, False),
        "use_distributed_sampler": lambda r: _spawned_shards(r) and isinstance(_sampler(r, False), RandomSampler),
        "profiler": lambda r: isinstance(fit(r, profiler="simple")[0].profiler, accelkit.profilers.Profiler),
        "detect_anomaly": lambda r: _probe_state(r, "detect_anomaly", torch.is_anomaly_enabled,
                                                 lambda: torch.set_anomaly_enabled(False)) is True,
        "barebones": lambda r: fit(r, barebones=True)[0].barebones is True,
        "plugins": lambda r: _environment_plugin(r),
        "reload_dataloaders_every_n_epochs": lambda r: fit(r, reload_dataloaders_every_n_epochs=1,
                                                           max_epochs=2)[1].loader_calls == 2,
        "default_root_dir": lambda r: any((r / "elsewhere").rglob("*.ckpt")) if fit(
            r, default_root_dir=r / "elsewhere", enable_checkpointing=True) else False,
        "seed": lambda r: {report["seed"] for report in _spawned(r)} == {7},
        "collective_timeout": lambda r: fit(r, collective_timeout=30)[0].global_step == 2,
        "compile_step": lambda r: _captured(r),
        "legacy_arguments": lambda r: _unknown_argument_refused(),
    }


def _captured(root: Path) -> bool:
    """A fit with the captured step (torch.compile's ``eager`` backend: traced, not built, so it is quick) steps
    and logs as the eager one does."""
    run = fit(root, compile_step={"backend": "eager"})[0]
    return run.global_step == 2 and run.compile_step == {"backend": "eager"} and "train_loss" in run.callback_metrics


def _max_time(root: Path) -> bool:
    """A spent ``max_time`` stops the run within a batch (a microsecond is spent by the first one); the time is
    kept on the Trainer, not in a ``Timer`` callback (see the row)."""
    run = fit(root, max_time={"microseconds": 1}, max_epochs=5)[0]
    timers = [c for c in run.callbacks if isinstance(c, accelkit.callbacks.Timer)]
    return run.global_step <= 1 and run.max_time == 1e-6 and not timers


def _stage_batches(root: Path, stage: str, **kwargs: Any) -> int:
    run, module, counter = fit(root, **kwargs)
    getattr(run, stage)(module)
    return counter.counts[f"on_{stage}_batch_end"]


def _environment_plugin(root: Path) -> bool:
    """A precision named in ``plugins`` is used (Lightning: a precision plugin object in ``plugins``)."""
    return fit(root, plugins=["64-true"])[1].dtype == torch.float64


def _unknown_argument_refused() -> bool:
    with pytest.raises(TypeError, match="not_an_argument"):
        accelkit.Trainer(accelerator="cpu", not_an_argument=1)
    return True


def _register_arguments() -> None:
    for name, check in _argument_checks().items():
        def run(ws: Workspace, check: Callable[[Path], Any] = check, name: str = name) -> None:
            result = check(ws.root / "spawn-fits" if name in SPAWNED else ws.fresh())
            assert result is True, f"Trainer({name}=...) did not do what Lightning documents (the check: {result!r})"
        exercise(ARGUMENT, name, slow=name in SPAWNED or name in TRACED)(run)


#: the arguments whose exercise starts two ddp_spawn workers (once, shared)
SPAWNED = ("use_distributed_sampler", "seed")
#: the argument checks that trace a training step with torch.compile (over 5 s: marked slow too)
TRACED = ("compile_step",)


_register_arguments()


@refusal(ARGUMENT, "sync_batchnorm")
def _sync_batchnorm(ws: Workspace) -> Any:
    return accelkit.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", logger=False, sync_batchnorm=True)


@refusal(ARGUMENT, "model_registry")
def _model_registry(ws: Workspace) -> Any:
    return accelkit.Trainer(accelerator="cpu", logger=False, model_registry="my-model")


# --------------------------------------------------------------------------------------------- Trainer attributes
ATTRIBUTE = "Trainer attributes"


@exercise(ATTRIBUTE, "fit")
def _fit(ws: Workspace) -> None:
    first = ws.shared.first
    assert first.state.fn == "fit" and first.global_step == 4 and first.current_epoch == 2


@exercise(ATTRIBUTE, "validate")
def _validate(ws: Workspace) -> None:
    result = ws.shared.results["validate"]
    assert len(result) == 1 and isinstance(result[0]["val_loss"], float)


@exercise(ATTRIBUTE, "test")
def _test(ws: Workspace) -> None:
    result = ws.shared.results["test"]
    assert len(result) == 1 and isinstance(result[0]["test_loss"], float)


@exercise(ATTRIBUTE, "predict")
def _predict(ws: Workspace) -> None:
    predictions = ws.shared.results["predict"]
    assert len(predictions) == 1 and predictions[0].shape == (4, 1)


@exercise(ATTRIBUTE, "save_checkpoint")
def _save_checkpoint(ws: Workspace) -> None:
    checkpoint = torch.load(ws.shared.checkpoint, weights_only=True)
    state = ws.shared.module.state_dict()
    assert checkpoint["global_step"] == 4 and checkpoint["epoch"] == 2
    assert all(torch.equal(checkpoint["state_dict"][k], v) for k, v in state.items())


class StageProbe(accelkit.Callback):
    """Keeps what the Trainer shows at the first batch end of each stage (``seen[stage]``)."""

    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        if args[-1] == 1:  # batch_idx: what the first step logged is there once its batch has ended
            self.seen.setdefault("fit", (trainer.ckpt_path, dict(trainer.logged_metrics)))

    def on_test_batch_end(self, trainer: Any, *args: Any) -> None:
        self.seen.setdefault("test", trainer.num_test_batches)

    def on_predict_batch_end(self, trainer: Any, *args: Any) -> None:
        self.seen.setdefault("predict", trainer.num_predict_batches)


@functools.cache
def _stages(ws: Workspace) -> dict[str, Any]:
    """A fit resumed from the shared checkpoint, then test and predict, watched by a :class:`StageProbe`."""
    probe = StageProbe()
    run = trainer(ws.fresh(), max_epochs=3, limit_test_batches=1, callbacks=[probe], log_every_n_steps=1,
                  logger=accelkit.loggers.CSVLogger(ws.fresh()))
    run.fit(Net(), ckpt_path=ws.shared.checkpoint)
    run.test(run.lightning_module)
    run.predict(run.lightning_module)
    return probe.seen


@exercise(ATTRIBUTE, "ckpt_path")
def _ckpt_path(ws: Workspace) -> None:
    assert ws.shared.first.ckpt_path is None
    assert Path(_stages(ws)["fit"][0]) == ws.shared.checkpoint


@exercise(ATTRIBUTE, "callback_metrics")
def _metrics(ws: Workspace) -> None:
    first = ws.shared.first
    assert {"train_loss", "val_loss", "dict_a"} <= set(first.callback_metrics)
    assert float(first.callback_metrics["dict_a"]) == 1.0


def bar_metrics_by_batch(ws: Workspace, **kwargs: Any) -> list[list[str]]:
    """The names in ``trainer.progress_bar_metrics`` at each training batch end of a two-batch fit."""
    return fit(ws.fresh(), probe=lambda t, m: sorted(t.progress_bar_metrics), **kwargs)[2].probed


@exercise(ATTRIBUTE, "progress_bar_metrics")
def _progress_bar_metrics(ws: Workspace) -> None:
    assert set(ws.shared.first.progress_bar_metrics) == {"train_loss"}
    # computed when read, as in Lightning: each batch end sees its own step's value, whatever log_every_n_steps
    assert bar_metrics_by_batch(ws, log_every_n_steps=1) == [["train_loss"], ["train_loss"]]
    assert bar_metrics_by_batch(ws) == [["train_loss"], ["train_loss"]]


@exercise(ATTRIBUTE, "logged_metrics")
def _logged_metrics(ws: Workspace) -> None:
    assert "train_loss" in _stages(ws)["fit"][1], _stages(ws)["fit"][1]
    assert "val_loss" in ws.shared.first.logged_metrics


@exercise(ATTRIBUTE, "num_test_batches", "num_predict_batches")
def _stage_counts(ws: Workspace) -> None:
    assert list(_stages(ws)["test"]) == [1] and list(_stages(ws)["predict"]) == [2]


class EpochWriter(accelkit.callbacks.BasePredictionWriter):
    """Reads ``trainer.predict_loop`` when the prediction epoch ends."""

    def __init__(self) -> None:
        super().__init__(write_interval="epoch")
        self.seen: Any = None

    def write_on_epoch_end(self, trainer: Any, pl_module: Any, predictions: Any, batch_indices: Any) -> None:
        loop = trainer.predict_loop
        self.seen = (len(loop.predictions), [list(i) for i in loop.epoch_batch_indices[0]], len(predictions))


@exercise(ATTRIBUTE, "predict_loop")
def _predict_loop(ws: Workspace) -> None:
    writer = EpochWriter()
    trainer(ws.fresh(), callbacks=[writer]).predict(Net())
    assert writer.seen == (2, [[0, 1, 2, 3], [4, 5, 6, 7]], 2), writer.seen


@exercise(ATTRIBUTE, "progress_bar_callback")
def _progress_bar_callback(ws: Workspace) -> None:
    shown = fit(ws.fresh(), enable_progress_bar=True)[0]
    assert isinstance(shown.progress_bar_callback, accelkit.callbacks.TQDMProgressBar)
    assert fit(ws.fresh())[0].progress_bar_callback is None


@exercise(ATTRIBUTE, "profiler")
def _profiler(ws: Workspace) -> None:
    profiled = fit(ws.fresh(), profiler="simple")[0]
    assert isinstance(profiled.profiler, accelkit.profilers.Profiler)
    assert fit(ws.fresh())[0].profiler is None


# --------------------------------------------------------------------------------------------- LightningModule
MODULE = "LightningModule"


@exercise(MODULE, "log", "log_dict")
def _log(ws: Workspace) -> None:
    metrics = ws.shared.first.callback_metrics
    assert float(metrics["dict_a"]) == 1.0 and float(metrics["dict_b"]) == 2.0 and "train_loss" in metrics


@exercise(MODULE, "load_from_checkpoint")
def _load_from_checkpoint(ws: Workspace) -> None:
    loaded = ws.shared.module_class.load_from_checkpoint(ws.shared.checkpoint)
    assert loaded.hparams.lr == 0.1
    saved = ws.shared.module.state_dict()
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in saved.items())


@exercise(MODULE, "freeze", "unfreeze")
def _freeze(ws: Workspace) -> None:
    module = Net()
    module.freeze()
    assert not any(p.requires_grad for p in module.parameters()) and not module.training
    module.unfreeze()
    assert all(p.requires_grad for p in module.parameters()) and module.training


@exercise(MODULE, "fabric")
def _fabric(ws: Workspace) -> None:
    from accelkit.fabric.loggers import CSVLogger

    module = Net()
    assert module.fabric is None  # under no Fabric (nor under a Trainer)
    fabric = accelkit.Fabric(accelerator="cpu", devices=1, loggers=CSVLogger(root_dir=ws.fresh()))
    wrapped = fabric.setup(module)
    assert module.fabric is fabric and wrapped.fabric is fabric and module.logger is fabric.logger


@exercise(MODULE, "print")
def _print(ws: Workspace) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        Net().print("from the module", 1)
    assert out.getvalue() == "from the module 1\n"


@exercise(MODULE, "to_torchscript")
def _to_torchscript(ws: Workspace) -> None:
    module, x = Net(), torch.randn(3, 4)
    path = ws.fresh() / "net.pt"
    scripted = module.to_torchscript(file_path=path)
    assert torch.allclose(scripted(x), module(x)) and torch.allclose(torch.jit.load(path)(x), module(x))


@exercise(MODULE, "example_input_array")
def _example_input_array(ws: Workspace) -> None:
    module = Net()
    module.example_input_array = torch.randn(2, 4)
    traced = module.to_torchscript(method="trace")
    x = torch.randn(5, 4)
    assert torch.allclose(traced(x), module(x))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        fit(ws.fresh(), module, enable_model_summary=True)
    assert "Total params" in out.getvalue() and "In sizes" not in out.getvalue(), "the summary now shows sizes"


@exercise(MODULE, "to_onnx")
def _to_onnx(ws: Workspace) -> None:
    import importlib.util

    module, path = Net(), ws.fresh() / "net.onnx"
    if importlib.util.find_spec("onnx") is None:
        with pytest.raises(ModuleNotFoundError, match="pip install onnx"):
            module.to_onnx(path, torch.randn(1, 4))
        pytest.skip("the onnx package is not installed here: to_onnx refused with the install line, the export "
                    "itself is not exercised")
    module.to_onnx(path, torch.randn(1, 4))
    assert path.stat().st_size > 0


class ManualNet(Net):
    """Manual optimization of two layers with two optimizers, using every manual-optimization name."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.other = nn.Linear(4, 1)
        self.seen: dict[str, Any] = {}

    def training_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        first, second = self.optimizers()
        with self.toggled_optimizer(first):
            self.seen["toggled_optimizer"] = not any(p.requires_grad for p in self.other.parameters())
            loss = F.mse_loss(self.layer(x), y)
            self.manual_backward(loss)
            self.clip_gradients(first, gradient_clip_val=1e-3, gradient_clip_algorithm="norm")
            self.seen["clip_gradients"] = float(torch.cat([p.grad.flatten() for p in self.layer.parameters()])
                                                .norm()) < 1.01e-3
            first.step()
            first.zero_grad()
        self.toggle_optimizer(second)
        self.seen["toggle_optimizer"] = not any(p.requires_grad for p in self.layer.parameters())
        self.manual_backward(F.mse_loss(self.other(x), y))
        second.step()
        second.zero_grad()
        self.untoggle_optimizer(second)
        self.seen["untoggle_optimizer"] = all(p.requires_grad for p in self.parameters())

    def configure_optimizers(self) -> Any:
        return [torch.optim.SGD(self.layer.parameters(), lr=0.1), torch.optim.SGD(self.other.parameters(), lr=0.1)]


@exercise(MODULE, "manual_backward", "toggle_optimizer", "untoggle_optimizer", "toggled_optimizer",
          "clip_gradients")
def _manual(ws: Workspace) -> None:
    module = ManualNet()
    before = [p.detach().clone() for p in module.parameters()]
    fit(ws.fresh(), module)
    assert all(not torch.equal(b, p) for b, p in zip(before, module.parameters(), strict=True)), \
        "manual steps changed nothing"
    assert module.seen == dict.fromkeys(("toggled_optimizer", "clip_gradients", "toggle_optimizer",
                                         "untoggle_optimizer"), True), module.seen


class ShardedNet(Net):
    """Overrides the deprecated ``configure_sharded_model`` (Lightning 2.x still calls it, with a warning)."""

    def configure_sharded_model(self) -> None:
        self.sharded_called = True


@exercise(MODULE, "configure_sharded_model")
def _configure_sharded_model(ws: Workspace) -> None:
    module = ShardedNet()
    with pytest.warns(DeprecationWarning, match="configure_model"):
        fit(ws.fresh(), module)
    assert module.sharded_called is True


# --------------------------------------------------------------------------------------------- Callback
class EpochEndMetricsSeen(accelkit.Callback):
    """Says it monitors metrics, and records whether the Module's ``on_train_epoch_end`` had logged when its own ran."""

    monitors_metrics = True

    def __init__(self) -> None:
        self.seen: list[bool] = []

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.seen.append("logged_at_epoch_end" in trainer.callback_metrics)


class LogsAtEpochEnd(Net):
    def on_train_epoch_end(self) -> None:
        self.log("logged_at_epoch_end", 1.0)


@exercise("Callback", "monitors_metrics")
def _monitors_metrics(ws: Workspace) -> None:
    probe = EpochEndMetricsSeen()
    fit(ws.fresh(), LogsAtEpochEnd(), callbacks=[probe])
    assert probe.seen == [True]  # it ran after the Module's hook


@exercise("Callback", "state_key")
def _state_key(ws: Workspace) -> None:
    callback = ws.shared.callback
    checkpoint = torch.load(ws.shared.checkpoint, weights_only=True)
    assert isinstance(callback.state_key, str) and callback.state_key in checkpoint["callbacks"]
    assert callback.loaded == {"saved_by": "StateCallback"}
