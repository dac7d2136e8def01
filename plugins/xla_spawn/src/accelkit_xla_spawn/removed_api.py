"""Hints for torch_xla 1.x names that torch_xla 2.x removed.

Lightning-era TPU code (its guides build a ``DistributedSampler`` with ``xm.xrt_world_size()`` and
``xm.get_ordinal()``) fails on torch_xla 2.x with a bare ``AttributeError``. The strategies pass such errors
raised inside a replica through :func:`add_removed_api_hint`, which appends the replacement to the message.

Pure Python: importing this module imports no torch_xla.
"""

from __future__ import annotations

import re

#: torch_xla 1.x names and what replaces them in torch_xla 2.x. ``xrt_world_size`` and ``get_ordinal`` are gone
#: from ``torch_xla.core.xla_model`` (2.9 checked); ``get_local_ordinal``, ``xla_device`` and ``mark_step`` still
#: exist but are deprecated, and ``torch_xla.runtime.using_pjrt`` is gone since PJRT is the only runtime.
REPLACEMENTS: dict[str, str] = {
    "xrt_world_size": "torch_xla.runtime.world_size()",
    "get_ordinal": "torch_xla.runtime.global_ordinal()",
    "get_local_ordinal": "torch_xla.runtime.local_ordinal()",
    "xla_device": "torch_xla.device()",
    "mark_step": "torch_xla.sync()",
    "using_pjrt": "nothing (PJRT is the only runtime in torch_xla 2.x, so treat it as True)",
}

_ATTRIBUTE = re.compile(r"module '(?P<module>[\w.]+)' has no attribute '(?P<name>\w+)'")
_IMPORT = re.compile(r"cannot import name '(?P<name>\w+)' from '(?P<module>[\w.]+)'")


def _missing_name(exc: BaseException) -> tuple[str, str] | None:
    """``(module, name)`` of a missing module attribute named by ``exc``, or ``None``."""
    if isinstance(exc, ImportError):
        match = _IMPORT.search(str(exc))
        return (match["module"], match["name"]) if match else None
    if not isinstance(exc, AttributeError):
        return None
    obj, name = getattr(exc, "obj", None), getattr(exc, "name", None)
    module = getattr(obj, "__name__", None) if obj is not None else None
    if isinstance(module, str) and isinstance(name, str):
        return module, name
    match = _ATTRIBUTE.search(str(exc))  # the exception crossed a process boundary: name/obj are lost
    return (match["module"], match["name"]) if match else None


def removed_api_hint(exc: BaseException) -> str | None:
    """The sentence to append to ``exc`` when it names a torch_xla 1.x name that 2.x removed, else ``None``.

    Recognised: an ``AttributeError`` such as ``module 'torch_xla.core.xla_model' has no attribute
    'xrt_world_size'`` and an ``ImportError`` such as ``cannot import name 'get_ordinal' from
    'torch_xla.core.xla_model'``, for the names in ``REPLACEMENTS`` on a ``torch_xla`` module only.

    :param exc: the exception raised by the user's code.
    """
    found = _missing_name(exc)
    if found is None:
        return None
    module, name = found
    if not (module == "torch_xla" or module.startswith("torch_xla.")) or name not in REPLACEMENTS:
        return None
    return (f" ({module}.{name} is from torch_xla 1.x and is not in torch_xla 2.x: use {REPLACEMENTS[name]} "
            f"instead; accelkit's TPU guide, docs/tpu.rst, lists the replacements)")


def add_removed_api_hint(exc: BaseException) -> bool:
    """Append :func:`removed_api_hint` to ``exc``'s message in place; return whether it did.

    The exception keeps its type, traceback and attributes, so the caller re-raises it with a bare ``raise``.
    A message that already carries the hint is left as it is.
    """
    hint = removed_api_hint(exc)
    if hint is None:
        return False
    message = str(exc.args[0]) if exc.args else ""
    if hint in message:
        return False
    exc.args = (message + hint, *exc.args[1:])
    if isinstance(exc, ImportError) and getattr(exc, "msg", None) is not None:
        exc.msg = message + hint  # ImportError.__str__ prefers .msg
    return True
