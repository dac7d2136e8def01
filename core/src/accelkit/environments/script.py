"""The processes a script starts itself by running again (``Fabric(strategy="ddp").launch()`` without
``torchrun``): :class:`ScriptEnvironment`, the first process's view of the run before the others exist."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import ClassVar

from accelkit.environments.base import ClusterEnvironment


class ScriptEnvironment(ClusterEnvironment):
    """The run of a process that no launcher started, and that starts its peers itself by running its own script
    again with the ranks in their environment (Lightning's subprocess-script launch; accelkit's
    :class:`~accelkit.strategies.launchers.script.ScriptLauncher`).

    Never detected: :class:`~accelkit.Fabric` passes it to the composition when no launcher is found, and the
    processes it starts are then found as a hand-made ``torchrun``-style launch (``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``). This process is local rank 0 of node ``NODE_RANK`` (default 0).
    The run's size is not a variable here: the strategy tells it with :meth:`plan` once its devices are known.

    :param env: the variables to read (default: this process's ``os.environ``).
    """

    name = "script"
    variables: ClassVar[dict[str, str]] = {
        "NODE_RANK": "this node's index when several nodes each run the script (default 0)",
        "MASTER_ADDR": "rendezvous host (default: the loopback)",
        "MASTER_PORT": "rendezvous port (default: a free one)",
    }

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        super().__init__(env)
        #: processes per node and node count, from :meth:`plan` (one process until then)
        self.processes_per_node = 1
        self.nodes = 1
        #: the rendezvous port chosen in :meth:`plan` (``MASTER_PORT`` if set, else a free one)
        self.port: int | None = None

    def plan(self, processes_per_node: int, num_nodes: int) -> None:
        """Receive the run's layout from the strategy that will join it (before its checks), and choose the
        rendezvous port the processes started later will meet on."""
        self.processes_per_node, self.nodes = int(processes_per_node), int(num_nodes)
        if self.port is None and "MASTER_PORT" in self.env:
            self.port = self.int_variable("MASTER_PORT")
        if self.port is None and self.processes_per_node * self.nodes > 1:
            self.port = _free_port()

    @property
    def world_size(self) -> int:
        """Processes per node times nodes, as :meth:`plan` said."""
        return self.processes_per_node * self.nodes

    @property
    def global_rank(self) -> int:
        """This process: local rank 0 of its node."""
        return self.node_rank * self.processes_per_node

    @property
    def local_rank(self) -> int:
        """0: the script's first process; the others it starts see ``LOCAL_RANK``."""
        return 0

    @property
    def num_nodes(self) -> int:
        """The node count :meth:`plan` said."""
        return self.nodes

    @property
    def node_rank(self) -> int:
        """``NODE_RANK``, default 0."""
        return self.int_variable("NODE_RANK", default=0)

    @property
    def main_port(self) -> int:
        """The port :meth:`plan` chose."""
        return self.port if self.port is not None else super().main_port

    def validate(self) -> list[str]:
        """Nothing to check before the processes exist but a node rank that is a number within the node count."""
        try:
            node = self.node_rank
        except Exception as exc:  # noqa: BLE001 - a ConfigurationError naming the variable
            return [str(exc)]
        if not 0 <= node < self.nodes:
            return [f"NODE_RANK={node} but the run has num_nodes={self.nodes}; set NODE_RANK to 0..{self.nodes - 1} "
                    "on each node."]
        return []

    def stale_variables(self) -> str | None:
        """Never stale: this process starts the peers it waits for."""
        return None


def _free_port() -> int:
    """A TCP port free on the loopback now (the operating system's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
