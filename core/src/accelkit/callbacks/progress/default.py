"""The Trainer's choice of progress bar (Lightning's rule)."""

from __future__ import annotations

from accelkit.callbacks.base import Callback
from accelkit.callbacks.progress.progress_bar import ProgressBar
from accelkit.callbacks.progress.tqdm_progress import TQDMProgressBar
from accelkit.errors import ConfigurationError


def configure_progress_bar(callbacks: list[Callback], enabled: bool) -> None:
    """The run's progress bar: the :class:`~accelkit.callbacks.ProgressBar` among ``callbacks`` if there is one, else a
    :class:`~accelkit.callbacks.TQDMProgressBar` added when ``enabled`` (``enable_progress_bar``). Several bars, or a
    bar given while
    the bar is off (``enable_progress_bar=False``, ``barebones=True``), are refused."""
    given = [c for c in callbacks if isinstance(c, ProgressBar)]
    if len(given) > 1:
        raise ConfigurationError(f"the callbacks include {len(given)} progress bars "
                                 f"({', '.join(type(c).__name__ for c in given)}); a run shows one: keep one of them")
    if given and not enabled:
        raise ConfigurationError(f"enable_progress_bar=False (or barebones=True) but {type(given[0]).__name__} is "
                                 "among the callbacks; remove one of them")
    if enabled and not given:
        callbacks.append(TQDMProgressBar())
