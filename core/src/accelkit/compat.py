"""Import paths of accelkit 0.1's flat layout, deprecated, kept working until accelkit :data:`REMOVED_IN` after the core
moved into packages, and Lightning's module paths under the mechanical rule ``lightning.pytorch.X`` -> ``accelkit.X``
where accelkit's modules are named otherwise (:data:`LIGHTNING_PATHS`, not deprecated: they are how a Lightning
program ports by changing its imports).

``import accelkit.strategy`` (or ``from accelkit.trainer_args import ...``, or a class path such as
``accelkit.cli_config.ReduceLROnPlateau`` in a saved ``config.yaml``) gives the module at its new home: the
same module object, so classes and functions are identical whichever path named them. The first import of each
old path in a process raises a :class:`DeprecationWarning` naming the new path and :data:`REMOVED_IN`
(:func:`moved_message`); unless the interpreter was given warning options (``-W``, ``PYTHONWARNINGS``), these
warnings are shown wherever the import happens (Python shows a ``DeprecationWarning`` only for code run as
``__main__``), so a class path read from a saved ``config.yaml`` is reported too. Nothing is imported until an old
path is used. ``docs/architecture.rst`` lists the new paths.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import re
import sys
import tomllib
import warnings
from collections.abc import Sequence
from importlib import resources
from types import ModuleType

#: the accelkit version that removes the old paths of :data:`MOVED`
REMOVED_IN = "0.3.0"

#: old module path (deprecated) -> the module (or package) that holds its names now
MOVED: dict[str, str] = {
    "accelkit.strategy": "accelkit.strategies",
    "accelkit.ddp": "accelkit.strategies.ddp",
    "accelkit.sampler": "accelkit.strategies.sampler",
    "accelkit.launchers": "accelkit.strategies.launchers",
    "accelkit.result": "accelkit.strategies.launchers.result",
    "accelkit.interrupt": "accelkit.strategies.launchers.interrupt",
    "accelkit.watchdog": "accelkit.strategies.launchers.watchdog",
    "accelkit.builtin_environments": "accelkit.environments",
    "accelkit.registry": "accelkit.plugins.registry",
    "accelkit.resolve": "accelkit.plugins.compose",
    "accelkit.trainer_args": "accelkit.trainer.arguments",
    "accelkit.trainer_props": "accelkit.trainer.properties",
    "accelkit.launching": "accelkit.trainer.dispatch",
    "accelkit.module_hooks": "accelkit.module.hooks",
    "accelkit.datamodule": "accelkit.module.datamodule",
    "accelkit.hparams": "accelkit.module.hparams",
    "accelkit.hparams_io": "accelkit.module.saving",
    "accelkit.optim": "accelkit.module.optimizers",
    "accelkit.summary": "accelkit.module.summary",
    "accelkit.metrics": "accelkit.loops.metrics",
    "accelkit.distributed_checkpoint": "accelkit.checkpoint.sharded",
    "accelkit.cli_checkpoint": "accelkit.cli.checkpoint_command",
    "accelkit.cli_commands": "accelkit.cli.stage_commands",
    "accelkit.cli_config": "accelkit.cli.config",
    "accelkit.cli_main": "accelkit.cli.lightning_cli",
    "accelkit.cli_errors": "accelkit.cli.config_errors",
    "accelkit.cli_paths": "accelkit.cli.class_paths",
    "accelkit.utils": "accelkit.utilities",
}


#: Lightning's module paths under the mechanical rule (``lightning.pytorch.X`` -> ``accelkit.X``) where accelkit's
#: names live elsewhere -> the accelkit module (or package) holding them, so that a program importing from Lightning's
#: module path imports after changing only the package name (``from accelkit.utilities.model_summary import
#: ModelSummary``). A module below a path given here that names a package maps below its home
#: (``accelkit.core.module`` -> ``accelkit.module.module``). ``lightning_modules.toml`` (:func:`lightning_module_gaps`)
#: lists Lightning's module paths accelkit has no module for.
LIGHTNING_PATHS: dict[str, str] = {
    # ``import lightning.pytorch as pl`` with the package name changed: accelkit itself, and below it accelkit's
    # modules (``from accelkit.pytorch.callbacks import ModelCheckpoint``), as the attribute ``accelkit.pytorch`` is
    "accelkit.pytorch": "accelkit",
    "accelkit.core": "accelkit.module",
    "accelkit.core.optimizer": "accelkit.module.optimizers",
    "accelkit.core.mixins": "accelkit.module",
    "accelkit.core.mixins.hparams_mixin": "accelkit.module.hparams",
    "accelkit.accelerators.accelerator": "accelkit.accelerator",
    "accelkit.callbacks.callback": "accelkit.callbacks.base",
    "accelkit.callbacks.checkpoint": "accelkit.callbacks.model_checkpoint",
    "accelkit.callbacks.device_stats_monitor": "accelkit.callbacks.base",
    "accelkit.callbacks.rich_model_summary": "accelkit.callbacks.model_summary",
    "accelkit.loggers.logger": "accelkit.loggers.base",
    "accelkit.plugins.environments": "accelkit.environments",
    "accelkit.strategies.strategy": "accelkit.strategies.base",
    "accelkit.trainer.states": "accelkit.loops.state",
    "accelkit.utilities.model_summary": "accelkit.module.summary",
}


#: Lightning's module paths under the mechanical rule whose classes a plugin distribution provides -> the plugin's
#: package, which that path is once it is installed (``from accelkit.loggers.wandb import WandbLogger`` is
#: ``accelkit_wandb.WandbLogger``): the package is imported when the path is, never before. Where the distribution
#: is not installed, importing the path raises a ``ModuleNotFoundError`` naming it (:func:`plugin_missing_message`).
LIGHTNING_PLUGIN_PATHS: dict[str, str] = tomllib.loads(
    resources.files("accelkit").joinpath("catalog.toml").read_text())["lightning_module_paths"]


def distribution_of(package: str) -> str:
    """The distribution a first-party plugin package comes in (``accelkit_wandb`` -> ``accelkit-wandb``)."""
    return package.replace("_", "-")


def plugin_missing_message(fullname: str, package: str) -> str:
    """The error of importing ``fullname``, a path of :data:`LIGHTNING_PLUGIN_PATHS`, without its plugin."""
    lightning = "lightning.pytorch" + fullname[len("accelkit"):]
    distribution = distribution_of(package)
    return (f"No module named {fullname!r}: Lightning's {lightning} is provided by the {distribution} distribution, "
            f"which is not installed; pip install {distribution} (then import from {fullname} or from {package})")


#: where the errors of :func:`missing_message` send users: the migration guide's table of Lightning's module paths
GUIDE_SECTION = "\"Lightning's module paths\" in the migration guide (docs/migrating-from-lightning.rst)"


@functools.cache
def lightning_module_gaps() -> dict[str, dict[str, str]]:
    """Lightning's module paths (relative to ``lightning.pytorch``) that accelkit has no module for -> their row of
    ``lightning_modules.toml`` in this package: ``notes`` (what to use instead, reStructuredText) and, where accelkit
    has one, ``counterpart`` (the accelkit module holding what comes closest). Read the first time it is asked for:
    by :class:`MissingModuleFinder` when an import of such a path has failed, never by an import that succeeds."""
    text = resources.files("accelkit").joinpath("lightning_modules.toml").read_text()
    return tomllib.loads(text)


def gap_of(fullname: str) -> str | None:
    """The path of :func:`lightning_module_gaps` (relative to ``lightning.pytorch``) covering ``fullname``, an
    accelkit module path, or one above it (a row covers the paths below it), or covering the Lightning path whose
    alias (:data:`LIGHTNING_PATHS`) stands for ``fullname`` (``accelkit.module.summary.model_summary``, asked for as
    ``accelkit.utilities.model_summary.model_summary``); ``None`` where none does."""
    if not fullname.startswith("accelkit."):
        return None
    rows = lightning_module_gaps()
    names = [fullname] + [alias + fullname[len(home):] for alias, home in LIGHTNING_PATHS.items()
                          if fullname.startswith(home + ".")]
    for name in names:
        path = name[len("accelkit."):]
        while path and path not in rows:
            path = path.rpartition(".")[0]
        if path:
            return path
    return None


def plain_text(rst: str) -> str:
    """``rst``, a row's reStructuredText notes, as an error message shows them (literals unquoted, ``:doc:`x```
    as the file ``docs/x.rst``)."""
    return re.sub(r":doc:`([^`]+)`", r"docs/\1.rst", rst).replace("``", "")


def missing_message(fullname: str, path: str) -> str:
    """The error of importing ``fullname``, which ``path`` (a row of :func:`lightning_module_gaps`) covers: that
    accelkit has no such module, its counterpart in accelkit if any, what to use instead and where the migration
    guide says so."""
    row = lightning_module_gaps()[path]
    counterpart = f"; its counterpart in accelkit is {row['counterpart']}" if "counterpart" in row else ""
    return (f"No module named {fullname!r}: accelkit has no module for Lightning's lightning.pytorch.{path} "
            f"(pytorch_lightning.{path}){counterpart}. {plain_text(row['notes']).rstrip('.')}. See {GUIDE_SECTION}.")


def home_in(paths: dict[str, str], fullname: str) -> str | None:
    """The module that ``fullname``, a path of ``paths`` (:data:`MOVED` or :data:`LIGHTNING_PATHS`) or a module below
    one of them, stands for (``accelkit.launchers.spawn`` -> ``accelkit.strategies.launchers.spawn``), or ``None``."""
    parent = fullname
    while parent and parent not in paths:
        parent = parent.rpartition(".")[0]
    return paths[parent] + fullname[len(parent):] if parent else None


def alias_home(fullname: str) -> str | None:
    """The module an old path (:data:`MOVED`) or a Lightning path (:data:`LIGHTNING_PATHS`), or a module below one of
    them, stands for, or ``None``."""
    return home_in(MOVED, fullname) or home_in(LIGHTNING_PATHS, fullname)


def moved_message(old: str, new: str) -> str:
    """The deprecation warning's sentence for the old path ``old``, whose module is now ``new``."""
    return (f"{old} is a module path of accelkit 0.1, deprecated (accelkit {REMOVED_IN} removes it): use {new} "
            f"instead (in imports, and in class paths of a saved config.yaml)")


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str, deprecated: str | None = None) -> None:
        self.target = target
        self.deprecated = deprecated

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        if self.deprecated is not None:
            # stacklevel 2: past importlib's own frames, the code that imported the old path
            warnings.warn(self.deprecated, DeprecationWarning, stacklevel=2)
        module = importlib.import_module(self.target)
        self.home_spec = module.__spec__  # importlib gives the module the alias's spec next; exec_module puts it back
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The module at its new home is already executed: only its own ``__spec__`` is put back (a package keeps
        its search locations, ``accelkit.__spec__.name`` stays ``accelkit`` after ``import accelkit.pytorch``)."""
        module.__spec__ = self.home_spec


class _PluginLoader(_AliasLoader):
    """A path of :data:`LIGHTNING_PLUGIN_PATHS`: the plugin's package, or the error naming its distribution."""

    def __init__(self, fullname: str, package: str) -> None:
        super().__init__(package)
        self.fullname = fullname

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        try:
            return super().create_module(spec)
        except ModuleNotFoundError as error:
            if error.name != self.target:  # the plugin is there, something it imports is not: its own error
                raise
            # no ``name``: Python drops a ModuleNotFoundError named after the submodule that ``from accelkit.loggers
            # import wandb`` asked for, and says "cannot import name" instead of this sentence
            raise ModuleNotFoundError(plugin_missing_message(self.fullname, self.target)) from None


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths of :data:`MOVED` and Lightning's paths of :data:`LIGHTNING_PATHS` and answers with the
    module at its home (:func:`alias_home`); the first import of each old path warns (:func:`moved_message`)."""

    def __init__(self) -> None:
        #: the old paths this finder has warned about
        self.warned: set[str] = set()

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("accelkit."):
            return None
        new = home_in(MOVED, fullname)
        if new is not None:
            message = None if fullname in self.warned else moved_message(fullname, new)
            self.warned.add(fullname)
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader(new, deprecated=message))
        if fullname in LIGHTNING_PLUGIN_PATHS:
            return importlib.machinery.ModuleSpec(fullname, _PluginLoader(fullname, LIGHTNING_PLUGIN_PATHS[fullname]))
        new = home_in(LIGHTNING_PATHS, fullname)
        return None if new is None else importlib.machinery.ModuleSpec(fullname, _AliasLoader(new))


class MissingModuleFinder(importlib.abc.MetaPathFinder):
    """Last on :data:`sys.meta_path`: asked only about a module no other finder found, so it never stands in for a
    module accelkit has, and an import that succeeds never reaches it. An accelkit path that a row of
    :func:`lightning_module_gaps` covers raises a ``ModuleNotFoundError`` with :func:`missing_message`'s sentence
    (``importlib.util.find_spec`` raises it too); any other path is left to Python's own error.

    The error has no ``name``: Python drops a ``ModuleNotFoundError`` named after the submodule that ``from
    accelkit.loggers import comet`` asked for, and would say "cannot import name" instead of the sentence."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        # no docstring: the class's says what it does (sphinx cannot resolve ModuleSpec, importlib's private class)
        covering = gap_of(fullname)
        if covering is None:
            return None
        raise ModuleNotFoundError(missing_message(fullname, covering))


def install() -> None:
    """Put :class:`MovedModuleFinder` first on :data:`sys.meta_path` once (``import accelkit`` does this): first, so
    that a module below a Lightning path standing for a package (``accelkit.core.module``) is the module at its home,
    not a second copy of that file loaded under the other name; and :class:`MissingModuleFinder` last. Without
    warning options given to the interpreter, the old paths' deprecation warnings are shown wherever the import
    happens (see the module's description)."""
    if not any(isinstance(finder, MissingModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(MissingModuleFinder())
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())
        if not sys.warnoptions:
            warnings.filterwarnings("default", message=r"accelkit\.\S+ is a module path of accelkit 0\.1",
                                    category=DeprecationWarning)
