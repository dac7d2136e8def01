"""The pure rules of xla_spmd (mesh, partitions, hosts, options) and its composition through the Trainer; no
XLA runtime: torch_xla is never imported here."""

from __future__ import annotations

import sys

import pytest

from accelkit.errors import ConfigurationError

pytest.importorskip("accelkit_xla_spmd", reason="the accelkit-xla-spmd plugin is not installed")

from accelkit_xla_spmd import HostPlan, MeshLayout, XLASPMDStrategy, host_plan  # noqa: E402


def test_default_mesh_puts_every_device_on_the_data_axis() -> None:
    layout = MeshLayout.from_options()
    assert layout.names == ("data",)
    assert layout.shape_for(8) == (8,)
    assert layout.problems(8) == []
    assert layout.batch_partition(2) == ("data", None)
    assert layout.batch_partition(1) == ("data",)
    assert layout.batch_partition(0) == ()
    assert layout.param_partition((16, 8), 8) is None  # replicated


def test_fsdp_axis_defaults_to_a_two_axis_mesh_all_on_fsdp() -> None:
    layout = MeshLayout.from_options(fsdp_axis="fsdp")
    assert layout.names == ("data", "fsdp")
    assert layout.shape_for(4) == (1, 4)
    assert layout.batch_axes() == ("data", "fsdp")
    assert layout.batch_partition(3) == (("data", "fsdp"), None, None)


@pytest.mark.parametrize(("shape", "expected"), [
    ((16, 8), ("fsdp", None)),      # the largest divisible dimension
    ((6, 8), (None, "fsdp")),       # 6 is not divisible by 4: the next one
    ((8, 8), ("fsdp", None)),       # the first of equals
    ((3,), None),                   # nothing divisible: replicated
    ((1, 16), (None, "fsdp")),
    ((), None),
])
def test_parameter_partition(shape, expected) -> None:
    assert MeshLayout.from_options(mesh_shape=(1, 4), fsdp_axis="fsdp").param_partition(shape, 4) == expected


def test_two_axis_mesh_names_and_sizes() -> None:
    layout = MeshLayout.from_options(mesh_shape=(2, 4), fsdp_axis="fsdp")
    assert layout.names == ("data", "fsdp")
    assert layout.axis_size("fsdp", 8) == 4 and layout.axis_size("data", 8) == 2
    assert layout.param_partition((16, 2), 8) == ("fsdp", None)


def test_mesh_whose_product_differs_from_the_devices_is_refused_with_the_values() -> None:
    problems = MeshLayout.from_options(mesh_shape=(2, 2)).problems(8)
    assert len(problems) == 1 and "(2, 2)" in problems[0] and "4 devices" in problems[0] and "8" in problems[0]


@pytest.mark.parametrize(("options", "words"), [
    ({"mesh_shape": (0, 4)}, ["mesh_shape=(0, 4)", "positive ints"]),
    ({"mesh_shape": "4"}, ["mesh_shape='4'"]),
    ({"mesh_shape": (2, 2), "axis_names": ("data",)}, ["2 axes", "names 1"]),
    ({"axis_names": ("data", "data")}, ["twice"]),
    ({"mesh_shape": (2, 2, 2)}, ["axis_names"]),
    ({"fsdp_axis": "data"}, ["also the data_axis"]),
    ({"mesh_shape": (4,), "fsdp_axis": "fsdp"}, ["fsdp_axis='fsdp'", "['data']"]),
    ({"axis_names": ("batch",)}, ["data_axis='data'", "['batch']"]),
])
def test_bad_mesh_options_name_the_value(options, words) -> None:
    with pytest.raises(ValueError) as info:
        MeshLayout.from_options(**options)
    for word in words:
        assert word in str(info.value)


def test_unknown_option_is_refused_naming_the_accepted_ones() -> None:
    with pytest.raises(TypeError) as info:
        XLASPMDStrategy(mesh=(4,))
    text = str(info.value)
    assert "['mesh']" in text
    for name in ("mesh_shape", "axis_names", "data_axis", "fsdp_axis"):
        assert name in text


# ----------------------------------------------------------------- hosts (pods), from env dicts
def test_one_host() -> None:
    plan = host_plan({}, 4)
    assert plan == HostPlan(host_index=0, num_hosts=1, local_devices=4)
    assert (plan.global_devices, plan.data_parallel_size, plan.data_parallel_rank) == (4, 1, 0)


def test_pod_of_four_hosts_reads_its_place() -> None:
    env = {"TPU_WORKER_HOSTNAMES": "h0,h1,h2,h3", "TPU_WORKER_ID": "2"}
    plan = host_plan(env, 4)
    assert (plan.num_hosts, plan.host_index, plan.global_devices) == (4, 2, 16)
    assert (plan.data_parallel_size, plan.data_parallel_rank) == (4, 2)


def test_contradicting_pod_variables_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="TPU_WORKER_ID=5"):
        host_plan({"TPU_WORKER_HOSTNAMES": "h0,h1", "TPU_WORKER_ID": "5"}, 4)


class _FourDevices:
    @staticmethod
    def device_count() -> int:
        return 4


def test_strategy_topology_on_a_pod_host(monkeypatch) -> None:
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "h0,h1")
    monkeypatch.setenv("TPU_WORKER_ID", "1")
    strategy = XLASPMDStrategy()
    strategy.connect(_FourDevices(), [0, 1, 2, 3], 1, None)
    assert strategy.validate() == []
    assert (strategy.num_nodes, strategy.node_rank, strategy.global_rank, strategy.local_rank) == (2, 1, 1, 0)
    assert (strategy.processes_per_node, strategy.devices_per_process, strategy.world_size) == (1, 4, 2)
    assert strategy.global_devices == 8
    assert (strategy.data_parallel_size, strategy.data_parallel_rank) == (2, 1)
    assert strategy.distributed_sampler_kwargs == {"num_replicas": 2, "rank": 1}
    assert strategy.layout.shape_for(strategy.global_devices) == (8,)
    assert not strategy.is_global_zero


def test_strategy_refuses_a_subset_of_the_devices_and_a_mesh_of_the_wrong_size(monkeypatch) -> None:
    for name in ("TPU_WORKER_HOSTNAMES", "TPU_WORKER_ID"):
        monkeypatch.delenv(name, raising=False)
    strategy = XLASPMDStrategy(mesh_shape=(2, 4))
    strategy.connect(_FourDevices(), [0], 1, None)
    problems = strategy.validate()
    assert any("devices=[0]" in p and "'auto'" in p for p in problems)
    assert any("mesh_shape=(2, 4)" in p for p in problems)


def test_trainer_uses_every_local_device_in_one_process(monkeypatch) -> None:
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    monkeypatch.setenv("CPU_NUM_DEVICES", "4")
    for name in ("TPU_WORKER_HOSTNAMES", "TPU_WORKER_ID", "ACCELKIT_DISABLE_PLUGIN_AUTOLOAD"):
        monkeypatch.delenv(name, raising=False)
    from accelkit import Trainer

    trainer = Trainer(accelerator="tpu", strategy="xla_spmd", devices="auto", logger=False)
    strategy = trainer.strategy
    assert isinstance(strategy, XLASPMDStrategy)
    assert strategy.devices == [0, 1, 2, 3]
    assert trainer.world_size == 1
    assert (strategy.processes_per_node, strategy.devices_per_process, strategy.data_parallel_size) == (1, 4, 1)
    assert strategy.distributed_sampler_kwargs is None
    assert not strategy.launches_workers
    assert "torch_xla" not in sys.modules  # composing never starts XLA


def test_trainer_reports_a_bad_mesh_with_its_values(monkeypatch) -> None:
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    monkeypatch.setenv("CPU_NUM_DEVICES", "4")
    from accelkit import Trainer

    with pytest.raises(ConfigurationError, match=r"mesh_shape=\(3,\) holds 3 devices but this run has 4"):
        Trainer(accelerator="tpu", strategy=XLASPMDStrategy(mesh_shape=(3,)), devices="auto", logger=False)
