"""A ``torch.compile``d Module given to the Trainer: ``trainer.fit(torch.compile(model))``, as Lightning accepts it.

``torch.compile(module)`` returns a wrapper (``OptimizedModule``) whose ``_orig_mod`` is the user's Module. The
Trainer runs the user's Module (its hooks, steps, ``self.log``...) and makes its ``forward`` the compiled one for
the duration of the stage, in the process that runs the work: in place, or in every spawned worker, where
``torch.compile``'s settings (backend, mode, ``fullgraph``, ``dynamic``, options) travel with the run and the
forward is compiled again there. The wrapper itself is left as it was; it shares the Module's parameters, so it
sees the trained weights.
"""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TypedDict

from torch import nn

if TYPE_CHECKING:
    from accelkit.module.datamodule import DataModule
    from accelkit.module.module import Module
    from accelkit.strategies.launchers.result import WorkerResult
    from accelkit.trainer.trainer import Trainer

#: ``torch.compile``'s context (a compiled wrapper's ``dynamo_ctx``): makes a function its compiled version
CompileContext = Callable[[Callable[..., object]], Callable[..., object]]


def unwrap_compiled(model: object) -> tuple[object, CompiledForward | None]:
    """``(module, compiled)``: for a ``torch.compile`` wrapper, the Module inside it and how it was compiled;
    for anything else, ``(model, None)``."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")  # imported whenever a compiled module exists
    wrapper = getattr(eval_frame, "OptimizedModule", None)
    if wrapper is None or not isinstance(model, wrapper):
        return model, None
    return model._orig_mod, CompiledForward(model.dynamo_ctx)


class CompiledForward:
    """How a module was compiled (``torch.compile``'s context, which pickles with its settings), and the means to
    make a module's ``forward`` the compiled one and to undo it.

    :param context: the ``dynamo_ctx`` of the ``torch.compile`` wrapper.
    """

    def __init__(self, context: CompileContext) -> None:
        self.context = context

    def attach(self, module: nn.Module) -> None:
        """Make ``module(x)`` run the compiled ``forward`` (an instance attribute shadowing the class's)."""
        module.__dict__["forward"] = CompiledCall(module, self.context)

    @staticmethod
    def detach(module: nn.Module) -> None:
        """Give ``module`` its own ``forward`` back."""
        if isinstance(module.__dict__.get("forward"), CompiledCall):
            del module.__dict__["forward"]


class CompiledCall:
    """``module.forward`` compiled: calls the compiled class ``forward`` with the module it belongs to.

    A copy of the module (``copy.deepcopy``, as the weight-averaging callback makes) gets a call bound to the copy
    that shares the compiled function; pickled, it carries the compile settings and compiles again when loaded.
    """

    def __init__(self, module: nn.Module, context: CompileContext) -> None:
        self.module, self.context = module, context
        self.function = context(type(module).forward)

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self.function(self.module, *args, **kwargs)

    def __deepcopy__(self, memo: dict[int, object]) -> CompiledCall:
        other = CompiledCall.__new__(CompiledCall)
        other.module = copy.deepcopy(self.module, memo)
        other.context, other.function = self.context, self.function
        return other

    def __getstate__(self) -> _CallState:
        return {"module": self.module, "context": self.context}

    def __setstate__(self, state: _CallState) -> None:
        CompiledCall.__init__(self, state["module"], state["context"])


class _CallState(TypedDict):
    """What a pickled :class:`CompiledCall` carries."""

    module: nn.Module
    context: CompileContext


def run_compiled_stage(compiled: CompiledForward, trainer: Trainer, stage: str, module: Module,
                       datamodule: DataModule | None, loaders: dict[str, object],
                       ckpt_path: str | os.PathLike[str] | None, weights_only: bool, prepared: bool,
                       options: dict[str, bool]) -> WorkerResult:
    """:func:`accelkit.loops.run.run_stage` with ``module``'s ``forward`` compiled as the user compiled it (in the
    process that runs the work: the caller's, or each spawned worker), then given back its own."""
    from accelkit.loops.run import run_stage

    compiled.attach(module)
    try:
        return run_stage(trainer, stage, module, datamodule, loaders, ckpt_path, weights_only, prepared, options)
    finally:
        compiled.detach(module)
