"""``StochasticWeightAveraging``: average the weights of the last epochs of a fit and swap the average in at the
end (Lightning's callback of that name, on :mod:`torch.optim.swa_utils`)."""

from __future__ import annotations

import copy
import inspect
import logging
import warnings
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor, nn
from torch.optim.swa_utils import SWALR, get_swa_avg_fn

from accelkit.callbacks.base import Callback
from accelkit.callbacks.finetuning import BATCH_NORM_TYPES
from accelkit.errors import ConfigurationError

if TYPE_CHECKING:
    from torch.nn.modules.batchnorm import _BatchNorm
    from torch.optim.lr_scheduler import LRScheduler

    from accelkit.module.module import Module
    from accelkit.strategies.base import Strategy
    from accelkit.trainer.trainer import Trainer

log = logging.getLogger(__name__)

_AVG_FN = Callable[[Tensor, Tensor, Tensor], Tensor]


class StochasticWeightAveraging(Callback):
    """Stochastic Weight Averaging (Izmailov et al., "Averaging Weights Leads to Wider Optima and Better
    Generalization", UAI 2018), with Lightning's arguments, schedule and checkpoint state.

    From epoch ``swa_start`` on, the learning rate follows :class:`torch.optim.swa_utils.SWALR` (annealed to
    ``swa_lrs`` over ``annealing_epochs``, replacing the module's scheduler), and at the start of every epoch
    from ``swa_start`` to the last one the weights are folded into a running average (``avg_fn``). When the fit
    has run all ``max_epochs``, the averaged weights are copied into the module; a module with batch-norm layers
    then gets fresh running statistics from one pass over the training loader (``training_step`` without
    gradients, the first ``num_training_batches`` batches), as in Lightning. As in Lightning, the average holds
    the weights at the start of epochs ``swa_start`` ... ``max_epochs - 1``.

    Differences from Lightning, each on purpose: the batch-norm pass runs inside ``on_train_end`` rather than as
    an extra training epoch, so ``trainer.current_epoch`` ends at ``max_epochs``, no validation or training
    hooks run during it, and no optimizer step follows it (Lightning 2.6.6's extra epoch ends with one more
    optimizer step: measured on a small batch-norm model, its final weights were 5e-2 away from the average);
    in a distributed run the processes average their batch-norm statistics, so every process holds the same ones;
    a fit that stops before ``max_epochs`` (early stopping, ``max_steps``) keeps its last weights, with a warning
    saying so; a second ``fit`` starts a new average unless it resumes a checkpoint.

    :param swa_lrs: the SWA learning rate: one float for every parameter group, or a list with one per group.
    :param swa_epoch_start: an int ``n >= 1``: averaging starts at the ``n``-th epoch (1-based); a float in
        ``[0, 1]``: at epoch ``int(swa_epoch_start * max_epochs)``.
    :param annealing_epochs: epochs over which the learning rate moves to ``swa_lrs``.
    :param annealing_strategy: ``"cos"`` or ``"linear"``.
    :param avg_fn: ``(averaged_param, current_param, num_averaged) -> new average``; default: equal weights.
    :param device: where the averaged copy of the module lives (``None``: the module's device).

    The checkpoint state (``n_averaged``, ``latest_update_epoch``, ``scheduler_state``, ``average_model_state``)
    has Lightning's keys, so a fit resumed from a checkpoint written during averaging continues the same average.
    Needs ``Trainer(max_epochs=N)``, one optimizer, at most one scheduler, automatic optimization, and a strategy
    that keeps whole weights in each process (sharding strategies are refused).
    """

    def __init__(self, swa_lrs: float | list[float], swa_epoch_start: int | float = 0.8, annealing_epochs: int = 10,
                 annealing_strategy: str = "cos", avg_fn: _AVG_FN | None = None,
                 device: torch.device | str | None = torch.device("cpu")) -> None:
        problems = _check_arguments(swa_lrs, swa_epoch_start, annealing_epochs, annealing_strategy, avg_fn, device)
        if problems:
            raise ConfigurationError([f"StochasticWeightAveraging({p})" for p in problems])
        self._swa_epoch_start = swa_epoch_start
        self._swa_lrs = [float(lr) for lr in swa_lrs] if isinstance(swa_lrs, (list, tuple)) else float(swa_lrs)
        self._annealing_epochs = annealing_epochs
        self._annealing_strategy: Literal["cos", "linear"] = "cos" if annealing_strategy == "cos" else "linear"
        self._avg_fn = avg_fn or self.avg_fn
        self._device = torch.device(device) if isinstance(device, str) else device
        self._average_model: nn.Module | None = None
        self._max_epochs: int | None = None
        self._start_epoch: int | None = None
        self.momenta: dict[_BatchNorm, float | None] = {}
        self._reset()

    def _reset(self) -> None:
        """Forget the average of an earlier fit (a resumed fit then loads the checkpoint's)."""
        self.n_averaged: Tensor | None = None
        self._initialized = False
        self._swa_scheduler: _SWALR | None = None
        self._scheduler_state: dict[str, object] | None = None
        self._init_n_averaged = 0
        self._latest_update_epoch = -1
        self._model_contains_batch_norm: bool | None = None

    # ----------------------------------------------------------------- the averaging window
    @property
    def swa_start(self) -> int:
        """The first epoch (0-based) whose starting weights are averaged."""
        start = self._swa_epoch_start if _is_int(self._swa_epoch_start) else self._start_epoch
        if start is None:
            raise RuntimeError(f"StochasticWeightAveraging(swa_epoch_start={self._swa_epoch_start}) is a fraction of "
                               "max_epochs, known once fit starts")
        return max(int(start) - 1, 0)

    @property
    def swa_end(self) -> int:
        """The last epoch (0-based) of the fit."""
        if self._max_epochs is None:
            raise RuntimeError("StochasticWeightAveraging.swa_end is known once fit starts (max_epochs - 1)")
        return self._max_epochs - 1

    @staticmethod
    def pl_module_contains_batch_norm(pl_module: nn.Module) -> bool:
        """Whether the module has batch-norm layers (their statistics are recomputed at the end)."""
        return any(isinstance(module, BATCH_NORM_TYPES) for module in pl_module.modules())

    # ----------------------------------------------------------------- hooks
    def setup(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        """Refuse sharding strategies; copy the module (before it moves to the device) to hold the average."""
        if stage != "fit":
            return
        strategy = trainer.strategy
        if strategy.restore_checkpoint_after_setup:
            raise ConfigurationError(
                f"StochasticWeightAveraging averages whole weights in each process, but strategy "
                f"{getattr(strategy, 'name', type(strategy).__name__)!r} shards them (as Lightning, SWA does not "
                "support sharded models); use ddp/ddp_spawn or a single device, or remove the callback")
        self._reset()
        self._average_model = copy.deepcopy(pl_module)

    def on_fit_start(self, trainer: Trainer, pl_module: Module) -> None:
        """Check the run, resolve the averaging window; on a resume with a saved SWA scheduler, drop the module's
        scheduler so the SWA one is rebuilt with its state (before the schedulers' states are restored)."""
        if not pl_module.automatic_optimization:
            raise ConfigurationError(
                f"StochasticWeightAveraging needs automatic optimization ({type(pl_module).__name__} sets "
                "automatic_optimization=False): it steps its SWALR scheduler each epoch and runs training_step for "
                "the batch-norm pass, which would step your optimizers")
        if len(trainer.optimizers) != 1:
            raise ConfigurationError(f"StochasticWeightAveraging works with one optimizer; configure_optimizers() "
                                     f"returned {len(trainer.optimizers)}")
        if len(trainer.lr_scheduler_configs) > 1:
            raise ConfigurationError(f"StochasticWeightAveraging replaces the learning-rate scheduler and works with "
                                     f"at most one; configure_optimizers() returned "
                                     f"{len(trainer.lr_scheduler_configs)}")
        max_epochs = trainer.max_epochs
        if max_epochs is None or max_epochs < 1:
            raise ConfigurationError(f"StochasticWeightAveraging needs Trainer(max_epochs=N) (got max_epochs="
                                     f"{max_epochs}): it averages the epochs from swa_epoch_start to the last one")
        self._max_epochs = max_epochs
        if not _is_int(self._swa_epoch_start):
            self._start_epoch = int(max_epochs * self._swa_epoch_start)
        if self.swa_start > self.swa_end:
            warnings.warn(f"StochasticWeightAveraging(swa_epoch_start={self._swa_epoch_start}) starts after the last "
                          f"epoch (max_epochs={max_epochs}): no weights will be averaged.", UserWarning, stacklevel=2)
        self._model_contains_batch_norm = self.pl_module_contains_batch_norm(pl_module)
        if self._scheduler_state is not None:
            trainer.lr_scheduler_configs.clear()

    def on_train_epoch_start(self, trainer: Trainer, pl_module: Module) -> None:
        """Start SWA at ``swa_start`` (SWALR replaces the scheduler); fold the current weights into the average."""
        epoch = trainer.current_epoch
        in_window = self.swa_start <= epoch <= self.swa_end
        if in_window and not self._initialized:
            self._initialize(trainer, pl_module)
        if in_window and epoch > self._latest_update_epoch:
            assert self._average_model is not None and self.n_averaged is not None  # setup, _initialize made them
            self.update_parameters(self._average_model, pl_module, self.n_averaged, self._avg_fn)
            self._latest_update_epoch = epoch

    def on_train_end(self, trainer: Trainer, pl_module: Module) -> None:
        """Copy the averaged weights into the module and recompute its batch-norm statistics."""
        if not self._initialized:
            return
        if trainer.current_epoch != self._max_epochs:
            warnings.warn(
                f"StochasticWeightAveraging: training stopped at epoch {trainer.current_epoch} before max_epochs="
                f"{self._max_epochs}, so the averaged weights are not swapped in (as in Lightning); the module keeps "
                "its last weights.", UserWarning, stacklevel=2)
            return
        assert self._average_model is not None  # setup made it
        self.transfer_weights(self._average_model, pl_module)
        if self._model_contains_batch_norm:
            self._update_batch_norm(trainer, pl_module)

    # ----------------------------------------------------------------- Lightning's helpers
    @staticmethod
    def transfer_weights(src_pl_module: nn.Module, dst_pl_module: nn.Module) -> None:
        """Copy the parameters of ``src_pl_module`` into ``dst_pl_module`` (in place, across devices)."""
        for src, dst in zip(src_pl_module.parameters(), dst_pl_module.parameters(), strict=True):
            dst.detach().copy_(src.to(dst.device))

    def reset_batch_norm_and_save_state(self, pl_module: nn.Module) -> None:
        """Zero the batch-norm running statistics and switch the layers to a cumulative average
        (``momentum=None``), keeping their momenta in ``momenta``."""
        self.momenta = {}
        for module in pl_module.modules():
            if not isinstance(module, BATCH_NORM_TYPES) or module.running_mean is None or module.running_var is None:
                continue
            module.running_mean = torch.zeros_like(module.running_mean)
            module.running_var = torch.ones_like(module.running_var)
            self.momenta[module] = module.momentum
            module.momentum = None
            if module.num_batches_tracked is not None:
                module.num_batches_tracked.zero_()

    def reset_momenta(self) -> None:
        """Give the batch-norm layers their momenta back."""
        for module, momentum in self.momenta.items():
            module.momentum = momentum

    @staticmethod
    def update_parameters(average_model: nn.Module, model: nn.Module, n_averaged: Tensor, avg_fn: _AVG_FN) -> None:
        """Fold ``model``'s parameters into ``average_model``'s; ``n_averaged`` (a tensor) counts the folds."""
        for p_avg, p_model in zip(average_model.parameters(), model.parameters(), strict=True):
            device = p_avg.device
            current = p_model.detach().to(device)
            new = current if int(n_averaged) == 0 else avg_fn(p_avg.detach(), current, n_averaged.to(device))
            p_avg.detach().copy_(new)
        n_averaged += 1

    @staticmethod
    def avg_fn(averaged_model_parameter: Tensor, model_parameter: Tensor, num_averaged: Tensor) -> Tensor:
        """The equally weighted running average (torch's ``swa_utils`` update)."""
        return _SWA_UPDATE(averaged_model_parameter, model_parameter, num_averaged)

    # ----------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, object]:
        """The average, how many weights it holds, the last epoch folded in and the SWA scheduler's state."""
        return {
            "n_averaged": 0 if self.n_averaged is None else int(self.n_averaged),
            "latest_update_epoch": self._latest_update_epoch,
            "scheduler_state": None if self._swa_scheduler is None else self._swa_scheduler.state_dict(),
            "average_model_state": None if self._average_model is None else self._average_model.state_dict(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue the saved average (loaded in a resumed fit, after ``setup``)."""
        self._init_n_averaged = state_dict["n_averaged"]
        self._latest_update_epoch = state_dict["latest_update_epoch"]
        self._scheduler_state = state_dict["scheduler_state"]
        average = state_dict.get("average_model_state")
        if self._average_model is not None and average is not None:
            self._average_model.load_state_dict(average)

    # ----------------------------------------------------------------- internals
    def _initialize(self, trainer: Trainer, pl_module: Module) -> None:
        self._initialized = True
        assert self._average_model is not None  # setup made it
        self._average_model = self._average_model.to(self._device or pl_module.device)
        optimizer = trainer.optimizers[0]
        groups = optimizer.param_groups
        lrs = self._swa_lrs if isinstance(self._swa_lrs, list) else [self._swa_lrs] * len(groups)
        if len(lrs) != len(groups):
            raise ConfigurationError(f"StochasticWeightAveraging(swa_lrs={self._swa_lrs}) gives {len(lrs)} learning "
                                     f"rates for the {len(groups)} parameter groups of {type(optimizer).__name__}; "
                                     "give one float, or one per group")
        for lr, group in zip(lrs, groups, strict=True):
            group["initial_lr"] = lr
        # one rate per parameter group, which torch's SWALR takes (its annotation says one float only)
        self._swa_scheduler = _SWALR(optimizer, swa_lr=lrs, anneal_epochs=self._annealing_epochs,  # type: ignore[arg-type]
                                    anneal_strategy=self._annealing_strategy,
                                    last_epoch=trainer.max_epochs if self._annealing_strategy == "cos" else -1)
        if self._scheduler_state is not None:
            self._swa_scheduler.load_state_dict(self._scheduler_state)
        elif trainer.current_epoch != self.swa_start:
            warnings.warn(f"StochasticWeightAveraging starts at epoch {trainer.current_epoch}, after its first epoch "
                          f"{self.swa_start}, without a saved SWA state (a checkpoint written without the callback?): "
                          "the average and the learning-rate annealing start here.", UserWarning, stacklevel=3)
        _install_scheduler(trainer, self._swa_scheduler)
        if self.n_averaged is None:
            self.n_averaged = torch.tensor(self._init_n_averaged, dtype=torch.long, device=pl_module.device)

    def _update_batch_norm(self, trainer: Trainer, pl_module: Module) -> None:
        """One pass of ``training_step`` without gradients over the training loader, the batch-norm layers
        averaging the statistics of every batch; distributed processes then average theirs."""
        loader = trainer.train_dataloader
        if loader is None:
            warnings.warn("StochasticWeightAveraging: no training loader is left to recompute the batch-norm "
                          "statistics of the averaged weights; they keep the last epoch's.", UserWarning, stacklevel=3)
            return
        self.reset_batch_norm_and_save_state(pl_module)
        was_training = pl_module.training
        pl_module.train()
        limit = trainer.num_training_batches
        step = pl_module.training_step
        pass_index = _accepts_index(step)
        strategy, precision = trainer.strategy, trainer.precision
        try:
            with torch.no_grad():
                for index, batch in enumerate(strategy.process_dataloader(loader, "fit")):
                    if limit is not None and index >= limit:
                        break
                    batch = _batch_to_device(trainer, pl_module, batch)
                    with precision.forward_context():
                        step(batch, index) if pass_index else step(batch)
        finally:
            self.reset_momenta()
            pl_module.train(was_training)
        if trainer.world_size > 1:
            _average_batch_norm(strategy, self.momenta)


# --------------------------------------------------------------------------- helpers
_SWA_UPDATE = get_swa_avg_fn()


class _SWALR(SWALR):
    """:class:`~torch.optim.swa_utils.SWALR` whose state is plain data: its annealing function (rebuilt from
    ``anneal_strategy`` when the scheduler is made) is left out, so checkpoints load with ``weights_only=True``."""

    def state_dict(self) -> dict[str, object]:
        state = super().state_dict()
        state.pop("anneal_func", None)
        return state


def _install_scheduler(trainer: Trainer, scheduler: LRScheduler) -> None:
    """Put ``scheduler`` (stepped every epoch) in place of the module's scheduler."""
    from accelkit.utilities.types import LRSchedulerConfig

    config = LRSchedulerConfig(scheduler=scheduler)
    configs = trainer.lr_scheduler_configs
    if not configs:
        configs.append(config)
        return
    old = configs[0]
    if old.interval != "epoch" or old.frequency != 1:
        warnings.warn(f"StochasticWeightAveraging steps its SWALR scheduler every epoch; the module's "
                      f"{type(old.scheduler).__name__} (interval={old.interval!r}, frequency={old.frequency}) "
                      "is replaced by it.", UserWarning, stacklevel=4)
    if trainer.is_global_zero:
        log.info("Swapping scheduler `%s` for `%s`", type(old.scheduler).__name__, type(scheduler).__name__)
    configs[0] = config


def _batch_to_device(trainer: Trainer, pl_module: Module, batch: object) -> object:
    """What the fit loop does to a batch: the batch-transfer hooks (the DataModule's override wins), the move to
    the device, the precision's input conversion."""
    from accelkit.module import DataModule, Module

    datamodule = trainer.datamodule

    def hook(name: str) -> Callable[..., object] | None:
        if datamodule is not None and getattr(type(datamodule), name) is not getattr(DataModule, name):
            return getattr(datamodule, name)
        if getattr(type(pl_module), name) is not getattr(Module, name):
            return getattr(pl_module, name)
        return None

    before, transfer, after = (hook(n) for n in ("on_before_batch_transfer", "transfer_batch_to_device",
                                                 "on_after_batch_transfer"))
    if before is not None:
        batch = before(batch, 0)
    batch = transfer(batch, trainer.strategy.root_device, 0) if transfer is not None \
        else trainer.strategy.batch_to_device(batch)
    if after is not None:
        batch = after(batch, 0)
    return trainer.precision.convert_input(batch)


def _average_batch_norm(strategy: Strategy, layers: Iterable[_BatchNorm]) -> None:
    """Average the running mean and variance of ``layers`` over the processes (what one process would hold after
    seeing every process's batches, the batch counts being equal) and add up the batch counts."""
    stats = [t for m in layers for t in (m.running_mean, m.running_var) if t is not None]
    if not stats:
        return
    flat = strategy.reduce(torch.cat([t.reshape(-1) for t in stats]), "mean")
    offset = 0
    for tensor in stats:
        tensor.copy_(flat[offset:offset + tensor.numel()].view_as(tensor))
        offset += tensor.numel()
    counts = [m.num_batches_tracked for m in layers if m.num_batches_tracked is not None]
    if counts:
        summed = strategy.reduce(torch.stack(counts).float(), "sum")
        for count, value in zip(counts, summed, strict=True):
            count.fill_(int(value))


def _accepts_index(step: Callable[..., object]) -> bool:
    try:
        params = list(inspect.signature(step).parameters.values())
    except (TypeError, ValueError):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params)


def _check_arguments(swa_lrs: float | list[float], swa_epoch_start: int | float, annealing_epochs: int,
                     annealing_strategy: str, avg_fn: _AVG_FN | None, device: torch.device | str | None) -> list[str]:
    """What is wrong with ``StochasticWeightAveraging``'s arguments (checked at run time: they come from users'
    code and configuration files, whatever their annotations say)."""
    problems = []
    if _is_int(swa_epoch_start):
        if swa_epoch_start < 1:
            problems.append(f"swa_epoch_start={swa_epoch_start!r}: an int must be >= 1 (the 1-based first epoch)")
    elif not isinstance(swa_epoch_start, float) or not 0 <= swa_epoch_start <= 1:
        problems.append(f"swa_epoch_start={swa_epoch_start!r} must be an int >= 1 or a float in [0, 1] (a fraction "
                        "of max_epochs)")
    lrs = swa_lrs if isinstance(swa_lrs, (list, tuple)) else [swa_lrs]
    if not lrs or not all(_is_number(lr) and lr > 0 for lr in lrs):
        problems.append(f"swa_lrs={swa_lrs!r} must be a positive float, or a list of positive floats (one per "
                        "parameter group)")
    if not _is_int(annealing_epochs) or annealing_epochs < 0:
        problems.append(f"annealing_epochs={annealing_epochs!r} must be an int >= 0")
    if annealing_strategy not in ("cos", "linear"):
        problems.append(f"annealing_strategy={annealing_strategy!r} must be 'cos' or 'linear'")
    if avg_fn is not None and not callable(avg_fn):
        problems.append(f"avg_fn={avg_fn!r} must be a function (averaged, current, num_averaged) -> tensor")
    if device is not None and not isinstance(device, torch.device):
        try:
            torch.device(device)
        except (RuntimeError, TypeError):
            problems.append(f"device={device!r} must be a torch.device, a device string such as 'cpu', or None "
                            "(the module's device)")
    return problems


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
