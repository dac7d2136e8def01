"""The Weights & Biases logger: metrics, hyper-parameters, media and checkpoints of a run, through ``wandb``."""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import json
import os
import secrets
import string
import tempfile
import time
import warnings
from argparse import Namespace
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import torch

from accelkit.loggers import Logger
from accelkit.loggers.base import SilentExperiment, add_prefix, naming_write_failures, params_to_dict
from accelkit.utilities.rank_zero import global_rank

#: The key Lightning's WandbLogger adds to every row logged with a step, and makes every metric's x axis.
STEP_KEY = "trainer/global_step"
_ID_CHARACTERS = string.ascii_lowercase + string.digits  # those of wandb's own run ids
_MISSING = "WandbLogger needs the 'wandb' package, which is not installed: pip install wandb"
#: the checkpoint callback's settings recorded in each model artifact's metadata, as Lightning records them
_CHECKPOINT_SETTINGS = ("monitor", "mode", "save_last", "save_top_k", "save_weights_only")


def _require_wandb() -> None:
    if importlib.util.find_spec("wandb") is None:
        raise ModuleNotFoundError(_MISSING)


def _check_init_kwargs(kwargs: Mapping[str, Any]) -> None:
    """Refuse keyword arguments ``wandb.init`` does not take, now rather than when the run starts."""
    if not kwargs:
        return
    import wandb

    accepted = set(inspect.signature(wandb.init).parameters) - {"anonymous"}
    unknown = sorted(set(kwargs) - accepted)
    if unknown:
        raise TypeError(f"WandbLogger passes its other keyword arguments to wandb.init, which takes no "
                        f"{', '.join(map(repr, unknown))}; it takes {', '.join(sorted(accepted))}")


def _one_of(first_name: str, first: Any, second_name: str, second: Any, unset: Any = None) -> Any:
    """The one of two synonymous arguments that was given (Lightning's ``version``/``id``, ``save_dir``/``dir``)."""
    if first not in (unset, None) and second is not None and os.fspath(first) != os.fspath(second):
        raise ValueError(f"WandbLogger got {first_name}={first!r} and {second_name}={second!r}, which name the same "
                         f"setting; give one of them")
    chosen = second if first in (unset, None) and second is not None else first
    return None if chosen is None else os.fspath(chosen)


def _callable_value(value: Any) -> Any:
    """Lightning's rule for callables among hyper-parameters: a class by its name; a function by what it returns
    when called without arguments, or by its name when that fails or returns another callable."""
    if inspect.isclass(value):
        return value.__name__
    if not callable(value):
        return value
    try:
        returned = value()
    except Exception:
        return getattr(value, "__name__", None)
    return value.__name__ if callable(returned) else returned


def _json_ready(value: Any) -> Any:
    """``value`` itself when JSON can encode it, else its ``str`` (what W&B's config can hold)."""
    if value is None or isinstance(value, (bool, int, float, str, list, dict)):
        return value
    try:
        json.dumps(value)
    except (TypeError, OverflowError):
        return str(value)
    return value


def sanitize_hyperparams(params: Mapping[str, Any] | Namespace | None) -> dict[str, Any]:
    """Hyper-parameters as Lightning's WandbLogger hands them to ``wandb.config``: a ``Namespace`` as a dict,
    callables by name (or by what they return), values JSON cannot encode as their ``str``; nested dicts stay
    nested (W&B's config holds them)."""
    return {key: _json_ready(_callable_value(value)) for key, value in params_to_dict(params).items()}


def _per_item(what: str, items: list[Any], kwargs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``kwargs`` of lists, one entry per item, as one dict of keyword arguments per item."""
    if not isinstance(items, list):
        raise TypeError(f"{what} must be a list, one entry per {what[:-1]}; got a {type(items).__name__}")
    for name, values in kwargs.items():
        if len(values) != len(items):
            raise ValueError(f"{name} has {len(values)} entries for {len(items)} {what}; give one per {what[:-1]}")
    return [{name: values[i] for name, values in kwargs.items()} for i in range(len(items))]


class WandbLogger(Logger):
    """Log to `Weights & Biases <https://wandb.ai>`_: each fit is one W&B run. The arguments are those of
    Lightning's ``WandbLogger``; whatever else it is given goes to ``wandb.init``.

    Only global rank zero talks to W&B; elsewhere :attr:`experiment` is a stand-in that does nothing. The run
    starts on first use (``wandb.init``), or is the run already in progress (``wandb.run``, with a warning). It is
    not finished at the end of ``fit``, so a later ``validate``/``test`` logs to the same run, as in Lightning:
    ``wandb.finish()`` (or the end of the process) finishes it.

    :param name: the run's display name.
    :param save_dir: the folder under which wandb keeps the run's files (``<save_dir>/wandb/...``).
    :param version: the run's id: resumes that run when it exists (``resume="allow"``).
    :param offline: log to local files only (``wandb sync`` sends them later).
    :param dir: the same as ``save_dir``; give one of them.
    :param id: the same as ``version``; give one of them.
    :param anonymous: has no effect in current wandb (it ignores the setting); a value given is warned about.
    :param project: the W&B project. Default: ``WANDB_PROJECT`` if set, else ``"lightning_logs"``.
    :param log_model: log the checkpoints of the Trainer's :class:`~accelkit.callbacks.ModelCheckpoint` as W&B
        model artifacts (aliases ``latest``, and ``best`` for the best one): ``"all"`` each when it is saved;
        ``True`` at the end of a successful run (each when saved if the callback has ``save_top_k=-1``);
        ``False`` none. Offline, the artifacts are recorded in the run's files for ``wandb sync``.
    :param experiment: a wandb run to log to instead of starting one.
    :param prefix: put before every metric name, joined by ``-``.
    :param checkpoint_name: the model artifacts' name. Default: ``model-<run id>``.
    :param add_file_policy: ``"mutable"`` (wandb copies a checkpoint before uploading it) or ``"immutable"``.
    :param kwargs: passed to ``wandb.init`` (``entity``, ``group``, ``tags``, ``config``, ``mode``...); a name
        ``wandb.init`` does not take is refused here.
    """

    LOGGER_JOIN_CHAR = "-"
    #: how often (seconds) logging checks that the run folder's disk is neither full nor read-only (a ``statvfs``
    #: call; a real write only when it reports no free block)
    space_check_s: float = 5.0

    def __init__(self, name: str | None = None, save_dir: str | os.PathLike = ".", version: str | None = None,
                 offline: bool = False, dir: str | os.PathLike | None = None, id: str | None = None,
                 anonymous: bool | None = None, project: str | None = None, log_model: bool | str = False,
                 experiment: Any = None, prefix: str = "", checkpoint_name: str | None = None,
                 add_file_policy: Literal["mutable", "immutable"] = "mutable", **kwargs: Any) -> None:
        _require_wandb()
        if log_model not in (True, False, "all"):
            raise ValueError(f"log_model={log_model!r} must be True (checkpoints at the end), 'all' (each when "
                             "saved) or False")
        if add_file_policy not in ("mutable", "immutable"):
            raise ValueError(f"add_file_policy={add_file_policy!r} must be 'mutable' or 'immutable'")
        if offline and kwargs.get("mode", "offline") != "offline":
            raise ValueError(f"WandbLogger got offline=True and mode={kwargs['mode']!r}; give one of them")
        if anonymous is not None:
            warnings.warn(f"WandbLogger(anonymous={anonymous!r}) has no effect: wandb ignores its anonymous "
                          "setting; log in (wandb login) or log offline instead", UserWarning, stacklevel=2)
        _check_init_kwargs(kwargs)
        if experiment is not None:
            unused = [f"{k}={v!r}" for k, v in (("name", name), ("version", version), ("id", id), ("dir", dir),
                                                 ("offline", offline), *kwargs.items()) if v not in (None, False)]
            if unused:
                warnings.warn(f"WandbLogger got experiment= and {', '.join(unused)}, which only start a run; the run "
                              "given is used as it is", UserWarning, stacklevel=2)
        save_dir = _one_of("save_dir", save_dir, "dir", dir, unset=".")
        project = project or os.environ.get("WANDB_PROJECT", "lightning_logs")
        self._init_kwargs: dict[str, Any] = {"name": name, "project": project, "dir": save_dir,
                                             "id": _one_of("version", version, "id", id), "resume": "allow"}
        if offline:
            self._init_kwargs["mode"] = "offline"
        self._init_kwargs.update(kwargs)
        self._project: str = project
        self._save_dir: str | None = save_dir
        self._id: str | None = self._init_kwargs["id"]
        self._log_model = log_model
        self.prefix = prefix
        self._experiment = experiment
        self._checkpoint_name = checkpoint_name
        self.add_file_policy = add_file_policy
        self._logged_model_time: dict[str, float] = {}
        self._checkpoint_callbacks: dict[int, Any] = {}
        self._next_space_check = 0.0

    # ----------------------------------------------------------------- the run
    @property
    def experiment(self) -> Any:
        """The ``wandb`` run (on global rank zero; started on first use, or ``wandb.run`` when one is in
        progress)."""
        if global_rank() != 0:
            return SilentExperiment()
        if self._experiment is None:
            import wandb

            if wandb.run is not None:
                warnings.warn("A wandb run is already in progress (wandb.run); WandbLogger logs to it instead of "
                              "starting one with its own arguments. Call wandb.finish() before building the logger "
                              "for a run of its own.", UserWarning, stacklevel=2)
                self._experiment = wandb.run
            else:
                self._check_writable()
                self._experiment = wandb.init(**self._init_kwargs)
                self._define_step_metric()
        return self._experiment

    # ----------------------------------------------------------------- write failures
    def run_folder(self) -> str | None:
        """The folder of the run's files (``<save_dir>/wandb/<run folder>``, its ``.wandb`` record file in it), or
        ``<save_dir>/wandb`` before the run starts; ``None`` for a run given as ``experiment=`` without one."""
        run = self._experiment
        if run is not None:
            return getattr(getattr(run, "settings", None), "sync_dir", None)
        return os.path.join(self._save_dir or ".", "wandb")

    def _record_file(self) -> str | None:
        """The run's record file, which wandb's service process writes (the run folder when it is not known)."""
        record = getattr(getattr(self._experiment, "settings", None), "sync_file", None)
        return record or self.run_folder()

    @contextlib.contextmanager
    def writing(self, path: str | None = None) -> Iterator[None]:
        """Within the block, a write that fails in this process (a logged image or table written into the run
        folder) is a :class:`~accelkit.errors.LoggerWriteError` naming WandbLogger and ``path`` (default:
        :meth:`run_folder`), not wandb's bare ``OSError``."""
        with naming_write_failures(self, path if path is not None else self.run_folder):
            yield

    def _check_writable(self) -> None:
        """Before the run starts: write (and remove) a small file in ``<save_dir>/wandb``. wandb itself, given a
        folder it cannot write, logs the run to the system's temporary folder instead, with a warning only."""
        folder = os.path.join(self._save_dir or ".", "wandb")
        with naming_write_failures(self, folder):
            os.makedirs(folder, exist_ok=True)
            _probe(folder)

    def _check_space(self, now: bool = False) -> None:
        """Every :attr:`space_check_s` seconds (``now``: at once), whether the run folder's file system still takes
        writes. wandb's service process writes the run's records and, on a full or read-only disk, loses them
        without a word; a file system with no free block or mounted read-only is probed with a real write, whose
        failure is a :class:`~accelkit.errors.LoggerWriteError` naming WandbLogger and the record file."""
        folder = self.run_folder() if self._experiment is not None else None
        if folder is None or not now and time.monotonic() < self._next_space_check:
            return
        self._next_space_check = time.monotonic() + self.space_check_s
        try:
            stats = os.statvfs(folder)
        except OSError:
            return  # not a local folder this process can see: nothing to tell
        if stats.f_bavail > 0 and not stats.f_flag & os.ST_RDONLY:
            return
        with naming_write_failures(self, self._record_file):
            _probe(folder)

    def _define_step_metric(self) -> None:
        """Every metric's x axis is :data:`STEP_KEY` (or TensorBoard's ``global_step`` when syncing TensorBoard)."""
        run = self._experiment
        if getattr(run, "define_metric", None) is None:
            return
        if self._init_kwargs.get("sync_tensorboard"):
            run.define_metric("*", step_metric="global_step")
        else:
            run.define_metric(STEP_KEY)
            run.define_metric("*", step_metric=STEP_KEY, step_sync=True)

    @property
    def name(self) -> str | None:
        """The W&B project (as Lightning's WandbLogger names itself; the run's own name is
        ``experiment.name``)."""
        return self._project

    @property
    def version(self) -> str | None:
        """The run's id (the id given when the run has not started)."""
        return self._experiment.id if self._experiment else self._id

    @property
    def save_dir(self) -> str | None:
        """The folder under which wandb keeps the run's files."""
        return self._save_dir

    def __getstate__(self) -> dict[str, Any]:
        """Pickled for spawned workers without the run: the worker of rank zero starts (or resumes) the run by
        its id, chosen here when it is not known yet, so :attr:`version` names that run in this process too."""
        if self._id is None and not self._experiment:
            self._id = self._init_kwargs["id"] = "".join(secrets.choice(_ID_CHARACTERS) for _ in range(8))
        state = self.__dict__.copy()
        if self._experiment:  # a worker that logs continues this run
            state["_init_kwargs"] = dict(self._init_kwargs, id=self._experiment.id)
            state["_id"] = self._experiment.id
        state["_experiment"] = None
        return state

    # ----------------------------------------------------------------- logging
    def log_hyperparams(self, params: Mapping[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        """Update the run's config with the hyper-parameters (see
        :func:`~accelkit_wandb.logger.sanitize_hyperparams`)."""
        if global_rank() != 0:
            return
        with self.writing():
            self.experiment.config.update(sanitize_hyperparams(params), allow_val_change=True)

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Log one row: the metrics (prefixed) and, when ``step`` is given, ``trainer/global_step: step``, the
        x axis of every metric (without it when syncing TensorBoard, whose rows carry their own step)."""
        if global_rank() != 0:
            return
        row = add_prefix(metrics, self.prefix, self.LOGGER_JOIN_CHAR)
        if step is not None and not self._init_kwargs.get("sync_tensorboard"):
            row[STEP_KEY] = step
        run = self.experiment
        self._check_space()
        with self.writing():
            run.log(row)

    def log_table(self, key: str, columns: list[str] | None = None, data: list[list[Any]] | None = None,
                  dataframe: Any = None, step: int | None = None) -> None:
        """Log a ``wandb.Table`` under ``key``, from ``columns`` and ``data`` (rows) or from a ``dataframe``."""
        if global_rank() != 0:
            return
        import wandb

        self.log_metrics({key: wandb.Table(columns=columns, data=data, dataframe=dataframe)}, step)

    def log_text(self, key: str, columns: list[str] | None = None, data: list[list[str]] | None = None,
                 dataframe: Any = None, step: int | None = None) -> None:
        """Log text as a table (see :meth:`log_table`)."""
        self.log_table(key, columns, data, dataframe, step)

    def _log_media(self, key: str, what: str, items: list[Any], factory: Callable[..., Any], step: int | None,
                   kwargs: Mapping[str, Any]) -> None:
        per_item = _per_item(what, items, kwargs)
        if global_rank() != 0:
            return
        self.log_metrics({key: [factory(item, **extra) for item, extra in zip(items, per_item, strict=True)]}, step)

    def log_image(self, key: str, images: list[Any], step: int | None = None, **kwargs: Any) -> None:
        """Log ``images`` (tensors, numpy arrays, PIL images or file paths) under ``key``; each keyword argument
        is a list with one entry per image (``caption``, ``masks``, ``boxes``...)."""
        import wandb

        self._log_media(key, "images", images, wandb.Image, step, kwargs)

    def log_audio(self, key: str, audios: list[Any], step: int | None = None, **kwargs: Any) -> None:
        """Log ``audios`` (numpy arrays or file paths) under ``key``; each keyword argument is a list with one
        entry per clip (``caption``, ``sample_rate``...)."""
        import wandb

        self._log_media(key, "audios", audios, wandb.Audio, step, kwargs)

    def log_video(self, key: str, videos: list[Any], step: int | None = None, **kwargs: Any) -> None:
        """Log ``videos`` (numpy arrays or file paths) under ``key``; each keyword argument is a list with one
        entry per video (``caption``, ``fps``, ``format``...)."""
        import wandb

        self._log_media(key, "videos", videos, wandb.Video, step, kwargs)

    def watch(self, model: torch.nn.Module, log: str | None = "gradients", log_freq: int = 100,
              log_graph: bool = True) -> None:
        """Have wandb record ``model``'s gradients (``log="gradients"``), parameters (``"parameters"``) or both
        (``"all"``) every ``log_freq`` steps, and its graph."""
        self.experiment.watch(model, log=log, log_freq=log_freq, log_graph=log_graph)

    def unwatch(self, model: torch.nn.Module | None = None) -> None:
        """Stop what :meth:`watch` started, for ``model`` (every watched model when ``None``)."""
        self.experiment.unwatch(model)

    # ----------------------------------------------------------------- artifacts
    def use_artifact(self, artifact: str, artifact_type: str | None = None) -> Any:
        """Record that the run uses ``artifact`` (``"entity/project/name:version"``) and return it."""
        return self.experiment.use_artifact(artifact, type=artifact_type)

    @staticmethod
    def download_artifact(artifact: str, save_dir: str | os.PathLike | None = None,
                          artifact_type: str | None = None, use_artifact: bool | None = True) -> str | None:
        """Download ``artifact`` into ``save_dir`` (wandb's folder when ``None``) and return the folder: through
        the run in progress when there is one and ``use_artifact``, else through ``wandb.Api`` (no run needed).
        Returns ``None`` on ranks other than zero."""
        if global_rank() != 0:
            return None
        import wandb

        if wandb.run is not None and use_artifact:
            found = wandb.run.use_artifact(artifact)
        else:
            found = wandb.Api().artifact(artifact, type=artifact_type)
        return found.download(root=None if save_dir is None else os.fspath(save_dir))

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        """With ``log_model="all"`` (or ``True`` and a callback keeping every checkpoint, ``save_top_k=-1``) log
        the new checkpoints now; with ``True`` remember the callback for :meth:`finalize`."""
        if global_rank() != 0:
            return
        keeps_all = getattr(checkpoint_callback, "save_top_k", None) == -1
        if self._log_model == "all" or self._log_model is True and keeps_all:
            self._log_checkpoints(checkpoint_callback)
        elif self._log_model is True:
            self._checkpoint_callbacks[id(checkpoint_callback)] = checkpoint_callback

    def finalize(self, status: str) -> None:
        """After a successful run, check that the run folder's disk still takes writes (see :attr:`space_check_s`)
        and, with ``log_model=True``, log the checkpoints not yet logged. The wandb run stays open (see the
        class)."""
        if global_rank() != 0 or status != "success" or self._experiment is None:
            return  # a failed run's own error is the one to see
        self._check_space(now=True)
        for callback in self._checkpoint_callbacks.values():
            self._log_checkpoints(callback)

    def _log_checkpoints(self, callback: Any) -> None:
        """Log each of the callback's checkpoints not logged since it was last written, oldest first."""
        import wandb

        for modified, path, score in self._new_checkpoints(callback):
            metadata = {"score": score.item() if isinstance(score, torch.Tensor) else score,
                        "original_filename": Path(path).name,
                        type(callback).__name__: {k: getattr(callback, k) for k in _CHECKPOINT_SETTINGS
                                                  if hasattr(callback, k)}}
            if not self._checkpoint_name:
                self._checkpoint_name = f"model-{self.experiment.id}"
            artifact = wandb.Artifact(name=self._checkpoint_name, type="model", metadata=metadata)
            aliases = ["latest", "best"] if path == callback.best_model_path else ["latest"]
            # a "mutable" file is first copied into wandb's staging folder
            with self.writing(os.path.join(wandb.env.get_data_dir(), "artifacts", "staging")):
                artifact.add_file(path, name="model.ckpt", policy=self.add_file_policy)
            with self.writing():
                self.experiment.log_artifact(artifact, aliases=aliases)
            self._logged_model_time[path] = modified

    def _new_checkpoints(self, callback: Any) -> list[tuple[float, str, Any]]:
        """``(modification time, path, score)`` of the callback's last, best and top-k checkpoint files that were
        not logged, or were written again since."""
        scores: dict[str, Any] = {}
        if getattr(callback, "last_model_path", ""):
            scores[callback.last_model_path] = getattr(callback, "current_score", None)
        if getattr(callback, "best_model_path", ""):
            scores[callback.best_model_path] = getattr(callback, "best_model_score", None)
        scores.update(getattr(callback, "best_k_models", {}))
        found = sorted((Path(p).stat().st_mtime, p, s) for p, s in scores.items() if Path(p).is_file())
        return [(t, p, s) for t, p, s in found if p not in self._logged_model_time or self._logged_model_time[p] < t]


def _probe(folder: str) -> None:
    """Write 4 KiB to a new file in ``folder``, flushed to disk, and remove it; raises the ``OSError`` met."""
    descriptor, path = tempfile.mkstemp(prefix=".accelkit-probe-", dir=folder)
    try:
        with os.fdopen(descriptor, "wb") as probe:
            probe.write(b"\0" * 4096)
            probe.flush()
            os.fsync(probe.fileno())
    finally:
        with contextlib.suppress(OSError):
            os.remove(path)


def logger_by_name(save_dir: str | os.PathLike) -> WandbLogger:
    """What ``logger="wandb"`` builds: a run whose files go under ``<save_dir>/wandb`` (the Trainer's
    ``default_root_dir``), project ``WANDB_PROJECT`` or ``lightning_logs``, no checkpoints logged; ``WANDB_MODE``
    and wandb's other variables apply as wandb reads them."""
    return WandbLogger(save_dir=save_dir)
