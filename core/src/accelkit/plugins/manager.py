"""Plugin discovery: finding, checking and loading plugins; the records they register are kept in the one
:class:`~accelkit.plugins.registry.Registry`.

Installed plugins announce themselves in the ``accelkit`` entry-point group::

    [project.entry-points.accelkit]
    cpu = "accelkit_cpu.plugin"

The object an entry point names (usually a module) carries :data:`accelkit.hookimpl` functions and an
``ACCELKIT_API`` string: the range of :data:`accelkit.hookspecs.HOOK_API_VERSION` it supports.

* A plugin that fails to import is recorded with its exception and skipped. The error surfaces only when
  the user asks for a name it could have provided.
* ``ACCELKIT_DISABLE_PLUGIN_AUTOLOAD=1`` turns entry-point discovery off; ``ACCELKIT_BLOCK_PLUGINS=a,b`` and
  ``Trainer(plugins=["no:a"])`` block plugins by entry-point name (pluggy's own blocking: ``set_blocked``).
* Two distributions whose entry points share a name: the first found on ``sys.path`` loads, the other is listed
  as ``duplicate`` (``accelkit plugins``, ``accelkit doctor``) and a warning names both distributions.
* A plugin whose ``accelkit_register_*`` (or ``accelkit_configure``) implementation raises is marked ``failed``
  with its exception and unregistered; every other plugin keeps working (``accelkit plugins``/``doctor`` list it).
* A name claimed by two plugins fails only the runs that ask for that name, with a
  :class:`~accelkit.errors.PluginConflictError` naming both providers and the value that blocks one.
* A function named like a hook but without ``@accelkit.hookimpl`` is ignored by pluggy: registration warns.
* A plugin may name distributions that provide names it does not (install hints): a module attribute
  ``ACCELKIT_INSTALL_HINTS = {"accelerators": {"npu": "acme-npu"}}`` (sections ``accelerators``, ``strategies``,
  ``precisions``), read only from loaded plugins and used only to word "not available" errors.
"""

from __future__ import annotations

import importlib
import importlib.metadata as importlib_metadata
import inspect
import os
import sys
import types
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast

import pluggy
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from accelkit import hookspecs
from accelkit.errors import PluginError
from accelkit.hookspecs import BLOCK_ENV, DISABLE_AUTOLOAD_ENV, ENTRY_POINT_GROUP, PREFER_ENV
from accelkit.plugins.legacy_commands import commands_of
from accelkit.plugins.registry import (
    CORE_PROVIDER,
    KINDS,
    Contribution,
    HookResult,
    Registry,
    core_plugin_module,
    suggest,
)
from accelkit.records import lookup_key

#: statuses a :class:`PluginInfo` can have (``"duplicate"``: an entry point whose name another distribution's
#: entry point already took; it is not loaded; ``"unregistered"``: a plugin that loaded and was later taken out with
#: :meth:`PluginManager.unregister`)
LOADED, FAILED, BLOCKED, INCOMPATIBLE, DUPLICATE = "loaded", "failed", "blocked", "incompatible", "duplicate"
UNREGISTERED = "unregistered"
#: the statuses the manager records on a :class:`PluginInfo`; ``"loaded"``, ``"blocked"`` and ``"unregistered"``
#: are read from pluggy (whether the plugin is registered, whether its name is blocked)
RECORDED = (FAILED, INCOMPATIBLE, DUPLICATE)


class PluginInfo:
    """What is known about one plugin: where it came from and whether it loaded.

    A plugin's status has one home. Whether it is loaded or blocked is pluggy's (``PluginManager.is_registered`` /
    ``is_blocked``): for an info the manager keeps, :attr:`status`, :attr:`plugin`, :attr:`hooks` and
    :attr:`reason` are read from pluggy at each access, so a plugin registered, unregistered, blocked or unblocked
    through the manager is reported as it now is. Why a plugin did not load (``"failed"``, ``"incompatible"``,
    ``"duplicate"``), which pluggy does not know, is recorded here. An info built by hand, outside a manager,
    reports what it was given.

    :param name: the entry-point name (or a name derived from the object for plugins passed directly).
    :param distribution: the distribution that declared it (``""`` for objects passed to the Trainer).
    :param version: that distribution's version.
    :param status: ``"loaded"``, ``"failed"``, ``"blocked"``, ``"incompatible"``, ``"duplicate"`` or
        ``"unregistered"``.
    :param reason: why it is not loaded, for the other statuses.
    :param error: the original exception, for ``"failed"``.
    :param hooks: the hook names it implements (loaded plugins).
    :param plugin: the plugin object itself (loaded plugins).
    :param api: the ``ACCELKIT_API`` it declares.
    :param failed_in: where a ``"failed"`` plugin failed: ``"import"`` (its entry point did not import),
        ``"registration"`` (pluggy refused it: a misspelt hook, a wrong argument name) or the name of the hook that
        raised (``"accelkit_register_commands"``, ``"accelkit_configure"``...).
    :param preferred: for a plugin loaded instead of another distribution's entry point of the same name: the
        setting that chose it.
    """

    name: str
    distribution: str = ""
    version: str = ""
    error: BaseException | None = None
    api: str = ""
    failed_in: str = ""
    preferred: str = ""

    def __init__(self, name: str, distribution: str = "", version: str = "", status: str = LOADED, reason: str = "",
                 error: BaseException | None = None, hooks: list[str] | None = None, plugin: object = None,
                 api: str = "", failed_in: str = "", preferred: str = "") -> None:
        self.name, self.distribution, self.version = name, distribution, version
        self.error, self.api, self.failed_in, self.preferred = error, api, failed_in, preferred
        self._status, self._reason, self._hooks, self._plugin = status, reason, list(hooks or []), plugin
        #: the manager whose pluggy state this info reads (``None``: an info built by hand reports what it was given)
        self._manager: PluginManager | None = None

    def __repr__(self) -> str:
        return (f"PluginInfo(name={self.name!r}, distribution={self.distribution!r}, version={self.version!r}, "
                f"status={self.status!r}, reason={self.reason!r})")

    @property
    def status(self) -> str:
        """``"loaded"`` while registered with its manager, ``"blocked"`` while its name is blocked there,
        ``"unregistered"`` once taken out with ``unregister``; else the status recorded when it did not load."""
        manager = self._manager
        if manager is None or self._status == DUPLICATE:  # a duplicate's name is the other distribution's
            return self._status
        if manager.get_plugin(self.name) is not None:
            return LOADED
        if self._status in RECORDED:
            return self._status
        return BLOCKED if manager.is_blocked(self.name) else UNREGISTERED

    @status.setter
    def status(self, value: str) -> None:
        """Record why the plugin did not load (the manager records ``"failed"``, ``"incompatible"`` or
        ``"duplicate"``; the other statuses follow pluggy)."""
        self._status = value

    @property
    def reason(self) -> str:
        """Why it is not loaded (``""`` for a loaded plugin)."""
        status = self.status
        if self._manager is None or status in RECORDED:
            return self._reason
        if status == BLOCKED:
            return f"blocked by {BLOCK_ENV} or 'no:{self.name}'"
        if status == UNREGISTERED:
            return "taken out with PluginManager.unregister() after it loaded"
        return ""

    @reason.setter
    def reason(self, value: str) -> None:
        """Record why the plugin did not load."""
        self._reason = value

    @property
    def plugin(self) -> object:
        """The plugin object, while it is loaded (``None`` otherwise)."""
        if self._manager is None:
            return self._plugin
        return self._manager.get_plugin(self.name) if self.status == LOADED else None

    @property
    def hooks(self) -> list[str]:
        """The names of the hooks it implements, while it is loaded."""
        plugin = self.plugin
        if self._manager is None or plugin is None:
            return self._hooks
        return sorted(h.name for h in (self._manager.get_hookcallers(plugin) or []))

    @property
    def provider(self) -> str:
        """How this plugin is named in messages: ``"accelkit-cpu 0.1.0"`` or the plugin name."""
        return f"{self.distribution} {self.version}".strip() if self.distribution else f"plugin {self.name!r}"


def _blocked_from_env() -> set[str]:
    return {lookup_key(n) for n in os.environ.get(BLOCK_ENV, "").split(",") if n.strip()}


def parse_preferences(text: str) -> dict[str, str]:
    """``"dup=acme-two, mpi=acme-mpi"`` (the form of ``ACCELKIT_PREFER``) -> ``{"dup": "acme_two", "mpi":
    "acme_mpi"}``, both sides in :func:`~accelkit.records.lookup_key` form.

    :raise PluginError: for an item that is not ``NAME=DISTRIBUTION``.
    """
    preferences = {}
    for item in (i.strip() for i in text.split(",")):
        name, sep, dist = (part.strip() for part in item.partition("="))
        if not item:
            continue
        if not (sep and name and dist):
            raise PluginError(f"{PREFER_ENV} item {item!r} is not NAME=DISTRIBUTION: write e.g. "
                              f"{PREFER_ENV}=\"mpi=acme-mpi\" to load acme-mpi's plugin named 'mpi'")
        preferences[lookup_key(name)] = lookup_key(dist)
    return preferences


class PluginManager(pluggy.PluginManager):
    """pluggy's manager with accelkit's discovery, blocking and API-version checks.

    :param blocked: entry-point names not to load (added to those in ``ACCELKIT_BLOCK_PLUGINS``).
    :param autoload: discover installed plugins (default: unless ``ACCELKIT_DISABLE_PLUGIN_AUTOLOAD`` is set).
    :param prefer: entry-point name -> the distribution whose entry point of that name loads when several
        distributions have one (added to, and overriding, those of ``ACCELKIT_PREFER``).
    """

    def __init__(self, blocked: Iterable[str] = (), autoload: bool | None = None,
                 prefer: dict[str, str] | None = None) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        #: entry-point name -> preferred distribution (:func:`~accelkit.records.lookup_key` form)
        self.preferences = {**parse_preferences(os.environ.get(PREFER_ENV, "")),
                            **{lookup_key(n): lookup_key(d) for n, d in (prefer or {}).items()}}
        self.add_hookspecs(hookspecs)
        #: the registry, built at the first look-up; registering, unregistering, blocking or unblocking a plugin
        #: drops it (:meth:`register`, :meth:`unregister`, :meth:`set_blocked`, :meth:`unblock`)
        self._registry: Registry | None = None
        for name in sorted(_blocked_from_env() | {lookup_key(b) for b in blocked}):
            self.set_blocked(name)  # pluggy's own blocking: a plugin of that name is never registered
        self.infos: dict[str, PluginInfo] = {}
        from accelkit.plugins import builtin as _builtin

        self.register(_builtin, name="accelkit-core")
        self.register(_Diagnostics(self), name="accelkit-core-diagnostics")
        self.hook.accelkit_configure.call_historic(kwargs={"manager": self})
        if autoload is None:
            autoload = os.environ.get(DISABLE_AUTOLOAD_ENV, "").strip().lower() not in ("1", "true", "yes")
        #: whether installed plugins were discovered through entry points
        self.autoload = bool(autoload)
        if autoload:
            self.load_entrypoints()
            # registration hooks run now, so a plugin whose hook raises is "failed" in every listing from the start
            self.registry  # noqa: B018

    # ----------------------------------------------------------------- pluggy's state, which the registry follows
    def register(self, plugin: object, name: str | None = None) -> str | None:
        """pluggy's ``register``; the next registry look-up sees the plugin (the cached registry is dropped)."""
        try:
            return super().register(plugin, name)
        finally:
            self._registry = None

    def unregister(self, plugin: object | None = None, name: str | None = None) -> object | None:
        """pluggy's ``unregister``; the next registry look-up no longer sees the plugin."""
        try:
            return super().unregister(plugin, name)
        finally:
            self._registry = None

    def set_blocked(self, name: str) -> None:
        """pluggy's ``set_blocked`` (unregisters a plugin of that name and refuses it from now on); the next registry
        look-up no longer sees it."""
        try:
            super().set_blocked(name)
        finally:
            self._registry = None

    def unblock(self, name: str) -> bool:
        """pluggy's ``unblock`` (a plugin of that name may be registered again); the registry is dropped too."""
        try:
            return super().unblock(name)
        finally:
            self._registry = None

    def _info(self, name: str, distribution: str = "", version: str = "") -> PluginInfo:
        """A :class:`PluginInfo` whose loaded/blocked status is read from this manager's pluggy state."""
        info = PluginInfo(name, distribution, version)
        info._manager = self
        return info

    @property
    def blocked(self) -> set[str]:
        """The blocked plugin names (:func:`~accelkit.records.lookup_key` form), as pluggy holds them
        (``set_blocked()``): those of ``ACCELKIT_BLOCK_PLUGINS`` and the ``blocked`` argument."""
        return {name for name, plugin in self.list_name_plugin() if plugin is None}

    def is_blocked(self, name: str) -> bool:
        """Whether plugin ``name`` is blocked; names compare as :func:`~accelkit.records.lookup_key` does."""
        return super().is_blocked(lookup_key(name)) or super().is_blocked(name)

    # ----------------------------------------------------------------- discovery
    def load_entrypoints(self) -> None:
        """Load every plugin of the ``accelkit`` entry-point group, recording failures instead of raising."""
        entry_points = sorted(importlib_metadata.entry_points(group=ENTRY_POINT_GROUP),
                              key=lambda e: (e.name, not self._is_preferred(e)))  # stable: then sys.path order
        self._check_preferences(entry_points)
        unknown = sorted(self.blocked - {lookup_key(ep.name) for ep in entry_points})
        if unknown:
            installed = ", ".join(ep.name for ep in entry_points) or "none"
            warnings.warn(f"blocked plugin name(s) {', '.join(map(repr, unknown))} match no installed plugin "
                          f"(installed: {installed}); check the spelling in {BLOCK_ENV} or 'no:NAME'.",
                          RuntimeWarning, stacklevel=3)
        for ep in entry_points:
            dist = getattr(ep, "dist", None)
            info = self._info(
                ep.name,
                distribution=dist.metadata["Name"] if dist is not None else "",
                version=dist.version if dist is not None else "",
            )
            taken = self._holder_of(ep.name)
            if taken is not None:
                self._record_duplicate(info, taken)
                continue
            self.infos[ep.name] = info
            if self.is_blocked(ep.name):  # its status reads "blocked" from pluggy
                continue
            try:
                plugin = ep.load()
            except Exception as exc:  # noqa: BLE001 - a broken plugin must not take the tool down
                info.status, info.error, info.failed_in = FAILED, exc, "import"
                info.reason = f"{type(exc).__name__}: {exc}"
                warnings.warn(f"accelkit plugin {ep.name!r} ({info.provider}) failed to load and is skipped: "
                              f"{info.reason}", RuntimeWarning, stacklevel=2)
                continue
            self._register_checked(plugin, info)

    def _is_preferred(self, ep: importlib_metadata.EntryPoint) -> bool:
        dist = getattr(ep, "dist", None)
        wanted = self.preferences.get(lookup_key(ep.name))
        return wanted is not None and dist is not None and lookup_key(dist.metadata["Name"]) == wanted

    def _check_preferences(self, entry_points: list[importlib_metadata.EntryPoint]) -> None:
        """Warn about a preference that matches no installed entry point of that name (nothing silently ignored)."""
        for name, wanted in sorted(self.preferences.items()):
            offered = sorted({dist.metadata["Name"] for ep in entry_points
                              if lookup_key(ep.name) == name and (dist := getattr(ep, "dist", None)) is not None})
            if not any(lookup_key(d) == wanted for d in offered):
                found = f"that name is provided by {', '.join(offered)}" if offered else \
                    "no installed plugin has that name"
                warnings.warn(f"{PREFER_ENV} prefers distribution {wanted!r} for plugin name {name!r}, but {found}"
                              "; check the spelling (NAME=DISTRIBUTION, as `accelkit plugins` lists them).",
                              RuntimeWarning, stacklevel=4)

    def _holder_of(self, name: str) -> PluginInfo | None:
        """The entry point already found under ``name`` (compared as :func:`~accelkit.records.lookup_key`)."""
        for info in self.infos.values():
            if info.distribution and info.status != DUPLICATE and lookup_key(info.name) == lookup_key(name):
                return info
        return None

    def _record_duplicate(self, info: PluginInfo, taken: PluginInfo) -> None:
        """A second distribution's entry point under a name already taken: listed as ``duplicate``, not loaded."""
        if (info.distribution, info.version) == (taken.distribution, taken.version):
            return  # the same distribution seen twice on sys.path
        number = 2
        while f"{info.name}#{number}" in self.infos:
            number += 1
        info.status = DUPLICATE
        self.infos[f"{info.name}#{number}"] = info
        if lookup_key(info.name) in self.preferences and taken.status != DUPLICATE and self._chosen(taken):
            taken.preferred = f"{PREFER_ENV}={info.name}={taken.distribution}"
            info.reason = (f"entry-point name {info.name!r} is also provided by {taken.provider}, which "
                           f"{taken.preferred} chose; {info.provider}'s plugin is not loaded")
            return
        info.reason = (f"entry-point name {info.name!r} is already taken by {taken.provider}, found first on sys.path; "
                       f"{info.provider}'s plugin is not loaded. Uninstall one of them "
                       f"(`pip uninstall {info.distribution}`), choose one with {PREFER_ENV}={info.name}=DISTRIBUTION, "
                       "or ask one author to rename the entry point")
        warnings.warn(f"accelkit plugin {info.name!r}: two distributions use this entry-point name, {taken.provider} "
                      f"and {info.provider}; only {taken.provider}'s is loaded. Choose one with "
                      f"{PREFER_ENV}={info.name}=DISTRIBUTION, uninstall one of them, or ask one author to rename the "
                      "entry point.", RuntimeWarning, stacklevel=3)

    def _chosen(self, info: PluginInfo) -> bool:
        """Whether ``info``'s distribution is the one preferred for its entry-point name."""
        return self.preferences.get(lookup_key(info.name)) == lookup_key(info.distribution)

    def add_plugin(self, plugin: object, name: str | None = None) -> PluginInfo:
        """Register a plugin object passed by the user (``Trainer(plugins=[obj])``)."""
        if plugin is None or isinstance(plugin, (bool, int, float, complex, str, bytes)):
            raise TypeError(f"{plugin!r} is not a plugin: pass a module or object carrying @accelkit.hookimpl "
                            "functions (and an ACCELKIT_API string)")
        registered = self.get_name(plugin)  # None for a plugin not registered yet
        if registered is not None:  # the same module found through its entry point, or passed twice
            return self.infos.get(registered) or self._info(registered)
        name = name or getattr(plugin, "__name__", None) or type(plugin).__name__
        base, number = name, 1
        while self.has_plugin(name) or name in self.infos:  # two instances of one plugin class
            number += 1
            name = f"{base}#{number}"
        info = self._info(name)
        self.infos[name] = info
        self._register_checked(plugin, info)
        if info.status == FAILED and info.error is not None:
            raise PluginError(f"plugin {name!r} could not be registered: {info.reason}") from info.error
        if info.status == INCOMPATIBLE:
            raise PluginError(f"plugin {name!r} is incompatible: {info.reason}")
        return info

    def _register_checked(self, plugin: object, info: PluginInfo) -> None:
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
            info.status, info.reason = INCOMPATIBLE, incompatibility(info, declared)
            return
        _warn_unmarked(self, plugin, info)
        try:
            registered = self.register(plugin, name=info.name)
        except Exception as exc:  # noqa: BLE001 - pluggy checks names and signatures; accelkit_configure runs
            if self.is_registered(plugin):  # a historic hook raised after pluggy had registered the plugin
                self.unregister(plugin)
            info.status, info.error, info.reason = FAILED, exc, f"{type(exc).__name__}: {exc}"
            info.failed_in = "registration" if isinstance(exc, pluggy.PluginValidationError) else "accelkit_configure"
            return
        if registered is None:  # pluggy refuses a blocked name; the info's status reads "blocked" from pluggy
            return
        # pluggy accepts an implementation without a specification (it stays "pending"): a misspelt name
        unknown = sorted(c.name for c in (self.get_hookcallers(plugin) or []) if not c.has_spec())
        if unknown:
            self.unregister(plugin)
            known = sorted(n for n in vars(hookspecs) if n.startswith(f"{hookspecs.PROJECT_NAME}_"))
            error = PluginError("; ".join(f"{n!r} is not an accelkit hook.{suggest(n, known)}" for n in unknown)
                                + f" Hooks: {', '.join(known)}.")
            info.status, info.error, info.reason = FAILED, error, f"PluginError: {error}"
            info.failed_in = "registration"

    # ----------------------------------------------------------------- the registry
    @property
    def registry(self) -> Registry:
        """The named implementations of all loaded plugins: built at the first look-up, built again at the next
        look-up after a plugin is registered, unregistered, blocked or unblocked."""
        if self._registry is None:
            self._registry = self._build_registry()
        return self._registry

    def _build_registry(self) -> Registry:
        """Hand the registry every plugin's registration results; record the plugins it leaves out as failed and
        warn about the names claimed twice."""
        registry, failures = Registry.assemble(self._contributions())
        for failure in failures:
            if failure.plugin is core_plugin_module():
                raise failure.error from None
        for failure in failures:
            self.mark_failed(failure.plugin, failure.error, failure.where, failure.hook)
        for conflict in registry.conflicts:
            consequence = "" if conflict.kept else " Runs that use this name fail until then; others are unaffected."
            warnings.warn(f"{conflict.message()}.{consequence}", RuntimeWarning, stacklevel=4)
        return registry

    def _contributions(self) -> list[Contribution]:
        """What each registered plugin gives the registry, in registration order (so messages are stable)."""
        callers = [getattr(self.hook, hook) for _, hook, *_ in KINDS]
        contributions = []
        for name, plugin in self.list_name_plugin():
            if plugin is None:
                continue
            results = _registration_results(plugin, callers)
            legacy = commands_of(plugin) if plugin is not core_plugin_module() else []  # deprecated in hook API 1.2
            if legacy:
                results.append(HookResult("accelkit_register_commands", f"{name}: accelkit.cli.command",
                                          tuple(legacy)))
            if results:
                info = self.info_of(plugin)
                blockable = info.name if info is not None and info.distribution else ""
                contributions.append(Contribution(plugin, name, self.provider_of(plugin), blockable, tuple(results)))
        return contributions

    def provider_of(self, plugin: object) -> str:
        """The display name of the distribution or plugin behind ``plugin``."""
        info = self.info_of(plugin)
        if info is not None:
            return info.provider
        return CORE_PROVIDER if plugin is core_plugin_module() else repr(plugin)

    def duplicates(self) -> list[PluginInfo]:
        """Entry points not loaded because another distribution's entry point has the same name."""
        return [i for i in self.infos.values() if i.status == DUPLICATE]

    def failures(self) -> list[PluginInfo]:
        """Plugins that failed to load (including those whose registration hooks raised)."""
        return [i for i in self.infos.values() if i.status == FAILED]

    def conflicts(self) -> list[str]:
        """One sentence per name claimed by two plugins (each fails only the runs that use that name)."""
        return [c.message() for c in self.registry.conflicts]

    def install_hints(self) -> dict[str, dict[str, str]]:
        """``{section: {name key: distribution}}`` from the ``ACCELKIT_INSTALL_HINTS`` of loaded plugins."""
        hints: dict[str, dict[str, str]] = {}
        for info in self.infos.values():
            declared = getattr(info.plugin, "ACCELKIT_INSTALL_HINTS", None) if info.status == LOADED else None
            if not isinstance(declared, dict):
                continue
            for section, names in declared.items():
                if isinstance(names, dict):
                    hints.setdefault(str(section), {}).update(
                        {lookup_key(n): str(d) for n, d in names.items() if isinstance(d, str)})
        return hints

    def info_of(self, plugin: object) -> PluginInfo | None:
        """The :class:`PluginInfo` of a registered plugin object, if it has one."""
        name = self.get_name(plugin)  # None for a plugin not registered
        info = self.infos.get(name) if name is not None else None
        return info if info is not None and info.plugin is plugin else None

    def mark_failed(self, plugin: object, error: BaseException, where: str, hook: str = "") -> None:
        """Take a plugin out because one of its hooks (``hook``, called as ``where``) raised: it is unregistered and
        reported as ``failed``."""
        name = self.get_name(plugin) or getattr(plugin, "__name__", None) or type(plugin).__name__
        info = self.info_of(plugin) or self.infos.setdefault(name, self._info(name))
        info.status, info.error = FAILED, error
        info.failed_in = hook or where
        info.reason = f"{where} raised {type(error).__name__}: {error}"
        if self.is_registered(plugin):
            self.unregister(plugin)  # drops the registry: the next look-up is built without it
        warnings.warn(f"accelkit plugin {info.name!r} ({info.provider}) is skipped: {info.reason}. Other plugins "
                      f"keep working; block it with {BLOCK_ENV}={info.name} to silence this.", RuntimeWarning,
                      stacklevel=4)


def _registration_results(plugin: object, callers: list[pluggy.HookCaller]) -> list[HookResult]:
    """Call ``plugin``'s implementations of the registration hooks ``callers``, in order, up to the first that
    raises (its plugin is taken out, so the rest need not run)."""
    results: list[HookResult] = []
    for caller in callers:
        for impl in caller.get_hookimpls():
            if impl.plugin is not plugin:
                continue
            where = f"{impl.plugin_name}.{caller.name}()"
            try:
                # a registration hook returns a list of records or None (the registry checks each record's type)
                records = tuple(cast("Iterable[object] | None", impl.function()) or ())
            except Exception as exc:  # noqa: BLE001 - the plugin is taken out, the others keep working
                return [*results, HookResult(caller.name, where, error=exc)]
            results.append(HookResult(caller.name, where, records))
    return results


def incompatibility(info: PluginInfo, declared: str) -> str:
    """Why a plugin whose ``ACCELKIT_API`` excludes the running hook API is not loaded, and which side must move:
    a plugin capped below the running version needs a newer release of itself (upgrading accelkit cannot help); a
    plugin that needs a newer hook API needs a newer accelkit."""
    running, supported = Version(hookspecs.HOOK_API_VERSION), SpecifierSet(declared)
    plugin = info.distribution or f"plugin {info.name!r}"
    needs_newer = any(spec.operator in (">", ">=", "~=", "==", "===") and running not in SpecifierSet(str(spec))
                      for spec in supported)
    if needs_newer:
        return (f"{plugin} needs hook API {declared}; this accelkit provides {running}: upgrade accelkit "
                f"(`pip install -U accelkit`), or install a release of {plugin} that supports hook API {running}")
    return (f"{plugin} supports hook API {declared}; this accelkit provides {running}: install a release of {plugin} "
            f"that supports hook API {running} (upgrading accelkit cannot help), or an accelkit whose hook API it "
            "supports")


class _Diagnostics:
    """The manager's own ``accelkit doctor`` findings: names claimed twice (each fails only the runs using it)."""

    def __init__(self, manager: PluginManager) -> None:
        self.manager = manager

    @hookspecs.hookimpl
    def accelkit_diagnose(self) -> list[str]:
        """Every conflict, with the value that blocks one of its plugins."""
        return [f"{c} Until then, only runs that use this name fail." for c in self.manager.conflicts()]


def _warn_unmarked(manager: PluginManager, plugin: object, info: PluginInfo) -> None:
    """Warn about functions named like a hook that lack ``@accelkit.hookimpl`` (pluggy ignores them)."""
    known = sorted(n for n in vars(hookspecs) if n.startswith(f"{hookspecs.PROJECT_NAME}_"))
    for name in sorted(n for n in dir(plugin) if n.startswith(f"{hookspecs.PROJECT_NAME}_")):
        value = inspect.getattr_static(plugin, name, None)
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if not inspect.isroutine(value) or manager.parse_hookimpl_opts(plugin, name) is not None:
            continue
        if name in known or suggest(name, known):
            warnings.warn(f"plugin {info.name!r} ({info.provider}) defines {name}() without @accelkit.hookimpl, so "
                          f"it is never called; decorate it with @accelkit.hookimpl.{suggest(name, known)}"
                          if name not in known else
                          f"plugin {info.name!r} ({info.provider}) defines {name}() without @accelkit.hookimpl, so "
                          "it is never called; decorate it with @accelkit.hookimpl.", RuntimeWarning, stacklevel=4)


# ----------------------------------------------------------------------------------------------- spawned workers
@dataclass(frozen=True)
class PluginModule:
    """A plugin module passed to ``Trainer(plugins=[...])``, as it travels to spawned workers: by import name
    (a module object cannot be pickled; each worker imports it again)."""

    name: str

    def load(self) -> types.ModuleType:
        """Import the module in this process."""
        return importlib.import_module(self.name)


def portable_plugins(objects: list[object]) -> list[object]:
    """``objects`` with each module replaced by a :class:`PluginModule` (for pickling the Trainer)."""
    portable: list[object] = []
    for obj in objects:
        if isinstance(obj, types.ModuleType):
            name = obj.__name__
            if sys.modules.get(name) is not obj or (obj.__spec__ is None and name != "__main__"):
                raise PluginError(f"plugin module {name!r} was not imported from a file, so spawned workers cannot "
                                  "import it again; put its hooks in an importable module (or register it through "
                                  "an entry point), or use a strategy that does not spawn workers")
            obj = PluginModule(name)
        portable.append(obj)
    return portable


def resolve_plugins(objects: list[object]) -> list[object]:
    """The inverse of :func:`portable_plugins`, in a worker: each :class:`PluginModule` imported again."""
    return [obj.load() if isinstance(obj, PluginModule) else obj for obj in objects]
