"""Seeding: :func:`seed_everything` for every random generator, and the seeds of DataLoader workers."""

from __future__ import annotations

import os
import random
from typing import overload

import torch

from accelkit.errors import ConfigurationError
from accelkit.utilities.rank_zero import global_rank

#: the variable :func:`seed_everything` sets, so that processes started later (spawned workers) use the same seed
SEED_ENV = "ACCELKIT_SEED"
#: ``"1"`` when :func:`seed_everything` was asked to seed DataLoader workers too
SEED_WORKERS_ENV = "ACCELKIT_SEED_WORKERS"


# an int default gives an int: the Trainer's sampler seed is never None
@overload
def seed_from_environment(default: int = 0) -> int: ...
@overload
def seed_from_environment(default: None) -> int | None: ...


def seed_from_environment(default: int | None = 0) -> int | None:
    """The seed in ``ACCELKIT_SEED``, ``default`` when it is unset; the one reader of that variable.

    :raises ConfigurationError: the value is not an integer (naming it)."""
    raw = os.environ.get(SEED_ENV)
    if raw is None:
        return default
    try:
        return int(raw.strip())
    except ValueError:
        raise ConfigurationError(f"{SEED_ENV}={raw!r} is not an integer seed; set it to a whole number such as 42, "
                                 f"or unset it") from None


def seed_everything(seed: int | None = None, workers: bool = False) -> int:
    """Seed Python, NumPy (if installed) and torch; sets ``ACCELKIT_SEED`` so spawned workers inherit it.

    :param seed: the seed (``None``: ``ACCELKIT_SEED`` from the environment, else 0).
    :param workers: also seed every DataLoader worker process differently but reproducibly (sets
        ``ACCELKIT_SEED_WORKERS=1``; the Trainer gives loaders without a ``worker_init_fn`` one that derives
        each worker's seed from the base seed, the worker id and the rank).
    """
    if seed is None:
        seed = seed_from_environment(0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed_everything(seed={seed!r}) needs an int")
    os.environ[SEED_ENV] = str(seed)
    os.environ[SEED_WORKERS_ENV] = "1" if workers else "0"
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:  # pragma: no cover - numpy ships with torch wheels
        pass
    torch.manual_seed(seed)
    return seed


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
