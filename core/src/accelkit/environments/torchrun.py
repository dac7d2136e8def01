"""The torchrun / TorchElastic environment: ranks and rendezvous from the variables torchrun sets."""

from __future__ import annotations

from typing import ClassVar

from accelkit.environments.base import ClusterEnvironment


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
