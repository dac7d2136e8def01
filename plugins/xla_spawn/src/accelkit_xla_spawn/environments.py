"""The TPU pod view: one host of a Cloud TPU pod, as its environment describes it.

On a pod the same command runs on every host (``gcloud compute tpus tpu-vm ssh --worker=all``); each host's
process then starts its own replicas (``xla_spawn``) or drives all its devices (SPMD). So this environment
counts *host* processes: one per host, and ``launches_every_process`` is ``False`` (``strategy="auto"`` does not
pick ``ddp`` here). Reading the variables is shared with the strategy's ``pod_plan()``.

Importing this module imports neither torch_xla nor the strategy module (that happens on first use).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from accelkit.environments import ClusterEnvironment
from accelkit.errors import ConfigurationError

#: torch_xla's default coordinator port on a pod, used when ``MASTER_PORT`` is unset.
TPU_COORDINATOR_PORT = 8476


class TPUPodEnvironment(ClusterEnvironment):
    """A host of a TPU pod: ``TPU_WORKER_ID`` (or ``CLOUD_TPU_TASK_ID``) and ``TPU_WORKER_HOSTNAMES``."""

    name = "tpu_pod"
    launches_every_process = False
    variables: ClassVar[dict[str, str]] = {
        "TPU_WORKER_ID": "this host's index in the pod (CLOUD_TPU_TASK_ID on older images)",
        "TPU_WORKER_HOSTNAMES": "the pod's hosts, comma separated; the first runs rank 0",
        "MASTER_PORT": "overrides the coordinator port (8476)",
    }

    @classmethod
    def detect(cls, env: Mapping[str, str]) -> bool:
        """A worker id and a host list are both set (Cloud TPU VMs set them, single-host VMs included)."""
        has_id = bool(env.get("TPU_WORKER_ID") or env.get("CLOUD_TPU_TASK_ID"))
        return has_id and bool(env.get("TPU_WORKER_HOSTNAMES", "").strip())

    def reason(self) -> str:
        """Names the worker id variable and the host list."""
        id_name = "TPU_WORKER_ID" if self.env.get("TPU_WORKER_ID") else "CLOUD_TPU_TASK_ID"
        return (f"{id_name}={self.env.get(id_name)}, TPU_WORKER_HOSTNAMES={self.env.get('TPU_WORKER_HOSTNAMES')} "
                "set on a Cloud TPU VM")

    def _plan(self) -> Any:
        from accelkit_xla_spawn.runtime import pod_plan

        return pod_plan(self.env, 1)  # one process per host; its local devices do not matter here

    def _hosts(self) -> list[str]:
        return [h.strip() for h in self.env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]

    @property
    def world_size(self) -> int:
        """Host processes: one per host of ``TPU_WORKER_HOSTNAMES``."""
        return self._plan().num_hosts

    @property
    def global_rank(self) -> int:
        """This host's index (``TPU_WORKER_ID``)."""
        return self._plan().host_index

    @property
    def local_rank(self) -> int:
        """0: one process per host."""
        return 0

    @property
    def local_world_size(self) -> int:
        """1: one process per host."""
        return 1

    @property
    def num_nodes(self) -> int:
        """The pod's hosts."""
        return self._plan().num_hosts

    @property
    def node_rank(self) -> int:
        """This host's index."""
        return self._plan().host_index

    @property
    def main_address(self) -> str:
        """``MASTER_ADDR``, else the first host of ``TPU_WORKER_HOSTNAMES``."""
        if self.env.get("MASTER_ADDR"):
            return self.env["MASTER_ADDR"]
        hosts = self._hosts()
        return hosts[0] if hosts else "127.0.0.1"

    @property
    def main_port(self) -> int:
        """``MASTER_PORT``, else torch_xla's coordinator port."""
        return self._int("MASTER_PORT", default=TPU_COORDINATOR_PORT)

    def validate(self) -> list[str]:
        """The pod variables' contradictions as ``pod_plan()`` words them, else the base class's checks."""
        try:
            self._plan()
        except ConfigurationError as exc:
            return list(exc.problems)
        return super().validate()
