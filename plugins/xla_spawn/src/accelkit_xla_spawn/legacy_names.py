"""torch_xla 1.x names that torch_xla 2.x removed, answered while an XLA strategy runs.

Lightning's TPU guides build their sampler with ``xm.xrt_world_size()`` and ``xm.get_ordinal()``; torch_xla 2.x
removed both (and ``torch_xla.runtime.using_pjrt``). While an XLA strategy is set up in a process
(:meth:`~accelkit_xla_spawn.XLAStrategy.setup_environment` to :meth:`~accelkit_xla_spawn.XLAStrategy.teardown`),
:func:`install` puts a stand-in for each such name on its torch_xla module, so the guide's code runs unchanged.
The first call of each name in a process warns once (:class:`TorchXLALegacyNameWarning`), naming the
torch_xla 2.x call that replaces it; the stand-in just calls that replacement.

Rules: a name torch_xla still defines is never replaced (its own function, deprecated or not, stays); nothing is
installed when this module is imported (importing it imports no torch_xla); the last :func:`uninstall` removes
exactly the stand-ins :func:`install` added. Installs are counted, so replicas that PJRT runs as threads of one
process share the stand-ins until the last of them tears down.
"""

from __future__ import annotations

import importlib
import sys
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class TorchXLALegacyNameWarning(FutureWarning):
    """A torch_xla 1.x name that torch_xla 2.x removed was called; accelkit answered it with the 2.x call the
    message names. Replace the call: outside an accelkit XLA run the name does not exist."""


@dataclass(frozen=True)
class LegacyName:
    """One removed torch_xla 1.x name and how its stand-in answers.

    :param module: the torch_xla module that defined it (``"torch_xla.core.xla_model"``).
    :param name: the attribute name (``"xrt_world_size"``).
    :param shown_as: how user code spells the call (``"xm.xrt_world_size()"``), for the warning.
    :param replacement: the torch_xla 2.x call that replaces it, as the warning names it.
    :param answer: computes the stand-in's result; imports torch_xla when called, never before.
    """

    module: str
    name: str
    shown_as: str
    replacement: str
    answer: Callable[[], Any]


def _world_size() -> int:
    import torch_xla.runtime as xr

    return xr.world_size()


def _global_ordinal() -> int:
    import torch_xla.runtime as xr

    return xr.global_ordinal()


def _pjrt_in_use() -> bool:
    return True  # PJRT is torch_xla 2.x's only runtime


#: the removed names that get a stand-in (checked against torch_xla 2.9: all three are gone there)
LEGACY_NAMES: tuple[LegacyName, ...] = (
    LegacyName("torch_xla.core.xla_model", "xrt_world_size", "xm.xrt_world_size()",
               "torch_xla.runtime.world_size()", _world_size),
    LegacyName("torch_xla.core.xla_model", "get_ordinal", "xm.get_ordinal()",
               "torch_xla.runtime.global_ordinal()", _global_ordinal),
    LegacyName("torch_xla.runtime", "using_pjrt", "xr.using_pjrt()",
               "nothing: PJRT is the only runtime of torch_xla 2.x, so the answer is always True", _pjrt_in_use),
)

_lock = threading.Lock()
_warned: set[str] = set()
_installed: dict[tuple[str, str], Callable[..., Any]] = {}
_users = 0


def warning_text(legacy: LegacyName) -> str:
    """The sentence of the one warning a process gets for ``legacy``."""
    return (f"{legacy.shown_as} is a torch_xla 1.x name that torch_xla 2.x removed; accelkit answered it with "
            f"{legacy.replacement} while the XLA strategy runs. Use {legacy.replacement} instead: outside an "
            f"accelkit XLA run {legacy.module}.{legacy.name} does not exist.")


def _stand_in(legacy: LegacyName) -> Callable[..., Any]:
    def stand_in(defval: Any = None) -> Any:
        # torch_xla 1.x's xrt_world_size/get_ordinal took a default (``defval``) for when no runtime answered; the
        # PJRT runtime of a running XLA strategy always answers, so it is accepted and never needed
        key = f"{legacy.module}.{legacy.name}"
        with _lock:
            first = key not in _warned
            _warned.add(key)
        if first:
            warnings.warn(warning_text(legacy), TorchXLALegacyNameWarning, stacklevel=2)
        return legacy.answer()

    stand_in.__name__ = stand_in.__qualname__ = legacy.name
    stand_in.__module__ = legacy.module
    stand_in.__doc__ = (f"accelkit's stand-in for the torch_xla 1.x {legacy.shown_as}, removed in torch_xla 2.x: "
                        f"use {legacy.replacement}.")
    return stand_in


def install(names: tuple[LegacyName, ...] = LEGACY_NAMES) -> list[str]:
    """Add the stand-ins for the removed names that the installed torch_xla lacks (imports torch_xla).

    Counted: every call needs one :func:`uninstall`. Returns the ``module.name`` entries this call added (empty
    when an earlier install is still active, or when torch_xla defines them all).

    :param names: the names to answer (:data:`LEGACY_NAMES`; tests give their own).
    """
    global _users
    added = []
    with _lock:
        _users += 1
        if _users > 1:
            return []
        try:
            for legacy in names:
                module = importlib.import_module(legacy.module)
                if hasattr(module, legacy.name):
                    continue  # torch_xla still defines it: its own function stays
                shim = _stand_in(legacy)
                setattr(module, legacy.name, shim)
                _installed[(legacy.module, legacy.name)] = shim
                added.append(f"{legacy.module}.{legacy.name}")
        except BaseException:
            _users -= 1  # nothing stays half-installed
            _remove_installed()
            raise
    return added


def _remove_installed() -> list[str]:
    removed = []
    for (module_name, name), shim in list(_installed.items()):
        module = sys.modules.get(module_name)
        if module is not None and getattr(module, name, None) is shim:
            delattr(module, name)
            removed.append(f"{module_name}.{name}")
    _installed.clear()
    return removed


def uninstall() -> list[str]:
    """Undo one :func:`install`; the last one removes the stand-ins it added (a name someone replaced since is
    left alone). Returns the ``module.name`` entries removed."""
    global _users
    with _lock:
        if _users == 0:
            return []
        _users -= 1
        if _users > 0:
            return []
        return _remove_installed()


def installed() -> list[str]:
    """The ``module.name`` entries whose stand-ins are in place now."""
    with _lock:
        return [f"{module}.{name}" for module, name in _installed]
