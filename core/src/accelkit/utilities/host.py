"""Figures of the host machine (its CPU and memory) that loggers may record."""

from __future__ import annotations

#: the names Lightning gives the host's figures
HOST_STAT_NAMES = ("cpu_vm_percent", "cpu_percent", "cpu_swap_percent")


def host_stats_available() -> bool:
    """Whether :func:`host_stats` can read the figures (``psutil`` imports)."""
    try:
        import psutil  # type: ignore[import-untyped]  # noqa: F401
    except ModuleNotFoundError:
        return False
    return True


def host_stats() -> dict[str, float]:
    """The host's virtual-memory, CPU and swap use in percent (``cpu_vm_percent``, ``cpu_percent``,
    ``cpu_swap_percent``, Lightning's names), read with ``psutil``. The CPU figure is the use since the previous
    call (0.0 at the first). Raises ``ModuleNotFoundError`` naming ``psutil`` when it is not installed."""
    try:
        import psutil
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError("the host's CPU and memory figures (cpu_vm_percent, cpu_percent, cpu_swap_percent) "
                                  "are read with psutil, which is not installed: pip install psutil") from error
    return {"cpu_vm_percent": psutil.virtual_memory().percent, "cpu_percent": psutil.cpu_percent(),
            "cpu_swap_percent": psutil.swap_memory().percent}
