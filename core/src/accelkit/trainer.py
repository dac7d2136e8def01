"""``accelkit.Trainer``: resolves the run from strings, launches it, and drives the loops."""

from __future__ import annotations

import itertools
import os
import warnings
from pathlib import Path
from typing import Any, Iterable

import torch

from accelkit import checkpoint as ckpt
from accelkit.__about__ import __version__
from accelkit.callbacks import Callback
from accelkit.errors import ConfigurationError
from accelkit.loggers import CSVLogger
from accelkit.metrics import MetricStore
from accelkit.module import Module
from accelkit.plugins import PluginManager
from accelkit.resolve import Composition, compose, print_notices
from accelkit.sampler import distribute_dataloader

_STAGES = ("fit", "validate", "test", "predict")


class Trainer:
    """Compose a run from names and drive it.

    :param accelerator: an accelerator name (``"cpu"``, or any a plugin provides, with aliases), an
        :class:`~accelkit.Accelerator` instance, or ``"auto"``: the available accelerator of highest priority.
    :param devices: how many devices, which ones (``[1]``, ``"0,1"``), or ``"auto"``. Each accelerator
        documents what it accepts.
    :param strategy: a strategy name (``"ddp_spawn"``...), a :class:`~accelkit.Strategy`, or ``"auto"``.
    :param precision: ``"32-true"`` (default), ``"64-true"``, ``"bf16-mixed"``, ``"16-mixed"`` ..., as the
        accelerator's plugins provide; ints such as ``16`` are aliases.
    :param plugins: plugin objects to register (anything with :data:`accelkit.hookimpl` functions), strategy
        or precision names/instances (``"tpu_spawn_debug"``), and ``"no:NAME"`` to block an installed plugin.
    :param num_nodes: number of machines (processes on each are started by ``torchrun``/``srun``).
    :param max_epochs: stop after this many epochs (default 1000 if ``max_steps`` is not set either).
    :param max_steps: stop after this many optimizer steps (``-1``: no limit).
    :param limit_train_batches: batches per training epoch: an int, or a float fraction (``None``: all).
    :param limit_val_batches: likewise for validation (``0`` turns validation off).
    :param limit_test_batches: likewise for testing.
    :param limit_predict_batches: likewise for prediction.
    :param check_val_every_n_epoch: validate after every N-th training epoch.
    :param log_every_n_steps: how often per-step metrics are read from the device and logged.
    :param accumulate_grad_batches: sum gradients over this many batches per optimizer step.
    :param gradient_clip_val: clip gradients to this norm (or value); ``None``: no clipping.
    :param gradient_clip_algorithm: ``"norm"`` or ``"value"``.
    :param enable_progress_bar: show a tqdm bar (global-zero process only).
    :param enable_checkpointing: write ``<default_root_dir>/checkpoints/last.ckpt`` after each epoch.
    :param logger: ``True`` for a :class:`~accelkit.loggers.CSVLogger`, ``False``/``None`` for none, or a logger.
    :param callbacks: :class:`~accelkit.Callback` instances.
    :param default_root_dir: where logs and checkpoints go (default: the working directory).
    :param use_distributed_sampler: in a distributed run, give each rank its shard of the data.
    :param seed: base seed for the distributed sampler's shuffling (default ``ACCELKIT_SEED`` or 0).
    :param legacy_arguments: other keyword arguments (old spellings such as a ``*_cores=`` argument); a plugin
        translates them or the Trainer raises ``TypeError``.
    """

    def __init__(
        self,
        accelerator: Any = "auto",
        devices: Any = "auto",
        strategy: Any = "auto",
        precision: Any = "32-true",
        plugins: Any = None,
        num_nodes: int = 1,
        max_epochs: int | None = None,
        max_steps: int = -1,
        limit_train_batches: int | float | None = None,
        limit_val_batches: int | float | None = None,
        limit_test_batches: int | float | None = None,
        limit_predict_batches: int | float | None = None,
        check_val_every_n_epoch: int = 1,
        log_every_n_steps: int = 50,
        accumulate_grad_batches: int = 1,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str = "norm",
        enable_progress_bar: bool = True,
        enable_checkpointing: bool = True,
        logger: Any = True,
        callbacks: Iterable[Callback] | None = None,
        default_root_dir: str | os.PathLike | None = None,
        use_distributed_sampler: bool = True,
        seed: int | None = None,
        **legacy_arguments: Any,
    ) -> None:
        plugin_list = plugins if isinstance(plugins, (list, tuple)) else ([] if plugins is None else [plugins])
        self._blocked = [p[3:] for p in plugin_list if isinstance(p, str) and p.startswith("no:")]
        names = [p for p in plugin_list if isinstance(p, str) and not p.startswith("no:")]
        self._plugin_objects = [p for p in plugin_list if not isinstance(p, str)]
        self._manager: PluginManager | None = None

        from accelkit.precision import Precision
        from accelkit.strategy import Strategy

        hook_plugins = [p for p in self._plugin_objects if not isinstance(p, (Strategy, Precision))]
        manager = self.plugin_manager
        for obj in hook_plugins:
            manager.add_plugin(obj)
        arguments = {"accelerator": accelerator, "devices": devices, "strategy": strategy, "precision": precision,
                     "num_nodes": num_nodes, "extra": dict(legacy_arguments)}
        manager.hook.accelkit_translate_arguments(arguments=arguments)
        if arguments["extra"]:
            unknown = ", ".join(sorted(arguments["extra"]))
            raise TypeError(f"Trainer() got unexpected keyword argument(s): {unknown}")

        problems = []
        if max_epochs is not None and (not isinstance(max_epochs, int) or max_epochs < 0):
            problems.append(f"max_epochs={max_epochs!r} must be an int >= 0 (or None).")
        if not isinstance(accumulate_grad_batches, int) or accumulate_grad_batches < 1:
            problems.append(f"accumulate_grad_batches={accumulate_grad_batches!r} must be an int >= 1.")
        if gradient_clip_algorithm not in ("norm", "value"):
            problems.append(f"gradient_clip_algorithm={gradient_clip_algorithm!r} must be 'norm' or 'value'.")
        if not isinstance(log_every_n_steps, int) or log_every_n_steps < 1:
            problems.append(f"log_every_n_steps={log_every_n_steps!r} must be an int >= 1.")
        try:
            composition = compose(
                manager,
                accelerator=arguments["accelerator"],
                devices=arguments["devices"],
                strategy=arguments["strategy"],
                precision=arguments["precision"],
                num_nodes=arguments["num_nodes"],
                plugin_names=names,
                plugin_objects=self._plugin_objects,
            )
        except ConfigurationError as exc:
            raise ConfigurationError(problems + exc.problems) from None
        if problems:
            raise ConfigurationError(problems)
        print_notices(composition.notices)
        self._composition: Composition = composition

        self.max_epochs = max_epochs if max_epochs is not None else (1000 if max_steps == -1 else None)
        self.max_steps = max_steps
        self.limits = {"fit": limit_train_batches, "validate": limit_val_batches, "test": limit_test_batches,
                       "predict": limit_predict_batches}
        self.check_val_every_n_epoch = check_val_every_n_epoch
        self.log_every_n_steps = log_every_n_steps
        self.accumulate_grad_batches = accumulate_grad_batches
        self.gradient_clip_val = gradient_clip_val
        self.gradient_clip_algorithm = gradient_clip_algorithm
        self.enable_progress_bar = enable_progress_bar
        self.enable_checkpointing = enable_checkpointing
        self.default_root_dir = Path(default_root_dir or os.getcwd())
        self.logger = CSVLogger(self.default_root_dir) if logger is True else (logger or None)
        self.callbacks = list(callbacks or [])
        self.use_distributed_sampler = use_distributed_sampler
        self.seed = seed if seed is not None else int(os.environ.get("ACCELKIT_SEED", 0))

        self.current_epoch = 0
        self.global_step = 0
        self.callback_metrics: dict[str, float] = {}
        self.logged_metrics: dict[str, float] = {}
        self.progress_bar_metrics: dict[str, float] = {}
        self.should_stop = False
        self._metrics = MetricStore()
        self.state_stage: str | None = None

    # ----------------------------------------------------------------- composition
    @property
    def plugin_manager(self) -> PluginManager:
        """The plugin manager (rebuilt inside each spawned worker)."""
        if self._manager is None:
            self._manager = PluginManager(blocked=self._blocked)
        return self._manager

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_manager"] = None  # pluggy managers hold modules; workers rebuild theirs
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        from accelkit.precision import Precision
        from accelkit.strategy import Strategy

        for obj in self._plugin_objects:
            if not isinstance(obj, (Strategy, Precision)):
                self.plugin_manager.add_plugin(obj)

    @property
    def accelerator(self) -> Any:
        """The resolved :class:`~accelkit.Accelerator`."""
        return self._composition.accelerator

    @property
    def strategy(self) -> Any:
        """The resolved :class:`~accelkit.Strategy`."""
        return self._composition.strategy

    @property
    def precision(self) -> Any:
        """The resolved :class:`~accelkit.Precision`."""
        return self._composition.precision

    @property
    def config(self) -> Any:
        """The resolved :class:`~accelkit.RunConfig`."""
        return self._composition.config

    @property
    def world_size(self) -> int:
        """Number of processes/replicas."""
        return self.strategy.world_size

    @property
    def global_rank(self) -> int:
        """This process's index among all."""
        return self.strategy.global_rank

    @property
    def local_rank(self) -> int:
        """This process's index on its node."""
        return self.strategy.local_rank

    @property
    def is_global_zero(self) -> bool:
        """Whether this process writes files and prints."""
        return self.strategy.is_global_zero

    @property
    def checkpoint_path(self) -> Path:
        """Where ``last.ckpt`` is written."""
        return self.default_root_dir / "checkpoints" / "last.ckpt"

    # ----------------------------------------------------------------- public entry points
    def fit(self, model: Module, train_dataloaders: Any = None, val_dataloaders: Any = None,
            ckpt_path: str | os.PathLike | None = None, weights_only: bool = True) -> None:
        """Train ``model``.

        :param ckpt_path: resume from this checkpoint (``"last"``: this Trainer's ``last.ckpt``). Training
            continues at the epoch after the one saved.
        :param weights_only: load the checkpoint with ``torch.load(weights_only=True)`` (refuses arbitrary
            pickled objects); set ``False`` only for checkpoints you trust.
        """
        self._launch("fit", model, {"train": train_dataloaders, "val": val_dataloaders}, ckpt_path, weights_only)

    def validate(self, model: Module, dataloaders: Any = None, ckpt_path: Any = None,
                 weights_only: bool = True) -> list[dict[str, float]]:
        """Run the validation loop once; returns the epoch metrics."""
        return self._launch("validate", model, {"val": dataloaders}, ckpt_path, weights_only)

    def test(self, model: Module, dataloaders: Any = None, ckpt_path: Any = None,
             weights_only: bool = True) -> list[dict[str, float]]:
        """Run the test loop once; returns the epoch metrics."""
        return self._launch("test", model, {"test": dataloaders}, ckpt_path, weights_only)

    def predict(self, model: Module, dataloaders: Any = None, ckpt_path: Any = None,
                weights_only: bool = True) -> list[Any]:
        """Return the predictions of every batch (on the CPU; those of the global-zero rank when distributed)."""
        return self._launch("predict", model, {"predict": dataloaders}, ckpt_path, weights_only)

    def save_checkpoint(self, path: str | os.PathLike, model: Module | None = None,
                        optimizers: list[Any] | None = None) -> None:
        """Write a checkpoint of the current state atomically (call inside a run or with ``model``)."""
        model = model if model is not None else getattr(self, "_module", None)
        if model is None:
            raise ValueError("Trainer.save_checkpoint(path) outside a run needs the module: "
                             "trainer.save_checkpoint(path, model=my_module)")
        self.strategy.save_checkpoint(self._checkpoint_dict(model, optimizers or getattr(self, "_optimizers", [])),
                                      path)

    # ----------------------------------------------------------------- launching
    def _launch(self, stage: str, model: Module, loaders: dict[str, Any], ckpt_path: Any, weights_only: bool) -> Any:
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"Trainer.{stage}() needs an accelkit.Module, got {type(model).__name__}")
        if ckpt_path == "last":
            ckpt_path = self.checkpoint_path
            if not ckpt_path.is_file():
                warnings.warn(f"ckpt_path='last': no checkpoint at {ckpt_path} yet; starting from scratch.",
                              UserWarning, stacklevel=3)
                ckpt_path = None
        if ckpt_path is not None and not Path(ckpt_path).is_file():
            raise FileNotFoundError(f"ckpt_path={str(ckpt_path)!r} does not exist")
        strategy = self.strategy
        if stage in ("validate", "test"):
            method = "validation_step" if stage == "validate" else "test_step"
            if getattr(type(model), method, None) is getattr(Module, method):
                raise NotImplementedError(f"Trainer.{stage}() needs {type(model).__name__}.{method}(batch, "
                                          "batch_idx): define it and log the metrics to report with self.log")
        output = strategy.launch(self._run, stage, model, loaders, ckpt_path, weights_only)
        model.trainer = self  # as after a Lightning run: model.current_epoch/global_step read the trainer
        if strategy.launches_workers:
            # The work ran in other processes/replicas: bring its outcome back to the caller's objects.
            if output.get("state_dict") is not None:
                model.load_state_dict(output["state_dict"])
                # The optimizers lived in the workers: keep their final state for save_checkpoint() here.
                self._module, self._optimizers, self._schedulers = model, [], []
                self._worker_training_state = output["training_state"]
            for key in ("callback_metrics", "logged_metrics", "progress_bar_metrics", "current_epoch", "global_step"):
                setattr(self, key, output[key])
            return output["result"]
        return output["result"]

    def _run(self, stage: str, model: Module, loaders: dict[str, Any], ckpt_path: Any, weights_only: bool) -> dict:
        """The work done in each worker: set up, run one stage, tear down."""
        strategy = self.strategy
        self.state_stage = stage
        model.trainer = self
        self._module = model
        try:
            strategy.setup_environment()
            self._model = strategy.setup_module(model)
            checkpoint = strategy.load_checkpoint(ckpt_path, weights_only) if ckpt_path is not None else None
            if checkpoint is not None:
                model.on_load_checkpoint(checkpoint)
                model.load_state_dict(checkpoint["state_dict"])
            if stage == "fit":
                result = self._fit(model, loaders, checkpoint)
            elif stage == "predict":
                result = self._predict(model, loaders["predict"])
            else:
                key = "val" if stage == "validate" else "test"
                result = [self._evaluate(model, loaders[key], stage)]
            for callback in self.callbacks:
                callback.teardown(self, model, stage)
            if self.logger is not None and strategy.is_global_zero:
                self.logger.save()
            output = {
                "result": ckpt.to_cpu(result),
                "state_dict": ckpt.to_cpu(model.state_dict()) if stage == "fit" and strategy.launches_workers else None,
                "training_state": ckpt.to_cpu(self._training_state()) if stage == "fit" and strategy.launches_workers
                else None,
                "callback_metrics": self.callback_metrics,
                "logged_metrics": self.logged_metrics,
                "progress_bar_metrics": self.progress_bar_metrics,
                "current_epoch": self.current_epoch,
                "global_step": self.global_step,
            }
        finally:
            strategy.teardown()
        return output

    # ----------------------------------------------------------------- data
    def _dataloader(self, model: Module, given: Any, hook: str, stage: str) -> Any:
        loader = given if given is not None else getattr(model, hook)()
        if loader is None:
            return None
        strategy = self.strategy
        kwargs = strategy.distributed_sampler_kwargs
        if kwargs is not None and self.use_distributed_sampler:
            loader = distribute_dataloader(loader, self.plugin_manager.hook.accelkit_distributed_sampler,
                                           kwargs["num_replicas"], kwargs["rank"], self.seed, stage)
        return loader

    def _num_batches(self, loader: Any, stage: str) -> int | None:
        limit = self.limits[stage]
        try:
            total = len(loader)
        except TypeError:
            total = None
        if limit is None:
            return total
        if isinstance(limit, float):
            if not 0.0 <= limit <= 1.0:
                raise ConfigurationError(f"limit_{stage}_batches={limit} must be a fraction in [0, 1] or an int")
            if total is None:
                raise ConfigurationError(f"limit_{stage}_batches={limit} is a fraction but the data has no length")
            return int(total * limit)
        return int(limit) if total is None else min(int(limit), total)

    def _batches(self, loader: Any, stage: str, limit: int | None, lookahead: bool = False) -> Iterable[tuple]:
        """``(index, batch)`` on the device; with ``lookahead``, ``(index, batch, is_last)``: one batch is read
        ahead so the last one is known even for loaders without a length."""
        iterable = self.strategy.process_dataloader(loader, stage)
        if limit is not None:
            iterable = itertools.islice(iterable, limit)
        prepare = self.strategy.batch_to_device
        convert = self.precision.convert_input
        if not lookahead:
            for index, batch in enumerate(iterable):
                yield index, convert(prepare(batch))
            return
        iterator = iter(iterable)
        sentinel = object()
        upcoming = next(iterator, sentinel)
        index = 0
        while upcoming is not sentinel:
            batch, upcoming = upcoming, next(iterator, sentinel)
            yield index, convert(prepare(batch)), upcoming is sentinel
            index += 1

    def _progress(self, total: int | None, description: str, leave: bool) -> Any:
        if not (self.enable_progress_bar and self.strategy.is_global_zero):
            return None
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=description, leave=leave, dynamic_ncols=True, unit="batch")

    # ----------------------------------------------------------------- hooks
    def _call(self, hook: str, *args: Any) -> None:
        getattr(self._module, hook)(*args)
        for callback in self.callbacks:
            method = getattr(callback, hook, None)
            if method is not None:
                method(self, self._module, *args)

    # ----------------------------------------------------------------- optimizers
    def _configure_optimizers(self, model: Module) -> tuple[list[Any], list[dict[str, Any]]]:
        config = model.configure_optimizers()
        optimizers: list[Any]
        schedulers: list[Any] = []
        if isinstance(config, torch.optim.Optimizer):
            optimizers = [config]
        elif isinstance(config, dict):
            optimizers = [config["optimizer"]]
            if config.get("lr_scheduler") is not None:
                schedulers = [config["lr_scheduler"]]
        elif isinstance(config, (list, tuple)) and len(config) == 2 and isinstance(config[0], (list, tuple)):
            optimizers, schedulers = list(config[0]), list(config[1])
        elif isinstance(config, (list, tuple)) and all(isinstance(o, torch.optim.Optimizer) for o in config):
            optimizers = list(config)
        else:
            raise TypeError(
                f"{type(model).__name__}.configure_optimizers() returned {type(config).__name__}; return an "
                "optimizer, a list of optimizers, ([optimizers], [schedulers]) or "
                "{'optimizer': ..., 'lr_scheduler': ...}"
            )
        if not optimizers:
            raise TypeError(f"{type(model).__name__}.configure_optimizers() returned no optimizer")
        normalized = []
        for sched in schedulers:
            entry = dict(sched) if isinstance(sched, dict) else {"scheduler": sched}
            entry.setdefault("interval", "epoch")
            entry.setdefault("frequency", 1)
            entry.setdefault("monitor", None)
            if entry["interval"] not in ("epoch", "step"):
                raise ValueError(f"lr_scheduler interval={entry['interval']!r} must be 'epoch' or 'step'")
            normalized.append(entry)
        return [self.strategy.setup_optimizer(o) for o in optimizers], normalized

    def _step_schedulers(self, interval: str) -> None:
        counter = self.global_step if interval == "step" else self.current_epoch + 1
        for entry in self._schedulers:
            if entry["interval"] != interval or counter % entry["frequency"]:
                continue
            if entry["monitor"] is not None:
                if entry["monitor"] not in self.callback_metrics:
                    raise KeyError(
                        f"lr_scheduler monitors {entry['monitor']!r}, which was not logged; logged metrics: "
                        f"{sorted(self.callback_metrics)}")
                entry["scheduler"].step(self.callback_metrics[entry["monitor"]])
            else:
                entry["scheduler"].step()

    # ----------------------------------------------------------------- checkpoints
    def _training_state(self, optimizers: list[Any] | None = None) -> dict[str, Any]:
        """Optimizer, scheduler and precision state: live, or as the last spawned workers returned it."""
        optimizers = optimizers if optimizers is not None else getattr(self, "_optimizers", [])
        if not optimizers and getattr(self, "_worker_training_state", None) is not None:
            return self._worker_training_state
        return {
            "optimizer_states": [o.state_dict() for o in optimizers],
            "lr_schedulers": [e["scheduler"].state_dict() for e in getattr(self, "_schedulers", [])],
            "precision": self.precision.state_dict(),
        }

    def _checkpoint_dict(self, model: Module, optimizers: list[Any]) -> dict[str, Any]:
        state = {
            "accelkit_version": __version__,
            "epoch": self.current_epoch,
            "global_step": self.global_step,
            "state_dict": model.state_dict(),
            **self._training_state(optimizers),
            "hyper_parameters": dict(model.hparams),
        }
        model.on_save_checkpoint(state)
        for callback in self.callbacks:
            callback.on_save_checkpoint(self, model, state)
        return state

    def _restore_training_state(self, checkpoint: dict[str, Any]) -> None:
        for optimizer, state in zip(self._optimizers, checkpoint.get("optimizer_states", [])):
            optimizer.load_state_dict(state)
        for entry, state in zip(self._schedulers, checkpoint.get("lr_schedulers", [])):
            entry["scheduler"].load_state_dict(state)
        self.precision.load_state_dict(checkpoint.get("precision", {}))
        self.current_epoch = int(checkpoint["epoch"])
        self.global_step = int(checkpoint["global_step"])

    # ----------------------------------------------------------------- loops
    def _fit(self, model: Module, loaders: dict[str, Any], checkpoint: dict[str, Any] | None) -> None:
        strategy = self.strategy
        self._optimizers, self._schedulers = self._configure_optimizers(model)
        if checkpoint is not None:
            self._restore_training_state(checkpoint)
        train_loader = self._dataloader(model, loaders["train"], "train_dataloader", "fit")
        if train_loader is None:
            raise ValueError(f"no training data: pass train_dataloaders to fit() or define "
                             f"{type(model).__name__}.train_dataloader()")
        val_loader = self._dataloader(model, loaders["val"], "val_dataloader", "validate")
        if self.logger is not None and strategy.is_global_zero and model.hparams:
            self.logger.log_hyperparams(model.hparams)
        self._call("on_fit_start")
        self._call("on_train_start")
        if self._num_batches(train_loader, "fit") == 0:
            warnings.warn("limit_train_batches=0 (or an empty training loader): no training is done.",
                          UserWarning, stacklevel=2)
        else:
            while not self._fit_done():
                sampler = getattr(train_loader, "sampler", None)
                if hasattr(sampler, "set_epoch"):
                    sampler.set_epoch(self.current_epoch)
                ran = self._train_epoch(model, train_loader)
                if val_loader is not None and self.limits["validate"] != 0 and (
                        (self.current_epoch + 1) % self.check_val_every_n_epoch == 0):
                    self._evaluate(model, val_loader, "validate", inside_fit=True)
                self._end_epoch("on_train_epoch_end")
                self._step_schedulers("epoch")
                self.current_epoch += 1
                if self.enable_checkpointing:
                    strategy.save_checkpoint(self._checkpoint_dict(model, self._optimizers), self.checkpoint_path)
                if ran == 0:
                    warnings.warn(f"epoch {self.current_epoch - 1} produced no training batches; stopping.",
                                  UserWarning, stacklevel=2)
                    break
        self._call("on_train_end")
        self._call("on_fit_end")
        return None

    def _fit_done(self) -> bool:
        if self.should_stop:
            return True
        if self.max_steps != -1 and self.global_step >= self.max_steps:
            return True
        return self.max_epochs is not None and self.current_epoch >= self.max_epochs

    def _train_epoch(self, model: Module, loader: Any) -> int:
        """One training epoch; returns the number of batches run. Epoch metrics are published by ``_fit``."""
        strategy, precision = self.strategy, self.precision
        wrapped = self._model
        wrapped.train()
        self._metrics.reset(training=True)
        self._call("on_train_epoch_start")
        limit = self._num_batches(loader, "fit")
        bar = self._progress(limit, f"Epoch {self.current_epoch}", leave=True)
        accumulate = self.accumulate_grad_batches
        ran = 0
        pending = False  # gradients accumulated since the last optimizer step
        try:
            for batch_idx, batch, is_last in self._batches(loader, "fit", limit, lookahead=True):
                ran += 1
                self._metrics.current_batch = batch
                model.on_train_batch_start(batch, batch_idx)
                boundary = (batch_idx + 1) % accumulate == 0 or is_last
                with strategy.no_backward_sync(wrapped, enabled=not boundary):
                    with precision.forward_context():
                        output = self._training_step(wrapped, model, batch, batch_idx)
                    loss = output["loss"] if isinstance(output, dict) else output
                    if loss is not None:
                        if accumulate > 1:
                            loss = loss / accumulate
                        model.on_before_backward(loss)
                        strategy.backward(loss)
                        model.on_after_backward()
                        pending = True
                if boundary and pending:
                    self._optimizer_step(model)
                    self._step_schedulers("step")
                    pending = False
                self._call("on_train_batch_end", output, batch, batch_idx)
                if bar is not None:
                    bar.update(1)
                if boundary and self.global_step % self.log_every_n_steps == 0:
                    self._log_step(bar)
                if self.max_steps != -1 and self.global_step >= self.max_steps or self.should_stop:
                    break
            if pending:  # stopped inside an accumulation window: its gradients must not leak into later steps
                for optimizer in self._optimizers:
                    optimizer.zero_grad(set_to_none=True)
            if bar is not None:  # one read per epoch, so epochs shorter than log_every_n_steps show metrics too
                self._show(bar, self._metrics.read_step(clear=False)[1])
        finally:
            if bar is not None:
                bar.close()
        return ran

    def _end_epoch(self, hook: str) -> dict[str, float]:
        """Publish the epoch's aggregates, run the ``on_*_epoch_end`` hook (which sees them, and whose own
        ``self.log`` calls count as epoch values), then publish what the hook logged. Returns all logged."""
        metrics, reduce = self._metrics, self.strategy.reduce
        logged, shown = metrics.compute_epoch(reduce)
        self._publish(logged, shown, metrics.epoch_aliases)
        done = set(metrics.entries)
        metrics.epoch_end = True
        self._call(hook)
        late, late_shown = metrics.compute_epoch(reduce, exclude=done)
        if late or late_shown:
            self._publish(late, late_shown, metrics.epoch_aliases)
        return {**logged, **late}

    def _training_step(self, wrapped: Any, model: Module, batch: Any, batch_idx: int) -> Any:
        if wrapped is model:
            return model.training_step(batch, batch_idx)
        # Through the wrapper's forward (a StepRouter inside), so a wrapper such as DDP sees the step.
        return wrapped("training_step", batch, batch_idx)

    def _optimizer_step(self, model: Module) -> None:
        strategy, precision = self.strategy, self.precision
        for optimizer in self._optimizers:
            strategy.reduce_gradients(optimizer)
            if self.gradient_clip_val is not None:
                precision.unscale_gradients(optimizer)
                params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
                if self.gradient_clip_algorithm == "norm":
                    torch.nn.utils.clip_grad_norm_(params, self.gradient_clip_val)
                else:
                    torch.nn.utils.clip_grad_value_(params, self.gradient_clip_val)
            model.on_before_optimizer_step(optimizer)
            strategy.optimizer_step(optimizer)
            optimizer.zero_grad(set_to_none=True)
        self.global_step += 1
        strategy.step_end()

    def _log_step(self, bar: Any) -> None:
        logged, shown = self._metrics.read_step()
        if logged and self.logger is not None and self.strategy.is_global_zero:
            self.logger.log_metrics({**logged, "epoch": self.current_epoch}, step=self.global_step)
        self.logged_metrics.update(logged)
        self.callback_metrics.update(logged)
        self.progress_bar_metrics.update(shown)
        self._show(bar)

    def _show(self, bar: Any, latest: dict[str, float] | None = None) -> None:
        """Show the progress-bar metrics (and, for display only, ``latest`` step values) on ``bar``."""
        shown = {**self.progress_bar_metrics, **(latest or {})}
        if bar is not None and shown:
            bar.set_postfix({k: f"{v:.4g}" for k, v in shown.items()}, refresh=False)

    def _publish(self, logged: dict[str, float], shown: dict[str, float],
                 aliases: dict[str, float] | None = None) -> None:
        """Record epoch metrics; ``aliases`` are plain names of metrics also logged per step (``loss`` for
        ``loss_epoch``), visible to callbacks and schedulers but not logged twice."""
        self.logged_metrics.update(logged)
        self.callback_metrics.update(logged)
        self.callback_metrics.update(aliases or {})
        self.progress_bar_metrics.update(shown)
        if logged and self.logger is not None and self.strategy.is_global_zero:
            self.logger.log_metrics({**logged, "epoch": self.current_epoch}, step=self.global_step)

    @torch.no_grad()
    def _evaluate(self, model: Module, loader: Any, stage: str, inside_fit: bool = False) -> dict[str, float]:
        if not inside_fit:
            hook = "val_dataloader" if stage == "validate" else "test_dataloader"
            loader = self._dataloader(model, loader, hook, stage)
            if loader is None:
                raise ValueError(f"no {stage} data: pass dataloaders to {stage}() or define "
                                 f"{type(model).__name__}.{hook}()")
        prefix = "validation" if stage == "validate" else "test"
        wrapped = self._model
        wrapped.eval()
        saved = self._metrics
        self._metrics = MetricStore()
        self._metrics.reset(training=False)
        try:
            self._call(f"on_{prefix}_start")
            self._call(f"on_{prefix}_epoch_start")
            step = getattr(model, f"{prefix if prefix == 'test' else 'validation'}_step")
            limit = self._num_batches(loader, stage)
            bar = self._progress(limit, "Validation" if stage == "validate" else "Testing", leave=not inside_fit)
            try:
                for batch_idx, batch in self._batches(loader, stage, limit):
                    self._metrics.current_batch = batch
                    with self.precision.forward_context():
                        step(batch, batch_idx)
                    if bar is not None:
                        bar.update(1)
            finally:
                if bar is not None:
                    bar.close()
            logged = self._end_epoch(f"on_{prefix}_epoch_end")
        finally:
            self._metrics = saved
        self._call(f"on_{prefix}_end")
        if inside_fit:
            wrapped.train()
        return logged

    @torch.no_grad()
    def _predict(self, model: Module, loader: Any) -> list[Any]:
        loader = self._dataloader(model, loader, "predict_dataloader", "predict")
        if loader is None:
            raise ValueError(f"no prediction data: pass dataloaders to predict() or define "
                             f"{type(model).__name__}.predict_dataloader()")
        if self.world_size > 1:
            warnings.warn(f"predict() with {self.world_size} processes returns the predictions of this process's "
                          "shard only (rank 0's in the caller); use devices=1 for all predictions in one list.",
                          UserWarning, stacklevel=2)
        self._model.eval()
        self._call("on_predict_start")
        predictions = []
        limit = self._num_batches(loader, "predict")
        for batch_idx, batch in self._batches(loader, "predict", limit):
            with self.precision.forward_context():
                predictions.append(ckpt.to_cpu(model.predict_step(batch, batch_idx)))
        self._call("on_predict_end")
        return predictions
