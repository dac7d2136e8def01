"""The CSV logger: metrics in ``metrics.csv``, hyper-parameters in ``hparams.yaml``, as Lightning's."""

from __future__ import annotations

import csv
import os
import warnings
from argparse import Namespace
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from accelkit.loggers.base import (
    DEFAULT_NAME,
    VersionedLogger,
    add_prefix,
    metric_value,
    naming_write_failures,
    params_to_dict,
)
from accelkit.module.saving import save_hparams_to_yaml
from accelkit.utilities.rank_zero import global_rank


def _parse_cell(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


class CSVLogger(VersionedLogger):
    """Writes metrics to ``<save_dir>/<name>/version_<n>/metrics.csv``, one row per :meth:`log_metrics` call
    with a ``step`` column, the columns in alphabetical order, and hyper-parameters to ``hparams.yaml`` in the same
    directory: Lightning's ``CSVLogger`` and its files, with its default folder ``lightning_logs``.

    Rows are buffered and appended to the file every ``flush_logs_every_n_steps`` steps and by :meth:`save`; when
    a metric name appears that the file has no column for, the file is rewritten with the wider header. The rows
    of an earlier stage of the same run are kept (a ``test`` after a ``fit`` under ``ddp_spawn``, whose stages write
    from different processes); a ``metrics.csv`` a former run left in a folder given by ``version`` is replaced,
    with a warning, as Lightning does.

    :param save_dir: the root directory (the Trainer's ``default_root_dir``).
    :param name: sub-directory for this experiment; an empty string puts versions directly in ``save_dir``.
    :param version: an int (directory ``version_<n>``) or a string (the directory name); by default the next
        free ``version_<n>``, chosen on first use.
    :param prefix: put before every metric name, joined by ``-``.
    :param flush_logs_every_n_steps: write buffered rows each time ``step + 1`` reaches or passes a multiple of
        this (Lightning writes when it is one; rows logged every 50 steps would then never be written early).
    """

    #: Joins ``prefix`` and metric names.
    LOGGER_JOIN_CHAR = "-"

    def __init__(self, save_dir: str | os.PathLike, name: str | None = DEFAULT_NAME, version: int | str | None = None,
                 prefix: str = "", flush_logs_every_n_steps: int = 100) -> None:
        if flush_logs_every_n_steps < 1:
            raise ValueError(f"flush_logs_every_n_steps must be at least 1, got {flush_logs_every_n_steps}")
        self.set_location(save_dir, name, version)
        self.prefix = prefix
        self.flush_logs_every_n_steps = flush_logs_every_n_steps
        #: Every hyper-parameter logged so far (name to value).
        self.hparams: dict[str, Any] = {}
        self._pending: list[dict[str, int | float | str]] = []
        self._columns: list[str] = []
        self._written_columns: list[str] | None = None  # None: this logger has not written metrics.csv yet
        self._flushed_bucket = 0

    @property
    def log_dir(self) -> str:
        """``<root_dir>/version_<n>`` (or ``<root_dir>/<version>`` for a string version): this run's files."""
        return self.version_dir()

    @property
    def metrics_file(self) -> Path:
        """Path of ``metrics.csv``."""
        return Path(self.log_dir) / "metrics.csv"

    @property
    def experiment(self) -> CSVLogger:
        """The object doing the writing: the logger itself."""
        return self

    @property
    def rows(self) -> list[dict[str, int | float | str]]:
        """Every row this logger has logged, oldest first: those already in ``metrics.csv`` (read back, numbers
        parsed, empty cells left out) and those still buffered."""
        written: list[dict[str, int | float | str]] = []
        if self._written_columns is not None and self.metrics_file.is_file():
            with open(self.metrics_file, newline="") as handle:
                written = [{key: _parse_cell(value) for key, value in row.items() if value != ""}
                           for row in csv.DictReader(handle)]
        return written + [dict(row) for row in self._pending]

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Buffer one row: ``step`` and the metrics, tensors converted to numbers. Writes the buffer every
        ``flush_logs_every_n_steps`` steps. Rank zero only.

        :param step: by default, as Lightning's, the number of rows buffered and not yet written: it starts again
            from 0 after each write (:meth:`save`, or a flush, which then comes every ``flush_logs_every_n_steps``
            rows)."""
        if global_rank() != 0:
            return
        counted = step is None
        if step is None:  # Lightning's default: the rows not yet written
            step = len(self._pending)
        row: dict[str, int | float | str] = {"step": step}
        for key, value in add_prefix(metrics, self.prefix, self.LOGGER_JOIN_CHAR).items():
            row[key] = metric_value(key, value)
        new = [key for key in row if key not in self._columns]
        if new:  # Lightning's header: every column name, sorted
            self._columns = sorted(self._columns + new)
        self._pending.append(row)
        if counted:
            if len(self._pending) >= self.flush_logs_every_n_steps:
                self.save()
            return
        # Written whenever the step crosses a multiple of flush_logs_every_n_steps (whatever steps the rows
        # carry: logging every 50 steps with the default 100 writes every second row).
        bucket = (step + 1) // self.flush_logs_every_n_steps
        if bucket != self._flushed_bucket:
            self._flushed_bucket = bucket
            self.save()

    def log_hyperparams(self, params: Mapping[str, Any] | Namespace | None, *args: Any, **kwargs: Any) -> None:
        """Add ``params`` to :attr:`hparams` and rewrite ``hparams.yaml`` (Lightning's file, which
        ``load_from_checkpoint(..., hparams_file=)`` reads; values that are not plain data are written as their
        ``repr``). Rank zero only."""
        if args or kwargs:
            raise TypeError("CSVLogger.log_hyperparams takes the parameters only; unexpected extra arguments "
                            f"{list(args) + sorted(kwargs)}")
        if global_rank() != 0:
            return
        self.hparams.update(params_to_dict(params))
        target = os.path.join(self.log_dir, "hparams.yaml")
        with naming_write_failures(self, target):
            os.makedirs(self.log_dir, exist_ok=True)
            save_hparams_to_yaml(target, self.hparams)

    def save(self) -> None:
        """Write the buffered rows to ``metrics.csv``: appended when the file's header already has every column,
        otherwise the file is rewritten with the wider header. Rank zero only. A failed write is a
        :class:`~accelkit.errors.LoggerWriteError` naming the file."""
        if not self._pending or global_rank() != 0:
            return
        with naming_write_failures(self, self.metrics_file):
            self._write_pending()

    def _write_pending(self) -> None:
        os.makedirs(self.log_dir, exist_ok=True)
        path = self.metrics_file
        if self._written_columns == self._columns and path.is_file():
            with open(path, "a", newline="") as handle:
                csv.DictWriter(handle, fieldnames=self._columns).writerows(self._pending)
        else:
            old = self._rows_to_keep(path)
            tmp = path.with_suffix(".csv.tmp")
            with open(tmp, "w", newline="") as handle:
                writer = csv.DictWriter(handle, fieldnames=self._columns)
                writer.writeheader()
                writer.writerows(old)
                writer.writerows(self._pending)
            os.replace(tmp, path)
            self._written_columns = list(self._columns)
        self._pending.clear()

    def _rows_to_keep(self, path: Path) -> list[dict[str, str]]:
        """The rows of an existing ``metrics.csv`` that a rewrite keeps (their columns join :attr:`_columns`):
        those this logger wrote, and at its first write those of an earlier stage of the same run (a ``fit`` whose
        rows a spawned worker wrote, before the ``test`` of another worker). A file in a folder given by ``version``
        belongs to a former run: it is replaced, with a warning, as Lightning does."""
        if not path.is_file():
            return []
        if self._written_columns is None and not self.folder_of_this_run:
            warnings.warn(f"CSVLogger: {path} of a former run in version {self.version!r} is replaced by this run's "
                          f"metrics; give another version (or none, for a new version_<n> folder) to keep it",
                          UserWarning, stacklevel=4)
            return []
        with open(path, newline="") as handle:
            reader = csv.DictReader(handle)
            old = list(reader)
            header = list(reader.fieldnames or [])
        self._columns = sorted(set(header) | set(self._columns))
        return old

