"""One bad plugin does not take the others down (issue 10): a registration hook that raises marks only its plugin
failed (runs, ``accelkit plugins`` and ``accelkit doctor`` go on and report it), a name claimed twice fails only the
runs that use it and prints the value that blocks one, hook-named functions without ``@hookimpl`` warn, plugin
modules reach spawned workers, precision instances keep their names, and install hints come from plugins."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch

import accelkit
from accelkit.errors import PluginConflictError, PluginError
from accelkit.plugins.manager import DUPLICATE, FAILED, LOADED, PluginManager, portable_plugins, resolve_plugins
from accelkit.precision import MixedPrecision, TruePrecision
from accelkit.records import AcceleratorRecord

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers.cli_runs import project_imports
from helpers.models import RegressionModule

PROVIDER = '''
from accelkit import Accelerator, hookimpl
from accelkit.records import AcceleratorRecord, PrecisionRecord, StrategyRecord
ACCELKIT_API = ">=1.0,<2"

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
RAISER = '''
from accelkit import hookimpl
ACCELKIT_API = ">=1.0,<2"

@hookimpl
def accelkit_register_accelerators():
    raise RuntimeError("vendor runtime exploded")
'''
UNMARKED = '''
ACCELKIT_API = ">=1.0,<2"

def accelkit_register_accelerators():  # no @hookimpl: pluggy never calls it
    return []
'''
HINTER = '''
ACCELKIT_API = ">=1.0,<2"
ACCELKIT_INSTALL_HINTS = {"accelerators": {"npu": "acme-npu"}}
'''
COMMAND_RAISER = '''
from accelkit import hookimpl
ACCELKIT_API = ">=1.2,<2"

@hookimpl
def accelkit_register_commands():
    raise LookupError("command table gone")
'''

# plugins whose entry points fail to import, so what they would provide is unknown: a logger, a precision, a strategy
FAILS_TO_IMPORT = '''
import acme_sdk_not_installed
ACCELKIT_API = ">=1.0,<2"
'''

SCENARIOS = '''
import contextlib, io, json, warnings
import accelkit
from accelkit import cli
from accelkit.plugins.manager import PluginManager

def attempt(**kwargs):
    kwargs.setdefault("logger", False)
    try:
        trainer = accelkit.Trainer(enable_progress_bar=False, enable_checkpointing=False, **kwargs)
    except Exception as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
    return {"accelerator": trainer.config.accelerator}

def command(*words):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(words))
    return {"code": code, "text": out.getvalue(), "err": err.getvalue()}

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    manager = PluginManager()
infos = {n: {"status": i.status, "reason": i.reason, "distribution": i.distribution, "failed_in": i.failed_in}
         for n, i in manager.infos.items()}
out = {
    "infos": infos, "warnings": [str(w.message) for w in caught],
    "cpu": attempt(accelerator="cpu"), "twin": attempt(accelerator="twin"), "npu": attempt(accelerator="npu"),
    "jsonlines": attempt(accelerator="cpu", logger="jsonlines"),
    "stochround": attempt(accelerator="cpu", precision="stochround"),
    "striped": attempt(accelerator="cpu", strategy="striped"),
    "plugins": command("plugins"), "doctor": command("doctor"), "no_command": command(),
    "plugins_report": cli.plugin_report(), "doctor_problems": cli.doctor_report()["problems"],
}

# the other 'dup' distribution, chosen by ACCELKIT_PREFER; then a preference that matches no distribution
import os
for prefer in ("dup=ACME_dup_b", "dup=acme-dup-c"):
    os.environ["ACCELKIT_PREFER"] = prefer
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        manager = PluginManager()
    out[prefer] = {
        "infos": {n: {"status": i.status, "reason": i.reason, "distribution": i.distribution}
                  for n, i in manager.infos.items() if n.startswith("dup")},
        "warnings": [str(w.message) for w in caught if "dup" in str(w.message)],
        "dupa": attempt(accelerator="dupa"), "dupb": attempt(accelerator="dupb"), "plugins": command("plugins")}
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def observed(tmp_path_factory, make_distribution, run_python):
    """One interpreter with eleven real distributions installed: a raising one, two claiming 'twin', one whose hook
    lacks @hookimpl, one advertising an install hint, one whose command hook raises, two with the entry-point
    name 'dup' (the second on a later sys.path entry) and three that fail to import."""
    site = tmp_path_factory.mktemp("bad") / "site"
    later = site.parent / "later"
    make_distribution(site, "acme-raiser", "0.9.0", {"raiser": "acme_raiser"}, {"acme_raiser": RAISER})
    make_distribution(site, "acme-one", "1.0.0", {"one": "acme_one"}, {"acme_one": PROVIDER.format(name="twin")})
    make_distribution(site, "acme-two", "2.0.0", {"two": "acme_two"}, {"acme_two": PROVIDER.format(name="twin")})
    make_distribution(site, "acme-unmarked", "1.0.0", {"unmarked": "acme_unmarked"}, {"acme_unmarked": UNMARKED})
    make_distribution(site, "acme-hinter", "1.0.0", {"hinter": "acme_hinter"}, {"acme_hinter": HINTER})
    make_distribution(site, "acme-commands", "1.0.0", {"cmdraiser": "acme_commands"},
                      {"acme_commands": COMMAND_RAISER})
    make_distribution(site, "acme-dup-a", "1.0.0", {"dup": "acme_dup_a"}, {"acme_dup_a": PROVIDER.format(name="dupa")})
    make_distribution(later, "acme-dup-b", "2.0.0", {"dup": "acme_dup_b"}, {"acme_dup_b": PROVIDER.format(name="dupb")})
    for name in ("jsonlines", "stochround", "striped"):
        make_distribution(site, f"accelkit-{name}", "0.1.0", {name: f"accelkit_{name}"},
                          {f"accelkit_{name}": FAILS_TO_IMPORT})
    return run_python(SCENARIOS, path=[site, later])


def test_a_raising_registration_hook_fails_only_its_plugin(observed):
    raiser = observed["infos"]["raiser"]
    assert raiser["status"] == FAILED
    assert "accelkit_register_accelerators" in raiser["reason"] and "vendor runtime exploded" in raiser["reason"]
    assert observed["cpu"] == {"accelerator": "cpu"}  # the others keep working
    assert any("'raiser'" in w and "ACCELKIT_BLOCK_PLUGINS=raiser" in w for w in observed["warnings"])


def test_plugins_and_doctor_report_the_failed_plugin_instead_of_crashing(observed):
    listed = {p["name"]: p for p in observed["plugins_report"]["plugins"]}
    assert listed["raiser"]["status"] == FAILED and "vendor runtime exploded" in listed["raiser"]["reason"]
    assert "raiser" in observed["plugins"]["text"] and "vendor runtime exploded" in observed["plugins"]["text"]
    problems = " ".join(observed["doctor_problems"])
    assert "'raiser'" in problems and "vendor runtime exploded" in problems
    assert "'twin'" in problems and "ACCELKIT_BLOCK_PLUGINS=one" in problems  # the conflict, with its fix
    assert "vendor runtime exploded" in observed["doctor"]["text"] and "Traceback" not in observed["doctor"]["text"]


def test_a_name_claimed_twice_fails_only_runs_that_use_it(observed):
    twin = observed["twin"]
    assert twin["error"] == "PluginConflictError"
    for words in ("'twin'", "acme-one 1.0.0", "acme-two 2.0.0", "ACCELKIT_BLOCK_PLUGINS=one",
                  "ACCELKIT_BLOCK_PLUGINS=two", "plugins=['no:one']"):
        assert words in twin["message"], words
    assert observed["cpu"] == {"accelerator": "cpu"}


def test_doctor_says_which_hook_raised_instead_of_reinstall(observed):
    [problem] = [p for p in observed["doctor_problems"] if "'raiser'" in p]
    assert "accelkit_register_accelerators() raised RuntimeError: vendor runtime exploded" in problem
    assert "acme-raiser 0.9.0" in problem and "ACCELKIT_BLOCK_PLUGINS=raiser" in problem
    assert "reinstall" not in problem  # reinstalling the same code would raise the same error


def test_a_raising_command_hook_is_reported_and_every_other_command_works(observed):
    raiser = observed["infos"]["cmdraiser"]
    assert raiser["status"] == FAILED and raiser["failed_in"] == "accelkit_register_commands"
    assert "command table gone" in raiser["reason"]
    listed = {p["name"]: p for p in observed["plugins_report"]["plugins"]}
    assert listed["cmdraiser"]["status"] == FAILED and "command table gone" in listed["cmdraiser"]["reason"]
    [problem] = [p for p in observed["doctor_problems"] if "'cmdraiser'" in p]
    assert "accelkit_register_commands() raised LookupError: command table gone" in problem
    assert any("'cmdraiser'" in w and "command table gone" in w for w in observed["warnings"])
    # `accelkit` alone still lists the core's commands, and shows the failure as a warning
    no_command = observed["no_command"]
    assert no_command["code"] == 2 and "doctor" in no_command["text"] and "checkpoint" in no_command["text"]
    assert "'cmdraiser'" in no_command["err"] and "command table gone" in no_command["err"]
    assert "vendor runtime exploded" in observed["plugins"]["text"]  # `accelkit plugins` (a core command) works


def test_a_taken_entry_point_name_is_reported_naming_both_distributions(observed):
    assert observed["infos"]["dup"]["status"] == LOADED and observed["infos"]["dup"]["distribution"] == "acme-dup-a"
    second = observed["infos"]["dup#2"]
    assert second["status"] == DUPLICATE and second["distribution"] == "acme-dup-b"
    assert "acme-dup-a 1.0.0" in second["reason"] and "acme-dup-b 2.0.0" in second["reason"]
    assert any("'dup'" in w and "acme-dup-a 1.0.0" in w and "acme-dup-b 2.0.0" in w for w in observed["warnings"])
    listed = [p for p in observed["plugins_report"]["plugins"] if p["name"] == "dup"]
    assert {(p["distribution"], p["status"]) for p in listed} == {("acme-dup-a", LOADED), ("acme-dup-b", DUPLICATE)}
    assert "[duplicate]  acme-dup-b 2.0.0" in observed["plugins"]["text"]
    assert any("acme-dup-a 1.0.0" in p and "acme-dup-b 2.0.0" in p for p in observed["doctor_problems"])
    assert observed["cpu"] == {"accelerator": "cpu"}


def test_accelkit_prefer_loads_the_other_distribution_of_a_taken_name(observed):
    chosen = observed["dup=ACME_dup_b"]
    assert chosen["infos"]["dup"] == {"status": LOADED, "reason": "", "distribution": "acme-dup-b"}
    assert chosen["infos"]["dup#2"] == {"status": DUPLICATE, "distribution": "acme-dup-a", "reason": (
        "entry-point name 'dup' is also provided by acme-dup-b 2.0.0, which ACCELKIT_PREFER=dup=acme-dup-b chose; "
        "acme-dup-a 1.0.0's plugin is not loaded")}
    assert chosen["warnings"] == []  # the user chose: nothing to warn about
    assert chosen["dupb"] == {"accelerator": "dupb"} and chosen["dupa"]["error"] == "ConfigurationError"
    assert ("dup  [loaded]  acme-dup-b 2.0.0\n  ACCELKIT_API: >=1.0,<2\n  chosen over other distributions of this "
            "name by ACCELKIT_PREFER=dup=acme-dup-b") in chosen["plugins"]["text"]
    # without a preference the first on sys.path loads, and the warning says how to choose
    assert any("Choose one with ACCELKIT_PREFER=dup=DISTRIBUTION" in w for w in observed["warnings"])


def test_a_preference_for_a_distribution_that_does_not_have_the_name_warns(observed):
    unmatched = observed["dup=acme-dup-c"]
    assert unmatched["infos"]["dup"]["distribution"] == "acme-dup-a"  # as without a preference
    assert ("ACCELKIT_PREFER prefers distribution 'acme_dup_c' for plugin name 'dup', but that name is provided by "
            "acme-dup-a, acme-dup-b; check the spelling (NAME=DISTRIBUTION, as `accelkit plugins` lists them).") in \
        unmatched["warnings"]


def test_a_malformed_preference_is_refused_with_the_form_to_use(isolated, monkeypatch):
    monkeypatch.setenv("ACCELKIT_PREFER", "dup")
    with pytest.raises(PluginError) as info:
        PluginManager()
    assert str(info.value) == ("ACCELKIT_PREFER item 'dup' is not NAME=DISTRIBUTION: write e.g. "
                               "ACCELKIT_PREFER=\"mpi=acme-mpi\" to load acme-mpi's plugin named 'mpi'")


def test_a_hook_without_hookimpl_warns_naming_it(observed):
    assert any("'unmarked'" in w and "accelkit_register_accelerators()" in w and "@accelkit.hookimpl" in w
               for w in observed["warnings"])


def test_a_plugin_advertises_an_install_hint_and_no_distant_suggestion_is_made(observed):
    npu = observed["npu"]
    assert npu["error"] == "ConfigurationError"
    assert "pip install acme-npu" in npu["message"]
    assert "Did you mean" not in npu["message"]  # 'npu' is another device, not a typo of 'tpu'


@pytest.mark.parametrize("name, kind", [("jsonlines", "logger"), ("stochround", "precision"),
                                        ("striped", "strategy")])
def test_a_name_of_a_plugin_that_failed_to_load_names_that_plugin(observed, name, kind):
    assert observed[name] == {"error": "PluginError", "message": (
        f"{kind} {name!r} would come from plugin {name!r} (accelkit-{name} 0.1.0), which failed to load: "
        "ModuleNotFoundError: No module named 'acme_sdk_not_installed'")}


# ---------------------------------------------------------------------------------------------- in process
class Raiser:
    ACCELKIT_API = ">=1.0,<2"

    @accelkit.hookimpl
    def accelkit_register_strategies(self):
        raise KeyError("missing vendor table")


class ConfigureRaiser:
    ACCELKIT_API = ">=1.0,<2"

    @accelkit.hookimpl
    def accelkit_configure(self, manager):
        raise RuntimeError("configure failed")


class Twin:
    ACCELKIT_API = ">=1.0,<2"

    @accelkit.hookimpl
    def accelkit_register_accelerators(self):
        return [AcceleratorRecord("twin", "accelkit.accelerator:Accelerator")]


class SeesConfig:
    ACCELKIT_API = ">=1.0,<2"

    def __init__(self):
        self.precisions = []

    @accelkit.hookimpl
    def accelkit_validate_config(self, config):
        self.precisions.append(config.precision)


def quiet_trainer(**kwargs):
    return accelkit.Trainer(logger=False, enable_progress_bar=False, enable_checkpointing=False,
                            enable_model_summary=False, **kwargs)


def test_a_plugin_object_whose_hook_raises_is_failed_and_the_run_goes_on(cpu_manager, cpu_plugin):
    with pytest.warns(RuntimeWarning, match="missing vendor table"):
        trainer = quiet_trainer(accelerator="cpu", plugins=[cpu_plugin, Raiser()])
    infos = trainer.plugin_manager.infos
    assert infos["Raiser"].status == FAILED and "accelkit_register_strategies" in infos["Raiser"].reason
    assert not trainer.plugin_manager.has_plugin("Raiser")  # unregistered: none of its hooks run any more


def test_a_raising_configure_hook_leaves_the_plugin_unregistered(isolated, cpu_plugin):
    manager = PluginManager()
    with pytest.raises(accelkit.errors.PluginError, match="configure failed"):
        manager.add_plugin(ConfigureRaiser())
    assert manager.infos["ConfigureRaiser"].status == FAILED and not manager.has_plugin("ConfigureRaiser")


def test_two_instances_of_one_plugin_class_conflict_only_where_used(isolated, cpu_plugin):
    with pytest.warns(RuntimeWarning, match="'twin' is claimed by both"):
        assert quiet_trainer(accelerator="cpu", plugins=[cpu_plugin, Twin(), Twin()]).config.accelerator == "cpu"
    with pytest.raises(PluginConflictError, match="remove one of the plugin objects"), \
            pytest.warns(RuntimeWarning):
        quiet_trainer(accelerator="twin", plugins=[cpu_plugin, Twin(), Twin()])


def test_an_unmarked_hook_method_warns(isolated):
    class Forgot:
        ACCELKIT_API = ">=1.0,<2"

        def accelkit_validate_config(self, config):
            return ["never seen"]

    with pytest.warns(RuntimeWarning, match=r"accelkit_validate_config\(\) without @accelkit.hookimpl"):
        PluginManager().add_plugin(Forgot())


@pytest.mark.parametrize("precision, name", [(TruePrecision(torch.float64), "64-true"),
                                             (MixedPrecision("bfloat16"), "bf16-mixed")])
def test_a_precision_instance_in_plugins_is_reported_with_its_name(isolated, cpu_plugin, precision, name):
    seen = SeesConfig()
    trainer = quiet_trainer(accelerator="cpu", plugins=[cpu_plugin, seen, precision])
    assert trainer.precision is precision and seen.precisions == [name] and trainer.config.precision == name


def test_a_precision_subclass_without_a_record_is_named_after_its_class(isolated, cpu_plugin):
    class Mine(TruePrecision):
        pass

    seen = SeesConfig()
    quiet_trainer(accelerator="cpu", plugins=[cpu_plugin, seen, Mine(torch.float16)])
    assert seen.precisions == ["Mine"]  # not the "32-true" every Precision inherits


PLUGIN_MODULE = '''
import os
import accelkit
ACCELKIT_API = ">=1.0,<2"

@accelkit.hookimpl
def accelkit_configure(manager):
    folder = os.environ.get("ISOLATION_SEEN")
    if folder:
        open(os.path.join(folder, str(os.getpid())), "w").close()
'''


@pytest.mark.slow  # a ddp_spawn fit: two worker processes
def test_a_plugin_module_reaches_every_spawned_worker(isolated, cpu_plugin, tmp_path, monkeypatch):
    (tmp_path / "isolation_plugin.py").write_text(PLUGIN_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = tmp_path / "seen"
    seen.mkdir()
    monkeypatch.setenv("ISOLATION_SEEN", str(seen))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    with project_imports(tmp_path):  # isolation_plugin is forgotten after the test
        import isolation_plugin

        trainer = quiet_trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", max_epochs=1,
                                plugins=[cpu_plugin, isolation_plugin])
        trainer.fit(RegressionModule())  # was: "cannot pickle 'module' object"
    import os

    workers = {p.name for p in seen.iterdir()} - {str(os.getpid())}
    assert len(workers) == 2  # the module registered its hook in each worker


def test_portable_plugins_round_trip_and_refuse_modules_that_cannot_be_imported_again():
    assert resolve_plugins(portable_plugins([accelkit.hookspecs])) == [accelkit.hookspecs]
    fake = types.ModuleType("made_up_in_memory")
    with pytest.raises(accelkit.errors.PluginError, match="'made_up_in_memory'.*importable module"):
        portable_plugins([fake])


def test_the_manager_lists_conflicts_for_the_cli(isolated):
    manager = PluginManager()
    manager.add_plugin(Twin(), name="first")
    manager.add_plugin(Twin(), name="second")
    with pytest.warns(RuntimeWarning):
        conflicts = manager.conflicts()
    assert len(conflicts) == 1 and "'first'" in conflicts[0] and "'second'" in conflicts[0]
    assert manager.infos["first"].status == LOADED  # a conflict is not a failure: other names of both still work


def test_accelkit_plugins_and_doctor_report_the_conflict(isolated):
    from accelkit.cli import doctor_report, plugin_report

    manager = PluginManager()
    manager.add_plugin(Twin(), name="first")
    manager.add_plugin(Twin(), name="second")
    with pytest.warns(RuntimeWarning):
        listed = plugin_report(manager)["conflicts"]
    assert len(listed) == 1 and "'first'" in listed[0] and "'second'" in listed[0]
    assert any("'first'" in p and "'second'" in p for p in doctor_report(manager)["problems"])
