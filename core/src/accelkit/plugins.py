"""Plugin discovery and the registry of named accelerators, strategies and precisions.

Installed plugins announce themselves in the ``accelkit`` entry-point group::

    [project.entry-points.accelkit]
    cpu = "accelkit_cpu.plugin"

The object an entry point names (usually a module) carries :data:`accelkit.hookimpl` functions and an
``ACCELKIT_API`` string: the range of :data:`accelkit.hookspecs.HOOK_API_VERSION` it supports.

* A plugin that fails to import is recorded with its exception and skipped. The error surfaces only when
  the user asks for a name it could have provided.
* ``ACCELKIT_DISABLE_PLUGIN_AUTOLOAD=1`` turns entry-point discovery off; ``ACCELKIT_BLOCK_PLUGINS=a,b`` and
  ``Trainer(plugins=["no:a"])`` block plugins by entry-point name.
* A name claimed by two distributions is a :class:`~accelkit.errors.PluginConflictError` naming both.
"""

from __future__ import annotations

import difflib
import importlib.metadata as importlib_metadata
import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable

import pluggy
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from accelkit import hookspecs
from accelkit.errors import PluginConflictError, PluginError
from accelkit.records import (
    AcceleratorRecord,
    ClusterEnvironmentRecord,
    PrecisionRecord,
    StrategyRecord,
    lookup_key,
)

ENTRY_POINT_GROUP = "accelkit"
DISABLE_AUTOLOAD_ENV = "ACCELKIT_DISABLE_PLUGIN_AUTOLOAD"
BLOCK_ENV = "ACCELKIT_BLOCK_PLUGINS"

#: statuses a :class:`PluginInfo` can have
LOADED, FAILED, BLOCKED, INCOMPATIBLE = "loaded", "failed", "blocked", "incompatible"


@dataclass
class PluginInfo:
    """What is known about one plugin: where it came from and whether it loaded.

    :param name: the entry-point name (or a name derived from the object for plugins passed directly).
    :param distribution: the distribution that declared it (``""`` for objects passed to the Trainer).
    :param version: that distribution's version.
    :param status: ``"loaded"``, ``"failed"``, ``"blocked"`` or ``"incompatible"``.
    :param reason: why it is not loaded, for the other statuses.
    :param error: the original exception, for ``"failed"``.
    :param hooks: the hook names it implements (loaded plugins).
    :param plugin: the plugin object itself (loaded plugins).
    """

    name: str
    distribution: str = ""
    version: str = ""
    status: str = LOADED
    reason: str = ""
    error: BaseException | None = None
    hooks: list[str] = field(default_factory=list)
    plugin: Any = None
    api: str = ""

    @property
    def provider(self) -> str:
        """How this plugin is named in messages: ``"accelkit-cpu 0.1.0"`` or the plugin name."""
        return f"{self.distribution} {self.version}".strip() if self.distribution else f"plugin {self.name!r}"


def _blocked_from_env() -> set[str]:
    return {lookup_key(n) for n in os.environ.get(BLOCK_ENV, "").split(",") if n.strip()}


class PluginManager(pluggy.PluginManager):
    """pluggy's manager with accelkit's discovery, blocking and API-version checks.

    :param blocked: entry-point names not to load (added to those in ``ACCELKIT_BLOCK_PLUGINS``).
    :param autoload: discover installed plugins (default: unless ``ACCELKIT_DISABLE_PLUGIN_AUTOLOAD`` is set).
    """

    def __init__(self, blocked: Iterable[str] = (), autoload: bool | None = None) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        self.blocked = _blocked_from_env() | {lookup_key(b) for b in blocked}
        self.infos: dict[str, PluginInfo] = {}
        self._registry: Registry | None = None
        from accelkit import _builtin

        self.register(_builtin, name="accelkit-core")
        self.hook.accelkit_configure.call_historic(kwargs={"manager": self})
        if autoload is None:
            autoload = os.environ.get(DISABLE_AUTOLOAD_ENV, "").strip().lower() not in ("1", "true", "yes")
        #: whether installed plugins were discovered through entry points
        self.autoload = bool(autoload)
        if autoload:
            self.load_entrypoints()

    # ----------------------------------------------------------------- discovery
    def load_entrypoints(self) -> None:
        """Load every plugin of the ``accelkit`` entry-point group, recording failures instead of raising."""
        entry_points = sorted(importlib_metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)
        unknown = sorted(self.blocked - {lookup_key(ep.name) for ep in entry_points})
        if unknown:
            installed = ", ".join(ep.name for ep in entry_points) or "none"
            warnings.warn(f"blocked plugin name(s) {', '.join(map(repr, unknown))} match no installed plugin "
                          f"(installed: {installed}); check the spelling in {BLOCK_ENV} or 'no:NAME'.",
                          RuntimeWarning, stacklevel=3)
        for ep in entry_points:
            dist = getattr(ep, "dist", None)
            info = PluginInfo(
                name=ep.name,
                distribution=dist.metadata["Name"] if dist is not None else "",
                version=dist.version if dist is not None else "",
            )
            if lookup_key(ep.name) in self.infos or ep.name in self.infos:
                continue
            self.infos[ep.name] = info
            if lookup_key(ep.name) in self.blocked:
                info.status, info.reason = BLOCKED, f"blocked by {BLOCK_ENV} or 'no:{ep.name}'"
                continue
            try:
                plugin = ep.load()
            except Exception as exc:  # a broken plugin must not take the tool down
                info.status, info.error = FAILED, exc
                info.reason = f"{type(exc).__name__}: {exc}"
                warnings.warn(f"accelkit plugin {ep.name!r} ({info.provider}) failed to load and is skipped: "
                              f"{info.reason}", RuntimeWarning, stacklevel=2)
                continue
            self._register_checked(plugin, info)

    def add_plugin(self, plugin: Any, name: str | None = None) -> PluginInfo:
        """Register a plugin object passed by the user (``Trainer(plugins=[obj])``)."""
        name = name or getattr(plugin, "__name__", None) or type(plugin).__name__
        existing = self.get_plugin(name)
        if existing is plugin:
            return self.infos[name]
        info = PluginInfo(name=name)
        self.infos[name] = info
        self._register_checked(plugin, info)
        if info.status == FAILED and info.error is not None:
            raise PluginError(f"plugin {name!r} could not be registered: {info.reason}") from info.error
        if info.status == INCOMPATIBLE:
            raise PluginError(f"plugin {name!r} is incompatible: {info.reason}")
        return info

    def _register_checked(self, plugin: Any, info: PluginInfo) -> None:
        declared = getattr(plugin, "ACCELKIT_API", None)
        info.api = declared or ""
        if declared is None:
            info.status = INCOMPATIBLE
            info.reason = (f"declares no ACCELKIT_API; add e.g. ACCELKIT_API = \">={hookspecs.HOOK_API_VERSION},<2\" "
                           "to the plugin module")
            return
        try:
            supported = SpecifierSet(declared)
        except InvalidSpecifier:
            info.status, info.reason = INCOMPATIBLE, f"ACCELKIT_API={declared!r} is not a valid version specifier"
            return
        if Version(hookspecs.HOOK_API_VERSION) not in supported:
            info.status = INCOMPATIBLE
            info.reason = (f"supports hook API {declared} but this accelkit provides {hookspecs.HOOK_API_VERSION}; "
                           f"upgrade {info.distribution or info.name} or accelkit")
            return
        try:
            self.register(plugin, name=info.name)
        except Exception as exc:  # pluggy validates hook names and signatures here
            info.status, info.error, info.reason = FAILED, exc, f"{type(exc).__name__}: {exc}"
            return
        # pluggy accepts an implementation without a specification (it stays "pending"): a misspelt name
        unknown = sorted(c.name for c in (self.get_hookcallers(plugin) or []) if not c.has_spec())
        if unknown:
            self.unregister(plugin)
            known = sorted(n for n in vars(hookspecs) if n.startswith(f"{hookspecs.PROJECT_NAME}_"))
            error = PluginError("; ".join(f"{n!r} is not an accelkit hook.{suggest(n, known)}" for n in unknown)
                                + f" Hooks: {', '.join(known)}.")
            info.status, info.error, info.reason = FAILED, error, f"PluginError: {error}"
            return
        info.status, info.plugin = LOADED, plugin
        info.hooks = sorted(h.name for h in (self.get_hookcallers(plugin) or []))
        self._registry = None

    # ----------------------------------------------------------------- the registry
    @property
    def registry(self) -> Registry:
        """The named implementations of all loaded plugins (built once, rebuilt after a registration)."""
        if self._registry is None:
            self._registry = Registry.build(self)
        return self._registry

    def provider_of(self, plugin: Any) -> str:
        """The display name of the distribution or plugin behind ``plugin``."""
        for info in self.infos.values():
            if info.plugin is plugin:
                return info.provider
        return "accelkit (core)" if plugin is _core_module() else repr(plugin)

    def failures(self) -> list[PluginInfo]:
        """Plugins that failed to load."""
        return [i for i in self.infos.values() if i.status == FAILED]


def _core_module() -> Any:
    from accelkit import _builtin

    return _builtin


class Registry:
    """Every named accelerator, strategy, precision and cluster environment, keyed by name (and alias)."""

    def __init__(self) -> None:
        self.accelerators: dict[str, AcceleratorRecord] = {}
        self.strategies: dict[str, list[StrategyRecord]] = {}
        self.precisions: dict[str, list[PrecisionRecord]] = {}
        self.cluster_environments: dict[str, ClusterEnvironmentRecord] = {}

    @classmethod
    def build(cls, manager: PluginManager) -> Registry:
        registry = cls()
        conflicts: list[str] = []
        kinds = (
            ("accelerator", manager.hook.accelkit_register_accelerators, registry._add_accelerator),
            ("strategy", manager.hook.accelkit_register_strategies, registry._add_scoped(registry.strategies)),
            ("precision", manager.hook.accelkit_register_precisions, registry._add_scoped(registry.precisions)),
            ("cluster environment", manager.hook.accelkit_register_cluster_environments,
             registry._add_cluster_environment),
        )
        for kind, hook, add in kinds:
            for impl in reversed(hook.get_hookimpls()):  # registration order, so messages are stable
                for record in impl.function() or []:
                    provider = manager.provider_of(impl.plugin)
                    object.__setattr__(record, "provider", provider)
                    clash = add(record)
                    if clash is not None:
                        conflicts.append(
                            f"{kind} name {clash[0]!r} is claimed by both {clash[1]} and {provider}; uninstall one "
                            f"of them or block one with {BLOCK_ENV}"
                        )
        if conflicts:
            raise PluginConflictError("; ".join(conflicts))
        return registry

    def _add_accelerator(self, record: AcceleratorRecord) -> tuple[str, str] | None:
        for name in record.names:
            key = lookup_key(name)
            if key in self.accelerators and self.accelerators[key] is not record:
                return name, self.accelerators[key].provider
            self.accelerators[key] = record
        return None

    def _add_cluster_environment(self, record: ClusterEnvironmentRecord) -> tuple[str, str] | None:
        key = lookup_key(record.name)
        if key in self.cluster_environments and self.cluster_environments[key] is not record:
            return record.name, self.cluster_environments[key].provider
        self.cluster_environments[key] = record
        return None

    @staticmethod
    def _add_scoped(table: dict[str, list[Any]]) -> Any:
        def add(record: StrategyRecord) -> tuple[str, str] | None:
            for name in record.names:
                key = lookup_key(name)
                if any(other is record for other in table.get(key, [])):
                    continue  # a name and an alias that differ only in spelling ("bf16-true"/"bf16_true")
                for other in table.get(key, []):
                    if other.accelerators is None or record.accelerators is None or (
                        set(other.accelerators) & set(record.accelerators)
                    ):
                        return name, other.provider
                table.setdefault(key, []).append(record)
            return None

        return add

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
        """The record registered under ``name`` for ``accelerator``, or ``None``."""
        for record in table.get(lookup_key(name), []):
            if record.runs_on(accelerator):
                return record
        return None


def suggest(name: str, choices: Iterable[str]) -> str:
    """``" Did you mean 'x'?"`` for the closest choice, or ``""``."""
    close = difflib.get_close_matches(str(name).lower(), list(choices), n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""
