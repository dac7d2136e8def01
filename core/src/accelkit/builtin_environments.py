"""The cluster environments the core registers: torchrun, SLURM, MPI, LSF and Kubeflow's PyTorchJob.

Each reads only the mapping it was given (see :class:`accelkit.environments.ClusterEnvironment`). The priorities
that order their detection are in ``accelkit._builtin`` and explained in ``docs/environments.rst``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from accelkit.environments import ClusterEnvironment, first_host, port_from_job_id
from accelkit.errors import ConfigurationError


class TorchrunEnvironment(ClusterEnvironment):
    """Processes started by ``torchrun`` (TorchElastic), or by anything exporting ``RANK``, ``WORLD_SIZE`` and
    ``LOCAL_RANK`` for ``torch.distributed``'s ``env://`` rendezvous (a hand-written launch script, say)."""

    name = "torchrun"
    required = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
    variables: ClassVar[dict[str, str]] = {
        "RANK": "global rank",
        "WORLD_SIZE": "processes across nodes",
        "LOCAL_RANK": "rank on this node",
        "LOCAL_WORLD_SIZE": "processes on this node (torchrun's --nproc-per-node)",
        "GROUP_RANK": "this node's index (torchrun's --node-rank)",
        "GROUP_WORLD_SIZE": "number of nodes (torchrun's agents)",
        "MASTER_ADDR": "rendezvous host (rank 0's)",
        "MASTER_PORT": "rendezvous port",
        "TORCHELASTIC_RUN_ID": "set by torchrun only: tells it from a hand-made launch",
    }

    def validate(self) -> list[str]:
        """The base checks, and variables that look left over in the shell: ``torch.distributed``'s ``env://``
        rendezvous needs ``MASTER_ADDR``, which torchrun and hand-written launchers set; without it (and without
        torchrun's ``TORCHELASTIC_RUN_ID``) nobody is going to start the other ranks, and joining would wait for
        them until the collective timeout."""
        problems = super().validate()
        if not problems and "TORCHELASTIC_RUN_ID" not in self.env and "MASTER_ADDR" not in self.env and \
                self.world_size > 1:
            problems.append(
                f"RANK={self.env['RANK']}, WORLD_SIZE={self.env['WORLD_SIZE']}, LOCAL_RANK={self.env['LOCAL_RANK']} "
                "are set, but neither TORCHELASTIC_RUN_ID (torchrun) nor MASTER_ADDR (any launcher's rendezvous "
                "host): they look left over in the shell, and joining would wait for ranks nobody starts. Unset "
                "them (`unset RANK WORLD_SIZE LOCAL_RANK`), or set MASTER_ADDR/MASTER_PORT if a launcher of your "
                "own started these processes.")
        return problems

    def reason(self) -> str:
        """Names the three rank variables, and ``TORCHELASTIC_RUN_ID`` when torchrun itself set them."""
        launcher = ("torchrun (TORCHELASTIC_RUN_ID="f"{self.env['TORCHELASTIC_RUN_ID']})"
                    if "TORCHELASTIC_RUN_ID" in self.env else "a launcher exporting torch.distributed's variables")
        return f"{super().reason()} by {launcher}"

    @property
    def world_size(self) -> int:
        """``WORLD_SIZE``."""
        return self._int("WORLD_SIZE")

    @property
    def global_rank(self) -> int:
        """``RANK``."""
        return self._int("RANK")

    @property
    def local_rank(self) -> int:
        """``LOCAL_RANK``."""
        return self._int("LOCAL_RANK")

    @property
    def local_world_size(self) -> int:
        """``LOCAL_WORLD_SIZE``, else the world over the nodes."""
        if "LOCAL_WORLD_SIZE" in self.env:
            return self._int("LOCAL_WORLD_SIZE")
        return super().local_world_size

    @property
    def num_nodes(self) -> int:
        """``GROUP_WORLD_SIZE``, else ``WORLD_SIZE / LOCAL_WORLD_SIZE``, else 1 (nothing says otherwise)."""
        if "GROUP_WORLD_SIZE" in self.env:
            return self._int("GROUP_WORLD_SIZE")
        if "LOCAL_WORLD_SIZE" in self.env:
            return -(-self.world_size // max(1, self._int("LOCAL_WORLD_SIZE")))
        return 1

    @property
    def node_rank(self) -> int:
        """``GROUP_RANK`` (or ``NODE_RANK``), else computed from the ranks."""
        if "GROUP_RANK" in self.env or "NODE_RANK" in self.env:
            return self._int("GROUP_RANK", "NODE_RANK")
        return super().node_rank


def _tasks_on_node(spec: str, node: int, variable: str) -> int:
    """The task count of node ``node`` in SLURM's compressed form ``"2(x3),1"`` (nodes 0-2: 2 tasks, node 3: 1)."""
    counts: list[int] = []
    for part in spec.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:\(x(\d+)\))?\s*", part)
        if match is None:
            raise ConfigurationError(f"{variable}={spec!r} is not a task count per node such as '2(x3),1'.")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts[min(node, len(counts) - 1)]


class SLURMEnvironment(ClusterEnvironment):
    """Tasks started by SLURM's ``srun`` (inside ``sbatch`` or ``salloc``).

    Not detected in an interactive allocation (``SLURM_JOB_NAME`` ``bash`` or ``interactive``: ``salloc``'s shell,
    ``srun --pty bash``), where the user starts processes some other way, nor where ``SLURM_NTASKS`` is unset.
    """

    name = "slurm"
    required = ("SLURM_PROCID", "SLURM_NTASKS")
    variables: ClassVar[dict[str, str]] = {
        "SLURM_PROCID": "global rank",
        "SLURM_NTASKS": "processes across nodes",
        "SLURM_LOCALID": "rank on this node",
        "SLURM_NODEID": "this node's index in the step",
        "SLURM_NNODES": "number of nodes (SLURM_STEP_NUM_NODES, SLURM_JOB_NUM_NODES also read)",
        "SLURM_STEP_TASKS_PER_NODE": "tasks per node, e.g. '2(x3),1' (SLURM_TASKS_PER_NODE, SLURM_NTASKS_PER_NODE)",
        "SLURM_STEP_NODELIST": "the step's hosts; the first runs rank 0 (else SLURM_JOB_NODELIST, SLURM_NODELIST)",
        "SLURM_JOB_ID": "the job id; the rendezvous port is derived from it when MASTER_PORT is unset",
        "SLURM_JOB_NAME": "'bash' or 'interactive' marks an interactive allocation: not detected",
        "MASTER_ADDR": "overrides the first host of the node list",
        "MASTER_PORT": "overrides the port derived from the job id",
    }
    #: job names of an interactive allocation, where processes are not started by ``srun``
    INTERACTIVE_JOB_NAMES = ("bash", "interactive")

    @classmethod
    def detect(cls, env: Mapping[str, str]) -> bool:
        """``SLURM_PROCID`` and ``SLURM_NTASKS`` set, outside an interactive allocation."""
        return super().detect(env) and env.get("SLURM_JOB_NAME") not in cls.INTERACTIVE_JOB_NAMES

    def reason(self) -> str:
        """Names the rank variables and the job."""
        job = f", job {self.env['SLURM_JOB_ID']}" if "SLURM_JOB_ID" in self.env else ""
        return f"{super().reason()} by srun{job}"

    @property
    def world_size(self) -> int:
        """``SLURM_NTASKS``."""
        return self._int("SLURM_NTASKS")

    @property
    def global_rank(self) -> int:
        """``SLURM_PROCID``."""
        return self._int("SLURM_PROCID")

    @property
    def local_rank(self) -> int:
        """``SLURM_LOCALID``."""
        return self._int("SLURM_LOCALID")

    @property
    def num_nodes(self) -> int:
        """The step's node count (``SLURM_STEP_NUM_NODES``, ``SLURM_NNODES``, ``SLURM_JOB_NUM_NODES``)."""
        return self._int("SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES", default=1)

    @property
    def node_rank(self) -> int:
        """``SLURM_NODEID``, else computed from the ranks."""
        if "SLURM_NODEID" in self.env:
            return self._int("SLURM_NODEID")
        return super().node_rank

    @property
    def local_world_size(self) -> int:
        """This node's entry of the tasks-per-node list, else ``SLURM_NTASKS_PER_NODE``, else an even share."""
        for variable in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
            if variable in self.env:
                node = self._int("SLURM_NODEID", default=0)
                return _tasks_on_node(self.env[variable], node, variable)
        if "SLURM_NTASKS_PER_NODE" in self.env:
            return self._int("SLURM_NTASKS_PER_NODE")
        return super().local_world_size

    @property
    def main_address(self) -> str:
        """``MASTER_ADDR``, else the first host of the step's (or job's) node list."""
        if self.env.get("MASTER_ADDR"):
            return self.env["MASTER_ADDR"]
        for variable in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
            if self.env.get(variable, "").strip():
                return first_host(self.env[variable])
        return "127.0.0.1"

    @property
    def main_port(self) -> int:
        """``MASTER_PORT``, else derived from ``SLURM_JOB_ID`` (so every task computes the same port)."""
        if "MASTER_PORT" in self.env:
            return self._int("MASTER_PORT")
        job_id = self.env.get("SLURM_JOB_ID") or self.env.get("SLURM_JOBID")
        return port_from_job_id(job_id) if job_id else super().main_port


class MPIEnvironment(ClusterEnvironment):
    """Ranks started by ``mpirun``/``mpiexec``: Open MPI's ``OMPI_COMM_WORLD_*`` or the PMI variables of MPICH,
    Intel MPI and other Hydra-based launchers (``PMI_RANK``, ``PMI_SIZE``).

    MPI does not say where rank 0 runs: on one node the loopback is used, across nodes export ``MASTER_ADDR``
    (``mpirun -x MASTER_ADDR=host0``). Not detected when the PMI variables merely repeat SLURM's (``srun
    --mpi=pmi2``): the SLURM environment then knows the host list. ``OMPI_COMM_WORLD_NODE_RANK`` is not a node
    index (Open MPI documents it as a rank on the node across all jobs), so the node rank is computed.
    """

    name = "mpi"
    variables: ClassVar[dict[str, str]] = {
        "OMPI_COMM_WORLD_RANK": "global rank (Open MPI)",
        "OMPI_COMM_WORLD_SIZE": "processes across nodes (Open MPI)",
        "OMPI_COMM_WORLD_LOCAL_RANK": "rank on this node (Open MPI)",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "processes on this node (Open MPI)",
        "PMI_RANK": "global rank (MPICH, Intel MPI)",
        "PMI_SIZE": "processes across nodes (MPICH, Intel MPI)",
        "MPI_LOCALRANKID": "rank on this node (Hydra; PMI_LOCAL_RANK also read)",
        "MPI_LOCALNRANKS": "processes on this node (Hydra; PMI_LOCAL_SIZE also read)",
        "MASTER_ADDR": "rank 0's host: required across nodes",
        "MASTER_PORT": "rendezvous port (else derived from the MPI job id)",
    }
    address_hint = ("MPI does not say where rank 0 runs across nodes; export MASTER_ADDR=<rank 0's host> to every "
                    "rank (Open MPI: mpirun -x MASTER_ADDR=...; MPICH: mpiexec -genv MASTER_ADDR ...).")
    _OMPI = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")
    _PMI = ("PMI_RANK", "PMI_SIZE")

    @classmethod
    def _names(cls, env: Mapping[str, str]) -> tuple[str, str] | None:
        for names in (cls._OMPI, cls._PMI):
            if all(n in env for n in names):
                return names
        return None

    @classmethod
    def detect(cls, env: Mapping[str, str]) -> bool:
        """Open MPI's or PMI's rank and size set, and not a copy of SLURM's (``srun`` started these ranks)."""
        names = cls._names(env)
        if names is None:
            return False
        same_as_slurm = (SLURMEnvironment.detect(env) and env.get("SLURM_PROCID") == env[names[0]]
                         and env.get("SLURM_NTASKS") == env[names[1]])
        return not same_as_slurm

    @property
    def _open_mpi(self) -> bool:
        return self._names(self.env) == self._OMPI

    def reason(self) -> str:
        """Names the rank variables and which MPI flavour set them."""
        names = self._names(self.env) or self._OMPI
        shown = ", ".join(f"{n}={self.env.get(n)}" for n in names)
        return f"{shown} set by {'Open MPI' if self._open_mpi else 'a PMI launcher (MPICH, Intel MPI)'}'s mpirun"

    @property
    def world_size(self) -> int:
        """``OMPI_COMM_WORLD_SIZE`` or ``PMI_SIZE``."""
        return self._int("OMPI_COMM_WORLD_SIZE" if self._open_mpi else "PMI_SIZE")

    @property
    def global_rank(self) -> int:
        """``OMPI_COMM_WORLD_RANK`` or ``PMI_RANK``."""
        return self._int("OMPI_COMM_WORLD_RANK" if self._open_mpi else "PMI_RANK")

    @property
    def local_rank(self) -> int:
        """``OMPI_COMM_WORLD_LOCAL_RANK``, or ``MPI_LOCALRANKID``/``PMI_LOCAL_RANK``."""
        if self._open_mpi:
            return self._int("OMPI_COMM_WORLD_LOCAL_RANK")
        return self._int("MPI_LOCALRANKID", "PMI_LOCAL_RANK")

    @property
    def local_world_size(self) -> int:
        """``OMPI_COMM_WORLD_LOCAL_SIZE``, or ``MPI_LOCALNRANKS``/``PMI_LOCAL_SIZE``; else all ranks on one node."""
        names = ("OMPI_COMM_WORLD_LOCAL_SIZE",) if self._open_mpi else ("MPI_LOCALNRANKS", "PMI_LOCAL_SIZE")
        return self._int(*names, default=self.world_size)

    @property
    def num_nodes(self) -> int:
        """The world over the processes per node (ranks placed node by node)."""
        return -(-self.world_size // max(1, self.local_world_size))

    @property
    def main_address(self) -> str:
        """``MASTER_ADDR``; the loopback on one node; empty (a problem :meth:`validate` reports) otherwise."""
        if self.env.get("MASTER_ADDR"):
            return self.env["MASTER_ADDR"]
        return "127.0.0.1" if self.num_nodes == 1 else ""

    @property
    def main_port(self) -> int:
        """``MASTER_PORT``, else derived from the launcher's job id, else 29500."""
        if "MASTER_PORT" in self.env:
            return self._int("MASTER_PORT")
        for variable in ("OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "PMI_JOBID"):
            if self.env.get(variable):
                return port_from_job_id(self.env[variable])
        return super().main_port



class LSFEnvironment(ClusterEnvironment):
    """Tasks started by ``jsrun`` under IBM Spectrum LSF (Summit-style systems with a launch node).

    The hosts come from the rank file ``LSB_DJOB_RANKFILE`` (one line per slot), else from ``LSB_HOSTS``; their
    first entry is the launch node, which runs no task, so rank 0 runs on the second.
    """

    name = "lsf"
    required = ("LSB_JOBID", "JSM_NAMESPACE_RANK", "JSM_NAMESPACE_SIZE", "JSM_NAMESPACE_LOCAL_RANK")
    variables: ClassVar[dict[str, str]] = {
        "LSB_JOBID": "the job id; the rendezvous port is derived from it when MASTER_PORT is unset",
        "JSM_NAMESPACE_RANK": "global rank (jsrun)",
        "JSM_NAMESPACE_SIZE": "processes across nodes (jsrun)",
        "JSM_NAMESPACE_LOCAL_RANK": "rank on this node (jsrun)",
        "JSM_NAMESPACE_LOCAL_SIZE": "processes on this node (jsrun)",
        "LSB_DJOB_RANKFILE": "path of the rank file: the launch node, then one line per slot",
        "LSB_HOSTS": "the same host list, space separated (read when there is no rank file)",
        "MASTER_ADDR": "overrides the first compute host",
        "MASTER_PORT": "overrides the port derived from the job id",
    }

    def _hosts(self) -> list[str]:
        """Distinct compute hosts in slot order (the launch node dropped)."""
        path = self.env.get("LSB_DJOB_RANKFILE", "").strip()
        if path:
            try:
                entries = [line.strip() for line in Path(path).read_text().splitlines() if line.strip()]
            except OSError as exc:
                raise ConfigurationError(f"LSB_DJOB_RANKFILE={path!r} cannot be read: {exc.strerror or exc}.") from None
        else:
            entries = self.env.get("LSB_HOSTS", "").split()
        return list(dict.fromkeys(entries[1:]))

    @property
    def world_size(self) -> int:
        """``JSM_NAMESPACE_SIZE``."""
        return self._int("JSM_NAMESPACE_SIZE")

    @property
    def global_rank(self) -> int:
        """``JSM_NAMESPACE_RANK``."""
        return self._int("JSM_NAMESPACE_RANK")

    @property
    def local_rank(self) -> int:
        """``JSM_NAMESPACE_LOCAL_RANK``."""
        return self._int("JSM_NAMESPACE_LOCAL_RANK")

    @property
    def num_nodes(self) -> int:
        """Distinct compute hosts of the rank file (or ``LSB_HOSTS``); 1 when neither is set."""
        return len(self._hosts()) or 1

    @property
    def local_world_size(self) -> int:
        """``JSM_NAMESPACE_LOCAL_SIZE``, else an even share of the world."""
        if "JSM_NAMESPACE_LOCAL_SIZE" in self.env:
            return self._int("JSM_NAMESPACE_LOCAL_SIZE")
        return super().local_world_size

    @property
    def main_address(self) -> str:
        """``MASTER_ADDR``, else the first compute host."""
        if self.env.get("MASTER_ADDR"):
            return self.env["MASTER_ADDR"]
        hosts = self._hosts()
        return hosts[0] if hosts else "127.0.0.1"

    @property
    def main_port(self) -> int:
        """``MASTER_PORT``, else derived from ``LSB_JOBID``."""
        if "MASTER_PORT" in self.env:
            return self._int("MASTER_PORT")
        return port_from_job_id(self.env["LSB_JOBID"])


class KubeflowEnvironment(ClusterEnvironment):
    """A Kubeflow PyTorchJob pod running one process: the operator sets ``MASTER_ADDR``, ``MASTER_PORT``,
    ``WORLD_SIZE`` and ``RANK`` (the pod's index) but no ``LOCAL_RANK``.

    A PyTorchJob with ``nprocPerNode`` > 1 runs torchrun inside each pod, which sets ``LOCAL_RANK``; the torchrun
    environment then describes the processes.
    """

    name = "kubeflow"
    required = ("KUBERNETES_PORT", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")
    variables: ClassVar[dict[str, str]] = {
        "KUBERNETES_PORT": "set in every Kubernetes pod",
        "MASTER_ADDR": "the master pod's service name",
        "MASTER_PORT": "rendezvous port",
        "WORLD_SIZE": "number of pods (one process each)",
        "RANK": "this pod's index",
    }

    @classmethod
    def detect(cls, env: Mapping[str, str]) -> bool:
        """The operator's variables set in a Kubernetes pod, and ``LOCAL_RANK`` not set."""
        return super().detect(env) and "LOCAL_RANK" not in env

    def reason(self) -> str:
        """Names the variables the PyTorchJob operator set."""
        shown = ", ".join(f"{n}={self.env[n]}" for n in ("RANK", "WORLD_SIZE", "MASTER_ADDR"))
        return f"{shown} set in a Kubernetes pod (KUBERNETES_PORT) without LOCAL_RANK: a PyTorchJob"

    @property
    def world_size(self) -> int:
        """``WORLD_SIZE``: one process per pod."""
        return self._int("WORLD_SIZE")

    @property
    def global_rank(self) -> int:
        """``RANK``."""
        return self._int("RANK")

    @property
    def local_rank(self) -> int:
        """0: the pod's only process."""
        return 0

    @property
    def local_world_size(self) -> int:
        """1."""
        return 1

    @property
    def num_nodes(self) -> int:
        """One node per pod: ``WORLD_SIZE``."""
        return self.world_size

    @property
    def node_rank(self) -> int:
        """The pod's index: ``RANK``."""
        return self.global_rank

    @property
    def main_address(self) -> str:
        """``MASTER_ADDR``."""
        return self.env["MASTER_ADDR"]
