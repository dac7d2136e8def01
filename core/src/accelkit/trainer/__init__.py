"""The Trainer: the front end that resolves a run from strings, launches it and reports its state.

:mod:`~accelkit.trainer.trainer` holds :class:`Trainer`; :mod:`~accelkit.trainer.arguments` checks its run-control
arguments; :mod:`~accelkit.trainer.properties` is its read-only view; :mod:`~accelkit.trainer.dispatch` takes a
stage from the caller's process to the workers and back.
"""

from accelkit.trainer.trainer import Trainer

__all__ = ["Trainer"]
