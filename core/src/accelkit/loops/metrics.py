"""What ``Module.log`` records, kept on the device until it is read."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch

from accelkit.errors import LoggedValueError
from accelkit.utilities.apply_func import batch_size_of

if TYPE_CHECKING:
    from typing_extensions import TypeIs

_REDUCERS = ("mean", "sum", "max", "min")
#: ``reduce_fx`` as given (a name or a torch function) -> its name
_REDUCE_FX: dict[object, str] = {**{name: name for name in _REDUCERS}, torch.mean: "mean", torch.sum: "sum",
                              torch.max: "max", torch.min: "min"}


class MetricObject(Protocol):
    """What ``self.log`` takes as a metric object (a torchmetrics ``Metric``): it keeps its own state (``update``,
    called by the user), computes the epoch value and is reset after it is published."""

    def compute(self) -> torch.Tensor | float: ...

    def reset(self) -> None: ...


#: a value as the store keeps it: a tensor, a number, or a metric object
Logged = torch.Tensor | float | MetricObject


def is_metric_object(value: object) -> TypeIs[MetricObject]:
    """Whether ``value`` is a metric object (``update``/``compute``/``reset``, as a torchmetrics ``Metric``)."""
    return not isinstance(value, torch.Tensor) and all(
        callable(getattr(value, name, None)) for name in ("update", "compute", "reset"))


#: modules whose frames run hooks (the loops, a strategy's forward, torch's module call and its decorators)
_RUNNERS = ("accelkit.", "torch.", "lightning.")


def _logging_function(epoch_end: bool) -> tuple[str, CodeType | None]:
    """The name of the hook that called ``self.log``/``self.log_dict`` (e.g. ``training_step``, as Lightning's
    ``fx``), also through helpers of the user's, and its code object: the outermost of the frames above this store
    outside the Module's logging methods whose caller is the framework; without one within a few frames (a store
    used outside a run), the function that called ``self.log``. Marked when an epoch-end hook runs it."""
    frame: FrameType | None = sys._getframe(3)
    while frame is not None and frame.f_globals.get("__name__", "").startswith(("accelkit.module", "accelkit.loops")):
        frame = frame.f_back
    hook = frame
    for _ in range(8):
        outer = hook.f_back if hook is not None else None
        if outer is None:
            break
        if outer.f_globals.get("__name__", "").startswith(_RUNNERS):
            frame = cast(FrameType, hook)  # (the frame whose f_back is outer)
            if frame.f_code.co_name in _NO_LOGGING and outer.f_globals["__name__"].startswith(_FRAMEWORKS):
                _refuse_logging_in(frame.f_code.co_name)
            break
        hook = outer
    name, code = (frame.f_code.co_name, frame.f_code) if frame is not None else ("", None)
    return (f"{name} (at an epoch's end)" if epoch_end else name), code


#: the hooks where ``self.log`` is refused, as in Lightning (its ``_FxValidator``): what runs before or after the
#: loops' steps and epochs (set-up, data loaders, the fit's start and end, checkpoints), the batch transfer, the
#: models' mode switches, the scheduler's step and prediction, where a value would have no step or epoch to belong to
_NO_LOGGING = frozenset((
    "configure_optimizers", "configure_callbacks", "configure_model", "configure_sharded_model", "prepare_data",
    "setup", "teardown", "train_dataloader", "val_dataloader", "test_dataloader", "predict_dataloader",
    "on_fit_start", "on_fit_end", "on_sanity_check_start", "on_sanity_check_end", "on_train_end",
    "on_validation_end", "on_test_end", "on_predict_start", "on_predict_end", "on_predict_epoch_start",
    "on_predict_epoch_end", "on_predict_batch_start", "on_predict_batch_end", "predict_step",
    "on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer", "lr_scheduler_step",
    "on_exception", "state_dict", "load_state_dict", "on_save_checkpoint", "on_load_checkpoint",
    "on_validation_model_zero_grad", "on_validation_model_eval", "on_validation_model_train",
    "on_test_model_eval", "on_test_model_train"))
#: the modules that call hooks (a function of the user's with a hook's name called by torch is not refused)
_FRAMEWORKS = ("accelkit.", "lightning.")


def _refuse_logging_in(hook: str) -> None:
    """As Lightning's: ``self.log`` inside ``hook`` (one of :data:`_NO_LOGGING`) is an error, not a value dropped."""
    raise RuntimeError(f"self.log() was called inside {hook}, where logging is not allowed (as in Lightning): log "
                       "from training_step, validation_step or test_step, the train/validation/test batch and epoch "
                       "hooks, on_train_start, on_validation_start, on_test_start or the backward and optimizer "
                       "hooks, or send a value to the logger yourself (self.logger.log_metrics)")


def _refuse_step_level(name: str, on_step: bool, on_epoch: bool) -> None:
    """As Lightning's: a hook that runs once per loop or epoch (``on_train_start``, ``on_*_epoch_start``/``_end``...)
    logs epoch values only; ``on_step=True`` or ``on_epoch=False`` there is an error, not a value dropped (a
    ``RuntimeError``, as :func:`_refuse_logging_in`'s: Lightning's same check raises the same exception for both)."""
    hook = _logging_function(False)[0]
    given = "on_step=True" if on_step else "on_epoch=False"
    raise RuntimeError(f"self.log({name!r}, ..., {given}) was called inside {hook}, which logs epoch values only (as "
                     "in Lightning): there on_step must be False and on_epoch True (the defaults); log per-step "
                     "values from training_step, validation_step, test_step or the batch hooks")


def _logged_from(code: CodeType | None) -> bool:
    """Whether the hook running ``code`` called ``self.log`` directly, through ``log_dict`` or through one helper
    (the store's caller, or one of the next two frames, runs ``code``): a cheap check that skips
    :func:`_logging_function`; ``False`` also where it is not known."""
    frame: FrameType | None
    frame = sys._getframe(2)
    return frame.f_code is code or (frame := frame.f_back) is not None and (
        frame.f_code is code or (frame := frame.f_back) is not None and frame.f_code is code)


def _refuse_mixed_loaders(name: str, first: int, now: int) -> None:
    """As Lightning's: one name logged from two evaluation loaders without their index would mix their values."""
    raise ValueError(f"self.log({name!r}, ..., add_dataloader_idx=False) was called for evaluation loaders {first} "
                     f"and {now}, which would mix their values; as in Lightning this is not allowed: give each "
                     "loader's value a name of its own (with its dataloader_idx), or leave add_dataloader_idx=True")


def _refuse_other_options(entry: _Entry, name: str, caller: str, given: dict[str, object]) -> None:
    """As Lightning's: logging a name again in the same hook with other arguments is an error (which ones would
    win is not defined); from another hook it is another value of its own (:meth:`MetricStore.log`)."""
    first = {"on_step": entry.on_step, "on_epoch": entry.on_epoch, "prog_bar": entry.prog_bar,
             "logger": entry.logger, "reduce_fx": entry.reduce_fx, "sync_dist": entry.sync_dist,
             "rank_zero_only": entry.rank_zero_only}
    changed = ", ".join(f"{key}={first[key]!r}, then {key}={given[key]!r}" for key in first if first[key] != given[key])
    raise ValueError(f"self.log({name!r}, ...) was called twice in {caller} with different arguments ({changed}); "
                     "as in Lightning this is not allowed: log it with the same arguments each time, or under "
                     "another name")


@dataclass
class _Entry:
    on_step: bool
    on_epoch: bool
    prog_bar: bool
    logger: bool
    reduce_fx: str
    sync_dist: bool
    rank_zero_only: bool = False
    step_value: Any = None  # a Logged value (``None``: none yet); Module.log writes it from a repeat
    fresh: bool = False  # the step value is not yet sent to the loggers
    total: torch.Tensor | float | None = None
    weight: float = 0.0
    metric: MetricObject | None = None  # a metric object: its compute() is the epoch value
    computed: torch.Tensor | None = None  # the epoch value (a tensor, reduced across processes), once computed
    name: str = ""  # as logged (the store's key adds ``suffix``)
    suffix: str = ""  # ``/dataloader_idx_N`` with several evaluation loaders, after ``_step``/``_epoch`` as Lightning
    loader: int = 0  # the evaluation loader it was logged from (also with ``add_dataloader_idx=False``)
    caller: str = ""  # the function that called ``self.log`` (the hook, as Lightning's ``fx``)
    code: CodeType | None = None  # that function's code object (a cheap check that a later log comes from it)
    epoch_end: bool = False  # logged while an epoch-end hook ran (a helper run there is another caller)
    #: a repeat found under this entry (:attr:`MetricStore.repeats`) is stored by ``Module.log`` itself: a per-step
    #: value only, nothing to aggregate (a repeat from a helper of the hook is a :class:`_FromHelper`: never quick)
    quick: bool = False
    step_key: str = field(default="", init=False)  # :meth:`key`'s names, worked out once
    epoch_key: str = field(default="", init=False)

    def __post_init__(self) -> None:
        self.quick = self.on_step and not self.on_epoch
        if self.on_step and self.on_epoch:
            self.step_key, self.epoch_key = f"{self.name}_step{self.suffix}", f"{self.name}_epoch{self.suffix}"
        else:
            self.step_key = self.epoch_key = self.name + self.suffix

    def key(self, step: bool) -> str:
        """The name this value is shown by: ``<name>_step`` (``step``) or ``<name>_epoch`` when logged both per
        step and per epoch, then the loader's suffix (``loss_step/dataloader_idx_1``, Lightning's order)."""
        return self.step_key if step else self.epoch_key


class _FromHelper:
    """What :attr:`MetricStore.repeats` holds for a name logged by a function that is not the hook itself (a helper
    of the hook's, ``log_dict``): the hook's ``entry``, whose repeats :meth:`MetricStore.log_again` takes only once it
    checked that the hook running is that one (a helper may be run by several hooks, each with a value of its own)."""

    quick = False

    def __init__(self, entry: _Entry) -> None:
        self.entry = entry


class _Carried:
    """What :attr:`MetricStore.repeats` holds at an epoch's start for a repeat of the epoch before (a name logged by
    its training hook itself, ``key``): the first log of it this epoch takes that ``entry``'s decisions (a fresh entry
    with them, :meth:`MetricStore.log_again`) unless another hook logged the name first this epoch, instead of
    deciding anew what the same call decided the epoch before."""

    quick = False

    def __init__(self, entry: _Entry, key: tuple[object, ...]) -> None:
        self.entry, self.key = entry, key


#: the kinds of :meth:`MetricStore.current`, as the Trainer's dicts are named
KINDS = ("callback_metrics", "logged_metrics", "progress_bar_metrics")


class MetricStore:
    """Collects logged values for one loop (training, or an evaluation: ``training=False``).

    Values stay tensors (on the device) until something reads them: the loggers (:meth:`read_step`), or a read
    of ``trainer.callback_metrics`` and the like (:meth:`current`), so a lazy device is not forced to run per step
    just because something was logged.

    :ivar phase: ``"steps"`` while the loop's batches run (:meth:`current` gives per-step values), ``"epoch"``
        once they are done (epoch values), ``"closed"`` once the epoch's values are published (nothing).
    """

    def __init__(self, training: bool = True, refuses: str | None = None) -> None:
        self.entries: dict[str, _Entry] = {}
        self.training = training
        #: the stage whose every ``self.log`` is refused (``"predict"``, as in Lightning), whatever the name of the
        #: function that logs (a hook assigned from a function of another name); ``None`` where values are recorded
        self.refuses = refuses
        self.current_batch: object = None
        #: index of the evaluation loader being run, and how many there are (names get a suffix when > 1)
        self.dataloader_idx = 0
        self.num_dataloaders = 1
        #: set while an ``on_*_epoch_end`` hook runs: logs there default to epoch values (:meth:`set_epoch_end`)
        self.epoch_end = False
        #: set while a hook that runs once per loop or epoch runs before the steps (``on_train_start``,
        #: ``on_*_epoch_start``...: :meth:`epoch_level`): logs there are epoch values, as at an epoch's end
        self.epoch_hook = False
        #: reset ahead of the next epoch (:meth:`reset`): what is logged until it starts is that epoch's
        self.ahead = False
        #: ``on_step`` and ``on_epoch`` of a log that does not say (from ``training``, ``epoch_end``, ``epoch_hook``)
        self.default_on_step, self.default_on_epoch = training, not training
        self.phase = "steps"
        #: how values logged with ``sync_dist`` are reduced across processes (the strategy's ``reduce``, set by the
        #: run; ``None``: not reduced)
        self.reduce: Callable[[torch.Tensor, str], torch.Tensor] | None = None
        #: where a logged number goes to be reduced (the strategy's ``root_device``: a collective backend may take
        #: tensors on its device only)
        self.device: torch.device | None = None
        #: (name, the code of the function that called ``self.log``, the value's kind: ``0`` and its dtype for a
        #: floating-point scalar tensor, ``None`` and ``float`` for a Python float, then the options of a full
        #: :meth:`log` in the order of :meth:`accelkit.Module.log`'s ``prog_bar, logger, on_step, on_epoch, reduce_fx,
        #: sync_dist, rank_zero_only, add_dataloader_idx, enable_graph, sync_dist_group``) -> its entry (a
        #: :class:`_FromHelper` where that function is not the hook): a later log of that name from there with the
        #: same options and a value of that kind takes the decisions made then, in one lookup (:meth:`log_again`)
        #: (its values are an ``_Entry``, ``_FromHelper`` or ``_Carried``: ``Module.log`` reads an entry's fields
        #: where ``quick`` says it is one, which only ``Any`` lets it do without a test per step)
        self.repeats: dict[tuple[object, ...], Any] = {}
        #: the repeats of the last steps, for the next epoch's (:meth:`set_epoch_end`, :meth:`reset`)
        self.carried: dict[tuple[object, ...], _Carried] = {}

    def reset_metric_objects(self) -> None:
        """Reset the metric objects logged this epoch (after their epoch value is published, as Lightning does)."""
        for entry in self.entries.values():
            if entry.metric is not None:
                entry.metric.reset()

    def reset(self, training: bool, ahead: bool = False) -> None:
        """Start a new epoch of a loop (metric objects logged last epoch are reset). A training epoch after another
        starts with the repeats of the one before's steps carried (:class:`_Carried`). ``ahead``: reset now for the
        epoch that starts next, before a hook that runs ahead of it logs (``on_train_start``: its values are that
        epoch's, as in Lightning); that epoch's own reset then keeps them."""
        if self.ahead and training == self.training:
            self.ahead = ahead
            return
        self.ahead = ahead
        self.reset_metric_objects()
        carried = self.carried if training and self.training else {}
        self.entries = {}
        self.training = training
        self.set_epoch_end(False)
        self.repeats, self.carried = carried, {}
        self.phase = "steps"

    def set_epoch_end(self, epoch_end: bool) -> None:
        """Whether an ``on_*_epoch_end`` hook runs (logs there default to epoch values), with the defaults of
        ``on_step``/``on_epoch`` worked out once here rather than at every log. At the steps' end, the repeats of
        names their hooks logged themselves are kept for the next epoch's steps (:meth:`reset`)."""
        if epoch_end and not self.epoch_end:
            self.carried = {key: again if type(again) is _Carried else _Carried(again, key)
                            for key, again in self.repeats.items() if type(again) is not _FromHelper}
        self.epoch_end = epoch_end
        self.repeats = {}  # the defaults the remembered decisions were made with change
        self._set_defaults()

    @contextmanager
    def epoch_level(self) -> Iterator[None]:
        """Run a hook that logs epoch values only (``on_train_start``, ``on_*_epoch_start``, ``on_validation_start``,
        ``on_test_start``; as Lightning's): its logs default to ``on_step=False, on_epoch=True``, and refuse others."""
        self.epoch_hook = True
        self._set_defaults()
        try:
            yield
        finally:
            self.epoch_hook = False
            self._set_defaults()

    def _set_defaults(self) -> None:
        """:attr:`default_on_step` and :attr:`default_on_epoch`, worked out once rather than at every log."""
        self.default_on_step = self.training and not self.epoch_end and not self.epoch_hook
        self.default_on_epoch = not self.default_on_step

    def log(self, name: str, value: Any, prog_bar: bool, logger: bool | None, on_step: bool | None,
            on_epoch: bool | None, reduce_fx: object, sync_dist: bool, batch_size: int | None,
            rank_zero_only: bool = False, add_dataloader_idx: bool = True, site: CodeType | None = None) -> None:
        """Record one value (see :meth:`accelkit.Module.log`), deciding everything anew. ``site``: the code of the
        function that called ``self.log`` (``None``: not known); a later log from there that can take these decisions
        (a floating-point scalar tensor or a Python float, the same options) is a repeat: :attr:`repeats` remembers
        them, ``Module.log`` looks them up."""
        if self.refuses is not None:
            _refuse_logging_in(f"{_logging_function(False)[0]}, during {self.refuses}")
        kind = float if type(value) is float else None  # (a repeat's kind, for a Python float)
        on_step_given, on_epoch_given, reduce_fx_given, logger_given = on_step, on_epoch, reduce_fx, logger
        logger = True if logger is None else logger  # (the default: sent to the loggers)
        try:
            reduce_fx = _REDUCE_FX[reduce_fx]
        except (KeyError, TypeError):
            also = " (or torch.mean/sum/max/min)" if callable(reduce_fx) else ""
            raise ValueError(f"log({name!r}): reduce_fx={reduce_fx!r} is not one of {_REDUCERS}{also}") from None
        logged_name, suffix = name, ""
        # (a value logged before the loaders run, in on_*_start/on_*_epoch_start, or at the epoch's end, is every
        # loader's, without a suffix, as in Lightning)
        if add_dataloader_idx and self.num_dataloaders > 1 and not self.epoch_end and not self.epoch_hook:
            suffix = f"/dataloader_idx_{self.dataloader_idx}"
            name += suffix
        on_step = self.default_on_step if on_step is None else on_step
        on_epoch = self.default_on_epoch if on_epoch is None else on_epoch
        if (self.epoch_end or self.epoch_hook) and (on_step or not on_epoch):
            _refuse_step_level(logged_name, on_step, on_epoch)
        metric = None
        if isinstance(value, torch.Tensor):
            if value.ndim:  # a zero-dimensional tensor holds one value; others must hold exactly one
                if value.numel() != 1:
                    raise ValueError(f"log({name!r}): expected a scalar, got a tensor of shape {tuple(value.shape)}")
                value = value.reshape(())
            value = value.detach()
            if not value.is_floating_point():
                value = value.float()
            elif on_step:  # a step value is kept as logged (a copy, as Lightning's): a later in-place change of the
                value = value.clone()  # tensor does not show (epoch aggregates are new tensors, see _first)
        elif isinstance(value, (int, float)):  # (a bool too, as 1.0 or 0.0: as Lightning's)
            value = float(value)
        elif is_metric_object(value):
            metric = value
        else:
            raise LoggedValueError(f"log({name!r}): value must be a number, a scalar tensor or a metric object with "
                                   f"update/compute/reset, not {type(value).__name__} ({value!r:.80})")
        entry = self.entries.get(name)
        if entry is None or entry.epoch_end is not self.epoch_end or not _logged_from(entry.code):
            entry = self._caller_entry(name, entry, _Entry(on_step, on_epoch, prog_bar, logger, reduce_fx, sync_dist,
                                                           rank_zero_only, name=logged_name, suffix=suffix,
                                                           loader=self.dataloader_idx))
        if (entry.on_step, entry.on_epoch, entry.prog_bar, entry.logger, entry.reduce_fx, entry.sync_dist,
                entry.rank_zero_only) != (on_step, on_epoch, prog_bar, logger, reduce_fx, sync_dist, rank_zero_only):
            _refuse_other_options(entry, name, entry.caller, dict(
                on_step=on_step, on_epoch=on_epoch, prog_bar=prog_bar, logger=logger, reduce_fx=reduce_fx,
                sync_dist=sync_dist, rank_zero_only=rank_zero_only))
        if entry.loader != self.dataloader_idx and not suffix and not self.epoch_end:
            _refuse_mixed_loaders(name, entry.loader, self.dataloader_idx)
        if metric is not None:
            # A metric object keeps its own state (and syncs it across processes in compute()); the step value
            # is what its forward() returned last, read when the step value is read.
            entry.metric = metric
            entry.step_value = getattr(metric, "_forward_cache", None) if on_step else None
            if entry.step_value is None and on_step:
                entry.step_value = metric
            entry.fresh = on_step
            return
        # sync_dist reduces a step value when logged, as in Lightning (every process logs it, so all take part)
        entry.step_value = value if not sync_dist or not on_step or rank_zero_only else self.synced(value, reduce_fx)
        entry.fresh = True
        if on_epoch:
            self._aggregate(entry, value, batch_size)
        if site is not None and (kind is float or isinstance(value, torch.Tensor)) and not sync_dist and \
                not rank_zero_only and not suffix and (add_dataloader_idx or self.num_dataloaders == 1):
            try:  # (the value's kind and the options in the order of Module.log's lookup)
                self.repeats[(logged_name, site, *((None, float) if kind is float else (0, value.dtype)), prog_bar,
                              logger_given, on_step_given, on_epoch_given, reduce_fx_given, sync_dist, rank_zero_only,
                              add_dataloader_idx, False, None)] = entry if site is entry.code else _FromHelper(entry)
            except TypeError:  # an option that cannot be a key: this name's logs are decided in full
                pass

    def log_again(self, again: _Entry | _FromHelper | _Carried, value: Any, batch_size: int | None) -> bool:
        """:meth:`log` of a value found in :attr:`repeats` (``again``: a floating-point scalar tensor or a Python
        float, the options it was remembered with), called by ``Module.log``: the entry's decisions stand, and only
        the value is stored (a tensor detached; a step value copied, as :meth:`log` does). ``False``, storing
        nothing, when a helper logged it (``again`` a :class:`_FromHelper`) and the hook running it is not the one
        that logged it (a name logged from several hooks is a value per hook: :meth:`log` decides which), or when
        ``again`` is a repeat of the epoch before (a :class:`_Carried`) and another hook logged the name first."""
        if isinstance(again, _Entry):
            entry = again
        elif isinstance(again, _FromHelper):
            entry = again.entry
            if not _logged_from(entry.code):
                return False
        else:
            revived = self._carry(again)
            if revived is None:
                return False
            entry = revived
        if type(value) is not float:
            value = value.detach()
            if entry.on_step:
                value = value.clone()
        entry.step_value, entry.fresh = value, True
        if entry.on_epoch:
            self._aggregate(entry, value, batch_size)
        return True

    def _carry(self, carried: _Carried) -> _Entry | None:
        """The first log this epoch of a repeat of the epoch before: a fresh entry with its decisions, where
        :meth:`log` would make the same (the name not logged yet this epoch: its entry is keyed by the name), now
        this epoch's repeat; ``None`` where another hook logged the name first (:meth:`log` decides)."""
        old = carried.entry
        if old.name in self.entries:
            return None
        entry = self.entries[old.name] = _Entry(old.on_step, old.on_epoch, old.prog_bar, old.logger, old.reduce_fx,
                                                old.sync_dist, old.rank_zero_only, name=old.name, loader=old.loader,
                                                caller=old.caller, code=old.code)
        self.repeats[carried.key] = entry
        return entry

    def _caller_entry(self, name: str, first: _Entry | None, new: _Entry) -> _Entry:
        """The entry of ``name`` as logged by the hook running now (``first``: the entry of the first hook that
        logged it this epoch; ``new``: the entry to add if this hook has none yet). As Lightning's, a name logged
        from several hooks is one value per hook (its own options, step value and epoch aggregate); the Trainer's
        dicts take, for each of their names, the value of the last hook to log it in the order the hooks first
        logged it (:meth:`current`), which is also what the loggers get."""
        new.caller, new.code = _logging_function(self.epoch_end)
        new.epoch_end = self.epoch_end
        key = name if first is None or first.caller == new.caller else f"{name} (from {new.caller})"
        return self.entries.setdefault(key, new)

    def _aggregate(self, entry: _Entry, value: torch.Tensor | float, batch_size: int | None) -> None:
        """Add a value logged with ``on_epoch`` to ``entry``'s epoch aggregate (``reduce_fx``; a mean weighs it by
        ``batch_size``, by default the batch's first dimension)."""
        entry.computed = None  # (logged again after a read of the epoch value, in an epoch-end hook)
        reduce_fx = entry.reduce_fx
        if reduce_fx == "mean":
            weight = float(batch_size if batch_size is not None else batch_size_of(self.current_batch))
            contribution = value * weight
            entry.total = contribution if entry.total is None else entry.total + contribution
            entry.weight += weight
        elif reduce_fx == "sum":
            entry.total = _first(value) if entry.total is None else entry.total + value
        elif reduce_fx == "max":
            entry.total = _first(value) if entry.total is None else _maximum(entry.total, value)
        else:
            entry.total = _first(value) if entry.total is None else _minimum(entry.total, value)

    def synced(self, value: torch.Tensor | float, reduce_fx: str) -> torch.Tensor | float:
        """``value`` reduced across processes now with ``reduce_fx`` (a number as a tensor on :attr:`device`);
        unchanged when the run set no ``reduce``."""
        if self.reduce is None:
            return value
        return self.reduce(value if isinstance(value, torch.Tensor) else torch.tensor(value, device=self.device),
                           reduce_fx)

    def read_step(self) -> dict[str, float]:
        """The per-step values logged since the last call, for the loggers: one host read each (the loggers
        write numbers). A value logged once is not sent again at later steps."""
        log: dict[str, float] = {}
        for entry in self.entries.values():
            if entry.fresh and entry.on_step and entry.logger:
                entry.fresh = False
                log[entry.key(step=True)] = float(_step_tensor(entry.step_value))
        return log

    def current(self, kind: str, loader: int | None = None) -> dict[str, torch.Tensor | float]:
        """What this loop adds now to the Trainer's dict ``kind`` (one of :data:`KINDS`), computed when asked as
        Lightning does: per-step values while the batches run, epoch values after them. A metric logged both per
        step and per epoch is named ``<name>_step`` or ``<name>_epoch`` (the plain name too, for callbacks).
        Callbacks see evaluation loops' epoch values only. Tensors, except the progress bar's floats (one host
        read each); an epoch value logged with ``sync_dist`` is reduced across processes at its first read.
        ``loader``: the epoch values of what evaluation loader ``loader`` logged only (once its batches are done)."""
        if kind not in KINDS:
            raise ValueError(f"unknown kind of metrics {kind!r}: expected one of {KINDS}")
        found: dict[str, torch.Tensor | float] = {}
        if self.phase == "closed":
            return found
        epoch = self.phase == "epoch" or loader is not None
        if kind == "callback_metrics" and not (self.training or epoch):
            return found
        for entry in self.entries.values():
            if loader is not None and entry.loader != loader:
                continue
            if epoch:
                if not entry.on_epoch or (value := self.epoch_value(entry)) is None:
                    continue
                key = entry.epoch_key
            else:
                if not entry.on_step or entry.step_value is None:
                    continue
                value = entry.step_value
                if type(value) is not torch.Tensor:
                    value = _step_tensor(value)
                key = entry.step_key
            if kind == "callback_metrics":
                found[entry.name + entry.suffix] = found[key] = value
            elif kind == "logged_metrics" and entry.logger:
                found[key] = value
            elif kind == "progress_bar_metrics" and entry.prog_bar:
                found[key] = float(value)
        return found

    def epoch_value(self, entry: _Entry) -> torch.Tensor | None:
        """The epoch value of ``entry`` (``None``: nothing was aggregated), computed and reduced once."""
        if entry.computed is not None:
            return entry.computed
        if entry.metric is not None:
            value = entry.metric.compute()
            value = value if isinstance(value, torch.Tensor) else torch.tensor(float(value))
        elif entry.total is None:
            return None
        else:
            total = entry.total if isinstance(entry.total, torch.Tensor) else torch.tensor(entry.total)
            if entry.sync_dist and not entry.rank_zero_only and self.reduce is not None:
                value = self._synced_epoch(total, entry)
            else:
                value = total / entry.weight if entry.reduce_fx == "mean" else total
        entry.computed = value
        return value

    def _synced_epoch(self, total: torch.Tensor, entry: _Entry) -> torch.Tensor:
        """The epoch value of ``entry`` (logged with ``sync_dist``) over all processes: a mean weighs each process
        by the batch sizes it logged, as Lightning does (the sums of ``value * batch_size`` and of the batch sizes
        are reduced together, in one collective, and divided), not the mean of the processes' means."""
        assert self.reduce is not None
        if self.device is not None:
            total = total.to(self.device)
        if entry.reduce_fx != "mean":
            return self.reduce(total, entry.reduce_fx)
        sums = self.reduce(torch.stack([total, torch.tensor(entry.weight, dtype=total.dtype, device=total.device)]),
                           "sum")
        return sums[0] / sums[1]

    def compute_epoch(self, reduce: Callable[[torch.Tensor, str], torch.Tensor],
                      exclude: set[str] | frozenset[str] = frozenset()) -> dict[str, torch.Tensor]:
        """Compute the epoch values (reduced across processes where ``sync_dist`` asks) and enter the epoch phase;
        returns the loggers' (tensors, by the names the loggers get). Every process must call this together (it
        may run collectives). ``exclude``: names already computed."""
        self.reduce, self.phase = reduce, "epoch"
        log = {}
        for name, entry in self.entries.items():
            if entry.on_epoch and name not in exclude and (value := self.epoch_value(entry)) is not None \
                    and entry.logger:
                log[entry.key(step=False)] = value
        return log


def _step_tensor(value: Logged) -> torch.Tensor:
    """A step value as a tensor (a metric object's computed now; a number as a float32 tensor)."""
    if is_metric_object(value):
        value = value.compute()
    return value if isinstance(value, torch.Tensor) else torch.tensor(float(value))


def _first(value: torch.Tensor | float) -> torch.Tensor | float:
    """The first value of an epoch aggregate, as its own tensor (once an epoch): the logged tensor may be changed in
    place later, and the aggregate must not change with it (later values make new tensors)."""
    return value.clone() if isinstance(value, torch.Tensor) else value


def _maximum(a: Any, b: Any) -> Any:  # (a tensor and a tensor, or a number and a number)
    return torch.maximum(a, b) if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor) else max(a, b)


def _minimum(a: Any, b: Any) -> Any:  # (as _maximum's)
    return torch.minimum(a, b) if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor) else min(a, b)
