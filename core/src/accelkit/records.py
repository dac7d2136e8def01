"""Small records that plugins return from the ``accelkit_register_*`` hooks.

A record names one implementation. ``target`` is the class itself or a ``"package.module:Class"`` string;
a string is imported only when the implementation is used, which keeps plugin discovery cheap.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

if TYPE_CHECKING:
    import argparse

#: what a record's ``target`` is: the class (or a factory function) itself, or its ``"package.module:Name"`` path
Target = Callable[..., object] | str

_T = TypeVar("_T")
_R = TypeVar("_R", bound="Record")


def normalize_name(name: object) -> str:
    """Normalise a user-facing name once: ``" DDP_Spawn "`` -> ``"ddp_spawn"``; ``16`` -> ``"16"``."""
    return str(name).strip().lower()


def lookup_key(name: object) -> str:
    """The key names are compared by: case, surrounding blanks, ``-`` versus ``_`` do not matter."""
    return normalize_name(name).replace("-", "_")


def record_order(record: Record) -> tuple[int, str]:
    """The one order of records: highest ``priority`` first (0 for records without one), ties by name. It is the
    order ``accelerator="auto"`` tries accelerators and detection asks cluster environments."""
    return (-getattr(record, "priority", 0), record.name)


def by_priority(records: Iterable[_R]) -> list[_R]:
    """``records`` sorted by :func:`record_order`, each record once (a record is stored under its aliases too)."""
    return sorted({id(r): r for r in records}.values(), key=record_order)


def load_target(target: _T | str) -> _T:
    """Import a ``"module:attr"`` string, or return a class unchanged."""
    if not isinstance(target, str):
        return target
    module_name, sep, attr = target.partition(":")
    if not sep:
        raise ValueError(f"plugin target {target!r} is not of the form 'package.module:Name'")
    obj: object = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return cast("_T", obj)  # the string names what the field holds otherwise (the record's contract)


@dataclass(frozen=True)
class _Record:
    name: str
    target: Target
    aliases: tuple[str, ...] = ()
    description: str = ""
    #: filled in by the plugin manager: the distribution (or plugin name) that provided the record.
    provider: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", normalize_name(self.name))
        object.__setattr__(self, "aliases", tuple(normalize_name(a) for a in self.aliases))

    @property
    def names(self) -> tuple[str, ...]:
        """The record's name followed by its aliases."""
        return (self.name, *self.aliases)

    def load(self) -> Callable[..., object]:
        """Return the implementation class, importing it if ``target`` is a string."""
        return load_target(self.target)


@dataclass(frozen=True)
class AcceleratorRecord(_Record):
    """An accelerator a plugin provides.

    :param name: the canonical name (``"cpu"``).
    :param target: an :class:`~accelkit.Accelerator` subclass or ``"module:Class"``.
    :param aliases: other names users may write (``("gpu",)``).
    :param priority: for ``accelerator="auto"``: the available accelerator with the highest priority wins.
        The cpu plugin uses 0; a device that should be preferred when present uses more.
    :param description: one line shown by ``accelkit plugins``.
    """

    priority: int = 0


@dataclass(frozen=True)
class StrategyRecord(_Record):
    """A strategy a plugin provides.

    :param accelerators: canonical accelerator names the strategy runs on; ``None`` for any.
    :param options: keyword arguments passed to the strategy class, so one class can back several names
        (``"ddp_find_unused_parameters_true"`` -> ``{"find_unused_parameters": True}``): a mapping, kept as its
        sorted ``(name, value)`` pairs (which the record stores, hashable).
    :param notice: a one-line message shown when this name is chosen (a legacy alias, say).
    """

    accelerators: tuple[str, ...] | None = None
    options: tuple[tuple[str, object], ...] | Mapping[str, object] = ()
    notice: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.accelerators is not None:
            object.__setattr__(self, "accelerators", tuple(normalize_name(a) for a in self.accelerators))
        if isinstance(self.options, Mapping):
            object.__setattr__(self, "options", tuple(sorted(self.options.items())))

    def runs_on(self, accelerator: str) -> bool:
        """Whether this strategy runs on the (canonical) accelerator name."""
        return self.accelerators is None or accelerator in self.accelerators


@dataclass(frozen=True)
class PrecisionRecord(StrategyRecord):
    """A precision a plugin provides; same fields as :class:`StrategyRecord`.

    ``notice`` is printed once when the precision is chosen, e.g. to say that ``"16-mixed"`` runs as bfloat16
    on a device without float16 units.
    """


@dataclass
class RunConfig:
    """What the user asked for, as resolution fills it in; passed to the decision and validation hooks.

    :param accelerator: the canonical accelerator name.
    :param accelerator_cls: its :class:`~accelkit.Accelerator` subclass.
    :param devices: the parsed device indices (local to a node).
    :param num_nodes: number of nodes.
    :param strategy: the canonical strategy name (``"auto"`` until resolved).
    :param precision: the canonical precision name.
    :param user_devices: the ``devices`` value exactly as the user gave it.
    :param extras: free for plugins: a note one hook leaves for a later hook of the same plugin (key it by the
        plugin's name); the core never reads or writes it. It travels with the Trainer to spawned workers.
    :param processes_per_node: processes on each node, as the chosen strategy lays them out (``None`` until the
        strategy is connected; :attr:`world_size` then assumes one process per device).
    :param devices_per_process: devices each process drives (1 until the strategy says otherwise).
    :param data_parallel_size: into how many parts the data is split (``None`` until the strategy is connected).
    :param cluster_environment: the detected cluster environment (torchrun, SLURM...), or ``None``.
    """

    accelerator: str
    accelerator_cls: Any
    devices: list[int]
    num_nodes: int = 1
    strategy: str = "auto"
    precision: str = "32-true"
    user_devices: object = "auto"
    extras: dict[str, Any] = field(default_factory=dict)
    processes_per_node: int | None = None
    devices_per_process: int = 1
    data_parallel_size: int | None = None
    cluster_environment: Any = None

    @property
    def world_size(self) -> int:
        """Total number of processes across nodes (one per device until the strategy's layout is known)."""
        per_node = self.processes_per_node if self.processes_per_node is not None else len(self.devices)
        return per_node * self.num_nodes


@dataclass(frozen=True)
class ClusterEnvironmentRecord:
    """A cluster environment a plugin provides (a scheduler or launcher whose variables describe the run).

    :param name: the environment's name (``"slurm"``), listed by ``accelkit plugins`` and ``accelkit doctor``;
        unique across plugins, and equal to the class's ``name``.
    :param target: an :class:`~accelkit.environments.base.ClusterEnvironment` subclass or ``"module:Class"``.
    :param priority: detection order: environments are asked highest priority first (ties by name) and the first
        that detects itself wins. The core's built-ins use 10 (Kubeflow) to 50 (torchrun); see
        ``docs/environments.rst`` for why launchers that run inside others rank higher.
    :param description: one line shown by ``accelkit plugins`` and ``accelkit doctor``.
    """

    name: str
    target: Target
    priority: int = 0
    description: str = ""
    #: filled in by the plugin manager: the distribution (or plugin name) that provided the record.
    provider: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", normalize_name(self.name))

    @property
    def aliases(self) -> tuple[str, ...]:
        """None: an environment has one name."""
        return ()

    @property
    def names(self) -> tuple[str, ...]:
        """The environment's one name."""
        return (self.name,)

    def load(self) -> Callable[..., object]:
        """Return the environment class, importing it if ``target`` is a string."""
        return load_target(self.target)


@dataclass(frozen=True)
class LoggerRecord(_Record):
    """An experiment logger (tracker) a plugin provides, chosen by name: ``Trainer(logger="tensorboard")``.

    :param name: the canonical name (``"mlflow"``).
    :param target: an :class:`~accelkit.loggers.Logger` subclass or ``"module:Class"``; built as
        ``cls(save_dir=<the Trainer's default_root_dir>)`` when chosen by name.
    :param aliases: other names users may write (``("tb",)``).
    :param description: one line shown by ``accelkit plugins``.
    """


@dataclass(frozen=True)
class CommandRecord:
    """A sub-command of the ``accelkit`` command a plugin provides: ``accelkit NAME ...``.

    :param name: the word users type after ``accelkit`` (matched ignoring case and ``-`` versus ``_``).
    :param help: one line, shown by ``accelkit --help`` next to the distribution that provides the command and by
        ``accelkit plugins``.
    :param add_arguments: ``add_arguments(parser)`` adds the command's options to its :class:`argparse.ArgumentParser`
        (or a ``"module:function"`` string, imported only then); ``None`` for a command without options. Called
        only when the command is run or its ``--help`` is asked for, never to list the commands.
    :param run: ``run(args)`` with the parsed :class:`argparse.Namespace` (or a ``"module:function"`` string); its
        return value is the exit status (``None`` means 0). An :class:`~accelkit.errors.AccelkitError` it raises is
        printed as ``accelkit: error: ...`` with exit status 1.
    :param raw: ``True`` for a command that parses its own words: ``run(words)`` gets the list of words after its
        name, and ``add_arguments`` must be ``None``.
    :param aliases: other names users may type.
    """

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], object] | str | None = None
    run: Callable[..., int | None] | str | None = None
    raw: bool = False
    aliases: tuple[str, ...] = ()
    #: filled in by the plugin manager: the distribution (or plugin name) that provided the record.
    provider: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", normalize_name(self.name))
        object.__setattr__(self, "aliases", tuple(normalize_name(a) for a in self.aliases))
        for name in self.names:
            if not name or name.startswith("-") or any(c.isspace() for c in name):
                raise ValueError(f"CommandRecord name {name!r} is not a command word: use letters, digits, '-' and "
                                 "'_', not starting with '-'")
        if self.run is None:
            raise ValueError(f"CommandRecord({self.name!r}) needs run=: the function (or 'module:function') that "
                             "runs the command")
        if self.raw and self.add_arguments is not None:
            raise ValueError(f"CommandRecord({self.name!r}, raw=True) parses its own words, so it takes no "
                             "add_arguments")

    @property
    def names(self) -> tuple[str, ...]:
        """The command's name followed by its aliases."""
        return (self.name, *self.aliases)

    @property
    def description(self) -> str:
        """The help line (the field other records call ``description``)."""
        return self.help

    def load_run(self) -> Callable[..., int | None]:
        """The function that runs the command, imported if ``run`` is a string."""
        run = self.run
        if run is None:  # refused by __post_init__ (a record changed afterwards through object.__setattr__)
            raise ValueError(f"CommandRecord({self.name!r}) has no run")
        return load_target(run)

    def load_add_arguments(self) -> Callable[[argparse.ArgumentParser], object] | None:
        """The function that adds the command's options (``None`` for none), imported if it is a string."""
        return None if self.add_arguments is None else load_target(self.add_arguments)


@dataclass(frozen=True)
class CallbackRecord(_Record):
    """A callback a plugin provides, chosen by name: ``Trainer(callbacks=["ema"])``.

    :param name: the canonical name (``"ema"``).
    :param target: an :class:`~accelkit.Callback` subclass or ``"module:Class"``; built as ``cls()`` when chosen by
        name (a factory function returning a callback works too).
    :param aliases: other names users may write.
    :param description: one line shown by ``accelkit plugins``.
    """


@dataclass(frozen=True)
class ProfilerRecord(_Record):
    """A profiler a plugin provides, chosen by name: ``Trainer(profiler="nvtx")``.

    :param name: the canonical name (``"nvtx"``).
    :param target: an :class:`~accelkit.profilers.Profiler` subclass or ``"module:Class"``; built as ``cls()`` when
        chosen by name.
    :param aliases: other names users may write.
    :param description: one line shown by ``accelkit plugins``.
    """


#: a record of any kind (what a plugin's ``accelkit_register_*`` hooks return)
Record = (AcceleratorRecord | StrategyRecord | PrecisionRecord | ClusterEnvironmentRecord | LoggerRecord | CommandRecord
          | CallbackRecord | ProfilerRecord)
#: a record of a kind kept one per name (all but strategies and precisions, which are kept per accelerator too)
NamedKindRecord = (AcceleratorRecord | ClusterEnvironmentRecord | LoggerRecord | CommandRecord | CallbackRecord
                   | ProfilerRecord)
