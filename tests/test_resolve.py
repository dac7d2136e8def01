"""Resolution: names -> one composed run (``accelkit.plugins.compose.compose`` through the Trainer).

Unknown names list what exists and suggest the closest; first-party names whose plugin is missing name the
distribution to install; every problem is reported at once; nothing is started before the configuration is
valid; ``"auto"`` follows priorities; ``plugins=`` strings and instances; the validation and argument
translation hooks."""

from __future__ import annotations

import importlib.metadata
import multiprocessing
import os
import sys
import sysconfig
from pathlib import Path

import pytest
import torch

import accelkit
from accelkit import Accelerator
from accelkit.errors import ConfigurationError
from accelkit.precision import Precision, TruePrecision
from accelkit.records import AcceleratorRecord, PrecisionRecord, StrategyRecord
from accelkit.strategies.ddp import DDPSpawnStrategy
from accelkit.strategies.single_device import SingleDeviceStrategy

REPO = Path(__file__).resolve().parents[1]


def trainer(cpu_plugin, *plugins, **kwargs):
    """A Trainer resolved against the core, the cpu plugin and ``plugins`` only."""
    kwargs.setdefault("logger", False)
    kwargs.setdefault("enable_progress_bar", False)
    return accelkit.Trainer(plugins=[cpu_plugin, *plugins], **kwargs)


def problems_of(cpu_plugin, *plugins, **kwargs):
    with pytest.raises(ConfigurationError) as info:
        trainer(cpu_plugin, *plugins, **kwargs)
    return info.value.problems, str(info.value)


# ---------------------------------------------------------------------------------------- unknown names
@pytest.mark.parametrize("kwargs, wrong, closest, available", [
    ({"accelerator": "cpus"}, "cpus", "cpu", "Available: cpu."),
    ({"strategy": "ddp_spwan", "devices": 2}, "ddp_spwan", "ddp_spawn", "ddp_spawn, ddp_spawn_find_unused"),
    ({"strategy": "Single-Devce"}, "Single-Devce", "single_device", "single_device"),
    ({"precision": "bf16-mixd"}, "bf16-mixd", "bf16-mixed", "32-true, 64-true, bf16-mixed"),
    ({"precision": "64-tru"}, "64-tru", "64-true", "32-true, 64-true, bf16-mixed"),
])
def test_unknown_names_list_the_available_ones_and_suggest_the_closest(isolated, cpu_plugin, kwargs, wrong,
                                                                       closest, available):
    problems, _ = problems_of(cpu_plugin, **kwargs)
    assert len(problems) == 1
    assert repr(wrong) in problems[0] or repr(wrong.lower()) in problems[0]
    assert f"Did you mean {closest!r}?" in problems[0]
    assert available in problems[0]


def test_names_ignore_case_blanks_and_dashes(isolated, cpu_plugin):
    t = trainer(cpu_plugin, accelerator=" CPU ", strategy="DDP-Spawn", devices=2, precision="BF16_Mixed")
    assert (t.config.accelerator, t.config.strategy, t.config.precision) == ("cpu", "ddp_spawn", "bf16-mixed")
    assert trainer(cpu_plugin, precision=64).config.precision == "64-true"  # an int alias


def test_a_name_that_is_nothing_like_any_gets_no_suggestion(isolated, cpu_plugin):
    problems, _ = problems_of(cpu_plugin, precision="zzzzzz")
    assert "Did you mean" not in problems[0]
    assert "Available: 16-mixed, 16-true, 32-true, 64-true, bf16-mixed, bf16-true." in problems[0]


def test_a_strategy_of_another_accelerator_says_where_it_runs(isolated, cpu_plugin):
    problems, _ = problems_of(cpu_plugin, Zoo(), accelerator="cpu", strategy="mid_spawn")
    assert "'mid_spawn' does not run on accelerator 'cpu'" in problems[0] and "(it runs on hi, mid)" in problems[0]
    assert "ddp_spawn" in problems[0]  # what does run on cpu


# ---------------------------------------------------------------------------------------- first-party, not installed
def _entry_point_of(distribution):
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    return next((ep.name for ep in dist.entry_points if ep.group == "accelkit"), None)


def test_tpu_with_its_plugin_blocked_names_the_blocked_distribution(monkeypatch):
    ep = _entry_point_of("accelkit-xla-spawn")
    if ep is None:
        pytest.skip("accelkit-xla-spawn is not installed here; the not-installed case is tested in a subprocess")
    monkeypatch.delenv("ACCELKIT_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.setenv("ACCELKIT_BLOCK_PLUGINS", ep)
    with pytest.raises(ConfigurationError) as info:
        accelkit.Trainer(accelerator="tpu", logger=False)
    message = str(info.value)
    assert "'tpu' is not available" in message and "Did you mean" not in message
    assert f"Plugin {ep!r} (accelkit-xla-spawn" in message and "blocked" in message
    with pytest.raises(ConfigurationError, match="blocked"):  # the same through plugins=["no:NAME"]
        accelkit.Trainer(accelerator="tpu", logger=False, plugins=[f"no:{ep}"])


def third_party_directories() -> list[Path]:
    """The directories this interpreter imports installed packages from, in ``sys.path`` order: the
    environment's site-packages, but also a user site or ``PYTHONPATH`` folder where a machine keeps torch
    (not the standard library, not this repository's source folders)."""
    stdlib = {Path(sysconfig.get_paths()[key]).resolve() for key in ("stdlib", "platstdlib")}
    found: list[Path] = []
    for entry in sys.path:
        path = Path(entry or ".").resolve()
        packages = path.name in ("site-packages", "dist-packages")
        standard = path in stdlib or (path.parent in stdlib and not packages)  # lib-dynload
        ours = path == REPO or (REPO in path.parents and not packages)
        if path.is_dir() and not standard and not ours and path not in found:
            found.append(path)
    return found


@pytest.mark.slow  # starts a process
def test_first_party_names_whose_distribution_is_not_installed(tmp_path, run_python):
    """A real environment without the device plugins: every installed package minus every accelkit
    distribution but the core and the cpu plugin (linked entry by entry), run with ``python -S``."""
    linked = tmp_path / "site-packages"
    linked.mkdir()
    for directory in third_party_directories():
        for entry in directory.iterdir():
            low = entry.name.lower()
            keep = "accelkit" not in low or (low.startswith(("accelkit-", "accelkit_cpu-"))
                                             and low.endswith(".dist-info"))
            if keep and not os.path.lexists(linked / entry.name):  # the first directory on sys.path wins
                (linked / entry.name).symlink_to(entry)
    out = run_python('''
import json, importlib.metadata as md
import accelkit
from accelkit.errors import ConfigurationError
found = sorted(ep.name for ep in md.entry_points(group="accelkit"))
results = {}
for key, kwargs in {"tpu": {"accelerator": "tpu"}, "gpu": {"accelerator": "gpu"},
                    "xla_spawn": {"strategy": "xla_spawn"}, "bf16-legacy": {"precision": "bf16-legacy"}}.items():
    try:
        accelkit.Trainer(logger=False, **kwargs)
        results[key] = None
    except ConfigurationError as exc:
        results[key] = str(exc)
print(json.dumps({"entry_points": found, "results": results}))
''', path=[linked, REPO / "core" / "src", REPO / "plugins" / "cpu" / "src"], python_flags=("-S",))
    assert out["entry_points"] == ["cpu"]
    expected = {"tpu": "accelkit-xla-spawn", "gpu": "accelkit-cuda", "xla_spawn": "accelkit-xla-spawn",
                "bf16-legacy": "accelkit-xla-bf16"}
    for key, dist in expected.items():
        message = out["results"][key]
        assert message is not None, key
        assert f"{key!r} is not available" in message
        assert f"`pip install {dist}`" in message
        assert "Did you mean" not in message  # 'tpu' is not a typo of 'cpu'


# ---------------------------------------------------------------------------------------- every problem at once
def test_an_impossible_combination_reports_every_problem(isolated, cpu_plugin):
    problems, message = problems_of(cpu_plugin, accelerator="cpu", devices=0, precision="bf17-mixed", num_nodes=0,
                                    max_epochs=-3)
    assert len(problems) == 4, problems
    assert any("devices=0" in p for p in problems)
    assert any("'bf17-mixed'" in p and "Did you mean 'bf16-mixed'?" in p for p in problems)
    assert any("num_nodes=0" in p for p in problems)
    assert any("max_epochs=-3" in p for p in problems)
    assert message.startswith("4 problems with this configuration:")


def test_strategy_checks_and_plugin_checks_are_reported_together(isolated, cpu_plugin):
    validator = Validator(["acme says: devices=2 on a Tuesday is not supported; use devices=1"])
    problems, _ = problems_of(cpu_plugin, validator, strategy="single_device", devices=2, max_epochs=-2)
    assert any("single_device" in p and "devices=[0, 1]" in p for p in problems)
    assert "acme says: devices=2 on a Tuesday is not supported; use devices=1" in problems
    assert any("max_epochs=-2" in p for p in problems)
    assert len(problems) == 3


def test_the_validate_hook_sees_the_resolved_run(isolated, cpu_plugin):
    validator = Validator(None)
    trainer(cpu_plugin, validator, devices="2", precision="64")
    (config,) = validator.seen
    assert (config.accelerator, config.devices, config.strategy, config.precision, config.num_nodes,
            config.user_devices, config.world_size) == ("cpu", [0, 1], "ddp_spawn", "64-true", 1, "2", 2)


class Validator:
    """A plugin object whose ``accelkit_validate_config`` returns fixed problems and records its configs."""

    ACCELKIT_API = ">=1.0,<2"

    def __init__(self, problems):
        self.problems, self.seen = problems, []

    @accelkit.hookimpl
    def accelkit_validate_config(self, config):
        self.seen.append(config)
        return self.problems


# ---------------------------------------------------------------------------------------- nothing starts early
class Probe(Accelerator):
    """An available accelerator that records every runtime call (which must not happen while resolving)."""

    name = "probe"
    calls: list[str] = []

    @classmethod
    def device_count(cls):
        return 4

    def device(self, index):
        Probe.calls.append("device")
        return torch.device("cpu")

    def setup_device(self, device):
        Probe.calls.append("setup_device")


class ProbeStrategy(DDPSpawnStrategy):
    """ddp_spawn that records launches and environment set-ups."""

    def launch(self, function, *args, **kwargs):
        Probe.calls.append("launch")
        return super().launch(function, *args, **kwargs)

    def setup_environment(self):
        Probe.calls.append("setup_environment")
        super().setup_environment()


class ProbePlugin:
    """Registers the probe accelerator with its strategy and precision."""

    ACCELKIT_API = ">=1.0,<2"

    @accelkit.hookimpl
    def accelkit_register_accelerators(self):
        return [AcceleratorRecord("probe", Probe)]

    @accelkit.hookimpl
    def accelkit_register_strategies(self):
        return [StrategyRecord("probe_spawn", ProbeStrategy, accelerators=("probe",))]

    @accelkit.hookimpl
    def accelkit_register_precisions(self):
        return [PrecisionRecord("32-true", Precision, accelerators=("probe",))]


@pytest.mark.parametrize("kwargs", [
    {"devices": 2, "precision": "16-nope"},
    {"devices": [0, 9]},
    {"devices": 2, "num_nodes": 2},  # the spawn strategy refuses several nodes
    {"devices": 2, "validator": ["no"]},
])
def test_nothing_is_spawned_or_initialised_before_the_configuration_is_valid(isolated, cpu_plugin, kwargs):
    Probe.calls.clear()
    extra = [Validator(kwargs.pop("validator"))] if "validator" in kwargs else []
    with pytest.raises(ConfigurationError):
        trainer(cpu_plugin, ProbePlugin(), *extra, accelerator="probe", strategy="probe_spawn", **kwargs)
    assert Probe.calls == []
    assert multiprocessing.active_children() == []
    assert not torch.distributed.is_initialized()


def test_a_valid_multi_process_run_is_only_configured_when_composed(isolated, cpu_plugin):
    Probe.calls.clear()
    t = trainer(cpu_plugin, ProbePlugin(), accelerator="probe", strategy="probe_spawn", devices=[1, 3])
    assert isinstance(t.strategy, ProbeStrategy) and t.strategy.devices == [1, 3] and t.strategy.world_size == 2
    assert Probe.calls == [] and multiprocessing.active_children() == []


# ---------------------------------------------------------------------------------------- accelerator="auto"
def _accelerator(name, priority, available, reason=""):
    cls = type(f"{name.title()}Accelerator", (Accelerator,), {
        "name": name,
        "is_available": classmethod(lambda cls: available),
        "unavailable_reason": classmethod(lambda cls: reason),
        "device": lambda self, index: torch.device("cpu"),
    })
    return AcceleratorRecord(name, cls, priority=priority)


class Zoo:
    """Two fake accelerators: 'hi' (priority 10, unavailable) and 'mid' (priority 5, available)."""

    ACCELKIT_API = ">=1.0,<2"

    def __init__(self, mid_available=True):
        self.mid_available = mid_available

    @accelkit.hookimpl
    def accelkit_register_accelerators(self):
        return [_accelerator("hi", 10, False, "no hi device: plug one in"),
                _accelerator("mid", 5, self.mid_available, "no mid device")]

    @accelkit.hookimpl
    def accelkit_register_strategies(self):
        both = ("hi", "mid")
        return [StrategyRecord("single_device", SingleDeviceStrategy, accelerators=both),
                StrategyRecord("mid_spawn", DDPSpawnStrategy, accelerators=both)]

    @accelkit.hookimpl
    def accelkit_register_precisions(self):
        return [PrecisionRecord("32-true", Precision, accelerators=("hi", "mid"))]


def test_auto_picks_the_available_accelerator_of_highest_priority(isolated, cpu_plugin):
    t = trainer(cpu_plugin, Zoo())
    assert t.config.accelerator == "mid" and type(t.accelerator).__name__ == "MidAccelerator"
    assert t.config.strategy == "single_device"
    assert trainer(cpu_plugin, Zoo(mid_available=False)).config.accelerator == "cpu"  # next in line


def test_auto_respects_a_strategy_that_runs_on_fewer_accelerators(isolated, cpu_plugin):
    assert trainer(cpu_plugin, Zoo(), strategy="ddp_spawn", devices=2).config.accelerator == "cpu"
    assert trainer(cpu_plugin, Zoo(), strategy="mid_spawn", devices=1).config.accelerator == "mid"


def test_auto_with_nothing_available_says_why(isolated):
    with pytest.raises(ConfigurationError) as info:
        accelkit.Trainer(plugins=[Zoo(mid_available=False)], logger=False)
    message = str(info.value)
    assert "accelerator='auto' found no available accelerator" in message
    assert "hi: no hi device: plug one in" in message and "mid: no mid device" in message


def test_an_explicit_unavailable_accelerator_says_why(isolated, cpu_plugin):
    problems, _ = problems_of(cpu_plugin, Zoo(), accelerator="hi")
    assert problems == ["accelerator 'hi' is installed but not available here: no hi device: plug one in"]


def test_an_accelerator_class_or_instance_is_used_directly(isolated, cpu_plugin):
    from accelkit_cpu.accelerator import CPUAccelerator

    instance = CPUAccelerator()
    assert trainer(cpu_plugin, accelerator=instance).accelerator is instance
    assert type(trainer(cpu_plugin, accelerator=CPUAccelerator).accelerator) is CPUAccelerator


# ---------------------------------------------------------------------------------------- plugins=[...]
def test_strings_in_plugins_name_a_strategy_or_a_precision(isolated, cpu_plugin):
    t = trainer(cpu_plugin, "ddp_spawn", "bf16-mixed", accelerator="cpu", devices=2)
    assert (t.config.strategy, t.config.precision) == ("ddp_spawn", "bf16-mixed")
    assert isinstance(t.strategy, DDPSpawnStrategy) and type(t.precision).__name__ == "MixedPrecision"


def test_unknown_strings_in_plugins_are_problems(isolated, cpu_plugin):
    problems, _ = problems_of(cpu_plugin, "ddp_spwan", precision="bf17")
    assert any("plugin 'ddp_spwan'" in p and "Did you mean 'ddp_spawn'?" in p for p in problems)
    assert any("'bf17'" in p for p in problems)


def test_a_strategy_named_twice_is_a_problem(isolated, cpu_plugin):
    problems, _ = problems_of(cpu_plugin, "ddp_spawn", strategy="single_device", devices=2)
    assert any("plugins='ddp_spawn'" in p and "strategy='single_device'" in p for p in problems)


def test_strategy_and_precision_instances_in_plugins_are_used(isolated, cpu_plugin):
    strategy, precision = DDPSpawnStrategy(find_unused_parameters=True), TruePrecision(dtype="float64")
    t = trainer(cpu_plugin, strategy, precision, accelerator="cpu", devices=2)
    assert t.strategy is strategy and t.precision is precision
    assert strategy.devices == [0, 1] and strategy.precision is precision and strategy.accelerator is t.accelerator
    assert precision.accelerator is t.accelerator
    assert strategy.options == {"find_unused_parameters": True}


@pytest.mark.filterwarnings("ignore:devices=3 starts 3 processes")  # expected on a small machine
def test_a_strategy_instance_is_validated_too(isolated, cpu_plugin):
    problems, _ = problems_of(cpu_plugin, SingleDeviceStrategy(), devices=3)
    assert len(problems) == 1 and "runs on one device" in problems[0]


# ---------------------------------------------------------------------------------------- default strategy hook
def test_a_plugin_chooses_the_auto_strategy(isolated, cpu_plugin):
    class Chooser:
        ACCELKIT_API = ">=1.0,<2"

        @accelkit.hookimpl
        def accelkit_default_strategy(self, config):
            return "ddp_spawn_find_unused_parameters_true" if config.world_size > 1 else None

    t = trainer(cpu_plugin, Chooser(), devices=2)
    assert t.config.strategy == "ddp_spawn_find_unused_parameters_true"
    assert t.strategy.options == {"find_unused_parameters": True}
    assert trainer(cpu_plugin, Chooser(), devices=1).config.strategy == "single_device"  # None defers


# ---------------------------------------------------------------------------------------- argument translation
class AcmeCores:
    """Translates the legacy ``acme_cores=N`` into ``devices=N`` with the ddp_spawn strategy."""

    ACCELKIT_API = ">=1.0,<2"

    @accelkit.hookimpl
    def accelkit_translate_arguments(self, arguments):
        if "acme_cores" in arguments["extra"]:
            arguments["devices"] = arguments["extra"].pop("acme_cores")
            arguments["strategy"] = "ddp_spawn"


@pytest.mark.filterwarnings("ignore:devices=3 starts 3 processes")  # expected on a small machine
def test_translate_arguments_handles_legacy_keywords(isolated, cpu_plugin):
    t = trainer(cpu_plugin, AcmeCores(), accelerator="cpu", acme_cores=3)
    assert (t.config.devices, t.config.strategy) == ([0, 1, 2], "ddp_spawn")


def test_leftover_keywords_raise_type_error(isolated, cpu_plugin):
    with pytest.raises(TypeError, match="unexpected keyword argument.*bogus_flag") as info:
        trainer(cpu_plugin, AcmeCores(), accelerator="cpu", acme_cores=2, bogus_flag=True)
    assert "acme_cores" not in str(info.value)
    with pytest.raises(TypeError, match="acme_cores"):
        trainer(cpu_plugin, accelerator="cpu", acme_cores=2)  # nobody translates it


def test_translated_values_are_validated_like_any(isolated, cpu_plugin):
    problems, _ = problems_of(cpu_plugin, AcmeCores(), accelerator="cpu", acme_cores=0)
    assert any("devices=0" in p for p in problems)



def test_an_unknown_accelerator_does_not_hide_unknown_strategy_and_precision_names(isolated, cpu_plugin):
    problems, _ = problems_of(cpu_plugin, accelerator="npu", strategy="ddp_spwan", precision="bf17-mixed")
    assert len(problems) == 3, problems
    assert "accelerator 'npu'" in problems[0]
    assert "strategy 'ddp_spwan'" in problems[1] and "Did you mean 'ddp_spawn'?" in problems[1]
    assert "precision 'bf17-mixed'" in problems[2] and "Did you mean 'bf16-mixed'?" in problems[2]


def test_an_unknown_accelerator_with_known_names_reports_only_the_accelerator(isolated, cpu_plugin):
    problems, _ = problems_of(cpu_plugin, accelerator="npu", strategy="ddp", precision="bf16-mixed")
    assert len(problems) == 1 and "accelerator 'npu'" in problems[0]


def test_auto_for_a_strategy_whose_accelerators_are_unavailable_names_the_strategy(isolated, cpu_plugin):
    problems, _ = problems_of(cpu_plugin, Zoo(mid_available=False), strategy="mid_spawn", devices=1)
    assert len(problems) == 1
    assert "for strategy 'mid_spawn' (it runs on hi, mid)" in problems[0]
    assert "no mid device" in problems[0] and "pip install accelkit-cpu" not in problems[0]


def test_unknown_accelerators_are_matched_against_aliases_too(isolated, cpu_plugin):
    class Aliased:
        ACCELKIT_API = ">=1.0,<2"

        @accelkit.hookimpl
        def accelkit_register_accelerators(self):
            return [AcceleratorRecord("mid", _accelerator("mid", 5, True, "").target, aliases=("midway",))]

    problems, _ = problems_of(cpu_plugin, Aliased(), accelerator="midwya")
    assert "Did you mean 'midway'?" in problems[0] and "Available: cpu, mid, midway." in problems[0]
