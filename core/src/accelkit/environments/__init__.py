"""Cluster environments: what a launcher (torchrun, SLURM's ``srun``, ``mpirun``, a Kubeflow PyTorchJob, LSF's
``jsrun``) tells each process it started about its place in the run.

The base class is :class:`ClusterEnvironment` (``base``); one module per launcher it
recognises; :func:`detect_cluster_environment` (``detection``) asks every registered one.
"""

from accelkit.environments.base import DEFAULT_PORT, ClusterEnvironment, first_host, port_from_job_id
from accelkit.environments.detection import cluster_environment_records, detect_cluster_environment
from accelkit.environments.kubeflow import KubeflowEnvironment
from accelkit.environments.lsf import LSFEnvironment
from accelkit.environments.mpi import MPIEnvironment
from accelkit.environments.slurm import SLURMEnvironment
from accelkit.environments.torchrun import TorchrunEnvironment

__all__ = ["DEFAULT_PORT", "ClusterEnvironment", "KubeflowEnvironment", "LSFEnvironment", "MPIEnvironment",
           "SLURMEnvironment", "TorchrunEnvironment", "cluster_environment_records", "detect_cluster_environment",
           "first_host", "port_from_job_id"]
