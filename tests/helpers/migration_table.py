"""The migration guide's tables as data: Lightning's public names and, for each, its status in accelkit.

Two files hold the data (``tests/data``):

* ``lightning_names.json``: Lightning's own public names, dumped from an installed Lightning by
  ``tests/data/dump_lightning_names.py`` (the version is recorded in the file), so that the tests need no Lightning;
* ``migration_rows.toml``: one row per name, ``[<section>.<name>]`` or ``<name> = {...}`` under ``[<section>]``:

  - ``status``: ``supported`` (ours behaves as Lightning's), ``differs`` (ours is there, with the difference given
    in ``notes``), ``refused`` (using it raises ``raises`` with a message containing ``sentence``), ``not yet``
    (ours has no such name; ``notes`` say what to use instead), or ``accelkit`` (a name Lightning does not have);
  - ``exercise`` (``supported``/``differs``/``accelkit``): how the test runs it, one of ``hook`` (the Trainer calls it
    in the shared run and the call is recorded), ``in-run`` (read or called inside the shared run, the value checked
    there), ``run`` (its own exercise in ``helpers.migration_exercises``) and ``annotation`` (a type name: it resolves
    in an annotation);
  - ``path``: where ours is when it is not at the mirror path (e.g. a plugin's package);
  - ``missing_parameters``: the keywords of Lightning's callable that ours does not name (checked against the
    signatures in ``lightning_names.json``; a ``**kwargs`` of ours does not count);
  - ``through_kwargs``: ours takes Lightning's keywords through ``**kwargs`` (the row's exercise passes each).

``python tests/helpers/migration_table.py`` rewrites the tables and the counts in
``docs/migrating-from-lightning.rst`` from the data; ``tests/test_migration_table.py`` fails while they differ.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAMES_FILE = ROOT / "tests" / "data" / "lightning_names.json"
ROWS_FILE = ROOT / "tests" / "data" / "migration_rows.toml"
MODULE_ROWS_FILE = ROOT / "core" / "src" / "accelkit" / "lightning_modules.toml"  # shipped: the import errors' text
GUIDE = ROOT / "docs" / "migrating-from-lightning.rst"

STATUSES = ("supported", "differs", "refused", "not yet", "accelkit")
EXERCISES = ("hook", "in-run", "run", "annotation")


@dataclass(frozen=True)
class Section:
    """One surface of Lightning's API: ``key`` in the data, the table's ``title`` in the guide, and ``home``: the
    accelkit module whose attributes mirror Lightning's module (``None`` for the class and argument sections)."""

    key: str
    title: str
    home: str | None = None


SECTIONS = (
    Section("LightningModule", "LightningModule"),
    Section("Callback", "Callback"),
    Section("Trainer arguments", "Trainer arguments"),
    Section("Trainer attributes", "Trainer attributes"),
    Section("callbacks", "lightning.pytorch.callbacks", "accelkit.callbacks"),
    Section("strategies", "lightning.pytorch.strategies", "accelkit.strategies"),
    Section("loggers", "lightning.pytorch.loggers", "accelkit.loggers"),
    Section("tuner", "lightning.pytorch.tuner", "accelkit.tuner"),
    Section("utilities", "lightning.pytorch.utilities", "accelkit.utilities"),
    Section("utilities.types", "lightning.pytorch.utilities.types", "accelkit.utilities.types"),
)
SECTION_BY_KEY = {section.key: section for section in SECTIONS}


@dataclass
class Row:
    """One row of a table (see the module docstring for the fields)."""

    section: str
    name: str
    status: str
    exercise: str | None = None
    notes: str = ""
    path: str | None = None
    raises: str | None = None
    sentence: str | None = None
    missing_parameters: list[str] = field(default_factory=list)
    through_kwargs: bool = False
    counterpart: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.section, self.name)

    @property
    def exists(self) -> bool:
        """Whether the status says accelkit has the name."""
        return self.status in ("supported", "differs", "accelkit")

    @property
    def mirror_path(self) -> str | None:
        """``accelkit.<module>.<name>`` for the module sections (or ``path`` where the row gives one)."""
        home = SECTION_BY_KEY[self.section].home
        return self.path or (f"{home}.{self.name}" if home else None)


def lightning_names() -> dict:
    """The content of ``lightning_names.json``."""
    return json.loads(NAMES_FILE.read_text())


def tabled_names(section: str, names: dict | None = None) -> list[str]:
    """Lightning's names of ``section`` that need a row (re-exports of ``typing``/``torch`` names left out)."""
    names = names or lightning_names()
    skipped = set(names.get("reexports", {}).get(section, []))
    return [n for n in names["sections"][section] if n not in skipped]


def load_rows() -> dict[tuple[str, str], Row]:
    """Every row of ``migration_rows.toml``, keyed by ``(section, name)``."""
    data = tomllib.loads(ROWS_FILE.read_text())
    rows: dict[tuple[str, str], Row] = {}
    for section, entries in data.items():
        if section not in SECTION_BY_KEY:
            raise ValueError(f"{ROWS_FILE.name}: unknown section {section!r}; sections: {sorted(SECTION_BY_KEY)}")
        for name, entry in entries.items():
            unknown = set(entry) - set(Row.__dataclass_fields__)
            if unknown:
                raise ValueError(f"{ROWS_FILE.name}: {section}.{name} has unknown fields {sorted(unknown)}")
            rows[(section, name)] = Row(section=section, name=name, **entry)
    return rows


def ordered_rows(section: str, rows: dict[tuple[str, str], Row], names: dict | None = None) -> list[Row]:
    """The rows of ``section`` in the guide's order: Lightning's names as listed in the data, then accelkit's own."""
    lightning = tabled_names(section, names)
    own = sorted(name for (sec, name) in rows if sec == section and name not in lightning)
    return [rows[(section, name)] for name in [*lightning, *own] if (section, name) in rows]


def cell_notes(row: Row) -> str:
    """The Notes cell of a row: the refusal's sentence, where ours lives, the keywords ours lacks, the notes."""
    parts = []
    if row.status == "refused":
        parts.append(f'``{row.raises}``: "{row.sentence}"')
    if row.path:
        parts.append(f"Import it from ``{row.path.rsplit('.', 1)[0]}``.")
    if row.missing_parameters:
        listed = ", ".join(f"``{p}``" for p in row.missing_parameters)
        parts.append(f"Lightning's argument{'s' if len(row.missing_parameters) > 1 else ''} {listed} "
                     f"{'are' if len(row.missing_parameters) > 1 else 'is'} not taken.")
    if row.notes:
        parts.append(row.notes)
    return " ".join(parts)


def render_table(section: Section, rows: dict[tuple[str, str], Row], names: dict | None = None) -> list[str]:
    """The ``list-table`` block of one section, as lines."""
    lines = [f".. list-table:: {section.title}", "   :header-rows: 1", "   :widths: 30 12 58", "",
             "   * - Name", "     - Status", "     - Notes"]
    for row in ordered_rows(section.key, rows, names):
        notes = cell_notes(row)
        lines += [f"   * - ``{row.name}``", f"     - {row.status}", f"     - {notes}" if notes else "     -"]
    return lines


def counts(rows: dict[tuple[str, str], Row], names: dict | None = None) -> dict[str, dict[str, int]]:
    """Per section (and ``"total"``): how many of Lightning's names are supported (``differs`` included),
    differ, are refused and are not there yet, and how many accelkit-only rows there are."""
    names = names or lightning_names()
    result: dict[str, dict[str, int]] = {}
    total = dict.fromkeys(("lightning", "supported", "differs", "refused", "not yet", "accelkit"), 0)
    for section in SECTIONS:
        lightning = set(tabled_names(section.key, names))
        found = dict.fromkeys(total, 0)
        for row in ordered_rows(section.key, rows, names):
            if row.name not in lightning:
                found["accelkit"] += 1
                continue
            found["lightning"] += 1
            found["supported" if row.status in ("supported", "differs") else row.status] += 1
            found["differs"] += row.status == "differs"
        result[section.key] = found
        total = {k: total[k] + found[k] for k in total}
    result["total"] = total
    return result


def render_counts(rows: dict[tuple[str, str], Row], names: dict | None = None) -> list[str]:
    """The summary paragraph and table of the counts, as lines."""
    names = names or lightning_names()
    found = counts(rows, names)
    total = found["total"]
    lines = [f"Lightning {names['lightning_version']} has {total['lightning']} public names in the surfaces below. "
             f"Of these, **{total['supported']} are supported** ({total['differs']} of them with a difference the "
             f"notes give), **{total['refused']} are refused** with an error that says why, and "
             f"**{total['not yet']} are not there yet**.", "",
             ".. list-table:: Counts", "   :header-rows: 1", "   :widths: 40 12 12 12 12 12", "",
             "   * - Surface", "     - Lightning names", "     - supported", "     - of these, differ",
             "     - refused", "     - not yet"]
    for section in SECTIONS:
        row = found[section.key]
        lines += [f"   * - {section.title}", *(f"     - {row[k]}" for k in
                                                   ("lightning", "supported", "differs", "refused", "not yet"))]
    return lines


def load_module_rows() -> dict[str, Row]:
    """The rows of ``lightning_modules.toml`` (in the accelkit package, where ``accelkit.compat`` words the import
    errors from them): Lightning's module paths (relative to ``lightning.pytorch``) that accelkit has no module for,
    each covering the paths below it too."""
    data = tomllib.loads(MODULE_ROWS_FILE.read_text())
    rows = {}
    for path, entry in data.items():
        unknown = set(entry) - {"status", "notes", "counterpart"}
        if unknown or entry.get("status") != "not yet" or not entry.get("notes"):
            raise ValueError(f"{MODULE_ROWS_FILE.name}: [{path}] needs status = \"not yet\" and notes, may have a "
                             f"counterpart, and nothing else (found {sorted(entry)})")
        rows[path] = Row(section="modules", name=path, **entry)
    return rows


def covering_row(path: str, rows: dict[str, Row]) -> Row | None:
    """The row of ``path`` or of the nearest module above it, or ``None``."""
    while path:
        if path in rows:
            return rows[path]
        path = path.rpartition(".")[0]
    return None


def _plugin_paths() -> str:
    """The module paths of ``accelkit.compat.LIGHTNING_PLUGIN_PATHS`` and their distributions, as text."""
    from accelkit.compat import LIGHTNING_PLUGIN_PATHS, distribution_of

    return ", ".join(f"``{path[len('accelkit.'):]}`` (``{distribution_of(package)}``)"
                     for path, package in LIGHTNING_PLUGIN_PATHS.items())


def render_module_table(rows: dict[str, Row], names: dict) -> list[str]:
    """The ``list-table`` block of Lightning's module paths that accelkit lacks, as lines (with a count)."""
    modules = names["modules"]
    lacking = [path for path in modules if covering_row(path, rows) is not None]
    lines = [f"Of Lightning {names['lightning_version']}'s {len(modules)} public module paths, "
             f"**{len(modules) - len(lacking)} import** from accelkit with ``accelkit`` for ``lightning.pytorch``; "
             f"these {len(lacking)} do not, and importing one raises an ``ImportError`` that says so with the row's "
             "counterpart and text and names this page (a row covers the paths below it). Of those that import, "
             f"{_plugin_paths()} are a plugin's package once its distribution is installed, and raise an "
             "``ImportError`` naming the distribution to install where it is not:", "",
             ".. list-table:: Lightning module paths accelkit lacks", "   :header-rows: 1", "   :widths: 35 20 45", "",
             "   * - Module path", "     - Counterpart", "     - Use instead"]
    for row in rows.values():
        counterpart = f"``{row.counterpart}``" if row.counterpart else ""
        lines += [f"   * - ``lightning.pytorch.{row.name}``", f"     - {counterpart}", f"     - {row.notes}"]
    return lines


START, END = ".. migration-table: {} start", ".. migration-table: {} end"


def sync_guide(text: str, rows: dict[tuple[str, str], Row] | None = None, names: dict | None = None) -> str:
    """``text`` (the guide) with every generated block between its ``.. migration-table: X start``/``end``
    comments rewritten from the data."""
    rows = rows if rows is not None else load_rows()
    names = names or lightning_names()
    blocks = {"counts": render_counts(rows, names)}
    blocks.update({section.key: render_table(section, rows, names) for section in SECTIONS})
    blocks["modules"] = render_module_table(load_module_rows(), names)
    for key, lines in blocks.items():
        start, end = START.format(key), END.format(key)
        pattern = re.compile(rf"^{re.escape(start)}\n.*?^{re.escape(end)}$", re.S | re.M)
        if not pattern.search(text):
            raise ValueError(f"{GUIDE.name} lacks the comment lines {start!r} ... {end!r}")
        body = "\n".join([start, "", *lines, "", end])
        text = pattern.sub(lambda _, body=body: body, text, count=1)  # the text as it is: no escapes
    return text


def main() -> None:
    """Rewrite the guide's generated blocks; print the counts."""
    text = GUIDE.read_text()
    new = sync_guide(text)
    if new != text:
        GUIDE.write_text(new)
    print(json.dumps(counts(load_rows())["total"]))


if __name__ == "__main__":
    sys.exit(main())
