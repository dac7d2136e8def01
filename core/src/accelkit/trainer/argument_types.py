"""The types of the Trainer's arguments, checked before anything reads them (issue 36, item 7).

Each documented ``Trainer`` argument whose type no later check looks at is checked here, when the Trainer is built:
a value of the wrong type (or out of range, for ``seed`` and ``num_nodes``) is a sentence naming the argument, the
value and what the argument accepts, and all of them are raised together as one
:class:`~accelkit.errors.ConfigurationError` before any value is used (so a tensor is never asked for its truth
value, nor a float turned into a path). What the arguments accept is Lightning 2.6's ``Trainer``'s; the
run-control numbers (``max_epochs``, ``limit_*_batches``, ``val_check_interval``...) are checked, type and value, by
``accelkit.trainer.arguments.check_run_arguments``, and ``plugins=`` by
``accelkit.trainer.arguments.plugin_arguments``.

Booleans are Python's ``bool``: ``1``, ``"yes"``, ``numpy.True_`` or ``torch.tensor(True)`` for a flag is refused
(with the fix, ``bool(value)``), not taken for true by its truth value; a NumPy integer is an integer wherever an
``int`` is accepted (it is a ``numbers.Integral``), a tensor never is.
"""

from __future__ import annotations

import datetime
import numbers
import os
from collections.abc import Callable, Mapping
from typing import Protocol, TypeGuard

from accelkit.errors import ConfigurationError


class MetricLogger(Protocol):
    """What ``logger=`` takes besides names and flags: an object with Lightning's ``log_metrics`` (accelkit's
    :class:`~accelkit.loggers.Logger`, or a logger written for Lightning)."""

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Record ``metrics`` at ``step``."""


#: flags that are ``True`` or ``False``
BOOL_FLAGS = ("inference_mode", "use_distributed_sampler", "detect_anomaly", "barebones", "sync_batchnorm")
#: flags that are ``True``, ``False`` or ``None`` (``None``: the default, as in Lightning)
OPTIONAL_FLAGS = ("enable_checkpointing", "enable_progress_bar", "enable_model_summary", "benchmark")
#: the seeds accepted: NumPy's (an unsigned 32-bit integer), as Lightning's ``seed_everything``
SEED_RANGE = range(0, 2**32)


def is_integer(value: object) -> TypeGuard[numbers.Integral]:
    """An ``int`` or a NumPy integer (a ``numbers.Integral``), not a ``bool``."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _shown(value: object) -> str:
    """``repr(value)``, cut at 80 characters, with its type when the repr does not say it (``numpy.bool``,
    ``torch.Tensor``: a NumPy boolean's repr reads much like Python's)."""
    text = repr(value)
    text = text if len(text) <= 80 else text[:77] + "..."
    if type(value) in (str, bool, int, float, type(None)):
        return text
    kind = type(value)
    module = kind.__module__.split(".")[0]
    return f"{text} ({kind.__name__ if module == 'builtins' else f'{module}.{kind.__name__}'})"


def _bool_hint(value: object) -> str:
    """The fix for a near-boolean: ``bool(value)`` for NumPy booleans and one-element tensors."""
    kind = type(value)
    if kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_"):
        return "; pass a Python bool: bool(value)"
    if kind.__module__.startswith("torch") and getattr(value, "numel", lambda: 0)() == 1:
        return "; pass a Python bool: bool(tensor.item())"
    return ""


def _is_accelerator(value: object) -> bool:
    from accelkit.accelerator import Accelerator

    return isinstance(value, (str, Accelerator)) or (isinstance(value, type) and issubclass(value, Accelerator))


def _is_strategy(value: object) -> bool:
    from accelkit.strategies.base import Strategy

    return isinstance(value, (str, Strategy))


def _is_devices(value: object) -> bool:
    if isinstance(value, (list, tuple)):
        return all(is_integer(item) for item in value)
    return is_integer(value) or isinstance(value, str)


def _is_precision(value: object) -> bool:
    from accelkit.precision import Precision

    return value is None or is_integer(value) or isinstance(value, (str, Precision))


def _is_logger_item(value: object) -> bool:
    return isinstance(value, str) or callable(getattr(value, "log_metrics", None))


def _is_logger(value: object) -> bool:
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_logger_item(item) for item in value)
    return _is_logger_item(value)


def _is_callback_item(value: object) -> bool:
    from accelkit.callbacks.base import Callback, lightning_callback_base

    return isinstance(value, (str, Callback)) or lightning_callback_base(value) is not None


def _is_callbacks(value: object) -> bool:
    if value is None:
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_callback_item(item) for item in value)
    return _is_callback_item(value)


def _is_profiler(value: object) -> bool:
    from accelkit.profilers import Profiler

    return value is None or isinstance(value, (str, Profiler))


def _is_path(value: object) -> bool:
    if value is None:
        return True
    if not isinstance(value, (str, os.PathLike)):
        return False
    path = os.fspath(value)
    return isinstance(path, str) and "\0" not in path


def _is_seed(value: object) -> bool:
    return value is None or (is_integer(value) and int(value) in SEED_RANGE)


def _is_num_nodes(value: object) -> bool:
    # the type only (compose checks the value with the other problems): None, the launcher's number of nodes (else
    # 1), or a Python int, as compose needs
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


def _is_deterministic(value: object) -> bool:
    return value is None or isinstance(value, bool) or (isinstance(value, str) and value == "warn")


def _is_max_time(value: object) -> bool:
    """The type only: ``parse_max_time`` checks the string's form, the dict's keys and numbers, and the length."""
    return value is None or isinstance(value, (str, datetime.timedelta, dict))


def _is_compile_step(value: object) -> bool:
    return value is None or isinstance(value, (bool, dict))


#: argument -> (the check of its type, what it accepts, in words)
CHECKS: dict[str, tuple[Callable[[object], bool], str]] = {
    "accelerator": (_is_accelerator, "a name such as 'cpu' or 'auto', or an accelkit.Accelerator"),
    "strategy": (_is_strategy, "a name such as 'ddp_spawn' or 'auto', or an accelkit.Strategy instance"),
    "devices": (_is_devices, "an int (how many; -1 for all), a list of int device indices, or a string such as "
                             "'auto', '2' or '0,1'"),
    "num_nodes": (_is_num_nodes, "a Python int (>= 1), or None for the launcher's number of nodes"),
    "precision": (_is_precision, "a precision name such as '32-true' or 'bf16-mixed', an int alias (64, 32, 16), "
                                 "an accelkit.Precision instance, or None"),
    "logger": (_is_logger, "True, False, None, a logger (an object with log_metrics), a registered logger name, "
                           "or a list of loggers and names"),
    "callbacks": (_is_callbacks, "an accelkit.Callback (or, with lightning installed, a lightning.pytorch "
                                 "Callback), a registered callback name, a list of them, or None"),
    "profiler": (_is_profiler, "'simple', 'pytorch', a registered profiler name, an accelkit.profilers.Profiler, "
                               "or None"),
    "default_root_dir": (_is_path, "a folder path: a str or os.PathLike (without NUL characters), or None "
                                   "(the working directory)"),
    "seed": (_is_seed, f"an int from {SEED_RANGE.start} to {SEED_RANGE.stop - 1}, or None (ACCELKIT_SEED, else 0)"),
    "deterministic": (_is_deterministic, "True, False, 'warn' or None"),
    "max_time": (_is_max_time, "'DD:HH:MM:SS', a datetime.timedelta, a dict of timedelta's keyword arguments "
                               "with numbers (e.g. {'hours': 1}), or None"),
    "compile_step": (_is_compile_step, "True, False, or a dict of torch.compile's keyword arguments"),
    **{name: (lambda value: isinstance(value, bool), "True or False (a bool)") for name in BOOL_FLAGS},
    **{name: (lambda value: value is None or isinstance(value, bool), "True, False or None")
       for name in OPTIONAL_FLAGS},
}


def check_argument_types(arguments: Mapping[str, object]) -> list[str]:
    """Every argument of ``arguments`` (name -> value, as given to the Trainer) whose type :data:`CHECKS` refuses,
    each a sentence naming the argument, its value and what it accepts; arguments :data:`CHECKS` does not list are
    left to their own checks."""
    problems = []
    for name, value in arguments.items():
        check = CHECKS.get(name)
        if check is None or check[0](value):
            continue
        hint = _bool_hint(value) if name in (*BOOL_FLAGS, *OPTIONAL_FLAGS, "deterministic") else ""
        problems.append(f"{name}={_shown(value)} is not accepted: {name} takes {check[1]}{hint}.")
    return problems


def refuse_wrong_types(arguments: Mapping[str, object]) -> None:
    """Raise one :class:`~accelkit.errors.ConfigurationError` listing every problem
    :func:`check_argument_types` finds in ``arguments``; nothing when there is none."""
    problems = check_argument_types(arguments)
    if problems:
        raise ConfigurationError(problems)
