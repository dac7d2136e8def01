"""The one registry: every named accelerator, strategy, precision, cluster environment, logger and ``accelkit``
sub-command that the loaded plugins (and the core) registered, and the names claimed twice (:class:`Conflict`).
Built from plain data (:class:`Contribution`: each plugin's name, provider and the results of its
``accelkit_register_*`` hooks) that :class:`~accelkit.plugins.manager.PluginManager` hands it; building calls
nothing back, and the plugins that must be left out are returned (:class:`RegistrationFailure`) for the manager to
record. This module does not import the manager."""

from __future__ import annotations

import difflib
import tomllib
import types
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Protocol, TypeVar, cast

from accelkit.errors import ConfigurationError, PluginConflictError
from accelkit.hookspecs import BLOCK_ENV
from accelkit.records import (
    AcceleratorRecord,
    CallbackRecord,
    ClusterEnvironmentRecord,
    CommandRecord,
    LoggerRecord,
    NamedKindRecord,
    PrecisionRecord,
    ProfilerRecord,
    Record,
    StrategyRecord,
    by_priority,
    lookup_key,
)

if TYPE_CHECKING:
    from accelkit.precision import Precision

_V = TypeVar("_V")
_Named = TypeVar("_Named", bound=Record)
_Scoped = TypeVar("_Scoped", bound=StrategyRecord)

#: one row per record kind: (kind, hook name, record class, Registry attribute, how names are kept)
#: "named": one record per name; "scoped": one per name and accelerator; "core first": a name the core registers
#: stays the core's and a plugin claiming it is reported (the core's own sub-commands).
KINDS = (
    ("accelerator", "accelkit_register_accelerators", AcceleratorRecord, "accelerators", "named"),
    ("strategy", "accelkit_register_strategies", StrategyRecord, "strategies", "scoped"),
    ("precision", "accelkit_register_precisions", PrecisionRecord, "precisions", "scoped"),
    ("cluster environment", "accelkit_register_cluster_environments", ClusterEnvironmentRecord,
     "cluster_environments", "named"),
    ("logger", "accelkit_register_loggers", LoggerRecord, "loggers", "named"),
    ("command", "accelkit_register_commands", CommandRecord, "commands", "core first"),
    ("callback", "accelkit_register_callbacks", CallbackRecord, "callbacks", "named"),
    ("profiler", "accelkit_register_profilers", ProfilerRecord, "profilers", "named"),
)
#: the provider name of the core's own records
CORE_PROVIDER = "accelkit (core)"
#: hook name -> (kind, record class, Registry attribute, rule), from :data:`KINDS`
_BY_HOOK = {hook: (kind, record_type, attribute, rule) for kind, hook, record_type, attribute, rule in KINDS}


def core_plugin_module() -> types.ModuleType:
    """The module holding the core's own hook implementations (registered last, overridable by any plugin)."""
    from accelkit.plugins import builtin as _builtin

    return _builtin


def suggest(name: str, choices: Iterable[str]) -> str:
    """``" Did you mean 'x'?"`` for the closest choice, or ``""``.

    Only close spellings that start alike count: ``"npu"`` is another device, not a typo of ``"tpu"``."""
    name = str(name).lower()
    close = [c for c in difflib.get_close_matches(name, list(choices), n=3, cutoff=0.6) if c[:1] == name[:1]]
    return f" Did you mean {close[0]!r}?" if close else ""


_CATALOG: dict[str, dict[str, str]] | None = None


def catalog() -> dict[str, dict[str, str]]:
    """Known first-party names and the distribution that provides each, per section (``accelerators``,
    ``strategies``, ``precisions``, ``loggers``); used for install hints only."""
    global _CATALOG
    if _CATALOG is None:
        text = resources.files("accelkit").joinpath("catalog.toml").read_text()
        _CATALOG = {k: {lookup_key(n): d for n, d in v.items()} for k, v in tomllib.loads(text).items()}
    return _CATALOG


@dataclass
class Conflict:
    """One name claimed by two plugins, for overlapping accelerators (``None``: any accelerator).

    :param kind: ``"accelerator"``, ``"strategy"``, ``"precision"``, ``"cluster environment"``, ``"logger"`` or
        ``"command"``.
    :param name: the name as the second claimant spelt it.
    :param providers: display names of the claimants (:attr:`accelkit.plugins.manager.PluginInfo.provider`).
    :param plugins: their entry-point names (what ``ACCELKIT_BLOCK_PLUGINS`` and ``"no:NAME"`` take); ``""`` for
        plugin objects passed to the Trainer, which are removed from ``plugins=[...]`` instead.
    :param accelerators: where both claims apply (scoped names); ``None`` for unscoped claims.
    :param kept: the provider whose record stays usable (the core, for its own sub-commands); ``""`` when the name
        is left out until one claimant is blocked.
    """

    kind: str
    name: str
    providers: list[str]
    plugins: list[str]
    accelerators: frozenset[str] | None = None
    kept: str = ""

    def covers(self, accelerator: str) -> bool:
        """Whether a run on ``accelerator`` that asks for this name meets the conflict."""
        return self.accelerators is None or accelerator in self.accelerators

    def message(self) -> str:
        """The sentence naming both providers and how to block one of them."""
        claimants = " and ".join(self.providers)
        if self.kept:
            others = ", ".join(p for p in self.providers if p != self.kept)
            return (f"{self.kind} name {self.name!r} is claimed by both {claimants}; it stays {self.kept}'s, so the "
                    f"{self.kind} of {others} is not available (its author must rename it)")
        where = f" on accelerator {', '.join(sorted(self.accelerators))}" if self.accelerators else ""
        blockable = [p for p in self.plugins if p]

        fixes = [f"{BLOCK_ENV}={p} (or Trainer(plugins=['no:{p}']))" for p in blockable]
        if len(blockable) < len(self.plugins):
            fixes.append("remove one of the plugin objects from Trainer(plugins=[...])")
        return f"{self.kind} name {self.name!r}{where} is claimed by both {claimants}; to use it, block one: " + (
            " or ".join(fixes) + (", or uninstall one of them" if blockable else ""))


class _Table(dict[str, _V]):
    """A name table that also remembers the names claimed twice (left out of it, or kept and checked)."""

    def __init__(self) -> None:
        super().__init__()
        self.conflicts: dict[str, list[Conflict]] = {}


class Registry:
    """Every named accelerator, strategy, precision, cluster environment, logger, command, callback and profiler,
    keyed by the :func:`~accelkit.records.lookup_key` of each name and alias.

    Built by :meth:`assemble` from plain :class:`~accelkit.plugins.registry.Contribution` records. A registration
    hook that raises takes only its own plugin out (returned as a
    :class:`~accelkit.plugins.registry.RegistrationFailure`; the manager marks it failed); a name
    claimed twice is kept out of the tables and raises :class:`~accelkit.errors.PluginConflictError` when a run
    asks for it (:attr:`conflicts` lists them).
    """

    def __init__(self) -> None:
        self.accelerators: dict[str, AcceleratorRecord] = _Table()
        self.strategies: dict[str, list[StrategyRecord]] = _Table()
        self.precisions: dict[str, list[PrecisionRecord]] = _Table()
        self.cluster_environments: dict[str, ClusterEnvironmentRecord] = _Table()
        self.loggers: dict[str, LoggerRecord] = _Table()
        self.commands: dict[str, CommandRecord] = _Table()
        self.callbacks: dict[str, CallbackRecord] = _Table()
        self.profilers: dict[str, ProfilerRecord] = _Table()
        #: every name claimed twice
        self.conflicts: list[Conflict] = []
        #: what each plugin registered: plugin name (as registered with the manager) -> [(kind, record)]
        self.provided: dict[str, list[tuple[str, Record]]] = {}
        self._plugin_names: dict[str, str] = {}

    @classmethod
    def assemble(cls, contributions: Iterable[Contribution]) -> tuple[Registry, list[RegistrationFailure]]:
        """The registry of ``contributions`` (in their order, which keeps messages stable), and the plugins left out
        of it: one whose hook raised or returned something that is not a record of its kind. Calls nothing back;
        the caller records the failures (:meth:`PluginManager.mark_failed
        <accelkit.plugins.manager.PluginManager.mark_failed>`) and warns about :attr:`conflicts`."""
        registry = cls()
        failures: list[RegistrationFailure] = []
        for contribution in contributions:
            failure = _failure_in(contribution)
            if failure is None:
                registry._add_contribution(contribution)
            else:
                failures.append(failure)
        return registry, failures

    @classmethod
    def build(cls, manager: RegistryOwner) -> Registry:
        """Deprecated (hook API 1.3, removed in 2.0): ``manager.registry``, which it returns with a
        :class:`DeprecationWarning`. The manager builds its registry with :meth:`assemble`."""
        warnings.warn("Registry.build(manager) is deprecated since hook API 1.3 and will be removed in 2.0: use "
                      "manager.registry instead", DeprecationWarning, stacklevel=2)
        return manager.registry

    def _add_contribution(self, contribution: Contribution) -> None:
        # assemble() took out the contributions holding something that is not a record of its hook's kind
        collected = [(_BY_HOOK[result.hook], cast("Record", record))
                     for result in contribution.results for record in result.records]
        provider = contribution.provider
        # what ACCELKIT_BLOCK_PLUGINS takes: entry-point names only (objects passed to the Trainer are removed)
        self._plugin_names[provider] = contribution.blockable
        self.provided[contribution.name] = [(kind, record) for (kind, *_), record in collected]
        for (kind, _, attribute, rule), record in collected:
            object.__setattr__(record, "provider", provider)
            table = getattr(self, attribute)
            if isinstance(record, StrategyRecord):  # the "scoped" rule's kinds: strategies and precisions
                self._add_scoped(kind, table, record)
            else:
                self._add_named(kind, table, record, core_first=rule == "core first")

    def _conflict(self, kind: str, name: str, providers: list[str], accelerators: Iterable[str] | None = None,
                  kept: str = "") -> Conflict:
        conflict = Conflict(kind, name, providers, [self._plugin_names.get(p, "") for p in providers],
                            None if accelerators is None else frozenset(accelerators), kept)
        self.conflicts.append(conflict)
        return conflict

    def _add_named(self, kind: str, table: _Table[NamedKindRecord], record: NamedKindRecord,
                   core_first: bool = False) -> None:
        # the core registers first (PluginManager.__init__), so with core_first its record is the holder
        for name in record.names:
            key = lookup_key(name)
            holder = table.get(key)
            if core_first and holder is not None and holder.provider == CORE_PROVIDER and holder is not record:
                self._conflict(kind, name, [holder.provider, record.provider], kept=holder.provider)
            elif key in table.conflicts:  # a third claimant joins the conflict
                table.conflicts[key][0].providers.append(record.provider)
                table.conflicts[key][0].plugins.append(self._plugin_names.get(record.provider, ""))
            elif holder is not None and holder is not record:
                table.conflicts[key] = [self._conflict(kind, name, [table.pop(key).provider, record.provider])]
            else:
                table[key] = record

    def _add_scoped(self, kind: str, table: _Table[list[StrategyRecord]], record: StrategyRecord) -> None:
        for name in record.names:
            key = lookup_key(name)
            if any(other is record for other in table.get(key, [])):
                continue  # a name and an alias that differ only in spelling ("bf16-true"/"bf16_true")
            for other in table.get(key, []):
                shared: Iterable[str] | None
                if other.accelerators is None or record.accelerators is None:
                    shared = other.accelerators if record.accelerators is None else record.accelerators
                else:
                    shared = set(other.accelerators) & set(record.accelerators)
                    if not shared:
                        continue
                table.conflicts.setdefault(key, []).append(
                    self._conflict(kind, name, [other.provider, record.provider], shared))
            table.setdefault(key, []).append(record)

    # ----------------------------------------------------------------- look-ups
    def accelerator_names(self) -> list[str]:
        """Canonical accelerator names."""
        return sorted({r.name for r in self.accelerators.values()})

    def accelerator_records(self) -> list[AcceleratorRecord]:
        """Every accelerator record once, in the order ``accelerator="auto"`` tries them
        (:func:`~accelkit.records.record_order`)."""
        return by_priority(self.accelerators.values())

    def strategy_names(self, accelerator: str | None = None) -> list[str]:
        """Canonical strategy names, for one accelerator or all."""
        return sorted({r.name for rs in self.strategies.values() for r in rs
                       if accelerator is None or r.runs_on(accelerator)})

    def precision_names(self, accelerator: str | None = None) -> list[str]:
        """Canonical precision names, for one accelerator or all."""
        return sorted({r.name for rs in self.precisions.values() for r in rs
                       if accelerator is None or r.runs_on(accelerator)})

    def cluster_environment_records(self) -> list[ClusterEnvironmentRecord]:
        """Every cluster environment record, in detection order (highest priority first, ties by name)."""
        return by_priority(self.cluster_environments.values())

    def cluster_environment_names(self) -> list[str]:
        """Registered cluster environment names, in detection order (highest priority first, ties by name)."""
        return [r.name for r in self.cluster_environment_records()]

    def logger_names(self) -> list[str]:
        """Canonical logger names."""
        return sorted({r.name for r in self.loggers.values()})

    def names_of(self, table: Mapping[str, Record]) -> list[str]:
        """Canonical names of a name table (``registry.callbacks``, ``registry.profilers``...)."""
        return sorted({r.name for r in table.values()})

    def command_records(self) -> list[CommandRecord]:
        """Every sub-command once, in registration order: the core's first, then each plugin's."""
        return list({id(r): r for r in self.commands.values()}.values())

    @staticmethod
    def find_named(table: Mapping[str, _Named], name: str) -> _Named | None:
        """The record registered as ``name`` in a name table (accelerators, loggers, commands...), or ``None``; a
        :class:`~accelkit.errors.PluginConflictError` if two plugins claim that name and it was left out."""
        key = lookup_key(name)
        for conflict in getattr(table, "conflicts", {}).get(key, []):
            raise PluginConflictError(f"{conflict.message()}.")
        return table.get(key)

    @staticmethod
    def find_scoped(table: Mapping[str, list[_Scoped]], name: str, accelerator: str) -> _Scoped | None:
        """The record registered under ``name`` for ``accelerator``, or ``None``; a
        :class:`~accelkit.errors.PluginConflictError` if two plugins claim that name there."""
        for conflict in getattr(table, "conflicts", {}).get(lookup_key(name), []):
            if conflict.covers(accelerator):
                raise PluginConflictError(f"{conflict.message()}.")
        for record in table.get(lookup_key(name), []):
            if record.runs_on(accelerator):
                return record
        return None

    def find_logger(self, name: str) -> LoggerRecord:
        """The logger registered as ``name`` (``Trainer(logger="tensorboard")``).

        :raise ConfigurationError: for an unknown name: the registered names, the close one, the distribution to
            install when the name is a tracker of the catalog (``mlflow``).
        :raise PluginConflictError: when two plugins claim the name.
        """
        record = self.find_named(self.loggers, name)
        if record is not None:
            return record
        names = self.logger_names()
        install = catalog().get("loggers", {}).get(lookup_key(name))
        hint = f" It is provided by {install}: pip install {install}." if install else suggest(name, names)
        raise ConfigurationError(f"logger={name!r} is not a registered logger.{hint} Registered loggers: "
                                 f"{', '.join(names)}; or pass a logger instance (accelkit.loggers.Logger)")

    def precision_name(self, precision: Precision) -> str:
        """The registered name of a precision instance the user built (``TruePrecision(torch.float64)`` ->
        ``"64-true"``): its own ``name`` if it or its class sets one, else the record with its class and options,
        else its class name (never the ``"32-true"`` it inherits from :class:`~accelkit.precision.Precision`)."""
        cls = type(precision)
        if "name" in vars(precision) or "name" in vars(cls):
            return str(precision.name)
        for record in {id(r): r for rs in self.precisions.values() for r in rs}.values():
            target = record.target
            if (target is not cls if not isinstance(target, str) else target.rpartition(":")[2] != cls.__name__):
                continue
            if record.load() is cls and all(_same_option(getattr(precision, k, v), v)
                                            for k, v in dict(record.options).items()):
                return record.name
        return cls.__name__

    def conflict(self, name: str, kinds: Iterable[str] = ("accelerator", "strategy", "precision")) -> Conflict | None:
        """The conflict over ``name`` among ``kinds``, if two plugins claim it."""
        key = lookup_key(name)
        for conflict in self.conflicts:
            if conflict.kind in kinds and lookup_key(conflict.name) == key:
                return conflict
        return None


class RegistryOwner(Protocol):
    """What :meth:`Registry.build` reads of a plugin manager: its registry."""

    @property
    def registry(self) -> Registry:
        """The manager's registry."""


def _same_option(value: object, option: object) -> bool:
    if isinstance(option, str) and not isinstance(value, str):  # dtype options are spelt "float64"
        return str(value).removeprefix("torch.") == option
    return bool(value == option)


@dataclass(frozen=True)
class HookResult:
    """What one registration hook implementation of a plugin gave: its records, or the exception it raised.

    :param hook: the hook's name (``"accelkit_register_strategies"``, a name of :data:`KINDS`).
    :param where: how messages name the call (``"acme.accelkit_register_strategies()"``).
    :param records: what it returned (empty when it raised).
    :param error: the exception it raised, or ``None``.
    """

    hook: str
    where: str
    records: tuple[object, ...] = ()
    error: BaseException | None = None


@dataclass(frozen=True)
class Contribution:
    """One plugin's part of the registry, as plain data: what :meth:`Registry.assemble
    <accelkit.plugins.Registry.assemble>` is built from.

    :param plugin: the plugin object (a :class:`RegistrationFailure` names it).
    :param name: the name it is registered under (the key of ``Registry.provided``).
    :param provider: how messages name it (:attr:`~accelkit.plugins.manager.PluginInfo.provider`,
        :data:`CORE_PROVIDER` for the core).
    :param blockable: its entry-point name, what ``ACCELKIT_BLOCK_PLUGINS`` and ``"no:NAME"`` take; ``""`` for plugin
        objects passed to the Trainer.
    :param results: its registration hooks' results, in :data:`KINDS` order (commands of the deprecated
        ``accelkit.cli.command`` decorators last, as ``accelkit_register_commands`` results).
    """

    plugin: object
    name: str
    provider: str
    blockable: str
    results: tuple[HookResult, ...]


@dataclass(frozen=True)
class RegistrationFailure:
    """A plugin left out of the registry: one of its registration hooks raised, or returned something that is not a
    record of its kind. :meth:`Registry.assemble <accelkit.plugins.Registry.assemble>` returns these; the manager
    records them.

    :param plugin: the plugin object.
    :param error: the exception (a :class:`TypeError` naming the value for a wrong record).
    :param where: the call, as messages name it (as ``HookResult.where`` does).
    :param hook: the hook's name.
    """

    plugin: object
    error: BaseException
    where: str
    hook: str


def _failure_in(contribution: Contribution) -> RegistrationFailure | None:
    """The first hook result of ``contribution`` that takes its plugin out, if any."""
    for result in contribution.results:
        if result.error is not None:
            return RegistrationFailure(contribution.plugin, result.error, result.where, result.hook)
        record_type = _BY_HOOK[result.hook][1]
        for record in result.records:
            if not isinstance(record, record_type):
                return RegistrationFailure(contribution.plugin,
                                           TypeError(f"returned {record!r}, not a {record_type.__name__}"),
                                           result.where, result.hook)
    return None
