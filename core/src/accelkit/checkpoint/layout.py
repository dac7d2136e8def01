"""What a Trainer checkpoint's entries must look like before a run resumes from it, and which accelkit wrote it.

A checkpoint claiming a newer accelkit than the one installed is refused by version (its layout may have changed);
a checkpoint whose entries have another shape than accelkit (or Lightning) writes is refused with a sentence
naming the entry, instead of failing later on a bare ``KeyError`` or ``AttributeError``.
"""

from __future__ import annotations

from collections.abc import Mapping

from packaging.version import InvalidVersion, Version

from accelkit.__about__ import __version__
from accelkit.checkpoint.files import CheckpointError

#: the entry naming the accelkit version that wrote a checkpoint
VERSION_KEY = "accelkit_version"
#: the entry naming the Lightning version that wrote a checkpoint
LIGHTNING_VERSION_KEY = "pytorch-lightning_version"


def check_version(checkpoint: Mapping[str, object], name: str) -> None:
    """Refuse a checkpoint written by a newer accelkit than this one (or naming a version that is none).

    :param checkpoint: the loaded checkpoint dict.
    :param name: how the checkpoint is named in the error (its path).
    :raises CheckpointError: its ``accelkit_version`` is newer than the installed accelkit, or unreadable.
    """
    claimed = checkpoint.get(VERSION_KEY)
    if claimed is None:
        return
    try:
        written = Version(str(claimed))
    except InvalidVersion:
        raise CheckpointError(f"checkpoint {name} names accelkit version {claimed!r}, which is not a version "
                              f"number; it was not written by accelkit {__version__} or an older accelkit.") from None
    if written > Version(__version__):
        raise CheckpointError(f"checkpoint {name} was written by accelkit {written}, newer than the installed accelkit "
                              f"{__version__}, and its layout may differ; upgrade accelkit (pip install "
                              f"'accelkit>={written}') to use it.")


def check_entries(checkpoint: Mapping[str, object], name: str) -> None:
    """Refuse, with a sentence, a checkpoint whose ``state_dict``, ``callbacks`` or ``loops`` entry is not the
    dict accelkit and Lightning write (every stage reads them).

    :param checkpoint: the loaded checkpoint dict.
    :param name: how the checkpoint is named in the error (its path).
    :raises CheckpointError: an entry has another type; the message names it.
    """
    for key in ("state_dict", "callbacks", "loops"):
        value = checkpoint.get(key, {})
        if not isinstance(value, dict):
            raise CheckpointError(f"checkpoint {name} ({_writer(checkpoint)}) has a {key!r} entry of type "
                                  f"{type(value).__name__}, not the dict accelkit and Lightning write, so its layout "
                                  "is not one this accelkit reads; use a checkpoint written by accelkit or Lightning "
                                  "(or start without ckpt_path).")


def check_training_layout(checkpoint: Mapping[str, object], name: str) -> None:
    """Refuse, with a sentence, a checkpoint whose progress entries a resumed fit cannot read: ``epoch`` and
    ``global_step`` must be whole numbers, and the entries :func:`check_entries` checks dicts.

    :param checkpoint: the loaded checkpoint dict.
    :param name: how the checkpoint is named in the error (its path).
    :raises CheckpointError: an entry is missing or has another type; the message names it.
    """
    written = _writer(checkpoint)
    for key in ("epoch", "global_step"):
        if key not in checkpoint:
            raise CheckpointError(f"checkpoint {name} ({written}) has no {key!r} entry, so a fit cannot resume from "
                                  f"it; its entries are {sorted(map(str, checkpoint))[:12]}. Load its weights with "
                                  "Module.load_from_checkpoint(path) and start a new fit.")
        value = checkpoint[key]
        if isinstance(value, bool) or not isinstance(value, int) and not _integral_tensor(value):
            raise CheckpointError(f"checkpoint {name} ({written}) has {key}={value!r} ({type(value).__name__}), not a "
                                  "whole number, so a fit cannot resume from it; load its weights with "
                                  "Module.load_from_checkpoint(path) and start a new fit.")
    check_entries(checkpoint, name)


def _integral_tensor(value: object) -> bool:
    import torch

    return isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point()


def _writer(checkpoint: Mapping[str, object]) -> str:
    """Who wrote ``checkpoint``, in words (for the errors)."""
    if VERSION_KEY in checkpoint:
        return f"written by accelkit {checkpoint[VERSION_KEY]}"
    if LIGHTNING_VERSION_KEY in checkpoint:
        return f"written by Lightning {checkpoint[LIGHTNING_VERSION_KEY]}"
    return "writer unknown"
