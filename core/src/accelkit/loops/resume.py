"""Exact resume: what a checkpoint written during ``fit`` records so a resumed run continues as if never stopped.

A checkpoint written while the fit loop runs (``ModelCheckpoint(every_n_train_steps=...)``,
``train_time_interval``, ``interrupted.ckpt``, an epoch-end checkpoint) carries, under
``checkpoint["loops"]["position"]``:

- the epoch and how many of its batches were trained on (``batches``; 0 when the epoch was finished, then the
  run resumes at the next epoch's first batch);
- per process (rank): the random states of torch (CPU, and CUDA when it is in use), NumPy and Python at the time
  of the checkpoint and at the start of the epoch, the states of the ``torch.Generator`` objects of the training
  loader (its ``generator``, its sampler's, its batch sampler's sampler's), the state of a user sampler that has
  ``state_dict``, and the ``state_dict()`` of a stateful loader (torchdata's ``StatefulDataLoader``, or any loader
  with ``state_dict``/``load_state_dict``).

Resuming in the middle of an epoch, the loop re-creates the epoch's order from the epoch-start states and skips
the batches already trained on at the sampler level (their data is never loaded), then puts back the random
states of the checkpoint, so dropout and every later draw continue the same streams. A stateful loader is given
its saved state instead. Nothing is recorded per step: the states are read when a checkpoint is written (one
snapshot of the random states per epoch).
"""

from __future__ import annotations

import io
import os
import random
import warnings
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, Sampler

from accelkit.__about__ import __version__
from accelkit.checkpoint.files import CheckpointError
from accelkit.utilities.seed import SEED_WORKERS_ENV, seed_everything, seed_from_environment

#: the key under ``checkpoint["loops"]`` holding the position (see the module docstring)
POSITION_KEY = "position"

# the fit loop running for each trainer (not an attribute: a trainer pickled to spawned workers stays light)
_LOOPS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def register(trainer: Any, loop: Any) -> None:
    """Make ``loop`` the fit loop whose position checkpoints of ``trainer`` record."""
    _LOOPS[trainer] = loop


# ---------------------------------------------------------------------------------------------- random states
def rng_states(accelerator: Any = None) -> dict[str, Any]:
    """This process's global random states (torch's host generator, NumPy, Python, and the device's through
    :meth:`~accelkit.Accelerator.rng_state`) as plain data that ``torch.load(weights_only=True)`` reads back."""
    states: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if accelerator is not None:
        states.update(accelerator.rng_state())
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy ships with torch wheels
        return states
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    states["numpy"] = {"kind": str(kind), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                       "has_gauss": int(has_gauss), "cached": float(cached)}
    return states


def set_rng_states(states: dict[str, Any], accelerator: Any = None) -> None:
    """Put back what :func:`rng_states` returned (entries missing from ``states`` are left alone)."""
    if "torch" in states:
        torch.set_rng_state(states["torch"])
    if "python" in states:
        version, internal, gauss = states["python"]
        random.setstate((version, tuple(internal), gauss))
    if accelerator is not None:
        accelerator.set_rng_state(states)
    saved = states.get("numpy")
    if saved is not None:
        try:
            import numpy as np
        except ImportError:  # pragma: no cover
            return
        np.random.set_state((saved["kind"], saved["keys"].numpy().astype(np.uint32), saved["pos"],
                             saved["has_gauss"], saved["cached"]))


def seed_spawned_worker(strategy: Any) -> int | None:
    """In a process the strategy started (``ddp_spawn``, XLA spawn), seed torch/NumPy/Python from
    ``ACCELKIT_SEED`` as :func:`~accelkit.seed_everything` did in the launching process (Lightning's
    ``reset_seed``): a spawned process otherwise starts from a random state, so two identical runs differ as soon
    as something draws (dropout). Returns the seed, or ``None`` when nothing was done."""
    if not strategy.launches_workers:
        return None
    seed = seed_from_environment(default=None)
    if seed is None:
        return None
    return seed_everything(seed, workers=os.environ.get(SEED_WORKERS_ENV) == "1")


# ---------------------------------------------------------------------------------------------- the loader's parts
def _samplers(loader: Any) -> list[Any]:
    """The loader's sampler, batch sampler and the batch sampler's sampler (and what a ShardSampler wraps)."""
    found: dict[int, Any] = {}
    batch_sampler = getattr(loader, "batch_sampler", None)
    for candidate in (getattr(loader, "sampler", None), batch_sampler, getattr(batch_sampler, "sampler", None)):
        if candidate is not None:
            found.setdefault(id(candidate), candidate)
            inner = getattr(candidate, "sampler", None)
            if isinstance(inner, Sampler):
                found.setdefault(id(inner), inner)
    return list(found.values())


def _generators(loader: Any) -> list[torch.Generator]:
    """The ``torch.Generator`` objects the loader's order is drawn from, in a fixed order."""
    found: dict[int, torch.Generator] = {}
    for owner in [loader] + _samplers(loader):
        generator = getattr(owner, "generator", None)
        if isinstance(generator, torch.Generator) and generator.device.type == "cpu":
            found.setdefault(id(generator), generator)
    return list(found.values())


def is_stateful(loader: Any) -> bool:
    """Whether ``loader`` saves and restores its own position (``state_dict``/``load_state_dict``, as torchdata's
    ``StatefulDataLoader``)."""
    return callable(getattr(loader, "state_dict", None)) and callable(getattr(loader, "load_state_dict", None))


def _stateful_sampler(loader: Any) -> Any:
    """A user sampler of the loader that has ``state_dict``/``load_state_dict`` (restored at the epoch start)."""
    for sampler in _samplers(loader):
        if _is_torch_or_ours(sampler):
            continue
        if callable(getattr(sampler, "state_dict", None)) and callable(getattr(sampler, "load_state_dict", None)):
            return sampler
    return None


def _is_torch_or_ours(sampler: Any) -> bool:
    module = type(sampler).__module__
    return module.startswith("torch.utils.data") or module == "accelkit.strategies.sampler"


def _unknown_samplers(loader: Any) -> list[str]:
    """Names of samplers whose order accelkit cannot re-create (a user class without ``state_dict``)."""
    return [type(s).__name__ for s in _samplers(loader)
            if not _is_torch_or_ours(s) and not callable(getattr(s, "state_dict", None))]


def epoch_start(loader: Any, accelerator: Any = None) -> dict[str, Any]:
    """What decides an epoch's order: taken right before the loader is iterated (once per epoch)."""
    sampler = _stateful_sampler(loader)
    return {"rng": rng_states(accelerator), "generators": [g.get_state() for g in _generators(loader)],
            "sampler": sampler.state_dict() if sampler is not None else None}


# ---------------------------------------------------------------------------------------------- capture (saving)
def capture(trainer: Any) -> dict[str, Any] | None:
    """The position of the running fit (``None`` outside one). Every process calls this when a checkpoint is
    written (``Trainer.save_checkpoint`` is collective), so the per-process records are gathered here."""
    loop = _LOOPS.get(trainer)
    if loop is None or not loop.active:
        return None
    loader = getattr(loop, "train_loader", None)
    in_epoch = loop.in_epoch and not trainer.run_state.epoch_training_done
    record: dict[str, Any] = {"rng": rng_states(trainer.accelerator),
                              "generators": [g.get_state() for g in _generators(loader)] if loader is not None else [],
                              "epoch_start": loop.epoch_state if in_epoch else None}
    if loader is not None and is_stateful(loader):
        record["loader"] = loader.state_dict()
    return {"epoch": int(trainer.current_epoch), "batches": int(loop.consumed) if in_epoch else 0,
            "batches_since_val": int(loop.batches_since_val), "world_size": int(trainer.world_size),
            "ranks": _gather(trainer, record)}


def describe(trainer: Any) -> str:
    """Where a checkpoint written now resumes, in words (for the line printed when a signal stops the run)."""
    loop = _LOOPS.get(trainer)
    epoch = int(trainer.current_epoch)
    if loop is None or not loop.in_epoch or trainer.run_state.epoch_training_done:
        return f"it starts epoch {epoch + (1 if getattr(trainer, '_epoch_training_done', False) else 0)}"
    return f"it continues with batch {loop.consumed} of epoch {epoch}, as if never stopped"


def _gather(trainer: Any, record: dict[str, Any]) -> list[dict[str, Any]]:
    """``record`` of every process, in rank order (one exchange of serialized bytes through ``all_gather``)."""
    strategy = trainer.strategy
    if trainer.world_size <= 1:
        return [record]
    buffer = io.BytesIO()
    torch.save(record, buffer)
    raw = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)
    device = strategy.root_device
    sizes = strategy.all_gather(torch.tensor([raw.numel()], dtype=torch.int64, device=device)).reshape(-1).cpu()
    padded = torch.zeros(int(sizes.max()), dtype=torch.uint8)
    padded[:raw.numel()] = raw
    everyone = strategy.all_gather(padded.to(device)).cpu()
    # bytes of this job's own processes, written just now by torch.save above
    return [torch.load(io.BytesIO(everyone[r, :int(sizes[r])].numpy().tobytes()), weights_only=False)
            for r in range(everyone.shape[0])]


# ---------------------------------------------------------------------------------------------- restore (loading)
@dataclass
class Position:
    """Where a resumed fit starts: ``epoch``, ``batches`` already trained on in it, and this process's record."""

    epoch: int
    batches: int
    batches_since_val: int = 0
    record: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)


def position(trainer: Any, checkpoint: dict[str, Any]) -> Position | None:
    """The resume position saved in ``checkpoint`` for this process (``None`` for a checkpoint without one): an
    accelkit position, or the one Lightning's loop states (``loops["fit_loop"]``) give."""
    saved = checkpoint.get("loops", {}).get(POSITION_KEY)
    if not saved:
        return lightning_position(checkpoint)
    if not isinstance(saved, dict) or not all(isinstance(saved.get(k), int) for k in ("epoch", "batches")):
        raise CheckpointError(f"the checkpoint's resume position (loops.{POSITION_KEY}) is a "
                              f"{type(saved).__name__} without whole-number 'epoch' and 'batches', not what accelkit "
                              f"{__version__} writes, so where to resume is unknown; start without ckpt_path, or "
                              "load its weights with Module.load_from_checkpoint(path).")
    ranks = saved.get("ranks") or []
    rank, world = trainer.global_rank, trainer.world_size
    record = ranks[rank] if len(ranks) == world and rank < len(ranks) else None
    found = Position(epoch=int(saved["epoch"]), batches=int(saved["batches"]),
                     batches_since_val=int(saved.get("batches_since_val", 0)), record=record)
    if record is None:
        found.notes.append(f"the checkpoint was written by {len(ranks)} process(es) and this run has {world}: the "
                           "random states and the data order of each process are not restored, so the resumed run "
                           "is not identical to an uninterrupted one")
    return found


def lightning_position(checkpoint: dict[str, Any]) -> Position | None:
    """Where Lightning resumes from its own checkpoint, read from its loop states (``loops["fit_loop"]``): the
    epoch after the last one whose training ended, or inside an epoch after the batches it processed. ``None``
    when the checkpoint holds no Lightning loop states.

    :raises CheckpointError: the loop states are there but not in the layout Lightning 2.x writes.
    """
    fit_loop = checkpoint.get("loops", {}).get("fit_loop")
    if fit_loop is None:
        return None
    try:
        epochs = int(fit_loop["epoch_progress"]["current"]["processed"])
        batch_progress = fit_loop["epoch_loop.batch_progress"]
        batches = int(batch_progress["current"]["processed"])
        last = bool(batch_progress["is_last_batch"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"the checkpoint's Lightning loop states (loops.fit_loop) lack {exc} or have another "
                              "layout than Lightning 2.x writes, so where it stopped is unknown; start without "
                              "ckpt_path, or load its weights with Module.load_from_checkpoint(path).") from None
    written = checkpoint.get("pytorch-lightning_version", "of unknown version")
    if last or batches == 0:  # the epoch's training ended (Lightning counts it as processed at its end)
        return Position(epoch=max(epochs, int(checkpoint["epoch"]) + (1 if last else 0)), batches=0,
                        record=None)
    note = (f"the checkpoint was written by Lightning {written} inside epoch {epochs}, after {batches} batch(es); "
            "Lightning keeps no random states and no data order, so the run skips the first "
            f"{batches} batch(es) of the epoch in its own order and is not identical to an uninterrupted one")
    return Position(epoch=epochs, batches=batches, record=None, notes=[note])


def begin_epoch(loop: Any, loader: Any, pos: Position) -> tuple[Any, int, dict[str, Any] | None]:
    """Prepare the first epoch of a resumed fit: returns the iterable to train on, the index of its first batch,
    and the random states to put back once the loader has started (``None``: nothing to put back).

    At an epoch start (``pos.batches == 0``) the checkpoint's random and generator states are put back now. In
    the middle of an epoch the epoch-start states come back, and the batches trained on are skipped without
    loading them (a stateful loader gets its saved state instead)."""
    trainer = loop.trainer
    record = pos.record
    for note in pos.notes:
        warnings.warn(f"resuming at epoch {pos.epoch}, batch {pos.batches}: {note}.", UserWarning, stacklevel=3)
    if record is None:
        return skip_batches(loader, pos.batches), pos.batches, None
    stateful = is_stateful(loader)
    if stateful and record.get("loader") is not None:
        loader.load_state_dict(record["loader"])
    if pos.batches == 0:
        saved = record.get("loader")
        if stateful and isinstance(saved, dict) and saved.get("_iterator_finished") is False:
            # saved at an epoch's end before the loader said it was exhausted (no batch is read ahead): the
            # uninterrupted run's next iter() starts a new epoch from that iterator; build it at the saved
            # position so the epoch's iter() does the same (torchdata's StatefulDataLoader)
            iter(loader)
        set_rng_states(record["rng"], trainer.accelerator)
        _set_generators(loader, record.get("generators", []))
        return loader, 0, None
    start = record.get("epoch_start") or {}
    loop.epoch_state = start
    accumulate = trainer.accumulate_grad_batches
    if accumulate > 1 and pos.batches % accumulate:
        warnings.warn(f"the checkpoint was written after batch {pos.batches} of epoch {pos.epoch}, inside a gradient "
                      f"accumulation window of {accumulate} batches: the gradients of its first "
                      f"{pos.batches % accumulate} batch(es) were not saved, so the resumed run differs.",
                      UserWarning, stacklevel=3)
    if stateful:
        if record.get("loader") is None:
            warnings.warn(f"the training loader {type(loader).__name__} is stateful now but was not when the "
                          "checkpoint was written: it starts the epoch from its first batch.", UserWarning,
                          stacklevel=3)
        if trainer.num_training_batches is None:
            warnings.warn(f"the stateful training loader {type(loader).__name__} has no length, so the loop read one "
                          "batch ahead of its step when the checkpoint was written: the resumed epoch leaves that "
                          "batch out. Give the loader a __len__ for an exact resume.", UserWarning, stacklevel=3)
        return loader, pos.batches, record["rng"]  # put back once the loader started (it may draw a seed)
    if start.get("rng") is not None:
        set_rng_states(start["rng"], trainer.accelerator)
    _set_generators(loader, start.get("generators", []))
    sampler = _stateful_sampler(loader)
    if sampler is not None and start.get("sampler") is not None:
        sampler.load_state_dict(start["sampler"])
    return skip_batches(loader, pos.batches), pos.batches, record["rng"]


def _set_generators(loader: Any, states: list[Any]) -> None:
    generators = _generators(loader)
    if len(generators) != len(states):
        if states:
            warnings.warn(f"the training loader has {len(generators)} torch.Generator(s) but the checkpoint holds "
                          f"{len(states)}: its order after resuming may differ.", UserWarning, stacklevel=4)
        return
    for generator, state in zip(generators, states):
        generator.set_state(state)


def skip_batches(loader: Any, count: int) -> Any:
    """An iterable over ``loader`` without its first ``count`` batches.

    A map-style ``DataLoader`` gets a copy whose (batch) sampler skips them, so their samples are never loaded;
    the copy draws the same random numbers as ``loader`` would. Anything else (an ``IterableDataset``, a plain
    iterable) is read and its first ``count`` batches are dropped, with a warning naming it."""
    from accelkit.strategies.sampler import rebuild_loader

    if count <= 0:
        return loader
    if isinstance(loader, DataLoader) and not isinstance(loader.dataset, IterableDataset):
        unknown = _unknown_samplers(loader)
        if unknown:
            warnings.warn(f"resuming in the middle of an epoch: the sampler {', '.join(unknown)} has no state_dict, so "
                          "accelkit cannot tell whether it repeats the epoch's order; the batches trained on are "
                          "skipped in the order it gives now. Give it state_dict/load_state_dict (or use a "
                          "torchdata StatefulDataLoader) for an exact resume.", UserWarning, stacklevel=4)
        if loader.num_workers > 0 and loader.persistent_workers:
            warnings.warn("resuming in the middle of an epoch with persistent_workers=True: the resumed epoch starts "
                          "new workers, which draw their seeds at another point than the uninterrupted run; the "
                          "order of a shuffled loader may differ. Use persistent_workers=False or a torchdata "
                          "StatefulDataLoader for an exact resume.", UserWarning, stacklevel=4)
        if loader.batch_sampler is not None:
            return rebuild_loader(loader, batch_sampler=SkipSampler(loader.batch_sampler, count), batch_size=1,
                                  drop_last=False)
        return rebuild_loader(loader, sampler=SkipSampler(loader.sampler, count))
    name = type(loader.dataset).__name__ if isinstance(loader, DataLoader) else type(loader).__name__
    warnings.warn(f"resuming in the middle of an epoch: {name} has no sampler and no state_dict, so accelkit reads "
                  f"its first {count} batch(es) again and drops them; the resume is exact only if it yields the same "
                  "stream again. A torchdata StatefulDataLoader (or state_dict/load_state_dict on the dataset's "
                  "loader) resumes without reading them.", UserWarning, stacklevel=4)
    return _Dropped(loader, count)


class SkipSampler(Sampler):
    """Iterates ``sampler`` (a sampler or batch sampler) without its first ``count`` items: the items are drawn
    (so the random numbers drawn are the same) but nothing is loaded for them.

    :param sampler: the sampler or batch sampler of the epoch.
    :param count: how many items (batches, for a batch sampler) to leave out.
    """

    def __init__(self, sampler: Any, count: int) -> None:
        self.sampler, self.count = sampler, count

    def __len__(self) -> int:
        return max(0, len(self.sampler) - self.count)

    def __iter__(self) -> Iterator[Any]:
        iterator = iter(self.sampler)
        for _ in range(self.count):
            if next(iterator, _END) is _END:
                return
        yield from iterator


_END = object()


class _Dropped:
    """``iterable`` without its first ``count`` items (read and thrown away)."""

    def __init__(self, iterable: Any, count: int) -> None:
        self.iterable, self.count = iterable, count

    def __iter__(self) -> Iterator[Any]:
        iterator = iter(self.iterable)
        for _ in range(self.count):
            if next(iterator, _END) is _END:
                return
        yield from iterator
