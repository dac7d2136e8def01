"""The core's own hook implementations; they run last, so any plugin can override them."""

from __future__ import annotations

from collections.abc import Sized
from typing import TYPE_CHECKING, cast

from accelkit.environments.detection import builtin_cluster_environments
from accelkit.errors import ConfigurationError
from accelkit.hookspecs import hookimpl
from accelkit.records import ClusterEnvironmentRecord, CommandRecord, LoggerRecord, RunConfig
from accelkit.strategies.sampler import default_distributed_sampler

if TYPE_CHECKING:
    from collections.abc import Iterable

    from torch.utils.data import Dataset, Sampler

ACCELKIT_API = ">=1.0,<2"


@hookimpl(trylast=True)
def accelkit_default_strategy(config: RunConfig) -> str | None:
    """``"auto"``: processes a launcher started (torchrun, srun, mpirun..., see ``config.cluster_environment``)
    join with ``ddp``; otherwise ask the accelerator (which may start processes itself, ``ddp_spawn``)."""
    environment = config.cluster_environment
    if environment is not None and getattr(environment, "launches_every_process", True):
        try:
            joined = environment.world_size > 1
        except ConfigurationError:
            joined = True  # a bad variable: the joining strategy's validate() names it
        if joined:
            return "ddp"
    return config.accelerator_cls.auto_strategy(len(config.devices), config.num_nodes)


@hookimpl
def accelkit_register_cluster_environments() -> list[ClusterEnvironmentRecord]:
    """The launchers the core recognises (:func:`accelkit.environments.detection.builtin_cluster_environments`)."""
    return builtin_cluster_environments()


@hookimpl(trylast=True)
def accelkit_distributed_sampler(dataset: Dataset[object], sampler: Sampler[int] | Iterable[int], shuffle: bool,
                                 num_replicas: int, rank: int, seed: int) -> Iterable[int]:
    """Shard ``dataset`` (or the user's ``sampler``) across ranks; see
    :class:`accelkit.strategies.sampler.ShardSampler`."""
    # (the hook is asked for map-style datasets only: they have a length)
    return default_distributed_sampler(cast(Sized, dataset), sampler, shuffle, num_replicas, rank, seed)


@hookimpl
def accelkit_environment_variables() -> dict[str, str]:
    """Variables set by process launchers (torchrun, SLURM) and by accelkit itself."""
    return {
        "RANK": "global rank, set by torchrun",
        "WORLD_SIZE": "number of processes, set by torchrun",
        "LOCAL_RANK": "rank on this node, set by torchrun",
        "MASTER_ADDR": "rendezvous host",
        "MASTER_PORT": "rendezvous port",
        "SLURM_*": "set by SLURM's srun/sbatch",
        "OMPI_COMM_WORLD_*": "set by Open MPI's mpirun",
        "PMI_*": "set by MPICH / Intel MPI launchers (and srun --mpi=pmi2)",
        "JSM_NAMESPACE_*": "set by LSF's jsrun",
        "ACCELKIT_*": "accelkit settings (plugin blocking, autoload, seed)",
    }


@hookimpl
def accelkit_register_loggers() -> list[LoggerRecord]:
    """The core's loggers: ``"csv"`` and ``"tensorboard"`` (the latter needs the ``tensorboard`` package)."""
    return [
        LoggerRecord("csv", "accelkit.loggers.csv_logs:CSVLogger",
                     description="metrics.csv and hparams.yaml under <save_dir>/lightning_logs/version_<n>"),
        LoggerRecord("tensorboard", "accelkit.loggers.tensorboard:TensorBoardLogger", aliases=("tb",),
                     description="TensorBoard event files (pip install tensorboard)"),
    ]


_CLI = "accelkit.cli."


@hookimpl
def accelkit_register_commands() -> list[CommandRecord]:
    """The core's sub-commands of ``accelkit``; their modules are imported only when one of them runs."""
    stages = _CLI + "stage_commands:"
    return [
        CommandRecord("fit", "train a Module, then test it: accelkit fit FILE.py:Class [--max-epochs N ...], or "
                      "with --model, --config files and options", run=stages + "run_fit", raw=True),
        CommandRecord("validate", "run the validation loop once from --config files and options",
                      run=stages + "run_validate", raw=True),
        CommandRecord("test", "run the test loop once from --config files and options",
                      run=stages + "run_test", raw=True),
        CommandRecord("predict", "run prediction from --config files and options",
                      run=stages + "run_predict", raw=True),
        CommandRecord("plugins", "list the installed plugins: status, what each provides, which hooks it implements",
                      _CLI + "plugins_command:add_json_argument", _CLI + "plugins_command:plugins_command"),
        CommandRecord("doctor", "check this machine: versions, plugins, which accelerators are usable and why not, "
                      "relevant environment, problems with their fixes",
                      _CLI + "plugins_command:add_json_argument", _CLI + "doctor:doctor_command"),
        CommandRecord("run", "start a Fabric script on this node's processes (Lightning's `fabric run`): accelkit "
                      "run --accelerator cpu --devices 2 --strategy ddp SCRIPT.py [ARGS]",
                      run=_CLI + "run_command:run_command", raw=True),
        CommandRecord("checkpoint", "work with checkpoints: `accelkit checkpoint consolidate DIR OUT.ckpt` writes a "
                      "sharded checkpoint directory as one file", _CLI + "checkpoint_command:add_checkpoint_arguments",
                      _CLI + "checkpoint_command:checkpoint_command"),
    ]
