"""A Module and a Callback that record every Lightning 2.x hook the Trainer calls, in call (entry) order.

Both write into one :class:`HookLog`. An entry is a string such as ``"on_train_batch_start(batch_idx=0)"`` or
``"Callback.setup(stage='fit')"``: the hook's name (callback hooks prefixed ``Callback.``) and the arguments
that identify the call. Every hook calls the base implementation, so the run behaves as without recording.

In spawned workers the Module and the Callback arrive as pickled copies; their logs are one object again in
each process (see :meth:`HookLog.__reduce__`), and at ``teardown`` each rank writes ``rank<N>.json`` into the
log's ``dump_dir`` (:meth:`HookLog.read_dumps`). Calls made in the launching process stay in the original log.

``python -c "from helpers.hook_recorder import main; main()" fit-xla OUT.json`` runs :func:`fit_and_dump` in a
process of its own (the XLA test: torch_xla must never be imported by the pytest process).
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit

_ABSENT: Any = type("_Absent", (), {"__repr__": lambda self: "<absent>"})()
_LOGS: dict[tuple[str, int], HookLog] = {}


def call(name: str, **args: Any) -> str:
    """The log entry of one hook call: ``name(arg=value, ...)`` with ``repr`` values, in the given order."""
    return f"{name}({', '.join(f'{k}={v!r}' for k, v in args.items())})"


def _shared_log(log_id: str, dump_dir: str | None) -> HookLog:
    """The log with ``log_id`` in this process, created empty the first time a worker unpickles it."""
    key = (log_id, os.getpid())
    if key not in _LOGS:
        _LOGS[key] = HookLog(dump_dir, log_id=log_id)
    return _LOGS[key]


class HookLog:
    """The hook calls of one run (``calls``) and any argument that differs from Lightning's (``problems``).

    :param dump_dir: where ``dump(rank)`` writes ``rank<N>.json`` (``None``: nothing is written).
    """

    def __init__(self, dump_dir: str | os.PathLike | None = None, log_id: str | None = None) -> None:
        self.id = log_id or uuid.uuid4().hex
        self.dump_dir = None if dump_dir is None else str(dump_dir)
        self.calls: list[str] = []
        self.problems: list[str] = []
        #: what the run showed besides its calls (``"model"``: the class of ``trainer.model`` at teardown)
        self.facts: dict[str, Any] = {}
        self._rank: int | None = None
        _LOGS[(self.id, os.getpid())] = self

    def __reduce__(self) -> tuple:
        # Pickled copies of a Module and a Callback that share a log share it again after unpickling.
        return (_shared_log, (self.id, self.dump_dir))

    def add(self, name: str, **args: Any) -> None:
        """Append ``call(name, **args)`` (and rewrite the dump when a call comes after ``teardown`` wrote it)."""
        self.calls.append(call(name, **args))
        if self._rank is not None:
            self.dump(self._rank)

    def problem(self, text: str) -> None:
        """Note an argument that is not what Lightning passes."""
        self.problems.append(text)
        if self._rank is not None:
            self.dump(self._rank)

    def dump(self, rank: int) -> None:
        """Write ``{"calls", "problems", "facts", "pid"}`` to ``dump_dir/rank<rank>.json`` (if ``dump_dir`` is
        set)."""
        if self.dump_dir is not None:
            self._rank = rank
            payload = {"calls": self.calls, "problems": self.problems, "facts": self.facts, "pid": os.getpid()}
            (Path(self.dump_dir) / f"rank{rank}.json").write_text(json.dumps(payload, indent=1))

    @staticmethod
    def read_dumps(dump_dir: str | os.PathLike) -> dict[int, dict[str, Any]]:
        """``{rank: payload}`` of every ``rank<N>.json`` in ``dump_dir``."""
        return {int(p.stem[4:]): json.loads(p.read_text()) for p in sorted(Path(dump_dir).glob("rank*.json"))}


def _keys(outputs: Any) -> Any:
    """What the log shows of a step's ``outputs``: the sorted keys of a dict, else the type name."""
    return sorted(outputs) if isinstance(outputs, dict) else type(outputs).__name__


def _plain(value: Any) -> Any:
    """A string enum (Lightning passes ``TrainerFn.FITTING`` for ``"fit"``) as its plain value."""
    return getattr(value, "value", value)


def _idx(args: dict[str, Any], dataloader_idx: Any) -> dict[str, Any]:
    """``args`` plus ``dataloader_idx`` only when the caller passed one (Lightning omits it for one loader)."""
    return args if dataloader_idx is _ABSENT else {**args, "dataloader_idx": dataloader_idx}


def _data(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


class HookRecorderModule(accelkit.Module):
    """A linear regression whose every hook logs itself into ``hook_log``.

    :param hook_log: the shared log.
    :param train_batches: training batches per epoch on each rank; ``val_batches``, ``test_batches``,
        ``predict_batches`` likewise (the loaders hold ``batches * batch_size * world_size`` samples).
    :param stop_at: ``(epoch, batch_idx)`` at which ``on_train_batch_start`` returns ``-1``.
    :param fail_at: ``(epoch, batch_idx)`` at which ``training_step`` raises ``ValueError``.
    """

    def __init__(self, hook_log: HookLog, train_batches: int = 2, val_batches: int = 1, test_batches: int = 1,
                 predict_batches: int = 1, batch_size: int = 2, stop_at: tuple[int, int] | None = None,
                 fail_at: tuple[int, int] | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(4, 1)
        self.hook_log = hook_log
        self.batches = {"train": train_batches, "val": val_batches, "test": test_batches, "predict": predict_batches}
        self.batch_size, self.stop_at, self.fail_at = batch_size, stop_at, fail_at

    def _log(self, name: str, **args: Any) -> None:
        self.hook_log.add(name, **args)

    def _loader(self, split: str, seed: int) -> DataLoader:
        world = self.trainer.world_size if self.trainer is not None else 1
        return DataLoader(_data(self.batches[split] * self.batch_size * world, seed), batch_size=self.batch_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def _loss(self, batch: Any) -> torch.Tensor:
        x, y = batch
        return F.mse_loss(self(x), y)

    # ------------------------------------------------------------------ steps and configuration
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        self._log("training_step", batch_idx=batch_idx)
        if self.fail_at == (self.current_epoch, batch_idx):
            raise ValueError(f"deliberate failure at batch {batch_idx}")
        return self._loss(batch)

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: Any = _ABSENT) -> Any:
        self._log("validation_step", **_idx({"batch_idx": batch_idx}, dataloader_idx))
        return {"x": self._loss(batch)}

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: Any = _ABSENT) -> Any:
        self._log("test_step", **_idx({"batch_idx": batch_idx}, dataloader_idx))
        return {"y": self._loss(batch)}

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: Any = _ABSENT) -> Any:
        self._log("predict_step", **_idx({"batch_idx": batch_idx}, dataloader_idx))
        return self(batch[0])

    def configure_optimizers(self) -> Any:
        self._log("configure_optimizers")
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]

    def configure_callbacks(self) -> Any:
        self._log("configure_callbacks")
        return super().configure_callbacks()

    def configure_model(self) -> None:
        self._log("configure_model")
        super().configure_model()

    # ------------------------------------------------------------------ DataHooks
    def prepare_data(self) -> None:
        self._log("prepare_data")
        super().prepare_data()

    def setup(self, stage: str) -> None:
        self._log("setup", stage=_plain(stage))
        super().setup(stage)

    def teardown(self, stage: str) -> None:
        self._log("teardown", stage=_plain(stage))
        super().teardown(stage)
        if self.trainer is not None:
            self.hook_log.facts["model"] = type(self.trainer.model).__name__
        self.hook_log.dump(self.trainer.global_rank if self.trainer is not None else 0)

    def train_dataloader(self) -> Any:
        self._log("train_dataloader")
        return self._loader("train", 0)

    def val_dataloader(self) -> Any:
        self._log("val_dataloader")
        return self._loader("val", 1)

    def test_dataloader(self) -> Any:
        self._log("test_dataloader")
        return self._loader("test", 2)

    def predict_dataloader(self) -> Any:
        self._log("predict_dataloader")
        return self._loader("predict", 3)

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        self._log("on_before_batch_transfer", dataloader_idx=dataloader_idx)
        return super().on_before_batch_transfer(batch, dataloader_idx)

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        self._log("transfer_batch_to_device", device=torch.device(device).type, dataloader_idx=dataloader_idx)
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        self._log("on_after_batch_transfer", dataloader_idx=dataloader_idx)
        if batch[0].device.type != self.device.type:
            self.hook_log.problem(f"on_after_batch_transfer: batch on {batch[0].device}, module on {self.device}")
        return super().on_after_batch_transfer(batch, dataloader_idx)

    # ------------------------------------------------------------------ CheckpointHooks
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self._log("on_save_checkpoint")
        if "state_dict" not in checkpoint:
            self.hook_log.problem("on_save_checkpoint: the checkpoint has no 'state_dict' yet")
        super().on_save_checkpoint(checkpoint)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self._log("on_load_checkpoint")
        super().on_load_checkpoint(checkpoint)

    # (the hooks without arguments are generated after the class: see _MODULE_PHASE_HOOKS)

    # ------------------------------------------------------------------ ModelHooks: batches
    def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
        self._log("on_train_batch_start", batch_idx=batch_idx)
        return -1 if self.stop_at == (self.current_epoch, batch_idx) else None

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._log("on_train_batch_end", outputs=_keys(outputs), batch_idx=batch_idx)

    def on_validation_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: Any = _ABSENT) -> None:
        self._log("on_validation_batch_start", **_idx({"batch_idx": batch_idx}, dataloader_idx))

    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: Any = _ABSENT) -> None:
        self._log("on_validation_batch_end", **_idx({"outputs": _keys(outputs), "batch_idx": batch_idx},
                                                    dataloader_idx))

    def on_test_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: Any = _ABSENT) -> None:
        self._log("on_test_batch_start", **_idx({"batch_idx": batch_idx}, dataloader_idx))

    def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: Any = _ABSENT) -> None:
        self._log("on_test_batch_end", **_idx({"outputs": _keys(outputs), "batch_idx": batch_idx}, dataloader_idx))

    def on_predict_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: Any = _ABSENT) -> None:
        self._log("on_predict_batch_start", **_idx({"batch_idx": batch_idx}, dataloader_idx))

    def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: Any = _ABSENT) -> None:
        self._log("on_predict_batch_end", **_idx({"outputs": _keys(outputs), "batch_idx": batch_idx},
                                                 dataloader_idx))

    # ------------------------------------------------------------------ ModelHooks: optimization
    def on_before_zero_grad(self, optimizer: Any) -> None:
        self._log("on_before_zero_grad")

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        self._log("optimizer_zero_grad", epoch=epoch, batch_idx=batch_idx)
        super().optimizer_zero_grad(epoch, batch_idx, optimizer)

    def on_before_backward(self, loss: torch.Tensor) -> None:
        self._log("on_before_backward")
        if not (isinstance(loss, torch.Tensor) and loss.requires_grad):
            self.hook_log.problem(f"on_before_backward: loss is not a tensor that requires grad: {loss!r}")

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        self._log("backward")
        super().backward(loss, *args, **kwargs)

    def on_after_backward(self) -> None:
        self._log("on_after_backward")

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        self._log("on_before_optimizer_step")
        if not hasattr(optimizer, "param_groups"):
            self.hook_log.problem(f"on_before_optimizer_step: not an optimizer: {optimizer!r}")

    def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: Any = None,
                                    gradient_clip_algorithm: Any = None) -> None:
        algorithm = _plain(gradient_clip_algorithm)
        self._log("configure_gradient_clipping", gradient_clip_val=gradient_clip_val, gradient_clip_algorithm=algorithm)
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        self._log("optimizer_step", epoch=epoch, batch_idx=batch_idx, closure=callable(optimizer_closure))
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        self._log("lr_scheduler_step", scheduler=type(scheduler).__name__, metric=metric)
        super().lr_scheduler_step(scheduler, metric)


class HookRecorderDataModule(accelkit.DataModule):
    """A DataModule whose hooks log themselves as ``DataModule.<name>(...)`` into ``hook_log``; its loaders are
    those of ``module`` (a :class:`HookRecorderModule`), without the Module's log entries."""

    def __init__(self, hook_log: HookLog, module: HookRecorderModule) -> None:
        super().__init__()
        self.hook_log, self.module = hook_log, module

    def _log(self, name: str, **args: Any) -> None:
        self.hook_log.add(f"DataModule.{name}", **args)

    def prepare_data(self) -> None:
        self._log("prepare_data")

    def setup(self, stage: str) -> None:
        self._log("setup", stage=_plain(stage))

    def teardown(self, stage: str) -> None:
        self._log("teardown", stage=_plain(stage))

    def train_dataloader(self) -> Any:
        self._log("train_dataloader")
        return self.module._loader("train", 0)

    def val_dataloader(self) -> Any:
        self._log("val_dataloader")
        return self.module._loader("val", 1)

    def test_dataloader(self) -> Any:
        self._log("test_dataloader")
        return self.module._loader("test", 2)

    def predict_dataloader(self) -> Any:
        self._log("predict_dataloader")
        return self.module._loader("predict", 3)

    def state_dict(self) -> dict[str, Any]:
        self._log("state_dict")
        return {"dm": 1}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._log("load_state_dict", state=state_dict)

    def on_exception(self, exception: BaseException) -> None:
        self._log("on_exception", exception=type(exception).__name__)


def _module_phase_hook(name: str) -> Any:
    def hook(self: HookRecorderModule) -> None:
        self._log(name)
        getattr(super(HookRecorderModule, self), name)()

    hook.__name__ = hook.__qualname__ = name
    return hook


#: the Module's hooks without arguments; each logs itself, then runs the base implementation
_MODULE_PHASE_HOOKS = (
    "on_fit_start", "on_fit_end", "on_train_start", "on_train_end", "on_validation_start", "on_validation_end",
    "on_test_start", "on_test_end", "on_predict_start", "on_predict_end", "on_train_epoch_start",
    "on_train_epoch_end", "on_validation_epoch_start", "on_validation_epoch_end", "on_test_epoch_start",
    "on_test_epoch_end", "on_predict_epoch_start", "on_predict_epoch_end", "on_validation_model_zero_grad",
    "on_validation_model_eval", "on_validation_model_train", "on_test_model_eval", "on_test_model_train",
    "on_predict_model_eval")
for _name in _MODULE_PHASE_HOOKS:
    setattr(HookRecorderModule, _name, _module_phase_hook(_name))


class HookRecorderCallback(accelkit.Callback):
    """Logs every Callback hook as ``Callback.<name>(...)`` into the same log as the Module.

    Notes a problem when ``pl_module`` is not the recording Module of the same log.
    """

    def __init__(self, hook_log: HookLog) -> None:
        self.hook_log = hook_log

    def _log(self, name: str, pl_module: Any = None, **args: Any) -> None:
        self.hook_log.add(f"Callback.{name}", **args)
        if pl_module is not None and getattr(pl_module, "hook_log", None) is not self.hook_log:
            self.hook_log.problem(f"Callback.{name}: pl_module is not the recording module: {type(pl_module)}")

    def state_dict(self) -> dict[str, Any]:
        self._log("state_dict")
        return {"recorded": True}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._log("load_state_dict", state=state_dict)

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._log("setup", pl_module, stage=_plain(stage))

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._log("teardown", pl_module, stage=_plain(stage))

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        self._log("on_save_checkpoint", pl_module)

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        self._log("on_load_checkpoint", pl_module)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._log("on_exception", pl_module, exception=type(exception).__name__)

    def on_sanity_check_start(self, trainer: Any, pl_module: Any) -> None:
        self._log("on_sanity_check_start", pl_module)

    def on_sanity_check_end(self, trainer: Any, pl_module: Any) -> None:
        self._log("on_sanity_check_end", pl_module)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._log("on_train_batch_start", pl_module, batch_idx=batch_idx)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._log("on_train_batch_end", pl_module, outputs=_keys(outputs), batch_idx=batch_idx)

    def on_before_zero_grad(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self._log("on_before_zero_grad", pl_module)

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: torch.Tensor) -> None:
        self._log("on_before_backward", pl_module)

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        self._log("on_after_backward", pl_module)

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self._log("on_before_optimizer_step", pl_module)


def _phase_hook(name: str) -> Any:
    def hook(self: HookRecorderCallback, trainer: Any, pl_module: Any) -> None:
        self._log(name, pl_module)

    hook.__name__ = hook.__qualname__ = name
    return hook


def _batch_start_hook(name: str) -> Any:
    def hook(self: HookRecorderCallback, trainer: Any, pl_module: Any, batch: Any, batch_idx: int,
             dataloader_idx: Any = _ABSENT) -> None:
        self._log(name, pl_module, **_idx({"batch_idx": batch_idx}, dataloader_idx))

    hook.__name__ = hook.__qualname__ = name
    return hook


def _batch_end_hook(name: str) -> Any:
    def hook(self: HookRecorderCallback, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int,
             dataloader_idx: Any = _ABSENT) -> None:
        self._log(name, pl_module, **_idx({"outputs": _keys(outputs), "batch_idx": batch_idx}, dataloader_idx))

    hook.__name__ = hook.__qualname__ = name
    return hook


# The (trainer, pl_module) hooks and the evaluation batch hooks differ only by name: generated, one per name.
for _name in ("on_fit_start", "on_fit_end", "on_train_start", "on_train_end", "on_train_epoch_start",
              "on_train_epoch_end", "on_validation_start", "on_validation_end", "on_validation_epoch_start",
              "on_validation_epoch_end", "on_test_start", "on_test_end", "on_test_epoch_start", "on_test_epoch_end",
              "on_predict_start", "on_predict_end", "on_predict_epoch_start", "on_predict_epoch_end"):
    setattr(HookRecorderCallback, _name, _phase_hook(_name))
for _stage in ("validation", "test", "predict"):
    setattr(HookRecorderCallback, f"on_{_stage}_batch_start", _batch_start_hook(f"on_{_stage}_batch_start"))
    setattr(HookRecorderCallback, f"on_{_stage}_batch_end", _batch_end_hook(f"on_{_stage}_batch_end"))


def fit_and_dump(out: str | os.PathLike, **trainer_args: Any) -> None:
    """Fit a :class:`HookRecorderModule` (2 epochs, 2 training and 1 validation batch) with a recording callback
    and an explicit ``ModelCheckpoint`` in ``dirname(out)/ckpt``; write ``{"calls", "problems", "strategy"}``
    to ``out``."""
    from accelkit.callbacks import ModelCheckpoint

    log = HookLog()
    model = HookRecorderModule(log)
    root = Path(out).parent
    trainer = accelkit.Trainer(max_epochs=2, logger=False, enable_progress_bar=False, enable_model_summary=False,
                               default_root_dir=root, callbacks=[HookRecorderCallback(log),
                                                                 ModelCheckpoint(dirpath=root / "ckpt")],
                               **trainer_args)
    trainer.fit(model)
    result = {"calls": log.calls, "problems": log.problems, "strategy": type(trainer.strategy).__name__}
    Path(out).write_text(json.dumps(result, indent=1))


def main(argv: list[str] | None = None) -> None:
    """``fit-xla OUT``: :func:`fit_and_dump` on one XLA device (run in a process of its own)."""
    command, out = (argv if argv is not None else sys.argv[1:])[:2]
    if command != "fit-xla":
        raise SystemExit(f"unknown command {command!r}; choose one of: fit-xla")
    fit_and_dump(out, accelerator="xla", devices=1)
