"""Finding what cannot be pickled: spawned workers receive the run (trainer, module, data, loggers) by pickling it,
and when that fails the error should name the object at fault, not list everything that travels."""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Mapping

#: how deep :func:`find_unpicklable` looks into attributes and containers
MAX_DEPTH = 8


def _pickles(obj: object) -> bool:
    try:
        pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - any failure means "this part does not travel"
        return False
    return True


def _parts(obj: object, path: str) -> Iterator[tuple[str, object]]:
    """The named parts pickle would write for ``obj``: items of containers, the state of other objects."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield f"{path}[{key!r}]", value
        return
    if isinstance(obj, (list, tuple, set, frozenset)):
        for index, value in enumerate(obj):
            yield f"{path}[{index}]", value
        return
    bound_to = getattr(obj, "__self__", None)
    if bound_to is not None and not isinstance(bound_to, type(pickle)):  # a bound method travels with its object
        yield f"{path}.__self__", bound_to
        return
    try:
        state = obj.__getstate__() if hasattr(obj, "__getstate__") else vars(obj)
    except Exception:  # noqa: BLE001 - no readable state: nothing to look into
        return
    if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):  # (state, slots)
        state = {**(state[0] or {}), **state[1]}
    if isinstance(state, dict):
        for key, value in state.items():
            yield f"{path}.{key}", value


def find_unpicklable(obj: object, path: str = "", depth: int = 0) -> tuple[list[tuple[str, object]], object] | None:
    """The innermost part of ``obj`` that cannot be pickled, or ``None`` when ``obj`` pickles.

    :return: ``(chain, culprit)``: ``chain`` lists ``(path, object)`` from ``obj`` down to the culprit (paths such
        as ``args[0].loggers[0]._client``), so a caller can name the outermost object it knows (a logger).
    """
    if _pickles(obj):
        return None
    here = [(path, obj)]
    if depth < MAX_DEPTH:
        for part_path, part in _parts(obj, path):
            found = find_unpicklable(part, part_path, depth + 1)
            if found is not None:
                return here + found[0], found[1]
    return here, obj


def is_logger(obj: object) -> bool:
    """Whether ``obj`` is used as an experiment logger (it has ``log_metrics``, as the Trainer requires)."""
    return not isinstance(obj, type) and callable(getattr(obj, "log_metrics", None))


def pickling_failure(roots: Mapping[str, object], error: BaseException) -> str:
    """A sentence naming what in ``roots`` (name -> object sent to the workers) cannot be pickled, and why.

    A logger on the way to the culprit is named as the logger at fault (loggers travel to spawned workers with
    the Trainer); otherwise the innermost object and its path."""
    for name, root in roots.items():
        found = find_unpicklable(root, name)
        if found is None:
            continue
        chain, culprit = found
        what = f"{type(culprit).__module__}.{type(culprit).__qualname__}"
        for path, obj in chain:
            if is_logger(obj):
                return (f"the logger {type(obj).__qualname__} ({path}) cannot be pickled: it holds {what} "
                        f"({chain[-1][0]}): {error}. Loggers are pickled to every spawned worker with the Trainer: "
                        "create clients, open files, locks and threads on first use in the worker, or leave them "
                        "out of the pickled state (__getstate__); docs/plugins.rst, 'Contracts: logger'.")
        return (f"{chain[-1][0]} ({what}) cannot be pickled: {error}. Define the module and datasets at module level "
                "(not inside a function) and keep open files, locks and modules out of them.")
    return f"pickling failed: {error}"
