"""Classes and functions as hyper-parameters: stored by reference, resolved only from what is already imported.

A module that passes its encoder *class* (or an activation function) to ``__init__`` and calls
``save_hyperparameters()`` gets it back from ``load_from_checkpoint``, as in Lightning, without a pickle in the
checkpoint: the value is stored as the plain mapping ``{"__reference__": "package.module:Qualified.name"}``, which
``torch.load(weights_only=True)`` reads. Loading looks the name up in ``sys.modules`` only: the program that defined
the class has imported its module; nothing is imported and no code runs (no module ``__getattr__``, no property), so
a checkpoint cannot make the loading process import or run anything. A reference that does not resolve is refused
with a :class:`~accelkit.checkpoint.files.CheckpointError` naming the hyper-parameter and what to pass instead.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Mapping
from typing import TypeGuard

#: the key of the one-entry mapping that stands for a class or function in a checkpoint's hyper-parameters
REFERENCE_KEY = "__reference__"

#: the kinds of objects stored by reference (a bound method, a module or an instance is not)
REFERENCE_TYPES = (type, types.FunctionType, types.BuiltinFunctionType)

__all__ = ["REFERENCE_KEY", "REFERENCE_TYPES", "Unresolved", "first_unresolved", "is_reference", "reference_to",
           "resolve_references"]


def _lookup(module_name: str, qualname: str) -> object:
    """The object ``qualname`` names in the already imported module ``module_name``, read from the ``__dict__``
    of each object on the way (no ``getattr``: nothing runs), or ``None``."""
    module = sys.modules.get(module_name)
    if module is None:
        return None
    found: object = module
    for part in qualname.split("."):
        namespace = getattr(found, "__dict__", None)
        if not isinstance(namespace, Mapping) or part not in namespace:
            return None
        found = namespace[part]
        if isinstance(found, staticmethod):
            found = found.__func__
    return found


def reference_to(value: object) -> str | None:
    """``"module:qualname"`` for a class or function that can be found again by that name (its module's namespace
    holds it under its qualified name), else ``None``: a class or function defined inside a function, a lambda, one
    replaced in its module since, or one of a module that is not imported."""
    if not isinstance(value, REFERENCE_TYPES):
        return None
    module_name, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if not isinstance(module_name, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    return f"{module_name}:{qualname}" if _lookup(module_name, qualname) is value else None


def is_reference(value: object) -> TypeGuard[Mapping[str, str]]:
    """Whether ``value`` is a stored reference (``{"__reference__": "module:qualname"}``)."""
    return isinstance(value, Mapping) and len(value) == 1 and isinstance(value.get(REFERENCE_KEY), str)


class Unresolved:
    """A stored reference that did not resolve in this process; its ``message`` says which hyper-parameter, why,
    and what to pass instead."""

    def __init__(self, name: str, reference: str, why: str) -> None:
        self.name, self.reference = name, reference
        self.message = (f"hyper-parameter {name!r} is the reference {reference!r}, {why}; accelkit resolves a stored "
                        f"class or function only from modules this process has already imported (loading a "
                        f"checkpoint imports and runs nothing). Import it first, or pass it: "
                        f"load_from_checkpoint(path, {name.split('.')[0].split('[')[0]}=...)")

    def __repr__(self) -> str:
        return f"Unresolved({self.reference!r})"


def _resolve(reference: str, name: str) -> type | types.FunctionType | types.BuiltinFunctionType | Unresolved:
    module_name, colon, qualname = reference.partition(":")
    if not colon or not module_name or not qualname:
        return Unresolved(name, reference, "which is not of the form 'module:qualname'")
    if module_name not in sys.modules:
        return Unresolved(name, reference, f"and its module {module_name!r} is not imported in this process")
    found = _lookup(module_name, qualname)
    if not isinstance(found, REFERENCE_TYPES):
        return Unresolved(name, reference, f"and module {module_name!r} holds no class or function {qualname!r}")
    return found


def resolve_references(value: object, name: str) -> object:
    """``value`` (a stored hyper-parameter named ``name``) with each reference replaced by its class or function;
    a value holding a reference that does not resolve becomes one :class:`Unresolved`."""
    if is_reference(value):
        return _resolve(value[REFERENCE_KEY], name)
    if isinstance(value, Mapping):
        items = {key: resolve_references(item, f"{name}.{key}") for key, item in value.items()}
        failed = next((item for item in items.values() if isinstance(item, Unresolved)), None)
        return failed if failed is not None else items
    if isinstance(value, (list, tuple)):
        resolved = [resolve_references(item, f"{name}[{i}]") for i, item in enumerate(value)]
        failed = next((item for item in resolved if isinstance(item, Unresolved)), None)
        return failed if failed is not None else type(value)(resolved)
    return value


def first_unresolved(arguments: Mapping[str, object]) -> Unresolved | None:
    """The first :class:`Unresolved` among ``arguments``' values (or the values of a mapping among them, the
    hyper-parameters saved from one ``__init__`` argument), or ``None``."""
    for value in arguments.values():
        inner = value.values() if isinstance(value, Mapping) else [value]
        found = next((item for item in inner if isinstance(item, Unresolved)), None)
        if found is not None:
            return found
    return None
