"""The names plugins may use, as data (``tests/data/plugin_api.json``), and the check that none disappears.

The listing holds every name ``docs/plugins.rst`` offers plugins: the hook specifications, the records, the base
classes a plugin subclasses (with their public methods), the plugin manager and registry a command or
``accelkit_configure`` receives, and the CLI command API; each callable with its parameter names. Within one major
version of the hook API a listed name may not disappear and a signature may not lose a parameter; a removed name
must be served by :data:`accelkit.utilities.deprecation.DEPRECATED` (with a warning) until the next major version.

Run ``python tests/helpers/plugin_api.py`` to write the listing again when a name is added: :func:`unlisted` names
every public name of the extension points the listing lacks, so that a new name is guarded from its first commit (a
stale listing would guard less without failing)."""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import warnings
from pathlib import Path
from typing import Any

LISTING = Path(__file__).resolve().parents[1] / "data" / "plugin_api.json"

#: module -> the names of it plugins may use (``None``: every public name the module defines or re-exports)
PUBLIC = {
    "accelkit": ["HOOK_API_VERSION", "hookimpl", "Accelerator", "Strategy", "Precision", "MixedPrecision",
                 "TruePrecision", "SingleDeviceStrategy", "DDPStrategy", "DDPSpawnStrategy", "AcceleratorRecord",
                 "StrategyRecord", "PrecisionRecord", "RunConfig", "AccelkitError", "ConfigurationError",
                 "PluginError", "PluginConflictError"],
    "accelkit.hookspecs": None,
    "accelkit.records": None,
    "accelkit.environments": ["ClusterEnvironment"],
    "accelkit.loggers": ["Logger", "VersionedLogger", "next_version"],
    "accelkit.plugins": ["PluginManager", "PluginInfo", "Registry", "Conflict"],
    "accelkit.cli": ["main", "build_parser"],
}


def _parameters(obj: Any) -> list[str] | None:
    """The parameter names of a callable (a class: its constructor's), ``None`` for anything else."""
    if not callable(obj):
        return None
    try:
        return [p for p in inspect.signature(obj).parameters if p != "self"]
    except (TypeError, ValueError):  # a builtin without a signature
        return []


def _members(cls: type) -> dict[str, Any]:
    """The public attributes a class defines itself or inherits from accelkit classes (not torch's, pluggy's)."""
    found: dict[str, Any] = {}
    for base in reversed(cls.__mro__):
        if not base.__module__.startswith("accelkit"):
            continue
        for name in vars(base):
            if not name.startswith("_"):
                found[name] = inspect.getattr_static(cls, name)
    return found


def _module_names(module: str, names: list[str] | None) -> list[str]:
    mod = importlib.import_module(module)
    if names is not None:
        return names
    return sorted(n for n, v in vars(mod).items() if not n.startswith("_") and not inspect.ismodule(v)
                  and (getattr(v, "__module__", module) or module).startswith("accelkit")
                  and n not in ("annotations", "TYPE_CHECKING"))


def collect() -> dict[str, list[str] | None]:
    """``{"module:Name": parameters, "module:Class.method": parameters}`` for every name of :data:`PUBLIC` and every
    name :data:`~accelkit.utilities.deprecation.DEPRECATED` still serves."""
    from accelkit.utilities.deprecation import DEPRECATED

    listing: dict[str, list[str] | None] = {}
    for module, names in PUBLIC.items():
        mod = importlib.import_module(module)
        for name in _module_names(module, names):
            value = getattr(mod, name)
            listing[f"{module}:{name}"] = _parameters(value)
            if inspect.isclass(value):
                for member, attribute in _members(value).items():
                    function = getattr(attribute, "__func__", attribute)
                    listing[f"{module}:{name}.{member}"] = (
                        None if isinstance(attribute, property) else _parameters(function))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for dotted in DEPRECATED:
            module, _, name = dotted.rpartition(".")
            listing[f"{module}:{name}"] = _parameters(getattr(importlib.import_module(module), name))
    return dict(sorted(listing.items()))


def _resolve(path: str) -> Any:
    module, _, attributes = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attributes.split("."):
        obj = inspect.getattr_static(obj, part) if inspect.isclass(obj) else getattr(obj, part)
    return getattr(obj, "__func__", obj)


def _major(version: str) -> int:
    return int(version.split(".")[0])


def check(listing: dict[str, Any], hook_api: str | None = None) -> list[str]:
    """One sentence per listed name that disappeared or lost a parameter; none across a major hook API version.

    :param listing: ``{"hook_api": "1.2", "names": {"module:Name": parameters or None}}`` as the JSON file holds.
    :param hook_api: the running hook API version (:data:`accelkit.HOOK_API_VERSION` when omitted).
    """
    from accelkit.hookspecs import HOOK_API_VERSION
    from accelkit.utilities.deprecation import DEPRECATED

    hook_api = hook_api or HOOK_API_VERSION
    if _major(hook_api) > _major(listing["hook_api"]):
        return []  # a major version may remove names; write the listing again for it
    problems = []
    for path, parameters in listing["names"].items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                current = _resolve(path)
        except (ImportError, AttributeError):
            module, _, name = path.partition(":")
            if f"{module}.{name}" not in DEPRECATED:
                problems.append(f"{path} (hook API {listing['hook_api']}) is gone in hook API {hook_api}: keep it "
                                f"until the next major version, or serve it from accelkit.utilities.deprecation."
                                f"DEPRECATED with a warning naming its replacement")
            continue
        now = _parameters(current) if parameters is not None else None
        lost = [p for p in parameters or [] if now is not None and p not in now]
        if lost:
            problems.append(f"{path} lost parameter(s) {', '.join(lost)} in hook API {hook_api}: plugins calling or "
                            f"implementing it with them break; removing a parameter needs a major version")
    return problems


def unlisted(listing: dict[str, Any]) -> list[str]:
    """One sentence per public name of the extension points (:func:`collect`) that the listing lacks.

    :param listing: ``{"hook_api": "1.2", "names": {"module:Name": parameters or None}}`` as the JSON file holds.
    """
    return [f"{path} is public but not listed in {LISTING.name}: run python tests/helpers/plugin_api.py to list it, so "
            "that it may not disappear or lose a parameter before the next major hook API version"
            for path in collect() if path not in listing["names"]]


def load() -> dict[str, Any]:
    """The listing of ``tests/data/plugin_api.json``."""
    return json.loads(LISTING.read_text())


def main() -> int:
    """Write the listing of the running accelkit to ``tests/data/plugin_api.json``."""
    from accelkit.hookspecs import HOOK_API_VERSION

    LISTING.write_text(json.dumps({"hook_api": HOOK_API_VERSION, "names": collect()}, indent=1) + "\n")
    print(f"wrote {LISTING} ({len(collect())} names, hook API {HOOK_API_VERSION})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
