"""Exceptions raised by accelkit."""

from __future__ import annotations


class AccelkitError(Exception):
    """Base class of every accelkit error."""


class ConfigurationError(AccelkitError, ValueError):
    """The requested run cannot be composed. ``problems`` lists every problem found, not just the first."""

    def __init__(self, message_or_problems: str | list[str]) -> None:
        if isinstance(message_or_problems, str):
            self.problems = [message_or_problems]
        else:
            self.problems = list(message_or_problems)
        if len(self.problems) == 1:
            text = self.problems[0]
        else:
            text = f"{len(self.problems)} problems with this configuration:\n" + "\n".join(
                f"  - {p}" for p in self.problems
            )
        super().__init__(text)


class PluginError(AccelkitError):
    """A plugin could not be loaded, or two plugins disagree."""


class PluginConflictError(PluginError):
    """Two distributions claim the same name."""


class LoggerWriteError(AccelkitError, OSError):
    """A logger could not write its files (a full disk, a file size limit, a folder it may not write): the message
    names the logger, the path and why; ``errno`` is the operating system's code and ``path`` the file or folder.
    An ``OSError``, so ``except OSError`` still catches it."""

    def __init__(self, message: str, code: int | None, path: str | None) -> None:
        super().__init__(message)
        self.errno = code
        #: the file (or folder) the logger was writing
        self.path = path


class LoggedValueError(TypeError, ValueError):
    """``self.log`` was given a value it cannot record (a string, a dict, a list, ``None``...): a ``ValueError``, as
    Lightning raises there, and a ``TypeError``, as accelkit raised before, so either ``except`` catches it. A mistake
    in the user's code, not an :class:`AccelkitError`: the ``accelkit`` command shows its traceback."""


class WorkerError(AccelkitError, RuntimeError):
    """A worker process or replica failed; the message carries its traceback."""


class TrainingInterrupted(KeyboardInterrupt):
    """SIGINT/SIGTERM stopped the run. The message says where it stopped, where its state was saved and how to
    resume. A ``KeyboardInterrupt``, so scripts end as on Ctrl-C (non-zero) and ``except Exception`` does not
    swallow it."""
