"""Names removed from the plugin API that keep working for one more minor version of the hook API.

A removed name stays importable from where it was (a module ``__getattr__`` calls :func:`deprecated_attribute`);
each use raises a :class:`DeprecationWarning` naming its replacement and the hook API version that removes it.
``tests/data/plugin_api.json`` lists the names plugins may use; ``tests/helpers/plugin_api.py`` checks that none
disappears within a major version unless it is listed here.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from dataclasses import dataclass


@dataclass(frozen=True)
class Deprecation:
    """A name removed from the plugin API, still served with a warning.

    :param target: where the name's implementation now lives (``"module:attribute"``), imported on use.
    :param replacement: what to use instead, as the warning words it.
    :param since: the hook API version that deprecated it.
    :param removed_in: the hook API version that removes it (the next major version).
    """

    target: str
    replacement: str
    since: str
    removed_in: str

    def message(self, name: str) -> str:
        """The warning's sentence for the name ``name`` (``"accelkit.cli.command"``)."""
        return (f"{name} is deprecated since hook API {self.since} and will be removed in {self.removed_in}: "
                f"use {self.replacement} instead")


#: ``"module.attribute"`` of a removed name -> its :class:`Deprecation`
DEPRECATED: dict[str, Deprecation] = {
    "accelkit.cli.command": Deprecation(
        "accelkit.plugins.legacy_commands:command",
        "an accelkit_register_commands hook returning accelkit.records.CommandRecord (see docs/plugins.rst, "
        "'Adding a command')", "1.2", "2.0"),
    "accelkit.cli.raw_command": Deprecation(
        "accelkit.plugins.legacy_commands:raw_command",
        "an accelkit_register_commands hook returning accelkit.records.CommandRecord(..., raw=True)", "1.2", "2.0"),
}


def deprecated_attribute(module: str, name: str) -> object:
    """The value of the removed name ``module.name``, with a :class:`DeprecationWarning`; :class:`AttributeError`
    (as a module's ``__getattr__`` must raise) if ``module.name`` was never a deprecated name."""
    deprecation = DEPRECATED.get(f"{module}.{name}")
    if deprecation is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    # ``from module import name`` asks twice: importlib's fromlist probe (hasattr), then the import itself
    if sys._getframe(2).f_code.co_name != "_handle_fromlist":
        warnings.warn(deprecation.message(f"{module}.{name}"), DeprecationWarning, stacklevel=3)
    target_module, _, attribute = deprecation.target.partition(":")
    return getattr(importlib.import_module(target_module), attribute)
