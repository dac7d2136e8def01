"""Which paths a checkpoint callback may trust and remove: the paths inside its own folder, links followed.

A checkpoint's callback state names files (``ModelCheckpoint``'s ``best_model_path``, ``best_k_models``...), and a
callback removes the files it no longer keeps. A checkpoint is data from outside: a state naming
``checkpoints/../../victim_dir`` must not make the callback read or delete anything outside its folder. These
functions decide, on the resolved paths (every ``..`` and every symbolic link followed, so a link pointing outside
counts as outside), what lies inside a folder and what is a checkpoint by its format.
"""

from __future__ import annotations

import os

from accelkit.checkpoint.sharded import METADATA_FILE

#: the first bytes of a checkpoint file: ``torch.save`` writes a zip archive
ZIP_MAGIC = b"PK\x03\x04"


def inside(path: str | os.PathLike[str], folder: str | os.PathLike[str]) -> bool:
    """Whether ``path`` lies strictly inside ``folder``, both resolved (relative ones against the working
    directory, every ``..`` and symbolic link followed). Anything but a ``str``/``PathLike`` is not inside."""
    try:
        return _below(os.path.realpath(path), os.path.realpath(folder))
    except (TypeError, ValueError):  # not a path at all (a crafted state), or a NUL byte in it
        return False


def _below(resolved: str, root: str) -> bool:
    return resolved != root and os.path.commonpath([resolved, root]) == root


def location(path: str | os.PathLike[str]) -> str:
    """``path`` with its parent folder resolved (every ``..`` and link followed) but its last part kept as it is:
    where removing ``path`` acts (removing a link removes the link, not what it points to)."""
    absolute = os.path.abspath(path)
    return os.path.join(os.path.realpath(os.path.dirname(absolute)), os.path.basename(absolute))


def is_checkpoint_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a regular file in ``torch.save``'s format (a zip archive) or a sharded checkpoint folder
    (holding its :data:`~accelkit.checkpoint.sharded.METADATA_FILE`); links are not followed."""
    if os.path.islink(path):
        return False
    if os.path.isdir(path):
        return os.path.isfile(os.path.join(path, METADATA_FILE))
    if not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as file:
            return file.read(len(ZIP_MAGIC)) == ZIP_MAGIC
    except OSError:
        return False


def removal_refusal(path: str | os.PathLike[str], folder: str | os.PathLike[str]) -> str | None:
    """Why ``path`` must not be removed by the callback whose folder is ``folder`` (``None``: it may be).

    It may be removed when it lies inside ``folder`` (its parent resolved, see :func:`location`) and is a checkpoint
    by its format (:func:`is_checkpoint_file`), or is a symbolic link there to a path inside ``folder`` (removing it
    removes the link only). An empty string: nothing to remove and nothing to say (nothing is there, or it lies
    outside ``folder``: not this callback's file, as after ``dirpath`` changed). Otherwise the reason, in words (a
    folder that is no sharded checkpoint, a file in another format, a link pointing outside).
    """
    where = location(path)
    if not _below(where, os.path.realpath(folder)) or not os.path.lexists(where):
        return ""
    if os.path.islink(where):
        if inside(where, folder):  # the link's target, every link followed
            return None
        return f"it is a symbolic link pointing outside the callback's folder, to {os.path.realpath(where)!r}"
    if is_checkpoint_file(where):
        return None
    if os.path.isdir(where):
        return f"it is a folder but not a sharded checkpoint (it holds no {METADATA_FILE})"
    return "it is not a checkpoint file (torch.save writes a zip archive)"


def restore_refusal(path: object, folder: str | os.PathLike[str]) -> str | None:
    """Why ``path``, restored from a checkpoint's callback state, must not be trusted by the callback whose folder is
    ``folder`` (``None``: it may be): it is no path, it resolves (``..`` and links followed) outside ``folder``, or
    something other than a checkpoint is there (:func:`removal_refusal`). A path where nothing is (a file the user
    deleted since) may be trusted: the callback would have written it."""
    if not isinstance(path, (str, os.PathLike)):
        return f"not a path but a value of type {type(path).__name__}"
    if not inside(path, folder):
        return "outside the folder, .. and symbolic links followed"
    return removal_refusal(path, folder) or None
