"""The MLflow logger: metrics, hyper-parameters and checkpoints of a run, through MLflow's ``MlflowClient``."""

from __future__ import annotations

import contextlib
import os
import re
import time
import warnings
from argparse import Namespace
from collections.abc import Iterator, Mapping
from typing import Any

from accelkit.loggers import Logger
from accelkit.loggers.base import SilentExperiment, add_prefix, metric_value, naming_write_failures, params_to_dict
from accelkit.utilities.rank_zero import global_rank

#: MLflow's limit on a parameter value's length, and on the entries of one ``log_batch`` call
_PARAM_LENGTH = 6000
_BATCH = 100
_INVALID_KEY = re.compile(r"[^\w\-. /:]")
_STATUS = {"success": "FINISHED", "finished": "FINISHED", "failed": "FAILED"}


def _flatten(params: Mapping[str, Any], parent: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{parent}/{key}" if parent else str(key)
        if isinstance(value, Namespace):
            value = vars(value)
        if isinstance(value, Mapping) and value:
            flat.update(_flatten(value, name))
        else:
            flat[name] = value
    return flat


def _is_file_store(uri: str) -> bool:
    return uri.startswith("file:") or "://" not in uri and not uri.startswith(("sqlite:", "databricks"))


class MLFlowLogger(Logger):
    """Log to MLflow: each fit is one MLflow run of experiment ``experiment_name``. The arguments are those of
    Lightning's ``MLFlowLogger``.

    Only global rank zero talks to the store; elsewhere :attr:`experiment` is a stand-in that does nothing.

    :param experiment_name: the MLflow experiment (created when missing).
    :param run_name: the run's name (MLflow picks one when ``None``).
    :param tracking_uri: where runs go: ``"file:/path"``, a path, ``"sqlite:///mlflow.db"``, ``"http://host"``...
        Default: ``MLFLOW_TRACKING_URI`` if set, else the file store ``file:<save_dir>``.
    :param tags: tags set on the run.
    :param save_dir: the file store's directory when no tracking URI is given.
    :param log_model: ``True``: at the end of the run, log the checkpoint callback's best and last checkpoints as
        artifacts under ``checkpoints/``; ``"all"``: every checkpoint when it is saved; ``False``: none.
    :param prefix: put before every metric name, joined by ``-``.
    :param artifact_location: where a newly created experiment keeps its artifacts.
    :param run_id: resume this existing run instead of creating one.
    :param synchronous: passed to MLflow's logging calls where it supports it (``None``: MLflow's default).
    """

    LOGGER_JOIN_CHAR = "-"

    def __init__(self, experiment_name: str = "lightning_logs", run_name: str | None = None,
                 tracking_uri: str | None = None, tags: dict[str, Any] | None = None,
                 save_dir: str | os.PathLike | None = "./mlruns", log_model: bool | str = False, prefix: str = "",
                 artifact_location: str | None = None, run_id: str | None = None,
                 synchronous: bool | None = None) -> None:
        if log_model not in (True, False, "all"):
            raise ValueError(f"log_model={log_model!r} must be True, False or 'all'")
        tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        if tracking_uri is None:
            if save_dir is None:
                raise ValueError("MLFlowLogger needs a tracking_uri or a save_dir for its file store")
            tracking_uri = f"file:{os.path.abspath(os.fspath(save_dir))}"
        self._tracking_uri = tracking_uri
        self._save_dir = os.fspath(save_dir) if save_dir is not None else None
        self._experiment_name = experiment_name
        self._run_name = run_name
        self.tags = dict(tags or {})
        self._log_model = log_model
        self.prefix = prefix
        self._artifact_location = artifact_location
        self._run_id = run_id
        self._experiment_id: str | None = None
        self._synchronous = synchronous
        self._client: Any = None
        self._logged_checkpoints: set[str] = set()
        self._checkpoint_callback: Any = None

    # ----------------------------------------------------------------- the store
    @property
    def experiment(self) -> Any:
        """The ``mlflow.tracking.MlflowClient`` (on global rank zero; its run is created on first use)."""
        if global_rank() != 0:
            return SilentExperiment()
        if self._client is None:
            if _is_file_store(self._tracking_uri):
                # MLflow 3 refuses its file store unless asked for; choosing a local store is that request.
                os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            from mlflow.tracking import MlflowClient

            with self.writing():
                self._client = self._open(MlflowClient(tracking_uri=self._tracking_uri))
        return self._client

    def _open(self, client: Any) -> Any:
        """``client`` after finding (or creating) the experiment and the run."""
        if self._run_id is not None:
            self._experiment_id = client.get_run(self._run_id).info.experiment_id
        else:
            found = client.get_experiment_by_name(self._experiment_name)
            self._experiment_id = (found.experiment_id if found is not None else client.create_experiment(
                self._experiment_name, artifact_location=self._artifact_location))
            tags = {str(k): str(v) for k, v in self.tags.items()}
            if self._run_name is not None:
                tags.setdefault("mlflow.runName", self._run_name)
            self._run_id = client.create_run(self._experiment_id, tags=tags).info.run_id
        return client

    @property
    def run_id(self) -> str | None:
        """The MLflow run's id (the run is created on first access, on global rank zero)."""
        _ = self.experiment
        return self._run_id

    @property
    def experiment_id(self) -> str | None:
        """The MLflow experiment's id."""
        _ = self.experiment
        return self._experiment_id

    @property
    def name(self) -> str | None:
        """The experiment id (Lightning's MLFlowLogger names itself so)."""
        return self.experiment_id

    @property
    def version(self) -> str | None:
        """The run id."""
        return self.run_id

    @property
    def save_dir(self) -> str | None:
        """The file store's directory (``None`` for other tracking URIs)."""
        uri = self._tracking_uri
        if uri.startswith("file:"):
            return uri[len("file:"):]
        return uri if _is_file_store(uri) else None

    @property
    def tracking_uri(self) -> str:
        """Where the runs go."""
        return self._tracking_uri

    def _sync(self) -> dict[str, Any]:
        return {} if self._synchronous is None else {"synchronous": self._synchronous}

    def run_folder(self) -> str | None:
        """The folder of this run in a file store (``<save_dir>/<experiment id>/<run id>``, or the store itself
        before the run exists); ``None`` for other tracking URIs."""
        store = self.save_dir
        if store is None or self._experiment_id is None:
            return store
        return os.path.join(store, self._experiment_id, self._run_id or "")

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Within the block, a file store's failed write (MLflow reports ``ENOSPC`` as an ``MlflowException`` saying
        ``[Errno 28] No space left on device`` and nothing more) is a :class:`~accelkit.errors.LoggerWriteError`
        naming this logger and :meth:`run_folder`."""
        if self.save_dir is None:  # a tracking server: its errors are its own
            yield
            return
        with naming_write_failures(self, self.run_folder):
            try:
                yield
            except Exception as exc:
                cause = exc.__cause__ or exc.__context__
                if isinstance(exc, OSError) or not isinstance(cause, OSError):
                    raise
                raise OSError(cause.errno, cause.strerror) from exc  # the OS error MLflow wrapped

    # ----------------------------------------------------------------- logging
    def log_hyperparams(self, params: Mapping[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        """Log the run's hyper-parameters as MLflow params (nested dicts flattened to ``outer/inner``; values as
        strings, cut to MLflow's 6000-character limit)."""
        if global_rank() != 0:
            return
        from mlflow.entities import Param

        flat = _flatten(params_to_dict(params))
        entries = [Param(key, str(value)[:_PARAM_LENGTH]) for key, value in flat.items()]
        with self.writing():
            for start in range(0, len(entries), _BATCH):
                self.experiment.log_batch(self.run_id, params=entries[start:start + _BATCH], **self._sync())

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Log numeric metrics at ``step`` (names with characters MLflow refuses have them replaced by ``_``)."""
        if global_rank() != 0:
            return
        from mlflow.entities import Metric

        timestamp = int(time.time() * 1000)
        entries = []
        for key, value in add_prefix(metrics, self.prefix, self.LOGGER_JOIN_CHAR).items():
            clean = _INVALID_KEY.sub("_", key)
            if clean != key:
                warnings.warn(f"MLflow refuses the characters of metric {key!r}; logged as {clean!r}", UserWarning,
                              stacklevel=2)
            entries.append(Metric(key=clean, value=float(metric_value(key, value)), timestamp=timestamp,
                                  step=step or 0))
        with self.writing():
            for start in range(0, len(entries), _BATCH):
                self.experiment.log_batch(self.run_id, metrics=entries[start:start + _BATCH], **self._sync())

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        """Remember the checkpoint callback; with ``log_model="all"`` log the new checkpoint now."""
        self._checkpoint_callback = checkpoint_callback
        if self._log_model == "all" and global_rank() == 0:
            self._log_checkpoints(checkpoint_callback)

    def _log_checkpoints(self, callback: Any) -> None:
        paths = [getattr(callback, "best_model_path", ""), getattr(callback, "last_model_path", "")]
        for path in dict.fromkeys(p for p in paths if p):
            path = os.fspath(path)
            if path in self._logged_checkpoints or not os.path.exists(path):
                continue
            with self.writing():
                if os.path.isdir(path):  # a sharded checkpoint directory
                    self.experiment.log_artifacts(self.run_id, path, f"checkpoints/{os.path.basename(path)}")
                else:
                    self.experiment.log_artifact(self.run_id, path, "checkpoints")
            self._logged_checkpoints.add(path)

    def finalize(self, status: str) -> None:
        """End the MLflow run (``FINISHED`` or ``FAILED``), first logging the checkpoints when ``log_model``."""
        if global_rank() != 0 or self._client is None and self._run_id is None:
            return
        if self._log_model and self._checkpoint_callback is not None and status == "success":
            self._log_checkpoints(self._checkpoint_callback)
        with self.writing():
            self.experiment.set_terminated(self.run_id, _STATUS.get(status, "FINISHED"))

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None  # rebuilt in the worker that logs
        return state


def logger_by_name(save_dir: str | os.PathLike) -> MLFlowLogger:
    """What ``logger="mlflow"`` builds: a file store in ``<save_dir>/mlruns`` (``MLFLOW_TRACKING_URI`` wins when
    set), experiment ``lightning_logs``, the best and last checkpoints logged as artifacts at the end."""
    return MLFlowLogger(save_dir=os.path.join(os.fspath(save_dir), "mlruns"), log_model=True)
