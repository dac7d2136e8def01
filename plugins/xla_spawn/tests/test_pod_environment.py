"""The TPU pod view registered by accelkit-xla-spawn: detected from a recorded pod environment (a dict), read
with the same rules as the strategy's ``pod_plan``, and never making ``strategy="auto"`` pick ``ddp``."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("accelkit_xla_spawn", reason="the accelkit-xla-spawn plugin is not installed")

import pytest  # noqa: E402

import accelkit_xla_spawn.plugin  # noqa: E402
from accelkit.environments.detection import detect_cluster_environment  # noqa: E402
from accelkit.environments.torchrun import TorchrunEnvironment  # noqa: E402
from accelkit.plugins.manager import PluginManager  # noqa: E402
from accelkit_xla_spawn.environments import TPUPodEnvironment  # noqa: E402

#: host 2 of a four-host v4-32 pod
POD = {"TPU_WORKER_ID": "2", "TPU_WORKER_HOSTNAMES": "10.130.0.5,10.130.0.6,10.130.0.7,10.130.0.8",
       "TPU_ACCELERATOR_TYPE": "v4-32"}


@pytest.fixture
def manager() -> PluginManager:
    manager = PluginManager(autoload=False)
    manager.add_plugin(accelkit_xla_spawn.plugin, name="xla_spawn")
    return manager


def test_pod_host_is_detected_with_its_place(manager):
    found = detect_cluster_environment(manager, POD)
    assert type(found) is TPUPodEnvironment
    assert (found.world_size, found.global_rank, found.local_rank, found.num_nodes, found.node_rank) == (4, 2, 0, 4, 2)
    assert (found.main_address, found.main_port) == ("10.130.0.5", 8476)
    assert found.validate() == [] and "TPU_WORKER_ID=2" in found.reason()
    assert not found.launches_every_process  # each host starts its own replicas: auto must not join with ddp
    assert "torch_xla" not in sys.modules  # detection imports no runtime


def test_older_images_name_the_host_cloud_tpu_task_id(manager):
    env = {"CLOUD_TPU_TASK_ID": "1", "TPU_WORKER_HOSTNAMES": "a,b"}
    found = detect_cluster_environment(manager, env)
    assert type(found) is TPUPodEnvironment and found.node_rank == 1 and "CLOUD_TPU_TASK_ID=1" in found.reason()


def test_a_worker_id_outside_the_host_list_is_reported_as_pod_plan_words_it(manager):
    found = detect_cluster_environment(manager, {**POD, "TPU_WORKER_ID": "4"})
    expected = ("TPU_WORKER_ID=4 but TPU_WORKER_HOSTNAMES lists 4 host(s) (10.130.0.5, 10.130.0.6, 10.130.0.7, "
                "10.130.0.8); the worker id must be in 0..3.")
    assert found.validate() == [expected]
    assert TPUPodEnvironment({**POD, "TPU_WORKER_ID": "two"}).validate() == [
        "TPU_WORKER_ID='two' is not an integer host index."]


def test_torchrun_on_a_tpu_vm_wins_over_the_pod_view(manager):
    env = {**POD, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}
    assert type(detect_cluster_environment(manager, env)) is TorchrunEnvironment
    assert manager.registry.cluster_environment_names()[-1] == "tpu_pod"


def test_no_host_list_is_no_pod(manager):
    assert detect_cluster_environment(manager, {"TPU_WORKER_ID": "0"}) is None
