"""Profilers: time what the Trainer does, action by action (Lightning's ``Trainer(profiler=...)``).

An *action* is a name such as ``"[LightningModule]Net.training_step"``; the Trainer wraps each hook call in
``profiler.profile(action)`` when a profiler is active. :func:`resolve_profiler` turns the Trainer argument into a
profiler.
"""

from __future__ import annotations

import inspect
import os
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from accelkit.errors import ConfigurationError
from accelkit.utilities.rank_zero import global_rank

#: an empty search path, as Lightning's lightning.pytorch.profilers is a package: importing a path below it
#: that Lightning has and accelkit lacks reaches :class:`accelkit.compat.MissingModuleFinder`, which says what
#: to import instead (Python would stop at "is not a package"); no module is found below this one
__path__: list[str] = []

__all__ = ["Profiler", "PassThroughProfiler", "SimpleProfiler", "PyTorchProfiler", "resolve_profiler"]


class Profiler:
    """Base class of profilers, with the interface of Lightning's ``Profiler``. A subclass implements
    :meth:`start`, :meth:`stop` and :meth:`summary`.

    :param dirpath: directory for the summary file; by default the ``log_dir`` given to :meth:`setup` (the
        Trainer's log directory), else the working directory.
    :param filename: when given, :meth:`describe` writes the summary to ``<dirpath>/<stage>-<filename>.txt``
        (``-<local_rank>`` added when :meth:`setup` got a local rank) instead of printing it, as Lightning does.
    """

    def __init__(self, dirpath: str | os.PathLike | None = None, filename: str | None = None) -> None:
        self.dirpath = None if dirpath is None else os.fspath(dirpath)
        self.filename = filename
        self._stage: str | None = None
        self._local_rank: int | None = None
        self._log_dir: str | None = None

    def start(self, action_name: str) -> None:
        """Begin recording ``action_name``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement start()")

    def stop(self, action_name: str) -> None:
        """End recording ``action_name`` (started by :meth:`start`)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement stop()")

    def summary(self) -> str:
        """A report of what was recorded: empty by default (nothing written or printed), as Lightning's base
        profiler, so that a profiler which only implements :meth:`start` and :meth:`stop` ends its run quietly."""
        return ""

    @contextmanager
    def profile(self, action_name: str) -> Iterator[str]:
        """Record the ``with`` block as ``action_name`` (stopped even when the block raises)."""
        self.start(action_name)
        try:
            yield action_name
        finally:
            self.stop(action_name)

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | os.PathLike | None = None) -> None:
        """Prepare for a run of ``stage`` (``"fit"``, ``"validate"``, ``"test"``, ``"predict"``) in the process of
        ``local_rank``; ``log_dir`` is where the summary file goes when no ``dirpath`` was given."""
        self._stage = stage
        self._local_rank = local_rank
        self._log_dir = None if log_dir is None else os.fspath(log_dir)

    def teardown(self, stage: str | None) -> None:
        """End the run of ``stage``. Does nothing by default."""

    def summary_path(self) -> str | None:
        """Where :meth:`describe` writes the summary: ``<dirpath>/<stage>-<filename>[-<local_rank>].txt``, or
        ``None`` (printed instead) when no ``filename`` was given."""
        if not self.filename:
            return None
        parts = [p for p in (self._stage, self.filename) if p]
        if self._local_rank is not None:
            parts.append(str(self._local_rank))
        return os.path.join(self.dirpath or self._log_dir or os.getcwd(), "-".join(parts) + ".txt")

    def describe(self) -> None:
        """Report at the end of a run: write :meth:`summary` to :meth:`summary_path` in every process, or, without
        a ``filename``, print it on global rank zero; then :meth:`teardown`."""
        text = self.summary()
        path = self.summary_path()
        if text and path is not None:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as handle:
                handle.write(text + "\n")
        elif text and global_rank() == 0:
            print(text, flush=True)
        self.teardown(self._stage)


class PassThroughProfiler(Profiler):
    """A profiler that records nothing (Lightning's ``PassThroughProfiler``), for code that always wants a
    profiler object."""

    def start(self, action_name: str) -> None:
        """Does nothing."""

    def stop(self, action_name: str) -> None:
        """Does nothing."""

    def summary(self) -> str:
        """An empty string."""
        return ""


class SimpleProfiler(Profiler):
    """Wall-clock time per action (``time.perf_counter``): calls, mean and total seconds and share of the time
    since :meth:`setup` (or creation), in a table sorted by total time (Lightning's ``SimpleProfiler``).

    :param dirpath: see :class:`Profiler`.
    :param filename: see :class:`Profiler`.
    :param extended: include the call count and percentage columns and a ``Total`` row; without it, only the
        mean and total time per action.
    """

    def __init__(self, dirpath: str | os.PathLike | None = None, filename: str | None = None,
                 extended: bool = True) -> None:
        super().__init__(dirpath, filename)
        self.extended = extended
        #: Every recorded duration in seconds, by action name.
        self.recorded_durations: dict[str, list[float]] = defaultdict(list)
        self._running: dict[str, float] = {}
        self._begin = time.perf_counter()

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | os.PathLike | None = None) -> None:
        """Start a new run: forget what earlier runs recorded."""
        super().setup(stage, local_rank, log_dir)
        self.recorded_durations.clear()
        self._running.clear()
        self._begin = time.perf_counter()

    def start(self, action_name: str) -> None:
        """Start the clock for ``action_name``; an action already running is an error."""
        if action_name in self._running:
            raise ValueError(f"profiler action {action_name!r} was started twice without stop()")
        self._running[action_name] = time.perf_counter()

    def stop(self, action_name: str) -> None:
        """Stop the clock for ``action_name`` and record the duration; an action not running is an error."""
        end = time.perf_counter()
        begin = self._running.pop(action_name, None)
        if begin is None:
            raise ValueError(f"profiler action {action_name!r} was stopped but never started")
        self.recorded_durations[action_name].append(end - begin)

    def summary(self) -> str:
        """The table of recorded actions, slowest total first; an empty string when nothing was recorded."""
        if not self.recorded_durations:
            return ""
        rows = sorted(((name, len(d), sum(d)) for name, d in self.recorded_durations.items()),
                      key=lambda row: row[2], reverse=True)
        elapsed = time.perf_counter() - self._begin
        if self.extended:
            header = ["Action", "Calls", "Mean (s)", "Total (s)", "% of run"]
            body = [["Total", "-", "-", f"{elapsed:.5f}", "100.0"]]
            body += [[name, str(count), f"{total / count:.5f}", f"{total:.5f}",
                      f"{100 * total / elapsed:.1f}" if elapsed > 0 else "-"] for name, count, total in rows]
        else:
            header = ["Action", "Mean (s)", "Total (s)"]
            body = [[name, f"{total / count:.5f}", f"{total:.5f}"] for name, count, total in rows]
        return _table("Profiler report (wall time)", header, body)


def _table(title: str, header: list[str], body: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True)))

    rule = "-" * len(line(header))
    return "\n".join([title, rule, line(header), rule, *map(line, body), rule])


_PROFILE_KWARGS = frozenset(inspect.signature(torch.profiler.profile.__init__).parameters) - {"self"}


class PyTorchProfiler(Profiler):
    """Operator-level profile through ``torch.profiler.profile`` (Lightning's ``PyTorchProfiler``): one profiling
    session from the first :meth:`start` to :meth:`summary`, each action recorded as a ``record_function`` range
    of its name, so the table lists both the actions and the operators (``aten::mm`` ...) they ran.

    Everything between the first action and the summary is recorded; for long runs pass a ``schedule``
    (``torch.profiler.schedule(...)``), which advances at the end of each ``training_step`` action.

    :param dirpath: see :class:`Profiler`; also where the Chrome trace goes.
    :param filename: see :class:`Profiler`.
    :param group_by_input_shapes: group operators by input shape in the table (records shapes).
    :param export_to_chrome: write the trace as ``<stage>-<filename or "trace">[-<local_rank>].pt.trace.json``
        (open it in ``chrome://tracing`` or Perfetto) when the session ends.
    :param row_limit: rows of the table; ``-1`` for all.
    :param sort_by_key: the table's sort column; by default ``cpu_time_total``, or ``device_time_total`` when
        ``activities`` include a device.
    :param table_kwargs: further arguments of ``key_averages().table()``.
    :param profiler_kwargs: arguments of ``torch.profiler.profile`` (``activities``, ``schedule``,
        ``record_shapes``, ``profile_memory``, ``with_stack``, ...); any other name is an error.
    """

    def __init__(self, dirpath: str | os.PathLike | None = None, filename: str | None = None,
                 group_by_input_shapes: bool = False, export_to_chrome: bool = False, row_limit: int = 20,
                 sort_by_key: str | None = None, table_kwargs: dict[str, Any] | None = None,
                 **profiler_kwargs: Any) -> None:
        super().__init__(dirpath, filename)
        unknown = sorted(set(profiler_kwargs) - _PROFILE_KWARGS)
        if unknown:
            raise TypeError(f"PyTorchProfiler got arguments that torch.profiler.profile does not take: {unknown}; "
                            f"it takes {sorted(_PROFILE_KWARGS)}")
        if group_by_input_shapes:
            profiler_kwargs.setdefault("record_shapes", True)
        activities = profiler_kwargs.get("activities")
        on_device = activities is not None and any(a != torch.profiler.ProfilerActivity.CPU for a in activities)
        self.sort_by_key = sort_by_key or ("device_time_total" if on_device else "cpu_time_total")
        self.row_limit = row_limit
        self.group_by_input_shapes = group_by_input_shapes
        self.export_to_chrome = export_to_chrome
        self.table_kwargs = dict(table_kwargs or {})
        self.profiler_kwargs = profiler_kwargs
        self._session: torch.profiler.profile | None = None
        self._finished: torch.profiler.profile | None = None  # the last stopped session, reported by summary()
        self._ranges: dict[str, torch.autograd.profiler.record_function] = {}

    def start(self, action_name: str) -> None:
        """Open the profiling session if needed and enter a ``record_function`` range named ``action_name``."""
        if action_name in self._ranges:
            raise ValueError(f"profiler action {action_name!r} was started twice without stop()")
        if self._session is None:
            self._session = torch.profiler.profile(**self.profiler_kwargs)
            self._session.__enter__()
        scope = torch.autograd.profiler.record_function(action_name)
        scope.__enter__()
        self._ranges[action_name] = scope

    def stop(self, action_name: str) -> None:
        """Leave the range of ``action_name``; the end of a ``training_step`` action advances a ``schedule``."""
        scope = self._ranges.pop(action_name, None)
        if scope is None:
            raise ValueError(f"profiler action {action_name!r} was stopped but never started")
        scope.__exit__(None, None, None)
        if self._session is not None and "schedule" in self.profiler_kwargs and action_name.endswith("training_step"):
            self._session.step()

    def _close_session(self) -> None:
        if self._session is None:
            return
        for scope in reversed(list(self._ranges.values())):
            scope.__exit__(None, None, None)
        self._ranges.clear()
        session, self._session = self._session, None
        session.__exit__(None, None, None)
        self._finished = session
        if self.export_to_chrome:
            parts = [p for p in (self._stage, self.filename or "trace") if p]
            if self._local_rank is not None:
                parts.append(str(self._local_rank))
            directory = self.dirpath or self._log_dir or os.getcwd()
            os.makedirs(directory, exist_ok=True)
            session.export_chrome_trace(os.path.join(directory, "-".join(parts) + ".pt.trace.json"))

    def summary(self) -> str:
        """End the profiling session (a later :meth:`start` opens a new one) and return the operator table of
        ``key_averages()``; an empty string when nothing was profiled."""
        self._close_session()
        if self._finished is None:
            return ""
        averages = self._finished.key_averages(group_by_input_shape=self.group_by_input_shapes)
        if not len(averages):
            return ""
        table = averages.table(sort_by=self.sort_by_key, row_limit=self.row_limit, **self.table_kwargs)
        return f"PyTorch profiler report (sorted by {self.sort_by_key})\n{table}"

    def teardown(self, stage: str | None) -> None:
        """End the profiling session if one is open."""
        self._close_session()

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()  # a live torch profiler session does not cross processes
        state.update(_session=None, _finished=None, _ranges={})
        return state


def resolve_profiler(value: Profiler | str | None) -> Profiler | None:
    """The profiler for ``Trainer(profiler=value)``: ``None`` for none, ``"simple"`` a :class:`SimpleProfiler`,
    ``"pytorch"`` a :class:`PyTorchProfiler`, a :class:`Profiler` as given. ``"advanced"`` (Lightning's cProfile
    profiler) and any other value are a :class:`~accelkit.errors.ConfigurationError` (a ``ValueError``) naming the
    value and the choices."""
    if value is None or isinstance(value, Profiler):
        return value
    if isinstance(value, str):
        key = value.strip().lower()
        if key == "simple":
            return SimpleProfiler()
        if key == "pytorch":
            return PyTorchProfiler()
        if key == "advanced":
            raise ConfigurationError("profiler='advanced' (Lightning's cProfile-based AdvancedProfiler) is not "
                                     "available in accelkit; use profiler='simple' (wall time per hook), "
                                     "profiler='pytorch' (torch.profiler operators), or pass your own "
                                     "accelkit.profilers.Profiler")
    raise ConfigurationError(f"profiler={value!r} is not a profiler; choose one of None, 'simple', 'pytorch', or an "
                             "accelkit.profilers.Profiler instance")
