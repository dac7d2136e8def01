"""Warnings about the user's code, attributed to the user's code: the file and line of the method they concern
(``training_step`` returned ``None``, a misspelled hook), not the line of accelkit's loop that called it."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable


def warn_at(function: Callable[..., object], message: str, category: type[Warning] = UserWarning) -> None:
    """Issue ``message`` as a warning located at ``function``'s ``def`` line in its own file, through
    :func:`warnings.warn_explicit` with the registry of the function's module, so warning filters, ``"once"``
    and ``"default"`` treat it as a warning of that module. A callable without Python source (a builtin) warns
    from the caller's caller instead."""
    target = inspect.unwrap(getattr(function, "__func__", function))
    code = getattr(target, "__code__", None)
    if code is None:
        warnings.warn(message, category, stacklevel=3)
        return
    module_globals = getattr(target, "__globals__", {})
    warnings.warn_explicit(message, category, code.co_filename, code.co_firstlineno,
                           module=module_globals.get("__name__"),
                           registry=module_globals.setdefault("__warningregistry__", {}),
                           module_globals=module_globals)
