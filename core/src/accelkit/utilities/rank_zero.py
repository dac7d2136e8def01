"""Calls that run on the process of global rank 0 only: :func:`rank_zero_only`, and the messages Lightning users send
from rank 0 (:func:`rank_zero_info`, :func:`rank_zero_debug`, :func:`rank_zero_warn`, :func:`rank_zero_deprecation`)."""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import ParamSpec, TypedDict, TypeVar, Unpack

import torch

#: launcher variables that give a rank before a process group exists, each with the size that makes it mean one
_RANK_VARIABLES = (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS"), ("PMI_RANK", "PMI_SIZE"),
                   ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"))

#: the variables Lightning reads, in its order, for ``rank_zero_only.rank`` when it is imported (``LOCAL_RANK``
#: before ``SLURM_PROCID``: SLURM sets the latter even where it does not start the processes)
LAUNCHER_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")


def launcher_rank() -> int:
    """The rank a launcher gave this process, read as Lightning reads it at import: the first of
    :data:`LAUNCHER_RANK_VARIABLES` that is set and a whole number; 0 when none is."""
    given = given_launcher_rank()
    return 0 if given is None else given


def given_launcher_rank() -> int | None:
    """:func:`launcher_rank`, or ``None`` when no launcher gave one (the rank a message such as
    :func:`~accelkit.seed_everything`'s is prefixed with, ``[rank: 1]``, as Lightning's; none without a launcher)."""
    for name in LAUNCHER_RANK_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


def global_rank() -> int:
    """This process's global rank: the one rule every part of accelkit asks (``rank_zero_only``, the loggers, the
    profilers, seeding). In order: the process group's rank once one is initialised; a launcher's rank variable
    whose size variable says the job has more than one process (``RANK``/``WORLD_SIZE``,
    ``SLURM_PROCID``/``SLURM_NTASKS``...), read when asked, so a stray ``RANK`` in a one-process shell does not
    silence rank-zero work; else ``rank_zero_only.rank``, Lightning's attribute, which the Trainer sets in every
    worker from its strategy (and so from the cluster environment) and which, before any run, is the launcher's
    rank read at import (:func:`launcher_rank`, Lightning's rule)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    for rank_name, size_name in _RANK_VARIABLES:
        rank, size = os.environ.get(rank_name, "").strip(), os.environ.get(size_name, "").strip()
        if rank.isdigit() and size.isdigit() and int(size) > 1:
            return int(rank)
    return int(rank_zero_only.rank)  # type: ignore[attr-defined]


def set_global_rank(rank: int) -> None:
    """Record the rank of this process's run (the Trainer calls it in every worker, from its strategy), in
    ``rank_zero_only.rank`` and, when ``lightning_utilities`` is imported, in its ``rank_zero_only.rank`` too, the
    attribute Lightning sets for the code of Lightning's ecosystem (:func:`share_rank_with_lightning_utilities`)."""
    rank_zero_only.rank = rank  # type: ignore[attr-defined]
    share_rank_with_lightning_utilities(overwrite=True)


def share_rank_with_lightning_utilities(overwrite: bool = False) -> None:
    """Give ``lightning_utilities.core.rank_zero.rank_zero_only`` (which programs written for Lightning import
    directly, e.g. the lightning-hydra-template's logger) the rank in ``rank_zero_only.rank``, as importing
    Lightning does; without it that decorator raises "needs to be set before use". Nothing happens where
    ``lightning_utilities`` is not installed; a rank it already holds is kept unless ``overwrite``."""
    import importlib.util
    import sys

    if "lightning_utilities.core.rank_zero" not in sys.modules and (
            importlib.util.find_spec("lightning_utilities") is None):
        return
    from lightning_utilities.core import rank_zero as theirs

    if overwrite or getattr(theirs.rank_zero_only, "rank", None) is None:
        theirs.rank_zero_only.rank = rank_zero_only.rank  # type: ignore[attr-defined]


_P = ParamSpec("_P")
_R = TypeVar("_R")


class LoggingOptions(TypedDict, total=False):
    """The keywords of ``logging.debug``/``logging.info`` that :func:`rank_zero_debug` and :func:`rank_zero_info`
    pass on (``stacklevel`` is their own argument)."""

    exc_info: (bool | BaseException | tuple[type[BaseException], BaseException, TracebackType | None]
               | tuple[None, None, None] | None)
    stack_info: bool
    extra: Mapping[str, object] | None


class WarningOptions(TypedDict, total=False):
    """The keywords of ``warnings.warn`` that :func:`rank_zero_warn` and :func:`rank_zero_deprecation` pass on
    (``stacklevel`` is their own argument)."""

    category: type[Warning] | None
    source: object


def rank_zero_only(fn: Callable[_P, _R], default: _R | None = None) -> Callable[_P, _R | None]:
    """Decorator: call ``fn`` only in the process of global rank 0 (``global_rank()``); elsewhere return
    ``default`` (``None`` unless given: ``rank_zero_only(fn, default=0)``).

    ``rank_zero_only.rank`` holds the rank as Lightning's attribute does, for code that reads it (the Trainer sets
    it in every worker through ``set_global_rank()``)."""
    import functools

    @functools.wraps(fn)
    def wrapped(*args: _P.args, **kwargs: _P.kwargs) -> _R | None:
        if global_rank() == 0:
            return fn(*args, **kwargs)
        return default

    return wrapped


rank_zero_only.rank = launcher_rank()  # type: ignore[attr-defined]  # as Lightning at import; a run sets its own
share_rank_with_lightning_utilities()


#: the logger the rank-zero messages go to. As Lightning's package logger, ``accelkit``'s is at INFO whatever the
#: program configured (``rank_zero_debug`` is not shown until the program lowers it), and prints to stderr itself
#: when the program configured no logging before importing accelkit (the root logger had no handler)
log = logging.getLogger(__name__)
_package_log = logging.getLogger("accelkit")
_package_log.setLevel(logging.INFO)
if not logging.getLogger().hasHandlers() and not _package_log.handlers:
    _package_log.addHandler(logging.StreamHandler())
    _package_log.propagate = False


# one frame between the public function and logging/warnings, so that stacklevel counts as in Lightning
def _debug(*args: object, stacklevel: int = 2, **kwargs: Unpack[LoggingOptions]) -> None:
    log.debug(*args, stacklevel=stacklevel, **kwargs)


def _info(*args: object, stacklevel: int = 2, **kwargs: Unpack[LoggingOptions]) -> None:
    log.info(*args, stacklevel=stacklevel, **kwargs)


def _warn(message: str | Warning, stacklevel: int = 2, **kwargs: Unpack[WarningOptions]) -> None:
    warnings.warn(message, stacklevel=stacklevel, **kwargs)


@rank_zero_only
def rank_zero_debug(*args: object, stacklevel: int = 4, **kwargs: Unpack[LoggingOptions]) -> None:
    """``logging.debug`` on rank 0 only (Lightning's ``rank_zero_debug``); ``stacklevel`` 4 names the caller."""
    _debug(*args, stacklevel=stacklevel, **kwargs)


@rank_zero_only
def rank_zero_info(*args: object, stacklevel: int = 4, **kwargs: Unpack[LoggingOptions]) -> None:
    """``logging.info`` on rank 0 only (Lightning's ``rank_zero_info``); ``stacklevel`` 4 names the caller."""
    _info(*args, stacklevel=stacklevel, **kwargs)


@rank_zero_only
def rank_zero_warn(message: str | Warning, stacklevel: int = 4, **kwargs: Unpack[WarningOptions]) -> None:
    """``warnings.warn`` on rank 0 only (Lightning's ``rank_zero_warn``); ``category`` as for ``warnings.warn``;
    ``stacklevel`` 4 names the caller."""
    _warn(message, stacklevel=stacklevel, **kwargs)


@rank_zero_only
def rank_zero_deprecation(message: str | Warning, stacklevel: int = 5, **kwargs: Unpack[WarningOptions]) -> None:
    """A :class:`DeprecationWarning` on rank 0 only (Lightning's ``rank_zero_deprecation``); ``stacklevel`` 5
    names the caller's caller (the code using the deprecated name)."""
    kwargs.setdefault("category", DeprecationWarning)
    _warn(message, stacklevel=stacklevel, **kwargs)
