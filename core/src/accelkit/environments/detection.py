"""Which cluster environment started this process: every registered one is asked, in priority order."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Protocol, cast

from accelkit.environments.base import ClusterEnvironment
from accelkit.errors import PluginConflictError, PluginError
from accelkit.records import ClusterEnvironmentRecord, by_priority

_ENVIRONMENTS = "accelkit.environments:"


def builtin_cluster_environments() -> list[ClusterEnvironmentRecord]:
    """The records of the launchers the core recognises (the core's own plugin registers them, and detection without
    a plugin manager asks them). Priorities order detection where their variables overlap: torchrun's variables are
    exported by hand inside other jobs, ``jsrun`` sets MPI's variables too, ``mpirun`` inside a SLURM allocation
    leaves SLURM's describing the allocation, and Kubeflow's are torchrun's without ``LOCAL_RANK``."""
    return [
        ClusterEnvironmentRecord("torchrun", _ENVIRONMENTS + "TorchrunEnvironment", priority=50,
                                 description="torchrun / TorchElastic (RANK, WORLD_SIZE, LOCAL_RANK)"),
        ClusterEnvironmentRecord("lsf", _ENVIRONMENTS + "LSFEnvironment", priority=40,
                                 description="IBM Spectrum LSF's jsrun (LSB_JOBID, JSM_NAMESPACE_*)"),
        ClusterEnvironmentRecord("mpi", _ENVIRONMENTS + "MPIEnvironment", priority=30,
                                 description="mpirun: Open MPI (OMPI_COMM_WORLD_*) or PMI (PMI_RANK, PMI_SIZE)"),
        ClusterEnvironmentRecord("slurm", _ENVIRONMENTS + "SLURMEnvironment", priority=20,
                                 description="SLURM's srun (SLURM_PROCID, SLURM_NTASKS)"),
        ClusterEnvironmentRecord("kubeflow", _ENVIRONMENTS + "KubeflowEnvironment", priority=10,
                                 description="a Kubeflow PyTorchJob pod (MASTER_ADDR, WORLD_SIZE, RANK; "
                                             "no LOCAL_RANK)"),
    ]


class EnvironmentRegistry(Protocol):
    """What detection reads of a :class:`~accelkit.plugins.registry.Registry`."""

    @property
    def cluster_environments(self) -> Mapping[str, ClusterEnvironmentRecord]:
        """The records by name (with the ``conflicts`` of names two plugins claim)."""

    def cluster_environment_records(self) -> list[ClusterEnvironmentRecord]:
        """Every record, in detection order."""


class EnvironmentSource(Protocol):
    """What detection reads of a :class:`~accelkit.plugins.manager.PluginManager`: its registry."""

    @property
    def registry(self) -> EnvironmentRegistry:
        """The registry of the loaded plugins."""


def environment_class(record: ClusterEnvironmentRecord) -> type[ClusterEnvironment]:
    """The class ``record`` names, imported if its target is a string."""
    return cast("type[ClusterEnvironment]", record.load())  # the record's contract: a ClusterEnvironment subclass


# --------------------------------------------------------------------------------------------- detection
def cluster_environment_records(manager: EnvironmentSource) -> list[ClusterEnvironmentRecord]:
    """The registered :class:`~accelkit.records.ClusterEnvironmentRecord` objects, in detection order:
    highest priority first, ties by name."""
    return manager.registry.cluster_environment_records()


def detect_cluster_environment(manager: EnvironmentSource | None = None,
                               env: Mapping[str, str] | None = None) -> ClusterEnvironment | None:
    """The environment that describes this process, or ``None`` for a plain process.

    :param manager: a :class:`~accelkit.plugins.manager.PluginManager` whose registered environments are asked; without
        one, only the core's built-in environments.
    :param env: the variables to read (default ``os.environ``).

    Environments are asked in order of priority (highest first, ties by name) and the first whose ``detect``
    answers ``True`` wins. Order matters because launchers overlap: torchrun's ``RANK``/``WORLD_SIZE``/
    ``LOCAL_RANK`` are also exported inside a SLURM or MPI job, and ``mpirun`` inside a SLURM allocation leaves
    SLURM's variables describing the allocation, not the MPI ranks.
    """
    env = os.environ if env is None else env
    if manager is None:
        records = by_priority(builtin_cluster_environments())
    else:
        registry = manager.registry
        for conflicts in getattr(registry.cluster_environments, "conflicts", {}).values():
            # every environment is asked, so a name two plugins claim leaves detection undecidable
            raise PluginConflictError(f"{conflicts[0].message()}.")
        records = cluster_environment_records(manager)
    for record in records:
        try:
            cls = environment_class(record)
            found = cls.detect(env)
        except Exception as exc:  # a broken plugin names itself instead of failing somewhere deeper
            raise PluginError(f"cluster environment {record.name!r} ({record.provider or 'unknown provider'}) "
                              f"failed to detect: {type(exc).__name__}: {exc}") from exc
        if found:
            return cls(env)
    return None


__all__ = ["ClusterEnvironment", "builtin_cluster_environments", "cluster_environment_records",
           "detect_cluster_environment"]
