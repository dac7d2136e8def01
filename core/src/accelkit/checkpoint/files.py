"""Checkpoint files: written atomically, read safely, and every bad one explained in a sentence.

Writing (:func:`atomic_save`): the data goes to a temporary file next to the target, is flushed and fsynced, then
renamed over it, and the folder is fsynced; a crash leaves the previous file. Temporary files of writers that were
killed are removed by the next save into the same folder. A Trainer checkpoint whose weights are not finite (NaN or
inf) is refused before anything is written, so a diverged run never replaces the last good checkpoint (set
``ACCELKIT_ALLOW_NON_FINITE_CHECKPOINTS=1`` to write it anyway). A failed write (disk full, permissions) is an
:class:`OSError` naming the path and the size.

Reading (:func:`load`): an empty, truncated or foreign file, a folder, a bare ``state_dict`` and a file holding
arbitrary Python objects each get a :class:`~accelkit.checkpoint.CheckpointError` naming the file, what is wrong and
what would work.

Checksums (:func:`verify_archive`): ``torch.save`` writes a zip archive whose every record (``data.pkl``, each
tensor's bytes, ``version``...) carries the CRC-32 of its bytes in the archive's own directory, but ``torch.load``
does not compare them, so a flipped byte inside a tensor loads as a changed weight. :func:`load` compares every
record with its CRC-32 before anything is unpickled; a mismatch is a :class:`CheckpointError` naming the file and the
record. The checksums live where the zip format puts them, so a checkpoint is the file ``torch.save`` writes, read by
a plain ``torch.load`` as before, and every checkpoint torch wrote since 1.6 (accelkit's of any version, Lightning's)
is checked. A file without checksums (the legacy pre-1.6 format, or written after
``torch.serialization.set_crc32_options(False)``) loads unchecked, as before.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import pickle
import socket
import stat
import struct
import tempfile
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import torch

from accelkit.errors import AccelkitError
from accelkit.utilities.apply_func import apply_to_tensors
from accelkit.utilities.processes import process_alive

if TYPE_CHECKING:
    from torch.serialization import MAP_LOCATION

_T = TypeVar("_T")

#: set to ``1`` to write checkpoints whose weights hold NaN or inf (refused by default)
ALLOW_NON_FINITE_ENV = "ACCELKIT_ALLOW_NON_FINITE_CHECKPOINTS"
_TMP_TAG = ".accelkit-tmp-"  # temporary files: .accelkit-tmp-<host>-<pid>-<random>.tmp


class CheckpointError(AccelkitError, ValueError):
    """A checkpoint that cannot be used (or must not be written); the message names the file, what is wrong and
    what would work."""


class UnsafeCheckpointError(CheckpointError, pickle.UnpicklingError):
    """A checkpoint holding Python objects that ``torch.load(weights_only=True)`` refuses to unpickle."""


# ----------------------------------------------------------------------------------------------- writing
def atomic_save(obj: object, path: str | os.PathLike) -> Path:
    """``torch.save`` ``obj`` to ``path`` so that ``path`` is either the old file or the complete new one.

    The data goes to a temporary file in the same directory, is flushed to disk, then renamed over ``path``
    (a rename within one file system is atomic). A crash mid-write leaves no half-written checkpoint, and the
    temporary files such crashes left behind are removed here, at the next save into that folder.

    :raises CheckpointError: ``obj`` is a Trainer checkpoint whose weights are not finite (nothing is written).
    :raises OSError: the write failed (disk full, permissions, ...); the message names the path and the size.
    """
    path = Path(path)
    _refuse_non_finite(obj, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_files(path.parent)
    prefix = f"{_TMP_TAG}{_host()}-{os.getpid()}-"  # short and hidden: the target's own name may be near 255
    fd, tmp_name = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
    written = 0
    try:
        with os.fdopen(fd, "wb") as handle:
            try:
                torch.save(obj, handle)
                handle.flush()
                written = handle.tell()
                os.fsync(handle.fileno())
            except (OSError, RuntimeError) as exc:
                with contextlib.suppress(OSError, ValueError):
                    written = os.fstat(handle.fileno()).st_size
                _raise_write_error(exc, path, tmp_name, written)
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    _fsync_dir(path.parent)
    return path


def _raise_write_error(exc: BaseException, path: Path, tmp_name: str, written: int) -> None:
    """Turn torch's stream errors (``unexpected pos 17664 vs 17556``) into an OSError that says what happened."""
    code = exc.errno if isinstance(exc, OSError) and exc.errno else None
    if code is None:
        code = probe_write_error(tmp_name)  # torch's zip writer hides the OS error
        if code is None and not isinstance(exc, OSError):
            raise exc  # not a write failure (a pickling error, say): as it was
    try:
        usage = os.statvfs(path.parent)
        free = f"; {usage.f_bavail * usage.f_frsize} bytes free on that file system"
    except OSError:
        free = ""
    reason = write_error_reason(code) if code else f"{type(exc).__name__}: {exc}"
    raise OSError(code or errno.EIO, f"could not write checkpoint {str(path)!r}: {reason} (after {written} bytes"
                  f"{free}). The previous file at that path, if any, is unchanged; free space or choose another "
                  "folder (default_root_dir or ModelCheckpoint(dirpath=...)).", str(path)) from exc


def write_error_reason(code: int) -> str:
    """Why a write failed with ``errno`` ``code``, in words: ``"the disk is full"`` for ``ENOSPC``, the quota, the
    file size limit (``ulimit -f``), a permission or a read-only file system; the system's text for any other."""
    return {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded",
            errno.EFBIG: "the file is larger than this process may write (ulimit -f)",
            errno.EACCES: "permission denied", errno.EROFS: "the file system is read-only"}.get(code, os.strerror(code))


def probe_write_error(file: str | os.PathLike) -> int | None:
    """The ``errno`` of appending 4 KiB to ``file`` (flushed to disk), or ``None`` if that works: what a write that
    failed without saying why (torch's zip writer: ``unexpected pos 704 vs 598``) met, such as ``ENOSPC``. A
    successful probe leaves its bytes; probe a file that is discarded anyway."""
    try:
        with open(file, "ab") as probe:
            probe.write(b"\0" * 4096)
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as probe_error:
        return probe_error.errno
    return None


def _host() -> str:
    return "".join(c if c.isalnum() else "_" for c in socket.gethostname())[:40] or "host"


def remove_stale_temp_files(folder: str | os.PathLike) -> list[Path]:
    """Remove the temporary files that killed :func:`atomic_save` writers left in ``folder``; return them.

    A temporary file names its host and process id; it is stale when that process, on this host, no longer
    runs. Files of other hosts (a shared file system) and of live writers are kept.
    """
    removed: list[Path] = []
    host = _host()
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        if _TMP_TAG not in name or not name.endswith(".tmp"):
            continue
        owner = name.split(_TMP_TAG, 1)[1].rsplit(".tmp", 1)[0].rsplit("-", 1)[0]
        owner_host, _, pid = owner.rpartition("-")
        if owner_host != host or not pid.isdigit() or process_alive(int(pid)):
            continue
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(folder, name))
            removed.append(Path(folder) / name)
    return removed


def _fsync_dir(folder: Path) -> None:
    """Make the rename durable (the folder's entry), where the platform allows opening a folder."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _refuse_non_finite(obj: object, path: Path) -> None:
    """A Trainer checkpoint (``state_dict`` plus ``global_step``) with NaN/inf weights is not written."""
    if not (isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict) and "global_step" in obj):
        return
    if os.environ.get(ALLOW_NON_FINITE_ENV, "").strip().lower() in ("1", "true", "yes"):
        return
    bad = non_finite_tensors(obj["state_dict"])
    if not bad:
        return
    kept = f"the file there ({path.stat().st_size} bytes) is kept" if path.exists() else "nothing was written"
    shown = ", ".join(f"{name!r} ({count} non-finite)" for name, count in bad[:3])
    more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
    raise CheckpointError(
        f"not writing checkpoint {str(path)!r}: the weights are not finite at step {obj.get('global_step')} "
        f"({shown}{more}), so training diverged; {kept}. Resume from the last good checkpoint with a lower learning "
        f"rate or gradient clipping (gradient_clip_val=...); set {ALLOW_NON_FINITE_ENV}=1 to write such checkpoints.")


def non_finite_tensors(state_dict: Mapping[str, object]) -> list[tuple[str, int]]:
    """``(name, number of NaN/inf values)`` for each floating-point tensor of ``state_dict`` that has any."""
    bad = []
    for name, value in state_dict.items():
        if isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex()) and value.numel():
            finite = torch.isfinite(value)
            if not bool(finite.all()):
                bad.append((str(name), int((~finite).sum())))
        elif isinstance(value, float) and not math.isfinite(value):
            bad.append((str(name), 1))
    return bad


# ----------------------------------------------------------------------------------------------- reading
def load(path: str | os.PathLike | IO[bytes], weights_only: bool = True,
         map_location: MAP_LOCATION = "cpu") -> dict[str, Any]:
    """Load a checkpoint file: the one reader of checkpoint files, with one set of errors (resuming a fit,
    ``load_from_checkpoint``, the ``accelkit checkpoint`` command). ``weights_only=True`` (the default) refuses to
    unpickle arbitrary objects. Every record of the archive is compared with its CRC-32 first
    (:func:`verify_archive`).

    :param path: a path, or an open binary file.
    :raises FileNotFoundError: nothing at ``path``.
    :raises IsADirectoryError: ``path`` is a folder (the message lists the checkpoints in it).
    :raises CheckpointError: the file is empty, truncated, not a PyTorch file, damaged (a record whose bytes do not
        match their checksum, a ``data.pkl`` that cannot be unpickled), a bare ``state_dict``, or holds something
        other than a checkpoint dict.
    :raises UnsafeCheckpointError: with ``weights_only=True``, the file holds objects other than plain data.
    """
    file = Path(path) if isinstance(path, (str, os.PathLike)) else None
    name = repr(str(path)) if file is not None else repr(getattr(path, "name", None) or type(path).__name__)
    if file is not None:
        check_file(file)
    verify_archive(path if file is None else file, name)
    try:
        checkpoint = torch.load(path if file is None else file, map_location=map_location, weights_only=weights_only)
    except pickle.UnpicklingError as exc:
        if weights_only and refused_object(exc):
            raise unsafe_checkpoint_error(name, exc) from exc
        raise CheckpointError(f"checkpoint {name} is damaged: its data.pkl cannot be unpickled "
                              f"({_first_reason(exc)}). {_alternatives(file) if file is not None else ''}".rstrip()
                              ) from exc
    except (RuntimeError, EOFError, OSError, ValueError, KeyError, IndexError, TypeError, AttributeError,
            struct.error) as exc:
        where = f" ({_size(file)})" if file is not None else ""
        hint = _alternatives(file) if file is not None else ""
        raise CheckpointError(
            f"checkpoint {name}{where} is damaged and cannot be read ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}). {hint}".rstrip()) from exc
    if not isinstance(checkpoint, dict):
        raise CheckpointError(f"checkpoint {name} holds a {type(checkpoint).__name__}, not a checkpoint dict; "
                              "write checkpoints with trainer.save_checkpoint(path).")
    if "state_dict" not in checkpoint and _is_bare_state_dict(checkpoint):
        keys = ", ".join(repr(k) for k in list(checkpoint)[:3])
        raise CheckpointError(
            f"{name} holds a bare state_dict (module weights only: {keys}...), not a Trainer checkpoint, so "
            "ckpt_path= cannot resume from it and load_from_checkpoint cannot build a module from it. Load the "
            "weights with module.load_state_dict(torch.load(path, weights_only=True)), or write a full checkpoint "
            "with trainer.save_checkpoint(path).")
    return checkpoint


def refused_object(exc: BaseException) -> bool:
    """Whether the weights-only unpickler's error ``exc`` refused an object that is there (a ``GLOBAL`` it does
    not admit), rather than failing on garbled bytes: only the first is "unsafe content", the second is damage."""
    return "GLOBAL" in str(exc) or "allowlisted" in str(exc)


def verify_archive(source: str | os.PathLike | IO[bytes], name: str | None = None) -> bool:
    """Compare every record of the ``torch.save`` zip archive ``source`` (a path, or a seekable binary file, left
    at the position it had) with the CRC-32 the archive stores for it; read only, nothing is unpickled.

    Returns whether the archive was checked: ``False`` for a file without checksums (torch's legacy pre-1.6 format,
    an archive written after ``torch.serialization.set_crc32_options(False)``, whose records all say 0), or a file
    object that cannot seek. Reads the whole file once (see ``docs/resume.rst`` for the cost).

    :param name: how the file is named in the error (default: its quoted path).
    :raises CheckpointError: a record's bytes do not match their checksum, or the archive's directory or a record's
        header is damaged; the message names the file and the record.
    """
    if not isinstance(source, (str, os.PathLike)) and not (callable(getattr(source, "seekable", None))
                                                            and source.seekable()):
        return False
    name = name or repr(str(getattr(source, "name", source)))
    start = None if isinstance(source, (str, os.PathLike)) else source.tell()
    try:
        return _verify_records(source, name)
    finally:
        if start is not None and not isinstance(source, (str, os.PathLike)):
            source.seek(start)


def _verify_records(source: str | os.PathLike | IO[bytes], name: str) -> bool:
    try:
        archive = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, ValueError, struct.error, EOFError, OSError) as exc:
        if not _starts_with(source, b"PK"):
            return False  # not a zip archive (the legacy format); check_file refused what is neither
        raise CheckpointError(f"checkpoint {name} is damaged: the directory of its zip archive cannot be read "
                              f"({type(exc).__name__}: {exc}).") from exc
    with archive:
        records = archive.infolist()
        if not any(info.CRC for info in records) and any(info.file_size for info in records):
            return False  # written without checksums
        if isinstance(source, (str, os.PathLike)) and all(i.compress_type == zipfile.ZIP_STORED for i in records):
            found = _stored_records_damage(Path(source), records)  # torch's own: read in parallel
        else:
            found = _records_damage(archive, records)
    if found is not None:
        record, reason, cause = found
        hint = _alternatives(Path(source)) if isinstance(source, (str, os.PathLike)) else ""
        raise CheckpointError(f"checkpoint {name} is damaged: its record {record!r} {reason}; loading it would give "
                              f"other values than were saved. {hint}".rstrip()) from cause
    return True


def _starts_with(source: str | os.PathLike | IO[bytes], head: bytes) -> bool:
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as handle:
            return handle.read(len(head)) == head
    where = source.tell()
    try:
        source.seek(0)
        return source.read(len(head)) == head
    finally:
        source.seek(where)


#: archives larger than this (bytes) have their records' checksums computed on several threads
PARALLEL_CHECK_BYTES = 64 * 2**20
_MISMATCH = "does not match the checksum saved with it (its bytes changed after saving)"
_Damage = tuple[str, str, BaseException | None]  # (record, what is wrong with it, the error that said so)


def _records_damage(archive: zipfile.ZipFile, records: list[zipfile.ZipInfo]) -> _Damage | None:
    """The first damaged record of ``archive``, read through :mod:`zipfile` (which compares each CRC-32)."""
    for info in records:
        try:
            with archive.open(info) as handle:
                while handle.read(1 << 24):
                    pass
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError) as exc:
            reason = _MISMATCH if "CRC" in str(exc) else f"cannot be read ({type(exc).__name__}: {exc})"
            return info.filename, reason, exc
    return None


def _stored_records_damage(path: Path, records: list[zipfile.ZipInfo]) -> _Damage | None:
    """The first damaged record of the uncompressed archive at ``path``, its records' CRC-32 computed on several
    threads for a large archive (``zlib.crc32`` releases the GIL; one thread reads about 1 GB/s)."""
    workers = min(8, os.cpu_count() or 1, len(records))
    if workers < 2 or sum(info.file_size for info in records) <= PARALLEL_CHECK_BYTES:
        return _stored_group_damage(path, records)
    from concurrent.futures import ThreadPoolExecutor

    groups = [records[i::workers] for i in range(workers)]  # one open file per thread
    with ThreadPoolExecutor(workers, thread_name_prefix="accelkit-crc") as pool:
        found = list(pool.map(lambda group: _stored_group_damage(path, group), groups))
    return next((damage for damage in found if damage is not None), None)


def _stored_group_damage(path: Path, records: list[zipfile.ZipInfo]) -> _Damage | None:
    """The first damaged one of the stored (uncompressed) ``records`` of the archive at ``path``, or ``None``."""
    record = records[0].filename if records else "?"
    try:
        with open(path, "rb") as handle:
            for info in records:
                record = info.filename
                handle.seek(info.header_offset)
                header = handle.read(30)
                if len(header) < 30 or header[:4] != b"PK\x03\x04":
                    return record, "has a damaged header (its offset in the archive's directory is wrong)", None
                name_length, extra_length = struct.unpack("<HH", header[26:30])
                if handle.read(name_length) != info.orig_filename.encode("utf-8", "replace"):
                    return record, "has a damaged header (its name differs from the archive's directory)", None
                handle.seek(extra_length, os.SEEK_CUR)
                value, left = 0, info.compress_size
                while left > 0:
                    piece = handle.read(min(left, 1 << 24))
                    if not piece:
                        return record, f"is cut short ({left} of its {info.compress_size} bytes missing)", None
                    value, left = zlib.crc32(piece, value), left - len(piece)
                if value != info.CRC:
                    return record, _MISMATCH, None
    except OSError as exc:
        return record, f"cannot be read ({exc})", exc
    return None


def unsafe_checkpoint_error(name: str, reason: str | BaseException) -> UnsafeCheckpointError:
    """The one refusal of a checkpoint holding objects safe loading does not admit (a file, or a part of a sharded
    checkpoint): ``name`` is the file's quoted path, ``reason`` what was refused (``GLOBAL posix.system``) or the
    weights-only unpickler's error, whose telling line is quoted."""
    if isinstance(reason, BaseException):
        reason = _first_reason(reason)
    return UnsafeCheckpointError(
        f"checkpoint {name} holds Python objects that safe loading refuses ({reason}). Checkpoints "
        "accelkit writes hold plain data only (tensors, numbers, strings, containers); this one was written "
        "with something else (a callback's or the Module's on_save_checkpoint, or hyperparameters of another "
        "type): store plain values there and save again.")


def check_file(path: str | os.PathLike) -> None:
    """Refuse, with a sentence, what cannot be a ``torch.save`` file: a missing path, a folder, an empty file, a
    file that is not a PyTorch archive, a truncated archive. Reads a few bytes; unpickles nothing."""
    path = Path(path)
    if path.is_dir():
        found = sorted(p.name for p in path.glob("*.ckpt"))[:5]
        inside = f" It holds {', '.join(found)}." if found else " It holds no .ckpt file."
        raise IsADirectoryError(f"checkpoint {str(path)!r} is a folder, not a checkpoint file; give the path of a "
                                f".ckpt file in it.{inside}")
    if not path.is_file():
        if os.path.exists(path):  # a device, a FIFO, a socket: opening it could block or never end
            raise CheckpointError(f"checkpoint {str(path)!r} is {_file_kind(path)}, not a regular file; give the "
                                  "path of a checkpoint file written by trainer.save_checkpoint or ModelCheckpoint.")
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
    size = path.stat().st_size
    if size == 0:
        raise CheckpointError(f"checkpoint {str(path)!r} is empty (0 bytes): its write never finished. "
                              f"{_alternatives(path)}")
    with open(path, "rb") as handle:
        head = handle.read(4)
    if head.startswith(b"PK"):
        if not zipfile.is_zipfile(path):
            raise CheckpointError(
                f"checkpoint {str(path)!r} is truncated or damaged ({size} bytes; the end of its zip archive is "
                f"missing, as when a copy or a write is cut off). {_alternatives(path)}")
        return
    if head[:1] == b"\x80":  # torch's legacy (pre-1.6) format is a sequence of pickles
        return
    raise CheckpointError(
        f"{str(path)!r} ({size} bytes, starting with {head!r}) is not a PyTorch checkpoint: torch.save writes a zip "
        f"archive. Check the path. {_alternatives(path)}")


def _file_kind(path: Path) -> str:
    mode = path.stat().st_mode
    for test, kind in ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "a special file"


def crc32_of(file: str | os.PathLike) -> int:
    """The CRC-32 of ``file``'s bytes, read in 16 MiB pieces."""
    value = 0
    with open(file, "rb") as handle:
        while piece := handle.read(1 << 24):
            value = zlib.crc32(piece, value)
    return value


def _first_reason(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    useful = [line for mark in ("GLOBAL", "Unsupported", "Unpickler error") for line in lines if mark in line]
    text = useful[0] if useful else (lines[-1] if lines else type(exc).__name__)
    return text.replace("WeightsUnpickler error: ", "")


def _is_bare_state_dict(obj: Mapping[object, object]) -> bool:
    return bool(obj) and all(isinstance(k, str) for k in obj) and all(
        isinstance(v, torch.Tensor) for v in obj.values())


def _size(path: Path) -> str:
    try:
        return f"{path.stat().st_size} bytes"
    except OSError:
        return "size unknown"


def _alternatives(path: Path) -> str:
    """What would work instead: the other checkpoints in the same folder, newest first."""
    try:
        others = sorted((p for p in path.parent.glob("*.ckpt") if p.name != path.name and p.is_file()
                         and p.stat().st_size > 0), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        others = []
    if not others:
        return "Use another checkpoint, or start without ckpt_path."
    return "Other checkpoints in that folder, newest first: " + ", ".join(p.name for p in others[:3]) + "."


def to_cpu(obj: _T) -> _T:
    """A copy of ``obj`` with every tensor detached and on the CPU (for saving from any device)."""
    return apply_to_tensors(obj, lambda t: t.detach().cpu())
