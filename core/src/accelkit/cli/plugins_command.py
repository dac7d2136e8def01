"""``accelkit plugins``: every installed plugin, its status, and what it and the core register."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, NotRequired, TypedDict

from accelkit.records import AcceleratorRecord, ClusterEnvironmentRecord, Record, StrategyRecord

if TYPE_CHECKING:
    from accelkit.plugins.manager import PluginManager
    from accelkit.plugins.private_names import PrivateNameRecord

#: (record kind in the registry, section of a plugin's ``provides``)
SECTIONS = (("accelerator", "accelerators"), ("strategy", "strategies"), ("precision", "precisions"),
            ("cluster environment", "cluster_environments"), ("logger", "loggers"), ("command", "commands"),
            ("callback", "callbacks"), ("profiler", "profilers"))
#: the name the core's own hook implementations are registered under
CORE_PLUGIN_NAME = "accelkit-core"


class RecordEntry(TypedDict):
    """One registered name in a report: ``priority`` for accelerators and cluster environments, ``accelerators``
    (``None``: any) for strategies and precisions."""

    name: str
    aliases: list[str]
    description: str
    priority: NotRequired[int]
    accelerators: NotRequired[list[str] | None]


#: what one plugin (or the core) registered, per section (``accelerators`` ... ``profilers``)
Provides = dict[str, list[RecordEntry]]


class PluginEntry(TypedDict):
    """One plugin in :func:`plugin_report`."""

    name: str
    distribution: str
    version: str
    status: str
    reason: str
    preferred: str
    api: str
    hooks: list[str]
    provides: Provides
    private_names: list[PrivateNameRecord]


class CoreEntry(TypedDict):
    """What the core itself registers, in :func:`plugin_report`."""

    provides: Provides


class PluginReport(TypedDict):
    """What :func:`plugin_report` returns."""

    accelkit: str
    hook_api: str
    core: CoreEntry
    plugins: list[PluginEntry]
    conflicts: list[str]


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    """The ``--json`` option of ``accelkit plugins`` and ``accelkit doctor``."""
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")


def quiet_manager() -> PluginManager:
    """A :class:`~accelkit.plugins.manager.PluginManager` whose load failures are recorded, not printed as warnings
    (the listings report them)."""
    import warnings

    from accelkit.plugins.manager import PluginManager

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        manager = PluginManager()
        manager.registry  # noqa: B018 - the registration hooks run here, under the filter
    return manager


def manager_of(args: argparse.Namespace) -> PluginManager:
    """The plugin manager ``accelkit`` found the command through, or a quiet new one."""
    return getattr(args, "plugin_manager", None) or quiet_manager()


def _entry(record: Record) -> RecordEntry:
    entry: RecordEntry = {"name": record.name, "aliases": list(record.aliases), "description": record.description}
    if isinstance(record, (AcceleratorRecord, ClusterEnvironmentRecord)):  # the kinds "accelerator", "cluster ..."
        entry["priority"] = record.priority
    elif isinstance(record, StrategyRecord):  # the kinds "strategy" and "precision" (a PrecisionRecord is one)
        entry["accelerators"] = None if record.accelerators is None else list(record.accelerators)
    return entry


def provided_by(manager: PluginManager, plugin_name: str | None) -> Provides:
    """What one loaded plugin registered, per section (``accelerators`` ... ``commands``), from the registry;
    every section empty for ``None`` (a plugin that is not loaded)."""
    provided: Provides = {section: [] for _, section in SECTIONS}
    sections = dict(SECTIONS)
    for kind, record in manager.registry.provided.get(plugin_name, []) if plugin_name is not None else []:
        provided[sections[kind]].append(_entry(record))
    return provided


def plugin_report(manager: PluginManager | None = None) -> PluginReport:
    """Everything ``accelkit plugins`` shows, as plain data.

    :param manager: a :class:`~accelkit.plugins.manager.PluginManager`; a fresh one (with entry-point discovery) if
        omitted.
    :return: ``{"accelkit": version, "hook_api": version, "core": {"provides": ...}, "plugins": [...],
        "conflicts": [...]}``; each plugin has ``name``, ``distribution``, ``version``, ``status`` (``loaded``,
        ``failed``, ``blocked``, ``incompatible``, ``duplicate`` or ``unregistered``), ``reason``, ``preferred``
        (the ``ACCELKIT_PREFER`` setting that chose it over a duplicate, or ``""``), ``api``, ``hooks`` and
        ``provides`` (``accelerators``, ``strategies``, ``precisions``, ``cluster_environments``, ``loggers``,
        ``commands``, ``callbacks``, ``profilers``) and ``private_names``: each private (``_``) core name its source
        uses (``name``, ``module``, ``file``, ``line``; :func:`accelkit.plugins.private_names.private_core_names`),
        which the stability promise does not cover; ``core`` is what the core itself registers (cluster
        environments, loggers, commands).
    """
    from accelkit.__about__ import __version__
    from accelkit.hookspecs import HOOK_API_VERSION
    from accelkit.plugins.private_names import private_core_names

    manager = manager or quiet_manager()
    conflicts = manager.conflicts()  # builds the registry first: a plugin whose hook raises is "failed" below
    plugins: list[PluginEntry] = []
    for key, info in sorted(manager.infos.items(), key=lambda item: (item[1].name, item[0])):
        plugins.append({
            "name": info.name, "distribution": info.distribution, "version": info.version,
            "status": info.status, "reason": info.reason, "preferred": info.preferred, "api": info.api,
            "hooks": list(info.hooks),
            "provides": provided_by(manager, key if info.status == "loaded" else None),
            "private_names": [use.as_dict() for use in private_core_names(info.plugin)],
        })
    return {"accelkit": __version__, "hook_api": HOOK_API_VERSION,
            "core": {"provides": provided_by(manager, CORE_PLUGIN_NAME)}, "plugins": plugins, "conflicts": conflicts}


def private_names_sentence(uses: list[PrivateNameRecord]) -> str:
    """The warning ``accelkit plugins`` and ``accelkit doctor`` print for a plugin using private core names (``uses``:
    the ``private_names`` of :func:`accelkit.cli.plugin_report`)."""
    from accelkit.plugins.private_names import STABILITY_PROMISE

    listed = "; ".join(f"{u['name']} (module {u['module']}, {os.path.basename(u['file'])}:{u['line']})" for u in uses)
    return (f"uses private core name(s), not covered by the stability promise ({STABILITY_PROMISE}): they may "
            f"change or go in any release, so ask its authors to use public names instead: {listed}")


def _names(entries: list[RecordEntry]) -> str:
    shown = []
    for entry in entries:
        text = entry["name"]
        if entry["aliases"]:
            text += f" (alias {', '.join(entry['aliases'])})"
        if "priority" in entry:
            text += f" [priority {entry['priority']}]"
        accelerators = entry.get("accelerators")
        if accelerators:
            text += f" [on {', '.join(accelerators)}]"
        shown.append(text)
    return ", ".join(shown) or "-"


def _print_provides(provides: Provides, always: tuple[str, ...]) -> None:
    for _, section in SECTIONS:
        if provides[section] or section in always:
            print(f"  {section.replace('_', ' ')}: {_names(provides[section])}")


def plugins_command(args: argparse.Namespace) -> int:
    """``accelkit plugins [--json]``: exit status 1 when a name is claimed twice."""
    import json

    report = plugin_report(manager_of(args))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"accelkit {report['accelkit']} (hook API {report['hook_api']}): {len(report['plugins'])} plugin(s)")
    print("\naccelkit (core)")
    _print_provides(report["core"]["provides"], ())
    for plugin in report["plugins"]:
        origin = f"{plugin['distribution']} {plugin['version']}".strip() or "(not from a distribution)"
        print(f"\n{plugin['name']}  [{plugin['status']}]  {origin}")
        if plugin["api"]:
            print(f"  ACCELKIT_API: {plugin['api']}")
        if plugin["reason"]:
            print(f"  reason: {plugin['reason']}")
        if plugin["preferred"]:
            print(f"  chosen over other distributions of this name by {plugin['preferred']}")
        if plugin["status"] == "loaded":
            _print_provides(plugin["provides"], ("accelerators", "strategies", "precisions"))
            print(f"  hooks: {', '.join(plugin['hooks']) or '-'}")
        if plugin["private_names"]:
            print(f"  {private_names_sentence(plugin['private_names'])}")
    for conflict in report["conflicts"]:
        print(f"\nconflict: {conflict}")
    return 1 if report["conflicts"] else 0
