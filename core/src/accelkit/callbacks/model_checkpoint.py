"""``ModelCheckpoint``: save the model during ``fit`` and keep the best ``k`` files by a monitored metric.

Behaves as Lightning 2.x's ``ModelCheckpoint``: same arguments, attributes, file names and state. Every process
runs the same bookkeeping; the global-zero process chooses each file name and broadcasts it, so all processes agree
on the paths even when their metrics differ, and only it touches the disk.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, cast

import torch

from accelkit.callbacks.base import Callback, monitored_score
from accelkit.checkpoint import paths as checkpoint_paths
from accelkit.errors import ConfigurationError

if TYPE_CHECKING:
    from accelkit.module.module import Module
    from accelkit.trainer.trainer import Trainer

#: ``{name}`` or ``{name:format_spec}`` in a filename template.
_FIELD = re.compile(r"\{([^{}:]+)(?::([^{}]*))?\}")


class Checkpoint(Callback):
    """Base class of callbacks that write checkpoints (Lightning's ``Checkpoint``); the Trainer lists its
    instances in ``trainer.checkpoint_callbacks``."""


#: Lightning's ``Checkpoint`` base class (``(module, qualname)``), in ``lightning.pytorch`` and ``pytorch_lightning``
LIGHTNING_CHECKPOINT_CLASSES = frozenset((f"{package}.callbacks.checkpoint", "Checkpoint")
                                         for package in ("lightning.pytorch", "pytorch_lightning"))


def is_checkpoint(callback: object) -> bool:
    """Whether ``callback`` writes checkpoints: a :class:`Checkpoint`, or a callback deriving from Lightning's
    ``Checkpoint`` (Lightning's own ``ModelCheckpoint`` used as a library's; told from the class names, so Lightning is
    never imported). The Trainer adds no default ``ModelCheckpoint`` beside one, runs them after the other callbacks
    and lists them in ``trainer.checkpoint_callbacks``, as Lightning's does."""
    return isinstance(callback, Checkpoint) or any(
        (klass.__module__, klass.__qualname__) in LIGHTNING_CHECKPOINT_CLASSES for klass in type(callback).__mro__)


class ModelCheckpoint(Checkpoint):
    """Save checkpoints during ``fit``: periodically, the best ``save_top_k`` by ``monitor``, and ``last.ckpt``.

    :param dirpath: folder of the files. Default: ``<trainer.log_dir>/checkpoints`` when the Trainer has a logger,
        else ``<default_root_dir>/checkpoints`` (decided at ``setup``).
    :param filename: name template without extension, with ``{metric}`` / ``{metric:format}`` fields filled from
        ``trainer.callback_metrics`` plus ``epoch`` and ``step`` (a missing metric reads 0). Default
        ``"{epoch}-{step}"``, giving ``epoch=3-step=120.ckpt``. It may name sub-folders (``"sub/{epoch}"``) but
        never leave ``dirpath``: an absolute template or a ``..`` part is refused.
    :param monitor: metric to rank checkpoints by; ``None`` keeps the latest ones.
    :param verbose: print what is saved.
    :param save_last: also keep ``last.ckpt``, a copy of the latest state (``"link"``: a symbolic link to the latest
        checkpoint written instead of a copy).
    :param save_top_k: how many files to keep: the ``k`` best by ``monitor`` (the latest if ``monitor`` is None);
        ``-1`` keeps all, ``0`` none.
    :param save_weights_only: save only the model's weights (no optimizer or loop state).
    :param mode: ``"min"`` or ``"max"``: whether a lower or a higher ``monitor`` is better.
    :param auto_insert_metric_name: write ``name=value`` for each field (``False``: only the value).
    :param every_n_train_steps: save after every N optimizer steps (``0``/``None``: not by steps).
    :param train_time_interval: save when this :class:`datetime.timedelta` has passed since the last save.
    :param every_n_epochs: save after every N epochs (the default, 1, when no trigger is given).
    :param save_on_train_epoch_end: save at the end of the training epoch (``True``) or after validation
        (``False``). ``None`` decides as Lightning does: at the end of the training epoch when there is no
        validation data, or when validation runs once at the end of every epoch; otherwise after validation.
    :param enable_version_counter: when a file of the chosen name exists, add ``-v1``, ``-v2`` ... instead of
        overwriting it.

    The three triggers ``every_n_train_steps``, ``every_n_epochs`` and ``train_time_interval`` are mutually
    exclusive. Nothing is saved during the sanity check, with ``fast_dev_run``, outside ``fit``, or twice at the
    same global step. After a run, ``best_model_path``, ``best_model_score`` and ``best_k_models``
    tell which files are best; ``trainer.test(ckpt_path="best")`` loads ``best_model_path``.
    """

    monitors_metrics = True  # the loops run its epoch-end hooks after the Module's, to see what it logged
    CHECKPOINT_JOIN_CHAR = "-"
    CHECKPOINT_EQUALS_CHAR = "="
    CHECKPOINT_NAME_LAST = "last"
    FILE_EXTENSION = ".ckpt"
    STARTING_VERSION = 1

    def __init__(
        self,
        dirpath: str | os.PathLike | None = None,
        filename: str | None = None,
        monitor: str | None = None,
        verbose: bool = False,
        save_last: bool | str | None = None,
        save_top_k: int = 1,
        save_weights_only: bool = False,
        mode: str = "min",
        auto_insert_metric_name: bool = True,
        every_n_train_steps: int | None = None,
        train_time_interval: timedelta | None = None,
        every_n_epochs: int | None = None,
        save_on_train_epoch_end: bool | None = None,
        enable_version_counter: bool = True,
    ) -> None:
        if every_n_train_steps is None and every_n_epochs is None and train_time_interval is None:
            every_n_epochs, every_n_train_steps = 1, 0
        self._every_n_epochs: int = every_n_epochs or 0
        self._every_n_train_steps: int = every_n_train_steps or 0
        self._train_time_interval: timedelta | None = train_time_interval
        problems = []
        if mode not in ("min", "max"):
            problems.append(f"ModelCheckpoint(mode={mode!r}): mode must be 'min' or 'max'.")
        if not isinstance(save_top_k, int) or save_top_k < -1:
            problems.append(f"ModelCheckpoint(save_top_k={save_top_k!r}): must be an int >= -1.")
        elif monitor is None and save_top_k not in (-1, 0, 1):
            problems.append(f"ModelCheckpoint(save_top_k={save_top_k}, monitor=None): without a monitor there is "
                            "no quantity to rank checkpoints by; use save_top_k in (-1, 0, 1) or set monitor.")
        if filename is not None:
            problems += _filename_problems(filename)
        if save_last not in (None, True, False, "link"):
            problems.append(f"ModelCheckpoint(save_last={save_last!r}): must be True, False, None or 'link'.")
        for name, value in (("every_n_train_steps", self._every_n_train_steps),
                            ("every_n_epochs", self._every_n_epochs)):
            if not isinstance(value, int) or value < 0:
                problems.append(f"ModelCheckpoint({name}={value!r}): must be an int >= 0.")
        if train_time_interval is not None and not isinstance(train_time_interval, timedelta):
            problems.append(f"ModelCheckpoint(train_time_interval={train_time_interval!r}): must be a "
                            "datetime.timedelta.")
        triggers = [f"{name}={value}" for name, value, on in (
            ("every_n_train_steps", every_n_train_steps, self._every_n_train_steps >= 1),
            ("every_n_epochs", every_n_epochs, self._every_n_epochs >= 1),
            ("train_time_interval", train_time_interval, train_time_interval is not None)) if on]
        if len(triggers) > 1:
            problems.append(f"ModelCheckpoint({', '.join(triggers)}): these triggers are mutually exclusive; "
                            "choose one.")
        if problems:
            raise ConfigurationError(problems)

        self.monitor = monitor
        self.verbose = verbose
        self.save_last = save_last
        self.save_top_k = save_top_k
        self.save_weights_only = save_weights_only
        self.mode = mode
        self.auto_insert_metric_name = auto_insert_metric_name
        self.filename = filename
        self.dirpath: str | None = os.path.realpath(os.path.expanduser(dirpath)) if dirpath else None
        self._in_run_folder = dirpath is None  # the default folder: <log_dir>/checkpoints, a new one per run
        self._save_on_train_epoch_end = save_on_train_epoch_end
        self._enable_version_counter = enable_version_counter
        self.kth_value = torch.tensor(float("inf") if mode == "min" else float("-inf"))
        self.current_score: torch.Tensor | None = None
        self.best_k_models: dict[str, torch.Tensor] = {}
        self.kth_best_model_path = ""
        self.best_model_score: torch.Tensor | None = None
        self.best_model_path = ""
        self.last_model_path = ""
        self._last_global_step_saved = 0  # no checkpoint before the first optimizer step
        self._last_time_checked: float | None = None
        self._last_checkpoint_saved = ""
        self._validation_ran = False
        self._warned_missing = False
        self._writes = 0  # files written so far (tells whether this state was just written)

    @property
    def state_key(self) -> str:
        """Key of this callback's state in a checkpoint: the class name with ``monitor``, ``mode`` and the
        triggers, so several ``ModelCheckpoint`` instances in one run keep separate states."""
        return self._generate_state_key(monitor=self.monitor, mode=self.mode,
                                        every_n_train_steps=self._every_n_train_steps,
                                        every_n_epochs=self._every_n_epochs,
                                        train_time_interval=self._train_time_interval)

    @property
    def every_n_epochs(self) -> int:
        """Epochs between saves (0: not saved by epochs)."""
        return self._every_n_epochs

    # ----------------------------------------------------------------- hooks
    def setup(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        """Decide the folder (agreed by every process); warn when a fit starts in a non-empty one."""
        self.dirpath = trainer.strategy.broadcast(self._resolve_dirpath(trainer))
        self._validation_ran = False
        if stage == "fit" and trainer.is_global_zero and self.save_top_k != 0:
            folder = Path(self.dirpath)
            if folder.is_dir() and any(folder.iterdir()):
                warnings.warn(f"Checkpoint directory {self.dirpath} exists and is not empty.", UserWarning,
                              stacklevel=2)

    def on_train_start(self, trainer: Trainer, pl_module: Module) -> None:
        """Start the clock of ``train_time_interval``."""
        self._last_time_checked = time.monotonic()

    def on_train_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        """Save when ``every_n_train_steps`` or ``train_time_interval`` says so."""
        if (self._every_n_train_steps < 1 and self._train_time_interval is None) or self._skip(trainer):
            return  # the first test alone runs at every step of a run saving by epochs: keep it cheap
        due_by_steps = self._every_n_train_steps >= 1 and trainer.global_step % self._every_n_train_steps == 0
        due_by_time = False
        now = time.monotonic()
        if self._train_time_interval is not None:
            due_by_time = (self._last_time_checked is not None
                           and now - self._last_time_checked >= self._train_time_interval.total_seconds())
            due_by_time = bool(trainer.strategy.broadcast(due_by_time))  # clocks differ: rank 0 decides
        if not (due_by_steps or due_by_time):
            return
        if due_by_time:
            self._last_time_checked = now
        self._save(trainer, top_k=True, at_epoch_end=False)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        """Save here when there is no validation or it runs at every epoch end (see ``save_on_train_epoch_end``)."""
        if not self._skip(trainer) and self._saves_at_train_epoch_end(trainer):
            self._save(trainer, top_k=self._epoch_due(trainer), at_epoch_end=True)

    def on_validation_end(self, trainer: Trainer, pl_module: Module) -> None:
        """Save here when saving does not happen at the end of the training epoch."""
        if _fitting(trainer) and not getattr(trainer, "sanity_checking", False):
            self._validation_ran = True
        if not self._skip(trainer) and not self._saves_at_train_epoch_end(trainer):
            self._save(trainer, top_k=self._epoch_due(trainer), at_epoch_end=True)

    def state_dict(self) -> dict[str, object]:
        """The bookkeeping saved in checkpoints (plain data and tensors: loads with ``weights_only=True``)."""
        return {
            "monitor": self.monitor,
            "best_model_score": self.best_model_score,
            "best_model_path": self.best_model_path,
            "current_score": self.current_score,
            "dirpath": self.dirpath,
            "best_k_models": dict(self.best_k_models),
            "kth_best_model_path": self.kth_best_model_path,
            "kth_value": self.kth_value,
            "last_model_path": self.last_model_path,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the bookkeeping. When the folder changed since the checkpoint, only ``best_model_path`` is
        restored (the other files are not where this callback now saves), with Lightning's warning (``The dirpath
        has changed from ...``), except for the default folder of a resumed run, a new version folder beside the
        checkpoint's. The folders are compared as written, as Lightning's: the default folder of a relative
        ``default_root_dir`` (or logger ``save_dir``) is relative, so the same run moved elsewhere, or resumed
        from another working directory, still names the same folder.

        A checkpoint is data from outside: every restored path must resolve (``..`` and symbolic links followed)
        inside this callback's folder (``best_model_path`` restored from another folder: inside the folder the
        state names) and name a checkpoint or nothing, else it is dropped, with a warning naming it, and never
        read or removed (:func:`accelkit.checkpoint.paths.restore_refusal`)."""
        saved_dir = state_dict.get("dirpath", self.dirpath)
        if self.dirpath is None:  # not set up yet (a spawned run's state coming back): adopt the saved folder
            self.dirpath = saved_dir
        dropped: list[str] = []

        def trusted(path: object, folder: object) -> str:
            if isinstance(path, str) and not path:
                refusal = None
            elif not isinstance(folder, (str, os.PathLike)):  # a checkpoint whose "dirpath" is no path
                refusal = f"the state's folder {folder!r} is not a path"
            else:
                refusal = checkpoint_paths.restore_refusal(path, folder)
            if refusal is None:  # "" or a path restore_refusal accepted: a str or os.PathLike
                return os.fspath(cast("str | os.PathLike[str]", path))
            if (entry := f"{path!r} ({refusal})") not in dropped:  # best, last and top-k may name one file
                dropped.append(entry)
            return ""

        if saved_dir == self.dirpath:
            self.best_model_score = state_dict["best_model_score"]
            self.current_score = state_dict.get("current_score", self.current_score)
            self.kth_value = state_dict.get("kth_value", self.kth_value)
            self.best_k_models = {kept: score for path, score in dict(state_dict.get("best_k_models", {})).items()
                                  if (kept := trusted(path, saved_dir))}
            self.kth_best_model_path = trusted(state_dict.get("kth_best_model_path", ""), saved_dir)
            self.last_model_path = trusted(state_dict.get("last_model_path", ""), saved_dir)
        elif not (self._in_run_folder and _sibling_run_folders(saved_dir, self.dirpath)):
            # (A resumed run with the default folder writes into its own new version folder, by design: no warning.)
            warnings.warn(f"The dirpath has changed from {saved_dir!r} to {self.dirpath!r}, therefore "
                          "`best_model_score`, `kth_best_model_path`, `kth_value`, `last_model_path` and "
                          "`best_k_models` won't be reloaded. Only `best_model_path` will be reloaded.",
                          UserWarning, stacklevel=2)
        self.best_model_path = trusted(state_dict["best_model_path"], saved_dir)
        if dropped:
            self._mend_ranking()
            warnings.warn(f"{type(self).__name__}: the checkpoint's state names {len(dropped)} path(s) this "
                          f"callback cannot have written in its folder {saved_dir!r}: {'; '.join(dropped)}. They are "
                          "dropped: never read, never removed. A checkpoint this callback wrote names only its own "
                          "checkpoints inside its folder; check where this one came from.", UserWarning, stacklevel=2)

    def _mend_ranking(self) -> None:
        """After restored paths were dropped: point ``kth_best_model_path`` and ``best_model_path`` at files still
        ranked (``best_k_models``), or at none."""
        scores = {path: float(score) for path, score in self.best_k_models.items()}
        worst, best = (max, min) if self.mode == "min" else (min, max)
        if self.kth_best_model_path not in scores:
            self.kth_best_model_path = worst(scores, key=scores.__getitem__) if scores else ""
            self.kth_value = (self.best_k_models[self.kth_best_model_path] if self.kth_best_model_path
                              else torch.tensor(float("inf") if self.mode == "min" else float("-inf")))
        if not self.best_model_path and scores:
            self.best_model_path = best(scores, key=scores.__getitem__)
            self.best_model_score = self.best_k_models[self.best_model_path]
        elif not self.best_model_path:
            self.best_model_score = None

    # ----------------------------------------------------------------- names
    def format_checkpoint_name(self, metrics: dict[str, torch.Tensor], filename: str | None = None,
                               ver: int | None = None) -> str:
        """The path a checkpoint with ``metrics`` gets: ``filename`` (default: this callback's template) with its
        fields filled, ``-v<ver>`` when ``ver`` is given, the extension, inside ``dirpath`` when known.

        ``ModelCheckpoint(filename="{epoch}-{val_loss:.2f}")`` with ``{"epoch": 2, "val_loss": 0.1234}`` gives
        ``epoch=2-val_loss=0.12.ckpt``.
        """
        name = _render(filename or self.filename or "{epoch}" + self.CHECKPOINT_JOIN_CHAR + "{step}", metrics,
                       self.CHECKPOINT_EQUALS_CHAR if self.auto_insert_metric_name else None)
        if ver is not None:
            name = f"{name}{self.CHECKPOINT_JOIN_CHAR}v{ver}"
        name += self.FILE_EXTENSION
        if not self.dirpath:
            return name
        path = os.path.join(self.dirpath, name)
        if not checkpoint_paths.inside(path, self.dirpath):
            raise ConfigurationError(f"{type(self).__name__}(filename={filename or self.filename!r}) gives the path "
                                     f"{path!r}, which leaves dirpath {self.dirpath!r} (.. and symbolic links "
                                     "followed); checkpoints are written, and removed, only inside dirpath. Keep the "
                                     "template inside it (sub-folders such as 'sub/{epoch}' are allowed) and choose "
                                     "the folder with dirpath=.")
        return path

    def to_yaml(self, filepath: str | os.PathLike | None = None) -> None:
        """Write ``best_k_models`` (path: score) as YAML-compatible lines to ``filepath``
        (default ``<dirpath>/best_k_models.yaml``)."""
        target = Path(filepath) if filepath is not None else Path(self.dirpath or ".") / "best_k_models.yaml"
        target.write_text("".join(f"{path!r}: {float(score)!r}\n" for path, score in self.best_k_models.items()))

    @property
    def keeps_latest(self) -> bool:
        """Whether every file this callback writes is the latest full state when written: no ``last.ckpt``
        (``save_last``), no ``monitor``, not ``save_weights_only`` and the default file names (the Trainer's default
        callback, as Lightning's). ``ckpt_path="last"`` then also considers its ``epoch=E-step=S.ckpt`` files, the
        newest of which is the latest state (an accelkit extension: Lightning considers ``last*.ckpt`` files
        only)."""
        return not self.save_last and self.monitor is None and self.filename is None and not self.save_weights_only

    def last_checkpoint_names(self) -> list[str]:
        """The names (glob patterns) of the files :meth:`find_last_checkpoints` considers: ``last*.ckpt``, and
        ``epoch=*-step=*.ckpt`` when this callback :attr:`keeps_latest`."""
        names = [f"{self.CHECKPOINT_NAME_LAST}*{self.FILE_EXTENSION}"]
        if self.keeps_latest:
            names.append(self._default_name("*") + self.FILE_EXTENSION)
        return names

    def _default_name(self, number: str) -> str:
        """The default file name's stem (``epoch=E-step=S``) with ``number`` for each of its numbers."""
        equals = self.CHECKPOINT_EQUALS_CHAR if self.auto_insert_metric_name else None
        fields = [f"{name}{equals}{number}" if equals is not None else number for name in ("epoch", "step")]
        return self.CHECKPOINT_JOIN_CHAR.join(fields)

    def find_last_checkpoints(self, trainer: Trainer) -> set[str]:
        """The ``last.ckpt`` / ``last-v<n>.ckpt`` files (or sharded checkpoint directories) in this callback's
        folder, and, for the default folder of a run with a logger (``<root>/version_<n>/checkpoints``), in the
        ``checkpoints`` folder of every version beside it: for ``ckpt_path="last"``, the newest of them is the
        latest state of the newest run, which lives in an earlier version folder than the run now starting.
        A callback that :attr:`keeps_latest` (the Trainer's default) writes no ``last.ckpt``: its
        ``epoch=E-step=S.ckpt`` files (``-v<n>`` too) are found as well."""
        folder = Path(self._resolve_dirpath(trainer))
        folders = [folder]
        if self._in_run_folder and getattr(trainer, "loggers", None):
            folders += sorted(folder.parent.parent.glob(f"*/{folder.name}"))
        names = [re.escape(self.CHECKPOINT_NAME_LAST)]
        if self.keeps_latest:
            names.append(re.escape(self._default_name("#")).replace("\\#", "#").replace("#", r"\d+"))
        pattern = re.compile(rf"^({'|'.join(names)})({re.escape(self.CHECKPOINT_JOIN_CHAR)}v\d+)?"
                             rf"{re.escape(self.FILE_EXTENSION)}$")
        return {str(p) for f in folders if f.is_dir() for p in f.iterdir() if pattern.match(p.name)}

    def last_checkpoint_path(self, trainer: Trainer) -> Path:
        """Where this callback writes ``last.ckpt`` in ``trainer``'s run: in ``dirpath`` when given, else in
        ``<trainer.log_dir>/checkpoints`` when the Trainer has a logger, else in ``<default_root_dir>/checkpoints``
        (a later run in a folder that holds one, or a run started at the same time, writes ``last-v1.ckpt``)."""
        return Path(self._resolve_dirpath(trainer)) / f"{self.CHECKPOINT_NAME_LAST}{self.FILE_EXTENSION}"

    def _resolve_dirpath(self, trainer: Trainer) -> str:
        if self.dirpath is not None:
            return self.dirpath
        if getattr(trainer, "loggers", None):
            log_dir = getattr(trainer, "log_dir", None) or trainer.loggers[0].log_dir
            # as Lightning's, the folder as the logger's location was given (relative stays relative: a checkpoint's
            # state then names the same folder when the run is moved or resumed from another working directory)
            return os.path.join(log_dir, "checkpoints")
        return os.path.join(trainer.default_root_dir, "checkpoints")

    def _choose_path(self, trainer: Trainer, metrics: dict[str, torch.Tensor], filename: str | None = None,
                     reusable: str | None = None) -> str:
        """The next free name (``reusable`` may be overwritten), chosen by global zero and broadcast. With the
        version counter a free name is claimed by creating an empty file there exclusively (the checkpoint then
        replaces it): a run started at the same time in the same folder takes the next name instead of
        overwriting this run's file."""
        path = self.format_checkpoint_name(metrics, filename)
        if trainer.is_global_zero and self._enable_version_counter:
            version = self.STARTING_VERSION
            while path != reusable and not _claim(path):
                path = self.format_checkpoint_name(metrics, filename, ver=version)
                version += 1
        return trainer.strategy.broadcast(path)

    # ----------------------------------------------------------------- saving
    def _skip(self, trainer: Trainer) -> bool:
        return (bool(getattr(trainer, "fast_dev_run", False)) or not _fitting(trainer)
                or getattr(trainer, "sanity_checking", False)
                or self._last_global_step_saved == trainer.global_step)

    def _epoch_due(self, trainer: Trainer) -> bool:
        return self._every_n_epochs >= 1 and (trainer.current_epoch + 1) % self._every_n_epochs == 0

    def _saves_at_train_epoch_end(self, trainer: Trainer) -> bool:
        if self._save_on_train_epoch_end is not None:
            return self._save_on_train_epoch_end
        if getattr(trainer, "check_val_every_n_epoch", 1) != 1:
            # validation skips epochs (its loaders are built when it first runs, as Lightning's): save after it,
            # when the monitored metric is fresh
            return False
        if _no_validation(trainer):
            return True  # the end of the training epoch is the only place to save
        return getattr(trainer, "val_check_interval", 1.0) == 1.0  # once per epoch, before the epoch's end

    def _candidates(self, trainer: Trainer) -> dict[str, torch.Tensor]:
        candidates = {}
        for key, value in trainer.callback_metrics.items():
            if isinstance(value, torch.Tensor):
                candidates[key] = value.detach().cpu().clone()
            elif isinstance(value, (int, float, bool)):
                candidates[key] = torch.tensor(value)
        epoch, step = candidates.get("epoch"), candidates.get("step")
        candidates["epoch"] = epoch.int() if epoch is not None else torch.tensor(trainer.current_epoch)
        candidates["step"] = step.int() if step is not None else torch.tensor(trainer.global_step)
        return candidates

    def _save(self, trainer: Trainer, top_k: bool, at_epoch_end: bool) -> None:
        candidates = self._candidates(trainer)
        last_path = previous_last = None
        if self.save_last:
            # Chosen first: the path is part of the state written with the top-k file, which last may reuse.
            last_path = self._choose_path(trainer, candidates, self.CHECKPOINT_NAME_LAST, self.last_model_path)
            previous_last, self.last_model_path = self.last_model_path, last_path
        writes = self._writes
        try:
            if top_k and self.save_top_k != 0:
                if self.monitor is None:
                    self._save_latest(trainer, candidates)
                else:
                    self._save_if_top_k(trainer, candidates, at_epoch_end)
        except BaseException:
            if last_path is not None:  # last was not written: free its name and keep the previous one
                self.last_model_path = previous_last or ""
                if trainer.is_global_zero:
                    _release(last_path)
            raise
        if last_path is None:
            return
        if self.save_last == "link" and self._last_checkpoint_saved and self.save_top_k != 0:
            # Lightning's "link": last.ckpt points at the latest checkpoint written, even an older one.
            self._reuse(trainer, self._last_checkpoint_saved, last_path, symbolic=True)
        elif self._writes != writes:
            # This very state was just written as a top-k file: reuse it instead of serialising it again.
            self._reuse(trainer, self._last_checkpoint_saved, last_path, symbolic=False)
        else:
            self._write(trainer, last_path)
        if previous_last and self._removable(trainer, previous_last, last_path):
            self._remove(trainer, previous_last)

    def _save_latest(self, trainer: Trainer, candidates: dict[str, torch.Tensor]) -> None:
        path = self._choose_path(trainer, candidates, reusable=self.best_model_path)
        previous, self.best_model_path = self.best_model_path, path
        try:
            self._write(trainer, path)
        except BaseException:
            self.best_model_path = previous  # not written: the latest good file is still the previous one
            raise
        if self.save_top_k == 1 and previous and self._removable(trainer, previous, path):
            self._remove(trainer, previous)

    def _save_if_top_k(self, trainer: Trainer, candidates: dict[str, torch.Tensor], at_epoch_end: bool) -> None:
        assert self.monitor is not None  # the caller saves the latest checkpoint instead when nothing is monitored
        current = candidates.get(self.monitor)
        if current is None:
            message = (f"ModelCheckpoint(monitor={self.monitor!r}) could not find {self.monitor!r} in the logged "
                       f"metrics: {sorted(trainer.callback_metrics)}. Did you call self.log({self.monitor!r}, "
                       "value) in the Module?")
            if self._validation_ran or (at_epoch_end and _no_validation(trainer)):
                raise ConfigurationError(message)
            if not self._warned_missing:  # validation has not run yet: the metric may come with it
                warnings.warn(message, UserWarning, stacklevel=2)
                self._warned_missing = True
            return
        current = monitored_score(current)
        if getattr(trainer, "world_size", 1) > 1:
            current = trainer.strategy.broadcast(current)  # one score for every process's bookkeeping
        if self.check_monitor_top_k(trainer, current):
            self._update_best_and_save(trainer, current, candidates)
        elif self.verbose and trainer.is_global_zero:
            print(f"Epoch {int(candidates['epoch'])}, global step {int(candidates['step'])}: "
                  f"{self.monitor!r} was not in top {self.save_top_k}")

    def check_monitor_top_k(self, trainer: Trainer, current: torch.Tensor | None = None) -> bool:
        """Whether a checkpoint scoring ``current`` belongs among the best ``save_top_k``."""
        if current is None:
            return False
        if self.save_top_k == -1 or len(self.best_k_models) < self.save_top_k:
            return True
        kth = self.best_k_models[self.kth_best_model_path]
        return bool(current < kth if self.mode == "min" else current > kth)

    def _update_best_and_save(self, trainer: Trainer, current: torch.Tensor, candidates: dict[str,
                              torch.Tensor]) -> None:
        k = len(self.best_k_models) + 1 if self.save_top_k == -1 else self.save_top_k
        dropped = None
        if len(self.best_k_models) == k:
            dropped = self.kth_best_model_path
            self.best_k_models.pop(dropped)
        if torch.isnan(current):  # a NaN score ranks last, never best
            current = torch.tensor(float("inf") if self.mode == "min" else float("-inf"))
        path = self._choose_path(trainer, candidates, reusable=dropped)
        self.current_score = current
        self.best_k_models[path] = current
        worst, best = (max, min) if self.mode == "min" else (min, max)
        if len(self.best_k_models) == k:
            self.kth_best_model_path = worst(self.best_k_models, key=lambda p: float(self.best_k_models[p]))
            self.kth_value = self.best_k_models[self.kth_best_model_path]
        self.best_model_path = best(self.best_k_models, key=lambda p: float(self.best_k_models[p]))
        self.best_model_score = self.best_k_models[self.best_model_path]
        if self.verbose and trainer.is_global_zero:
            print(f"Epoch {int(candidates['epoch'])}, global step {int(candidates['step'])}: {self.monitor!r} "
                  f"reached {float(current):0.5f} (best {float(self.best_model_score):0.5f}), saving model to "
                  f"{path!r} as top {k}")
        self._write(trainer, path)
        if dropped and self._removable(trainer, dropped, path):
            self._remove(trainer, dropped)

    def _write(self, trainer: Trainer, path: str) -> None:
        try:
            trainer.save_checkpoint(path, weights_only=self.save_weights_only)
        except BaseException:
            if trainer.is_global_zero:
                _release(path)
            raise
        self._last_global_step_saved = trainer.global_step
        self._last_checkpoint_saved = path
        self._writes += 1
        if trainer.is_global_zero:
            for logger in getattr(trainer, "loggers", None) or []:
                after_save = getattr(logger, "after_save_checkpoint", None)
                if after_save is not None:
                    after_save(self)

    @staticmethod
    def _reuse(trainer: Trainer, source: str, target: str, symbolic: bool) -> None:
        """Make ``target`` the checkpoint ``source`` (a hard link, a copy where links fail or ``source`` is a sharded
        checkpoint directory, or a symbolic link), swapped in atomically: readers see the old ``target`` or the new
        one, never a partial file."""
        if trainer.is_global_zero and os.path.abspath(source) != os.path.abspath(target):
            folder = os.path.dirname(os.path.abspath(target))
            os.makedirs(folder, exist_ok=True)
            fd, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=folder)
            os.close(fd)
            os.unlink(temporary)
            try:
                if symbolic:
                    os.symlink(os.path.relpath(source, folder), temporary)
                elif os.path.isdir(source):  # a sharded checkpoint: a directory cannot be hard-linked
                    shutil.copytree(source, temporary, symlinks=True)
                else:
                    try:
                        os.link(source, temporary)
                    except OSError:  # a file system without hard links
                        shutil.copyfile(source, temporary)
                _swap_in(temporary, target)
            except BaseException:
                if os.path.isdir(temporary) and not os.path.islink(temporary):
                    shutil.rmtree(temporary, ignore_errors=True)
                elif os.path.lexists(temporary):
                    os.unlink(temporary)
                raise
        trainer.strategy.barrier()

    def _removable(self, trainer: Trainer, previous: str, current: str) -> bool:
        """Only checkpoints this callback wrote: inside ``dirpath`` (resolved, links followed), a checkpoint by its
        format (:func:`~accelkit.checkpoint.paths.removal_refusal`), never the one just written nor the one the run
        resumed from. A file inside ``dirpath`` that is not a checkpoint is kept, with a warning naming it; one
        outside is kept silently, as Lightning keeps the files of a folder it no longer saves to."""
        if previous == current:
            return False
        resumed = getattr(trainer, "ckpt_path", None)
        if resumed is not None and Path(previous).absolute() == Path(resumed).absolute():
            return False
        refusal = checkpoint_paths.removal_refusal(previous, self.dirpath or ".")
        if refusal is None:
            return True
        if refusal and trainer.is_global_zero:
            warnings.warn(f"{type(self).__name__} did not remove {previous!r}, which it no longer keeps: {refusal}.",
                          UserWarning, stacklevel=2)
        return False

    @staticmethod
    def _remove(trainer: Trainer, path: str) -> None:
        """Remove a checkpoint file, link, or sharded checkpoint directory (the strategy's, global zero only)."""
        trainer.strategy.remove_checkpoint(path)


def _filename_problems(filename: object) -> list[str]:
    """What is wrong with a ``filename`` template: not a string, or a path leaving ``dirpath`` (absolute, or with a
    ``..`` part)."""
    if not isinstance(filename, str):
        return [f"ModelCheckpoint(filename={filename!r}): must be a str (a name template such as "
                "'{epoch}-{step}')."]
    parts = PurePath(filename).parts
    if PurePath(filename).is_absolute() or ".." in parts:
        return [f"ModelCheckpoint(filename={filename!r}): the template leaves dirpath (an absolute path or a '..' "
                "part); checkpoints are written, and removed, only inside dirpath. Choose the folder with dirpath= "
                f"and give a name inside it, such as {PurePath(filename).name!r} (sub-folders such as 'sub/{{epoch}}' "
                "are allowed)."]
    return []


def _claim(path: str) -> bool:
    """Create an empty file at ``path`` if nothing is there (exclusively: of two runs, one wins); whether it did."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _release(path: str) -> None:
    """Remove the empty file :func:`_claim` left at ``path`` when no checkpoint replaced it."""
    with contextlib.suppress(OSError):
        if os.path.isfile(path) and not os.path.islink(path) and os.path.getsize(path) == 0:
            os.remove(path)


def _sibling_run_folders(saved: str | None, current: str | None) -> bool:
    """Whether ``saved`` and ``current`` are the same-named folders of two version folders of one root
    (``<root>/version_0/checkpoints`` and ``<root>/version_1/checkpoints``)."""
    if not saved or not current:
        return False
    saved_path, current_path = Path(saved), Path(current)
    return saved_path.name == current_path.name and saved_path.parent.parent == current_path.parent.parent


def _swap_in(temporary: str, target: str) -> None:
    """Rename ``temporary`` to ``target``. A directory at ``target`` (a sharded checkpoint) cannot be replaced by
    one rename: it is moved aside first and removed after the new one is in place; a directory replacing a file
    (the empty claim of the name) takes its place after the file is removed."""
    if os.path.isdir(temporary) and os.path.isfile(target) and not os.path.islink(target):
        os.remove(target)
    if os.path.isdir(target) and not os.path.islink(target):
        aside = f"{temporary}.old"
        os.rename(target, aside)
        os.rename(temporary, target)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        os.replace(temporary, target)


def _fitting(trainer: Trainer) -> bool:
    """Whether the trainer runs ``fit`` (``trainer.state.fn``, a string or an enum whose value is one)."""
    fn = getattr(getattr(trainer, "state", None), "fn", None)
    return getattr(fn, "value", fn) == "fit"


def _no_validation(trainer: Trainer) -> bool:
    """Whether this fit has no validation batches (``trainer.num_val_batches``: an int or one per loader)."""
    batches = getattr(trainer, "num_val_batches", None)
    if batches is None:
        return False
    return sum(batches if isinstance(batches, (list, tuple)) else [batches]) == 0


def _render(template: str, metrics: Mapping[str, object], equals: str | None) -> str:
    """Fill ``{name}``/``{name:spec}`` fields of ``template``; with ``equals``, each becomes ``name=value``."""

    def fill(match: re.Match) -> str:
        name, spec = match.group(1), match.group(2) or ""
        value = metrics.get(name, 0)
        if isinstance(value, torch.Tensor):
            value = value.item() if value.numel() == 1 else value
        text = format(value, spec)
        return f"{name}{equals}{text}" if equals is not None else text

    return _FIELD.sub(fill, template)
