"""The MPI environment (Open MPI, PMI): ranks from ``mpirun``'s variables."""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping
from typing import ClassVar

from accelkit.environments.base import ClusterEnvironment, port_from_job_id
from accelkit.environments.slurm import SLURMEnvironment


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
    #: Open MPI's mpirun/prterun and node daemons, Hydra's (MPICH, Intel MPI) mpiexec and proxy, Slurm's step
    #: daemon (srun --mpi), IBM's jsrun and Cray's aprun
    launcher_processes: ClassVar[tuple[str, ...]] = (
        "mpirun", "mpiexec", "orterun", "orted", "prterun", "prted", "prte", "mpiexec.hydra", "hydra_pmi_proxy",
        "pmi_proxy", "slurmstepd", "srun", "jsrun", "jsm", "aprun", "flux-shell")
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

    def launcher_running(self) -> bool | None:
        """A launcher process among this process's parents; else, where the launcher left its contact address
        (``PMIX_SERVER_URI*``, ``OMPI_MCA_orte_hnp_uri``: a container hides the parents), whether it answers."""
        running = super().launcher_running()
        if running:
            return True
        contacts = [found for name, value in self.env.items() if name.startswith(_CONTACT_VARIABLES)
                    for found in re.findall(r"tcp4?://\[?([0-9A-Za-z.:-]+?)\]?:(\d+)", value)]
        if contacts:
            return any(_answers(host, int(port)) for host, port in contacts)
        return running

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
        """``MASTER_ADDR``; the loopback on one node; empty (a problem ``validate()`` reports) otherwise."""
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


#: variables where Open MPI (PMIx) leaves the address of the launcher's daemon
_CONTACT_VARIABLES = ("PMIX_SERVER_URI", "OMPI_MCA_orte_hnp_uri", "OMPI_MCA_orte_local_daemon_uri")


def _answers(host: str, port: int) -> bool:
    """Whether something accepts a TCP connection at ``host:port`` within a second."""
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False
