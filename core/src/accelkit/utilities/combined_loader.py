"""Several iterables read as one: :class:`CombinedLoader` (Lightning's ``lightning.pytorch.utilities.CombinedLoader``).

The Trainer builds one itself when a ``*_dataloader`` method (or ``fit``/``validate``...) gives a dict or a list of
loaders: ``"max_size_cycle"`` for training, ``"sequential"`` for validation, testing and prediction. Give one
yourself to choose the mode.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from typing import cast

from accelkit.utilities.apply_func import namedtuple_constructor

MODES = ("min_size", "max_size_cycle", "max_size", "sequential")


def flatten(tree: object) -> list[object]:
    """The leaves of nested dicts, lists and tuples in order (dict values in insertion order); a leaf alone is a
    list of one."""
    if isinstance(tree, Mapping):
        return [leaf for value in tree.values() for leaf in flatten(value)]
    if isinstance(tree, (list, tuple)):
        return [leaf for value in tree for leaf in flatten(value)]
    return [tree]


def unflatten(tree: object, leaves: Iterator[object]) -> object:
    """``tree`` rebuilt with its leaves taken from ``leaves`` in :func:`flatten`'s order (same container types)."""
    if isinstance(tree, Mapping):
        values = {key: unflatten(value, leaves) for key, value in tree.items()}
        return _copy_mapping(tree, values) if isinstance(tree, dict) else values
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):  # namedtuple
        return namedtuple_constructor(tree)(*(unflatten(value, leaves) for value in tree))
    if isinstance(tree, (list, tuple)):
        return type(tree)(unflatten(value, leaves) for value in tree)
    return next(leaves)


def _copy_mapping(original: dict, values: dict) -> dict:
    if type(original) is dict:
        return values
    out = copy.copy(original)  # keeps a dict subclass (OrderedDict, defaultdict) and its attributes
    out.clear()
    out.update(values)
    return out


def _length(iterable: Iterable[object]) -> int | None:
    """``len(iterable)``, or ``None`` when it has none (an iterable dataset's loader, a generator)."""
    if not isinstance(iterable, Sized):  # (len() would raise TypeError: the same answer)
        return None
    try:
        return len(iterable)
    except (TypeError, NotImplementedError):
        return None


class _Combined(Iterator[tuple[object, int, int]]):
    """Iterates the leaves together: a batch of each, in the structure of the given iterables."""

    def __init__(self, combined: CombinedLoader) -> None:
        self.combined = combined
        self.sources = combined.flattened
        self.iterators = [iter(source) for source in self.sources]
        self.exhausted = [False] * len(self.sources)
        self.index = 0

    def __next__(self) -> tuple[object, int, int]:
        mode = self.combined.mode
        batches = []
        for position, iterator in enumerate(self.iterators):
            batches.append(self._next_of(position, iterator, mode))
        if mode == "max_size" and all(self.exhausted):
            raise StopIteration
        out = unflatten(self.combined.iterables, iter(batches))
        index, self.index = self.index, self.index + 1
        return out, index, 0

    def _next_of(self, position: int, iterator: Iterator[object], mode: str) -> object:
        if mode == "max_size" and self.exhausted[position]:
            return None
        try:
            return next(iterator)
        except StopIteration:
            self.exhausted[position] = True
            if mode == "min_size" or all(self.exhausted):
                raise
            if mode == "max_size":
                return None
            # max_size_cycle: start the shorter iterable again until the longest one ends
            self.iterators[position] = iter(self.sources[position])
            return next(self.iterators[position])


class _Sequential(Iterator[tuple[object, int, int]]):
    """Iterates the leaves one after the other: ``(batch, batch_idx in that iterable, iterable_idx)``."""

    def __init__(self, combined: CombinedLoader) -> None:
        self.sources = combined.flattened
        self.limits = combined.limits
        self.position = 0
        self.index = 0
        self.iterator: Iterator[object] | None = None

    def __next__(self) -> tuple[object, int, int]:
        while self.position < len(self.sources):
            limit = None if self.limits is None else self.limits[self.position]
            if self.iterator is None:
                self.iterator = iter(self.sources[self.position])
                self.index = 0
            if limit is None or self.index < limit:
                try:
                    batch = next(self.iterator)
                except StopIteration:
                    batch = _END
                if batch is not _END:
                    index, self.index = self.index, self.index + 1
                    return batch, index, self.position
            self.position += 1
            self.iterator = None
        raise StopIteration


_END = object()


class CombinedLoader(Iterable[tuple[object, int, int]]):
    """Reads several iterables (DataLoaders, or any iterable) in one loop.

    :param iterables: an iterable, or a dict / list / tuple of them (nested as deep as you like).
    :param mode: how they are read together:

        - ``"min_size"`` (default): a batch of each, until the shortest one ends;
        - ``"max_size_cycle"``: a batch of each, until the longest one ends, starting the shorter ones again;
        - ``"max_size"``: a batch of each, until the longest one ends, ``None`` for those already ended;
        - ``"sequential"``: each one to its end, then the next.

    Iterating gives ``(batch, batch_idx, dataloader_idx)``: in the first three modes ``batch`` has the structure of
    ``iterables`` (``{"a": batch_of_a, "b": batch_of_b}``) and ``dataloader_idx`` is 0; in ``"sequential"`` mode
    ``batch`` is one iterable's batch, ``batch_idx`` counts within it and ``dataloader_idx`` says which one (in the
    order of :attr:`flattened`). ``len()`` is the number of iterations: the shortest length, the longest, or
    their sum (``TypeError`` when an iterable it depends on has no length).

    The Trainer accepts one wherever it accepts loaders: ``trainer.fit(model, CombinedLoader(...))`` trains on the
    combined batches (any mode but ``"sequential"``); ``validate``/``test``/``predict`` read ``"sequential"``
    ones as their several loaders.
    """

    def __init__(self, iterables: object, mode: str = "min_size") -> None:
        if mode not in MODES:
            raise ValueError(f"CombinedLoader(mode={mode!r}) is not a mode; use one of {list(MODES)}")
        self._iterables = iterables
        self._mode = mode
        # (each leaf an iterable: checked just below)
        self._flattened = cast("list[Iterable[object]]", flatten(iterables))
        for index, leaf in enumerate(self._flattened):
            if isinstance(leaf, (str, bytes)) or not isinstance(leaf, Iterable):
                raise TypeError(f"CombinedLoader: item {index} of the iterables is {leaf!r:.80}, which is not an "
                                "iterable of batches; give DataLoaders (or other iterables), alone or in a dict/list")
        #: per-iterable batch limits for ``"sequential"`` mode (``None``: no limit); the Trainer sets them from
        #: ``limit_*_batches``
        self.limits: list[int | None] | None = None
        self._iterator: Iterator[tuple[object, int, int]] | None = None

    @property
    def iterables(self) -> object:
        """The iterables as given (the same object)."""
        return self._iterables

    @property
    def mode(self) -> str:
        """``"min_size"``, ``"max_size_cycle"``, ``"max_size"`` or ``"sequential"``."""
        return self._mode

    @property
    def flattened(self) -> list[Iterable[object]]:
        """The iterables in one list, in order (dict values in insertion order, nested collections depth first)."""
        return list(self._flattened)

    @flattened.setter
    def flattened(self, iterables: list[Iterable[object]]) -> None:
        """Replace the iterables by a list of as many (their structure stays), e.g. loaders with new samplers."""
        iterables = list(iterables)
        if len(iterables) != len(self._flattened):
            raise ValueError(f"CombinedLoader.flattened = a list of {len(iterables)} iterables, but it combines "
                             f"{len(self._flattened)}; give one replacement for each")
        self._iterables = unflatten(self._iterables, iter(iterables))
        self._flattened = iterables
        self._iterator = None

    @property
    def sampler(self) -> object:
        """The ``sampler`` of each iterable, in the structure of :attr:`iterables` (``None`` where there is none)."""
        return unflatten(self._iterables, iter([getattr(it, "sampler", None) for it in self._flattened]))

    @property
    def batch_sampler(self) -> object:
        """The ``batch_sampler`` of each iterable, in the structure of :attr:`iterables`."""
        return unflatten(self._iterables, iter([getattr(it, "batch_sampler", None) for it in self._flattened]))

    def __iter__(self) -> Iterator[tuple[object, int, int]]:
        self._iterator = _Sequential(self) if self._mode == "sequential" else _Combined(self)
        return self._iterator

    def __len__(self) -> int:
        lengths = [_length(it) for it in self._flattened]
        if self._mode == "sequential" and self.limits is not None:
            lengths = [n if limit is None else (limit if n is None else min(n, limit))
                       for n, limit in zip(lengths, self.limits, strict=True)]
        known = [n for n in lengths if n is not None]
        if self._mode == "min_size" and known:
            return min(known)
        if len(known) != len(lengths) or not lengths:
            missing = [i for i, n in enumerate(lengths) if n is None]
            raise TypeError(f"CombinedLoader(mode={self._mode!r}) has no length: iterable(s) {missing} have none")
        return max(known) if self._mode in ("max_size_cycle", "max_size") else sum(known)

    def reset(self) -> None:
        """Forget the iterator in progress (the next ``iter()`` starts every iterable again)."""
        self._iterator = None

    def map(self, function: Callable[[Iterable[object]], Iterable[object]]) -> CombinedLoader:
        """A copy whose iterables are ``function(iterable)`` (same mode, structure and limits)."""
        other = copy.copy(self)
        other._iterator = None
        other.flattened = [function(it) for it in self._flattened]
        return other

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["_iterator"] = None  # live iterators (worker processes of a DataLoader) do not travel
        return state

    def __repr__(self) -> str:
        return f"CombinedLoader(mode={self._mode!r}, iterables={len(self._flattened)})"
