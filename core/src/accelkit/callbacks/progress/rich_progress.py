"""``RichProgressBar``: the progress bars drawn with the `rich <https://github.com/Textualize/rich>`_ library."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from accelkit.callbacks.progress.progress_bar import RefreshingProgressBar

if TYPE_CHECKING:
    from rich.progress import Progress, ProgressColumn, Task, TaskID
    from rich.style import StyleType

    from accelkit.module.module import Module
    from accelkit.trainer.trainer import Trainer

#: seconds between two redraws at most (the numbers still move every ``refresh_rate`` batches)
REDRAW_INTERVAL_S = 0.1


@dataclass
class RichProgressBarTheme:
    """Styles of the parts of a :class:`RichProgressBar` (any `rich style
    <https://rich.readthedocs.io/en/stable/style.html>`_).

    :param description: the bar's label (``Epoch N``, ``Validation``...).
    :param progress_bar: the bar while it fills.
    :param progress_bar_finished: the full bar.
    :param progress_bar_pulse: the bar of a loader without a length (a moving pulse).
    :param batch_progress: the ``done/total`` batch count.
    :param time: elapsed and remaining time.
    :param processing_speed: batches per second.
    :param metrics: the metrics' text.
    :param metrics_text_delimiter: between two metrics.
    :param metrics_format: format spec of float metrics.
    """

    description: StyleType = ""
    progress_bar: StyleType = "#6206E0"
    progress_bar_finished: StyleType = "#6206E0"
    progress_bar_pulse: StyleType = "#6206E0"
    batch_progress: StyleType = ""
    time: StyleType = "dim"
    processing_speed: StyleType = "dim underline"
    metrics: StyleType = "italic"
    metrics_text_delimiter: str = " "
    metrics_format: str = ".3f"


class RichProgressBar(RefreshingProgressBar):
    """Progress bars drawn with rich (Lightning's ``RichProgressBar``): one line per running loop with its
    label, the bar (a pulse for a loader without a length), batches done of the total, elapsed and remaining
    time, speed, and on the training line :meth:`~accelkit.callbacks.ProgressBar.get_metrics`. rich is an optional
    extra: ``pip install rich``
    (or ``pip install "accelkit[rich]"``); without it, constructing this callback raises ``ImportError``.

    With this bar among the callbacks, the Trainer's default model summary is a
    :class:`~accelkit.callbacks.RichModelSummary`, as in Lightning.

    :param refresh_rate: move the bars every this many batches (redrawn at most ten times a second); ``0``
        hides them.
    :param leave: keep each finished epoch's training line; by default one line is reused across epochs.
    :param theme: the styles (:class:`RichProgressBarTheme`).
    :param console_kwargs: keyword arguments of the ``rich.console.Console`` the bars are drawn on (``file=``,
        ``width=``, ``force_terminal=``...).
    """

    def __init__(self, refresh_rate: int = 1, leave: bool = False, theme: RichProgressBarTheme | None = None,
                 console_kwargs: dict[str, Any] | None = None) -> None:
        try:
            import rich  # noqa: F401
        except ImportError:
            raise ModuleNotFoundError("RichProgressBar draws with the rich package, which is not installed: pip "
                                      "install rich (or the core's extra: pip install 'accelkit[rich]'), or use "
                                      "TQDMProgressBar") from None
        super().__init__(refresh_rate)
        self._leave = leave
        self.theme = theme if theme is not None else RichProgressBarTheme()
        self._console_kwargs = dict(console_kwargs or {})
        self.progress: Progress | None = None  #: the ``rich.progress.Progress`` drawing the bars (during a run)
        self.train_progress_bar_id: TaskID | None = None
        self.val_progress_bar_id: TaskID | None = None
        self.test_progress_bar_id: TaskID | None = None
        self.predict_progress_bar_id: TaskID | None = None
        self._drawn_at = 0.0
        self._totals: dict[TaskID, int | None] = {}

    def __getstate__(self) -> dict[str, object]:
        state = super().__getstate__()  # the console holds the terminal's stream: spawned workers make their own
        state.update(progress=None, train_progress_bar_id=None, val_progress_bar_id=None, test_progress_bar_id=None,
                     predict_progress_bar_id=None)
        return state

    def configure_columns(self, trainer: Trainer) -> list[ProgressColumn]:
        """The columns of every line (rich ``ProgressColumn`` objects); override it to change them."""
        return _columns(self.theme)

    # ----------------------------------------------------------------- the display
    def _start(self, trainer: Trainer) -> None:
        if self.progress is not None or self.is_disabled:
            return
        from rich.console import Console
        from rich.progress import Progress

        self.progress = Progress(*self.configure_columns(trainer), console=Console(**self._console_kwargs),
                                 auto_refresh=False, redirect_stdout=False, redirect_stderr=False)
        self.progress.start()

    def _stop(self) -> None:
        if self.progress is not None:
            self.progress.refresh()
            self.progress.stop()
            self.progress = None
        self.train_progress_bar_id = self.val_progress_bar_id = None
        self.test_progress_bar_id = self.predict_progress_bar_id = None
        self._totals = {}

    def _task(self, task_id: TaskID | None, total: int | None, description: str, keep: bool = False) -> TaskID:
        """A line at 0 of ``total`` labelled ``description``: ``task_id``'s line again, or a new one (also when
        ``keep`` leaves the old one on screen)."""
        progress = cast("Progress", self.progress)  # the callers asked that the display is running
        if task_id is None or keep:
            task_id = progress.add_task(description, total=total, metrics="", total_text=_of(total))
        else:
            progress.reset(task_id, total=total, description=description, visible=True)
            progress.update(task_id, total_text=_of(total))
            for task in progress.tasks:
                if task.id == task_id:
                    task.total = total  # rich keeps the old total when given None (a loader without a length)
        self._totals[task_id] = total
        return task_id

    def _move(self, task_id: TaskID | None, count: int, trainer: Trainer | None = None,
              pl_module: Module | None = None) -> None:
        """``task_id``'s line to ``count`` batches (every ``refresh_rate``); redrawn at most every
        :data:`REDRAW_INTERVAL_S` seconds and at the loader's end, with the metrics when ``trainer`` is given."""
        progress = self.progress
        if progress is None or task_id is None:
            return
        last = count == self._totals.get(task_id)
        if count % self._refresh_rate and not last:
            return
        now = time.monotonic()
        if last or now - self._drawn_at >= REDRAW_INTERVAL_S:
            progress.update(task_id, completed=count)
            if trainer is not None and pl_module is not None:
                self._show_metrics(trainer, pl_module)
            progress.refresh()
            self._drawn_at = now

    def _show_metrics(self, trainer: Trainer, pl_module: Module) -> None:
        if self.progress is not None and self.train_progress_bar_id is not None:
            self.progress.update(self.train_progress_bar_id,
                                 metrics=_format_metrics(self.get_metrics(trainer, pl_module), self.theme))

    # ----------------------------------------------------------------- hooks
    def on_sanity_check_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._start(trainer)

    def on_sanity_check_end(self, trainer: Trainer, pl_module: Module) -> None:
        if self.progress is not None and self.val_progress_bar_id is not None:
            self.progress.update(self.val_progress_bar_id, visible=False)
            self.progress.refresh()
        self.val_progress_bar_id = None
        self.reset_dataloader_idx_tracker()

    def on_train_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._start(trainer)

    def on_train_epoch_start(self, trainer: Trainer, pl_module: Module) -> None:
        if self.progress is None:
            return
        self.train_progress_bar_id = self._task(self.train_progress_bar_id, self.total_train_batches,
                                                f"Epoch {trainer.current_epoch}", keep=self._leave)
        self.progress.refresh()

    def on_train_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self.progress is not None:
            self._move(self.train_progress_bar_id, batch_idx + 1, trainer, pl_module)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        if self.progress is not None:
            self._show_metrics(trainer, pl_module)
            self.progress.refresh()

    def on_train_end(self, trainer: Trainer, pl_module: Module) -> None:
        self._stop()

    def on_validation_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._start(trainer)

    def on_validation_batch_start(self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int,
                                  dataloader_idx: int = 0) -> None:
        if self.progress is None or not self.has_dataloader_changed(dataloader_idx):
            return
        label = self.sanity_check_description if trainer.sanity_checking else self.validation_description
        counts = trainer.num_sanity_val_batches if trainer.sanity_checking else trainer.num_val_batches
        self.val_progress_bar_id = self._task(self.val_progress_bar_id, self.total_val_batches_current_dataloader,
                                              _label(label, dataloader_idx, counts))

    def on_validation_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        self._move(self.val_progress_bar_id, batch_idx + 1)

    def on_validation_end(self, trainer: Trainer, pl_module: Module) -> None:
        self.reset_dataloader_idx_tracker()
        if trainer.state.fn != "fit":
            self._stop()
        elif self.progress is not None and not trainer.sanity_checking:
            if self.val_progress_bar_id is not None:
                self.progress.update(self.val_progress_bar_id, visible=False)
            self._show_metrics(trainer, pl_module)
            self.progress.refresh()

    def on_test_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._start(trainer)

    def on_test_batch_start(self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int,
                            dataloader_idx: int = 0) -> None:
        if self.progress is not None and self.has_dataloader_changed(dataloader_idx):
            label = _label(self.test_description, dataloader_idx, trainer.num_test_batches)
            total = self.total_test_batches_current_dataloader
            self.test_progress_bar_id = self._task(self.test_progress_bar_id, total, label)

    def on_test_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int,
                          dataloader_idx: int = 0) -> None:
        self._move(self.test_progress_bar_id, batch_idx + 1)

    def on_test_end(self, trainer: Trainer, pl_module: Module) -> None:
        self.reset_dataloader_idx_tracker()
        self._stop()

    def on_predict_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._start(trainer)

    def on_predict_batch_start(self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int,
                               dataloader_idx: int = 0) -> None:
        if self.progress is not None and self.has_dataloader_changed(dataloader_idx):
            self.predict_progress_bar_id = self._task(
                self.predict_progress_bar_id, self.total_predict_batches_current_dataloader,
                _label(self.predict_description, dataloader_idx, trainer.num_predict_batches))

    def on_predict_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int,
                             dataloader_idx: int = 0) -> None:
        self._move(self.predict_progress_bar_id, batch_idx + 1)

    def on_predict_end(self, trainer: Trainer, pl_module: Module) -> None:
        self.reset_dataloader_idx_tracker()
        self._stop()

    def teardown(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        self._stop()

    def on_exception(self, trainer: Trainer, pl_module: Module, exception: BaseException) -> None:
        self._stop()

    def print(self, *args: Any, **kwargs: Any) -> None:
        """Print through the bars' console (above the bars while they run)."""
        if self.progress is not None:
            self.progress.console.print(*args, **kwargs)
        else:
            print(*args, **kwargs)


def _of(total: int | None) -> str:
    return "?" if total is None else str(total)


def _label(description: str, dataloader_idx: int, counts: float | list[float]) -> str:
    several = isinstance(counts, (list, tuple)) and len(counts) > 1
    return f"{description} DataLoader {dataloader_idx}" if several else description


def _format_metrics(metrics: Mapping[str, object], theme: RichProgressBarTheme) -> str:
    parts = [f"{name}: {value:{theme.metrics_format}}" if isinstance(value, float) else f"{name}: {value}"
             for name, value in metrics.items()]
    return theme.metrics_text_delimiter.join(parts)


def _batches(task: Task) -> str:
    return f"{int(task.completed)}/{task.fields.get('total_text', '?')}"


def _times(task: Task) -> str:
    elapsed = task.finished_time if task.finished else task.elapsed
    text = _clock(elapsed)
    if task.total is not None:
        text += f" • {_clock(task.time_remaining)}"
    return text


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-:--:--"
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _speed(task: Task) -> str:
    speed = task.finished_speed or task.speed
    return "" if speed is None else f"{speed:>.2f}it/s"


def _columns(theme: RichProgressBarTheme) -> list[ProgressColumn]:
    """The default columns: label, bar, batch count, time, speed, metrics."""
    from rich.progress import BarColumn, ProgressColumn, TextColumn
    from rich.text import Text

    class Computed(ProgressColumn):
        """A column whose text a function computes from the task."""

        def __init__(self, text: Callable[[Task], str], style: StyleType) -> None:
            super().__init__()
            self.text, self.style = text, style

        def render(self, task: Task) -> Text:
            return Text(self.text(task), style=self.style)

    return [
        TextColumn("[progress.description]{task.description}", style=theme.description),
        BarColumn(complete_style=theme.progress_bar, finished_style=theme.progress_bar_finished,
                  pulse_style=theme.progress_bar_pulse),
        Computed(_batches, theme.batch_progress),
        Computed(_times, theme.time),
        Computed(_speed, theme.processing_speed),
        Computed(lambda task: task.fields.get("metrics", ""), theme.metrics),
    ]
