"""``--help`` as plain text. The docstrings the help is made of are reStructuredText, with roles (a class named
through its ``:class:`` role) and inline literals (a value between double back-quotes), which a terminal should
show as the bare name and the bare value.

:class:`PlainHelpFormatter` is the help formatter of every :class:`~accelkit.cli.config.ArgumentParser`; it
converts the descriptions, the group titles and each option's help with :func:`plain_text` before wrapping them.
"""

from __future__ import annotations

import re

from jsonargparse import DefaultHelpFormatter

# :role:`text <target>` -> text; :role:`~a.b.C` -> C; :role:`a.b.C` -> a.b.C
_ROLE = re.compile(r":[\w:+-]+:`(~?)([^`<]*?)\s*(?:<[^`>]*>)?`")
_LITERAL = re.compile(r"``(.+?)``")
# a group title jsonargparse makes from a tuple of classes: "(<class 'a.B'>, <class 'c.D'>)"
_CLASS_TUPLE = re.compile(r"^\((?:<class '[\w.]+'>,?\s*)+\)$")
_CLASS_NAME = re.compile(r"<class '(?:[\w]+\.)*(\w+)'>")


def _role(match: re.Match) -> str:
    short, text = match.group(1), match.group(2)
    return text.rsplit(".", 1)[-1] if short else text


def plain_text(text: str) -> str:
    """``text`` (reStructuredText of a docstring) as a person reads it in a terminal: a role becomes its target's
    name (the last part of it after a tilde, so a ``:class:`` role naming ``~accelkit.Module`` reads ``Module``),
    an inline literal loses its double back-quotes, and a tuple of classes (a group title jsonargparse makes)
    becomes ``A or B``."""
    if _CLASS_TUPLE.match(text.strip()):
        return " or ".join(_CLASS_NAME.findall(text))
    return _LITERAL.sub(r"\1", _ROLE.sub(_role, text))


class PlainHelpFormatter(DefaultHelpFormatter):
    """jsonargparse's help formatter with every text passed through :func:`plain_text` before it is wrapped."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return super()._split_lines(plain_text(text), width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        # paragraphs are wrapped one by one; one whose lines are all indented (examples) is kept as written
        paragraphs = plain_text(text).strip("\n").split("\n\n")
        return "\n\n".join(
            "\n".join(indent + line for line in paragraph.splitlines())
            if all(line.startswith("  ") for line in paragraph.splitlines())
            else super(PlainHelpFormatter, self)._fill_text(paragraph, width, indent)
            for paragraph in paragraphs)

    def start_section(self, heading: str | None) -> None:
        """Start a group of options under its title, in plain text."""
        super().start_section(plain_text(heading) if isinstance(heading, str) else heading)
