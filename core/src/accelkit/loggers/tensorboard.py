"""The TensorBoard logger: event files written by ``torch.utils.tensorboard.SummaryWriter`` (or ``tensorboardX``'s,
when only that package is installed, as in Lightning).

The ``tensorboard`` package is an optional dependency (``pip install "accelkit[tensorboard]"``); it is imported
when the logger first writes, never by ``import accelkit``.
"""

from __future__ import annotations

import importlib.util
import os
import warnings
import weakref
from argparse import Namespace
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import torch

from accelkit.loggers.base import (
    DEFAULT_NAME,
    SilentExperiment,
    VersionedLogger,
    add_prefix,
    metric_value,
    naming_write_failures,
    params_to_dict,
)
from accelkit.module.saving import save_hparams_to_yaml
from accelkit.utilities.rank_zero import global_rank

_WRITER_KWARGS = ("comment", "purge_step", "max_queue", "flush_secs", "filename_suffix")
_MISSING = ("TensorBoardLogger needs the 'tensorboard' (or 'tensorboardX') package, neither of which is installed: "
            'pip install tensorboard  (or  pip install "accelkit[tensorboard]")')


def tensorboard_available() -> bool:
    """Whether ``tensorboard`` or ``tensorboardX`` can be imported (Lightning's rule for its default logger)."""
    return any(importlib.util.find_spec(name) is not None for name in ("tensorboard", "tensorboardX"))


def _require_tensorboard() -> None:
    if not tensorboard_available():
        raise ModuleNotFoundError(_MISSING, name="tensorboard")


def _writer_module() -> ModuleType:
    """The module holding ``SummaryWriter`` and ``summary.hparams``: torch's with ``tensorboard``, else
    ``tensorboardX``."""
    if importlib.util.find_spec("tensorboard") is not None:
        import torch.utils.tensorboard

        return torch.utils.tensorboard
    import tensorboardX

    return tensorboardX


def _flatten(params: Mapping[str, object], parent: str = "", separator: str = "/") -> dict[str, object]:
    """Nested dicts flattened to ``{"outer/inner": value}``."""
    flat: dict[str, object] = {}
    for key, value in params.items():
        name = f"{parent}{separator}{key}" if parent else str(key)
        if isinstance(value, Namespace):
            value = vars(value)
        if isinstance(value, Mapping) and value:
            flat.update(_flatten(value, name, separator))
        else:
            flat[name] = value
    return flat


def _hparam_value(value: object) -> int | float | str | bool:
    """A value TensorBoard's hparams plugin accepts: numbers, strings and booleans as they are, one-element
    tensors as numbers, callables by name, anything else as its ``str``."""
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    if callable(value) and hasattr(value, "__name__"):
        return value.__name__
    return str(value)


class TensorBoardLogger(VersionedLogger):
    """Writes TensorBoard event files to ``<save_dir>/<name>/version_<n>[/<sub_dir>]``, like Lightning's
    ``TensorBoardLogger``. View them with ``tensorboard --logdir <save_dir>``.

    :param save_dir: the root directory.
    :param name: sub-directory for this experiment; an empty string or ``None`` puts versions directly in
        ``save_dir``.
    :param version: an int (directory ``version_<n>``) or a string (the directory name); by default the next
        free ``version_<n>``, chosen on first use.
    :param log_graph: let :meth:`log_graph` record the model's graph (the Trainer calls it at fit start; the
        input is ``model.example_input_array`` unless one is given).
    :param default_hp_metric: when hyper-parameters are logged without metrics, log ``hp_metric = -1`` so that
        TensorBoard's HPARAMS tab shows the run.
    :param prefix: put before every metric name, joined by ``-``.
    :param sub_dir: a further sub-directory of the version directory.
    :param kwargs: passed to ``SummaryWriter``: ``comment``, ``purge_step``, ``max_queue``, ``flush_secs``,
        ``filename_suffix``; any other name is an error.
    :raises ModuleNotFoundError: when the ``tensorboard`` package is not installed.
    """

    #: Joins ``prefix`` and metric names.
    LOGGER_JOIN_CHAR = "-"

    def __init__(self, save_dir: str | os.PathLike, name: str | None = DEFAULT_NAME,
                 version: int | str | None = None, log_graph: bool = False, default_hp_metric: bool = True,
                 prefix: str = "", sub_dir: str | os.PathLike | None = None, **kwargs: object) -> None:
        unknown = sorted(set(kwargs) - set(_WRITER_KWARGS))
        if unknown:
            raise TypeError(f"TensorBoardLogger got unexpected arguments {unknown}; the SummaryWriter arguments it "
                            f"passes on are {list(_WRITER_KWARGS)}")
        _require_tensorboard()
        self.set_location(save_dir, name, version)
        self._sub_dir = None if sub_dir is None else os.fspath(sub_dir)
        self._log_graph = log_graph
        self._default_hp_metric = default_hp_metric
        self.prefix = prefix
        self._writer_kwargs = kwargs
        self._experiment: Any = None
        #: Every hyper-parameter logged so far (name to value, as given).
        self.hparams: dict[str, Any] = {}



    @property
    def sub_dir(self) -> str | None:
        """The sub-directory of the version directory, if any."""
        return self._sub_dir



    @property
    def log_dir(self) -> str:
        """``<root_dir>/version_<n>[/<sub_dir>]``: the directory of this run's event files (``~`` and
        environment variables expanded)."""
        path = self.version_dir()
        if self._sub_dir is not None:
            path = os.path.join(path, self._sub_dir)
        return os.path.expanduser(os.path.expandvars(path))

    @property
    def experiment(self) -> Any:
        """The ``torch.utils.tensorboard.SummaryWriter`` (created on first use), for anything beyond scalars:
        ``logger.experiment.add_image(...)``. On ranks other than zero, an object whose methods do nothing."""
        if global_rank() != 0:
            return SilentExperiment()
        if self._experiment is None:
            _require_tensorboard()
            with naming_write_failures(self, self.log_dir):
                os.makedirs(self.log_dir, exist_ok=True)
                self._experiment = _writer_module().SummaryWriter(log_dir=self.log_dir, **self._writer_kwargs)
            # kept open over the stages (see finalize); closed with this logger, or at exit, ending its thread
            weakref.finalize(self, self._experiment.close)
        return self._experiment

    def event_file(self) -> str:
        """The event file this process writes (``events.out.tfevents.<time>.<host>.<pid>...`` in :attr:`log_dir`,
        the newest of this process), or :attr:`log_dir` when there is none yet: the path a write failure names."""
        marker = f".{os.getpid()}."
        try:
            mine = [entry for entry in os.scandir(self.log_dir)
                    if entry.name.startswith("events.out.tfevents.") and marker in entry.name]
        except OSError:
            return self.log_dir
        return max(mine, key=lambda entry: entry.stat().st_mtime).path if mine else self.log_dir

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Write each metric as a scalar at ``step`` (a dict value as a group of scalars). Rank zero only."""
        if global_rank() != 0:
            return
        writer = self.experiment
        with naming_write_failures(self, self.event_file):  # the writer's thread's failure surfaces at a write
            for key, value in add_prefix(metrics, self.prefix, self.LOGGER_JOIN_CHAR).items():
                if isinstance(value, Mapping):
                    writer.add_scalars(key, {k: metric_value(f"{key}/{k}", v) for k, v in value.items()}, step)
                else:
                    writer.add_scalar(key, metric_value(key, value), step)

    def log_hyperparams(self, params: Mapping[str, Any] | Namespace | None,
                        metrics: Mapping[str, Any] | float | None = None) -> None:
        """Record hyper-parameters in ``hparams.yaml`` of the version folder (Lightning's file, which programs
        and ``load_from_checkpoint(..., hparams_file=)`` read back) and for TensorBoard's HPARAMS tab (nested
        dicts flattened with ``/``, values TensorBoard cannot show written as text), with ``metrics`` (a dict, or
        one number for ``hp_metric``); without metrics, ``hp_metric = -1`` when ``default_hp_metric`` is on,
        otherwise the parameters only go to the file and :attr:`hparams`. Rank zero only."""
        if global_rank() != 0:
            return
        given = params_to_dict(params)
        self.hparams.update(given)
        target = os.path.join(self.log_dir, "hparams.yaml")
        with naming_write_failures(self, target):
            os.makedirs(self.log_dir, exist_ok=True)
            save_hparams_to_yaml(target, self.hparams)
        if metrics is None:
            metrics = {"hp_metric": -1} if self._default_hp_metric else None
        elif not isinstance(metrics, Mapping):
            metrics = {"hp_metric": metrics}
        if not metrics:
            return
        self.log_metrics(metrics, 0)
        hparams = _writer_module().summary.hparams
        flat = {key: _hparam_value(value) for key, value in _flatten(given).items()}
        numbers = {key: metric_value(key, value) for key, value in metrics.items()}
        writer = self.experiment._get_file_writer()
        with naming_write_failures(self, self.event_file):
            for summary in hparams(flat, numbers):
                writer.add_summary(summary)

    def log_graph(self, model: torch.nn.Module, input_array: Any = None) -> None:
        """Record the model's graph (traced with ``input_array``, by default ``model.example_input_array``,
        moved to the model's device) when the logger was made with ``log_graph=True``; warns when there is no
        usable input. Rank zero only."""
        if not self._log_graph or global_rank() != 0:
            return
        if input_array is None:
            input_array = getattr(model, "example_input_array", None)
        if input_array is None:
            warnings.warn("TensorBoardLogger(log_graph=True) could not record the graph: set "
                          "`model.example_input_array` or pass `input_array` to log_graph()", stacklevel=2)
            return
        if not isinstance(input_array, (torch.Tensor, tuple)):
            warnings.warn(f"TensorBoardLogger could not record the graph: the input is a "
                          f"{type(input_array).__name__}; give a tensor or a tuple of the forward() arguments",
                          stacklevel=2)
            return
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
        if isinstance(input_array, tuple):
            input_array = tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in input_array)
        else:
            input_array = input_array.to(device)
        self.experiment.add_graph(model, input_array)

    def save(self) -> None:
        """Flush the event file (nothing to do before the first write), and write ``hparams.yaml`` into a version
        folder that has none yet (``{}`` when no hyper-parameters were logged), as Lightning does. Rank zero
        only."""
        if self._experiment is not None:
            with naming_write_failures(self, self.event_file):
                self._experiment.flush()
        if global_rank() == 0 and self.version_claimed and os.path.isdir(self.log_dir):
            target = os.path.join(self.log_dir, "hparams.yaml")
            if not os.path.isfile(target):
                with naming_write_failures(self, target):
                    save_hparams_to_yaml(target, self.hparams)

    def finalize(self, status: str) -> None:
        """Flush the event file at the end of a stage and keep it open: the stages a Trainer runs next in this
        process (``validate``, ``test``...) write into the same file, one event file per process and version
        (Lightning starts a new one per stage). :meth:`close` closes it, as does the end of this logger or of the
        process."""
        self.save()

    def close(self) -> None:
        """Flush and close the event file; a later write opens a new one in the same folder."""
        if self._experiment is not None:
            experiment, self._experiment = self._experiment, None
            with naming_write_failures(self, self.event_file):
                experiment.flush()
                experiment.close()

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["_experiment"] = None  # a SummaryWriter holds a thread and an open file; each process opens its own
        return state
