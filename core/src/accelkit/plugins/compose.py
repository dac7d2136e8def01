"""Turning the Trainer's strings into one composed run.

Every decision here is a registry look-up or a hook call: the resolver knows no device by name. All
problems found are collected and raised together; nothing is spawned or initialised before the whole
configuration is valid.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from typing import TYPE_CHECKING, Any, TypeVar, cast

from accelkit.accelerator import Accelerator
from accelkit.environments.detection import detect_cluster_environment
from accelkit.errors import ConfigurationError, PluginConflictError, PluginError
from accelkit.plugins.manager import PluginInfo, PluginManager
from accelkit.plugins.registry import catalog, suggest
from accelkit.precision import Precision
from accelkit.records import AcceleratorRecord, CallbackRecord, ProfilerRecord, RunConfig, StrategyRecord, lookup_key
from accelkit.strategies.base import Strategy

if TYPE_CHECKING:
    from accelkit.environments.base import ClusterEnvironment

#: what ``accelerator=`` takes: a registered name (``"auto"``), an Accelerator instance or class
AcceleratorArgument = str | Accelerator | type[Accelerator]
#: what ``strategy=`` takes: a registered name (``"auto"``) or a Strategy instance
StrategyArgument = str | Strategy
#: what ``precision=`` takes: a registered name (``"bf16-mixed"``, ``16``) or a Precision instance
PrecisionArgument = str | int | Precision

_Scoped = TypeVar("_Scoped", bound=StrategyRecord)


@dataclass
class Composition:
    """The resolved run: instances of the three parts, and the :class:`~accelkit.RunConfig` they were built from."""

    accelerator: Accelerator
    strategy: Strategy
    precision: Precision
    config: RunConfig
    notices: list[str]


def _installed(dist: str) -> bool:
    try:
        distribution(dist)
    except PackageNotFoundError:
        return False
    return True


def normalize_precision(precision: object) -> str:
    """``16`` -> ``"16"``, ``"BF16-Mixed"`` -> ``"bf16-mixed"``; names are matched with aliases afterwards."""
    if isinstance(precision, bool):
        raise ConfigurationError(f"precision={precision!r} is not a precision; use e.g. '32-true' or 'bf16-mixed'.")
    return str(precision).strip().lower()


class Resolver:
    """Resolves names against a :class:`~accelkit.plugins.manager.PluginManager`'s registry."""

    def __init__(self, manager: PluginManager) -> None:
        self.manager = manager
        self.registry = manager.registry
        self.problems: list[str] = []
        self.notices: list[str] = []

    # ----------------------------------------------------------------- messages
    def unknown(self, kind: str, name: str, known: list[str], section: str) -> str:
        """A message for an unknown name, or raise the import error of the plugin that should provide it (or the
        conflict of two plugins claiming it)."""
        key = lookup_key(name)
        conflict = self.registry.conflict(name, ("strategy", "precision") if kind == "plugin" else (kind,))
        if conflict is not None:
            raise PluginConflictError(f"{conflict.message()}.")
        dist = self.distribution_of(name, section)
        stopped = self.raise_if_failed(kind, name, section)
        missing = dist is not None and not _installed(dist)
        hint = "" if missing or stopped else suggest(key, known)  # a known name is not a typo of another one
        message = f"{kind} {name!r} is not available.{hint} Available: {', '.join(known) or 'none'}."
        if missing:
            message += f" It is provided by the {dist!r} distribution: `pip install {dist}`."
        message += self.not_loaded(stopped)
        if dist is None and not hint and not stopped:
            message += " No installed plugin provides it; `accelkit plugins` lists what is installed."
        if not missing and not stopped and not getattr(self.manager, "autoload", True):
            installed = f"The {dist!r} distribution is installed, but plugin" if dist is not None else "Plugin"
            message += (f" {installed} discovery is off (ACCELKIT_DISABLE_PLUGIN_AUTOLOAD); unset it or pass the "
                        "plugin in plugins=[...].")
        return message

    def distribution_of(self, name: str, section: str) -> str | None:
        """The distribution known to provide ``name`` in ``section`` (``"loggers"``...): the core's catalog of
        first-party names, then the install hints of loaded plugins; ``None`` if none is known."""
        hints = self.manager.install_hints() if hasattr(self.manager, "install_hints") else {}
        key = lookup_key(name)
        return catalog().get(section, {}).get(key) or hints.get(section, {}).get(key)

    def raise_if_failed(self, kind: str, name: str, section: str) -> list[PluginInfo]:
        """Raise :class:`~accelkit.errors.PluginError` naming the plugin that would provide ``name`` (its
        distribution is the known one, or its entry-point or distribution name contains ``name``) if it failed to
        load; else return such plugins that are blocked or incompatible."""
        key, dist = lookup_key(name), self.distribution_of(name, section)

        def related(info: PluginInfo) -> bool:
            return (dist is not None and lookup_key(info.distribution) == lookup_key(dist)) or (
                key in lookup_key(info.name)) or (bool(info.distribution) and key in lookup_key(info.distribution))

        for info in self.manager.failures():
            if related(info):
                raise PluginError(
                    f"{kind} {name!r} would come from plugin {info.name!r} ({info.provider}), which failed to "
                    f"load: {info.reason}"
                ) from info.error
        return [i for i in self.manager.infos.values() if i.status in ("blocked", "incompatible") and related(i)]

    def not_loaded(self, stopped: list[PluginInfo]) -> str:
        """Sentences naming the plugins in ``stopped`` (related to the name asked for) and every other plugin that
        did not load, so was not searched."""
        message = "".join(f" Plugin {i.name!r} ({i.provider}) is installed but {i.status}: {i.reason}."
                          for i in stopped)
        others = [i for i in self.manager.infos.values()
                  if i.status in ("blocked", "incompatible", "failed", "duplicate") and i not in stopped]
        if others:
            message += " Not loaded, so not searched: " + ", ".join(
                f"plugin {i.name!r} ({i.provider}, {i.status})" for i in others) + "."
        return message

    # ----------------------------------------------------------------- parts
    def accelerator(self, accelerator: AcceleratorArgument, strategy: StrategyArgument) -> type[Accelerator] | None:
        """The accelerator class asked for, or ``None`` after adding a problem."""
        if isinstance(accelerator, Accelerator):
            return type(accelerator)
        if isinstance(accelerator, type) and issubclass(accelerator, Accelerator):
            return accelerator
        reg = self.registry
        if lookup_key(accelerator) == "auto":
            candidates = reg.accelerator_records()
            restricted = ""
            if isinstance(strategy, str) and lookup_key(strategy) != "auto":
                runs_on = {a for rs in reg.strategies.get(lookup_key(strategy), []) for a in (rs.accelerators or ())}
                if runs_on and any(r.name in runs_on for r in candidates):
                    candidates = [r for r in candidates if r.name in runs_on]
                    restricted = f" for strategy {strategy!r} (it runs on {', '.join(sorted(runs_on))})"
            reasons = []
            for candidate in candidates:
                cls = self.load_accelerator(candidate)
                if cls is None:
                    return None
                if cls.is_available():
                    return cls
                reasons.append(f"{candidate.name}: {cls.unavailable_reason() or 'not available'}")
            blocked = [i.name for i in self.manager.infos.values() if i.status == "blocked"]
            advice = (f" Installed but blocked: {', '.join(blocked)} (ACCELKIT_BLOCK_PLUGINS or 'no:NAME')."
                      if blocked else "")
            if not restricted and not blocked:
                advice += " Install one, e.g. `pip install accelkit-cpu`."
            self.problems.append(
                f"accelerator='auto' found no available accelerator{restricted}"
                + (f" ({'; '.join(reasons)})" if reasons else "") + "." + advice
            )
            return None
        record = reg.accelerators.get(lookup_key(accelerator))
        if record is None:
            names = sorted(reg.accelerators)  # aliases too: they are what users type
            self.problems.append(self.unknown("accelerator", str(accelerator), names, "accelerators"))
            return None
        cls = self.load_accelerator(record)
        if cls is None:
            return None
        if not cls.is_available():
            self.problems.append(
                f"accelerator {accelerator!r} is installed but not available here: "
                f"{cls.unavailable_reason() or 'no device found'}"
            )
            return None
        return cls

    def load_accelerator(self, record: AcceleratorRecord) -> type[Accelerator] | None:
        """The record's class, if its ``name`` is the record's name (strategies and precisions are matched to the
        class's name, so a record ``"mydevice"`` whose class says ``"mydev"`` would find none); else a problem."""
        cls = cast("type[Accelerator]", record.load())  # an accelerator record names an Accelerator subclass
        if lookup_key(getattr(cls, "name", "") or "") != lookup_key(record.name):
            self.problems.append(
                f"accelerator record {record.name!r} ({record.provider or 'unknown provider'}) names the class "
                f"{cls.__qualname__}, whose name is {getattr(cls, 'name', '')!r}; they must be equal: set "
                f"name = {record.name!r} on the class (strategies and precisions are looked up by that name).")
            return None
        return cls

    def instantiate(self, record: StrategyRecord) -> Strategy | Precision:
        """An instance of a strategy/precision record's class, with its options, named after the record."""
        # a strategy (precision) record names a Strategy (Precision) subclass
        obj = cast("Strategy | Precision", record.load()(**dict(record.options)))
        obj.name = record.name
        if record.notice:
            self.notices.append(record.notice)
        return obj

    def scoped(self, kind: str, value: str, accelerator: str, table: Mapping[str, list[_Scoped]],
               names: Callable[[str], list[str]], section: str) -> _Scoped | None:
        """The record of ``value`` for ``accelerator`` in ``table``, or ``None`` after adding a problem."""
        record = self.registry.find_scoped(table, value, accelerator)
        if record is not None:
            return record
        elsewhere = table.get(lookup_key(value))
        if elsewhere:
            where = sorted({a for r in elsewhere for a in (r.accelerators or ())})
            self.problems.append(
                f"{kind} {value!r} does not run on accelerator {accelerator!r} (it runs on {', '.join(where)}); "
                f"{kind} names for {accelerator!r}: {', '.join(names(accelerator)) or 'none'}."
                + ("" if names(accelerator) else self.nothing_registered(kind, value, accelerator, elsewhere[0]))
            )
        else:
            self.problems.append(self.unknown(kind, value, names(accelerator), section))
        return None

    def nothing_registered(self, kind: str, value: str, accelerator: str, example: StrategyRecord) -> str:
        """For the author of a new accelerator's plugin: no strategy (or precision) at all is registered for it,
        and a record like ``example`` (one that runs elsewhere) is what is missing."""
        owner = self.registry.accelerators.get(lookup_key(accelerator))
        provider = f" ({owner.provider})" if owner is not None and owner.provider else ""
        record = "StrategyRecord" if kind == "strategy" else "PrecisionRecord"
        target = example.target if isinstance(example.target, str) else \
            f"{example.target.__module__}:{example.target.__qualname__}"
        return (f" No plugin registers any {kind} for {accelerator!r}: the plugin that provides it{provider} must "
                f"register the {kind}s it supports, e.g. {record}({example.name!r}, {target!r}, "
                f"accelerators=({accelerator!r},)) (docs/plugins.rst).")


class _Parts:
    """The steps of :func:`compose` after the accelerator is known, each adding its problems to the resolver's."""

    def __init__(self, resolver: Resolver, manager: PluginManager) -> None:
        self.resolver, self.manager, self.registry = resolver, manager, resolver.registry

    def from_plugins(self, strategy: StrategyArgument, precision: PrecisionArgument, plugin_names: list[str] | None,
                     plugin_objects: list[object] | None
                     ) -> tuple[StrategyArgument, PrecisionArgument, ClusterEnvironment | None]:
        """``plugins=[...]``: strings name a strategy or a precision; objects may be Strategy, Precision or
        ClusterEnvironment instances. Returns the strategy, the precision and a forced cluster environment."""
        from accelkit.environments.base import ClusterEnvironment

        reg, problems = self.registry, self.resolver.problems
        forced_environment: ClusterEnvironment | None = None
        for obj in plugin_objects or []:
            if isinstance(obj, Strategy):
                strategy = obj
            elif isinstance(obj, Precision):
                precision = obj
            elif isinstance(obj, ClusterEnvironment):  # Lightning's plugins=[SLURMEnvironment()]: use this one
                forced_environment = obj
        if isinstance(precision, Precision):  # hooks see its real name, not the "32-true" every Precision inherits
            precision.name = reg.precision_name(precision)
        for name in plugin_names or []:
            key = lookup_key(name)
            if key in reg.strategies:
                if isinstance(strategy, str) and lookup_key(strategy) not in ("auto", key):
                    problems.append(f"plugins={name!r} names a strategy, but strategy={strategy!r} was also given; "
                                    "keep one of them.")
                strategy = name
            elif key in reg.precisions:
                precision = name
            else:
                known = sorted(set(reg.strategy_names()) | set(reg.precision_names()))
                problems.append(self.resolver.unknown("plugin", name, known, "strategies"))
        return strategy, precision, forced_environment

    def unknown_names(self, strategy: StrategyArgument, precision: PrecisionArgument) -> None:
        """Without an accelerator, strategy and precision names cannot be matched to one; still report names that
        no installed plugin knows at all, so every problem is in the one error."""
        reg = self.registry
        for kind, value, table, names, section in (
                ("strategy", strategy, reg.strategies, reg.strategy_names, "strategies"),
                ("precision", precision, reg.precisions, reg.precision_names, "precisions")):
            if isinstance(value, str) and lookup_key(value) != "auto" and lookup_key(value) not in table:
                self.resolver.problems.append(self.resolver.unknown(kind, value, names(), section))

    def strategy(self, strategy: StrategyArgument, config: RunConfig) -> Strategy | None:
        """The strategy instance (asking ``accelkit_default_strategy`` for ``"auto"``); its name into ``config``."""
        if isinstance(strategy, Strategy):
            config.strategy = strategy.name or type(strategy).__name__
            return strategy
        name = str(strategy)
        if lookup_key(name) == "auto":
            name = self.manager.hook.accelkit_default_strategy(config=config)
        reg = self.registry
        record = self.resolver.scoped("strategy", name, config.accelerator, reg.strategies, reg.strategy_names,
                                      "strategies")
        if record is None:
            return None
        config.strategy = record.name
        return cast(Strategy, self.resolver.instantiate(record))  # a strategy record names a Strategy class

    def precision(self, precision: PrecisionArgument, config: RunConfig) -> Precision | None:
        """The precision instance; its name into ``config``."""
        if isinstance(precision, Precision):
            config.precision = precision.name
            return precision
        try:
            name = normalize_precision(precision)
        except ConfigurationError as exc:
            self.resolver.problems.extend(exc.problems)
            return None
        reg = self.registry
        record = self.resolver.scoped("precision", name, config.accelerator, reg.precisions, reg.precision_names,
                                      "precisions")
        if record is None:
            return None
        config.precision = record.name
        return cast(Precision, self.resolver.instantiate(record))  # a precision record names a Precision class

    def connect(self, accelerator: Accelerator, strategy: Strategy | None, precision: Precision | None,
                config: RunConfig) -> None:
        """Connect the parts; once the run is fully resolved, the strategy's and every plugin's own checks."""
        problems = self.resolver.problems
        if precision is not None:
            try:
                precision.connect(accelerator)
            except (ValueError, ConfigurationError) as exc:
                problems.append(f"precision {config.precision!r} cannot run on {config.accelerator!r}: {exc}")
        if strategy is None or precision is None or problems:
            return
        if strategy.cluster_environment is None:  # a strategy instance may bring its own
            strategy.cluster_environment = config.cluster_environment
        strategy.connect(accelerator, config.devices, config.num_nodes, precision)
        problems.extend(strategy.validate())
        if not problems:
            config.processes_per_node = strategy.processes_per_node
            config.devices_per_process = strategy.devices_per_process
            config.data_parallel_size = strategy.data_parallel_size
        for found in self.manager.hook.accelkit_validate_config(config=config):
            problems.extend(found or [])


def compose(
    manager: PluginManager,
    accelerator: AcceleratorArgument = "auto",
    devices: object = "auto",
    strategy: StrategyArgument = "auto",
    precision: PrecisionArgument = "32-true",
    num_nodes: int | None = None,
    plugin_names: list[str] | None = None,
    plugin_objects: list[object] | None = None,
) -> Composition:
    """Resolve a run. Raises :class:`~accelkit.ConfigurationError` listing every problem found. ``num_nodes``
    ``None``: the launcher's (``launcher_num_nodes()``)."""
    resolver = Resolver(manager)
    parts = _Parts(resolver, manager)
    problems = resolver.problems
    strategy, precision, forced_environment = parts.from_plugins(strategy, precision, plugin_names, plugin_objects)
    # which launcher started this process, asked once: the default strategy joins it, the strategy reads its ranks
    environment = forced_environment or detect_cluster_environment(manager)
    if num_nodes is None:
        num_nodes = launcher_num_nodes(environment)
    if not isinstance(num_nodes, int) or isinstance(num_nodes, bool) or num_nodes < 1:
        problems.append(f"num_nodes={num_nodes!r} must be an int >= 1.")
        num_nodes = 1

    acc_cls = resolver.accelerator(accelerator, strategy)
    if acc_cls is None:
        parts.unknown_names(strategy, precision)
        raise ConfigurationError(problems)
    acc_name = lookup_key(getattr(acc_cls, "name", "") or acc_cls.__name__)
    acc_instance = accelerator if isinstance(accelerator, Accelerator) else acc_cls()
    try:
        parsed = acc_cls.parse_devices(devices)
    except ConfigurationError as exc:
        problems.extend(exc.problems)
        parsed = [0]
    config = RunConfig(accelerator=acc_name, accelerator_cls=acc_cls, devices=parsed, num_nodes=num_nodes,
                       user_devices=devices)
    config.cluster_environment = environment
    strategy_obj = parts.strategy(strategy, config)
    precision_obj = parts.precision(precision, config)
    parts.connect(acc_instance, strategy_obj, precision_obj, config)
    if problems:
        raise ConfigurationError(problems)
    assert strategy_obj is not None and precision_obj is not None
    return Composition(acc_instance, strategy_obj, precision_obj, config, resolver.notices)


def launcher_num_nodes(environment: ClusterEnvironment | None) -> int:
    """The number of nodes of a run whose ``num_nodes`` was not given: the one the launcher that started every
    process says (torchrun's ``GROUP_WORLD_SIZE``, which an elastic run changes from one attempt to the next;
    srun's ``SLURM_NNODES``...), else 1."""
    if environment is None or not getattr(environment, "launches_every_process", True) or environment.validate():
        return 1
    return int(environment.num_nodes)


def print_notices(notices: list[str]) -> None:
    """Show one-line notices (legacy names, precision substitutions) on stderr."""
    for notice in notices:
        print(f"accelkit: {notice}", file=sys.stderr)


def build_logger(name: str, save_dir: str | os.PathLike[str] | None, manager: PluginManager) -> object:
    """The logger registered as ``name`` (:meth:`~accelkit.plugins.registry.Registry.find_logger`), built as
    ``cls(save_dir=save_dir)``; an import failure of its class names the logger and its provider."""
    registry = manager.registry
    if registry.find_named(registry.loggers, name) is None:  # as for accelerators: name a plugin that did not load
        resolver = Resolver(manager)
        stopped = resolver.raise_if_failed("logger", name, "loggers")
        try:
            registry.find_logger(name)
        except ConfigurationError as exc:
            note = resolver.not_loaded(stopped)
            if not note:
                raise
            raise ConfigurationError(f"{exc}.{note}") from None
    record = registry.find_logger(name)
    try:
        cls = record.load()
    except ImportError as exc:
        raise ConfigurationError(f"logger={name!r} ({record.provider}) cannot be imported: {exc}") from exc
    return cls(save_dir=save_dir)


#: the profiler names the core resolves itself (:func:`accelkit.profilers.resolve_profiler`)
CORE_PROFILERS = ("simple", "pytorch", "advanced")


def build_named(kind: str, name: str, manager: PluginManager) -> object:
    """The callback or profiler (``kind``) a plugin registered as ``name``, built as ``cls()``.

    :raise ConfigurationError: for an unknown name: the close name ("did you mean"), the registered names, and the
        plugins that did not load; :class:`~accelkit.errors.PluginError` when the plugin that would provide it failed
        to load.
    """
    registry = manager.registry
    table: Mapping[str, CallbackRecord | ProfilerRecord] = registry.callbacks if kind == "callback" else \
        registry.profilers
    record = registry.find_named(table, name)
    if record is None:
        resolver = Resolver(manager)
        stopped = resolver.raise_if_failed(kind, name, f"{kind}s")
        names = registry.names_of(table) + (["simple", "pytorch"] if kind == "profiler" else [])
        argument = "callbacks=[...]" if kind == "callback" else "profiler="
        raise ConfigurationError(
            f"{kind} {name!r} is not a registered {kind}.{suggest(lookup_key(name), sorted(table) + names)} "
            f"Registered {kind}s: {', '.join(names) or 'none'}; or pass an instance in {argument}."
            + resolver.not_loaded(stopped))
    try:
        cls = record.load()
    except ImportError as exc:
        raise ConfigurationError(f"{kind} {name!r} ({record.provider}) cannot be imported: {exc}") from exc
    return cls()


def named_callbacks(callbacks: object, manager: PluginManager) -> object:
    """``Trainer(callbacks=...)`` with each name (``"ema"``) replaced by the callback a plugin registered for it."""
    if isinstance(callbacks, str):
        return [build_named("callback", callbacks, manager)]
    if isinstance(callbacks, (list, tuple)):
        return [build_named("callback", c, manager) if isinstance(c, str) else c for c in callbacks]
    return callbacks


def named_profiler(profiler: object, manager: PluginManager) -> Any:
    """``Trainer(profiler=...)`` with a plugin's profiler name (``"nvtx"``) replaced by that profiler; the core's
    own names (:data:`CORE_PROFILERS`) are left to :func:`accelkit.profilers.resolve_profiler`. (Typed ``Any``: it
    is a :class:`~accelkit.profilers.Profiler` or what the Trainer was given, and ``profilers.py`` sits above this
    package, so the class cannot be named here.)"""
    if isinstance(profiler, str) and profiler.strip().lower() not in CORE_PROFILERS:
        return build_named("profiler", profiler, manager)
    return profiler
