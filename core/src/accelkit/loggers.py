"""Metric loggers."""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any


class CSVLogger:
    """Writes metrics to ``<save_dir>/<name>/version_<n>/metrics.csv``, one row per logging call.

    :param save_dir: the root directory (the Trainer's ``default_root_dir``).
    :param name: sub-directory name.
    :param version: an int or a string; by default the next free ``version_<n>``.
    """

    def __init__(self, save_dir: str | os.PathLike, name: str = "logs", version: int | str | None = None) -> None:
        self.save_dir = Path(save_dir)
        self.name = name
        self._version = version
        self.rows: list[dict[str, Any]] = []
        self._columns: list[str] = []

    @property
    def version(self) -> int | str:
        """The version, chosen on first use."""
        if self._version is None:
            root = self.save_dir / self.name
            taken = [int(p.name.split("_")[1]) for p in root.glob("version_*") if p.name.split("_")[1].isdigit()]
            self._version = max(taken, default=-1) + 1
        return self._version

    @property
    def log_dir(self) -> Path:
        """Directory of this run's files."""
        version = self.version
        return self.save_dir / self.name / (version if isinstance(version, str) else f"version_{version}")

    @property
    def metrics_file(self) -> Path:
        """Path of the CSV file."""
        return self.log_dir / "metrics.csv"

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Record one row (written to disk by :meth:`save`)."""
        row = {"step": step, **metrics}
        for key in row:
            if key not in self._columns:
                self._columns.append(key)
        self.rows.append(row)

    def log_hyperparams(self, params: dict[str, Any]) -> None:
        """Write ``hparams.csv`` (name, value)."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_dir / "hparams.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["name", "value"])
            writer.writerows(sorted((k, repr(v)) for k, v in params.items()))

    def save(self) -> None:
        """Rewrite ``metrics.csv`` with every row so far (columns can appear mid-run)."""
        if not self.rows:
            return
        self.log_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.metrics_file.with_suffix(".csv.tmp")
        with open(tmp, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=self._columns)
            writer.writeheader()
            writer.writerows(self.rows)
        os.replace(tmp, self.metrics_file)
