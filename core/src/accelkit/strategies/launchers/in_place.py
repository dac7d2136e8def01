"""Launchers that start nothing: the work runs in this process (:class:`InPlaceLauncher`), or in each of
the processes an external launcher such as torchrun or srun started (:class:`ExternalLauncher`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from accelkit.strategies.launchers import interrupt
from accelkit.strategies.launchers.base import Launcher

if TYPE_CHECKING:
    from accelkit.environments.base import ClusterEnvironment
    from accelkit.strategies.base import Strategy

_P = ParamSpec("_P")
_R = TypeVar("_R")


class InPlaceLauncher(Launcher):
    """The work runs here, in the calling process.

    The first SIGINT/SIGTERM during ``fit`` stops training at the end of the current batch (a checkpoint of that
    state is written and :class:`~accelkit.errors.TrainingInterrupted` raised); if that end is not reached within
    :attr:`grace_s` (a step still compiling), the run stops there without saving. The second signal raises
    ``KeyboardInterrupt`` at once.
    """

    #: seconds the run gets after the first signal to end its step and save, before it stops without saving
    grace_s: float = interrupt.STOP_GRACE_S

    def launch(self, strategy: Strategy, function: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        if strategy.run_context.stage != "fit":
            return function(*args, **kwargs)  # nothing to save: Ctrl-C keeps its usual meaning
        control = interrupt.StopControl()
        deadline = interrupt.Deadline(self.grace_s)

        def first(signum: int) -> None:
            control.request(signum)
            deadline.arm(signum)
            interrupt.announce_first(signum, "stopping after the current batch and saving a checkpoint (within "
                                             f"{self.grace_s:g} s, else without saving)")

        def second(signum: int) -> None:
            raise KeyboardInterrupt(f"{interrupt.signal_name(signum)} received twice: stopped at once")

        with interrupt.handle_signals(first, second), interrupt.active(control), deadline:
            return function(*args, **kwargs)


class ExternalLauncher(InPlaceLauncher):
    """Every process was started by an outside launcher (torchrun, ``srun``, ``mpirun``...); each runs the work
    in place and the strategy joins them (its :attr:`~accelkit.Strategy.cluster_environment` says how).

    :param environment: the detected cluster environment, shown in ``repr`` and error messages.
    """

    def __init__(self, environment: ClusterEnvironment | None = None) -> None:
        self.environment = environment

    def launch(self, strategy: Strategy, function: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """Run in place. Signals keep their default meaning: the outside launcher delivers them to each process
        at its own moment, so the processes could not agree on a step to stop at. Except in a ``fit`` under a
        launcher that restarts the run by itself (an elastic torchrun's agent stops its processes with SIGTERM
        before it restarts them) with a strategy whose processes each hold the whole state
        (:attr:`~accelkit.Strategy.replicates_state`): there SIGTERM stops training after the current batch,
        as in place, and the first process of each node writes that step alone (:mod:`accelkit.loops.survivor`)."""
        from accelkit.environments.base import restart_attempt_of

        environment = getattr(strategy, "cluster_environment", None) or self.environment
        if strategy.replicates_state and restart_attempt_of(environment) is not None:
            return super().launch(strategy, function, *args, **kwargs)
        return function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(environment={getattr(self.environment, 'name', self.environment)!r})"
