"""Calls that run on the process of global rank 0 only (:func:`rank_zero_only`)."""

from __future__ import annotations

import os
from typing import Any, Callable


def rank_zero_only(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: call ``fn`` only in the global-zero process (``None`` elsewhere).

    The rank is ``rank_zero_only.rank``, which the Trainer sets in every worker; outside a run it comes from
    the launcher's ``RANK`` (or ``SLURM_PROCID``) variable, 0 when neither is set.
    """
    import functools

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if rank_zero_only.rank == 0:
            return fn(*args, **kwargs)
        return None

    return wrapped


def _rank_from_env() -> int:
    for name in ("RANK", "SLURM_PROCID", "LOCAL_RANK"):
        raw = os.environ.get(name)
        if raw is not None and raw.strip().isdigit():
            return int(raw)
    return 0


rank_zero_only.rank = _rank_from_env()  # type: ignore[attr-defined]
