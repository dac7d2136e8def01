"""The :class:`ClusterEnvironment` base: what a launcher tells each process about its place in the run, read
only from the mapping it is given; and small helpers for node lists and ports."""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Mapping
from typing import Any, ClassVar, TypedDict

from accelkit.errors import ConfigurationError

#: the rendezvous port torch uses when nothing chooses another one
DEFAULT_PORT = 29500


class RankDescription(TypedDict, total=False):
    """The ranks and the rendezvous address of a process, as a cluster environment gives them (each key only where
    the environment found no problem)."""

    world_size: int
    global_rank: int
    local_rank: int
    local_world_size: int
    num_nodes: int
    node_rank: int
    main_address: str
    main_port: int


class EnvironmentDescription(RankDescription):
    """What :meth:`ClusterEnvironment.describe` returns: the environment's name, why it applies, its problems, and
    the ranks (:class:`RankDescription`) only when there is no problem."""

    name: str
    reason: str
    problems: list[str]


class ClusterEnvironment:
    """Base class of a cluster environment: one process's rank, the run's size and its rendezvous address.

    :param env: the variables to read (default: this process's ``os.environ``).

    A subclass sets :attr:`name` and :attr:`variables`, implements
    :meth:`~accelkit.environments.ClusterEnvironment.detect` (default: every name in
    :attr:`required` is set) and the properties :attr:`world_size`, :attr:`global_rank` and :attr:`local_rank`;
    the others have defaults computed from those. Properties raise :class:`~accelkit.ConfigurationError` for a
    value that is not a number; :meth:`~accelkit.environments.ClusterEnvironment.validate` collects every such problem
    instead.
    """

    #: the name used in the registry, listed by ``accelkit plugins`` and ``accelkit doctor`` (``"slurm"``).
    name: ClassVar[str] = ""
    #: the variables this environment reads, with what each one means (in the docs; ``accelkit doctor`` shows those
    #: that are set, under each registered environment).
    variables: ClassVar[dict[str, str]] = {}
    #: the variables that must all be set for :meth:`~accelkit.environments.ClusterEnvironment.detect` (the default
    #: implementation) to answer ``True``.
    required: ClassVar[tuple[str, ...]] = ()
    #: ``True`` when the launcher started every training process, so a strategy joins them (``"auto"`` then picks
    #: ``"ddp"``); ``False`` when it started one process per host that starts its own workers (a TPU pod).
    launches_every_process: ClassVar[bool] = True
    #: how to fix a missing rendezvous address, ending the problem
    #: :meth:`~accelkit.environments.ClusterEnvironment.validate` reports.
    address_hint: ClassVar[str] = "set MASTER_ADDR to the host of rank 0."
    #: command names of the launcher's processes (``mpirun``, its node daemons) one of which is a parent of every
    #: process it starts; empty: :meth:`launcher_running` cannot tell.
    launcher_processes: ClassVar[tuple[str, ...]] = ()

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env: Mapping[str, str] = os.environ if env is None else env

    def __getstate__(self) -> dict[str, object]:
        """Pickled with the strategy for spawned workers: the live process environment travels as "this process's
        environment" (``os.environ`` cannot be pickled, and a worker must read its own), a recorded dict as is."""
        state = self.__dict__.copy()
        if self.env is os.environ:
            state["env"] = None
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        if self.env is None:
            self.env = os.environ

    # ----------------------------------------------------------------- detection
    @classmethod
    def detect(cls, env: Mapping[str, str]) -> bool:
        """Whether ``env`` was set up by this environment's launcher."""
        return bool(cls.required) and all(name in env for name in cls.required)

    def reason(self) -> str:
        """One line naming the variables that made this environment match, for ``accelkit doctor``."""
        shown = [f"{name}={self.env[name]}" for name in self.required if name in self.env]
        return f"{', '.join(shown) or 'its variables'} set"

    # ----------------------------------------------------------------- reading variables
    def int_variable(self, *names: str, default: int | None = None) -> int:
        """The first of ``names`` set in ``self.env``, as an int; ``default`` when none is set (without a default, an
        error naming the variables). A value that is not an integer is a
        :class:`~accelkit.errors.ConfigurationError` naming the variable, its value and this environment."""
        for name in names:
            raw = self.env.get(name)
            if raw is None:
                continue
            try:
                return int(str(raw).strip())
            except ValueError:
                raise ConfigurationError(f"{name}={raw!r} is not an integer (cluster environment "
                                         f"{self.name!r}).") from None
        if default is None:
            raise ConfigurationError(f"{' or '.join(names)} is not set, but cluster environment {self.name!r} "
                                     "needs it; was this process started by its launcher?")
        return default

    #: the name the 1.1 documentation's example used; private (``_``), kept so that code copied from it works
    _int = int_variable

    # ----------------------------------------------------------------- the run's shape
    @property
    def world_size(self) -> int:
        """The number of processes in the run, across nodes."""
        raise NotImplementedError

    @property
    def global_rank(self) -> int:
        """This process's index among all processes."""
        raise NotImplementedError

    @property
    def local_rank(self) -> int:
        """This process's index among the processes of its node."""
        raise NotImplementedError

    @property
    def local_world_size(self) -> int:
        """Processes on this node. Default: the world divided evenly over :attr:`num_nodes`."""
        return max(1, self.world_size // max(1, self.num_nodes))

    @property
    def num_nodes(self) -> int:
        """Nodes taking part. Default: 1."""
        return 1

    @property
    def node_rank(self) -> int:
        """This node's index. Default: the rank of the node's first process over :attr:`local_world_size`
        (processes placed node by node)."""
        return (self.global_rank - self.local_rank) // max(1, self.local_world_size)

    @property
    def restart_attempt(self) -> int | None:
        """Which attempt of the run this process belongs to (``0``: the first), the same number in every process
        of the attempt, for a launcher that restarts a failed run by itself (torchrun's elastic agent, a requeued
        SLURM job); ``None`` where the launcher never restarts one or cannot tell. Default: ``None``."""
        return None

    @property
    def main_address(self) -> str:
        """The host of rank 0, where the process group meets. Default: ``MASTER_ADDR``, else the loopback."""
        return self.env.get("MASTER_ADDR") or "127.0.0.1"

    @property
    def main_port(self) -> int:
        """The rendezvous port. Default: ``MASTER_PORT``, else 29500."""
        return self._int("MASTER_PORT", default=DEFAULT_PORT)

    # ----------------------------------------------------------------- checks
    def validate(self) -> list[str]:
        """Problems with the variables: values that are not numbers (naming the variable and its value), ranks
        outside the world, a port out of range. Empty when the environment is usable."""
        problems: list[str] = []
        values: dict[str, Any] = {}
        for attr in ("world_size", "global_rank", "local_rank", "local_world_size", "num_nodes", "node_rank",
                     "main_port", "main_address"):
            try:
                values[attr] = getattr(self, attr)
            except ConfigurationError as exc:
                problems.extend(p for p in exc.problems if p not in problems)
        if problems:
            return problems
        world, rank, local = values["world_size"], values["global_rank"], values["local_rank"]
        where = f"cluster environment {self.name!r} ({self.reason()})"
        if world < 1:
            problems.append(f"{where}: the world size is {world}; it must be at least 1.")
        elif not 0 <= rank < world:
            problems.append(f"{where}: global rank {rank} is outside 0..{world - 1}.")
        if not 0 <= local < max(1, values["local_world_size"]):
            problems.append(f"{where}: local rank {local} is outside 0..{values['local_world_size'] - 1} "
                            f"({values['local_world_size']} process(es) on this node).")
        if not 0 <= values["node_rank"] < max(1, values["num_nodes"]):
            problems.append(f"{where}: node rank {values['node_rank']} is outside 0..{values['num_nodes'] - 1}.")
        if not 0 < values["main_port"] < 65536:
            problems.append(f"{where}: rendezvous port {values['main_port']} is not a TCP port (1..65535).")
        if not values["main_address"]:
            problems.append(f"{where}: no rendezvous address; {self.address_hint}")
        return problems

    def launcher_running(self) -> bool | None:
        """Whether the launcher that set these variables still runs this process: ``True`` when one of
        :attr:`launcher_processes` is among its parents, ``False`` when none is (the variables are stale: copied
        into a shell or a job script), ``None`` when this environment or platform cannot tell."""
        if not self.launcher_processes:
            return None
        from accelkit.utilities.processes import ancestor_names

        names = ancestor_names()
        if names is None:
            return None
        return any(name in self.launcher_processes for name in names)

    def stale_variables(self) -> str | None:
        """A sentence naming the variables when :meth:`launcher_running` says no launcher runs this process (no
        peer will ever join), else ``None``."""
        if self.launcher_running() is not False:
            return None
        return (f"{self.reason()}, but no launcher process ({', '.join(self.launcher_processes[:4])}...) runs this "
                "process: these variables are stale (exported into the shell or copied into a job script), and "
                "the other ranks they announce will never join. Unset them, or start the script with the launcher.")

    def describe(self) -> EnvironmentDescription:
        """Plain data for ``accelkit doctor --json``: the name, the reason, the ranks (or the problems)."""
        problems = self.validate()
        data: EnvironmentDescription = {"name": self.name, "reason": self.reason(), "problems": problems}
        if not problems:
            data.update({"world_size": self.world_size, "global_rank": self.global_rank, "local_rank": self.local_rank,
                         "local_world_size": self.local_world_size, "num_nodes": self.num_nodes,
                         "node_rank": self.node_rank, "main_address": self.main_address, "main_port": self.main_port})
        return data

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.reason()})"


# --------------------------------------------------------------------------------------------- helpers
def restart_attempt_of(environment: ClusterEnvironment | None) -> int | None:
    """``environment``'s :attr:`~ClusterEnvironment.restart_attempt` (``None`` for no environment, one whose
    launcher starts one process per host, or variables that do not read as numbers)."""
    if environment is None or not getattr(environment, "launches_every_process", True):
        return None
    try:
        return environment.restart_attempt
    except ConfigurationError:
        return None


def first_host(nodelist: str) -> str:
    """The first host of a SLURM-style host list: ``"node[01-04,07],gpu5"`` -> ``"node01"``,
    ``"rack[2-3]-n[5-6]"`` -> ``"rack2-n5"``, ``"a b"`` -> ``"a"``."""
    text = nodelist.strip()
    depth, end = 0, len(text)
    for index, char in enumerate(text):  # the first comma or blank outside brackets ends the first entry
        depth += char == "["
        depth -= char == "]"
        if depth == 0 and char in ", ":
            end = index
            break
    entry = text[:end]
    # each bracket group stands for a range list: keep its first element, zero padding included
    return re.sub(r"\[([^\]]*)\]", lambda m: re.split(r"[-,]", m.group(1))[0].strip(), entry)


def port_from_job_id(job_id: str) -> int:
    """A rendezvous port every process of a job computes alike from the job's id: 10000..29999."""
    digits = job_id.strip()
    number = int(digits) if digits.isdigit() else zlib.crc32(digits.encode())
    return 10000 + number % 20000
