"""Resolution in the parent process: device parsing, availability from the environment, tpu_cores, pods.

None of these start an XLA runtime. Tests that build a Trainer do so in a subprocess, or in this process with
the environment restored afterwards (monkeypatch), and check that torch_xla was never imported.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from accelkit.errors import ConfigurationError

pytest.importorskip("accelkit_xla_spawn", reason="the accelkit-xla-spawn plugin is not installed")

from accelkit_xla_spawn.accelerator import (  # noqa: E402
    availability,
    cores_per_chip,
    local_device_count,
    parse_xla_devices,
)
from accelkit_xla_spawn.plugin import translate_tpu_cores  # noqa: E402
from accelkit_xla_spawn.runtime import launch_failure_hint, pod_plan  # noqa: E402

pytestmark = pytest.mark.xla
needs_torch_xla = pytest.mark.skipif(importlib.util.find_spec("torch_xla") is None,
                                     reason="torch_xla is not installed (availability needs its spec)")


# ----------------------------------------------------------------------------------------- devices
@pytest.mark.parametrize("value, available, expected", [
    (1, 8, [0]), ("1", 8, [0]), (8, 8, [0, 1, 2, 3, 4, 5, 6, 7]), ("auto", 4, [0, 1, 2, 3]), (" AUTO ", 2, [0, 1]),
    ([3], 8, [3]), ((0,), 1, [0]), ("[5]", 8, [5]), (4, 4, [0, 1, 2, 3]),
])
def test_devices_accepted(value, available, expected) -> None:
    assert parse_xla_devices(value, available) == expected


@pytest.mark.parametrize("value, available, needle", [
    (4, 8, "this host has 8 XLA devices"),
    (0, 8, "devices=0"),
    (-1, 8, "devices=-1"),
    ([8], 8, "core index 8 does not exist"),
    ([-1], 8, "core index -1 does not exist"),
    ([0, 1], 8, "a list selects exactly one core"),
    ([], 8, "a list selects exactly one core"),
    ("0,1", 8, "devices='0,1'"),
    ("٣", 8, "devices='٣'"),
    (True, 8, "devices=True"),
    (None, 8, "devices=None"),
    (1.5, 8, "devices=1.5"),
    (1, 0, "PJRT_DEVICE=TPU"),
    ("auto", 0, "PJRT_DEVICE=CPU"),
])
def test_devices_rejected_with_what_is_allowed(value, available, needle) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_xla_devices(value, available)
    message = str(info.value)
    assert needle in message
    if available:
        assert "[k]" in message or "core index" in message


# ----------------------------------------------------------------------------------------- environment
def test_count_from_pjrt_cpu() -> None:
    assert local_device_count({"PJRT_DEVICE": "CPU"}, []) == 1
    assert local_device_count({"PJRT_DEVICE": "cpu", "CPU_NUM_DEVICES": "4"}, ["/dev/accel0"]) == 4
    with pytest.raises(ConfigurationError, match="CPU_NUM_DEVICES='x'"):
        local_device_count({"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "x"}, [])


def test_count_from_tpu_chips() -> None:
    four = [f"/dev/accel{i}" for i in range(4)]
    assert local_device_count({}, four) == 4  # v4 and later: one device per chip
    assert local_device_count({"TPU_ACCELERATOR_TYPE": "v3-8"}, four) == 8  # v2/v3: two cores per chip
    assert local_device_count({"TPU_ACCELERATOR_TYPE": "v5litepod-8"}, [f"/dev/vfio/{i}" for i in range(8)]) == 8
    assert local_device_count({"TPU_VISIBLE_CHIPS": "0,1"}, four) == 2
    assert local_device_count({"TPU_NUM_DEVICES": "8"}, []) == 8
    assert cores_per_chip("v2-8") == 2 and cores_per_chip("v4-16") == 1 and cores_per_chip(None) == 1


def test_availability_decisions() -> None:
    ok, reason = availability({}, [], torch_xla_installed=True)
    assert not ok and "no TPU found" in reason and "PJRT_DEVICE=TPU" in reason and "PJRT_DEVICE=CPU" in reason
    ok, reason = availability({"XRT_TPU_CONFIG": "localservice;0;localhost:51011"}, [], True)
    assert not ok and "XRT_TPU_CONFIG" in reason and "retired" in reason
    ok, reason = availability({"PJRT_DEVICE": "CPU"}, [], True)
    assert ok and reason == ""
    ok, _ = availability({}, ["/dev/accel0"], True)
    assert ok
    ok, reason = availability({"PJRT_DEVICE": "TPU"}, [], True)
    assert not ok and "no TPU chip was found" in reason
    ok, reason = availability({"PJRT_DEVICE": "TPUU"}, [], True)
    assert not ok and "PJRT_DEVICE='TPUU'" in reason
    ok, reason = availability({"PJRT_DEVICE": "CPU"}, [], torch_xla_installed=False)
    assert not ok and "torch_xla is not installed" in reason


# ----------------------------------------------------------------------------------------- pods
def test_pod_plan_each_host_computes_its_ordinals() -> None:
    hosts = "t1v-n-0,t1v-n-1,t1v-n-2,t1v-n-3"
    plans = [pod_plan({"TPU_WORKER_HOSTNAMES": hosts, "TPU_WORKER_ID": str(i)}, 4) for i in range(4)]
    assert [p.host_index for p in plans] == [0, 1, 2, 3]
    assert {p.world_size for p in plans} == {16}
    ordinals = [o for p in plans for o in p.global_ordinals]
    assert ordinals == list(range(16))  # disjoint, host-major, covering the pod
    assert pod_plan({}, 8).num_hosts == 1 and pod_plan({}, 8).global_ordinals == range(8)
    assert pod_plan({"TPU_WORKER_HOSTNAMES": "a,b", "CLOUD_TPU_TASK_ID": "1"}, 4).host_index == 1


def test_pod_plan_rejects_contradictions() -> None:
    with pytest.raises(ConfigurationError, match="TPU_WORKER_ID=2 but TPU_WORKER_HOSTNAMES lists 2"):
        pod_plan({"TPU_WORKER_HOSTNAMES": "a,b", "TPU_WORKER_ID": "2"}, 4)
    with pytest.raises(ConfigurationError, match="TPU_WORKER_ID='w1'"):
        pod_plan({"TPU_WORKER_ID": "w1"}, 4)


# ----------------------------------------------------------------------------------------- tpu_cores
def test_translate_tpu_cores_values() -> None:
    assert translate_tpu_cores(8) == 8
    assert translate_tpu_cores("8") == 8
    assert translate_tpu_cores([5]) == [4]  # 1-based core ID of the old guides
    assert translate_tpu_cores("[1]") == [0]
    for bad in ([0], [1, 2], "eight", None):
        with pytest.raises(ValueError, match="tpu_cores="):
            translate_tpu_cores(bad)


_PARENT = r"""
import importlib.util, json, os, sys, warnings
from accelkit import Trainer
out = {}
# 1. PJRT_DEVICE=CPU with 8 devices (this process's environment); XLA is available only where torch_xla is installed
if importlib.util.find_spec("torch_xla") is not None:
    t = Trainer(tpu_cores=[5], logger=False)
    out["core5"] = [type(t.accelerator).__name__, t.config.devices, type(t.strategy).__name__]
    t = Trainer(tpu_cores=8, logger=False)
    out["cores8"] = [t.config.devices, type(t.strategy).__name__, t.strategy.name]
    t = Trainer(accelerator="auto", devices="auto", logger=False)
    out["auto"] = [t.accelerator.name, t.config.devices, t.strategy.name]
    t = Trainer(accelerator="tpu", devices=[2], strategy="xla_single", logger=False)
    out["single2"] = [t.config.devices, t.strategy.name]
    t = Trainer(accelerator="xla", devices=8, strategy="tpu_spawn", logger=False)
    out["alias"] = t.strategy.name
print("END OF PART 1", file=sys.stderr, flush=True)

def failure(**arguments):
    try:
        Trainer(logger=False, **arguments)
    except Exception as exc:
        return f"{type(exc).__name__} {exc}"
    return None

# 2. the same process, its environment changed as another host's would be (the plugin reads os.environ when a
# Trainer resolves): no TPU and PJRT_DEVICE empty, auto; then the Lightning-era XRT_TPU_CONFIG, accelerator="tpu"
os.environ.update(PJRT_DEVICE="", CPU_NUM_DEVICES="1")
t = Trainer(logger=False)
out["auto_without_tpu"] = [t.accelerator.name, "torch_xla" in sys.modules]
os.environ["XRT_TPU_CONFIG"] = "localservice;0;localhost:51011"
out["explicit_tpu_with_xrt"] = failure(accelerator="tpu")
del os.environ["XRT_TPU_CONFIG"]
# 3. PJRT_DEVICE=CPU with 4 devices, devices=3 asked
os.environ.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES="4")
out["three_of_four"] = failure(accelerator="tpu", devices=3)
out["torch_xla_imported"] = sorted(m for m in sys.modules if m.split(".")[0] == "torch_xla")
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def resolutions(run_python) -> tuple[dict, str]:
    """One process resolves the Trainers of the tests below, in parts (its environment changed between them):
    {what: result} and the stderr of part 1."""
    proc = run_python(_PARENT, CPU_NUM_DEVICES="8")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr.split("END OF PART 1")[0]


@pytest.mark.slow  # starts a process
@needs_torch_xla
def test_parent_resolution_never_imports_torch_xla(resolutions) -> None:
    out, stderr = resolutions
    assert out["core5"] == ["XLAAccelerator", [4], "XLASingleStrategy"]
    assert out["cores8"] == [list(range(8)), "XLASpawnStrategy", "xla_spawn"]
    assert out["auto"] == ["xla", list(range(8)), "xla_spawn"]  # PJRT_DEVICE set explicitly: xla wins auto
    assert out["single2"] == [[2], "xla_single"]
    assert out["alias"] == "xla_spawn"
    assert out["torch_xla_imported"] == []  # after every part of the process
    assert "tpu_cores=[5] is deprecated; use accelerator='tpu', devices=[4]" in stderr
    assert stderr.count("is deprecated") == 2


@pytest.mark.slow  # starts a process
def test_auto_does_not_pick_xla_without_a_tpu(resolutions) -> None:
    name, imported = resolutions[0]["auto_without_tpu"]
    assert name != "xla" and imported is False


@pytest.mark.slow  # starts a process
@needs_torch_xla
def test_explicit_tpu_without_a_tpu_explains_pjrt(resolutions) -> None:
    error = resolutions[0]["explicit_tpu_with_xrt"]
    assert error is not None and error.startswith("ConfigurationError")
    assert "PJRT_DEVICE=TPU" in error and "XRT_TPU_CONFIG" in error and "retired" in error


@pytest.mark.slow  # starts a process
@needs_torch_xla
def test_wrong_device_count_is_reported_at_resolution(resolutions) -> None:
    error = resolutions[0]["three_of_four"]
    assert error is not None and error.startswith("ConfigurationError")
    assert "devices=3" in error and "4 XLA devices" in error and "CPU_NUM_DEVICES" in error


def test_launch_failure_hint_names_the_cpu_collective_problem() -> None:
    hint = launch_failure_hint({"PJRT_DEVICE": "CPU"}, 4)
    assert "pytorch/xla#5005" in hint and "devices=1" in hint
    assert launch_failure_hint({"PJRT_DEVICE": "CPU"}, 1) == ""
    assert launch_failure_hint({"PJRT_DEVICE": "TPU"}, 8) == ""


def test_tpu_cores_with_another_accelerator_is_an_error_naming_both() -> None:
    from accelkit_xla_spawn.plugin import accelkit_translate_arguments

    arguments = {"accelerator": "cpu", "devices": "auto", "extra": {"tpu_cores": 8}}
    with pytest.raises(ValueError, match=r"tpu_cores=8 asks for TPU cores but accelerator='cpu'"):
        accelkit_translate_arguments(arguments)
    assert arguments["devices"] == "auto"  # nothing half-applied
    arguments = {"accelerator": "TPU", "devices": "auto", "extra": {"tpu_cores": [1]}}
    accelkit_translate_arguments(arguments)
    assert arguments["devices"] == [0] and arguments["accelerator"] == "TPU"
