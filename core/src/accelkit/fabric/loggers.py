"""Lightning Fabric's loggers (``lightning.fabric.loggers``): accelkit's CSV and TensorBoard loggers, constructed
with Fabric's ``root_dir=`` (where Lightning's Trainer loggers take ``save_dir=``); they write from global rank 0
only, as :meth:`accelkit.Fabric.log_dict` calls them."""

from __future__ import annotations

import os
from typing import Any

from accelkit.loggers.base import Logger
from accelkit.loggers.csv_logs import CSVLogger as _TrainerCSVLogger
from accelkit.loggers.tensorboard import TensorBoardLogger as _TrainerTensorBoardLogger

DEFAULT_NAME = "lightning_logs"

__all__ = ["CSVLogger", "Logger", "TensorBoardLogger"]


class CSVLogger(_TrainerCSVLogger):
    """Metrics to ``<root_dir>/<name>/version_<n>/metrics.csv`` (Lightning Fabric's ``CSVLogger``).

    :param root_dir: the folder the versions go in.
    :param name: sub-folder of this experiment (``"lightning_logs"``); ``""`` or ``None`` for none.
    :param version: an int (``version_<n>``) or a folder name; by default the next free ``version_<n>``.
    :param prefix: put before every metric name, joined by ``-``.
    :param flush_logs_every_n_steps: how often buffered rows are written.
    """

    def __init__(self, root_dir: str | os.PathLike, name: str | None = DEFAULT_NAME, version: int | str | None = None,
                 prefix: str = "", flush_logs_every_n_steps: int = 100) -> None:
        super().__init__(root_dir, name=name, version=version, prefix=prefix,
                         flush_logs_every_n_steps=flush_logs_every_n_steps)


class TensorBoardLogger(_TrainerTensorBoardLogger):
    """Metrics as TensorBoard events under ``<root_dir>/<name>/version_<n>`` (Lightning Fabric's
    ``TensorBoardLogger``).

    :param root_dir: the folder the versions go in.
    :param name: sub-folder of this experiment (``"lightning_logs"``); ``""`` or ``None`` for none.
    :param version: an int (``version_<n>``) or a folder name; by default the next free ``version_<n>``.
    :param default_hp_metric: log a placeholder ``hp_metric`` with the hyper-parameters.
    :param prefix: put before every metric name.
    :param sub_dir: a sub-folder of the version folder for the events.
    :param kwargs: ``SummaryWriter`` arguments.
    """

    def __init__(self, root_dir: str | os.PathLike, name: str | None = DEFAULT_NAME, version: int | str | None = None,
                 default_hp_metric: bool = True, prefix: str = "", sub_dir: str | os.PathLike | None = None,
                 **kwargs: Any) -> None:
        super().__init__(root_dir, name=name, version=version, default_hp_metric=default_hp_metric, prefix=prefix,
                         sub_dir=sub_dir, **kwargs)
