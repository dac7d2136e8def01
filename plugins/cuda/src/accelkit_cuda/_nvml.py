"""Read GPU facts through NVML (the driver's management library) without initialising CUDA.

The parent process resolves a run before any worker exists. Initialising CUDA there would stop a forked
child from using the GPU and would create a context on the first GPU for nothing, so everything here talks
to ``libnvidia-ml.so.1`` through :mod:`ctypes` and never to the CUDA runtime. Every function answers
``None`` when it cannot tell (no driver, no NVML, an unusual ``CUDA_VISIBLE_DEVICES``); callers then leave
the check to the worker, which may initialise CUDA.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

_LIBRARY = "libnvidia-ml.so.1"


@dataclass(frozen=True)
class GPUInfo:
    """What NVML says about one visible GPU.

    :param index: the index CUDA gives it in this process (after ``CUDA_VISIBLE_DEVICES``).
    :param name: the product name (``"NVIDIA H100 80GB HBM3"``).
    :param capability: the compute capability ``(major, minor)``.
    """

    index: int
    name: str
    capability: tuple[int, int]

    @property
    def native_bf16(self) -> bool:
        """Whether the GPU computes in bfloat16 natively (compute capability 8.0, Ampere, or newer)."""
        return self.capability >= (8, 0)


def visible_device_spec() -> list[int] | list[str] | None:
    """``CUDA_VISIBLE_DEVICES`` as a list of physical indices or UUID strings; ``None`` when it is unset.

    Parsed as CUDA does: entries are read up to the first invalid (negative or empty) one, and a repeated
    entry hides every GPU.
    """
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    entries = [e.strip() for e in raw.split(",")]
    if entries and (entries[0].startswith("GPU-") or entries[0].startswith("MIG-")):
        uuids: list[str] = []
        for entry in entries:
            if not entry.startswith(entries[0][:4]):
                break
            if entry in uuids:
                return []
            uuids.append(entry)
        return uuids
    indices: list[int] = []
    for entry in entries:
        digits = ""
        for char in entry:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        value = int(digits)
        if value in indices:
            return []
        indices.append(value)
    return indices


def _load() -> ctypes.CDLL | None:
    try:
        library = ctypes.CDLL(_LIBRARY)
    except OSError:
        return None
    try:
        if library.nvmlInit_v2() != 0:
            return None
    except AttributeError:
        return None
    return library


def _info(library: ctypes.CDLL, handle: ctypes.c_void_p, index: int) -> GPUInfo | None:
    major, minor = ctypes.c_int(), ctypes.c_int()
    if library.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor)) != 0:
        return None
    name = ctypes.create_string_buffer(96)
    if library.nvmlDeviceGetName(handle, name, ctypes.c_uint(96)) != 0:
        name.value = b"unknown GPU"
    return GPUInfo(index=index, name=name.value.decode(errors="replace"), capability=(major.value, minor.value))


def visible_gpus() -> list[GPUInfo] | None:
    """The GPUs this process may use, in CUDA's numbering, or ``None`` when NVML cannot say for sure.

    CUDA numbers GPUs fastest-first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, while NVML uses the PCI order.
    When the orders could differ and the GPUs are not all the same model, the mapping is unknown and the
    answer is ``None``.
    """
    library = _load()
    if library is None:
        return None
    try:
        count = ctypes.c_uint()
        if library.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return None
        spec = visible_device_spec()
        handles: list[ctypes.c_void_p] = []
        if spec is None or (spec and isinstance(spec[0], int)):
            physical = list(range(count.value)) if spec is None else [i for i in spec if isinstance(i, int)]
            if any(i >= count.value for i in physical):
                physical = physical[: next(n for n, i in enumerate(physical) if i >= count.value)]
            for i in physical:
                handle = ctypes.c_void_p()
                if library.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(i), ctypes.byref(handle)) != 0:
                    return None
                handles.append(handle)
        else:
            for uuid in spec:
                if str(uuid).startswith("MIG-"):
                    return None  # MIG slices: leave the question to the worker
                handle = ctypes.c_void_p()
                if library.nvmlDeviceGetHandleByUUID(str(uuid).encode(), ctypes.byref(handle)) != 0:
                    return None  # an abbreviated UUID; CUDA accepts prefixes, NVML does not
                handles.append(handle)
        infos = []
        for index, handle in enumerate(handles):
            info = _info(library, handle, index)
            if info is None:
                return None
            infos.append(info)
        ordered = os.environ.get("CUDA_DEVICE_ORDER", "").strip().upper() == "PCI_BUS_ID"
        if not ordered and len({(i.name, i.capability) for i in infos}) > 1:
            return None
        return infos
    finally:
        try:
            library.nvmlShutdown()
        except Exception:  # pragma: no cover - shutting down a library we loaded must never fail a run
            pass
