"""Cluster environments: each launcher's variables (recorded as dicts) read into ranks and a rendezvous address;
bad values named; detection order; a third party's environment; ``strategy="auto"`` joining under a launcher,
including real two-process runs shaped like ``srun`` and ``mpirun`` on the loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accelkit
from accelkit import hookimpl
from accelkit.environments.base import ClusterEnvironment, first_host, port_from_job_id
from accelkit.environments.detection import detect_cluster_environment
from accelkit.environments.kubeflow import KubeflowEnvironment
from accelkit.environments.lsf import LSFEnvironment
from accelkit.environments.mpi import MPIEnvironment
from accelkit.environments.slurm import SLURMEnvironment
from accelkit.environments.torchrun import TorchrunEnvironment
from accelkit.errors import ConfigurationError, PluginConflictError
from accelkit.plugins.manager import PluginManager
from accelkit.records import ClusterEnvironmentRecord, RunConfig
from accelkit.strategies.ddp import JOIN_WAIT_ENV, STILL_WAITING_S, DDPStrategy, find_free_port, join_wait_s
from helpers.guards import PYTHON, TESTS, child_env

#: every variable some built-in environment reads: cleared from os.environ by the ``clean`` fixture
LAUNCHER_PREFIXES = ("SLURM_", "OMPI_", "PMI_", "PMIX_", "MPI_LOCAL", "LSB_", "JSM_", "TORCHELASTIC_", "GROUP_",
                     "TPU_WORKER", "CLOUD_TPU_")
LAUNCHER_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
                  "KUBERNETES_PORT")


def without_launchers(env: dict[str, str]) -> dict[str, str]:
    """``env`` less every launcher variable."""
    return {k: v for k, v in env.items() if not k.startswith(LAUNCHER_PREFIXES) and k not in LAUNCHER_NAMES}


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """This process's environment without any launcher's variables, and no installed plugin discovered."""
    for key in list(os.environ):
        if key.startswith(LAUNCHER_PREFIXES) or key in LAUNCHER_NAMES:
            monkeypatch.delenv(key)
    monkeypatch.setenv("ACCELKIT_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("ACCELKIT_BLOCK_PLUGINS", raising=False)
    return monkeypatch


# ---------------------------------------------------------------------------------------- recorded environments
# What each launcher set in rank 3 of a 2-node x 2-process job (values as the launchers print them).
TORCHRUN = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
            "GROUP_WORLD_SIZE": "2", "ROLE_RANK": "3", "MASTER_ADDR": "node0.cluster", "MASTER_PORT": "29400",
            "TORCHELASTIC_RUN_ID": "job-17", "TORCHELASTIC_RESTART_COUNT": "0"}
SLURM = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_NNODES": "2",
         "SLURM_JOB_ID": "4321987", "SLURM_JOB_NAME": "train.sh", "SLURM_JOB_NODELIST": "gpu[07-08]",
         "SLURM_STEP_NODELIST": "gpu[07-08]", "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
         "SLURM_NTASKS_PER_NODE": "2"}
OPEN_MPI = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_COMM_WORLD_NODE_RANK": "1", "OMPI_UNIVERSE_SIZE": "4",
            "OMPI_MCA_ess_base_jobid": "3101884417", "MASTER_ADDR": "host0"}
INTEL_MPI = {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2", "MASTER_ADDR": "host0",
             "MASTER_PORT": "23456"}
KUBEFLOW = {"KUBERNETES_PORT": "tcp://10.96.0.1:443", "MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456",
            "WORLD_SIZE": "3", "RANK": "2", "PYTHONUNBUFFERED": "0"}
LSF = {"LSB_JOBID": "98765", "JSM_NAMESPACE_RANK": "3", "JSM_NAMESPACE_SIZE": "4", "JSM_NAMESPACE_LOCAL_RANK": "1",
       "JSM_NAMESPACE_LOCAL_SIZE": "2", "LSB_HOSTS": "batch2 a01n01 a01n01 a01n02 a01n02"}

SHAPE = ("world_size", "global_rank", "local_rank", "local_world_size", "num_nodes", "node_rank", "main_address",
         "main_port")


def shape(environment: ClusterEnvironment) -> tuple:
    return tuple(getattr(environment, attr) for attr in SHAPE)


@pytest.mark.parametrize(("env", "cls", "expected"), [
    (TORCHRUN, TorchrunEnvironment, (4, 3, 1, 2, 2, 1, "node0.cluster", 29400)),
    (SLURM, SLURMEnvironment, (4, 3, 1, 2, 2, 1, "gpu07", 10000 + 4321987 % 20000)),
    (OPEN_MPI, MPIEnvironment, (4, 3, 1, 2, 2, 1, "host0", 10000 + 3101884417 % 20000)),
    (INTEL_MPI, MPIEnvironment, (4, 3, 1, 2, 2, 1, "host0", 23456)),
    (KUBEFLOW, KubeflowEnvironment, (3, 2, 0, 1, 3, 2, "job-master-0", 23456)),
    (LSF, LSFEnvironment, (4, 3, 1, 2, 2, 1, "a01n01", 10000 + 98765 % 20000)),
], ids=["torchrun", "slurm", "open-mpi", "intel-mpi", "kubeflow", "lsf"])
def test_each_environment_reads_its_launchers_variables(env, cls, expected):
    found = detect_cluster_environment(PluginManager(autoload=False), env)
    assert type(found) is cls
    assert shape(found) == expected
    assert found.validate() == []
    assert found.launches_every_process


def test_reasons_name_the_variables_that_matched():
    assert "RANK=3" in TorchrunEnvironment(TORCHRUN).reason()
    assert "TORCHELASTIC_RUN_ID=job-17" in TorchrunEnvironment(TORCHRUN).reason()
    hand_made = {k: TORCHRUN[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    assert "torchrun" not in TorchrunEnvironment(hand_made).reason().split(" by ")[1]
    assert "SLURM_PROCID=3" in SLURMEnvironment(SLURM).reason() and "4321987" in SLURMEnvironment(SLURM).reason()
    assert "Open MPI" in MPIEnvironment(OPEN_MPI).reason() and "PMI" in MPIEnvironment(INTEL_MPI).reason()
    assert "KUBERNETES_PORT" in KubeflowEnvironment(KUBEFLOW).reason()
    assert "LSB_JOBID=98765" in LSFEnvironment(LSF).reason()


def test_a_plain_process_has_no_environment():
    assert detect_cluster_environment(PluginManager(autoload=False), {"HOME": "/root", "PATH": "/bin"}) is None
    assert detect_cluster_environment(None, {}) is None  # the core's built-ins without a manager


# ---------------------------------------------------------------------------------------- SLURM corner cases
@pytest.mark.parametrize(("nodelist", "first"), [
    ("node[01-04]", "node01"),
    ("node[01-04,07],gpu5", "node01"),
    ("gpu5,node[01-04]", "gpu5"),
    ("node[7]", "node7"),
    ("rack[2-3]-n[05-06]", "rack2-n05"),
    ("host0 host1", "host0"),
    ("node[001,003-005]", "node001"),
    ("single", "single"),
])
def test_first_host_of_a_slurm_node_list(nodelist, first):
    assert first_host(nodelist) == first


@pytest.mark.parametrize("job_name", ["bash", "interactive"])
def test_interactive_allocation_is_not_slurm(job_name):
    env = {**SLURM, "SLURM_JOB_NAME": job_name}
    assert not SLURMEnvironment.detect(env)
    assert detect_cluster_environment(None, env) is None


def test_allocation_without_tasks_is_not_slurm():
    env = {k: v for k, v in SLURM.items() if k != "SLURM_NTASKS"}
    assert detect_cluster_environment(None, env) is None


def test_slurm_step_node_list_and_tasks_per_node():
    # A step on the last two nodes of a 4-node job: rank 0 runs on the step's first node, not the job's.
    env = {**SLURM, "SLURM_JOB_NODELIST": "cn[1-4]", "SLURM_STEP_NODELIST": "cn[3-4]", "SLURM_NODEID": "1",
           "SLURM_STEP_TASKS_PER_NODE": "3,1", "SLURM_NTASKS": "4", "SLURM_PROCID": "3", "SLURM_LOCALID": "0"}
    slurm = SLURMEnvironment(env)
    assert slurm.main_address == "cn3"
    assert slurm.local_world_size == 1  # node 1 of "3,1"
    assert SLURMEnvironment({**env, "SLURM_NODEID": "0", "SLURM_PROCID": "0"}).local_world_size == 3
    assert SLURMEnvironment({**env, "SLURM_STEP_TASKS_PER_NODE": "2(x3),1", "SLURM_NODEID": "3"}).local_world_size == 1


def test_slurm_port_and_address_overrides():
    slurm = SLURMEnvironment({**SLURM, "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "31000"})
    assert (slurm.main_address, slurm.main_port) == ("10.1.2.3", 31000)
    # every task of a job derives the same port from the job id; different jobs get different ports
    assert SLURMEnvironment(SLURM).main_port == SLURMEnvironment({**SLURM, "SLURM_PROCID": "0"}).main_port
    assert port_from_job_id("4321987") != port_from_job_id("4321988")
    assert all(10000 <= port_from_job_id(j) < 30000 for j in ("1", "99999999", "abc.def"))


# ---------------------------------------------------------------------------------------- MPI corner cases
def test_mpirun_inside_a_slurm_allocation_is_mpi():
    # mpirun in an sbatch script: SLURM's variables describe the allocation (one task per node), not the ranks
    env = {**OPEN_MPI, "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_JOB_NAME": "job"}
    assert type(detect_cluster_environment(None, env)) is MPIEnvironment


def test_srun_with_pmi_is_slurm():
    # srun --mpi=pmi2 sets PMI_RANK/PMI_SIZE equal to SLURM's: SLURM's environment knows the host list
    env = {**SLURM, "PMI_RANK": SLURM["SLURM_PROCID"], "PMI_SIZE": SLURM["SLURM_NTASKS"]}
    assert type(detect_cluster_environment(None, env)) is SLURMEnvironment


def test_mpi_across_nodes_needs_master_addr():
    env = {k: v for k, v in OPEN_MPI.items() if k != "MASTER_ADDR"}
    problems = MPIEnvironment(env).validate()
    assert len(problems) == 1 and "MASTER_ADDR" in problems[0] and "mpirun -x" in problems[0]
    one_node = {**env, "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "3"}
    assert MPIEnvironment(one_node).main_address == "127.0.0.1" and MPIEnvironment(one_node).validate() == []


def test_open_mpi_node_rank_variable_is_not_the_node_index():
    # OMPI_COMM_WORLD_NODE_RANK counts processes on the node across jobs; the node index comes from the ranks
    env = {**OPEN_MPI, "OMPI_COMM_WORLD_NODE_RANK": "7"}
    assert MPIEnvironment(env).node_rank == 1


# ---------------------------------------------------------------------------------------- Kubeflow, LSF
def test_kubeflow_with_torchrun_in_the_pod_is_torchrun():
    env = {**KUBEFLOW, "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
    assert type(detect_cluster_environment(None, env)) is TorchrunEnvironment


def test_lsf_reads_the_rank_file(tmp_path):
    rankfile = tmp_path / "rankfile"
    rankfile.write_text("launch3\nb01n01\nb01n01\nb01n02\nb01n02\n")
    env = {**{k: v for k, v in LSF.items() if k != "LSB_HOSTS"}, "LSB_DJOB_RANKFILE": str(rankfile)}
    lsf = LSFEnvironment(env)
    assert (lsf.main_address, lsf.num_nodes, lsf.node_rank) == ("b01n01", 2, 1)
    missing = LSFEnvironment({**env, "LSB_DJOB_RANKFILE": str(tmp_path / "gone")}).validate()
    assert any("LSB_DJOB_RANKFILE=" in p and "cannot be read" in p for p in missing)


# ---------------------------------------------------------------------------------------- bad values
@pytest.mark.parametrize(("cls", "env", "variable"), [
    (TorchrunEnvironment, {**TORCHRUN, "RANK": "abc"}, "RANK='abc'"),
    (TorchrunEnvironment, {**TORCHRUN, "MASTER_PORT": "http"}, "MASTER_PORT='http'"),
    (SLURMEnvironment, {**SLURM, "SLURM_NTASKS": "four"}, "SLURM_NTASKS='four'"),
    (SLURMEnvironment, {**SLURM, "SLURM_STEP_TASKS_PER_NODE": "2(x)"}, "SLURM_STEP_TASKS_PER_NODE='2(x)'"),
    (MPIEnvironment, {**OPEN_MPI, "OMPI_COMM_WORLD_LOCAL_RANK": "1.0"}, "OMPI_COMM_WORLD_LOCAL_RANK='1.0'"),
    (LSFEnvironment, {**LSF, "JSM_NAMESPACE_SIZE": ""}, "JSM_NAMESPACE_SIZE=''"),
    (KubeflowEnvironment, {**KUBEFLOW, "WORLD_SIZE": "3 pods"}, "WORLD_SIZE='3 pods'"),
])
def test_a_bad_value_is_reported_naming_the_variable(cls, env, variable):
    problems = cls(env).validate()
    assert any(p.startswith(variable) for p in problems), problems
    assert any("not an integer" in p or "not a task count" in p for p in problems), problems


def test_reading_a_bad_value_raises_a_configuration_error():
    with pytest.raises(ConfigurationError, match=r"RANK='abc' is not an integer"):
        _ = TorchrunEnvironment({**TORCHRUN, "RANK": "abc"}).global_rank


@pytest.mark.parametrize(("env", "fragment"), [
    ({**TORCHRUN, "RANK": "4"}, "global rank 4 is outside 0..3"),
    ({**TORCHRUN, "LOCAL_RANK": "2"}, "local rank 2 is outside 0..1"),
    ({**TORCHRUN, "MASTER_PORT": "70000"}, "port 70000"),
    ({**TORCHRUN, "WORLD_SIZE": "0", "RANK": "0"}, "world size is 0"),
])
def test_inconsistent_values_are_reported(env, fragment):
    problems = TorchrunEnvironment(env).validate()
    assert any(fragment in p for p in problems), problems
    assert all("torchrun" in p for p in problems)  # the environment is named


def test_missing_required_value_says_which():
    env = {k: v for k, v in SLURM.items() if k != "SLURM_LOCALID"}
    assert any("SLURM_LOCALID is not set" in p for p in SLURMEnvironment(env).validate())


# ---------------------------------------------------------------------------------------- order and plugins
def test_detection_order_is_priority_then_name():
    manager = PluginManager(autoload=False)
    assert manager.registry.cluster_environment_names() == ["torchrun", "lsf", "mpi", "slurm", "kubeflow"]
    # torchrun's variables exported inside a SLURM job: torchrun started these processes
    both = {**SLURM, **TORCHRUN}
    assert type(detect_cluster_environment(manager, both)) is TorchrunEnvironment


class SchedulerEnvironment(ClusterEnvironment):
    """A scheduler the core does not know: ``MYSCHED_TASK`` of ``MYSCHED_TASKS``, rank 0 on ``MYSCHED_HEAD``."""

    name = "mysched"
    required = ("MYSCHED_TASK", "MYSCHED_TASKS")

    @property
    def world_size(self) -> int:
        return self.int_variable("MYSCHED_TASKS")

    @property
    def global_rank(self) -> int:
        return self.int_variable("MYSCHED_TASK")

    @property
    def local_rank(self) -> int:
        return self.int_variable("MYSCHED_LOCAL", default=0)

    @property
    def local_world_size(self) -> int:
        return self.int_variable("MYSCHED_PER_HOST", default=1)

    @property
    def num_nodes(self) -> int:
        return self.world_size // self.local_world_size

    @property
    def main_address(self) -> str:
        return self.env.get("MYSCHED_HEAD", "127.0.0.1")


class SchedulerPlugin:
    """A third-party plugin object registering :class:`SchedulerEnvironment` above every built-in."""

    ACCELKIT_API = ">=1.1,<2"

    def __init__(self, priority: int = 100, name: str = "mysched") -> None:
        self.priority, self.name = priority, name

    @hookimpl
    def accelkit_register_cluster_environments(self):
        return [ClusterEnvironmentRecord(self.name, SchedulerEnvironment, priority=self.priority,
                                         description="a scheduler the core does not know")]


MYSCHED = {"MYSCHED_TASK": "1", "MYSCHED_TASKS": "2", "MYSCHED_LOCAL": "1", "MYSCHED_PER_HOST": "2",
           "MYSCHED_HEAD": "head.example"}


def test_third_party_environment_on_a_plugin_manager():
    manager = PluginManager(autoload=False)
    manager.add_plugin(SchedulerPlugin(), name="mysched-plugin")
    record = manager.registry.cluster_environments["mysched"]
    assert record.provider == "plugin 'mysched-plugin'" and record.priority == 100
    found = detect_cluster_environment(manager, {**MYSCHED, **TORCHRUN})  # ranks above torchrun
    assert type(found) is SchedulerEnvironment
    assert (found.global_rank, found.world_size, found.main_address, found.main_port) == (1, 2, "head.example", 29400)
    assert "MYSCHED_TASK=1" in found.reason()


def test_equal_priorities_are_asked_by_name():
    manager = PluginManager(autoload=False)
    manager.add_plugin(SchedulerPlugin(priority=50, name="zz_sched"), name="z")
    manager.add_plugin(SchedulerPlugin(priority=50, name="aa_sched"), name="a")
    assert manager.registry.cluster_environment_names()[:3] == ["aa_sched", "torchrun", "zz_sched"]
    assert detect_cluster_environment(manager, {**MYSCHED, **TORCHRUN}).name == "mysched"  # class name, record aa


def test_a_name_claimed_twice_is_refused():
    manager = PluginManager(autoload=False)
    manager.add_plugin(SchedulerPlugin(name="slurm"), name="impostor")
    with pytest.warns(RuntimeWarning, match=r"cluster environment name 'slurm' is claimed by both"):
        manager.registry  # noqa: B018
    # every environment is asked when a run is composed, so detection (and with it every run) says so
    with pytest.raises(PluginConflictError,
                       match=r"'slurm' is claimed by both accelkit \(core\) and plugin 'impostor'"):
        detect_cluster_environment(manager, SLURM)


def test_a_broken_detect_names_its_plugin():
    class Broken(SchedulerEnvironment):
        @classmethod
        def detect(cls, env):
            raise KeyError("MYSCHED_TASK")

    class BrokenPlugin(SchedulerPlugin):
        @hookimpl
        def accelkit_register_cluster_environments(self):
            return [ClusterEnvironmentRecord("broken", Broken, priority=99)]

    manager = PluginManager(autoload=False)
    manager.add_plugin(BrokenPlugin(), name="broken-plugin")
    with pytest.raises(accelkit.PluginError, match=r"'broken' \(plugin 'broken-plugin'\) failed to detect: KeyError"):
        detect_cluster_environment(manager, {})


# ---------------------------------------------------------------------------------------- strategy="auto" joins
def srun_env(rank: int, tasks: int = 2) -> dict[str, str]:
    """What ``srun --ntasks-per-node=2 python train.py`` gives task ``rank`` on one node."""
    return {"SLURM_PROCID": str(rank), "SLURM_NTASKS": str(tasks), "SLURM_LOCALID": str(rank), "SLURM_NODEID": "0",
            "SLURM_NNODES": "1", "SLURM_JOB_ID": "777", "SLURM_JOB_NAME": "fit", "SLURM_JOB_NODELIST": "localhost",
            "SLURM_TASKS_PER_NODE": str(tasks)}


def mpirun_env(rank: int, ranks: int = 2) -> dict[str, str]:
    """What Open MPI's ``mpirun -np 2 python train.py`` gives rank ``rank`` on one node."""
    return {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(ranks),
            "OMPI_COMM_WORLD_LOCAL_RANK": str(rank), "OMPI_COMM_WORLD_LOCAL_SIZE": str(ranks)}


def trainer(cpu_plugin, **kwargs):
    kwargs.setdefault("plugins", [])
    kwargs["plugins"] = [cpu_plugin, *kwargs["plugins"]]
    return accelkit.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, **kwargs)


@pytest.mark.parametrize(("env", "name"), [(srun_env(1), "slurm"), (mpirun_env(1), "mpi"),
                                           ({**TORCHRUN, "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1",
                                             "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1"},
                                            "torchrun")], ids=["srun", "mpirun", "torchrun"])
def test_auto_under_a_launcher_joins_with_ddp(clean, cpu_plugin, env, name):
    for key, value in env.items():
        clean.setenv(key, value)
    run = trainer(cpu_plugin, devices=2)
    assert run.strategy.name == "ddp"  # not ddp_spawn: the processes exist already
    assert run.strategy.cluster_environment.name == name
    assert (run.global_rank, run.local_rank, run.world_size, run.strategy.node_rank) == (1, 1, 2, 0)
    assert run.strategy.launcher.launches_workers is False


def test_explicit_ddp_spawn_ignores_the_launcher(clean, cpu_plugin):
    for key, value in srun_env(1).items():
        clean.setenv(key, value)
    run = trainer(cpu_plugin, devices=2, strategy="ddp_spawn")
    assert run.strategy.name == "ddp_spawn" and run.global_rank == 0 and run.strategy.launcher.launches_workers


def test_interactive_allocation_spawns(clean, cpu_plugin):
    for key, value in {**srun_env(0), "SLURM_JOB_NAME": "interactive"}.items():
        clean.setenv(key, value)
    assert trainer(cpu_plugin, devices=2).strategy.name == "ddp_spawn"


def test_launcher_and_devices_that_disagree_are_refused(clean, cpu_plugin):
    for key, value in srun_env(1, tasks=3).items():
        clean.setenv(key, value)
    with pytest.raises(ConfigurationError, match=r"the launcher started 3 processes \(slurm: SLURM_PROCID=1"):
        trainer(cpu_plugin, devices=2)


def test_a_bad_launcher_variable_is_named_by_the_trainer(clean, cpu_plugin):
    for key, value in {**srun_env(1), "SLURM_PROCID": "one"}.items():
        clean.setenv(key, value)
    with pytest.raises(ConfigurationError, match=r"SLURM_PROCID='one' is not an integer"):
        trainer(cpu_plugin, devices=2)


def test_ddp_without_a_launcher_still_says_how_to_start_one(clean, cpu_plugin):
    with pytest.raises(ConfigurationError, match="torchrun --nproc-per-node 2"):
        trainer(cpu_plugin, devices=2, strategy="ddp")


def test_third_party_environment_through_trainer_plugins(clean, cpu_plugin):
    for key, value in MYSCHED.items():
        clean.setenv(key, value)
    run = trainer(cpu_plugin, devices=2, plugins=[SchedulerPlugin()])
    assert run.strategy.name == "ddp" and run.strategy.cluster_environment.name == "mysched"
    assert (run.global_rank, run.local_rank, run.world_size) == (1, 1, 2)


def test_a_hand_built_ddp_strategy_reads_the_builtin_environments(clean):
    for key, value in srun_env(1).items():
        clean.setenv(key, value)
    strategy = DDPStrategy()
    assert strategy.cluster_environment is None  # never composed
    assert (strategy.global_rank, strategy.local_rank) == (1, 1)


def test_a_pod_view_does_not_make_auto_join():
    from accelkit.plugins import builtin as _builtin

    class PodLike(SchedulerEnvironment):
        launches_every_process = False

    cpu = PluginManager(autoload=False)
    import accelkit_cpu.plugin

    cpu.add_plugin(accelkit_cpu.plugin, name="cpu")
    acc = cpu.registry.accelerators["cpu"].load()
    config = RunConfig(accelerator="cpu", accelerator_cls=acc, devices=[0, 1],
                       cluster_environment=PodLike(MYSCHED))
    assert _builtin.accelkit_default_strategy(config) == acc.auto_strategy(2, 1) != "ddp"
    config.cluster_environment = SchedulerEnvironment(MYSCHED)
    assert _builtin.accelkit_default_strategy(config) == "ddp"


# ---------------------------------------------------------------------------------------- real joins on loopback
def run_ranks(tmp_path: Path, launcher_env, timeout: float = 150) -> list[dict]:
    """Start two ranks of tests/helpers/launcher_env_fit.py as a launcher would; return their JSON lines."""
    port = find_free_port()
    base = without_launchers(child_env())
    base.pop("ACCELKIT_DISABLE_PLUGIN_AUTOLOAD", None)  # the installed cpu plugin is found as in a real job
    base.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"})
    script = TESTS / "helpers" / "launcher_env_fit.py"
    procs = [subprocess.Popen([PYTHON, str(script), str(tmp_path)], env={**base, **launcher_env(rank)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in range(2)]
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=timeout))
    finally:
        for proc in procs:  # a rank left waiting for its peer must not outlive the test
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert [p.returncode for p in procs] == [0, 0], "\n----\n".join(out + err[-4000:] for out, err in outputs)
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]


@pytest.mark.slow
@pytest.mark.parametrize(("launcher_env", "name"), [(srun_env, "slurm"), (mpirun_env, "mpi")],
                         ids=["srun-shaped", "mpirun-shaped"])
def test_two_launched_processes_join_and_train_together(tmp_path, launcher_env, name):
    reports = run_ranks(tmp_path, launcher_env)
    assert [r["rank"] for r in reports] == [0, 1]
    for report in reports:
        assert report == {**report, "strategy": "ddp", "environment": name, "world_size": 2, "global_step": 3}
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    assert ranks[0]["pid"] != ranks[1]["pid"]
    # each rank read its own shard, yet the all-reduced gradients keep the replicas bit-identical
    for key in ranks[0]["state_dict"]:
        assert torch.equal(ranks[0]["state_dict"][key], ranks[1]["state_dict"][key]), key
    from helpers.models import RegressionModule

    initial = RegressionModule().state_dict()
    assert not torch.equal(ranks[0]["state_dict"]["layer.weight"], initial["layer.weight"])


# ---------------------------------------------------------------------------------------- accelkit doctor
def test_doctor_names_the_detected_environment_and_why(clean, cpu_plugin, capsys):
    from accelkit import cli

    manager = PluginManager(autoload=False)
    manager.add_plugin(cpu_plugin, name="cpu")
    plain = cli.doctor_report(manager)["cluster_environment"]
    assert plain["name"] is None and plain["reason"].startswith("none: a plain process")
    assert plain["asked"] == ["torchrun", "lsf", "mpi", "slurm", "kubeflow"]

    for key, value in srun_env(1).items():
        clean.setenv(key, value)
    report = cli.doctor_report(manager)
    found = report["cluster_environment"]
    assert found["name"] == "slurm" and "SLURM_PROCID=1" in found["reason"]
    assert (found["global_rank"], found["world_size"], found["main_address"]) == (1, 2, "localhost")
    assert not report["problems"]

    clean.setenv("SLURM_PROCID", "x")
    report = cli.doctor_report(manager)
    assert any(p.startswith("SLURM_PROCID='x' is not an integer") for p in report["problems"])


def test_doctor_text_shows_the_environment(clean, capsys):
    from accelkit import cli

    for key, value in mpirun_env(0).items():
        clean.setenv(key, value)
    cli.main(["doctor"])
    out = capsys.readouterr().out
    assert "Cluster environment (asked in order: torchrun" in out
    assert "mpi: OMPI_COMM_WORLD_RANK=0, OMPI_COMM_WORLD_SIZE=2 set by Open MPI's mpirun" in out
    assert "rank 0 of 2 (local rank 0 of 2, node 0 of 1), rendezvous 127.0.0.1:29500" in out


def test_an_environment_instance_in_plugins_is_used_instead_of_detection(clean, cpu_plugin):
    # Lightning's Trainer(plugins=[SLURMEnvironment()]): the given environment decides, nothing is detected
    run = trainer(cpu_plugin, devices=2, plugins=[SLURMEnvironment(srun_env(1))])
    assert run.strategy.name == "ddp" and isinstance(run.strategy.cluster_environment, SLURMEnvironment)
    assert (run.global_rank, run.world_size) == (1, 2)


def test_rank_variables_left_over_in_the_shell_are_refused_before_waiting(clean, cpu_plugin):
    # no torchrun (TORCHELASTIC_RUN_ID) and no rendezvous host (MASTER_ADDR): nobody will start rank 1
    for key, value in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}.items():
        clean.setenv(key, value)
    with pytest.raises(accelkit.ConfigurationError, match="look left over in the shell") as info:
        trainer(cpu_plugin, devices=2)
    assert "unset RANK WORLD_SIZE LOCAL_RANK" in str(info.value)


@pytest.mark.slow
def test_ddp_spawn_asked_for_inside_a_slurm_job_starts_its_workers(clean, cpu_plugin, tmp_path):
    # the detected environment travels with the strategy to the workers (os.environ itself cannot be pickled)
    from helpers.models import RegressionModule

    for key, value in {**srun_env(0, tasks=1), "SLURM_NTASKS": "1"}.items():
        clean.setenv(key, value)
    run = trainer(cpu_plugin, devices=2, strategy="ddp_spawn", max_epochs=1, enable_progress_bar=False,
                  enable_model_summary=False, default_root_dir=tmp_path)
    assert run.strategy.cluster_environment is not None and run.strategy.cluster_environment.name == "slurm"
    run.fit(RegressionModule())
    assert run.global_step == 2  # 32 samples, batch 8, two ranks


# ---------------------------------------------------------------------------------------- stale launcher variables
def launcher_named(tmp_path: Path, name: str) -> str:
    """A copy of ``sh`` called ``name``: a real parent process with a launcher's command name."""
    import shutil

    path = tmp_path / name
    shutil.copy("/bin/sh", path)
    return str(path)


@pytest.mark.slow
def test_stale_mpi_variables_stop_the_run_after_the_wait_and_name_the_variables(tmp_path):
    """Each rank alone, as after `export OMPI_COMM_WORLD_RANK=...`: it stops after the join wait (30 s by default;
    5 s here through ``ACCELKIT_JOIN_WAIT_S``) with a sentence, well before the collective timeout (600 s)."""
    base = without_launchers(child_env())
    base.pop("ACCELKIT_DISABLE_PLUGIN_AUTOLOAD", None)
    script = TESTS / "helpers" / "launcher_env_fit.py"
    procs = [subprocess.Popen([PYTHON, str(script), str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env={**base, **mpirun_env(rank), "MASTER_ADDR": "127.0.0.1",
                                              "MASTER_PORT": str(find_free_port()), JOIN_WAIT_ENV: "5"})
             for rank in (0, 1)]
    try:
        outputs = [proc.communicate(timeout=240) for proc in procs]  # an upper bound against a hang
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    for rank, (proc, (_, err)) in enumerate(zip(procs, outputs, strict=True)):
        assert proc.returncode == 1, err[-2000:]
        assert f"ConfigurationError: rank {rank} waited 5 s for all 2 processes to join" in err, err[-2000:]
        assert (f"OMPI_COMM_WORLD_RANK={rank}, OMPI_COMM_WORLD_SIZE=2 set by Open MPI's mpirun, but no launcher "
                "process") in err and "these variables are stale" in err


def test_the_join_wait_is_30_s_unless_the_environment_variable_sets_another(monkeypatch):
    monkeypatch.delenv(JOIN_WAIT_ENV, raising=False)
    assert join_wait_s() == STILL_WAITING_S == 30.0
    monkeypatch.setenv(JOIN_WAIT_ENV, " 2.5 ")
    assert join_wait_s() == 2.5
    monkeypatch.setenv(JOIN_WAIT_ENV, "")
    assert join_wait_s() == 30.0


@pytest.mark.parametrize("value", ["0", "-3", "soon", "nan", "inf", "1e400"])
def test_a_bad_join_wait_is_refused_naming_the_variable_and_its_value(monkeypatch, value):
    monkeypatch.setenv(JOIN_WAIT_ENV, value)
    with pytest.raises(ConfigurationError, match=f"ACCELKIT_JOIN_WAIT_S='{value}' is not a positive number of "
                                                 "seconds: set it to one"):
        join_wait_s()


@pytest.mark.slow
def test_doctor_reports_stale_mpi_variables_and_not_those_under_mpirun(clean, tmp_path):
    from accelkit import cli

    for key, value in mpirun_env(0).items():
        clean.setenv(key, value)
    assert MPIEnvironment().launcher_running() is False
    report = cli.doctor_report(PluginManager(autoload=False))
    assert any("these variables are stale" in p and "OMPI_COMM_WORLD_RANK=0" in p for p in report["problems"])
    # the same variables in a process that a (real, if borrowed) `mpirun` process runs: not stale
    code = "from accelkit.environments.mpi import MPIEnvironment; print(MPIEnvironment().launcher_running())"
    proc = subprocess.run([launcher_named(tmp_path, "mpirun"), "-c", f'"{PYTHON}" -c "{code}"'],
                          env={**child_env(), **mpirun_env(0)}, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "True", proc.stderr
