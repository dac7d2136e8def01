"""Reading the end-of-fit summary a run prints (``accelkit.trainer.summary``) from its captured output."""

from __future__ import annotations

import re

_LAST = re.compile(r"^accelkit: checkpoints in .* \((?:last|best) (?P<last>.+?)(?:, best .*)?\)$", re.MULTILINE)


def last_checkpoint(stdout: str) -> str:
    """The last checkpoint the run reports having written (the summary's ``(last <path>`` ..., or ``(best <path>)``
    of a callback keeping no ``last.ckpt``, such as the default one, whose best is its latest), asserting that the
    output holds exactly one summary."""
    found = _LAST.findall(stdout)
    assert len(found) == 1, stdout
    return found[0]
