"""The :class:`Launcher` base: how a strategy's work reaches its processes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ParamSpec, TypeVar

if TYPE_CHECKING:
    from accelkit.strategies.base import Strategy

_P = ParamSpec("_P")
_R = TypeVar("_R")


class Launcher:
    """Base class: run ``function`` for a strategy and return the global-zero process's result."""

    #: ``True`` when this launcher starts processes (or replicas) of its own: the Trainer then copies the
    #: workers' outcome (trained weights, metrics, callback states) back into the caller's objects.
    launches_workers: bool = False

    def launch(self, strategy: Strategy, function: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """Run ``function(*args, **kwargs)`` on every process of ``strategy``'s run; return global zero's result."""
        raise NotImplementedError(f"{type(self).__name__} must implement launch()")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
