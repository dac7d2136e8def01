"""What the learning-rate finder and the batch-size scaler share.

Both run short, bounded stages through the Trainer's public entry points (``fit``, ``validate``, ...) with a few
Trainer settings changed for the occasion, and leave the Trainer and the module as they found them:

* :func:`check_tunable` refuses what cannot be tuned here (several processes, a wrong ``method``);
* :class:`TuningSession` changes the Trainer's settings for the trials (through
  :meth:`~accelkit.Trainer.replace_settings`) and puts them back (:meth:`~accelkit.Trainer.restore`), with the
  module's weights, its train/eval modes and ``requires_grad`` flags;
* :func:`attribute_holders` / :func:`set_attribute` find and set a tuned value (``lr``, ``batch_size``) where the
  user keeps it: on the module, in ``module.hparams``, on the DataModule or in its ``hparams``.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import TYPE_CHECKING, TypeGuard

import torch

from accelkit.errors import ConfigurationError

if TYPE_CHECKING:
    from accelkit.callbacks.base import Callback
    from accelkit.module.datamodule import DataModule
    from accelkit.module.module import Module
    from accelkit.trainer.trainer import Trainer, TrainerSnapshot

#: the stages a tuner's trials can run
METHODS = ("fit", "validate", "test", "predict")


def check_tunable(trainer: Trainer, what: str) -> None:
    """Refuse a Trainer whose strategy runs several processes (or starts its own): the trials run one after the
    other in this process, and their outcome (an out-of-memory error, the loss of each step) must be seen here."""
    strategy = trainer.strategy
    if strategy.world_size > 1 or strategy.launches_workers:
        name = strategy.name or type(strategy).__name__
        started = " started by the strategy itself" if strategy.launches_workers else ""
        raise ConfigurationError(
            f"Tuner.{what}() cannot run under strategy {name!r} ({strategy.world_size} process(es){started}): the "
            "tuner runs its trials one after the other in this process. Tune with a single-process Trainer "
            "(strategy='auto' or 'single_device' and devices=1 on the same accelerator), then give the value it "
            "finds to the Trainer that runs the distributed fit")


def check_method(method: object, train_dataloaders: object, val_dataloaders: object, dataloaders: object,
                 what: str) -> None:
    """``method`` is one of :data:`METHODS`, and the loader arguments given are the ones that method reads."""
    if method not in METHODS:
        raise ValueError(f"Tuner.{what}(method={method!r}): use one of {', '.join(map(repr, METHODS))}")
    if method == "fit" and dataloaders is not None:
        raise ConfigurationError(f"Tuner.{what}(method='fit') trains on train_dataloaders (and validates on "
                                 "val_dataloaders); dataloaders= is for method='validate', 'test' or 'predict'")
    if method != "fit" and (train_dataloaders is not None or val_dataloaders is not None):
        given = [n for n, v in (("train_dataloaders", train_dataloaders), ("val_dataloaders", val_dataloaders))
                 if v is not None]
        raise ConfigurationError(f"Tuner.{what}(method={method!r}) does not read {' or '.join(given)}; pass the "
                                 f"loaders for {method} as dataloaders=")


def is_datamodule(value: object) -> TypeGuard[DataModule]:
    """Whether ``value`` is a DataModule (``fit(model, dm)`` passes one where the training loaders go)."""
    from accelkit.module import DataModule

    return isinstance(value, DataModule)


# --------------------------------------------------------------------------------------------- tuned values
#: where a tuned value is kept: ``(description, holder)`` pairs, each holder an object (the module, the DataModule)
#: whose attribute it is, or a mapping (their ``hparams``) whose entry it is
Holders = list[tuple[str, object]]


def attribute_holders(name: str, model: object, datamodule: object = None) -> Holders:
    """Where ``name`` is kept, as ``(description, holder)`` pairs: the module's attribute, its ``hparams`` entry,
    the DataModule's attribute and its ``hparams`` entry (every one that exists, in that order)."""
    found: Holders = []
    for label, owner in (("model", model), ("datamodule", datamodule)):
        if owner is None:
            continue
        if _has_attribute(owner, name):
            found.append((f"{label}.{name}", owner))
        hparams = getattr(owner, "hparams", None) if _has_attribute(owner, "hparams") else None
        if isinstance(hparams, Mapping) and name in hparams:
            found.append((f"{label}.hparams.{name}", hparams))
    return found


def _has_attribute(owner: object, name: str) -> bool:
    try:
        getattr(owner, name)
    except AttributeError:
        return False
    return True


def get_attribute(holders: Holders, name: str) -> object:
    """The value of the first holder."""
    holder = holders[0][1]
    return holder[name] if isinstance(holder, Mapping) else getattr(holder, name)


def set_attribute(holders: Holders, name: str, value: object) -> None:
    """Set ``name`` to ``value`` in every holder (all of them, so the module and its ``hparams`` agree)."""
    for _, holder in holders:
        if isinstance(holder, MutableMapping):
            holder[name] = value
        else:
            setattr(holder, name, value)


# --------------------------------------------------------------------------------------------- the session
class TuningSession:
    """Run trials on ``trainer`` and ``model``, then put both back as they were.

    On entry, everything the Trainer holds is remembered (:meth:`~accelkit.Trainer.snapshot`: its settings,
    callbacks and loggers, its run state's counters, metrics and the optimizers of an earlier fit), as are the
    module's weights (a copy on the host), train/eval modes and ``requires_grad`` flags, and its ``trainer``. The
    trials then run with the settings of :meth:`configure` (no loggers, no progress bar or summary, only the
    tuner's own callback, the module's ``configure_callbacks()`` not consulted) and their own step and epoch
    counters. On exit, all of it is put back (:meth:`~accelkit.Trainer.restore`), whether the trials succeeded or
    raised. :meth:`restore_weights` puts the weights back between trials.
    """

    def __init__(self, trainer: Trainer, model: Module, callback: Callback) -> None:
        self.trainer, self.model, self.callback = trainer, model, callback
        self._snapshot: TrainerSnapshot | None = None
        self._weights: dict[str, torch.Tensor] = {}
        self._modes: list[tuple[torch.nn.Module, bool]] = []
        self._grads: list[tuple[torch.nn.Parameter, bool]] = []
        self._module_trainer: Trainer | None = None
        self._shadowed: object = None

    def __enter__(self) -> TuningSession:
        trainer, model = self.trainer, self.model
        self._snapshot = trainer.snapshot()
        self._module_trainer = model.trainer
        # on the host, so the copy takes no device memory from the trials (lazy parameters have nothing to copy)
        self._weights = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()
                         if not torch.nn.parameter.is_lazy(v)}
        self._modes = [(m, m.training) for m in model.modules()]
        self._grads = [(p, p.requires_grad) for p in model.parameters()]
        # The module's own callbacks (configure_callbacks) stay out of the trials, as the Trainer's do.
        self._shadowed = vars(model).get("configure_callbacks")
        object.__setattr__(model, "configure_callbacks", _no_callbacks)
        trainer.loggers = []
        trainer.callbacks = [self.callback]
        trainer.replace_settings(enable_progress_bar=False, enable_model_summary=False, max_time=None,
                                 min_epochs=None, min_steps=None)
        return self

    def configure(self, *, max_steps: int, max_epochs: int, num_sanity_val_steps: int,
                  val_check_interval: int | float | None = None, check_val_every_n_epoch: int | None = None,
                  limits: dict[str, int] | None = None) -> None:
        """The Trainer's settings for the trials: their length, the sanity check, when they validate (``None``:
        as the Trainer says) and the batch limits of some stages (``{"validate": 3}``: ``limit_val_batches=3``);
        the step and epoch counters start again from zero."""
        trainer = self.trainer
        limits = limits or {}
        unknown = sorted(set(limits) - set(trainer.limits))
        if unknown:
            raise ValueError(f"TuningSession.configure(limits=...): no stage {unknown[0]!r}; use "
                             f"{', '.join(map(repr, trainer.limits))}")
        given = {**trainer.limits, **limits}
        trainer.replace_settings(
            max_steps=max_steps, max_epochs=max_epochs, num_sanity_val_steps=num_sanity_val_steps,
            val_check_interval=trainer.val_check_interval if val_check_interval is None else val_check_interval,
            check_val_every_n_epoch=(trainer.check_val_every_n_epoch if check_val_every_n_epoch is None
                                     else check_val_every_n_epoch),
            limit_train_batches=given["fit"], limit_val_batches=given["validate"], limit_test_batches=given["test"],
            limit_predict_batches=given["predict"])
        self.reset_counters()

    def reset_counters(self) -> None:
        """Each trial starts at step 0 of epoch 0 (``max_steps`` counts from there), no stop requested."""
        self.trainer.run_state.progress.load_state_dict({"epoch": 0, "global_step": 0})
        self.trainer.should_stop = False

    def restore_weights(self) -> None:
        """The module's weights as they were on entry; no gradient is kept."""
        with torch.no_grad():
            # not strict: a layer that configure_model() created during a trial has no saved weights
            self.model.load_state_dict(self._weights, strict=False)
        for param in self.model.parameters():
            param.grad = None

    def __exit__(self, *exc: object) -> None:
        trainer, model = self.trainer, self.model
        try:
            self.restore_weights()
            for module, training in self._modes:
                module.training = training
            for param, requires_grad in self._grads:
                param.requires_grad_(requires_grad)
        finally:
            if self._shadowed is None:
                vars(model).pop("configure_callbacks", None)
            else:
                object.__setattr__(model, "configure_callbacks", self._shadowed)
            model.trainer = self._module_trainer
            if self._snapshot is not None:
                trainer.restore(self._snapshot)


def _no_callbacks() -> list[Callback]:
    return []
