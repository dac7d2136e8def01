"""Find the largest batch size that fits in the device's memory.

:func:`scale_batch_size` sets the batch size the module or DataModule keeps (``batch_size`` by default, or
``hparams.batch_size``), runs ``steps_per_trial`` steps of the chosen stage with loaders built anew from the
``*_dataloader`` methods, and grows or shrinks the batch by what happened:

* ``mode="power"`` doubles the batch size until a trial runs out of memory and keeps the last one that fitted;
* ``mode="binsearch"`` doubles the same way, then bisects between the last size that fitted and the first that
  did not, and keeps the largest that fitted less a safety ``margin`` (5% by default, as in Lightning 2.6).

Whether an error means "out of memory" is the accelerator's call (:meth:`accelkit.Accelerator.is_out_of_memory`),
so every device plugin recognises its own runtime's errors; any other error ends the search and propagates. The
search never grows past ``max_val`` nor past the number of samples in the loaders it reads (a batch cannot be
larger). Afterwards the weights, the Trainer and its settings are as before, and the batch size attribute holds
the size found.
"""

from __future__ import annotations

import gc
import numbers
import warnings
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from accelkit.callbacks.base import Callback
from accelkit.errors import ConfigurationError
from accelkit.tuner.session import (
    TuningSession,
    attribute_holders,
    check_tunable,
    get_attribute,
    is_datamodule,
    set_attribute,
)

if TYPE_CHECKING:
    from accelkit.accelerator import Accelerator
    from accelkit.module.datamodule import DataModule
    from accelkit.module.module import Module
    from accelkit.trainer.properties import Loaders
    from accelkit.trainer.trainer import Trainer
    from accelkit.tuner.session import Holders

#: how the batch size is searched
MODES = ("power", "binsearch")
#: the fraction ``binsearch`` takes off the largest size that fitted, for safety (Lightning's default)
DEFAULT_MARGIN = 0.05


class _TrialWatch(Callback):
    """Notes how many samples the loaders of a trial hold (``None`` when one of them cannot say)."""

    def __init__(self) -> None:
        self.lengths: list[int | None] = []

    @property
    def samples(self) -> int | None:
        if not self.lengths or None in self.lengths:
            return None
        return max(n for n in self.lengths if n is not None)

    def note(self, loaders: Loaders | None) -> None:
        if loaders is None:
            return
        for loader in loaders if isinstance(loaders, (list, tuple)) else [loaders]:
            dataset = getattr(loader, "dataset", None)
            try:
                self.lengths.append(len(dataset) if dataset is not None and not _iterable(dataset) else None)
            except TypeError:
                self.lengths.append(None)

    def on_train_start(self, trainer: Trainer, pl_module: Module) -> None:
        self.note(trainer.train_dataloader)

    def on_validation_start(self, trainer: Trainer, pl_module: Module) -> None:
        self.note(trainer.val_dataloaders)

    def on_test_start(self, trainer: Trainer, pl_module: Module) -> None:
        self.note(trainer.test_dataloaders)

    def on_predict_start(self, trainer: Trainer, pl_module: Module) -> None:
        self.note(trainer.predict_dataloaders)


def _iterable(dataset: object) -> bool:
    from torch.utils.data import IterableDataset

    return isinstance(dataset, IterableDataset)


def is_out_of_memory(accelerator: Accelerator, error: BaseException) -> bool:
    """Whether ``accelerator`` recognises ``error``, or an error it was raised from, as running out of memory."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if accelerator.is_out_of_memory(current):
            return True
        seen.add(id(current))
        current = current.__cause__
    return False


def check_batch_arguments(mode: object, steps_per_trial: object, init_val: object, max_trials: object,
                          margin: object, max_val: object) -> None:
    """Refuse values the search cannot use, naming each; warn about a ``margin`` that ``power`` mode ignores."""
    problems = []
    if mode not in MODES:
        problems.append(f"mode={mode!r}: use 'power' (double until out of memory) or 'binsearch' (double, then "
                        "bisect between the last size that fitted and the first that did not)")
    integers = (("steps_per_trial", steps_per_trial), ("init_val", init_val), ("max_trials", max_trials),
                ("max_val", max_val))
    for name, value in integers:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            problems.append(f"{name}={value!r}: give an int >= 1")
    if not problems and isinstance(init_val, int) and isinstance(max_val, int) and init_val > max_val:  # ints now
        problems.append(f"init_val={init_val} is above max_val={max_val}, the largest batch size to try")
    if not isinstance(margin, numbers.Real) or isinstance(margin, bool) or not 0 <= float(margin) < 1:
        problems.append(f"margin={margin!r}: give the fraction to take off the size binsearch finds, 0 <= margin < 1")
    if problems:
        raise ConfigurationError([f"Tuner.scale_batch_size(): {p}" for p in problems])
    if mode == "power" and margin != DEFAULT_MARGIN:
        warnings.warn(f"Tuner.scale_batch_size(margin={margin!r}): the margin applies to mode='binsearch' only; "
                      "mode='power' keeps the last power of two that fitted", UserWarning, stacklevel=4)


def check_loader_sources(method: str, train_dataloaders: object, dataloaders: object) -> None:
    """The loaders must be rebuilt for every batch size: loaders passed in directly keep their own."""
    given = train_dataloaders if method == "fit" else dataloaders
    if given is None or is_datamodule(given):
        return
    argument = "train_dataloaders" if method == "fit" else "dataloaders"
    hook = {"fit": "train_dataloader", "validate": "val_dataloader", "test": "test_dataloader",
            "predict": "predict_dataloader"}[method]
    raise ConfigurationError(
        f"Tuner.scale_batch_size(method={method!r}) got loaders as {argument}=, and a DataLoader keeps the batch "
        f"size it was built with. Build them in {hook}() of the module or of a DataModule from its batch size "
        f"attribute (self.batch_size or self.hparams.batch_size), and pass the DataModule (datamodule=dm) or nothing")


def _next_size(mode: str, low: int, high: int | None, bound: int) -> int | None:
    """The batch size of the next trial, or ``None`` when the search is over. ``low`` is the largest size that
    fitted (0: none yet), ``high`` the smallest that did not (``None``: none yet), ``bound`` the largest size
    worth trying."""
    if high is None:
        if low >= bound:
            return None  # max_val reached, or one batch already holds every sample
        return min(low * 2, bound)
    if low == 0:
        return high // 2 if high > 1 else 0  # nothing fitted yet: halve (0: not even one sample fits)
    if mode == "power" or high - low <= 1:
        return None
    return (low + high) // 2


def _attempt(session: TuningSession, run_trial: Callable[[], object]) -> bool:
    """Run one trial from the original weights; ``False`` if it ran out of memory."""
    accelerator = session.trainer.accelerator
    session.restore_weights()
    session.reset_counters()
    try:
        run_trial()
    except Exception as error:  # noqa: BLE001 - only out-of-memory errors are kept; the rest propagate
        if not is_out_of_memory(accelerator, error):
            raise
        fits = False
    else:
        fits = True
    session.restore_weights()  # drops the trial's gradients too
    if not fits:
        gc.collect()  # the failed trial's tensors, now that its traceback is gone
        accelerator.teardown()  # a device with a caching allocator hands the freed memory back
    return fits


def _search(session: TuningSession, run_trial: Callable[[], object], watch: _TrialWatch, holders: Holders,
            name: str, mode: str, init_val: int, max_trials: int, max_val: int) -> int:
    low, high, size = 0, None, init_val
    for trial in range(1, max_trials + 1):
        set_attribute(holders, name, size)
        fits = _attempt(session, run_trial)
        low, high = (size, high) if fits else (low, size)
        print(f"accelkit: scale_batch_size: trial {trial}: {name}={size} "
              f"{'fits' if fits else 'runs out of memory'}")
        samples = watch.samples
        next_size = _next_size(mode, low, high, max_val if samples is None else min(samples, max_val))
        if next_size == 0:
            raise RuntimeError(f"Tuner.scale_batch_size(): even {name}=1 runs out of memory on accelerator "
                               f"{session.trainer.accelerator.name!r}; the model itself needs a smaller footprint "
                               "(a lower precision, a sharding strategy, or a smaller model)")
        if next_size is None:
            break
        size = next_size
    else:
        if low == 0:
            raise RuntimeError(f"Tuner.scale_batch_size(): no batch size fitted in max_trials={max_trials} trials "
                               f"(the smallest tried was {high}); allow more trials or start lower (init_val)")
        print(f"accelkit: scale_batch_size: max_trials={max_trials} reached; larger batch sizes were not tried")
    samples = watch.samples
    return low if samples is None else min(low, samples)


def scale_batch_size(trainer: Trainer, model: Module, train_dataloaders: Iterable[object] | DataModule | None = None,
                     val_dataloaders: Iterable[object] | None = None,
                     dataloaders: Iterable[object] | DataModule | None = None, datamodule: DataModule | None = None,
                     method: str = "fit", mode: str = "power",
                     steps_per_trial: int = 3, init_val: int = 2, max_trials: int = 25,
                     batch_arg_name: str = "batch_size", margin: float = DEFAULT_MARGIN,
                     max_val: int = 8192) -> int | None:
    """Search the batch size on ``trainer`` (see :meth:`accelkit.tuner.Tuner.scale_batch_size`)."""
    check_tunable(trainer, "scale_batch_size")
    check_batch_arguments(mode, steps_per_trial, init_val, max_trials, margin, max_val)
    check_loader_sources(method, train_dataloaders, dataloaders)
    given = train_dataloaders if method == "fit" else dataloaders
    if is_datamodule(given):
        datamodule = given
    if trainer.fast_dev_run:
        warnings.warn(f"Tuner.scale_batch_size() skipped: fast_dev_run={trainer.fast_dev_run!r} runs every loop for "
                      "a batch or a few only; returns None", UserWarning, stacklevel=3)
        return None
    holders = attribute_holders(batch_arg_name, model, datamodule)
    if not holders:
        raise ConfigurationError(
            f"Tuner.scale_batch_size(batch_arg_name={batch_arg_name!r}): no {batch_arg_name!r} in "
            f"{type(model).__name__}, its hparams" + (f", {type(datamodule).__name__} or its hparams"
                                                     if datamodule is not None else "")
            + f"; keep the batch size there (self.{batch_arg_name} = ... or save_hyperparameters()) and build the "
            "loaders from it, or name the attribute with batch_arg_name=")
    original = get_attribute(holders, batch_arg_name)
    watch = _TrialWatch()
    limit = {"fit": "validate"}.get(method, method)
    found = None
    with TuningSession(trainer, model, watch) as session:
        session.configure(max_steps=steps_per_trial, max_epochs=-1, num_sanity_val_steps=steps_per_trial,
                          val_check_interval=1.0, check_val_every_n_epoch=1, limits={limit: steps_per_trial})
        try:
            found = _search(session, _trial(trainer, model, method, val_dataloaders, datamodule), watch, holders,
                            batch_arg_name, mode, init_val, max_trials, max_val)
            if mode == "binsearch" and margin:
                found = max(1, int(found * (1 - margin)))
                print(f"accelkit: scale_batch_size: {batch_arg_name}={found} after the {margin:.0%} safety margin")
        finally:
            set_attribute(holders, batch_arg_name, original if found is None else found)
    print(f"accelkit: scale_batch_size: {batch_arg_name}={found} "
          f"({', '.join(label for label, _ in holders)}); weights and Trainer restored.")
    return found


def _trial(trainer: Trainer, model: Module, method: str, val_dataloaders: Iterable[object] | None,
           datamodule: DataModule | None) -> Callable[[], object]:
    if method == "fit":
        return lambda: trainer.fit(model, val_dataloaders=val_dataloaders, datamodule=datamodule)
    if method == "validate":
        return lambda: trainer.validate(model, datamodule=datamodule, verbose=False)
    if method == "test":
        return lambda: trainer.test(model, datamodule=datamodule, verbose=False)
    return lambda: trainer.predict(model, datamodule=datamodule, return_predictions=False)
