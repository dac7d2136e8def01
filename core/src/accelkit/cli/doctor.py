"""``accelkit plugins`` and ``accelkit doctor``: what is installed, and whether this machine can run it."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from accelkit.cli.commands import command


def _json_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")


def _quiet_manager() -> Any:
    """A :class:`~accelkit.plugins.manager.PluginManager` whose load failures are recorded, not printed as warnings."""
    import warnings

    from accelkit.plugins.manager import PluginManager

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return PluginManager()


def _records_of(manager: Any, plugin: Any) -> dict[str, list[dict[str, Any]]]:
    """What one loaded plugin registers, read from its own ``accelkit_register_*`` implementations."""
    provided: dict[str, list[dict[str, Any]]] = {"accelerators": [], "strategies": [], "precisions": [],
                                                 "loggers": []}
    hooks = (("accelerators", manager.hook.accelkit_register_accelerators),
             ("strategies", manager.hook.accelkit_register_strategies),
             ("precisions", manager.hook.accelkit_register_precisions),
             ("loggers", manager.hook.accelkit_register_loggers))
    for kind, hook in hooks:
        for impl in hook.get_hookimpls():
            if impl.plugin is not plugin:
                continue
            for record in impl.function() or []:
                entry: dict[str, Any] = {"name": record.name, "aliases": list(record.aliases),
                                         "description": record.description}
                if kind == "accelerators":
                    entry["priority"] = record.priority
                elif kind != "loggers":
                    entry["accelerators"] = None if record.accelerators is None else list(record.accelerators)
                provided[kind].append(entry)
    return provided


def plugin_report(manager: Any = None) -> dict[str, Any]:
    """Everything ``accelkit plugins`` shows, as plain data.

    :param manager: a :class:`~accelkit.plugins.manager.PluginManager`; a fresh one (with entry-point discovery) if omitted.
    :return: ``{"accelkit": version, "hook_api": version, "plugins": [...], "conflicts": [...]}``; each plugin
        has ``name``, ``distribution``, ``version``, ``status``, ``reason``, ``api``, ``hooks`` and ``provides``.
    """
    from accelkit.__about__ import __version__
    from accelkit.hookspecs import HOOK_API_VERSION

    manager = manager or _quiet_manager()
    plugins = []
    for info in sorted(manager.infos.values(), key=lambda i: i.name):
        entry: dict[str, Any] = {
            "name": info.name, "distribution": info.distribution, "version": info.version,
            "status": info.status, "reason": info.reason, "api": info.api, "hooks": list(info.hooks),
            "provides": {"accelerators": [], "strategies": [], "precisions": [], "loggers": []},
        }
        if info.status == "loaded":
            try:
                entry["provides"] = _records_of(manager, info.plugin)
            except Exception as exc:  # a plugin whose register hook raises is reported, not fatal
                entry["status"], entry["reason"] = "failed", f"its register hooks raised {type(exc).__name__}: {exc}"
        plugins.append(entry)
    conflicts = manager.conflicts()  # names claimed twice: each fails only the runs that use it
    return {"accelkit": __version__, "hook_api": HOOK_API_VERSION, "plugins": plugins, "conflicts": conflicts}


def _names(entries: list[dict[str, Any]], with_scope: bool) -> str:
    shown = []
    for entry in entries:
        text = entry["name"]
        if entry["aliases"]:
            text += f" (alias {', '.join(entry['aliases'])})"
        if "priority" in entry:
            text += f" [priority {entry['priority']}]"
        if with_scope and entry.get("accelerators"):
            text += f" [on {', '.join(entry['accelerators'])}]"
        shown.append(text)
    return ", ".join(shown) or "-"


@command("plugins", "list the installed plugins: status, what each provides, which hooks it implements",
         _json_arguments)
def _plugins(args: argparse.Namespace) -> int:
    import json

    report = plugin_report()
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"accelkit {report['accelkit']} (hook API {report['hook_api']}): {len(report['plugins'])} plugin(s)")
    for plugin in report["plugins"]:
        origin = f"{plugin['distribution']} {plugin['version']}".strip() or "(not from a distribution)"
        print(f"\n{plugin['name']}  [{plugin['status']}]  {origin}")
        if plugin["api"]:
            print(f"  ACCELKIT_API: {plugin['api']}")
        if plugin["reason"]:
            print(f"  reason: {plugin['reason']}")
        if plugin["status"] == "loaded":
            provides = plugin["provides"]
            print(f"  accelerators: {_names(provides['accelerators'], False)}")
            print(f"  strategies: {_names(provides['strategies'], True)}")
            print(f"  precisions: {_names(provides['precisions'], True)}")
            if provides["loggers"]:
                print(f"  loggers: {_names(provides['loggers'], False)}")
            print(f"  hooks: {', '.join(plugin['hooks']) or '-'}")
    for conflict in report["conflicts"]:
        print(f"\nconflict: {conflict}")
    return 1 if report["conflicts"] else 0


def _requirement_versions(distribution_name: str) -> list[dict[str, Any]]:
    """The requirements of an installed distribution with the installed version of each (metadata only)."""
    from importlib import metadata

    from packaging.requirements import InvalidRequirement, Requirement

    try:
        requires = metadata.distribution(distribution_name).requires or []
    except metadata.PackageNotFoundError:
        return []
    found = []
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


def _environment_variables(manager: Any) -> dict[str, str]:
    """Variable names (``PREFIX_*`` for prefixes) that the core and the plugins declare, with what each means."""
    names: dict[str, str] = {}
    for declared in reversed(manager.hook.accelkit_environment_variables()):  # the core's first
        if isinstance(declared, dict):
            names.update({str(k): str(v) for k, v in declared.items()})
        elif declared:
            names.update({str(k): "" for k in declared})
    return names


def _environment_values(names: dict[str, str]) -> list[dict[str, Any]]:

    values = []
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


def doctor_report(manager: Any = None) -> dict[str, Any]:
    """Everything ``accelkit doctor`` shows, as plain data. Starts no device runtime.

    :param manager: a :class:`~accelkit.plugins.manager.PluginManager`; a fresh one if omitted.
    :return: ``python``, ``packages`` (accelkit, torch, each plugin distribution and its requirements with the
        installed versions), ``plugins``, ``accelerators`` (availability, reason, device count, provider),
        ``auto`` (what ``accelerator="auto"`` picks), ``environment``, ``cluster_environment`` (the launcher
        environment detected, why, and the ranks it gives; ``name`` ``None`` for a plain process) and ``problems``
        (each with its fix).
    """
    import platform
    from importlib import metadata

    from accelkit.errors import PluginConflictError
    from accelkit.plugins.manager import BLOCK_ENV

    manager = manager or _quiet_manager()
    problems: list[str] = []

    def version_of(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    packages: dict[str, Any] = {name: version_of(name) for name in ("accelkit", "torch", "pluggy", "packaging")}
    plugins = []
    for info in sorted(manager.infos.values(), key=lambda i: i.name):
        plugins.append({"name": info.name, "distribution": info.distribution, "version": info.version,
                        "status": info.status, "reason": info.reason})
        if info.status == "failed":
            problems.append(f"plugin {info.name!r} ({info.provider}) failed to load: {info.reason}. Fix: reinstall "
                            f"it (`pip install --force-reinstall {info.distribution or info.name}`) or block it "
                            f"with {BLOCK_ENV}={info.name}.")
        elif info.status == "incompatible":
            problems.append(f"plugin {info.name!r} ({info.provider}) is incompatible: {info.reason}.")
        if not info.distribution:
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

    accelerators = []
    auto: str | None = None
    try:
        registry = manager.registry
    except PluginConflictError as exc:
        problems.append(f"{exc}.")
        registry = None
    if registry is not None:
        records = sorted({id(r): r for r in registry.accelerators.values()}.values(),
                         key=lambda r: (-r.priority, r.name))
        for record in records:
            entry: dict[str, Any] = {"name": record.name, "aliases": list(record.aliases),
                                     "provider": record.provider, "priority": record.priority,
                                     "available": False, "reason": "", "device_count": None}
            try:
                cls = record.load()
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

    environment = _environment_values(_environment_variables(manager))
    launcher = [name for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK") if name in os.environ]
    if launcher and len(launcher) < 3:
        missing = sorted({"RANK", "WORLD_SIZE", "LOCAL_RANK"} - set(launcher))
        problems.append(f"{', '.join(launcher)} set without {', '.join(missing)}: a half-configured launcher "
                        "environment. Fix: start processes with torchrun (which sets all three) or unset them.")
    for found in manager.hook.accelkit_diagnose(environ=dict(os.environ)):
        problems.extend(found or [])
    cluster = _cluster_environment_report(manager, registry, problems)

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
    }


def _cluster_environment_report(manager: Any, registry: Any, problems: list[str]) -> dict[str, Any]:
    """Which launcher's environment describes this process (``accelkit.environments.base``), and why."""
    from accelkit.environments.detection import detect_cluster_environment

    asked = registry.cluster_environment_names() if registry is not None else []
    report: dict[str, Any] = {"name": None, "reason": "none: a plain process (no launcher's variables are set)",
                              "asked": asked, "problems": []}
    if registry is None:
        return report
    try:
        found = detect_cluster_environment(manager)
    except Exception as exc:  # noqa: BLE001 - a broken or doubly claimed environment is a finding, not a crash
        report["reason"] = f"detection failed: {exc}"
        problems.append(f"cluster environment detection failed: {exc}")
        return report
    if found is not None:
        report.update(found.describe())
        problems.extend(f"{p} Fix: correct the launcher's variables or start the script with the launcher."
                        for p in report["problems"])
    return report


@command("doctor", "check this machine: versions, plugins, which accelerators are usable and why not, "
         "relevant environment, problems with their fixes", _json_arguments)
def _doctor(args: argparse.Namespace) -> int:
    import json

    report = doctor_report()
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
    print("\nProblems:" if report["problems"] else "\nNo problems found.")
    for problem in report["problems"]:
        print(f"  - {problem}")
    return 1 if report["problems"] else 0
