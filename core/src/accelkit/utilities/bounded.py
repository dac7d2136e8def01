"""Bounded data: YAML text and loaded hyper-parameters are checked for size before anything walks them.

A YAML file can name one value many times (an anchor ``&a`` and its aliases ``*a``, or merge keys ``<<: *a``),
and a checkpoint's pickled data can share one list between many places: nine levels of ten aliases make a
1 KB file that stands for a billion values, and every function that copies or walks the data (a Lightning class
path translation, a hyper-parameter copy) then runs for hours or exhausts memory. :func:`load_yaml` and
:func:`check_expanded_size` count each value as many times as it is used, in time proportional to the distinct
values, and refuse data beyond :data:`MAX_VALUES` values, :data:`MAX_DEPTH` levels of nesting or a value that
contains itself, with a :class:`DataBombError` naming the source, before anything expands it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from accelkit.errors import AccelkitError

__all__ = ["MAX_DEPTH", "MAX_VALUES", "MAX_YAML_BYTES", "DataBombError", "check_expanded_size", "check_yaml_text",
           "load_yaml"]

#: The most values a YAML document or a checkpoint's hyper-parameters may stand for, counting a value once for
#: each place that names it (an alias, a merge key, a shared list); a tensor or a string is one value.
MAX_VALUES = 1_000_000
#: The deepest nesting of lists and mappings accepted.
MAX_DEPTH = 100
#: The longest YAML text accepted (characters).
MAX_YAML_BYTES = 64 * 1024 * 1024


class DataBombError(AccelkitError, ValueError):
    """Data that would expand beyond the bounds of :mod:`accelkit.utilities.bounded` (too many values once its
    aliases or shared containers are expanded, too deep, or containing itself)."""


def _count(root: object, children: Callable[[object], Iterable[object] | None], source: str) -> int:
    """How many values ``root`` stands for, each shared value counted once per use; raises past the bounds."""
    sizes: dict[int, int] = {}
    open_ids: set[int] = set()

    def size(value: object, depth: int) -> int:
        known = sizes.get(id(value))
        if known is not None:
            return known
        items = children(value)
        if items is None:
            return 1
        if id(value) in open_ids:
            raise DataBombError(f"{source} holds a value that contains itself (an alias inside its own anchor, or a "
                                "list or mapping that includes itself); write the data out without such a cycle")
        if depth > MAX_DEPTH:
            raise DataBombError(f"{source} nests lists or mappings more than {MAX_DEPTH} levels deep; flatten it")
        open_ids.add(id(value))
        total = 1
        for item in items:
            total += size(item, depth + 1)
            if total > MAX_VALUES:
                raise DataBombError(
                    f"{source} stands for more than {MAX_VALUES:,} values once its aliases, merge keys or shared "
                    f"lists are expanded (each use counts); a file or checkpoint this large is refused before it is "
                    f"expanded. Write the values out (without aliases), or keep large data in a tensor or a file")
        open_ids.discard(id(value))
        sizes[id(value)] = total
        return total

    return size(root, 0)


def _python_children(value: object) -> Iterable[object] | None:
    if isinstance(value, Mapping):
        return [item for pair in value.items() for item in pair]
    if isinstance(value, (list, tuple, set, frozenset)):
        return list(value)
    return None


def check_expanded_size(value: object, source: str) -> int:
    """Check that ``value`` (loaded data: dicts, lists, tuples, sets of anything) stays within the bounds when every
    shared container is counted once per place that holds it. Returns the number of values it stands for.

    :param source: what holds the data, for the message (``"checkpoint 'a.ckpt' hyper_parameters"``).
    :raises DataBombError: naming ``source`` and the bound it passes.
    """
    return _count(value, _python_children, source)


def check_yaml_text(text: str, source: str) -> None:
    """Check YAML ``text`` against the bounds without building it: its length, then its node graph (aliases and
    merge keys are shared nodes there, counted once per use), in time proportional to the text.

    :raises DataBombError: naming ``source`` and the bound it passes.
    :raises yaml.YAMLError: the text is not YAML.
    """
    import yaml

    if len(text) > MAX_YAML_BYTES:
        raise DataBombError(f"{source} is {len(text):,} characters long, more than the {MAX_YAML_BYTES:,} accepted "
                            "for a YAML file; keep large data in a separate file")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    def children(node: object) -> Iterable[object] | None:
        if isinstance(node, yaml.MappingNode):
            return [item for pair in node.value for item in pair]
        if isinstance(node, yaml.SequenceNode):
            return node.value
        return None

    try:
        for document in yaml.compose_all(text, Loader=loader):
            _count(document, children, source)
    except RecursionError:
        raise DataBombError(f"{source} nests lists or mappings too deep to read; flatten it") from None


def load_yaml(text: str, source: str) -> object:
    """``yaml.safe_load(text)`` after :func:`check_yaml_text`: plain data, bounded in size.

    :param source: what the text is (``"hparams_file 'h.yaml'"``), for messages.
    :raises DataBombError: the text passes a bound.
    """
    import yaml

    check_yaml_text(text, source)
    return yaml.safe_load(text)
