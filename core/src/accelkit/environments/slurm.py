"""The SLURM environment: ranks from ``srun``'s variables, the main address from the node list."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar

from accelkit.environments.base import ClusterEnvironment, first_host, port_from_job_id
from accelkit.errors import ConfigurationError


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
        "SLURM_RESTART_COUNT": "how many times the job was requeued (the run's attempt; unset: the first)",
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
    def restart_attempt(self) -> int:
        """``SLURM_RESTART_COUNT`` (set by SLURM in a requeued job, the same in every task), else 0."""
        return self._int("SLURM_RESTART_COUNT", default=0)

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
