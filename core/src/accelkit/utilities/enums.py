"""``LightningEnum``: an enum whose members are strings, equal to their value in any letter case (Lightning's
``lightning.pytorch.utilities.enums.LightningEnum``), the base of ``trainer.state``'s
:class:`~accelkit.loops.state.TrainerFn`, :class:`~accelkit.loops.state.RunningStage` and
:class:`~accelkit.loops.state.TrainerStatus`."""

from __future__ import annotations

import warnings
from enum import Enum
from typing import Literal

_Source = Literal["key", "value", "any"]


class LightningEnum(str, Enum):  # noqa: UP042 - not StrEnum: its str() is the value, Lightning's the member
    """A ``str`` enum whose members compare equal to their value whatever its letter case (``TrainerFn.FITTING ==
    "fit"`` and ``== "FIT"``) and hash as their lower-case value, so that a member and its value find each other in a
    set or as a dict key. ``str()``, ``repr()`` and formatting are the enum's (``"TrainerFn.FITTING"``), as in
    Lightning; ``.value`` is the plain string."""

    @classmethod
    def from_str(cls, value: str, source: _Source = "key") -> LightningEnum:
        """The member named ``value`` (``source="key"``, any letter case), whose value is ``value``
        (``"value"``, exactly), or either (``"any"``, names first).

        :raises ValueError: nothing matches; the message lists what would."""
        if source in ("key", "any"):
            for name, member in cls.__members__.items():
                if name.lower() == value.lower():
                    return member
        if source in ("value", "any"):
            for member in cls.__members__.values():
                if member.value == value:
                    return member
        raise ValueError(f"Invalid match: expected one of {cls._matches(source)}, but got {value}.")

    @classmethod
    def try_from_str(cls, value: str, source: _Source = "key") -> LightningEnum | None:
        """:meth:`from_str`, or ``None`` with a warning naming what would match."""
        try:
            return cls.from_str(value, source)
        except ValueError:
            warnings.warn(f"Invalid string: expected one of {cls._matches(source)}, but got {value}.",
                          UserWarning, stacklevel=2)
            return None

    @classmethod
    def _matches(cls, source: _Source) -> list[str]:
        names = list(cls.__members__)
        values = [member.value for member in cls.__members__.values()]
        return names if source == "key" else values if source == "value" else names + values

    def __eq__(self, other: object) -> bool:
        plain = other.value if isinstance(other, Enum) else other
        return bool(self.value.lower() == str(plain).lower())

    def __hash__(self) -> int:
        return hash(self.value.lower())
