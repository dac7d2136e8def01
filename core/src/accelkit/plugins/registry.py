"""The registry of named accelerators, strategies, precisions and cluster environments that every loaded plugin
registered, and the names claimed twice (:class:`Conflict`). Built by :class:`~accelkit.plugins.manager.PluginManager`."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accelkit.errors import PluginConflictError
from accelkit.hookspecs import BLOCK_ENV
from accelkit.records import (
    AcceleratorRecord,
    ClusterEnvironmentRecord,
    PrecisionRecord,
    StrategyRecord,
    lookup_key,
)

if TYPE_CHECKING:
    from accelkit.plugins.manager import PluginManager


def core_plugin_module() -> Any:
    """The module holding the core's own hook implementations (registered last, overridable by any plugin)."""
    from accelkit.plugins import builtin as _builtin

    return _builtin


@dataclass
class Conflict:
    """One name claimed by two plugins, for overlapping accelerators (``None``: any accelerator).

    :param kind: ``"accelerator"``, ``"strategy"`` or ``"precision"``.
    :param name: the name as the second claimant spelt it.
    :param providers: display names of the claimants (:attr:`accelkit.plugins.manager.PluginInfo.provider`).
    :param plugins: their entry-point names (what ``ACCELKIT_BLOCK_PLUGINS`` and ``"no:NAME"`` take); ``""`` for
        plugin objects passed to the Trainer, which are removed from ``plugins=[...]`` instead.
    :param accelerators: where both claims apply (scoped names); ``None`` for accelerators or unscoped claims.
    """

    kind: str
    name: str
    providers: list[str]
    plugins: list[str]
    accelerators: frozenset[str] | None = None

    def covers(self, accelerator: str) -> bool:
        """Whether a run on ``accelerator`` that asks for this name meets the conflict."""
        return self.accelerators is None or accelerator in self.accelerators

    def message(self) -> str:
        """The sentence naming both providers and how to block one of them."""
        claimants = " and ".join(self.providers)
        where = f" on accelerator {', '.join(sorted(self.accelerators))}" if self.accelerators else ""
        blockable = [p for p in self.plugins if p]

        fixes = [f"{BLOCK_ENV}={p} (or Trainer(plugins=['no:{p}']))" for p in blockable]
        if len(blockable) < len(self.plugins):
            fixes.append("remove one of the plugin objects from Trainer(plugins=[...])")
        return f"{self.kind} name {self.name!r}{where} is claimed by both {claimants}; to use it, block one: " + (
            " or ".join(fixes) + (", or uninstall one of them" if blockable else ""))


class _Table(dict):
    """A name table that also remembers the names claimed twice (left out of it, or kept and checked)."""

    def __init__(self) -> None:
        super().__init__()
        self.conflicts: dict[str, list[Conflict]] = {}


class Registry:
    """Every named accelerator, strategy and precision, keyed by name and alias.

    A registration hook that raises takes only its own plugin out (:meth:`PluginManager.mark_failed`); a name
    claimed twice is kept out of the tables and raises :class:`~accelkit.errors.PluginConflictError` when a run
    asks for it (:attr:`conflicts` lists them).
    """

    def __init__(self) -> None:
        self.accelerators: dict[str, AcceleratorRecord] = _Table()
        self.strategies: dict[str, list[StrategyRecord]] = _Table()
        self.precisions: dict[str, list[PrecisionRecord]] = _Table()
        self.cluster_environments: dict[str, ClusterEnvironmentRecord] = _Table()
        #: every name claimed twice
        self.conflicts: list[Conflict] = []
        self._plugin_names: dict[str, str] = {}

    @classmethod
    def build(cls, manager: PluginManager) -> Registry:
        """Call every plugin's registration hooks; a plugin whose hooks raise is marked failed and skipped."""
        hooks = (("accelerator", manager.hook.accelkit_register_accelerators, AcceleratorRecord),
                 ("strategy", manager.hook.accelkit_register_strategies, StrategyRecord),
                 ("precision", manager.hook.accelkit_register_precisions, PrecisionRecord),
                 ("cluster environment", manager.hook.accelkit_register_cluster_environments,
                  ClusterEnvironmentRecord))
        implementing = {id(impl.plugin) for _, hook, _ in hooks for impl in hook.get_hookimpls()}
        # plugins in registration order, so messages are stable
        order = [plugin for _, plugin in manager.list_name_plugin() if id(plugin) in implementing]
        while True:  # a failure unregisters its plugin; start again without it
            registry = cls()
            try:
                for plugin in order:
                    registry._add_plugin(manager, plugin, hooks)
            except HookFailed as failed:
                if failed.plugin is core_plugin_module():
                    raise failed.error from None
                manager.mark_failed(failed.plugin, failed.error, failed.where)
                order = [p for p in order if p is not failed.plugin]
                continue
            break
        for conflict in registry.conflicts:
            warnings.warn(f"{conflict.message()}. Runs that use this name fail until then; others are unaffected.",
                          RuntimeWarning, stacklevel=4)
        return registry

    def _add_plugin(self, manager: PluginManager, plugin: Any, hooks: Any) -> None:
        collected = []
        for kind, hook, record_type in hooks:
            for impl in hook.get_hookimpls():
                if impl.plugin is not plugin:
                    continue
                where = f"{impl.plugin_name}.{hook.name}()"
                try:
                    records = list(impl.function() or [])
                except Exception as exc:  # noqa: BLE001 - the plugin is taken out, the others keep working
                    raise HookFailed(plugin, exc, where) from None
                for record in records:
                    if not isinstance(record, record_type):
                        raise HookFailed(plugin, TypeError(f"returned {record!r}, not a {record_type.__name__}"),
                                          where)
                collected.extend((kind, record) for record in records)
        info = manager.info_of(plugin)
        provider = manager.provider_of(plugin)
        for kind, record in collected:
            object.__setattr__(record, "provider", provider)
            # what ACCELKIT_BLOCK_PLUGINS takes: entry-point names only (objects passed to the Trainer are removed)
            self._plugin_names[provider] = info.name if info is not None and info.distribution else ""
            if kind == "accelerator":
                self._add_named(kind, self.accelerators, record, record.names)
            elif kind == "cluster environment":
                self._add_named(kind, self.cluster_environments, record, (record.name,))
            else:
                self._add_scoped(kind, self.strategies if kind == "strategy" else self.precisions, record)

    def _conflict(self, kind: str, name: str, providers: list[str], accelerators: Any = None) -> Conflict:
        conflict = Conflict(kind, name, providers, [self._plugin_names.get(p, "") for p in providers],
                            None if accelerators is None else frozenset(accelerators))
        self.conflicts.append(conflict)
        return conflict

    def _add_named(self, kind: str, table: Any, record: Any, names: Iterable[str]) -> None:
        for name in names:
            key = lookup_key(name)
            if key in table.conflicts:  # a third claimant joins the conflict
                table.conflicts[key][0].providers.append(record.provider)
                table.conflicts[key][0].plugins.append(self._plugin_names.get(record.provider, ""))
            elif key in table and table[key] is not record:
                table.conflicts[key] = [self._conflict(kind, name, [table.pop(key).provider, record.provider])]
            else:
                table[key] = record

    def _add_scoped(self, kind: str, table: Any, record: StrategyRecord) -> None:
        for name in record.names:
            key = lookup_key(name)
            if any(other is record for other in table.get(key, [])):
                continue  # a name and an alias that differ only in spelling ("bf16-true"/"bf16_true")
            for other in table.get(key, []):
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

    def strategy_names(self, accelerator: str | None = None) -> list[str]:
        """Canonical strategy names, for one accelerator or all."""
        return sorted({r.name for rs in self.strategies.values() for r in rs
                       if accelerator is None or r.runs_on(accelerator)})

    def precision_names(self, accelerator: str | None = None) -> list[str]:
        """Canonical precision names, for one accelerator or all."""
        return sorted({r.name for rs in self.precisions.values() for r in rs
                       if accelerator is None or r.runs_on(accelerator)})

    def cluster_environment_names(self) -> list[str]:
        """Registered cluster environment names, in detection order (highest priority first, ties by name)."""
        records = sorted(self.cluster_environments.values(), key=lambda r: (-r.priority, r.name))
        return [r.name for r in records]

    @staticmethod
    def find_scoped(table: dict[str, list[Any]], name: str, accelerator: str) -> Any:
        """The record registered under ``name`` for ``accelerator``, or ``None``; a
        :class:`~accelkit.errors.PluginConflictError` if two plugins claim that name there."""
        for conflict in getattr(table, "conflicts", {}).get(lookup_key(name), []):
            if conflict.covers(accelerator):
                raise PluginConflictError(f"{conflict.message()}.")
        for record in table.get(lookup_key(name), []):
            if record.runs_on(accelerator):
                return record
        return None

    def precision_name(self, precision: Any) -> str:
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


def _same_option(value: Any, option: Any) -> bool:
    if isinstance(option, str) and not isinstance(value, str):  # dtype options are spelt "float64"
        return str(value).removeprefix("torch.") == option
    return bool(value == option)


class HookFailed(Exception):
    def __init__(self, plugin: Any, error: BaseException, where: str) -> None:
        super().__init__(where)
        self.plugin, self.error, self.where = plugin, error, where
