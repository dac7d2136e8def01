"""The plugin manager: entry-point discovery of real (tiny) distributions in a subprocess, failures that
surface only when needed, blocking, autoload off, name conflicts, ACCELKIT_API checks, misspelt hooks."""

from __future__ import annotations

import pytest

import accelkit
from accelkit.errors import PluginConflictError, PluginError
from accelkit.hookspecs import HOOK_API_VERSION
from accelkit.plugins.manager import BLOCKED, FAILED, INCOMPATIBLE, LOADED, PluginManager
from accelkit.plugins.registry import CORE_PROVIDER
from accelkit.records import (
    AcceleratorRecord,
    CallbackRecord,
    CommandRecord,
    LoggerRecord,
    PrecisionRecord,
    ProfilerRecord,
    StrategyRecord,
    by_priority,
)

# A plugin module that provides an available accelerator named after the plugin, with the core's
# single-device strategy and 32-bit precision for it. {name} and {api} are filled in.
PROVIDER = '''
from accelkit import Accelerator, hookimpl
from accelkit.records import AcceleratorRecord, PrecisionRecord, StrategyRecord
{api}

class Acc(Accelerator):
    name = "{name}"

    def device(self, index):
        import torch
        return torch.device("cpu")

@hookimpl
def accelkit_register_accelerators():
    return [AcceleratorRecord("{name}", Acc)]

@hookimpl
def accelkit_register_strategies():
    return [StrategyRecord("single_device", "accelkit.strategies.single_device:SingleDeviceStrategy",
                           accelerators=("{name}",))]

@hookimpl
def accelkit_register_precisions():
    return [PrecisionRecord("32-true", "accelkit.precision:Precision", accelerators=("{name}",))]
'''

API = 'ACCELKIT_API = ">=1.0,<2"'

# Code run in the subprocess before each scenario: helpers to capture what happens.
PRELUDE = '''
import json, sys, warnings
import accelkit
from accelkit.plugins.manager import PluginManager

def attempt(**kwargs):
    """Build a Trainer; return what happened as a JSON-able dict."""
    try:
        trainer = accelkit.Trainer(logger=False, enable_progress_bar=False, **kwargs)
    except Exception as exc:
        cause = exc.__cause__
        return {"error": type(exc).__name__, "message": str(exc),
                "cause": None if cause is None else [type(cause).__name__, str(cause)]}
    return {"accelerator": trainer.config.accelerator, "strategy": trainer.config.strategy}

def infos(manager):
    return {name: {"status": i.status, "reason": i.reason, "distribution": i.distribution, "version": i.version,
                   "error": None if i.error is None else type(i.error).__name__}
            for name, i in manager.infos.items()}
'''


def _acme_site(site, make):
    """Write eight real distributions of accelkit plugins into ``site`` (a directory for ``sys.path``)."""
    make(site, "acme-good", "1.2.0", {"good": "acme_good"}, {"acme_good": PROVIDER.format(name="goodacc", api=API)})
    make(site, "acme-broken", "0.3.0", {"broken": "acme_broken"},
         {"acme_broken": "import acme_runtime_that_is_not_installed\nACCELKIT_API = '>=1.0'\n"})
    make(site, "acme-blockme", "1.0.0", {"blockme": "acme_blockme"},
         {"acme_blockme": PROVIDER.format(name="blockme", api=API)})
    make(site, "acme-old", "0.1.0", {"old": "acme_old"},
         {"acme_old": PROVIDER.format(name="old", api='ACCELKIT_API = ">=0.1,<1"')})
    make(site, "acme-noapi", "1.0.0", {"noapi": "acme_noapi"}, {"acme_noapi": PROVIDER.format(name="noapi", api="")})
    make(site, "acme-typo", "1.0.0", {"typo": "acme_typo"},
         {"acme_typo": PROVIDER.format(name="typo", api=API).replace(
             "def accelkit_register_accelerators", "def accelkit_register_acclerators")})
    # two distributions claiming the accelerator name "twin"
    make(site, "acme-one", "1.0.0", {"one": "acme_one"}, {"acme_one": PROVIDER.format(name="twin", api=API)})
    make(site, "acme-two", "2.0.0", {"two": "acme_two"}, {"acme_two": PROVIDER.format(name="twin", api=API)})
    return site


@pytest.fixture(scope="module")
def observed(tmp_path_factory, make_distribution, run_python):
    """One subprocess that discovers the acme distributions through importlib.metadata, in three setups.

    Module-scoped because starting an interpreter that imports torch costs seconds.
    """
    site = _acme_site(tmp_path_factory.mktemp("acme") / "site", make_distribution)
    return run_python(PRELUDE + '''
import os
out = {}

# 1. discovery off: nothing is imported, and only plugins passed explicitly count
os.environ["ACCELKIT_DISABLE_PLUGIN_AUTOLOAD"] = "1"
manager = PluginManager()
out["off"] = {"infos": infos(manager), "imported": sorted(m for m in sys.modules if m.startswith("acme_")),
              "cpu": attempt(accelerator="cpu"),
              "explicit": attempt(accelerator="cpu", plugins=[__import__("accelkit_cpu.plugin").plugin])}
del os.environ["ACCELKIT_DISABLE_PLUGIN_AUTOLOAD"]

# 2. discovery on, "blockme" (and "one", to avoid the conflict) blocked through the environment
os.environ["ACCELKIT_BLOCK_PLUGINS"] = "BlockMe, unrelated,one"
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    manager = PluginManager()
on = out["on"] = {"infos": infos(manager), "warnings": [str(w.message) for w in caught],
                  "blocked_imported": "acme_blockme" in sys.modules,
                  "registry": manager.registry.accelerator_names()}
for name in ("cpu", "goodacc", "broken", "blockme", "old", "noapi", "typo"):
    on[name] = attempt(accelerator=name)
on["no:good"] = attempt(accelerator="goodacc", plugins=["no:good"])

# 3. both "twin" distributions loaded
os.environ["ACCELKIT_BLOCK_PLUGINS"] = "blockme"
out["twin"] = {"both": attempt(accelerator="twin"), "one_blocked": attempt(accelerator="twin", plugins=["no:one"]),
               "other": attempt(accelerator="cpu")}
print(json.dumps(out))
''', path=[site])


@pytest.fixture
def discovered(observed):
    """What the manager saw with discovery on and 'blockme' blocked through the environment."""
    return observed["on"]


def test_entry_points_are_discovered_with_their_distribution(discovered):
    good = discovered["infos"]["good"]
    assert (good["status"], good["distribution"], good["version"]) == (LOADED, "acme-good", "1.2.0")
    assert "goodacc" in discovered["registry"]
    assert discovered["goodacc"] == {"accelerator": "goodacc", "strategy": "single_device"}


def test_a_plugin_that_fails_to_import_is_recorded_and_skipped(discovered):
    broken = discovered["infos"]["broken"]
    assert broken["status"] == FAILED and broken["error"] == "ModuleNotFoundError"
    assert "acme_runtime_that_is_not_installed" in broken["reason"]
    assert any("'broken'" in w and "acme-broken 0.3.0" in w and "skipped" in w for w in discovered["warnings"])
    # asking for something else works
    assert discovered["cpu"]["accelerator"] == "cpu"


def test_the_import_error_surfaces_when_its_name_is_asked_for(discovered):
    asked = discovered["broken"]
    assert asked["error"] == "PluginError"
    assert "'broken'" in asked["message"] and "acme-broken 0.3.0" in asked["message"]
    assert asked["cause"][0] == "ModuleNotFoundError"  # the original exception is chained
    assert "acme_runtime_that_is_not_installed" in asked["cause"][1]


def test_blocked_through_the_environment(discovered):
    assert discovered["infos"]["blockme"]["status"] == BLOCKED
    assert discovered["blocked_imported"] is False  # a blocked plugin is not even imported
    asked = discovered["blockme"]
    assert asked["error"] == "ConfigurationError"
    assert "'blockme'" in asked["message"] and "blocked" in asked["message"]
    assert "acme-blockme 1.0.0" in asked["message"]


def test_blocked_through_trainer_plugins_no_name(discovered):
    asked = discovered["no:good"]
    assert asked["error"] == "ConfigurationError"
    assert "'goodacc' is not available" in asked["message"]
    assert "blocked" in asked["message"]


def test_an_incompatible_api_range_is_skipped_with_a_reason(discovered):
    old = discovered["infos"]["old"]
    assert old["status"] == INCOMPATIBLE
    assert old["reason"] == (  # capped below the running version: the plugin must move, not accelkit
        f"acme-old supports hook API >=0.1,<1; this accelkit provides {HOOK_API_VERSION}: install a release of "
        f"acme-old that supports hook API {HOOK_API_VERSION} (upgrading accelkit cannot help), or an accelkit whose "
        "hook API it supports")
    asked = discovered["old"]
    assert asked["error"] == "ConfigurationError" and "incompatible" in asked["message"]


def test_a_missing_api_declaration_is_skipped_with_a_reason(discovered):
    noapi = discovered["infos"]["noapi"]
    assert noapi["status"] == INCOMPATIBLE and "ACCELKIT_API" in noapi["reason"]
    assert "noapi" not in discovered["registry"]


def test_a_misspelt_hook_in_an_installed_plugin_is_rejected(discovered):
    typo = discovered["infos"]["typo"]
    assert typo["status"] == FAILED
    assert "accelkit_register_acclerators" in typo["reason"]
    assert "accelkit_register_accelerators" in typo["reason"]  # the suggestion
    asked = discovered["typo"]
    assert asked["error"] == "PluginError" and asked["cause"][0] == "PluginError"


def test_conflicting_names_from_two_distributions(observed):
    out = observed["twin"]
    assert out["both"]["error"] == "PluginConflictError"
    message = out["both"]["message"]
    assert "'twin'" in message and "acme-one 1.0.0" in message and "acme-two 2.0.0" in message
    assert "ACCELKIT_BLOCK_PLUGINS" in message  # says what to do
    assert out["one_blocked"] == {"accelerator": "twin", "strategy": "single_device"}
    assert "ACCELKIT_BLOCK_PLUGINS=one" in message and "ACCELKIT_BLOCK_PLUGINS=two" in message  # the exact values
    assert out["other"] == {"accelerator": "cpu", "strategy": "single_device"}  # runs not using 'twin' work


def test_autoload_can_be_disabled(observed):
    out = observed["off"]
    assert out["infos"] == {} and out["imported"] == []
    assert out["cpu"]["error"] == "ConfigurationError"
    assert "'cpu' is not available" in out["cpu"]["message"]
    assert "ACCELKIT_DISABLE_PLUGIN_AUTOLOAD" in out["cpu"]["message"]
    assert out["explicit"] == {"accelerator": "cpu", "strategy": "single_device"}


# ---------------------------------------------------------------------------------------- in process
class Provider:
    """A plugin object registering an accelerator, a strategy and a precision under given names."""

    ACCELKIT_API = ">=1.0,<2"

    def __init__(self, accelerator="acme", strategies=("acme_spawn",), accelerators=("acme",), aliases=()):
        self.acc, self.strategies, self.scope, self.aliases = accelerator, strategies, accelerators, aliases

    @accelkit.hookimpl
    def accelkit_register_accelerators(self):
        if not self.acc:
            return []
        return [AcceleratorRecord(self.acc, "accelkit.accelerator:Accelerator", aliases=self.aliases)]

    @accelkit.hookimpl
    def accelkit_register_strategies(self):
        return [StrategyRecord(s, "accelkit.strategies.single_device:SingleDeviceStrategy", accelerators=self.scope)
                for s in self.strategies]


def test_a_misspelt_hook_is_rejected_at_registration(isolated):
    class Typo:
        ACCELKIT_API = ">=1.0,<2"

        @accelkit.hookimpl
        def accelkit_validate_configs(self, config):
            return ["never called"]

    manager = PluginManager()
    with pytest.raises(PluginError, match="accelkit_validate_configs") as info:
        manager.add_plugin(Typo(), name="typo")
    assert "Did you mean 'accelkit_validate_config'?" in str(info.value.__cause__)
    assert manager.get_plugin("typo") is None and manager.infos["typo"].status == FAILED


def test_a_wrong_hook_argument_is_rejected_at_registration(isolated):
    class BadArgument:
        ACCELKIT_API = ">=1.0,<2"

        @accelkit.hookimpl
        def accelkit_validate_config(self, configuration):
            return None

    with pytest.raises(PluginError, match="configuration"):
        PluginManager().add_plugin(BadArgument())


@pytest.mark.parametrize("api, words", [(None, ["declares no ACCELKIT_API"]), (">=2", [">=2", HOOK_API_VERSION]),
                                        ("<1.0", ["<1.0", HOOK_API_VERSION]), ("banana", ["'banana'", "not a valid"])])
def test_plugin_objects_with_an_unusable_api_declaration_are_refused(isolated, api, words):
    class Plugin(Provider):
        ACCELKIT_API = api

    manager = PluginManager()
    with pytest.raises(PluginError, match="incompatible") as info:
        manager.add_plugin(Plugin())
    for word in words:
        assert word in str(info.value)
    assert "acme" not in manager.registry.accelerator_names()


@pytest.mark.parametrize("api, side", [
    (">=1.0,<1.1", "install a release of plugin 'capped' that supports hook API {v} (upgrading accelkit cannot help), "
                   "or an accelkit whose hook API it supports"),
    (">=9.1,<10", "upgrade accelkit (`pip install -U accelkit`), or install a release of plugin 'capped' that "
                  "supports hook API {v}")])
def test_the_incompatibility_reason_says_which_side_must_move(isolated, api, side):
    class Plugin(Provider):
        ACCELKIT_API = api

    with pytest.raises(PluginError) as info:
        PluginManager().add_plugin(Plugin(), name="capped")
    verb = "supports" if api.startswith(">=1.0") else "needs"
    assert str(info.value) == (f"plugin 'capped' is incompatible: plugin 'capped' {verb} hook API {api}; this accelkit "
                               f"provides {HOOK_API_VERSION}: " + side.format(v=HOOK_API_VERSION))


@pytest.mark.parametrize("api", [">=1.0,<2", ">=1", "==1.*", "~=1.0"])
def test_compatible_api_ranges_load(isolated, api):
    class Plugin(Provider):
        ACCELKIT_API = api

    manager = PluginManager()
    assert manager.add_plugin(Plugin()).status == LOADED
    assert "acme" in manager.registry.accelerator_names()


def test_two_plugin_objects_claiming_a_name_conflict(isolated):
    manager = PluginManager()
    manager.add_plugin(Provider(), name="first")
    manager.add_plugin(Provider(accelerator="other", aliases=("acme",), strategies=()), name="second")
    with pytest.warns(RuntimeWarning, match="'acme' is claimed by both"):
        registry = manager.registry  # built: only runs that ask for 'acme' fail
    assert "other" in registry.accelerators and "acme" not in registry.accelerators
    from accelkit.plugins.compose import compose

    with pytest.raises(PluginConflictError) as info:
        compose(manager, accelerator="acme")
    assert "'acme'" in str(info.value) and "'first'" in str(info.value) and "'second'" in str(info.value)
    assert "remove one of the plugin objects from Trainer(plugins=[...])" in str(info.value)


def test_a_strategy_name_may_be_shared_across_accelerators(isolated):
    manager = PluginManager()
    manager.add_plugin(Provider(strategies=("spawn",), accelerators=("acme",)), name="first")
    manager.add_plugin(Provider(accelerator="beta", strategies=("spawn",), accelerators=("beta",)), name="second")
    registry = manager.registry
    assert registry.find_scoped(registry.strategies, "spawn", "acme").provider == "plugin 'first'"
    assert registry.find_scoped(registry.strategies, "SPAWN", "beta").provider == "plugin 'second'"
    manager.add_plugin(Provider(accelerator=None, strategies=("spawn",), accelerators=None), name="third")
    with pytest.warns(RuntimeWarning, match="strategy name 'spawn'"):
        registry = manager.registry
    with pytest.raises(PluginConflictError, match="strategy name 'spawn'"):
        registry.find_scoped(registry.strategies, "spawn", "acme")


def test_a_name_and_its_alias_spelt_alike_are_one_record(isolated):
    class Spellings:
        ACCELKIT_API = ">=1.0,<2"

        @accelkit.hookimpl
        def accelkit_register_precisions(self):
            return [PrecisionRecord("acme-true", "accelkit.precision:Precision", aliases=("acme_true", "ACME-TRUE"),
                                    accelerators=("acme",))]

    manager = PluginManager()
    manager.add_plugin(Spellings())
    registry = manager.registry
    assert registry.precision_names("acme") == ["acme-true"]
    assert registry.find_scoped(registry.precisions, " Acme_True ", "acme").name == "acme-true"


def test_blocked_argument_and_environment_combine(monkeypatch):
    monkeypatch.setenv("ACCELKIT_BLOCK_PLUGINS", " Alpha ,, beta-one")
    manager = PluginManager(blocked=["Gamma"], autoload=False)
    assert manager.blocked == {"alpha", "beta_one", "gamma"}
    assert manager.autoload is False


def test_adding_the_same_object_twice_is_harmless(isolated):
    manager = PluginManager()
    plugin = Provider()
    first = manager.add_plugin(plugin, name="p")
    assert manager.add_plugin(plugin, name="p") is first
    assert manager.registry.accelerator_names() == ["acme"]


def test_configure_hook_receives_the_manager_even_when_registered_late(isolated):
    class Configured:
        ACCELKIT_API = ">=1.0,<2"
        seen = []

        @accelkit.hookimpl
        def accelkit_configure(self, manager):
            Configured.seen.append(manager)

    manager = PluginManager()
    manager.add_plugin(Configured())
    assert Configured.seen == [manager]


def test_a_misspelt_blocked_name_warns_naming_the_installed_plugins(monkeypatch):
    monkeypatch.delenv("ACCELKIT_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.setenv("ACCELKIT_BLOCK_PLUGINS", "cpuu")
    with pytest.warns(RuntimeWarning, match=r"'cpuu' match no installed plugin \(installed: .*cpu"):
        manager = PluginManager()
    assert manager.infos["cpu"].status == "loaded"


# ------------------------------------------------------------------------------ the one registry (issue 15, item 5)
class Claims:
    """A plugin object registering a logger and a command under given names."""

    ACCELKIT_API = ">=1.2,<2"

    def __init__(self, logger="notebook", command="hello"):
        self.logger, self.command = logger, command

    @accelkit.hookimpl
    def accelkit_register_loggers(self):
        return [LoggerRecord(self.logger, "accelkit.loggers.csv_logs:CSVLogger")]

    @accelkit.hookimpl
    def accelkit_register_commands(self):
        return [CommandRecord(self.command, "a test command", run=lambda args: 0)]


def test_blocking_is_pluggys_own(isolated):
    import pluggy

    manager = PluginManager(blocked=["Acme-One"], autoload=False)
    assert pluggy.PluginManager.is_blocked(manager, "acme_one")  # held in pluggy's own block list
    assert manager.is_blocked("ACME-one") and manager.blocked == {"acme_one"}
    assert manager.register(Provider(), name="acme_one") is None  # pluggy refuses to register a blocked name
    assert manager.add_plugin(Provider(), name="acme_one").status == BLOCKED


def test_records_are_sorted_by_one_key_written_once():
    import re
    from pathlib import Path

    records = [AcceleratorRecord("b", "m:B", priority=1), AcceleratorRecord("a", "m:A", priority=1),
               AcceleratorRecord("c", "m:C", priority=5)]
    assert [r.name for r in by_priority([*records, records[0]])] == ["c", "a", "b"]  # each once; ties by name
    core = Path(accelkit.__file__).parent
    own_sorts = [str(p.relative_to(core)) for p in core.rglob("*.py")
                 if p.name != "records.py" and re.search(r"-\s*\w+\.priority", p.read_text())]
    assert own_sorts == []  # every other module asks records.by_priority / Registry for the order


def test_loggers_and_commands_are_records_of_the_one_registry(isolated):
    registry = PluginManager().registry
    assert registry.find_logger("TB").name == "tensorboard" and registry.find_logger("csv").provider == CORE_PROVIDER
    assert [r.name for r in registry.command_records()] == ["fit", "validate", "test", "predict", "plugins",
                                                            "doctor", "run", "checkpoint"]
    assert registry.find_named(registry.commands, "Doctor").provider == CORE_PROVIDER
    assert registry.cluster_environment_names()[0] == "torchrun"  # the highest priority


def test_a_logger_name_claimed_twice_is_a_conflict_like_any_other(isolated):
    manager = PluginManager()
    manager.add_plugin(Claims(command="one"), name="first")
    manager.add_plugin(Claims(command="two"), name="second")
    with pytest.warns(RuntimeWarning, match="logger name 'notebook' is claimed by both"):
        registry = manager.registry
    with pytest.raises(PluginConflictError, match="'first'.*'second'"):
        registry.find_logger("notebook")
    assert registry.find_logger("csv").name == "csv"  # other names unaffected


def test_a_core_command_name_stays_the_cores_and_the_claim_is_reported(isolated):
    manager = PluginManager()
    manager.add_plugin(Claims(logger="nb", command="fit"), name="claimer")
    with pytest.warns(RuntimeWarning, match="command name 'fit' is claimed by both accelkit \\(core\\) and plugin "
                                            "'claimer'; it stays accelkit \\(core\\)'s"):
        registry = manager.registry
    assert registry.find_named(registry.commands, "fit").provider == CORE_PROVIDER
    assert any("'fit'" in c and "'claimer'" in c for c in manager.conflicts())


def test_a_raising_logger_hook_fails_its_plugin_like_every_registration_hook(isolated):
    class Broken(Claims):
        @accelkit.hookimpl
        def accelkit_register_loggers(self):
            raise OSError("tracker table missing")

    manager = PluginManager()
    manager.add_plugin(Broken(), name="broken")
    with pytest.warns(RuntimeWarning, match="tracker table missing"):
        registry = manager.registry
    info = manager.infos["broken"]
    assert info.status == FAILED and info.failed_in == "accelkit_register_loggers"
    assert "hello" not in registry.commands  # the whole plugin is out, not only its loggers


def test_a_command_record_refuses_what_cannot_run():
    with pytest.raises(ValueError, match="needs run="):
        CommandRecord("hello", "greets")
    with pytest.raises(ValueError, match="raw=True.*no add_arguments"):
        CommandRecord("hello", "greets", add_arguments="m:f", run="m:g", raw=True)
    with pytest.raises(ValueError, match="'--hello' is not a command word"):
        CommandRecord("--hello", "greets", run="m:g")
    assert CommandRecord(" Hello ", "greets", run="m:g", aliases=("Hi",)).names == ("hello", "hi")


class Extras:
    """A plugin object naming a callback and a profiler (hook API 1.3)."""

    ACCELKIT_API = ">=1.3,<2"

    @accelkit.hookimpl
    def accelkit_register_callbacks(self):
        return [CallbackRecord("lr_monitor_lite", "accelkit.callbacks:Callback", aliases=("lrlite",))]

    @accelkit.hookimpl
    def accelkit_register_profilers(self):
        return [ProfilerRecord("passthrough", "accelkit.profilers:PassThroughProfiler")]


def test_callbacks_and_profilers_are_built_by_name_with_did_you_mean(isolated, cpu_plugin, tmp_path):
    options = dict(accelerator="cpu", logger=False, enable_progress_bar=False, enable_checkpointing=False,
                   enable_model_summary=False, default_root_dir=tmp_path, plugins=[cpu_plugin, Extras()])
    trainer = accelkit.Trainer(callbacks=["LRLite", accelkit.Callback()], profiler="passthrough", **options)
    assert [type(c).__name__ for c in trainer.callbacks] == ["Callback", "Callback"]
    assert type(trainer.profiler).__name__ == "PassThroughProfiler"
    assert accelkit.Trainer(profiler="simple", **options).profiler.__class__.__name__ == "SimpleProfiler"  # the core's
    with pytest.raises(accelkit.ConfigurationError) as info:
        accelkit.Trainer(profiler="pasthrough", **options)
    assert str(info.value) == ("profiler 'pasthrough' is not a registered profiler. Did you mean 'passthrough'? "
                               "Registered profilers: passthrough, simple, pytorch; or pass an instance in profiler=.")
    with pytest.raises(accelkit.ConfigurationError) as info:
        accelkit.Trainer(callbacks="lr_monitor_lit", **options)
    assert str(info.value) == ("callback 'lr_monitor_lit' is not a registered callback. Did you mean "
                               "'lr_monitor_lite'? Registered callbacks: lr_monitor_lite; or pass an instance in "
                               "callbacks=[...].")


# ------------------------------------------------------------------------ a passive registry (issue 25, item 5)
def test_the_registry_module_does_not_import_the_manager():
    import ast
    from pathlib import Path

    import accelkit.plugins.registry as registry_module

    tree = ast.parse(Path(registry_module.__file__).read_text())
    imported = {f"{node.module}.{alias.name}" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                for alias in node.names}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert "accelkit.plugins.builtin" in imported  # what it does import is seen
    manager_names = {"accelkit.plugins.manager", "accelkit.plugins.PluginManager", "accelkit.plugins.PluginInfo"}
    assert not {name for name in imported if name.startswith("accelkit.plugins.manager.")} | (
        manager_names & imported)  # not even under TYPE_CHECKING
    called = {node.func.attr for node in ast.walk(tree)
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}
    assert not {"mark_failed", "info_of", "provider_of", "get_name", "list_name_plugin"} & called


def test_the_registry_is_built_from_plain_records_and_returns_what_it_leaves_out():
    from accelkit.plugins.registry import Contribution, HookResult, Registry

    good, bad = object(), object()
    registered = HookResult("accelkit_register_loggers", "good.accelkit_register_loggers()",
                            (LoggerRecord("notebook", "accelkit.loggers.csv_logs:CSVLogger"),))
    wrong = HookResult("accelkit_register_commands", "bad.accelkit_register_commands()", ("not a record",))
    registry, failures = Registry.assemble([Contribution(good, "good", "plugin 'good'", "", (registered,)),
                                            Contribution(bad, "bad", "plugin 'bad'", "bad", (wrong,))])
    assert registry.find_logger("notebook").provider == "plugin 'good'"
    assert list(registry.provided) == ["good"]  # the failing plugin contributes nothing
    [failure] = failures
    assert failure.plugin is bad and failure.hook == "accelkit_register_commands"
    assert isinstance(failure.error, TypeError) and "'not a record'" in str(failure.error)


def test_a_plugin_registered_or_unregistered_after_a_first_look_up_is_seen_at_the_next(isolated):
    manager = PluginManager()
    assert "hello" not in manager.registry.commands  # the first look-up builds the registry
    plugin = Claims()
    assert manager.register(plugin, name="claims") == "claims"  # pluggy's own register, not add_plugin
    assert manager.registry.find_named(manager.registry.commands, "hello") is not None
    info = manager.add_plugin(Claims(logger="notebook_two", command="bye"), name="claims_two")
    assert info.status == LOADED and "bye" in manager.registry.commands
    manager.unregister(info.plugin)
    assert "bye" not in manager.registry.commands and "hello" in manager.registry.commands
    assert info.status == "unregistered" and info.plugin is None and info.hooks == []
    assert "unregister" in info.reason


def test_a_plugin_blocked_or_unblocked_after_a_first_look_up_is_seen_at_the_next(isolated):
    manager = PluginManager()
    info = manager.add_plugin(Claims(), name="claims")
    assert "hello" in manager.registry.commands and info.status == LOADED
    assert "accelkit_register_commands" in info.hooks
    manager.set_blocked("claims")  # pluggy unregisters it and refuses it from now on
    assert "hello" not in manager.registry.commands
    assert info.status == BLOCKED and info.plugin is None and "no:claims" in info.reason
    assert manager.register(Claims(), name="claims") is None and "hello" not in manager.registry.commands
    assert manager.unblock("claims")
    assert manager.register(Claims(command="again"), name="claims") == "claims"
    assert "again" in manager.registry.commands and info.status == LOADED


def test_a_failing_registration_hook_reports_its_plugin_failed_in_one_place(isolated):
    class Counting(Claims):
        calls = 0

        @accelkit.hookimpl
        def accelkit_register_loggers(self):
            Counting.calls += 1
            return super().accelkit_register_loggers()

    class Broken(Claims):
        @accelkit.hookimpl
        def accelkit_register_commands(self):
            raise OSError("command table missing")

    manager = PluginManager()
    manager.add_plugin(Counting(), name="counting")
    broken = Broken(logger="broken_logger", command="broken_command")
    manager.add_plugin(broken, name="broken")
    with pytest.warns(RuntimeWarning, match="'broken'.*command table missing"):
        registry = manager.registry
    [info] = manager.failures()
    assert info is manager.infos["broken"] and info.status == FAILED
    assert isinstance(info.error, OSError) and info.failed_in == "accelkit_register_commands"
    assert "broken.accelkit_register_commands() raised OSError: command table missing" == info.reason
    assert not manager.is_registered(broken) and info.plugin is None  # pluggy agrees: one status
    assert "broken_logger" not in registry.loggers and "broken" not in registry.provided
    assert Counting.calls == 1  # the other plugins' hooks ran once: nothing is built twice
    assert manager.registry is registry  # recording the failure left the registry it was found in


def test_registry_build_is_deprecated_and_gives_the_managers_registry(isolated):
    from accelkit.plugins.registry import Registry

    manager = PluginManager()
    with pytest.warns(DeprecationWarning, match="manager.registry"):
        assert Registry.build(manager) is manager.registry
