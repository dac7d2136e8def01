"""The :class:`Logger` base class: the interface of Lightning's ``lightning.pytorch.loggers.Logger``."""

from __future__ import annotations

import contextlib
import functools
import os
from argparse import Namespace
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import torch

from accelkit.checkpoint.files import write_error_reason
from accelkit.errors import LoggerWriteError
from accelkit.utilities.rank_zero import global_rank

_Logger = TypeVar("_Logger")
_Experiment = TypeVar("_Experiment")
_Value = TypeVar("_Value")


class SilentExperiment:
    """Stands in for ``experiment`` on ranks other than zero: every attribute is a call that does nothing, so
    ``logger.experiment.add_image(...)`` written for rank zero is harmless elsewhere."""

    def __getattr__(self, name: str) -> SilentExperiment:
        return self

    def __call__(self, *args: object, **kwargs: object) -> SilentExperiment:
        return self

    def __bool__(self) -> bool:
        return False


def rank_zero_experiment(getter: Callable[[_Logger], _Experiment],
                         ) -> Callable[[_Logger], _Experiment | SilentExperiment]:
    """Decorate a logger's ``experiment`` getter (under ``@property``, as Lightning's decorator of this name is used
    in custom loggers): on global rank zero the getter runs; on any other rank it is not called and the property
    gives a ``SilentExperiment`` (every call on it does nothing), so the experiment is created once, by rank zero."""

    @functools.wraps(getter)
    def experiment(self: _Logger) -> _Experiment | SilentExperiment:
        return getter(self) if global_rank() == 0 else SilentExperiment()

    return experiment


def params_to_dict(params: Mapping[str, object] | Namespace | None) -> dict[str, object]:
    """Hyper-parameters as a plain dict: a ``Namespace`` gives its attributes, ``None`` an empty dict."""
    if params is None:
        return {}
    if isinstance(params, Namespace):
        return dict(vars(params))
    return dict(params)


def metric_value(name: str, value: Any) -> int | float:
    """A metric value as a Python number: one-element tensors and numpy scalars give their ``item()``, ints and
    floats stay as they are; anything else is an error naming the metric."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"metric {name!r} is a tensor of shape {tuple(value.shape)}; log one number per name")
        return value.item()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if hasattr(value, "item") and getattr(value, "size", None) == 1:  # numpy scalars and one-element arrays
        return value.item()
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"metric {name!r} has value {value!r} of type {type(value).__name__}, which is not a "
                         "number; log a float, an int or a one-element tensor") from None


def add_prefix(metrics: Mapping[str, _Value], prefix: str, separator: str = "-") -> dict[str, _Value]:
    """``metrics`` with ``prefix`` and ``separator`` put before every key (unchanged when ``prefix`` is empty)."""
    if not prefix:
        return dict(metrics)
    return {f"{prefix}{separator}{key}": value for key, value in metrics.items()}


@contextlib.contextmanager
def naming_write_failures(logger: object, path: str | os.PathLike | Callable[[], str | None]) -> Iterator[None]:
    """Within the block, an ``OSError`` (a full disk, a file size limit...) becomes a
    :class:`~accelkit.errors.LoggerWriteError` naming the logger's class, the path it was writing and why, with
    the original error as its cause; a write failure of a library that names no file (TensorBoard's
    ``OSError: [Errno 28] No space left on device``) then says whose and where.

    :param logger: the logger writing (its class is named).
    :param path: the file or folder written, or a function giving it when a failure is reported (for a file whose
        name is known only once written).
    """
    try:
        yield
    except LoggerWriteError:
        raise
    except OSError as exc:
        where = path() if callable(path) else os.fspath(path)
        where = where or (os.fspath(exc.filename) if exc.filename else None)
        why = write_error_reason(exc.errno) if exc.errno else f"{type(exc).__name__}: {exc}"
        name = type(logger).__name__
        raise LoggerWriteError(
            f"{name} could not write {where!r}: {why} ({exc}). Free space or fix the folder, or give the logger "
            f"another save_dir (or Trainer(logger=False) to log nothing).", exc.errno, where) from exc


#: The folder of every built-in logger's versions under ``save_dir``, as in Lightning.
DEFAULT_NAME = "lightning_logs"


def next_version(root: str | os.PathLike) -> int:
    """One more than the largest ``version_<n>`` directory in ``root`` (0 when there is none): the version a new
    run of a logger that writes ``<root>/version_<n>`` folders takes (the CSV and TensorBoard loggers' rule, for
    third-party loggers to share). Read it once, before workers start (see ``Logger.version``)."""
    try:
        entries = os.listdir(root)
    except OSError:
        return 0
    taken = [int(entry[len("version_"):]) for entry in entries
             if entry.startswith("version_") and entry[len("version_"):].isdigit()
             and os.path.isdir(os.path.join(root, entry))]
    return max(taken, default=-1) + 1


def claim_version(root: str | os.PathLike) -> int:
    """Create the folder ``<root>/version_<n>`` for a new run and return ``n``: the next free number
    (:func:`next_version`), created exclusively, so two runs starting together in one folder never share one
    (the one that loses the race takes the next number)."""
    os.makedirs(root, exist_ok=True)
    version = next_version(root)
    while True:
        try:
            os.mkdir(os.path.join(root, f"version_{version}"))
            return version
        except FileExistsError:  # another run took it between the listing and the creation
            version += 1


class Logger:
    """Base class of experiment loggers, with the interface of Lightning's ``Logger``.

    A subclass implements :attr:`name`, :attr:`version`, :meth:`log_metrics` and :meth:`log_hyperparams`; the
    other members have working defaults. The Trainer calls the logging methods on global rank zero only, and
    the built-in loggers also check the rank themselves, so user code may call them from every rank.
    """

    #: Separator Lightning puts between the parts of a grouped metric name.
    group_separator = "/"

    @property
    def name(self) -> str | None:
        """The experiment name."""
        raise NotImplementedError(f"{type(self).__name__} does not define the 'name' property")

    @property
    def version(self) -> int | str | None:
        """The experiment version (an int for ``version_<n>`` directories, or a string)."""
        raise NotImplementedError(f"{type(self).__name__} does not define the 'version' property")

    @property
    def root_dir(self) -> str | None:
        """The directory holding every version of this experiment, or ``None`` for loggers without files."""
        return None

    @property
    def log_dir(self) -> str | None:
        """The directory of this run's files, or ``None`` for loggers without files."""
        return None

    @property
    def save_dir(self) -> str | None:
        """The directory given to the logger, or ``None`` for loggers without files."""
        return None

    @property
    def experiment(self) -> Any:
        """The underlying experiment object (for example a TensorBoard ``SummaryWriter``); ``None`` here."""
        return None

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Record numeric ``metrics`` (name to value) at training step ``step``.

        :param metrics: metric names and values (floats, ints or one-element tensors).
        :param step: the global step; loggers choose a value when it is ``None``.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement log_metrics()")

    def log_hyperparams(self, params: Mapping[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        """Record the run's hyper-parameters (a dict or an ``argparse.Namespace``)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement log_hyperparams()")

    def log_graph(self, model: torch.nn.Module, input_array: torch.Tensor | None = None) -> None:
        """Record the model's computational graph. Does nothing unless a logger supports graphs
        (:class:`~accelkit.loggers.TensorBoardLogger` with ``log_graph=True``)."""

    def save(self) -> None:
        """Write whatever is buffered to disk. Does nothing by default."""

    def finalize(self, status: str) -> None:
        """Called once at the end of a run with ``status`` (``"success"``, ``"failed"`` or ``"finished"``);
        saves by default."""
        self.save()

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        """Called after a checkpoint callback saved a checkpoint. Does nothing by default."""


class VersionedLogger(Logger):
    """A logger writing under ``<save_dir>/<name>/version_<n>`` (the CSV and TensorBoard loggers' layout).

    Subclasses call :meth:`set_location` in ``__init__``; :meth:`version_dir` is this run's folder.
    """

    def set_location(self, save_dir: str | os.PathLike, name: str | None, version: int | str | None) -> None:
        """Where this logger writes: ``<save_dir>/<name>/version_<n>`` (``version`` ``None``: the next free ``n``,
        chosen on first use; a string: that folder name)."""
        self._save_dir = os.fspath(save_dir)
        self._name = name or ""
        self._version = version
        self._own_folder = False  # the folder was claimed for this logger's run (not a version given by the user)

    @property
    def name(self) -> str:
        """The experiment name (the sub-directory of :attr:`save_dir`)."""
        return self._name

    @property
    def version(self) -> int | str:
        """The version; when none was given, the next free ``version_<n>`` number, claimed on first use by
        creating its folder (:func:`claim_version`). (A Trainer that starts processes reads it before starting
        them, and a run of several processes takes global rank zero's, so every process agrees.)"""
        if self._version is None:
            self._version = claim_version(self.root_dir)
            self._own_folder = True
        return self._version

    @version.setter
    def version(self, value: int | str) -> None:
        # set by the Trainer to the folder another logger (or global rank zero) of the same run claimed
        self._version = value
        self._own_folder = True

    @property
    def folder_of_this_run(self) -> bool:
        """Whether :meth:`version_dir` was claimed for this logger's run (a new ``version_<n>`` folder, or the one
        another logger of the run claimed), so that what is in it was written by this run (an earlier stage, in
        another process); ``False`` for a ``version`` given to the logger, whose folder a former run may have used."""
        return self._own_folder

    @property
    def version_claimed(self) -> bool:
        """Whether :attr:`version` is decided (given, or claimed by a first use)."""
        return self._version is not None

    @property
    def save_dir(self) -> str:
        """The directory given as ``save_dir``."""
        return self._save_dir

    @property
    def root_dir(self) -> str:
        """``<save_dir>/<name>``: the parent of every version's directory."""
        return os.path.join(self._save_dir, self._name)

    def version_dir(self) -> str:
        """``<root_dir>/version_<n>`` (or ``<root_dir>/<version>`` for a string version)."""
        version = self.version
        return os.path.join(self.root_dir, version if isinstance(version, str) else f"version_{version}")


class RunFolder(VersionedLogger):
    """The version folder of a run whose loggers keep no folder of their own (MLflow, a logger of yours without a
    ``log_dir``): ``<save_dir>/lightning_logs/version_<n>``, claimed as the built-in loggers claim theirs. The
    Trainer keeps its checkpoints and the CLI its ``config.yaml`` there; it logs nothing.

    :param save_dir: the root directory (the Trainer's ``default_root_dir``).
    """

    def __init__(self, save_dir: str | os.PathLike) -> None:
        self.set_location(save_dir, DEFAULT_NAME, None)

    @property
    def log_dir(self) -> str:
        """This run's folder, ``<save_dir>/lightning_logs/version_<n>``."""
        return self.version_dir()

    def log_metrics(self, metrics: Mapping[str, object], step: int | None = None) -> None:
        """Nothing: metrics go to the run's loggers."""

    def log_hyperparams(self, params: Mapping[str, object] | Namespace, *args: object, **kwargs: object) -> None:
        """Nothing: hyper-parameters go to the run's loggers."""
