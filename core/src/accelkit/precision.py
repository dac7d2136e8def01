"""Precision: the number formats of weights and computation.

The classes here are device-neutral building blocks: plugins register them under names for their
accelerator (``PrecisionRecord("bf16-mixed", MixedPrecision, accelerators=("cpu",), options={...})``), or
subclass them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

import torch
from torch import nn

from accelkit.utilities.apply_func import apply_to_tensors
from accelkit.utilities.model_helpers import is_overridden

#: the methods a precision may change the backward pass and the optimizer step with (see ``passes_through``)
_STEP_METHODS = ("backward", "scale_loss", "unscale_gradients", "optimizer_step")

#: a batch or a module's output: any nesting of containers and tensors, given back with the same structure
_Data = TypeVar("_Data")


class AutocastDevice(Protocol):
    """What a precision reads of its accelerator (an :class:`~accelkit.Accelerator`): the autocast device type."""

    @property
    def autocast_device_type(self) -> str | None:
        """The ``device_type`` given to :class:`torch.autocast`, or ``None`` where autocast does not apply."""


def to_default_dtype(data: _Data) -> _Data:
    """``data`` with its floating-point tensors in ``torch.get_default_dtype()`` (other tensors unchanged): what
    :meth:`TruePrecision.convert_output` and :meth:`MixedPrecision.convert_output` return."""
    default = torch.get_default_dtype()
    return apply_to_tensors(data, lambda t: t.to(default) if t.is_floating_point() else t)


class Precision:
    """Full 32-bit precision, the default: nothing is converted.

    Subclasses override the pieces they change. The Trainer calls, in order: :meth:`convert_module` once
    after the module is on its device, :meth:`convert_input` on each batch, :meth:`forward_context` around
    each step, :meth:`backward`, :meth:`unscale_gradients` before clipping, and :meth:`optimizer_step`.
    """

    #: canonical name, filled in from the record that chose this class
    name: str = "32-true"

    def __init__(self, **options: object) -> None:
        self.options = options
        #: the run's :class:`~accelkit.Accelerator` once connected (subclasses read any of its attributes)
        self.accelerator: Any = None

    def connect(self, accelerator: AutocastDevice) -> None:
        """Called once the accelerator is known (before any worker starts)."""
        self.accelerator = accelerator

    def convert_module(self, module: nn.Module) -> nn.Module:
        """Convert the module's parameters to this precision (after the move to the device)."""
        return module

    def convert_input(self, batch: _Data) -> _Data:
        """Convert floating-point tensors of a batch (after the move to the device)."""
        return batch

    def forward_context(self) -> contextlib.AbstractContextManager:
        """Context around training/evaluation steps (autocast, for mixed precision)."""
        return contextlib.nullcontext()

    def convert_output(self, data: _Data) -> _Data:
        """Convert floating-point tensors a :class:`~accelkit.Fabric`-wrapped module returns (after
        :meth:`forward_context` ends), as Lightning Fabric's precisions do; the Trainer does not call it. The default
        returns ``data`` unchanged; :class:`TruePrecision` and :class:`MixedPrecision` give the tensors the default
        dtype (``torch.get_default_dtype()``, float32 unless changed), so code after the forward computes as it
        would at full precision."""
        return data

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss to back-propagate (a gradient scaler multiplies it); used when the Module overrides
        ``backward``, so the override still gets a scaled loss."""
        return loss

    def backward(self, loss: torch.Tensor) -> None:
        """Back-propagate ``loss``."""
        self.scale_loss(loss).backward()

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Bring gradients to their true scale before clipping (a no-op without a gradient scaler)."""

    def optimizer_step(self, optimizer: torch.optim.Optimizer, step: Callable[[], object] | None = None
                       ) -> bool | None:
        """Step ``optimizer`` (through ``step`` if given). ``False`` if the step was skipped, ``None`` if unknown."""
        (step or optimizer.step)()
        return True

    def passes_through(self) -> bool:
        """Whether this precision's :meth:`scale_loss`, :meth:`backward`, :meth:`unscale_gradients` and
        :meth:`optimizer_step` amount to a plain ``loss.backward()`` and ``optimizer.step()`` (no loss scaling,
        nothing around them). The loops ask once per fit and then call those two directly; a subclass that changes
        any of the four without overriding it keeps this ``False``."""
        return not self.overridden_step_methods()

    def overridden_step_methods(self) -> list[str]:
        """Which of :meth:`backward`, :meth:`scale_loss`, :meth:`unscale_gradients` and :meth:`optimizer_step` this
        precision's class overrides (below :class:`Precision`; below :class:`MixedPrecision` for its subclasses)."""
        return [name for name in _STEP_METHODS if is_overridden(name, self, Precision)]

    def state_dict(self) -> dict[str, object]:
        """State to save in checkpoints (a gradient scaler's, for instance)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class TruePrecision(Precision):
    """Weights, inputs and computation all in one dtype (``"64-true"``, ``"bf16-true"``, ``"16-true"``).

    :param dtype: the ``torch.dtype``, or its name (``"float64"``).
    """

    def __init__(self, dtype: torch.dtype | str = torch.float64, **options: object) -> None:
        super().__init__(**options)
        self.dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype

    def convert_module(self, module: nn.Module) -> nn.Module:
        return module.to(dtype=self.dtype)

    def convert_input(self, batch: _Data) -> _Data:
        return apply_to_tensors(batch, lambda t: t.to(self.dtype) if t.is_floating_point() else t)

    def convert_output(self, data: _Data) -> _Data:
        return to_default_dtype(data)

    @contextlib.contextmanager
    def forward_context(self) -> Iterator[None]:
        # Tensors created inside the step (torch.zeros, ...) get the same dtype, as under Lightning's true
        # precisions (bfloat16 and float16 included).
        previous = torch.get_default_dtype()
        torch.set_default_dtype(self.dtype)
        try:
            yield
        finally:
            torch.set_default_dtype(previous)


class MixedPrecision(Precision):
    """Weights in float32, eligible operations run in a lower precision under :class:`torch.autocast`.

    :param dtype: the autocast dtype (``torch.bfloat16`` or ``torch.float16``, or their names).
    :param scaler: use a :class:`torch.amp.GradScaler` (needed for float16: it skips steps whose gradients
        hold inf/NaN and adapts the scale).
    """

    def __init__(self, dtype: torch.dtype | str = torch.bfloat16, scaler: bool = False, **options: object) -> None:
        super().__init__(**options)
        self.dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        self.use_scaler = scaler
        self.scaler: torch.amp.GradScaler | None = None

    def connect(self, accelerator: AutocastDevice) -> None:
        super().connect(accelerator)
        if accelerator.autocast_device_type is None:
            raise ValueError(f"{type(accelerator).__name__} declares no autocast device type")

    def _ensure_scaler(self) -> torch.amp.GradScaler | None:
        if self.use_scaler and self.scaler is None:
            self.scaler = torch.amp.GradScaler(self.accelerator.autocast_device_type)
        return self.scaler

    def convert_output(self, data: _Data) -> _Data:
        return to_default_dtype(data)

    def forward_context(self) -> contextlib.AbstractContextManager:
        return torch.autocast(device_type=self.accelerator.autocast_device_type, dtype=self.dtype)

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        scaler = self._ensure_scaler()
        return scaler.scale(loss) if scaler is not None else loss

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Unscale once per step: a second call in the same step (clipping after the hook) does nothing."""
        scaler = self._ensure_scaler()
        if scaler is None:
            return
        from torch.amp.grad_scaler import OptState

        state = scaler._per_optimizer_states[id(optimizer)]
        if state["stage"] is not OptState.UNSCALED:
            scaler.unscale_(optimizer)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, step: Callable[[], object] | None = None
                       ) -> bool | None:
        scaler = self._ensure_scaler()
        if scaler is None:
            return super().optimizer_step(optimizer, step)
        scaler.step(optimizer)  # skips the step when the gradients hold inf/NaN
        scaler.update()
        return None  # finding out whether it stepped would cost a host sync on every step

    def passes_through(self) -> bool:
        """Without a gradient scaler (``bf16-mixed``) the backward pass and the step are plain, unless a subclass
        changes them."""
        return not self.use_scaler and not self.overridden_step_methods()

    def overridden_step_methods(self) -> list[str]:
        """The step methods a subclass overrides below :class:`MixedPrecision` (whose own are the defaults here)."""
        return [name for name in _STEP_METHODS if is_overridden(name, self, MixedPrecision)]

    def state_dict(self) -> dict[str, object]:
        scaler = self._ensure_scaler()
        return {"scaler": scaler.state_dict()} if scaler is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        scaler = self._ensure_scaler()
        if scaler is not None and "scaler" in state:
            scaler.load_state_dict(state["scaler"])
