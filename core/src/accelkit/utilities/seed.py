"""Seeding: :func:`seed_everything` for every random generator, and the seeds of DataLoader workers."""

from __future__ import annotations

import logging
import os
import random
import warnings
from typing import overload

import torch

from accelkit.errors import ConfigurationError
from accelkit.utilities.rank_zero import given_launcher_rank, global_rank, rank_zero_warn

#: the variable :func:`seed_everything` sets, so that processes started later (spawned workers) use the same seed
SEED_ENV = "ACCELKIT_SEED"
#: ``"1"`` when :func:`seed_everything` was asked to seed DataLoader workers too
SEED_WORKERS_ENV = "ACCELKIT_SEED_WORKERS"
#: Lightning's names for the two: :func:`seed_everything` sets them too, and :func:`seed_from_environment` reads
#: ``PL_GLOBAL_SEED`` where ``ACCELKIT_SEED`` is unset, so a Lightning program's environment keeps its meaning
LIGHTNING_SEED_ENV = "PL_GLOBAL_SEED"
LIGHTNING_SEED_WORKERS_ENV = "PL_SEED_WORKERS"
# the seeds seed_everything accepts, as Lightning's: NumPy's (an unsigned 32-bit integer)
_MIN_SEED, _MAX_SEED = 0, 2**32 - 1

log = logging.getLogger(__name__)


# an int default gives an int: the Trainer's sampler seed is never None
@overload
def seed_from_environment(default: int = 0) -> int: ...
@overload
def seed_from_environment(default: None) -> int | None: ...


def seed_from_environment(default: int | None = 0) -> int | None:
    """The seed in ``ACCELKIT_SEED``, else in Lightning's ``PL_GLOBAL_SEED``, ``default`` when neither is set; the
    one reader of those variables. Where both are set and differ, ``ACCELKIT_SEED`` wins, with a warning naming both.

    :raises ConfigurationError: the value is not an integer (naming it)."""
    ours, theirs = os.environ.get(SEED_ENV), os.environ.get(LIGHTNING_SEED_ENV)
    if ours is not None:
        name, raw = SEED_ENV, ours
    elif theirs is not None:
        name, raw = LIGHTNING_SEED_ENV, theirs
    else:
        return default
    try:
        seed = int(raw.strip())
    except ValueError:
        raise ConfigurationError(f"{name}={raw!r} is not an integer seed; set it to a whole number such as 42, "
                                 f"or unset it") from None
    if ours is not None and theirs is not None and theirs.strip() != str(seed):
        warnings.warn(f"{SEED_ENV}={ours!r} and {LIGHTNING_SEED_ENV}={theirs!r} differ: accelkit seeds with "
                      f"{SEED_ENV}'s {seed}; unset one of them", stacklevel=2)
    return seed


def seed_everything(seed: int | None = None, workers: bool = False, verbose: bool = True) -> int:
    """Seed Python, NumPy (if installed) and torch; sets ``ACCELKIT_SEED`` (and Lightning's ``PL_GLOBAL_SEED``) so
    spawned workers inherit it.

    :param seed: the seed, from 0 to 2**32 - 1 as Lightning's; another type is converted with
        ``int()`` as Lightning does (``"42"`` seeds with 42; a float that is not whole is truncated, with a warning)
        (``None``: ``ACCELKIT_SEED``'s, else Lightning's ``PL_GLOBAL_SEED``'s, else 0 with a warning saying so).
    :raises ValueError: the seed is not an integer or is out of bounds, naming it.
    :raises TypeError: the seed is a ``bool`` (Lightning would seed with 1 for ``True``).
    :param workers: also seed every DataLoader worker process differently but reproducibly (sets
        ``ACCELKIT_SEED_WORKERS=1``; the Trainer gives loaders without a ``worker_init_fn`` one that derives
        each worker's seed from the base seed, the worker id and the rank).
    :param verbose: log ``Seed set to <seed>`` at INFO on the ``accelkit`` logger (printed to stderr unless the
        program configured logging), prefixed ``[rank: N]`` where a launcher gave this process a rank, in every
        process, as Lightning's.
    """
    from_environment = False
    if seed is None:
        seed = seed_from_environment(None)
        if seed is None:
            seed = 0
            if verbose:
                rank_zero_warn(f"seed_everything() got no seed and found neither {SEED_ENV} nor "
                               f"{LIGHTNING_SEED_ENV}: seeding with {seed}", stacklevel=5)
        else:
            from_environment = True
    seed = _as_seed(seed, from_environment)
    if verbose:
        rank = given_launcher_rank()
        log.info("%sSeed set to %d", "" if rank is None else f"[rank: {rank}] ", seed)
    for name in (SEED_ENV, LIGHTNING_SEED_ENV):
        os.environ[name] = str(seed)
    for name in (SEED_WORKERS_ENV, LIGHTNING_SEED_WORKERS_ENV):
        os.environ[name] = "1" if workers else "0"
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # pragma: no cover - numpy ships with torch wheels
        pass
    torch.manual_seed(seed)
    return seed


def _as_seed(seed: object, from_environment: bool = False) -> int:
    """``seed`` as an int seed, as Lightning's ``seed_everything`` converts it (``int()``), within its bounds."""
    if isinstance(seed, bool):
        raise TypeError(f"seed_everything(seed={seed!r}) needs an int from {_MIN_SEED} to {_MAX_SEED}, not a bool")
    if isinstance(seed, int):
        number = seed
    else:
        try:
            number = int(seed)  # type: ignore[call-overload]
        except (TypeError, ValueError):
            raise ValueError(f"seed_everything(seed={seed!r}) is not an integer seed; pass a whole number from "
                             f"{_MIN_SEED} to {_MAX_SEED}, such as 42") from None
        if isinstance(seed, float) and seed != number:
            rank_zero_warn(f"seed_everything(seed={seed!r}) is not a whole number: seeding with int({seed!r}) = "
                           f"{number}, as Lightning does", stacklevel=6)  # names seed_everything's caller
    if not _MIN_SEED <= number <= _MAX_SEED:
        raise ValueError(f"seed_everything() got seed {number}, out of bounds: a seed is from {_MIN_SEED} to "
                         f"{_MAX_SEED} (what NumPy accepts)"
                         + (f"; it came from {SEED_ENV} or {LIGHTNING_SEED_ENV}" if from_environment else ""))
    return number


def worker_init_function(worker_id: int, rank: int | None = None) -> None:
    """Seed a DataLoader worker (torch, NumPy, Python) from torch's seed for it, its id and the process rank.

    torch gives each worker ``base + worker_id`` where ``base`` is drawn anew from the main process's generator
    every epoch, so the seeds differ per epoch, per worker and per rank, and repeat when the run is repeated
    with the same ``seed_everything`` seed.
    """
    rank = global_rank() if rank is None else rank
    base = torch.initial_seed() - worker_id
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy ships with torch wheels
        seed = hash((base, worker_id, rank)) % 2**32
        torch.manual_seed(seed)
        random.seed(seed)
        return
    torch_seed, python_seed, numpy_seed = np.random.SeedSequence([base, worker_id, rank]).generate_state(3)
    torch.manual_seed(int(torch_seed))
    random.seed(int(python_seed))
    np.random.seed(int(numpy_seed))
