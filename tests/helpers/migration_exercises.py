"""How ``tests/test_migration_table.py`` exercises each row of the migration table (see ``helpers.migration_table``).

* ``hook`` rows: :func:`shared_run` runs a recording Module and Callback through ``fit``, a checkpoint, a resumed
  ``fit``, ``validate``, ``test``, ``predict`` and a ``fit`` that fails, and records which hooks were called;
* ``in-run`` rows: the shared run evaluates :data:`MODULE_CHECKS` inside ``training_step`` and
  :data:`TRAINER_CHECKS` inside a callback's ``on_train_batch_end``, each a real comparison;
* ``run`` rows: a function registered here with :func:`exercise` (``RUNS``): it uses the name as Lightning's
  documentation does, in a tiny CPU run or a direct call, and asserts what the documentation promises;
* ``annotation`` rows: :func:`check_annotation` (the type name resolves in an annotation; protocols and the scheduler
  tuple also match torch's schedulers);
* ``refused`` rows: a trigger registered with :func:`refusal` (``REFUSALS``) whose error must carry the row's sentence.

The exercises live in ``helpers.migration_runs`` (argument, callback, strategy, logger, utility and method
exercises); this module holds the shared run and the registries.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit

#: ``(section, name)`` -> the exercise of a ``run`` row (it takes a :class:`Workspace` and asserts)
RUNS: dict[tuple[str, str], Callable[[Workspace], None]] = {}
#: the ``run`` exercises that start processes (the test marks them slow)
SLOW: set[tuple[str, str]] = set()
#: ``(section, name)`` -> a call that must raise the refusal of a ``refused`` row
REFUSALS: dict[tuple[str, str], Callable[[Workspace], Any]] = {}
FAILURE = "deliberate failure in training_step"


def exercise(section: str, *names: str, slow: bool = False) -> Callable:
    """Register the decorated function as the exercise of ``names`` in ``section`` (``slow``: it starts
    processes)."""

    def register(fn: Callable[[Workspace], None]) -> Callable[[Workspace], None]:
        for name in names:
            RUNS[(section, name)] = fn
            if slow:
                SLOW.add((section, name))
        return fn

    return register


def refusal(section: str, name: str) -> Callable:
    """Register the decorated function as the call that raises the refusal of ``section``/``name``."""

    def register(fn: Callable[[Workspace], Any]) -> Callable[[Workspace], Any]:
        REFUSALS[(section, name)] = fn
        return fn

    return register


# --------------------------------------------------------------------------------------------- models and data
def dataset(n: int = 8, seed: int = 0) -> TensorDataset:
    """``n`` samples of a linear regression with four features."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, x @ torch.arange(1.0, 5.0).unsqueeze(1))


def loader(n: int = 8, batch_size: int = 4, seed: int = 0) -> DataLoader:
    """A loader of :func:`dataset` (two batches of four by default)."""
    return DataLoader(dataset(n, seed), batch_size=batch_size)


class Net(accelkit.Module):
    """A linear regression with every loader: what most exercises fit. ``lr`` is an attribute and a
    hyperparameter (the Tuner's ``lr_find`` sets the attribute)."""

    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.lr = lr
        self.layer = nn.Linear(4, 1)
        self.loader_calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", F.mse_loss(self(batch[0]), batch[1]))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.log("test_loss", F.mse_loss(self(batch[0]), batch[1]))

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0])

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.lr)

    def train_dataloader(self) -> DataLoader:
        self.loader_calls += 1
        return loader()

    def val_dataloader(self) -> DataLoader:
        return loader(seed=1)

    def test_dataloader(self) -> DataLoader:
        return loader(seed=2)

    def predict_dataloader(self) -> DataLoader:
        return loader(seed=3)


class Counter(accelkit.Callback):
    """Counts the calls of a few hooks (``counts[hook]``) and keeps what ``probe`` returns at each train batch."""

    HOOKS = ("on_train_batch_end", "on_validation_batch_end", "on_test_batch_end", "on_predict_batch_end",
             "on_validation_end", "on_sanity_check_start", "on_train_epoch_end", "on_exception")

    def __init__(self, probe: Callable[[Any, Any], Any] | None = None) -> None:
        self.counts: dict[str, int] = dict.fromkeys(self.HOOKS, 0)
        self.probe, self.probed = probe, []

    def _count(self, hook: str) -> None:
        self.counts[hook] += 1

    def on_train_batch_end(self, trainer: Any, pl_module: Any, *args: Any) -> None:
        self._count("on_train_batch_end")
        if self.probe is not None:
            self.probed.append(self.probe(trainer, pl_module))

    def on_validation_batch_end(self, *args: Any) -> None:
        self._count("on_validation_batch_end")

    def on_test_batch_end(self, *args: Any) -> None:
        self._count("on_test_batch_end")

    def on_predict_batch_end(self, *args: Any) -> None:
        self._count("on_predict_batch_end")

    def on_validation_end(self, *args: Any) -> None:
        self._count("on_validation_end")

    def on_sanity_check_start(self, *args: Any) -> None:
        self._count("on_sanity_check_start")

    def on_train_epoch_end(self, *args: Any) -> None:
        self._count("on_train_epoch_end")

    def on_exception(self, *args: Any) -> None:
        self._count("on_exception")


def trainer(root: Path, **kwargs: Any) -> accelkit.Trainer:
    """A quiet CPU Trainer writing under ``root``: one epoch of two batches, one validation batch, no sanity check,
    logger, checkpoint, bar or summary unless ``kwargs`` say otherwise."""
    options: dict[str, Any] = dict(accelerator="cpu", devices=1, max_epochs=1, limit_train_batches=2,
                                   limit_val_batches=1, num_sanity_val_steps=0, logger=False,
                                   enable_checkpointing=False, enable_progress_bar=False,
                                   enable_model_summary=False, default_root_dir=root)
    options.update(kwargs)
    return accelkit.Trainer(**options)


def fit(root: Path, module: accelkit.Module | None = None, **kwargs: Any) -> tuple[accelkit.Trainer, Any, Counter]:
    """Run :func:`trainer` (with a :class:`Counter` added to ``callbacks``) on ``module`` (a :class:`Net` if
    none); return the trainer, the module and the counter."""
    counter = Counter(kwargs.pop("probe", None))
    callbacks = kwargs.pop("callbacks", [])
    run = trainer(root, callbacks=[*(callbacks if isinstance(callbacks, list) else [callbacks]), counter], **kwargs)
    module = module if module is not None else Net()
    run.fit(module)
    return run, module, counter


# --------------------------------------------------------------------------------------------- the shared run
def _check(check: Callable[..., Any], *args: Any) -> Any:
    """``True`` when ``check(*args)`` holds, else what it returned or raised (for the failure message)."""
    try:
        result = check(*args)
    except Exception as error:  # noqa: BLE001 - the failure is reported by the test
        return f"raised {type(error).__name__}: {error}"
    return True if result is True else f"the check gave {result!r}"


def _optimizer_of(opt: Any) -> Any:
    return getattr(opt, "optimizer", opt)


#: checks evaluated inside the shared run's ``training_step`` (after one optimizer step)
MODULE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "current_epoch": lambda m: m.current_epoch == m.trainer.current_epoch == 0,
    "global_step": lambda m: m.global_step == m.trainer.global_step == 1,
    "global_rank": lambda m: m.global_rank == m.trainer.global_rank == 0,
    "local_rank": lambda m: m.local_rank == m.trainer.local_rank == 0,
    "device": lambda m: m.device == m.layer.weight.device == torch.device("cpu"),
    "dtype": lambda m: m.dtype == m.layer.weight.dtype == torch.float32,
    "on_gpu": lambda m: m.on_gpu is False,
    "on_graphics_processor": lambda m: m.on_graphics_processor is False,
    "logger": lambda m: m.logger is m.trainer.logger and isinstance(m.logger, accelkit.loggers.CSVLogger),
    "loggers": lambda m: list(m.loggers) == [m.trainer.logger],
    "trainer": lambda m: isinstance(m.trainer, accelkit.Trainer) and m.trainer.lightning_module is m,
    "automatic_optimization": lambda m: m.automatic_optimization is True,
    "strict_loading": lambda m: m.strict_loading is True,
    "save_hyperparameters": lambda m: m.hparams["lr"] == 0.1,
    "hparams": lambda m: m.hparams.lr == m.hparams["lr"] == 0.1,
    "hparams_initial": lambda m: m.hparams_initial["lr"] == 0.1,
    "CHECKPOINT_HYPER_PARAMS_KEY": lambda m: m.CHECKPOINT_HYPER_PARAMS_KEY == "hyper_parameters",
    "CHECKPOINT_HYPER_PARAMS_NAME": lambda m: m.CHECKPOINT_HYPER_PARAMS_NAME == "hparams_name",
    "prepare_data_per_node": lambda m: m.prepare_data_per_node is True,
    "allow_zero_length_dataloader_with_multiple_devices":
        lambda m: m.allow_zero_length_dataloader_with_multiple_devices is False,
    "optimizers": lambda m: _optimizer_of(m.optimizers()) is m.trainer.optimizers[0],
    "lr_schedulers": lambda m: isinstance(m.lr_schedulers(), torch.optim.lr_scheduler.StepLR),
    # one process: a new first dimension of size 1 (Lightning's single-device strategy adds none; see the row)
    "all_gather": lambda m: torch.equal(m.all_gather({"x": torch.tensor([1.0, 2.0])})["x"], torch.tensor([[1.0, 2.0]])),
}


def _root_dir(t: Any) -> Path:
    return Path(t.logger.save_dir).parent


#: checks evaluated inside a callback's ``on_train_batch_end`` of the shared run's first fit (after one step)
def _restored(t: Any) -> bool:
    """A snapshot taken and put back at once leaves the run where it was (the same progress record)."""
    progress, saved = t.run_state.progress, t.snapshot()
    t.restore(saved)
    return t.run_state.progress is progress and t.global_step == saved.run.progress.global_step


def _settings_replaced(t: Any) -> bool:
    """A setting changed through ``replace_settings`` is a new settings object, read back by its property; the old
    one is put back the same way."""
    before = t.settings
    after = t.replace_settings(log_every_n_steps=before.log_every_n_steps + 1)
    changed = after is t.settings and after is not before and t.log_every_n_steps == before.log_every_n_steps + 1
    t.replace_settings(log_every_n_steps=before.log_every_n_steps)
    return changed and t.log_every_n_steps == before.log_every_n_steps


TRAINER_CHECKS: dict[str, Callable[[Any, Any], bool]] = {
    "accelerator": lambda t, m: isinstance(t.accelerator, accelkit.Accelerator),
    "strategy": lambda t, m: isinstance(t.strategy, accelkit.Strategy) and t.strategy.root_device.type == "cpu",
    "precision_plugin": lambda t, m: t.precision_plugin is t.precision,
    "precision": lambda t, m: t.precision.name == "32-true",
    "global_rank": lambda t, m: t.global_rank == 0, "local_rank": lambda t, m: t.local_rank == 0,
    "node_rank": lambda t, m: t.node_rank == 0, "world_size": lambda t, m: t.world_size == 1,
    "num_nodes": lambda t, m: t.num_nodes == 1, "num_devices": lambda t, m: t.num_devices == 1,
    "device_ids": lambda t, m: list(t.device_ids) == [0], "is_global_zero": lambda t, m: t.is_global_zero is True,
    "distributed_sampler_kwargs": lambda t, m: t.distributed_sampler_kwargs is None,
    "lightning_module": lambda t, m: t.lightning_module is m, "model": lambda t, m: t.model is m,
    "optimizers": lambda t, m: len(t.optimizers) == 1 and isinstance(t.optimizers[0], torch.optim.SGD),
    "lr_scheduler_configs": lambda t, m: [type(c.scheduler).__name__ for c in t.lr_scheduler_configs] == ["StepLR"]
    and t.lr_scheduler_configs[0].interval == "epoch",
    "default_root_dir": lambda t, m: Path(t.default_root_dir) == _root_dir(t),
    "log_dir": lambda t, m: t.log_dir == t.logger.log_dir,
    "logger": lambda t, m: isinstance(t.logger, accelkit.loggers.CSVLogger),
    "loggers": lambda t, m: list(t.loggers) == [t.logger],
    "callbacks": lambda t, m: sum(isinstance(c, StateCallback) for c in t.callbacks) == 1,
    "checkpoint_callback": lambda t, m: isinstance(t.checkpoint_callback, accelkit.callbacks.ModelCheckpoint),
    "checkpoint_callbacks": lambda t, m: list(t.checkpoint_callbacks) == [t.checkpoint_callback],
    "early_stopping_callback": lambda t, m: t.early_stopping_callback is None,
    "early_stopping_callbacks": lambda t, m: list(t.early_stopping_callbacks) == [],
    "prediction_writer_callbacks": lambda t, m: list(t.prediction_writer_callbacks) == [],
    "state": lambda t, m: t.state.fn == "fit" and t.state.stage == "train" and t.state.status == "running"
    and repr(t.state.fn) == "<TrainerFn.FITTING: 'fit'>",
    "training": lambda t, m: t.training is True, "validating": lambda t, m: t.validating is False,
    "testing": lambda t, m: t.testing is False, "predicting": lambda t, m: t.predicting is False,
    "evaluating": lambda t, m: t.evaluating is False, "sanity_checking": lambda t, m: t.sanity_checking is False,
    "should_stop": lambda t, m: t.should_stop is False,
    "current_epoch": lambda t, m: t.current_epoch == 0, "global_step": lambda t, m: t.global_step == 1,
    "is_last_batch": lambda t, m: t.is_last_batch is False,
    "max_epochs": lambda t, m: t.max_epochs == 2, "min_epochs": lambda t, m: t.min_epochs == 0,
    "max_steps": lambda t, m: t.max_steps == -1, "min_steps": lambda t, m: t.min_steps is None,
    "estimated_stepping_batches": lambda t, m: t.estimated_stepping_batches == 4,
    "datamodule": lambda t, m: t.datamodule is None,
    "train_dataloader": lambda t, m: isinstance(t.train_dataloader, DataLoader),
    "val_dataloaders": lambda t, m: isinstance(t.val_dataloaders, DataLoader),
    "test_dataloaders": lambda t, m: t.test_dataloaders is None,
    "predict_dataloaders": lambda t, m: t.predict_dataloaders is None,
    "num_training_batches": lambda t, m: t.num_training_batches == 2,
    "num_val_batches": lambda t, m: list(t.num_val_batches) == [1],
    "num_sanity_val_batches": lambda t, m: list(t.num_sanity_val_batches) == [1],
    "fast_dev_run": lambda t, m: t.fast_dev_run is False,
    "val_check_interval": lambda t, m: t.val_check_interval == 1.0,
    "check_val_every_n_epoch": lambda t, m: t.check_val_every_n_epoch == 1,
    "log_every_n_steps": lambda t, m: t.log_every_n_steps == 50,
    "accumulate_grad_batches": lambda t, m: t.accumulate_grad_batches == 1,
    "gradient_clip_val": lambda t, m: t.gradient_clip_val == 0.5,
    "gradient_clip_algorithm": lambda t, m: t.gradient_clip_algorithm == "norm",
    "limit_train_batches": lambda t, m: t.limit_train_batches == 2,
    "limit_val_batches": lambda t, m: t.limit_val_batches == 1,
    "limit_test_batches": lambda t, m: t.limit_test_batches == 1,
    "limit_predict_batches": lambda t, m: t.limit_predict_batches == 1,
    "overfit_batches": lambda t, m: t.overfit_batches == 0,
    "reload_dataloaders_every_n_epochs": lambda t, m: t.reload_dataloaders_every_n_epochs == 0,
    "num_sanity_val_steps": lambda t, m: t.num_sanity_val_steps == 1, "barebones": lambda t, m: t.barebones is False,
    "limits": lambda t, m: dict(t.limits) == {"fit": 2, "validate": 1, "test": 1, "predict": 1},
    "config": lambda t, m: isinstance(t.config, accelkit.RunConfig) and t.config.accelerator == "cpu",
    "plugin_manager": lambda t, m: t.plugin_manager.registry is not None,
    "checkpoint_path": lambda t, m: isinstance(t.checkpoint_path, Path),
    "checkpoint_dir": lambda t, m: t.checkpoint_dir == t.checkpoint_path.parent,
    "run_folder": lambda t, m: isinstance(t.run_folder, accelkit.loggers.RunFolder),
    "versioned_loggers": lambda t, m: t.versioned_loggers() == list(t.loggers),  # its CSVLogger
    "run_state": lambda t, m: t.run_state.module is m and list(t.run_state.optimizers) == list(t.optimizers),
    "settings": lambda t, m: t.settings.max_epochs == t.max_epochs and t.settings.limits == t.limits,
    "replace_settings": lambda t, m: _settings_replaced(t),
    "snapshot": lambda t, m: t.snapshot().run.progress.global_step == t.global_step,
    "restore": lambda t, m: _restored(t),
    "warned_unknown_hooks": lambda t, m: isinstance(t.warned_unknown_hooks, bool),
    "requested_ckpt_path": lambda t, m: t.requested_ckpt_path is None,  # the shared run sets no trainer.ckpt_path
    # the arguments accelkit keeps as attributes (the shared run's values)
    "benchmark": lambda t, m: t.benchmark is None, "deterministic": lambda t, m: t.deterministic is None,
    "detect_anomaly": lambda t, m: t.detect_anomaly is False,
    "enable_checkpointing": lambda t, m: t.enable_checkpointing is True,
    "enable_model_summary": lambda t, m: t.enable_model_summary is False,
    "enable_progress_bar": lambda t, m: t.enable_progress_bar is False,
    "inference_mode": lambda t, m: t.inference_mode is True, "max_time": lambda t, m: t.max_time is None,
    "compile_step": lambda t, m: t.compile_step is None,
    "seed": lambda t, m: isinstance(t.seed, int), "sync_batchnorm": lambda t, m: t.sync_batchnorm is False,
    "use_distributed_sampler": lambda t, m: t.use_distributed_sampler is True,
}


class SharedModule(Net):
    """:class:`Net` with a scheduler, ``log_dict`` and the :data:`MODULE_CHECKS` evaluated once in
    ``training_step``; ``fail=True``: ``training_step`` raises :data:`FAILURE`."""

    def __init__(self, lr: float = 0.1, fail: bool = False) -> None:
        super().__init__(lr)
        self.fail = fail
        self.checks: dict[str, Any] = {}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.fail:
            raise RuntimeError(FAILURE)
        loss = super().training_step(batch, batch_idx)
        self.log_dict({"dict_a": 1.0, "dict_b": 2.0})
        if self.global_step == 1 and not self.checks:
            self.checks = {name: _check(check, self) for name, check in MODULE_CHECKS.items()}
        return loss

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)}


class StateCallback(accelkit.Callback):
    """A callback with state (saved in checkpoints, restored on resume) that evaluates :data:`TRAINER_CHECKS`
    once, after the first optimizer step of a run."""

    def __init__(self) -> None:
        self.loaded: dict[str, Any] | None = None
        self.checks: dict[str, Any] = {}

    def state_dict(self) -> dict[str, Any]:
        return {"saved_by": "StateCallback"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.loaded = dict(state_dict)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == 1 and not self.checks:
            self.checks = {name: _check(check, trainer, pl_module) for name, check in TRAINER_CHECKS.items()}


def recording(base: type, hooks: Iterable[str], calls: set[str]) -> type:
    """A subclass of ``base`` whose methods named in ``hooks`` add their name to ``calls``, then run ``base``'s."""

    def wrap(name: str) -> Callable:
        original = getattr(base, name)

        @functools.wraps(original)
        def hook(self: Any, *args: Any, **kwargs: Any) -> Any:
            calls.add(name)
            return original(self, *args, **kwargs)

        return hook

    methods = {name: wrap(name) for name in hooks if callable(getattr(base, name, None))}
    return type(f"Recording{base.__name__}", (base,), methods)


@dataclass
class SharedRun:
    """What :func:`shared_run` did and saw."""

    module_calls: set[str] = field(default_factory=set)
    callback_calls: set[str] = field(default_factory=set)
    module_checks: dict[str, Any] = field(default_factory=dict)
    trainer_checks: dict[str, Any] = field(default_factory=dict)
    first: Any = None  # the first fit's Trainer
    module: Any = None  # its module
    resumed: Any = None  # the resumed fit's Trainer (then validate, test, predict)
    checkpoint: Path | None = None
    callback: Any = None  # the resumed fit's StateCallback
    results: dict[str, Any] = field(default_factory=dict)  # validate/test/predict results, the failure
    module_class: type | None = None


def shared_run(root: Path, module_hooks: Iterable[str], callback_hooks: Iterable[str]) -> SharedRun:
    """fit (2 epochs, sanity check, clipping, a CSV logger, the default checkpoint), save_checkpoint, a resumed fit,
    validate, test, predict, and a fit whose ``training_step`` raises, with every hook recorded."""
    run = SharedRun()
    module_class = run.module_class = recording(SharedModule, module_hooks, run.module_calls)
    callback_class = recording(StateCallback, callback_hooks, run.callback_calls)
    common = dict(limit_test_batches=1, limit_predict_batches=1, logger=accelkit.loggers.CSVLogger(root / "logs"))
    first = run.first = trainer(root, max_epochs=2, num_sanity_val_steps=1, gradient_clip_val=0.5,
                                gradient_clip_algorithm="norm", enable_checkpointing=True,
                                callbacks=[callback_class()], **common)
    run.module = module_class()
    first.fit(run.module)
    run.module_checks = dict(run.module.checks)
    run.trainer_checks = dict(next(c for c in first.callbacks if isinstance(c, StateCallback)).checks)
    run.checkpoint = root / "shared.ckpt"
    first.save_checkpoint(run.checkpoint)
    run.callback = callback_class()
    resumed = run.resumed = trainer(root, max_epochs=3, callbacks=[run.callback], **common)
    resumed.fit(module_class(), ckpt_path=run.checkpoint)
    run.results["validate"] = resumed.validate(resumed.lightning_module)
    run.results["test"] = resumed.test(resumed.lightning_module)
    run.results["predict"] = resumed.predict(resumed.lightning_module)
    failing = trainer(root, callbacks=[callback_class()])
    try:
        failing.fit(module_class(fail=True))
    except RuntimeError as error:
        run.results["failure"] = error
    return run


class Workspace:
    """Where exercises run: ``root`` (a temporary folder), :meth:`fresh` folders, and the cached shared run."""

    def __init__(self, root: Path, module_hooks: Iterable[str], callback_hooks: Iterable[str]) -> None:
        self.root = root
        self._hooks = (tuple(module_hooks), tuple(callback_hooks))
        self._count = 0

    def fresh(self) -> Path:
        """A new empty folder under ``root``."""
        self._count += 1
        path = self.root / f"run{self._count}"
        path.mkdir(parents=True)
        return path

    @functools.cached_property
    def shared(self) -> SharedRun:
        """The shared run (run on first use)."""
        return shared_run(self.fresh(), *self._hooks)


# --------------------------------------------------------------------------------------------- type names
def check_annotation(name: str, obj: Any) -> None:
    """``obj`` works as an annotation (``typing.get_type_hints`` resolves it); the scheduler protocols and tuple
    also recognise torch's schedulers, the TypedDicts build the dicts ``configure_optimizers`` returns."""
    import typing

    def annotated(value: obj) -> obj:  # type: ignore[valid-type]
        return value

    if not isinstance(obj, tuple):  # a tuple of classes is for isinstance (as in Lightning), not annotations
        hints = typing.get_type_hints(annotated, localns={"obj": obj})  # a string annotation, as under __future__
        assert hints["value"] == obj or hints["value"] == (obj | None), f"{name} did not resolve: {hints}"
    layer = nn.Linear(1, 1)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    step = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
    extra = {
        "LRScheduler": lambda: isinstance(step, obj),
        "ReduceLROnPlateau": lambda: isinstance(plateau, obj),
        "LRSchedulerTypeTuple": lambda: isinstance(step, obj) and isinstance(plateau, obj),
        "LRSchedulerConfigType": lambda: dict(obj(scheduler=step, interval="epoch")) == {"scheduler": step,
                                                                                         "interval": "epoch"},
        "OptimizerLRSchedulerConfig": lambda: obj(optimizer=optimizer, lr_scheduler=step)["optimizer"] is optimizer,
    }
    if name in extra:
        assert extra[name]() is True, f"{name} does not describe torch's objects"
