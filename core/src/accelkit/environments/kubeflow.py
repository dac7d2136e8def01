"""The Kubeflow PyTorchJob environment: ranks and the master address from the job's variables."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from accelkit.environments.base import ClusterEnvironment


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
