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

The position also records the data's :func:`geometry` (processes, batch size, dataset length) and which dataset
indices each process trained on in the epoch (a bit mask, drawn again when the checkpoint is written), how many
samples that is (repeats included, for a sampler drawing with replacement) and a checksum of both
(:func:`record_checksum`). Resumed with another geometry, the position is mapped by samples, not batches
(:func:`resume_on_changed_data`), and a warning says what the run does, with numbers; a record that fails its
checks (:func:`record_damage`) is named in that warning and not used. Lightning's own checkpoints resume where
Lightning would (:func:`lightning_position`).
"""

from __future__ import annotations

import io
import os
import random
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sized
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, TypeGuard, cast

import torch
from torch.utils.data import DataLoader, IterableDataset, Sampler

from accelkit.__about__ import __version__
from accelkit.checkpoint.files import CheckpointError
from accelkit.utilities.rank_zero import rank_zero_warn
from accelkit.utilities.seed import SEED_WORKERS_ENV, seed_everything, seed_from_environment

if TYPE_CHECKING:
    from accelkit.accelerator import Accelerator
    from accelkit.loops.fit import FitLoop
    from accelkit.strategies.base import Strategy
    from accelkit.strategies.sampler import ShardSampler
    from accelkit.trainer.trainer import Trainer

#: the key under ``checkpoint["loops"]`` holding the position (see the module docstring)
POSITION_KEY = "position"


class Stateful(Protocol):
    """A loader or sampler that saves and restores its own position (torchdata's ``StatefulDataLoader``, a user
    sampler with ``state_dict``); what :func:`is_stateful` tells. Its state is opaque here: saved, then given back."""

    def state_dict(self) -> object: ...

    def load_state_dict(self, state_dict: object, /) -> None: ...


class RankRecord(TypedDict, total=False):
    """One process's part of a position (see the module docstring); read back from a checkpoint, a key may lack."""

    #: the random states at the checkpoint (:func:`rng_states`); ``None`` in a record another process wrote alone
    rng: dict[str, Any] | None
    #: the states of the loader's ``torch.Generator`` objects
    generators: list[torch.Tensor]
    #: what decided the epoch's order (:func:`epoch_start`); ``None`` at an epoch's end
    epoch_start: dict[str, Any] | None
    #: a stateful loader's ``state_dict()``
    loader: object
    #: the dataset indices trained on in the epoch (:func:`pack_mask`), ``None`` where not known
    seen: torch.Tensor | None
    #: the distinct indices ``seen`` marks (or a count, without ``seen``)
    samples: int
    #: the samples trained, repeats included
    drawn: int
    #: :func:`record_checksum` of the three above
    seen_crc: int
    #: whether the loader draws with replacement
    replacement: bool


# the fit loop running for each trainer (not an attribute: a trainer pickled to spawned workers stays light). Weak
# on both sides: the loop refers to its trainer, so a strong value would keep every trainer (and what it holds:
# loggers' open files, the module) alive for the rest of the process.
# ---------------------------------------------------------------------------------------------- random states
def rng_states(accelerator: Accelerator | None = None) -> dict[str, Any]:
    """This process's global random states (torch's host generator, NumPy, Python, and the device's through
    :meth:`~accelkit.Accelerator.rng_state`) as plain data that ``torch.load(weights_only=True)`` reads back."""
    states: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if accelerator is not None:
        states.update(accelerator.rng_state())
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy ships with torch wheels
        return states
    numpy_state = np.random.get_state(legacy=False)  # a dict whatever the bit generator (legacy: a tuple for MT19937)
    generator = numpy_state["state"]
    states["numpy"] = {"kind": str(numpy_state["bit_generator"]),
                       "keys": torch.from_numpy(generator["key"].astype(np.int64)), "pos": int(generator["pos"]),
                       "has_gauss": int(numpy_state["has_gauss"]), "cached": float(numpy_state["gauss"])}
    return states


def set_rng_states(states: dict[str, Any], accelerator: Accelerator | None = None) -> None:
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


def seed_spawned_worker(strategy: Strategy) -> int | None:
    """In a process the strategy started (``ddp_spawn``, XLA spawn), seed torch/NumPy/Python from
    ``ACCELKIT_SEED`` as :func:`~accelkit.seed_everything` did in the launching process (Lightning's
    ``reset_seed``): a spawned process otherwise starts from a random state, so two identical runs differ as soon
    as something draws (dropout). Returns the seed, or ``None`` when nothing was done."""
    if not strategy.launches_workers:
        return None
    seed = seed_from_environment(default=None)
    if seed is None:
        return None
    return seed_everything(seed, workers=os.environ.get(SEED_WORKERS_ENV) == "1", verbose=False)


# ---------------------------------------------------------------------------------------------- the loader's parts
def _samplers(loader: object) -> list[object]:
    """The loader's sampler, batch sampler and the batch sampler's sampler (and what a ShardSampler wraps)."""
    found: dict[int, object] = {}
    batch_sampler = getattr(loader, "batch_sampler", None)
    for candidate in (getattr(loader, "sampler", None), batch_sampler, getattr(batch_sampler, "sampler", None)):
        if candidate is not None:
            found.setdefault(id(candidate), candidate)
            inner = getattr(candidate, "sampler", None)
            if isinstance(inner, Sampler):
                found.setdefault(id(inner), inner)
    return list(found.values())


def _generators(loader: object, samplers: list[object] | None = None) -> list[torch.Generator]:
    """The ``torch.Generator`` objects the loader's order is drawn from, in a fixed order (``samplers``: the
    loader's :func:`_samplers`, when the caller has them)."""
    found: dict[int, torch.Generator] = {}
    for owner in [loader] + (_samplers(loader) if samplers is None else samplers):
        generator = getattr(owner, "generator", None)
        if isinstance(generator, torch.Generator) and generator.device.type == "cpu":
            found.setdefault(id(generator), generator)
    return list(found.values())


def is_stateful(loader: object) -> TypeGuard[Stateful]:
    """Whether ``loader`` saves and restores its own position (``state_dict``/``load_state_dict``, as torchdata's
    ``StatefulDataLoader``)."""
    return callable(getattr(loader, "state_dict", None)) and callable(getattr(loader, "load_state_dict", None))


def _stateful_sampler(loader: object, samplers: list[object] | None = None) -> Stateful | None:
    """A user sampler of the loader that has ``state_dict``/``load_state_dict`` (restored at the epoch start;
    ``samplers``: the loader's :func:`_samplers`, when the caller has them)."""
    for sampler in _samplers(loader) if samplers is None else samplers:
        if _is_torch_or_ours(sampler):
            continue
        if is_stateful(sampler):
            return sampler
    return None


def _is_torch_or_ours(sampler: object) -> bool:
    module = type(sampler).__module__
    return module.startswith("torch.utils.data") or module == "accelkit.strategies.sampler"


def _unknown_samplers(loader: object) -> list[str]:
    """Names of samplers whose order accelkit cannot re-create (a user class without ``state_dict``)."""
    return [type(s).__name__ for s in _samplers(loader)
            if not _is_torch_or_ours(s) and not callable(getattr(s, "state_dict", None))]


def epoch_start(loader: object, accelerator: Accelerator | None = None) -> dict[str, Any]:
    """What decides an epoch's order: taken right before the loader is iterated (once per epoch)."""
    samplers = _samplers(loader)  # (once: both below look at them)
    sampler = _stateful_sampler(loader, samplers)
    return {"rng": rng_states(accelerator), "generators": [g.get_state() for g in _generators(loader, samplers)],
            "sampler": sampler.state_dict() if sampler is not None else None}


def restore_epoch_start(loader: object, start: dict[str, Any], accelerator: Accelerator | None = None) -> None:
    """Put back what :func:`epoch_start` took (the random states, the loader's generators, a stateful sampler's
    state), so iterating ``loader`` again draws that epoch's order (``Fabric``'s loaders resume with it)."""
    if start.get("rng") is not None:
        set_rng_states(start["rng"], accelerator)
    _set_generators(loader, start.get("generators", []))
    sampler = _stateful_sampler(loader)
    if sampler is not None and start.get("sampler") is not None:
        sampler.load_state_dict(start["sampler"])


# ---------------------------------------------------------------------------------------------- capture (saving)
def capture(trainer: Trainer, alone: bool = False) -> dict[str, object] | None:
    """The position of the running fit (``None`` outside one). Every process calls this when a checkpoint is
    written (``Trainer.save_checkpoint`` is collective), so the per-process records are gathered here.

    ``alone``: this process writes the checkpoint by itself after a peer was lost (:mod:`accelkit.loops.survivor`),
    with no collective: the position is that of the last completed step (``completed_batches``), and the other
    processes' records are drawn here (:func:`_records_alone`)."""
    loop = trainer.run_state.fit_loop
    if loop is None or not loop.active:
        return None
    loader = getattr(loop, "train_loader", None)
    in_epoch = loop.in_epoch and not trainer.run_state.progress.epoch_training_done
    batches = (completed_batches(trainer) if alone else int(loop.consumed)) if in_epoch else 0
    record: RankRecord = {"rng": rng_states(trainer.accelerator),
                          "generators": [g.get_state() for g in _generators(loader)] if loader is not None else [],
                          "epoch_start": loop.epoch_state if in_epoch else None}
    if loader is not None and is_stateful(loader):
        record["loader"] = loader.state_dict()
    order = getattr(loop, "epoch_order", None)
    if in_epoch and loader is not None and order is not None:
        record.update(_samples_trained(loop, order, trainer.global_rank, batches))
    position = {"epoch": int(trainer.current_epoch), "batches": batches,
                "batches_since_val": int(loop.batches_since_val), "world_size": int(trainer.world_size),
                "geometry": geometry(loader, trainer.world_size) if loader is not None else None,
                "remapped": bool(in_epoch and order is not None and order.remapped)}
    if not alone:
        return {**position, "ranks": _gather(trainer, record)}
    others = _records_alone(trainer, order if in_epoch and loader is not None else None, record, batches)
    return {**position, "ranks": others, ALONE_KEY: int(trainer.global_rank)}


#: the position key of a checkpoint one process wrote alone (its global rank): the other processes' records hold
#: no random states of theirs
ALONE_KEY = "written_alone_by"


def completed_batches(trainer: Trainer) -> int:
    """The batches of the current epoch whose optimizer step completed: those the loop finished (``loop.consumed``,
    which the batch running when the run failed is not among), less, with gradient accumulation, the batches of an
    accumulation window that had not stepped yet (their gradients are not in the weights)."""
    loop = trainer.run_state.fit_loop
    done = int(loop.consumed) if loop is not None else 0
    accumulate = trainer.accumulate_grad_batches
    return done - done % accumulate if accumulate > 1 else done


def in_flight(trainer: Trainer) -> bool:
    """Whether a training batch was running (started, not finished) when the run stopped."""
    loop = trainer.run_state.fit_loop
    return loop is not None and loop.in_epoch and int(loop.started) > int(loop.consumed)


def _records_alone(trainer: Trainer, order: EpochOrder | None, own: RankRecord, batches: int) -> list[RankRecord]:
    """Every process's record as one process can tell it alone: its own ``own``; for each other one, the samples
    it trained in the epoch's first ``batches`` batches, drawn again from this loader with that process's rank (a
    rank-aware sampler, copied), and no random state (``None``: not restored)."""
    rank = trainer.global_rank
    records = []
    for other in range(trainer.world_size):
        if other == rank:
            records.append(own)
            continue
        start = own.get("epoch_start")
        record: RankRecord = {"rng": None, "generators": own["generators"],
                              "epoch_start": None if start is None else {**start, "rng": None, "sampler": None}}
        source = _rank_copy(order.source, other) if order is not None else None
        if order is not None and source is not None:
            record.update(_samples_trained(cast("FitLoop", trainer.run_state.fit_loop),  # (capture found it running)
                                           EpochOrder(source, order.offset, order.carried, order.carried_seen),
                                           other, batches))
        elif order is not None:  # no sampler to draw another rank's share with: its count only
            size = getattr(order.source, "batch_size", None) or 1
            record.update({"seen": None, "samples": (order.carried if other == 0 else 0) + batches * size})
        records.append(record)
    return records


def _rank_copy(loader: object, rank: int) -> DataLoader | None:
    """``loader`` as process ``rank`` has it: a copy whose rank-aware sampler (``num_replicas``/``rank``) has that
    rank; ``None`` where its sampler is not rank-aware."""
    import copy

    from accelkit.strategies.sampler import is_rank_aware, rebuild_loader

    sampler: Any = getattr(loader, "sampler", None)
    if not isinstance(loader, DataLoader) or not is_rank_aware(sampler):
        return None
    theirs = copy.copy(sampler)
    theirs.rank = rank
    return rebuild_loader(loader, sampler=theirs)


def describe(trainer: Trainer) -> str:
    """Where a checkpoint written now resumes, in words (for the line printed when a signal stops the run)."""
    loop = trainer.run_state.fit_loop
    epoch = int(trainer.current_epoch)
    if loop is None or not loop.in_epoch or trainer.run_state.progress.epoch_training_done:
        return f"it starts epoch {epoch + (1 if trainer.run_state.progress.epoch_training_done else 0)}"
    return f"it continues with batch {loop.consumed} of epoch {epoch}, as if never stopped"


def _gather(trainer: Trainer, record: RankRecord) -> list[RankRecord]:
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
    record: RankRecord | None = None
    notes: list[str] = field(default_factory=list)
    #: the data's shape when the checkpoint was written (:func:`geometry`); ``None`` for older or foreign ones
    geometry: dict[str, int | None] | None = None
    #: which dataset indices every process together trained on in the epoch (a bool mask; ``None``: not known)
    seen: torch.Tensor | None = None
    #: how many samples every process together trained on in the epoch
    samples: int = 0
    #: written inside an epoch that was itself resumed on other data (its batches do not count the loader's)
    remapped: bool = False
    #: what is wrong with the trained-samples record, when it is damaged (then ``seen`` is ``None`` and
    #: ``samples`` is counted without it); ``None`` for a sound record
    damage: str | None = None


def position(trainer: Trainer, checkpoint: dict[str, Any]) -> Position | None:
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
                     batches_since_val=int(saved.get("batches_since_val", 0)), record=record,
                     geometry=saved.get("geometry"), remapped=bool(saved.get("remapped", False)))
    _read_trained_samples(found, ranks)
    alone = saved.get(ALONE_KEY)
    if record is not None and alone is not None and alone != rank:
        found.notes.append(f"the checkpoint was written by process {alone} alone after a peer was lost: the random "
                           "states of this process are not restored, so the resumed run is not identical to an "
                           "uninterrupted one where it draws random numbers")
    if record is None:
        found.notes.append(f"the checkpoint was written by {len(ranks)} process(es) and this run has {world}: the "
                           "random states and the data order of each process are not restored, so the resumed run "
                           "is not identical to an uninterrupted one")
    return found


def _read_trained_samples(found: Position, ranks: list[object]) -> None:
    """Set ``found.seen`` and ``found.samples`` from the processes' trained-samples records, checked first
    (:func:`record_damage`): a damaged record is named in ``found.damage`` and not used; the samples are then
    counted from the records' counts, bounded by the batches the position says were trained."""
    records = [r for r in ranks if isinstance(r, dict)]
    counts = [r.get("drawn", r.get("samples", 0)) for r in records]
    counted = sum(c for c in counts if isinstance(c, int) and not isinstance(c, bool) and c > 0)
    size: Any = (found.geometry or {}).get("dataset_len")  # read from the checkpoint: checked below
    masks = [r["seen"] for r in records if isinstance(r.get("seen"), torch.Tensor)]
    if not records or len(records) != len(ranks) or len(masks) != len(records):
        found.samples = counted
        return
    found.damage = record_damage(records, size)
    if found.damage is not None:
        geometry = found.geometry or {}
        if not _whole(size, 1, _MAX_SAMPLES) or any(m.numel() != -(-size // 8) for m in masks):
            # the length or the masks are damaged, and which one cannot be told: the length is unknown, not
            # another dataset's (the run is then compared with the checkpoint's by processes and batch size)
            found.geometry = {**geometry, "dataset_len": None}
        trained = found.batches * (geometry.get("batch_size") or 0) * int(geometry.get("world_size") or 1)
        if trained and not found.remapped and not 0 < counted <= trained:  # the counts are damaged too
            counted = trained
        found.samples = counted
        return
    found.seen = torch.stack([unpack_mask(m, size) for m in masks]).any(dim=0)  # padding repeats a few
    replaced = any(r.get("replacement") is True for r in records)  # repeats: samples, not distinct indices
    found.samples = counted if replaced else int(found.seen.sum())


_MAX_SAMPLES = 1 << 48  # a dataset length past this is a damaged record (its mask alone would be 32 TiB)


def _whole(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def record_damage(records: list[dict[str, Any]], size: Any) -> str | None:
    """What is wrong with the processes' trained-samples ``records`` (of a dataset of ``size`` samples, as the
    position records it), in words; ``None`` when each mask has the length ``size`` needs, matches its checksum
    (records written before accelkit kept one have none) and marks as many samples as its count says."""
    if not _whole(size, 1, _MAX_SAMPLES):
        return f"the dataset length it records, {size!r}, is not a whole number of samples from 1 to {_MAX_SAMPLES}"
    needed = -(-size // 8)
    for rank, record in enumerate(records):
        mask, samples = record["seen"], record.get("samples")
        who = f"process {rank}'s mask of the samples trained"
        if mask.dtype != torch.uint8 or mask.dim() != 1 or mask.numel() != needed:
            return (f"{who} holds {mask.numel()} {mask.dtype} value(s) where a dataset of {size} samples needs "
                    f"{needed} bytes")
        saved = record.get("seen_crc")
        if saved is not None and saved != record_checksum(mask, samples, record.get("drawn")):
            return f"{who} or its counts do not match the checksum saved with them"
        bits = mask.to(torch.uint8).unsqueeze(1).bitwise_and(_BITS).ne(0).reshape(-1)
        marked, beyond = int(bits[:size].sum()), int(bits[size:].sum())
        if beyond or not _whole(samples, 0, size) or marked != samples:
            return (f"{who} marks {marked} of {size} samples" + (f" and {beyond} past the dataset's end" if beyond
                                                                 else "") + f" where its count says {samples!r}")
    return None


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


def begin_epoch(loop: FitLoop, loader: Iterable[object], pos: Position
                ) -> tuple[Iterable[object], int, dict[str, Any] | None]:
    """Prepare the first epoch of a resumed fit: returns the iterable to train on, the index of its first batch,
    and the random states to put back once the loader has started (``None``: nothing to put back).

    At an epoch start (``pos.batches == 0``) the checkpoint's random and generator states are put back now. In
    the middle of an epoch the epoch-start states come back, and the batches trained on are skipped without
    loading them (a stateful loader gets its saved state instead)."""
    trainer = loop.trainer
    record = pos.record
    if pos.batches and pos.geometry is not None and (
            pos.remapped or not _same_geometry(pos, geometry(loader, trainer.world_size))):
        return resume_on_changed_data(loop, loader, pos)
    if pos.batches and pos.damage is not None:
        rank_zero_warn(f"resuming inside epoch {pos.epoch}: the checkpoint's record of the samples trained is damaged "
                       f"({pos.damage}); it is not needed here: the processes and the batch size are the "
                       f"checkpoint's, so the run continues after its {pos.batches} batch(es).", category=UserWarning,
                       stacklevel=5)
    for note in pos.notes:
        rank_zero_warn(f"resuming at epoch {pos.epoch}, batch {pos.batches}: {note}.", category=UserWarning,
                       stacklevel=5)
    if record is None:
        return skip_batches(loader, pos.batches), pos.batches, None
    stateful = loader if is_stateful(loader) else None
    if stateful is not None and record.get("loader") is not None:
        stateful.load_state_dict(record["loader"])
    if pos.batches == 0:
        saved = record.get("loader")
        if stateful is not None and isinstance(saved, dict) and saved.get("_iterator_finished") is False:
            # saved at an epoch's end before the loader said it was exhausted (no batch is read ahead): the
            # uninterrupted run's next iter() starts a new epoch from that iterator; build it at the saved
            # position so the epoch's iter() does the same (torchdata's StatefulDataLoader)
            iter(loader)
        if (rng := record.get("rng")) is not None:  # (none in a record another process wrote alone)
            set_rng_states(rng, trainer.accelerator)
        _set_generators(loader, record.get("generators", []))
        return loader, 0, None
    start = record.get("epoch_start") or {}
    loop.epoch_state = start
    accumulate = trainer.accumulate_grad_batches
    if accumulate > 1 and pos.batches % accumulate:
        rank_zero_warn(f"the checkpoint was written after batch {pos.batches} of epoch {pos.epoch}, inside a gradient "
                      f"accumulation window of {accumulate} batches: the gradients of its first "
                      f"{pos.batches % accumulate} batch(es) were not saved, so the resumed run differs.",
                      category=UserWarning, stacklevel=5)
    if stateful is not None:
        if record.get("loader") is None:
            rank_zero_warn(f"the training loader {type(loader).__name__} is stateful now but was not when the "
                          "checkpoint was written: it starts the epoch from its first batch.", category=UserWarning,
                          stacklevel=5)
        if trainer.run_state.progress.num_training_batches is None:
            rank_zero_warn(f"the stateful training loader {type(loader).__name__} has no length, so the loop read one "
                          "batch ahead of its step when the checkpoint was written: the resumed epoch leaves that "
                          "batch out. Give the loader a __len__ for an exact resume.", category=UserWarning,
                          stacklevel=5)
        return loader, pos.batches, record["rng"]  # put back once the loader started (it may draw a seed)
    if start.get("rng") is not None:
        set_rng_states(start["rng"], trainer.accelerator)
    _set_generators(loader, start.get("generators", []))
    sampler = _stateful_sampler(loader)
    if sampler is not None and start.get("sampler") is not None:
        sampler.load_state_dict(start["sampler"])
    return skip_batches(loader, pos.batches), pos.batches, record["rng"]


# ---------------------------------------------------------------------------------------------- changed data
@dataclass
class EpochOrder:
    """What the current epoch iterates: ``source`` (the loader, or a copy of it for an epoch resumed on other
    data) from batch index ``offset``, after ``carried`` samples trained before the checkpoint it resumed from
    (``carried_seen``: a bool mask of their dataset indices, when they are known)."""

    source: Iterable[object]
    offset: int = 0
    carried: int = 0
    carried_seen: torch.Tensor | None = None

    @property
    def remapped(self) -> bool:
        """Whether the epoch was resumed on other data (its batches are not the loader's)."""
        return self.carried > 0 or self.offset > 0


def geometry(loader: object, world_size: int) -> dict[str, int | None]:
    """The shape of a training epoch's data: processes, samples per batch and samples in the dataset (``None``
    where unknown). A resume into another shape maps the position by samples (:func:`resume_on_changed_data`)."""
    dataset = getattr(loader, "dataset", None)
    try:
        size = None if dataset is None or isinstance(dataset, IterableDataset) else len(dataset)
    except TypeError:
        size = None
    return {"world_size": int(world_size), "batch_size": getattr(loader, "batch_size", None), "dataset_len": size}


class _Indices(torch.utils.data.Dataset):
    """A dataset whose samples are their own indices (to draw a loader's order without loading anything)."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> int:
        return int(index)


def _drawn_indices(loader: object, batches: int, start: dict[str, Any] | None) -> torch.Tensor | None:
    """The dataset indices of the first ``batches`` batches of the epoch of ``loader`` that began at the states
    ``start``: drawn again (the random states are put back afterwards), nothing is loaded. ``None`` where the
    order cannot be drawn again (no sampler, a stateful loader or sampler, no epoch-start record)."""
    if batches <= 0:
        return torch.zeros(0, dtype=torch.int64)
    if start is None or not isinstance(loader, DataLoader) or not isinstance(loader.dataset, Sized) or \
            isinstance(loader.dataset, IterableDataset) or loader.batch_sampler is None or is_stateful(loader) or \
            _stateful_sampler(loader) is not None:
        return None
    now, generators = rng_states(), _generators(loader)
    now_generators = [g.get_state() for g in generators]
    try:
        set_rng_states(start.get("rng") or {})
        _set_generators(loader, start.get("generators", []))
        # a DataLoader draws its base seed before the sampler's first draw: the probe does the same
        probe = DataLoader(_Indices(len(loader.dataset)), batch_sampler=loader.batch_sampler, collate_fn=list,
                           generator=loader.generator)
        picked = [index for _, batch in zip(range(batches), probe, strict=False) for index in batch]
    finally:
        set_rng_states(now)
        for generator, state in zip(generators, now_generators, strict=False):
            generator.set_state(state)
    return torch.tensor(picked, dtype=torch.int64)


def _samples_trained(loop: FitLoop, order: EpochOrder, rank: int, done: int) -> RankRecord:
    """Process ``rank``'s share of what the current epoch trained on in its first ``done`` batches: ``seen`` (its
    dataset indices as a bit mask, :func:`pack_mask`, or ``None``) and ``samples`` (how many; samples carried from
    an earlier checkpoint without their indices are counted by rank 0)."""
    batches = done - order.offset
    drawn = _drawn_indices(order.source, batches, loop.epoch_state)
    carried = order.carried if rank == 0 else 0
    if drawn is None:
        size = getattr(order.source, "batch_size", None) or 1
        return {"seen": None, "samples": carried + max(0, batches) * size}
    if order.carried and order.carried_seen is None:  # carried samples of other data: a count, no indices
        return {"seen": None, "samples": carried + int(drawn.numel())}
    size = len(cast(Sized, cast(DataLoader, order.source).dataset))  # (_drawn_indices drew it: a sized DataLoader's)
    mask = torch.zeros(size, dtype=torch.bool) if order.carried_seen is None else order.carried_seen.clone()
    mask[drawn[drawn < size]] = True
    packed, samples, count = pack_mask(mask), int(mask.sum()), carried + int(drawn.numel())
    return {"seen": packed, "samples": samples, "drawn": count, "seen_crc": record_checksum(packed, samples, count),
            "replacement": draws_with_replacement(order.source)}


def record_checksum(packed: torch.Tensor, samples: object, drawn: object) -> int:
    """The CRC-32 of one process's trained-samples record: its packed mask and both counts (``samples``: the
    distinct indices the mask marks; ``drawn``: the samples trained, repeats included)."""
    return zlib.crc32(f"{samples} {drawn} ".encode() + packed.contiguous().numpy().tobytes())


def draws_with_replacement(loader: object) -> bool:
    """Whether a sampler of ``loader`` draws with replacement (``WeightedRandomSampler``, ``RandomSampler(
    replacement=True)``): its epoch repeats indices, so samples are counted, not distinct indices."""
    return any(getattr(sampler, "replacement", False) is True for sampler in _samplers(loader))


_BITS = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8)


def pack_mask(mask: torch.Tensor) -> torch.Tensor:
    """A bool mask as bits (eight per ``uint8``): the indices a checkpoint records cost a bit per sample."""
    padded = torch.zeros(-(-mask.numel() // 8) * 8, dtype=torch.bool)
    padded[:mask.numel()] = mask
    return (padded.view(-1, 8).to(torch.uint8) * _BITS).sum(dim=1).to(torch.uint8)


def unpack_mask(packed: torch.Tensor, size: int) -> torch.Tensor:
    """The bool mask of ``size`` entries that :func:`pack_mask` packed."""
    bits = packed.to(torch.uint8).unsqueeze(1).bitwise_and(_BITS).ne(0)
    return bits.reshape(-1)[:size]


class UnseenSampler(Sampler):
    """The order of ``sampler`` (a permutation of the dataset's indices) without the indices in ``seen``.

    :param sampler: a sampler yielding every index of the dataset once.
    :param seen: a bool tensor over the dataset's indices, ``True`` for those to leave out.
    """

    def __init__(self, sampler: Iterable[int], seen: torch.Tensor) -> None:
        self.sampler, self.seen = sampler, seen.tolist()
        self.left = int(seen.numel() - int(seen.sum()))

    def __len__(self) -> int:
        return self.left

    def __iter__(self) -> Iterator[int]:
        seen = self.seen
        return (int(i) for i in self.sampler if not seen[int(i)])


class _GlobalOrder:
    """The order every rank of a :class:`~accelkit.strategies.sampler.ShardSampler` agrees on, before sharding."""

    def __init__(self, sampler: ShardSampler) -> None:
        self.sampler = sampler

    def __len__(self) -> int:
        return len(self.sampler.data_source)

    def __iter__(self) -> Iterator[int]:
        return iter(self.sampler.global_order())


def _unseen_loader(loader: object, mask: torch.Tensor, world_size: int) -> tuple[DataLoader, str] | None:
    """A copy of ``loader`` that leaves out the samples trained on (``True`` in ``mask``: every other sample of
    the epoch once), and how it shards them; ``None`` where its sampler's order is not a plain permutation of the
    dataset."""
    from accelkit.strategies.sampler import ShardSampler, rebuild_loader

    if not isinstance(loader, DataLoader) or loader.batch_size is None or not isinstance(loader.dataset, Sized):
        return None
    size, sampler = len(loader.dataset), loader.sampler
    if mask.numel() != size:
        return None
    new: ShardSampler | UnseenSampler
    if isinstance(sampler, ShardSampler) and sampler.sampler is None:
        rest = UnseenSampler(_GlobalOrder(sampler), mask)
        new = ShardSampler(sampler.data_source, sampler.num_replicas, sampler.rank, sampler=rest)
        padding = len(new) * sampler.num_replicas - len(rest)
        how = f"{len(new)} per process" + (f", {padding} of them repeated to fill the last shares" if padding else "")
    elif world_size == 1 and isinstance(sampler, (torch.utils.data.SequentialSampler,
                                                  torch.utils.data.RandomSampler)) and \
            not getattr(sampler, "replacement", False) and len(sampler) == size:
        new = UnseenSampler(sampler, mask)
        how = f"{len(new)} in all"
    else:
        return None
    return rebuild_loader(loader, sampler=new), how


def _skipped_loader(loader: object, samples: int, world_size: int) -> tuple[DataLoader, int, int] | None:
    """A copy of ``loader`` whose sampler skips ``samples // world_size`` samples of this process's share
    (all of it when the share is smaller); returns (it, samples skipped per process, the share's size)."""
    from accelkit.strategies.sampler import rebuild_loader

    if not isinstance(loader, DataLoader) or loader.batch_size is None or not isinstance(loader.sampler, Sized) or \
            isinstance(loader.dataset, IterableDataset):
        return None
    share = len(loader.sampler)
    skip = min(share, samples // world_size)
    return rebuild_loader(loader, sampler=SkipSampler(loader.sampler, skip)), skip, share


def _same_geometry(pos: Position, now: Mapping[str, int | None]) -> bool:
    """Whether ``now`` is the data shape of ``pos``; a part a damaged record lost (``None``) is not a change."""
    saved = pos.geometry or {}
    return all(saved.get(key) == value or pos.damage is not None and saved.get(key) is None
               for key, value in now.items())


def _changes(saved: Mapping[str, int | None], now: Mapping[str, int | None], lost: bool = False) -> str:
    """The parts of ``now`` that differ from ``saved``, in words (``lost``: leave out the parts ``saved`` lost to a
    damaged record, ``None``)."""
    words = {"world_size": "process(es)", "batch_size": "sample(s) per batch",
             "dataset_len": "sample(s) in the dataset"}
    changed = [f"{now.get(key)} {word} where the checkpoint's run had {saved.get(key)}" for key, word in words.items()
               if saved.get(key) != now.get(key) and not (lost and saved.get(key) is None)]
    return ", ".join(changed) or "the data of the checkpoint's run, which had itself resumed this epoch on other data"


def resume_on_changed_data(loop: FitLoop, loader: Iterable[object], pos: Position
                           ) -> tuple[Iterable[object], int, dict[str, Any] | None]:
    """Resume inside an epoch when the processes, the batch size or the dataset's length differ from the
    checkpoint's (see :func:`begin_epoch` for what it returns). The position is mapped by samples, never by
    batches, and a warning says with numbers what the run does:

    - the same dataset, drawn again: the samples trained on are left out and every other sample of the epoch is
      trained once (a sharded run pads the last shares with a few repeated samples, as every epoch);
    - another dataset length (or an order that cannot be drawn again): each process skips its share of the number
      of samples trained on; when that covers the epoch, the epoch is complete and the run goes on with the next.
    """
    trainer = loop.trainer
    now = geometry(loader, trainer.world_size)
    start_states = (pos.record or {}).get("epoch_start") or {}
    if start_states.get("rng") is not None:  # same processes: the epoch's order as the checkpoint's run drew it
        set_rng_states(start_states["rng"], trainer.accelerator)
        _set_generators(loader, start_states.get("generators", []))
    head = f"resuming inside epoch {pos.epoch} with {_changes(pos.geometry or {}, now, pos.damage is not None)}:"
    total = pos.geometry.get("dataset_len") if pos.geometry else None
    unseen = _unseen_loader(loader, pos.seen, trainer.world_size) \
        if pos.seen is not None and total is not None and total == now["dataset_len"] else None
    if unseen is not None and total is not None:  # (an unseen loader is only drawn for a known total)
        source, how = unseen
        carried_seen = pos.seen
        text = (f"the {pos.samples} of its {total} samples trained before the checkpoint are left out and the "
                f"other {total - pos.samples} are trained ({how}), each once in this epoch")
    else:
        carried_seen = None
        skipped = _skipped_loader(loader, pos.samples, trainer.world_size)
        if skipped is None:
            return _skip_by_batches(loop, loader, pos, head)
        source, skip, share = skipped
        if pos.damage is not None:
            which = f"the checkpoint's record of the samples trained is damaged ({pos.damage}) and not used, so "
        elif total != now["dataset_len"]:
            which = "which samples were trained cannot be matched to this data, so "
        elif pos.seen is None:
            which = "which samples were trained was not recorded (their order could not be drawn again), so "
        else:
            # (a DataLoader: _skipped_loader copied it)
            which = f"its sampler {type(cast(DataLoader, loader).sampler).__name__} cannot leave given samples out, so "
        text = f"{which}the {pos.samples} sample(s) trained before the checkpoint count against this epoch: " + (
            f"they cover its {share * trainer.world_size}, so epoch {pos.epoch} is complete and the run goes on "
            f"with epoch {pos.epoch + 1}" if skip >= share else
            f"each process skips the first {skip} sample(s) of its share of {share} and trains the other "
            f"{share - skip}")
    limit = trainer.run_state.progress.num_training_batches
    start = max(0, limit - len(source)) if limit is not None else 0
    rank_zero_warn(f"{head} {text}. The random states differ from an uninterrupted run's.", category=UserWarning,
                   stacklevel=6)
    loop.epoch_state = epoch_start(source, trainer.accelerator)
    loop.epoch_order = EpochOrder(source, start, pos.samples, carried_seen)
    return source, start, (pos.record or {}).get("rng")


def _skip_by_batches(loop: FitLoop, loader: Iterable[object], pos: Position, head: str
                     ) -> tuple[Iterable[object], int, dict[str, Any] | None]:
    """The last resort of :func:`resume_on_changed_data` (no sampler to skip samples with): skip as many batches
    as hold the samples trained on, counted with this run's batch size and processes."""
    trainer = loop.trainer
    # a loader built with batch_sampler= has no batch_size of its own: its batch sampler's counts
    size = getattr(loader, "batch_size", None) or getattr(getattr(loader, "batch_sampler", None), "batch_size", 1) or 1
    batches = pos.samples // (size * trainer.world_size)
    limit = trainer.num_training_batches
    ends = limit is not None and batches >= limit
    name = type(loader.dataset if isinstance(loader, DataLoader) else loader).__name__
    rank_zero_warn(f"{head} {name} has no sampler to skip samples with, so the {pos.samples} sample(s) trained "
                  f"before the checkpoint count as {batches} batch(es) of {size} per process"
                  + (f", which cover the epoch: epoch {pos.epoch} is complete and the run goes on with epoch "
                     f"{pos.epoch + 1}." if ends else "."), category=UserWarning, stacklevel=7)
    loop.epoch_order = EpochOrder(loader, batches, pos.samples, None)
    return skip_batches(loader, batches), batches, (pos.record or {}).get("rng")


def _set_generators(loader: object, states: list[torch.Tensor]) -> None:
    generators = _generators(loader)
    if len(generators) != len(states):
        if states:
            rank_zero_warn(f"the training loader has {len(generators)} torch.Generator(s) but the checkpoint holds "
                          f"{len(states)}: its order after resuming may differ.", category=UserWarning, stacklevel=6)
        return
    for generator, state in zip(generators, states, strict=False):
        generator.set_state(state)


def skip_batches(loader: Iterable[object], count: int) -> Iterable[object]:
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
            rank_zero_warn(f"resuming in the middle of an epoch: the sampler {', '.join(unknown)} has no state_dict, "
                           "so "
                          "accelkit cannot tell whether it repeats the epoch's order; the batches trained on are "
                          "skipped in the order it gives now. Give it state_dict/load_state_dict (or use a "
                          "torchdata StatefulDataLoader) for an exact resume.", category=UserWarning, stacklevel=6)
        if loader.num_workers > 0 and loader.persistent_workers:
            rank_zero_warn("resuming in the middle of an epoch with persistent_workers=True: the resumed epoch starts "
                          "new workers, which draw their seeds at another point than the uninterrupted run; the "
                          "order of a shuffled loader may differ. Use persistent_workers=False or a torchdata "
                          "StatefulDataLoader for an exact resume.", category=UserWarning, stacklevel=6)
        if loader.batch_sampler is not None:
            return rebuild_loader(loader, batch_sampler=SkipSampler(loader.batch_sampler, count), batch_size=1,
                                  drop_last=False)
        return rebuild_loader(loader, sampler=SkipSampler(loader.sampler, count))
    name = type(loader.dataset).__name__ if isinstance(loader, DataLoader) else type(loader).__name__
    rank_zero_warn(f"resuming in the middle of an epoch: {name} has no sampler and no state_dict, so accelkit reads "
                  f"its first {count} batch(es) again and drops them; the resume is exact only if it yields the same "
                  "stream again. A torchdata StatefulDataLoader (or state_dict/load_state_dict on the dataset's "
                  "loader) resumes without reading them.", category=UserWarning, stacklevel=6)
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

    def __init__(self, iterable: Iterable[object], count: int) -> None:
        self.iterable, self.count = iterable, count

    def __iter__(self) -> Iterator[object]:

        iterator = iter(self.iterable)
        for _ in range(self.count):
            if next(iterator, _END) is _END:
                return
        yield from iterator
