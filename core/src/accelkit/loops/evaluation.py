"""The evaluation loops: validation (inside fit, the sanity check, or ``validate``), test and prediction."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch

from accelkit.checkpoint import files as ckpt
from accelkit.loops.hooks import accepts_positional
from accelkit.loops.metrics import MetricStore
from accelkit.strategies.sampler import set_epoch

if TYPE_CHECKING:
    from accelkit.trainer.trainer import Trainer

_NAMES = {"validate": "validation", "test": "test", "sanity_check": "validation"}
#: the :class:`~accelkit.loops.state.Progress` field holding each stage's batches per loader (Lightning's names)
class EvaluationLoop:
    """Runs ``validation_step`` or ``test_step`` over one or several loaders, with the batch and epoch hooks.

    :param trainer: the Trainer.
    :param stage: ``"validate"``, ``"test"`` or ``"sanity_check"`` (validation whose metrics are discarded).
    """

    def __init__(self, trainer: Trainer, stage: str) -> None:
        self.trainer, self.stage = trainer, stage
        self.prefix = _NAMES[stage]

    def run(self, loaders: list[Iterable[object]], limits: list[int | None], inside_fit: bool = False,
            zero_grad: bool = False) -> list[dict[str, float]]:
        """Evaluate every batch of ``loaders`` (up to ``limits``); returns one metrics dict per loader."""
        trainer = self.trainer
        hooks, data, module = trainer.run_state.active_hooks, trainer.run_state.active_data, trainer.lightning_module
        prefix = self.prefix
        if sum(n if n is not None else 1 for n in limits) == 0:
            return [{} for _ in loaders]
        trainer.run_state.progress.record_batches(self.stage, limits)  # what the progress bar counts to
        step = getattr(module, f"{prefix}_step")
        arity = step_arity(step, f"{prefix}_step", len(loaders))
        # Every sub-module's mode, restored afterwards unless the Module overrides on_*_model_train (as Lightning
        # does: a sub-module the user froze in eval mode stays so).
        modes = [(m, m.training) for m in trainer.model.modules()]
        was_training = trainer.model.training
        if zero_grad:
            hooks.module_default(f"on_{prefix}_model_zero_grad")()
        hooks.module_default(f"on_{prefix}_model_eval")()
        saved = trainer.run_state.metrics
        trainer.run_state.active_publisher.publish()  # what the training steps logged stays visible meanwhile
        trainer.run_state.metrics = store = MetricStore(training=False)
        store.reduce = trainer.strategy.reduce
        store.device = trainer.strategy.root_device
        store.num_dataloaders = len(loaders)
        grad_off = _grad_off(trainer, inside_fit)
        results: list[dict[str, float]] = []
        publish = self.stage != "sanity_check"
        log_steps = publish and bool(trainer.loggers)  # per-step values to the loggers (not the sanity check's)
        try:
            with grad_off:
                with store.epoch_level():
                    hooks.call(f"on_{prefix}_start")
                    hooks.call(f"on_{prefix}_epoch_start")
                start_cbs = hooks.callback_plan(f"on_{prefix}_batch_start")
                start_m = hooks.module_hook(f"on_{prefix}_batch_start")
                end_cbs = hooks.callback_plan(f"on_{prefix}_batch_end")
                end_m = hooks.module_hook(f"on_{prefix}_batch_end")
                forward_context = trainer.precision.forward_context
                for dl_idx, (loader, limit) in enumerate(zip(loaders, limits, strict=True)):
                    set_epoch(loader, trainer.current_epoch)  # as Lightning does for evaluation loaders too
                    if dl_idx and publish:
                        trainer.run_state.active_publisher.publish_loader(dl_idx - 1)
                    store.dataloader_idx = dl_idx
                    extra = (dl_idx,) if len(loaders) > 1 else ()
                    for batch_idx, batch in data.batches(loader, "validate" if prefix == "validation"
                                                         else "test", limit, dl_idx):
                        store.current_batch = batch
                        for fn in start_cbs:
                            fn(batch, batch_idx, *extra)
                        if start_m is not None:
                            start_m(batch, batch_idx, *extra)
                        with forward_context():
                            output = step(*(batch, batch_idx, dl_idx)[:arity])
                        for fn in end_cbs:
                            fn(output, batch, batch_idx, *extra)
                        if end_m is not None:
                            end_m(output, batch, batch_idx, *extra)
                        if log_steps:
                            trainer.run_state.active_publisher.log_eval_step(dl_idx)
                store.dataloader_idx = 0
                # the sanity check's values reach callback_metrics (its on_validation_end sees them, as in
                # Lightning) but no logger, and the fit clears them when the check ends
                logged = trainer.run_state.active_publisher.end_epoch(hooks, f"on_{prefix}_epoch_end",
                                                                      to_loggers=publish)
                hooks.call(f"on_{prefix}_end")
        finally:
            store.reset_metric_objects()  # the next validation (or the next epoch's) starts them empty
            trainer.run_state.metrics = saved
        if was_training:
            train_hook = hooks.module_hook(f"on_{prefix}_model_train")
            if train_hook is not None:
                train_hook()
            else:
                for submodule, mode in modes:
                    submodule.training = mode
        for dl_idx in range(len(loaders)):
            suffix = f"/dataloader_idx_{dl_idx}"
            if len(loaders) == 1:
                results.append({k: float(v) for k, v in logged.items()})
            else:
                results.append({k: float(v) for k, v in logged.items()
                                if k.endswith(suffix) or "/dataloader_idx_" not in k})
        return results


def step_arity(step: Callable[..., object], name: str, count: int) -> int:
    """How many of ``(batch, batch_idx, dataloader_idx)`` to pass to an evaluation or prediction step: as in
    Lightning, ``validation_step(self, batch)`` gets the batch alone, and ``dataloader_idx`` goes only where there
    are several loaders (:func:`check_dataloader_idx`'s errors where the signature disagrees)."""
    if check_dataloader_idx(step, name, count):
        return 3
    return 2 if accepts_positional(step, 2) else 1


def check_dataloader_idx(step: Callable[..., object], name: str, count: int) -> bool:
    """Whether to pass ``dataloader_idx`` to ``step`` (several loaders); Lightning's errors where the signature
    and the number of loaders disagree."""
    import inspect

    takes = accepts_positional(step, 3)
    if count > 1 and not takes:
        raise TypeError(f"{name} runs over {count} loaders but takes no dataloader_idx: add `dataloader_idx=0` to "
                        f"its signature")
    if count == 1 and takes:
        try:
            params = list(inspect.signature(step).parameters.values())
        except (TypeError, ValueError):
            return False
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(positional) >= 3 and positional[2].default is inspect.Parameter.empty:
            raise TypeError(f"{name} requires dataloader_idx but there is only one loader: give it a default "
                            "(`dataloader_idx=0`)")
    return count > 1


class PredictionLoop:
    """Runs ``predict_step`` over one or several loaders with the prediction hooks (``trainer.predict_loop``).

    What prediction writers (:class:`~accelkit.callbacks.BasePredictionWriter`) read, under Lightning's names:
    :attr:`current_batch_indices`, :attr:`epoch_batch_indices`, :attr:`predictions`. Predictions are kept
    when the run returns them or a writer writes at the epoch end; batch indices only while there is a writer.
    """

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        #: whether the run returns its predictions (``trainer.predict(return_predictions=...)``)
        self.return_predictions = True
        #: dataset indices of the samples of the batch being predicted (empty without a prediction writer)
        self.current_batch_indices: list[int] = []
        #: per loader, per batch, the dataset indices (during the run, with a prediction writer)
        self.epoch_batch_indices: list[list[list[int]]] = []
        self._predictions: list[list[object]] = []

    @property
    def predictions(self) -> Any:
        """The predictions kept (on the CPU): one list per loader, a flat list when there is one loader (``Any``,
        as Lightning's: what ``predict_step`` returned, which the user reads)."""
        if not self._predictions:
            return []
        return self._predictions[0] if len(self._predictions) == 1 else self._predictions

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()  # a Trainer sent to spawned workers does not carry the last run's outputs
        state.update(_predictions=[], epoch_batch_indices=[], current_batch_indices=[])
        return state

    def run(self, loaders: list[Iterable[object]], limits: list[int | None], return_predictions: bool) -> object:
        """Predictions per loader (a flat list for one loader), on the CPU; ``None`` without
        ``return_predictions``."""
        from accelkit.loops.batch_indices import track_batch_indices

        trainer = self.trainer
        hooks, data, module = trainer.run_state.active_hooks, trainer.run_state.active_data, trainer.lightning_module
        writers = trainer.prediction_writer_callbacks
        keep = return_predictions or any(w.interval.on_epoch for w in writers)
        self.return_predictions = return_predictions
        self._predictions, self.epoch_batch_indices, self.current_batch_indices = [], [], []
        hooks.module_default("on_predict_model_eval")()
        trainer.run_state.progress.record_batches("predict", limits)  # what the progress bar counts to
        arity = step_arity(module.predict_step, "predict_step", len(loaders))
        with _grad_off(trainer, inside_fit=False):
            hooks.call("on_predict_start")
            hooks.call("on_predict_epoch_start")
            for dl_idx, (loader, limit) in enumerate(zip(loaders, limits, strict=True)):
                extra = (dl_idx,) if len(loaders) > 1 else ()
                predictions: list[object] = []
                indices: list[list[int]] = []
                self._predictions.append(predictions)
                self.epoch_batch_indices.append(indices)
                if writers:
                    loader, indices_of = track_batch_indices(loader, f"predict loader {dl_idx}")
                for batch_idx, batch in data.batches(loader, "predict", limit, dl_idx):
                    if writers:
                        self.current_batch_indices = indices_of(batch_idx)
                        indices.append(self.current_batch_indices)
                    hooks.call("on_predict_batch_start", batch, batch_idx, *extra)
                    with trainer.precision.forward_context():
                        predict_step: Callable[..., Any] = module.predict_step  # (takes 1 to 3 arguments)
                        out = predict_step(*(batch, batch_idx, dl_idx)[:arity])
                    hooks.call("on_predict_batch_end", out, batch, batch_idx, *extra)
                    if keep:
                        predictions.append(ckpt.to_cpu(out))
            hooks.call("on_predict_epoch_end")
            result = self.predictions if return_predictions else None
            if not return_predictions:  # kept for the writers only (Lightning's on_predict_end)
                self._predictions = []
            self.epoch_batch_indices, self.current_batch_indices = [], []
            hooks.call("on_predict_end")
        return result


def _grad_off(trainer: Trainer, inside_fit: bool) -> torch.inference_mode | torch.no_grad:
    """``torch.inference_mode()`` where the Trainer asks and the accelerator allows it, else ``torch.no_grad()``
    (always inside fit: tensors made under inference mode could not be used by training afterwards)."""
    if trainer.inference_mode and not inside_fit and trainer.accelerator.supports_inference_mode:
        return torch.inference_mode()
    return torch.no_grad()
