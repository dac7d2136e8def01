"""The LSF environment: ranks from ``jsrun``'s variables and the host file."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from accelkit.environments.base import ClusterEnvironment, port_from_job_id
from accelkit.errors import ConfigurationError


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
