"""``accelkit plugins`` and ``accelkit doctor``: what is installed, and whether this machine can run it."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, NotRequired, TypedDict, cast

from accelkit.cli.plugins_command import manager_of, private_names_sentence, quiet_manager
from accelkit.environments.base import RankDescription

if TYPE_CHECKING:
    from accelkit.accelerator import Accelerator
    from accelkit.plugins.manager import PluginInfo, PluginManager
    from accelkit.plugins.private_names import PrivateNameRecord
    from accelkit.plugins.registry import Registry


class RequirementFinding(TypedDict):
    """A requirement of a plugin distribution, with the installed version."""

    name: str
    specifier: str
    installed: str | None
    satisfied: bool
    optional: bool


class EnvironmentValue(TypedDict):
    """A declared environment variable with its value here (``None``: unset)."""

    name: str
    value: str | None
    description: str


class PluginFinding(TypedDict):
    """A plugin, its status, and the private core names its source uses."""

    name: str
    distribution: str
    version: str
    status: str
    reason: str
    private_names: list[PrivateNameRecord]


class AcceleratorFinding(TypedDict):
    """An accelerator: available here or why not."""

    name: str
    aliases: list[str]
    provider: str
    priority: int
    available: bool
    reason: str
    device_count: int | None


class RegisteredEnvironment(TypedDict):
    """A registered cluster environment with those of its variables that are set."""

    name: str
    provider: str
    priority: int
    description: str
    set: dict[str, str]


class ClusterReport(RankDescription):
    """The detected cluster environment (``name`` ``None``: a plain process), why, and the ranks it gives
    (:class:`~accelkit.environments.base.RankDescription`)."""

    name: str | None
    reason: str
    asked: list[str]
    registered: list[RegisteredEnvironment]
    problems: list[str]
    stale: NotRequired[str | None]


class DoctorReport(TypedDict):
    """What :func:`doctor_report` returns."""

    python: dict[str, str]
    packages: dict[str, str | None]
    plugins: list[PluginFinding]
    accelerators: list[AcceleratorFinding]
    auto: str | None
    environment: list[EnvironmentValue]
    cluster_environment: ClusterReport
    problems: list[str]
    warnings: list[str]


def _requirement_versions(distribution_name: str) -> list[RequirementFinding]:
    """The requirements of an installed distribution with the installed version of each (metadata only)."""
    from importlib import metadata

    from packaging.requirements import InvalidRequirement, Requirement

    try:
        requires = metadata.distribution(distribution_name).requires or []
    except metadata.PackageNotFoundError:
        return []
    found: list[RequirementFinding] = []
    for text in requires:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        # An optional extra's requirement is shown (its version matters) but is not required.
        optional = requirement.marker is not None and not requirement.marker.evaluate({"extra": ""})
        if optional and "extra" not in str(requirement.marker):
            continue  # a requirement for another platform or Python
        try:
            installed: str | None = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            installed = None
        ok = installed is not None and (not requirement.specifier or requirement.specifier.contains(
            installed, prereleases=True))
        if any(f["name"] == requirement.name for f in found):
            continue  # the same package named by several extras
        found.append({"name": requirement.name, "specifier": str(requirement.specifier), "installed": installed,
                      "satisfied": ok, "optional": optional})
    return found


def _environment_variables(manager: PluginManager) -> dict[str, str]:
    """Variable names (``PREFIX_*`` for prefixes) that the core and the plugins declare, with what each means."""
    names: dict[str, str] = {}
    for declared in reversed(manager.hook.accelkit_environment_variables()):  # the core's first
        if isinstance(declared, dict):
            names.update({str(k): str(v) for k, v in declared.items()})
        elif declared:
            names.update({str(k): "" for k in declared})
    return names


def _environment_values(names: dict[str, str]) -> list[EnvironmentValue]:

    values: list[EnvironmentValue] = []
    for name, description in names.items():
        if name.endswith("*"):
            prefix = name[:-1]
            matched = sorted(k for k in os.environ if k.startswith(prefix))
            for key in matched:
                values.append({"name": key, "value": os.environ[key], "description": description})
            if not matched:
                values.append({"name": name, "value": None, "description": description})
        else:
            values.append({"name": name, "value": os.environ.get(name), "description": description})
    return values


def _plugin_problem(info: PluginInfo) -> str | None:
    """The doctor's sentence for a plugin that is not loaded, saying what happened and what fixes it."""
    from accelkit.plugins.manager import BLOCK_ENV

    block = f"block it with {BLOCK_ENV}={info.name}"
    if info.status == "duplicate":
        return f"plugin {info.name!r} of {info.provider} is not loaded: {info.reason}."
    if info.status == "incompatible":
        return f"plugin {info.name!r} ({info.provider}) is incompatible: {info.reason}."
    if info.status != "failed":
        return None
    if info.failed_in == "import":
        return (f"plugin {info.name!r} ({info.provider}) failed to import: {info.reason}. Fix: install what it needs "
                f"or reinstall it (`pip install --force-reinstall {info.distribution or info.name}`), or {block}.")
    what = (f"its hook {info.failed_in}() raised: {info.reason}" if info.failed_in.startswith("accelkit_") else
            f"it was refused when it registered: {info.reason}")
    return (f"plugin {info.name!r} ({info.provider}) is skipped because {what}. The other plugins keep working. "
            f"Fix: upgrade {info.distribution or 'it'} or report the error to its authors; until then {block}.")


def _plugin_findings(manager: PluginManager, packages: dict[str, str | None], problems: list[str]
                     ) -> list[PluginFinding]:
    """Every plugin with its status and the private core names its source uses, each one not loaded as a problem,
    and the plugin distributions' requirements (their installed versions into ``packages``, unmet ones as
    problems)."""
    from accelkit.plugins.private_names import private_core_names

    plugins: list[PluginFinding] = []
    for info in sorted(manager.infos.values(), key=lambda i: (i.name, i.status)):
        plugins.append({"name": info.name, "distribution": info.distribution, "version": info.version,
                        "status": info.status, "reason": info.reason,
                        "private_names": [use.as_dict() for use in private_core_names(info.plugin)]})
        problem = _plugin_problem(info)
        if problem:
            problems.append(problem)
        if not info.distribution or info.status == "duplicate":
            continue
        packages[info.distribution] = info.version
        for req in _requirement_versions(info.distribution):
            if req["optional"] and req["installed"] is None:
                continue
            packages.setdefault(req["name"], req["installed"])
            if not req["satisfied"]:
                have = f"{req['installed']} is installed" if req["installed"] else "it is not installed"
                problems.append(f"{info.distribution} requires {req['name']}{req['specifier']} but {have}. Fix: "
                                f"`pip install '{req['name']}{req['specifier']}'`.")
    return plugins


def _accelerator_findings(registry: Registry, problems: list[str]) -> tuple[list[AcceleratorFinding], str | None]:
    """Each accelerator in the order ``"auto"`` tries them: available or why not; and what ``"auto"`` picks."""
    accelerators: list[AcceleratorFinding] = []
    auto: str | None = None
    for record in registry.accelerator_records():
        entry: AcceleratorFinding = {"name": record.name, "aliases": list(record.aliases), "provider": record.provider,
                                     "priority": record.priority, "available": False, "reason": "",
                                     "device_count": None}
        try:
            cls = cast("type[Accelerator]", record.load())  # an accelerator record names an Accelerator subclass
            entry["available"] = bool(cls.is_available())
            entry["reason"] = "" if entry["available"] else (cls.unavailable_reason() or "not available")
            entry["device_count"] = int(cls.device_count()) if entry["available"] else None
        except Exception as exc:  # a broken accelerator class is a finding, not a crash
            entry["reason"] = f"could not be loaded: {type(exc).__name__}: {exc}"
            problems.append(f"accelerator {record.name!r} ({record.provider}) {entry['reason']}. Fix: reinstall "
                            f"its distribution.")
        if entry["available"] and auto is None:
            auto = record.name
        accelerators.append(entry)
    if auto is None:
        problems.append("no accelerator is available, so accelerator='auto' cannot run. Fix: "
                        "`pip install accelkit-cpu`.")
    return accelerators, auto


def doctor_report(manager: PluginManager | None = None) -> DoctorReport:
    """Everything ``accelkit doctor`` shows, as plain data. Starts no device runtime.

    :param manager: a :class:`~accelkit.plugins.manager.PluginManager`; a fresh one if omitted.
    :return: ``python``, ``packages`` (accelkit, torch, each plugin distribution and its requirements with the
        installed versions), ``plugins``, ``accelerators`` (availability, reason, device count, provider),
        ``auto`` (what ``accelerator="auto"`` picks), ``environment``, ``cluster_environment`` (the launcher
        environment detected, why, and the ranks it gives; ``name`` ``None`` for a plain process; ``stale``: the
        sentence saying its variables are stale when no launcher process runs this one; ``registered``:
        every cluster environment in detection order with the variables it reads that are set) and ``problems``
        (each with its fix); ``warnings``: what works today but may not tomorrow (a plugin using private core
        names, listed in its ``private_names``), which does not make the exit status 1.
    """
    import platform
    from importlib import metadata

    manager = manager or quiet_manager()
    registry = manager.registry  # built first: a plugin whose registration hook raises is "failed" below
    problems: list[str] = []

    def version_of(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    packages: dict[str, str | None] = {name: version_of(name) for name in ("accelkit", "torch", "pluggy", "packaging")}
    plugins = _plugin_findings(manager, packages, problems)
    accelerators, auto = _accelerator_findings(registry, problems)
    environment = _environment_values(_environment_variables(manager))
    launcher = [name for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK") if name in os.environ]
    if launcher and len(launcher) < 3:
        missing = sorted({"RANK", "WORLD_SIZE", "LOCAL_RANK"} - set(launcher))
        problems.append(f"{', '.join(launcher)} set without {', '.join(missing)}: a half-configured launcher "
                        "environment. Fix: start processes with torchrun (which sets all three) or unset them.")
    for found in manager.hook.accelkit_diagnose(environ=dict(os.environ)):
        problems.extend(found or [])
    cluster = _cluster_environment_report(manager, registry, problems)
    warnings = [f"plugin {p['name']!r} ({p['distribution'] or 'not from a distribution'}) "
                f"{private_names_sentence(p['private_names'])}" for p in plugins if p["private_names"]]

    return {
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation(),
                   "executable": sys.executable, "platform": platform.platform()},
        "packages": packages,
        "plugins": plugins,
        "accelerators": accelerators,
        "auto": auto,
        "environment": environment,
        "cluster_environment": cluster,
        "problems": problems,
        "warnings": warnings,
    }


def _registered_environments(registry: Registry, problems: list[str]) -> list[RegisteredEnvironment]:
    """Every registered cluster environment in detection order, with those of its variables that are set."""
    from accelkit.environments.detection import environment_class

    registered: list[RegisteredEnvironment] = []
    for record in registry.cluster_environment_records():
        entry: RegisteredEnvironment = {"name": record.name, "provider": record.provider, "priority": record.priority,
                                        "description": record.description, "set": {}}
        try:
            variables = environment_class(record).variables
        except Exception as exc:  # noqa: BLE001 - a broken environment class is a finding, not a crash
            problems.append(f"cluster environment {record.name!r} ({record.provider}) cannot be imported: "
                            f"{type(exc).__name__}: {exc}")
            variables = {}
        entry["set"] = {name: os.environ[name] for name in variables if name in os.environ}
        registered.append(entry)
    return registered


def _cluster_environment_report(manager: PluginManager, registry: Registry, problems: list[str]) -> ClusterReport:
    """Which launcher's environment describes this process (``accelkit.environments.base``), and why."""
    from accelkit.environments.detection import detect_cluster_environment

    report: ClusterReport = {"name": None, "reason": "none: a plain process (no launcher's variables are set)",
                              "asked": registry.cluster_environment_names(),
                              "registered": _registered_environments(registry, problems), "problems": []}
    try:
        found = detect_cluster_environment(manager)
    except Exception as exc:  # noqa: BLE001 - a broken or doubly claimed environment is a finding, not a crash
        report["reason"] = f"detection failed: {exc}"
        problems.append(f"cluster environment detection failed: {exc}")
        return report
    if found is not None:
        # the description's keys are the report's; only the report's name may be None (no environment found)
        report.update(cast(ClusterReport, found.describe()))
        problems.extend(f"{p} Fix: correct the launcher's variables or start the script with the launcher."
                        for p in report["problems"])
        report["stale"] = found.stale_variables()  # usable values, but no launcher stands behind them
        if report["stale"]:
            problems.append(report["stale"])
    return report


def doctor_command(args: argparse.Namespace) -> int:
    """``accelkit doctor [--json]``: exit status 1 when a problem was found."""
    import json

    report = doctor_report(manager_of(args))
    if args.json:
        print(json.dumps(report, indent=2))
        return 1 if report["problems"] else 0
    py = report["python"]
    print(f"Python {py['version']} ({py['implementation']}) at {py['executable']}")
    print(f"Platform {py['platform']}")
    print("\nPackages:")
    for name, version in report["packages"].items():
        print(f"  {name:<28} {version or 'not installed'}")
    print("\nPlugins:")
    for plugin in report["plugins"]:
        origin = f"{plugin['distribution']} {plugin['version']}".strip()
        print(f"  {plugin['name']:<20} {plugin['status']:<13} {origin}"
              + (f"  ({plugin['reason']})" if plugin["reason"] else ""))
    if not report["plugins"]:
        print("  none installed (`pip install accelkit-cpu`)")
    print("\nAccelerators (highest priority first):")
    for acc in report["accelerators"]:
        state = f"available, {acc['device_count']} device(s)" if acc["available"] else f"unavailable: {acc['reason']}"
        print(f"  {acc['name']:<12} {state}   [{acc['provider']}, priority {acc['priority']}]")
    print(f"  accelerator='auto' picks: {report['auto'] or 'nothing'}")
    print("\nEnvironment:")
    for var in report["environment"]:
        value = "(unset)" if var["value"] is None else var["value"]
        print(f"  {var['name']:<26} {value:<20} {var['description']}")
    cluster = report["cluster_environment"]
    print("\nCluster environment (asked in order: " + (", ".join(cluster["asked"]) or "none registered") + "):")
    print(f"  {cluster['name']}: {cluster['reason']}" if cluster["name"] else f"  {cluster['reason']}")
    if cluster["name"] and not cluster["problems"]:
        print(f"  rank {cluster['global_rank']} of {cluster['world_size']} (local rank {cluster['local_rank']} of "
              f"{cluster['local_world_size']}, node {cluster['node_rank']} of {cluster['num_nodes']}), rendezvous "
              f"{cluster['main_address']}:{cluster['main_port']}")
    for env in cluster["registered"]:
        shown = ", ".join(f"{k}={v}" for k, v in env["set"].items()) or "none of its variables set"
        print(f"    {env['name']:<10} priority {env['priority']:<3} [{env['provider']}] {env['description']}: {shown}")
    if report["warnings"]:
        print("\nWarnings:")
    for warning in report["warnings"]:
        print(f"  - {warning}")
    print("\nProblems:" if report["problems"] else "\nNo problems found.")
    for problem in report["problems"]:
        print(f"  - {problem}")
    return 1 if report["problems"] else 0
