"""The terminal report (format ``table``): sites by cost, then a summary, then per-file
errors; and the terminal form of ``compare``.

Pure functions of the report JSON (``Report.to_json()``) and a width; the CLI decides on
colour (tty, ``NO_COLOR``). The width is the terminal's (``COLUMNS``, else the terminal,
else ``WIDTH`` for a pipe or a CI log). Tables are laid out for it: a location or a number
is never cut. When a table does not fit, its least useful columns move onto the line below
their row (``Column.drop``), then a location too long for its column gets a line of its own;
free text (operators, fixes, notes) wraps.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from tb_syncfinder.aggregate import key_library
from tb_syncfinder.catalogue import (
    CHECKPOINT_WRITERS,
    EXPLICIT_SYNC,
    NPU_LEVEL_ADVICE,
    NPU_NOT_REPLAYED,
    kind_rank,
    library_package,
    npu_without_calls,
)
from tb_syncfinder.catalogue import kind as catalogue_kind
from tb_syncfinder.models import KERNEL_CELL, NO_SYNC_TO_REMOVE, Report
from tb_syncfinder.query import rank_sites, step_time_ruled_out

if TYPE_CHECKING:
    from tb_syncfinder.outputs import RenderOptions, ReportSet

WIDTH = 100  # when the output is not a terminal and COLUMNS is not set
MIN_WIDTH = 40

_RESET = "\x1b[0m"
_BOLD = "\x1b[1m"
_DIM = "\x1b[2m"
_RED = "\x1b[31m"
_YELLOW = "\x1b[33m"
_GREEN = "\x1b[32m"
_CYAN = "\x1b[36m"

# A site whose syncs cost this share of the step is shown red, above the second one yellow.
_SHARE_RED = 0.10
_SHARE_YELLOW = 0.02

_INDENT = "    "  # the lines under a table row (kind and operators, fix)


def terminal_width() -> int:
    """``COLUMNS`` if set, else the terminal's width, else ``WIDTH``; at least
    ``MIN_WIDTH``."""
    return max(MIN_WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns)


def _width(width: int | None) -> int:
    return terminal_width() if width is None else max(MIN_WIDTH, width)


class _Style:
    """How the text is written: with ANSI colours or not, and for the terminal or for
    Python (``Report.to_text``, a notebook), whose reader passes ``source_roots=`` and
    calls ``to_text()``, not ``--source-root`` and ``--top 0``."""

    def __init__(self, color: bool, python: bool = False) -> None:
        self.color = color
        self.python = python

    def term(self, flags: str) -> str:
        """A hint's command-line words, in Python's where the reader is in Python."""
        return _PYTHON_TERMS.get(flags, flags) if self.python else flags

    def __call__(self, text: str, *codes: str) -> str:
        codes = tuple(code for code in codes if code)
        if not self.color or not codes or not text:
            return text
        return "".join(codes) + text + _RESET


def plural(count: int, word: str, many: str | None = None) -> str:
    """``1 site``, ``2 sites``."""
    return f"{count} {word if count == 1 else (many or word + 's')}"


def format_us(us: float | None) -> str:
    """A duration in microseconds, in the unit that reads best, 3 significant digits:
    850 us, 1.23 ms, 159 ms, 2.10 s; under 10 us trailing zeros dropped (0.46 us, 2 us).
    The dashboard's ``formatUs`` to the digit (tests/format_cases.json holds both to it)."""
    if us is None or not math.isfinite(us):  # a report JSON may hold NaN (json reads it)
        return "-"
    magnitude = abs(us)
    if magnitude == 0:
        return "0 us"
    sign = "-" if us < 0 else ""
    if magnitude < 1:
        return f"{sign}{_trim(_fixed(magnitude, 2))} us"
    # The unit is chosen on the rounded value: 999.7 us reads 1.00 ms, not 1000 us.
    if magnitude < 999.5:
        return f"{sign}{_trim(_fixed(magnitude, 1 if magnitude < 9.95 else 0))} us"
    if magnitude < 999.5e3:
        return f"{sign}{_sig3(magnitude / 1000)} ms"
    return f"{sign}{_sig3(magnitude / 1e6)} s"


def given_ms(us: float) -> str:
    """A time the user gave in milliseconds, as given: 14.51 ms is ``14.51``, not the
    3-digit ``14.5`` of a measured figure. 15 significant digits: the ms a person types
    come back whole through the us a report holds (14.51 is 14510.000000000002 us), and
    every step time taken (``models.UNPROFILED_STEP_MIN_MS`` to ``MAX_MS``) is written
    without an exponent."""
    return f"{us / 1000:.15g}"


def format_share(share: float | None) -> str:
    """A fraction 0..1 as a percentage: 74%, 5.4%, <0.1% for a share too small to show
    (never 0.0% for one that is not nothing). The dashboard's ``formatPct`` to the digit."""
    if share is None or not math.isfinite(share):
        return "-"
    percent = share * 100
    if percent == 0:
        return "0%"
    magnitude = abs(percent)
    sign = "-" if percent < 0 else ""
    if magnitude < 0.1:
        return f"{sign}<0.1%"
    if magnitude < 10:
        return f"{sign}{_trim(_fixed(magnitude, 1))}%"
    return f"{sign}{_fixed(magnitude, 0)}%"


def _fixed(value: float, digits: int) -> str:
    """``value`` (>= 0) with ``digits`` decimals, an exact tie rounded up, as JavaScript's
    ``toFixed`` rounds it: Python's formatting rounds a tie to even, and a 23,250 us wait
    read 23.2 ms here and 23.3 ms in the dashboard."""
    numerator, denominator = value.as_integer_ratio()
    scaled = (2 * numerator * 10**digits + denominator) // (2 * denominator)
    text = str(scaled).rjust(digits + 1, "0")
    return f"{text[:-digits]}.{text[-digits:]}" if digits else text


def _trim(text: str) -> str:
    return text.rstrip("0").rstrip(".") if "." in text else text


def _sig3(value: float) -> str:
    return _fixed(value, 0 if value >= 99.95 else 1 if value >= 9.995 else 2)


def truncate_left(text: str, width: int) -> str:
    """Keep the end of ``text`` (file name and line) when it is too long: ``…/pkg/train.py:12``."""
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    return "…" + text[-(width - 1) :]


def truncate_right(text: str, width: int) -> str:
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    return text[: width - 1] + "…"


def wrap(text: str, width: int, indent: str = "", more: str = "  ") -> list[str]:
    """``text`` wrapped to ``width`` columns, every line starting with ``indent`` and the
    continuation lines with ``more`` after it; words (operator names, paths) are never
    broken, so a word longer than the line overflows rather than being cut."""
    return textwrap.wrap(
        text,
        width,
        initial_indent=indent,
        subsequent_indent=indent + more,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [indent]


# --- tables ---------------------------------------------------------------------------


class Column(msgspec.Struct, frozen=True):
    """One column of a terminal table.

    ``drop``: 0 keeps the column whatever the width; columns with a higher number are the
    less useful ones, moved first onto the line below their row (``below`` words the value
    there) when the table does not fit. ``wrap``: the table's one flexible column (the
    location): it gets the width the others leave, and a longer value a line of its own.
    ``max_width``: a wider value goes on the line below its row, whatever the width (a
    function name too long for a column)."""

    header: str
    cell: Callable[[Any], str]
    align: str = ">"
    drop: int = 0
    wrap: bool = False
    max_width: int | None = None
    below: Callable[[str], str] | None = None


# A location column narrower than this wraps rather than drops another column.
_FLEX_MIN = 16
_GAP = "  "  # between columns


class _Layout(msgspec.Struct):
    columns: list[Column]  # shown, in order
    widths: list[int]
    moved: list[Column]  # shown on the line below each row instead
    cells: list[dict[int, str]]  # per row: id(column) -> text
    long: list[list[Column]]  # per row: shown columns whose value was too wide for them

    def _cell(self, column: Column, width: int, text: str) -> str:
        return text.ljust(width) if column.align == "<" else text.rjust(width)

    def _line(self, cells: dict[int, str]) -> str:
        return _GAP.join(
            self._cell(c, w, cells.get(id(c), ""))
            for c, w in zip(self.columns, self.widths, strict=True)
        ).rstrip()

    def header(self) -> str:
        return self._line({id(c): c.header for c in self.columns})

    def row(self, index: int) -> list[str]:
        """The line(s) of one row: a location longer than its column goes whole on a line
        of its own, the other cells on the next."""
        cells = {**self.cells[index], **{id(c): "" for c in self.long[index]}}
        for at, (column, width) in enumerate(zip(self.columns, self.widths, strict=True)):
            if column.wrap and len(cells[id(column)]) > width:
                lead = [
                    self._cell(c, w, cells[id(c)])
                    for c, w in zip(self.columns[:at], self.widths[:at], strict=True)
                ]
                rest = {id(c): cells[id(c)] for c in self.columns[at + 1 :]}
                return [_GAP.join([*lead, cells[id(column)]]), self._line(rest)]
        return [self._line(cells)]

    def below(self, index: int) -> list[str]:
        """The moved columns' values of one row, worded for the line below it."""
        texts = []
        for column in [c for c in self.columns if c in self.long[index]] + self.moved:
            value = self.cells[index][id(column)]
            if value and value != "-":
                texts.append(column.below(value) if column.below else f"{column.header} {value}")
        return texts


def _layout(columns: Sequence[Column], rows: Sequence[Any], width: int) -> _Layout:
    cells = [{id(c): c.cell(row) for c in columns} for row in rows]
    long = [[c for c in columns if c.max_width and len(r[id(c)]) > c.max_width] for r in cells]
    natural = {
        id(c): max(
            [len(c.header)]
            + [len(r[id(c)]) for r, too_long in zip(cells, long, strict=True) if c not in too_long]
        )
        for c in columns
    }
    shown = list(columns)
    flex = next((c for c in shown if c.wrap), None)

    def room(cols: list[Column]) -> int:
        """The width left for the flexible column."""
        gaps = len(_GAP) * (len(cols) - 1)
        return width - sum(natural[id(c)] for c in cols if c is not flex) - gaps

    droppable = sorted((c for c in shown if c.drop), key=lambda c: -c.drop)
    if flex is not None:
        lengths = [len(r[id(flex)]) for r in cells]

        def wrapped(cols: list[Column]) -> int:
            return sum(1 for n in lengths if n > max(room(cols), _FLEX_MIN))

        # Columns give way only when more than a row in four would wrap, and only as many
        # as make fewest rows wrap: one outlier location wraps rather than costing every
        # row a column.
        if wrapped(shown) > len(lengths) // 4:
            options = [
                [c for c in shown if c not in droppable[:k]] for k in range(len(droppable) + 1)
            ]
            shown = min(options, key=lambda cols: (wrapped(cols), -len(cols)))
        # However many locations wrap, the other columns must fit beside the location's
        # header: where they do not, they give way too (at 60 columns the rows were 86).
        for column in droppable:
            if room(shown) >= len(flex.header):
                break
            if column in shown:
                shown.remove(column)
    else:
        while droppable and room(shown) < 0:
            shown.remove(droppable.pop(0))
    # The location column is as wide as the longest location that fits: the ones that do
    # not have lines of their own.
    fitting = (
        [len(r[id(flex)]) for r in cells if len(r[id(flex)]) <= room(shown)]
        if flex is not None
        else []
    )
    widths = [max([len(c.header), *fitting]) if c is flex else natural[id(c)] for c in shown]
    return _Layout(shown, widths, [c for c in columns if c not in shown], cells, long)


# --- the site table -------------------------------------------------------------------


def site_location(site: dict[str, Any], mark: str = "*") -> str:
    """``file:line`` of a site, ``mark`` following a line that is not the exact call line
    (``*``; ``**`` and on where the table explains several kinds of such lines)."""
    file = site.get("file")
    if not file:
        # No with_stack: the operator (or API call) is the best handle the user has.
        ops = site.get("ops") or []
        apis = site.get("apis") or []
        handle = ops[0] if ops else (apis[0] if apis else "")
        return f"[{handle}] (no stack)" if handle else "(no Python stack)"
    line = site.get("line")
    cell = site.get("cell")
    if isinstance(cell, dict) and cell.get("notebook"):
        # A Jupyter cell's code: the notebook and the cell as IPython names it ("Cell In[4],
        # line 6"), not ipykernel's name for it (/tmp/ipykernel_<pid>/<hash>.py).
        file = f"{cell['notebook']} {cell_name(cell)}"
    if line is None:
        return file
    return f"{file}:{line}{'' if site.get('line_exact') else mark}"


def cell_name(cell: dict[str, Any]) -> str:
    """``In[4]`` for a notebook cell saved with its execution count, else ``cell 3`` (its
    place in the notebook)."""
    count = cell.get("execution_count")
    return f"In[{count}]" if count is not None else f"cell {cell.get('index')}"


def _ops_text(site: dict[str, Any]) -> str:
    ops = [op for op in site.get("ops") or [] if op]
    apis = [api for api in site.get("apis") or [] if api]
    if len(ops) > 3:  # outermost (what Python called) and innermost (what synced) matter
        ops = [ops[0], "…", ops[-1]]
    text = " > ".join(ops) if ops else "(no operator)"
    if apis:
        text += f"  [{', '.join(dict.fromkeys(apis))}]"
    return text


def _line_of(source: dict[str, Any], file: str | None) -> str:
    """``line N`` in ``file``, else ``other.py:N``; ``*`` when the line is not exact."""
    mark = "" if source.get("line_exact") else "*"
    where = (
        f"line {source.get('line')}"
        if source.get("file") == file
        else f"{source.get('file')}:{source.get('line')}"
    )
    return where + mark


# At most this many candidate lines of a library's function are named under a site: more
# say nothing a reader could check (a training loop's dozens of truth tests).
LIBRARY_CANDIDATES_SHOWN = 6


def library_line_shown(library: dict[str, Any]) -> int | str:
    """The line a library's code that synced is named at: its own, exact; else its
    function's where the file was read (a loop running when profiling started recorded its
    callback's call); "?" where the trace recorded none."""
    line = library.get("line")
    if not library.get("line_exact") and library.get("def_line") is not None:
        line = library["def_line"]
    return "?" if line is None else line


def library_text(
    library: dict[str, Any],
    file: str | None = None,
    mark: str = "*",
    via: tuple[str, str] | None = None,
    lines: Sequence[dict[str, Any]] = (),
) -> str:
    """``synced in transformers/trainer.py:2257 (_maybe_log_save_evaluate)``: the library's
    line that synced, under the user's line that called it. Not exact, the function's own
    line stands for it (a loop already running when profiling started recorded the line
    it was at then, its callback's call, which a user took for the culprit), with its few
    candidate lines; ``mark`` follows such a line. ``via``: the library code the site's fix
    is about (``aggregate.key_library``), said where it is another function. ``lines``: the
    site's ``library_lines``, where its syncs ran several lines of that code: each is
    named, with its count (``ppo.py (train) at lines 230 (4), 231 (4), 292 (1)``)."""
    exact = bool(library.get("line_exact"))
    if len(lines) > 1:
        where = "this file" if library.get("file") == file else str(library.get("file"))
        named = [f"{entry['line']} ({entry['count']})" for entry in lines]
        if len(named) > LIBRARY_CANDIDATES_SHOWN:
            rest = len(named) - LIBRARY_CANDIDATES_SHOWN
            named = [*named[:LIBRARY_CANDIDATES_SHOWN], f"{rest} more"]
        func = f" ({library['func']})" if library.get("func") else ""
        text = f"synced in {where}{func} at lines {', '.join(named)}"
        if via is not None and via != (library.get("file"), library.get("func")):
            text += f", under {via[0]} ({via[1]})"
        return text
    shown = {**library, "line": library_line_shown(library), "line_exact": True}
    text = f"synced in {_line_of(shown, file)}" + ("" if exact else mark)
    inner = [str(library["func"])] if library.get("func") else []
    candidates = library.get("candidates") or []
    if not exact and 0 < len(candidates) <= LIBRARY_CANDIDATES_SHOWN:
        inner.append("candidate lines " + ", ".join(map(str, candidates)))
    text += f" ({'; '.join(inner)})" if inner else ""
    if via is not None and via != (library.get("file"), library.get("func")):
        # The site's key names the library code its fix is about, above a helper both of
        # two sites read through (Lightning's progress bar and loggers, ``to_item``).
        text += f", under {via[0]} ({via[1]})"
    return text


# A copy whose kind is a guess (``Site.copy_direction_guessed``), said where the site is.
COPY_DIRECTION_NOTE = (
    "no record says which way this copy went (taken as one to the host; an upload to the "
    "device from pageable memory looks the same)"
)


def _where_text(site: dict[str, Any]) -> str | None:
    """What the location alone does not say: a backward pass's sync (placed on its forward
    line) and what ran it, the library line that synced, the candidate lines of an inexact
    site."""
    parts = []
    file = site.get("file")
    annotations = [str(a) for a in site.get("annotations") or [] if a]
    if not file and annotations:
        # No stack: the annotations it ran in tell it from the other sites of its operator.
        parts.append("in " + ", ".join(annotations))
    run_by = site.get("run_by") or {}
    if site.get("backward"):
        parts.append(
            "backward of this line"
            + (
                f", run by {_line_of(run_by, file)}"
                + (f" ({run_by['func']})" if run_by.get("func") else "")
                if run_by.get("line") is not None
                else ""
            )
        )
    library = site.get("library") or {}
    if library.get("file"):
        parts.append(
            library_text(
                library,
                file,
                via=key_library(str(site.get("key") or "")),
                lines=site.get("library_lines") or (),
            )
        )
    candidates = site.get("candidates") or []
    if not site.get("line_exact") and candidates:
        parts.append("candidate lines " + ", ".join(map(str, candidates)))
    cell = site.get("cell")
    if isinstance(cell, dict) and (cell.get("copies") or 1) > 1:
        parts.append(
            f"{cell['copies']} notebook cells under the source roots hold this code; "
            "the first of them is named"
        )
    if site.get("waiting_for"):  # a job's: these syncs waited for a late peer, not the GPU
        parts.append(str(site["waiting_for"]))
    if site.get("copy_direction_guessed"):
        parts.append(COPY_DIRECTION_NOTE)
    after = site.get("after_sync")
    if isinstance(after, dict):
        parts.append(after_sync_text(after))
    read_before = after_read_text(site)
    if read_before:
        parts.append(read_before)
    callers = callers_text(site)
    if callers:
        parts.append(callers)
    others = site.get("other_kinds") or {}
    if others:  # the fix shown is the most frequent kind's only
        parts.append(
            "also "
            + ", ".join(f"{n} {catalogue_kind(k).label}" for k, n in others.items())
            + ", whose fix is not the one below"
        )
    return "; ".join(parts) or None


# At most this many of a site's calling lines are named; the rest are counted.
CALLERS_SHOWN = 4


def callers_text(site: dict[str, Any]) -> str | None:
    """``called from train.py:16 (4), train.py:17 (4), train.py:19 (2)``: the user's lines
    that called a site's function (``Site.callers``), where there are two or more (one is
    the loop that runs it, which the stack shows). None: fewer. Where the callers' ``%``
    tests differ, each that has one says it: one line reached every step and every N steps
    (nerf-pytorch's training and test-set renders) read "line 59 (75), line 59 (13)"."""
    callers = [c for c in site.get("callers") or [] if isinstance(c, dict)]
    if len(callers) < 2:
        return None
    file = site.get("file")
    guards = {c.get("periodic_guard") for c in callers}

    def label(caller: dict[str, Any]) -> str:
        guard = caller.get("periodic_guard") if len(guards) > 1 else None
        under = f", {guard_phrase(guard)}" if guard else ""
        return f"{_line_of(caller, file)} ({caller.get('count')}{under})"

    named = [label(c) for c in callers[:CALLERS_SHOWN]]
    more = len(callers) - CALLERS_SHOWN
    rest = sum(int(c.get("count") or 0) for c in callers[CALLERS_SHOWN:])
    return (
        "called from "
        + ", ".join(named)
        + (f", and {plural(more, 'more line')} ({rest})" if more > 0 else "")
    )


def after_sync_text(after: dict[str, Any]) -> str:
    """What a latent read just after an unrun explicit synchronize (``Site.after_sync``)
    costs: on a GPU the host waits at the synchronize first, so fixing the read alone
    saves little (build-nanogpt's logged ``loss_accum.item()``)."""
    return (
        f"after {after.get('code')} (line {after.get('line')}, not run here): on a GPU the "
        "host waits there first, so this read costs little until that synchronize goes"
    )


def after_read_text(site: dict[str, Any]) -> str | None:
    """What a site's latent reads right after other reads cost (``Site.after_read_count``):
    on a GPU the first read of such a run waits for the device and the next find its queue
    empty (ProgressMeter's formatted meters). None: none of its reads did."""
    count = int(site.get("after_read_count") or 0)
    if not count:
        return None
    before = site.get("after_read")
    # After an unrun synchronize too (``after_sync``, said first): what stays once it goes.
    too = " too" if isinstance(site.get("after_sync"), dict) else ""
    if isinstance(before, dict):
        same_line = before.get("file") == site.get("file") and before.get("line") == site.get(
            "line"
        )
        where = (
            "another read on this line"
            if same_line
            else f"the read at {_line_of(before, site.get('file'))}"
        )
        if too:
            return (
                f"right after {where}{too}, nothing queued between: it costs little while "
                "that one stays"
            )
        return (
            f"right after {where}, nothing queued between: on a GPU the host waits there "
            "first, so this read costs little until that one goes"
        )
    total = int(site.get("count") or 0)
    verb = "comes" if count == 1 else "come"
    return (
        f"{count} of these {total} reads {verb} right after another read{too}, nothing "
        "queued between: on a GPU only the first read of each such run waits"
    )


def unread_library_text(sites: Sequence[dict[str, Any]]) -> str:
    """Why a library's lines are marked ``*``, where its source is not readable here (a
    known library not installed where the report runs): they are the lines the trace
    recorded for its functions, and the calls that synced are told where it is. Empty
    where every library line shown was read."""
    packages = sorted(
        {
            library_package(str(library.get("file") or "")) or str(library.get("file") or "")
            for site in sites
            if (library := site.get("library"))
            and not library.get("line_exact")
            and not library.get("resolved_path")
        }
    )
    if not packages:
        return ""
    names = ", ".join(packages)
    return (
        f"Library lines marked * are the lines the trace recorded for their functions, not "
        f"the calls that synced: the source of {names} is not readable here. Run the report "
        "where it is installed, or name its site-packages folder with {--source-root}."
    )


def library_code_text(site: dict[str, Any]) -> str:
    """What a fix for a library's own code means (``advice.library_code``); empty where the
    fix is the user's to make."""
    package = (site.get("advice") or {}).get("library_code")
    if not package:
        return ""
    owner = f"{package}'" if package.endswith("s") else f"{package}'s"
    guard = (site.get("library") or {}).get("periodic_guard")
    if guard:
        # Its own test says how often: a setting of the library is likely behind it.
        return (
            f"(an edit of {owner} own code, which reads it only under "
            f"`{guard_statement(guard)}`: the setting of {package} behind that test reads it "
            "less often)"
        )
    setting = (site.get("library") or {}).get("setting_guard")
    if setting:
        # A test of its function's parameter or its object's attribute: the caller's
        # argument, or the object's setting, may turn the read off.
        return (
            f"(an edit of {owner} own code, which reads it only where `{setting}` holds: the "
            f"argument or setting of {package} behind that test may avoid it)"
        )
    return f"(an edit of {owner} own code: no setting of it is known to avoid this)"


def _advice_title(site: dict[str, Any]) -> str:
    advice = site.get("advice") or {}
    return str(advice.get("title") or "").strip()


def _site_columns(
    latent: bool, device: str = "GPU", marks: Mapping[int, str] | None = None
) -> list[Column]:
    """The site table's columns, most useful last to drop. A new column is one entry here
    (its ``drop`` says how soon it gives way on a narrow terminal). Latent findings cost
    nothing where they were seen: no cost columns. ``marks``: a row's number -> the mark of
    its inexact line, where it is not ``*``."""
    marks = marks or {}
    columns = [
        Column("#", lambda row: str(row[0])),
        Column(
            "site (file:line)",
            lambda row: site_location(row[1], marks.get(row[0], "*")),
            align="<",
            wrap=True,
        ),
        Column(
            "function",
            lambda row: row[1].get("func") or "-",
            align="<",
            drop=3,
            max_width=28,
            below=lambda v: f"in {v}()",
        ),
        Column(
            "count",
            lambda row: str(row[1].get("count") or 0),
            drop=2,
            below=lambda v: f"{v} in all",
        ),
        Column(
            "/step",
            lambda row: _per_step_text(float(row[1].get("per_step") or 0.0)),
            drop=1,
            below=lambda v: f"{v} per step",
        ),
    ]
    if not latent:
        columns += [
            Column("saves/step", lambda row: _saving_text(row[1])),
            Column("wait", lambda row: format_us(row[1].get("host_wait_us"))),
            Column(f"{device} idle", lambda row: _idle_text(row[1])),
            Column("share", lambda row: format_share(row[1].get("share_of_step"))),
        ]
    return columns


def _saving_text(site: dict[str, Any]) -> str:
    """The predicted saving per step; ``≤`` marks the upper bound (a trace not replayed),
    ``-`` none (the device's idle time not read: the host wait alone bounds nothing)."""
    if site.get("gpu_idle_measured") is False:
        return "-"
    value = format_us(site.get("predicted_saving_per_step_us"))
    return value if site.get("saving_method") == "replay" else "≤" + value


def _idle_text(site: dict[str, Any]) -> str:
    return "-" if site.get("gpu_idle_measured") is False else format_us(site.get("gpu_idle_us"))


_IDLE_UNREAD_SUMMARY = "not measured (the trace holds no task of the NPU's own)"

# Under a table with a site whose device idle is not read (torch_npu's device rows).
_IDLE_UNREAD_NOTE = (
    "-: not measured: the trace holds no task of the NPU's own (torch_npu's \"Ascend Hardware\" "
    "rows), so neither the NPU's idle time after a sync nor a saving is known"
)


# The command line's words in the hints, and what a Python caller writes instead.
_PYTHON_TERMS = {
    "--source-root / --path-map": "source_roots= / path_map= of tb_syncfinder.analyze",
    "--path-map": "path_map= of tb_syncfinder.analyze",
    "--source-root": "source_roots= of tb_syncfinder.analyze",
    "--top 0 shows all": "report.to_text() shows all",
    "--unprofiled-step-ms T": "unprofiled_step_us=T*1000 of tb_syncfinder.analyze (T in ms)",
}

# Why a line is marked ``*``, by what the engine knew: the footnote says the real reason.
_INEXACT_REASONS = {
    # Unread, the recorded line is the function's first line or, for a frame running when
    # the profiler started (a loop calling prof.step()), the line it was at then.
    "not_found": "line the trace recorded for the function (where it starts, or where it was "
    "when profiling started), not the call that syncs: its source file was not found "
    "(try {--source-root / --path-map})",
    # A file in a package folder as torch shortens a library's path (``rlpkg/algo.py``):
    # a library neither known nor installed where the report runs is taken for the user's.
    "package_not_found": "line the trace recorded for the function, not the call that syncs: "
    "its source file was not found (try {--source-root / --path-map}); if its package is a "
    "library (installed where the trace was recorded, not here), run the report where it is "
    "installed: its reads are then told under your line that called it",
    "cell_not_found": "line the trace recorded for the function, not the call that syncs: "
    "it ran in a Jupyter cell, and no notebook under the source roots holds that cell as it "
    "ran (save the notebook with the cell unchanged, and name its folder with "
    "{--source-root})",
    "other_run": "line the trace recorded for the function, not the call that syncs: the "
    "only copy of its source file found lies in another run's folder, beside that run's "
    "traces, and may be another version (copy this run's beside its traces, or name it with "
    "{--path-map})",
    "copies": "line the trace recorded for the function, not the call that syncs: different "
    "files of its name lie under the source roots, none in the trace's folder or above it, so "
    "none was taken (name the right one with {--source-root / --path-map})",
    "defined": "line where the function is defined: the source does not single out one call "
    "that syncs",
    "running": "line the function was at when profiling started (it was already running): "
    "the sync is in a call it made after that, which in a loop may stand above it",
    "changed": "line where the function is defined in the file as it is now: the file "
    "changed since profiling (the trace recorded another line), so the lines of its calls "
    "are candidates only",
    "missing": "line the trace recorded: the file found here has no such function there, nor "
    "one function of that name elsewhere (it changed since profiling, or it is another file)",
}


def _inexact_reason(site: dict[str, Any], resolved: dict[str, bool]) -> str | None:
    if not site.get("file") or site.get("line") is None or site.get("line_exact"):
        return None
    if not resolved.get(site.get("key") or "", False):
        if site.get("other_run_copy"):
            return "other_run"
        if site.get("copies_found"):
            return "copies"
        file = str(site["file"]).replace("\\", "/")
        if KERNEL_CELL.search(file):
            return "cell_not_found"
        # Relative, in a folder: a path torch shortened to its ``sys.path`` entry.
        return "package_not_found" if "/" in file and not file.startswith("/") else "not_found"
    if site.get("recorded_line") is not None:
        return "missing" if site.get("def_line") is None else "changed"
    def_line = site.get("def_line")
    if def_line is not None and def_line != site.get("line"):
        return "running"
    if site.get("func") == "<module>":
        return "running"  # a script's top level has no def: it ran before the profiler
    return "defined"


def _device_word(data: dict[str, Any]) -> str:
    """What the report's syncs waited for, as its tables name it: "NPU" where every trace
    read is torch_npu's (its tasks' idle time is the NPU's), else "GPU"."""
    read = [t for t in data.get("traces") or [] if not t.get("error")]
    return "NPU" if read and all(t.get("device") == "npu" for t in read) else "GPU"


def _resolved_sites(data: dict[str, Any]) -> dict[str, bool]:
    """Site key -> whether the source file of its syncs was read."""
    found: dict[str, bool] = {}
    for sync in (data.get("syncs") or []) + (data.get("latent") or []):
        key = sync.get("site_key")
        if key:
            source = sync.get("source") or {}
            found[key] = found.get(key, False) or bool(source.get("resolved_path"))
    return found


def _by_unprofiled(sites: list[dict[str, Any]]) -> bool:
    """Whether every site has its saving without the profiler (a step time given, fitted)."""
    return bool(sites) and all(
        site.get("unprofiled_predicted_saving_per_step_us") is not None for site in sites
    )


def periodic_guard_of(site: dict[str, Any]) -> tuple[str | None, str]:
    """The ``%`` test a site's reads run under, and where: its own line's
    (``periodic_guard``), else the one test every line that called its function runs under
    (a logging helper called under ``if step % log_every == 0:``), said "around its call at
    line N" (or "around its calls"); a test around a call further out (``progress.display``
    two calls above the read), "around the call at line N that leads here"."""
    guard = site.get("periodic_guard")
    if guard:
        return str(guard), ""
    callers = [c for c in site.get("callers") or [] if isinstance(c, dict)]
    guards = {c.get("periodic_guard") for c in callers}
    if not callers or len(guards) != 1 or None in guards:
        # Else the test around the library's line that read (OpenCLIP's ``if i %
        # args.log_every_n_steps == 0:`` in its ``train_one_epoch``).
        library_guard = (site.get("library") or {}).get("periodic_guard")
        return (str(library_guard), " in the library's code") if library_guard else (None, "")
    if len(callers) > 1:
        return str(guards.pop()), ", around its calls"
    caller = callers[0]
    if caller.get("periodic_guard_line") is not None:
        outer = {
            "file": caller.get("periodic_guard_file"),
            "line": caller.get("periodic_guard_line"),
            "line_exact": True,
        }
        where = _line_of(outer, site.get("file"))
        return str(guards.pop()), f", around the call at {where} that leads here"
    return str(guards.pop()), f", around its call at {_line_of(caller, site.get('file'))}"


def guard_statement(guard: str) -> str:
    """How a ``periodic_guard`` reads in the code: ``if step % 10 == 0:`` for a test, the
    decorator itself for a handler run every N events (``@trainer.on(...)``), the loop's
    header for a line run once a pass of a loop beside the loop that steps the profiler
    (``for epoch in range(epochs):``)."""
    return guard if guard.startswith("@") or guard.endswith(":") else f"if {guard}:"


def guard_phrase(guard: str) -> str:
    """Where a ``periodic_guard`` puts its line: ``under `if step % 10 == 0:` ``, or, for
    a loop's header, once a pass of that loop (an epoch's print after its batches)."""
    if guard.endswith(":"):
        return f"once a pass of `{guard}`, after its loop that steps the profiler"
    return f"under `{guard_statement(guard)}`"


# Ranks named one by one in a site's split by rank; past this many, how many more.
RANKS_NAMED = 4


def ranks_text(site: dict[str, Any]) -> str:
    """Where a job's site does not sync alike on every rank (``Site.ranks``): on which
    ranks, and how often on each of its own steps (``on rank 0 only, of the 2 ranks traced:
    1.0 a step there``). Its /step figure is over every rank's steps: a read of rank 0's
    alone, in each step of two ranks, is 0.5 there. Empty where it is alike on every rank,
    or the run is no job."""
    job_ranks = int(site.get("job_ranks") or 0)
    ranks = site.get("ranks") or []
    if job_ranks < 2 or not ranks:
        return ""

    def on_its_steps(entry: dict[str, Any]) -> tuple[str, str]:
        steps = int(entry.get("steps") or 0)
        count = int(entry.get("count") or 0)
        with_syncs = int(entry.get("steps_with_syncs") or 0)
        rate = f"{count / steps:.1f} a step" if steps else f"{count} in all"
        within = ""
        if 0 < with_syncs < steps:
            within = f", in {with_syncs} of its {plural(steps, 'step')}"
        return rate, within

    rates = {on_its_steps(entry) for entry in ranks}
    if len(ranks) >= job_ranks and len(rates) == 1:
        return ""
    if len(ranks) == 1:
        rate, within = on_its_steps(ranks[0])
        return (
            f"on rank {ranks[0].get('rank')} only, of the {job_ranks} ranks traced: "
            f"{rate} there{within}"
        )
    where = (
        f"on {len(ranks)} of the {job_ranks} ranks traced"
        if len(ranks) < job_ranks
        else f"on each of the {job_ranks} ranks traced, unlike"
    )
    parts = ["rank {}: {}{}".format(e.get("rank"), *on_its_steps(e)) for e in ranks[:RANKS_NAMED]]
    if len(ranks) > RANKS_NAMED:
        parts.append(f"{len(ranks) - RANKS_NAMED} more")
    return f"{where}: " + "; ".join(parts)


def spread_text(site: dict[str, Any], step_count: int) -> str:
    """``in 3 of 6 steps, up to 7 in one`` where a site synced in only some of the steps:
    its /step figure is a mean (a log every N steps reads 7 at once, not 3.5 a step). In a
    job where it does not sync alike on every rank, by rank instead (``ranks_text``): the
    steps are every rank's, and "in 5 of 10 steps" of a read on one of two ranks in each
    of its steps read as every second step."""
    guard, around = periodic_guard_of(site)
    already = f"already every N steps ({guard_phrase(guard)}{around})" if guard else ""
    by_rank = ranks_text(site)
    if by_rank:
        return f"{by_rank}: {already}" if already else by_rank
    with_syncs = int(site.get("steps_with_syncs") or 0)
    if guard and with_syncs >= step_count > 0:
        # nanoGPT's ``log_interval = 1``: the test lets the read through on every step.
        if guard.endswith(":"):  # a pass of the loop for each step: nothing to say
            return ""
        return f"under `{guard_statement(guard)}`, true in every profiled step"
    if not 0 < with_syncs < step_count:
        return already
    most = int(site.get("max_per_step") or 0)
    text = f"in {with_syncs} of {plural(step_count, 'step')}"
    text += f", up to {most} in one" if most > 1 else ""
    return f"{text}: {already}" if already else text


def _site_table(
    data: dict[str, Any],
    sites: list[dict[str, Any]],
    style: _Style,
    top: int | None,
    latent: bool,
    width: int,
) -> list[str]:
    ordered = rank_sites(sites)
    if not latent and _by_unprofiled(sites):
        # The step time without the profiler given and fitted: what the user asked for is
        # the order (the unique that saves 78 us without the profiler was listed last, under
        # sites that save half of that).
        ordered.sort(key=lambda site: -float(site["unprofiled_predicted_saving_per_step_us"]))
    shown = ordered if not top or top <= 0 else ordered[:top]
    # Each kind of inexact line its own mark, where the table has several: a row's "*"
    # said one of two legends, and no row said which (a user's walk of nanoGPT).
    resolved = _resolved_sites(data)
    row_reasons = {n: _inexact_reason(site, resolved) for n, site in enumerate(shown, 1)}
    reasons = list(dict.fromkeys(r for r in row_reasons.values() if r))
    reason_marks = {reason: "*" * (n + 1) for n, reason in enumerate(reasons)}
    marks = {n: reason_marks[r] for n, r in row_reasons.items() if r}
    columns = _site_columns(latent, _device_word(data), marks)
    layout = _layout(columns, list(enumerate(shown, 1)), width)
    lines = [style(layout.header(), _BOLD)]
    detail_width = width - len(_INDENT)
    for index, site in enumerate(shown):
        share = float(site.get("share_of_step") or 0.0)
        color = ""
        if not latent and share >= _SHARE_RED:
            color = _RED
        elif not latent and share >= _SHARE_YELLOW:
            color = _YELLOW
        lines.extend(style(line, color) for line in layout.row(index))
        detail = f"{site.get('kind', '?')}: {_ops_text(site)}"
        moved = layout.below(index)
        if moved:
            detail = ", ".join(moved) + " · " + detail
        lines.extend(style(line, _DIM) for line in wrap(detail, detail_width, _INDENT))
        where = _where_text(site)
        if where:
            lines.extend(style(line, _DIM) for line in wrap(where, detail_width, _INDENT))
        spread = spread_text(site, int((data.get("summary") or {}).get("step_count") or 0))
        if spread:
            lines.extend(style(line, _DIM) for line in wrap(spread, detail_width, _INDENT))
        unprofiled = site.get("unprofiled_predicted_saving_per_step_us")
        if unprofiled is not None and not latent:  # given the step time without the profiler
            lines.extend(
                style(line, _DIM)
                for line in wrap(
                    f"without the profiler: saves ~{format_us(float(unprofiled))} per step",
                    detail_width,
                    _INDENT,
                )
            )
        together = site.get("fix_with_note")
        if together and not latent:  # it saves much more with another site fixed too
            lines.extend(style(line, _YELLOW) for line in wrap(together, detail_width, _INDENT))
        title = _advice_title(site)
        if title:
            lines.extend(
                style(line, _GREEN)
                for line in wrap("fix: " + title, detail_width, _INDENT, "     ")
            )
            edits = library_code_text(site)
            if edits:
                lines.extend(
                    style(line, _DIM) for line in wrap(edits, detail_width, _INDENT + "     ")
                )
            compiled = (site.get("advice") or {}).get("compiled")
            if compiled:  # read in torch.compile'd code: what the fix means there
                lines.extend(
                    style(line, _DIM) for line in wrap(compiled, detail_width, _INDENT + "     ")
                )
    hidden = len(ordered) - len(shown)
    if hidden > 0:
        lines.append(f"... {plural(hidden, 'more site')} ({style.term('--top 0 shows all')})")
    for reason in reasons:
        text = re.sub(r"\{([^}]+)\}", lambda m: style.term(m.group(1)), _INEXACT_REASONS[reason])
        if reason == "other_run":
            copy = next((s["other_run_copy"] for s in shown if s.get("other_run_copy")), None)
            text += f": {copy}" if copy else ""
        if reason == "copies":
            count = max(int(s.get("copies_found") or 0) for s in shown)
            text = text.replace("different files", f"{count} different files", 1)
        mark = reason_marks[reason]
        lines.extend(wrap(f"{mark} {text}", width, "", " " * (len(mark) + 1)))
    unread = unread_library_text(shown)
    if unread:
        lines.extend(
            wrap(re.sub(r"\{([^}]+)\}", lambda m: style.term(m.group(1)), unread), width, "", "  ")
        )
    if not latent and any(s.get("gpu_idle_measured") is False for s in shown):
        lines.extend(wrap(_IDLE_UNREAD_NOTE, width, "", "  "))
    if not latent and shown:
        # wait and GPU idle sum every profiled step, beside per-step columns: a 43.4 ms
        # "wait" next to an 8.78 ms per-step figure in compare read as a contradiction.
        summary = data.get("summary") or {}
        steps = int(summary.get("step_count") or 0)
        over = f"the {plural(steps, 'profiled step')}" if steps else "the trace"
        per = "step"
        if steps and int(summary.get("traces_without_step_markers") or 0) == steps:
            # Each "step" a whole trace without ProfilerStep markers.
            over = f"the {plural(steps, 'trace')} (no step markers)"
            per = "step, here per trace"
        lines.extend(
            style(line, _DIM)
            for line in wrap(
                f"count, wait, {_device_word(data)} idle: over {over}; /step, saves/step: per "
                f"{per}; share: wait + {_device_word(data)} idle as a share of the steps' time "
                "(what the syncs cost; saves/step is what fixing them gives back)",
                width,
            )
        )
    return lines


def _article(device: str) -> str:
    """ "a GPU", "an NPU"."""
    return f"{'an' if device[:1] in 'AEIOUN' else 'a'} {device}"


def _label(text: str) -> str:
    return f"  {text:<17}"


def several_step_annotation_names(traces: Sequence[dict[str, Any]]) -> list[str]:
    """The names a ``--step-annotation`` pattern took the steps from, where it took more
    than one in some trace (``'Optimizer.*'``: ``zero_grad``'s and ``step``'s spans, two
    "steps" an iteration); empty where each trace's steps are spans of one name."""
    if not any(len(t.get("step_annotation_names") or ()) > 1 for t in traces):
        return []
    return list(dict.fromkeys(n for t in traces for n in t.get("step_annotation_names") or ()))


def step_annotation_hint(traces: Sequence[dict[str, Any]]) -> str:
    """For traces without ProfilerStep markers whose top-level ``record_function`` spans
    repeat under one name: how to count those spans as the steps (empty otherwise)."""
    unmarked = [t for t in traces if t.get("step_markers") is False]
    names = {t.get("step_annotation_hint") for t in unmarked}
    if not unmarked or len(names) != 1 or None in names:
        return ""
    name = str(names.pop())
    count = sum(int(t.get("step_annotation_hint_count") or 0) for t in unmarked)
    import shlex  # only for such a trace

    return (
        f", or count its {count} record_function({name!r}) spans as steps: "
        f"--step-annotation {shlex.quote(name)}"
    )


def _summary_lines(
    summary: dict[str, Any],
    style: _Style,
    width: int,
    cpu_only: bool,
    unmarked: int = 0,
    outside: int = 0,
    ranks: int = 0,
    device: str = "GPU",
    step_hint: str = "",
    fit_notes: Sequence[str] = (),
    fit_scales: Sequence[float] = (),
    idle_device: str = "GPU",
    job: dict[str, Any] | None = None,
    library_copies: int = 0,
    latent_after_reads: int = 0,
) -> list[str]:
    """``fit_notes``, ``fit_scales``: as ``_saving_lines`` takes them; ``job``: the
    report's job section (what its sites save a step of the job). ``device``: what
    the latent syncs would wait for ("NPU": traces of one recorded without AscendCL calls).
    ``unmarked``:
    readable traces without ProfilerStep markers (each counts as one step: said beside
    every per-step figure, which would be misread otherwise);
    ``outside``: syncs in no step of a trace that has steps (in the totals, in no step's
    bar); ``ranks``: the ranks of a job whose traces these are (their steps add up)."""
    steps = int(summary.get("step_count") or 0)
    count = int(summary.get("sync_count") or 0)
    host_wait = float(summary.get("host_wait_us") or 0.0)
    gpu_idle = float(summary.get("gpu_idle_us") or 0.0)
    idle_read = summary.get("gpu_idle_measured") is not False
    lines = [style("Summary", _BOLD)]
    latent = int(summary.get("latent_count") or 0)
    if count == 0 and (latent or cpu_only):
        # A CPU-only trace: its cost figures are all zero by nature; what it tells is how
        # many syncs a GPU run of the same code would make.
        per_step = f"{_per_step_text(latent / steps)} per step, " if steps else ""
        text = (
            f"{per_step}{latent} in all: would make the host wait on {_article(device)}"
            if latent
            else f"none: no operator here would synchronize on {_article(device)}"
        )
        if library_copies:
            # Not none at all where libraries copied to the host (said above): each waits
            # where its tensor lives on the device, which a CPU trace cannot tell (a
            # pytorch-tabnet walk: "none" where every one of its 103 copies would wait).
            copies = plural(library_copies, "copy", "copies")
            text = (
                f"{text}; and {copies} to the host in libraries' own code (above), each a "
                f"wait on {_article(device)} where its tensor lives there"
                if latent
                else f"none listed; {copies} to the host in libraries' own code (above), "
                f"each a wait on {_article(device)} where its tensor lives there"
            )
        if latent and latent_after_reads:
            # Counted, as the gate counts them, but on a GPU each waits for nothing queued
            # (a walk: a checkpoint's 248 module copies a save read as 248 waits).
            text += (
                f" ({latent_after_reads} of them right after another read: on "
                f"{_article(device)} only the first of each such run waits)"
            )
        if latent and unmarked:
            text += (
                f" ({plural(unmarked, 'trace')} without ProfilerStep markers, each counted as "
                f"one step: profile with a schedule and call prof.step(){step_hint})"
            )
        lines.extend(_wrap_labelled("latent syncs", text, width))
        mean_step = float(summary.get("mean_step_time_us") or 0.0)
        if mean_step > 0:
            lines.extend(
                _wrap_labelled(
                    "step time",
                    f"{format_us(mean_step)} mean on the "
                    f"{'host' if device != 'GPU' else 'CPU'} (not a measure of these syncs)",
                    width,
                )
            )
        return lines
    if steps:
        over = f"{count} over {plural(steps, 'step')}"
        if ranks > 1:
            # A job's steps are counted on every rank: 16 of a 2-rank job of 8 read as 16
            # steps of the job (a CLI review).
            over += f" of {ranks} ranks"
        if outside:
            over += f", {outside} of them outside any step"
        if unmarked:
            over += (
                f"; {plural(unmarked, 'trace')} without ProfilerStep markers, each counted "
                f"as one step: profile with a schedule and call prof.step(){step_hint}"
            )
        lines.extend(
            _wrap_labelled(
                "syncs per step",
                f"{_per_step_text(float(summary.get('syncs_per_step') or 0))}  ({over})",
                width,
            )
        )
        lines.extend(
            _wrap_labelled(
                "host wait",
                f"{format_us(host_wait / steps)} per step  ({format_us(host_wait)} total)",
                width,
            )
        )
        lines.extend(
            _wrap_labelled(
                f"{idle_device} idle after" if idle_read else "NPU idle after",
                f"{format_us(gpu_idle / steps)} per step  ({format_us(gpu_idle)} total)"
                if idle_read
                else _IDLE_UNREAD_SUMMARY,
                width,
            )
        )
    else:
        lines.extend(
            _wrap_labelled("syncs", f"{count}  (no ProfilerStep markers: whole trace)", width)
        )
        lines.append(_label("host wait") + format_us(host_wait))
        lines.extend(
            _wrap_labelled(
                f"{idle_device} idle after" if idle_read else "NPU idle after",
                format_us(gpu_idle) if idle_read else _IDLE_UNREAD_SUMMARY,
                width,
            )
        )
    share = float(summary.get("share_of_step") or 0.0)
    share_color = _RED if share >= _SHARE_RED else (_YELLOW if share >= _SHARE_YELLOW else "")
    share_text = style(format_share(share), share_color)
    host_step = float(summary.get("mean_step_time_us") or 0.0)
    wall_step = float(summary.get("mean_wall_step_time_us") or 0.0)
    if host_step > 0 and wall_step > host_step * 1.05:
        # The share is over the host's step; beside a longer step time it would be misread.
        share_text += f"  (of the host's {format_us(host_step)} step; the device's is longer)"
    lines.extend(_wrap_labelled("share of step", share_text, width))
    for_job = None
    job = job or {}
    saving_to_job = job.get("job_saving_per_step_us")
    # Only where the ranks' collectives were matched and the job's what-if ran: then its
    # ranks are known to step together.
    costed = job.get("what_if") in ("replay", "bound") and job.get("collective_count", 1)
    if ranks > 1 and saving_to_job is not None and count and costed:
        # The means above are over every rank's steps: a sync of one rank of two read as
        # half of what the job, whose ranks step together, saves.
        for_job = (
            f"{'≤' if job.get('what_if') == 'bound' else '~'}"
            f"{format_us(float(saving_to_job))} per step, its sites' savings to the job "
            f"added up: its {ranks} ranks step together (the figures above are means over "
            "each rank's steps; Job, below)"
        )
    lines.extend(
        _saving_lines(summary, width, fit_notes, fit_scales, idle_device, for_job, style=style)
    )
    by_kind = summary.get("by_kind") or {}
    if by_kind:
        kinds = sorted(by_kind.items(), key=lambda kv: kind_rank(kv[0]))
        lines.extend(_wrap_labelled("by kind", ", ".join(f"{k} {v}" for k, v in kinds), width))
    return lines


def _labelled(label: str, text: str, width: int) -> list[str]:
    """``text`` after a label of the listed-apart section, continuation lines under it."""
    head = f"  {label:<19}"
    lines = wrap(text, width, " " * len(head), "")
    return [head + lines[0].lstrip(" ")] + lines[1:]


def _listed_apart_lines(data: dict[str, Any], style: _Style, width: int) -> list[str]:
    """The syncs kept out of the findings, totals and CI gate: the profiler's own, allocator
    syncs in warm-up regions (with the allocator fix, should they recur), and a
    communication library's worker waiting for its own copies."""
    overhead = data.get("profiler_overhead") or {}
    warmup = data.get("warmup_allocator") or {}
    worker = data.get("collective_worker") or {}
    lines: list[str] = []

    def cost(part: dict[str, Any]) -> str:
        text = (
            f"{plural(int(part.get('count') or 0), 'sync')}, "
            f"{format_us(float(part.get('host_wait_us') or 0.0))} host wait"
        )
        idle = float(part.get("gpu_idle_us") or 0.0)
        return text + (f", {format_us(idle)} GPU idle" if idle else "")

    if overhead.get("count"):
        lines.extend(
            _labelled(
                "profiler overhead",
                f"{cost(overhead)}: the profiler's own synchronize (prof.step(), profiler stop)",
                width,
            )
        )
    if warmup.get("count"):
        regions = list(warmup.get("regions") or [])
        where = ", ".join(regions[:2]) + (
            f" and {len(regions) - 2} more" if len(regions) > 2 else ""
        )
        lines.extend(
            _labelled(
                "warm-up allocator",
                f"{cost(warmup)}: allocator syncs in warm-up regions ({where}), expected once",
                width,
            )
        )
        title = (warmup.get("advice") or {}).get("title")
        if title:
            lines.extend(_labelled("", f"if they recur after warm-up: {title}", width))
    if worker.get("count"):
        lines.extend(
            _labelled(
                "collective worker",
                f"{cost(worker)}: gloo's worker thread waiting for its own device copies; it "
                "blocks no thread of the program (that waits, if at all, in Work.wait)",
                width,
            )
        )
    if not lines:
        return []
    return [style("Listed apart (not in the findings, totals or CI gate)", _BOLD), *lines]


def _wrap_labelled(label: str, text: str, width: int) -> list[str]:
    """A summary line under its label, continuation lines aligned under the text."""
    head = _label(label)
    lines = wrap(text, width, head, "")
    return [lines[0]] + [" " * len(head) + line[len(head) :] for line in lines[1:]]


def _saving_lines(
    summary: dict[str, Any],
    width: int,
    fit_notes: Sequence[str] = (),
    fit_scales: Sequence[float] = (),
    device_word: str = "GPU",
    for_job: str | None = None,
    *,
    style: _Style,
) -> list[str]:
    """Step time (the longer of host and device span) and what removing every sync saves,
    with one line on how that was obtained. ``fit_notes``: why a trace's saving without the
    profiler could not be fitted (``TraceInfo.unprofiled_note``); ``fit_scales``: the
    fitted traces' scales; ``for_job``: what a job's step saves, said under the saving."""
    host = float(summary.get("mean_step_time_us") or 0.0)
    wall = float(summary.get("mean_wall_step_time_us") or 0.0) or host
    if wall <= 0:
        return []
    if not summary.get("saving_how"):  # a report from before the what-if replay
        estimated = float(summary.get("estimated_step_time_us") or 0.0)
        saving = host - estimated if estimated else 0.0
        return _wrap_labelled(
            "step time",
            f"{format_us(host)} mean; "
            f"~{format_us(estimated or host)} without syncs (-{format_us(max(saving, 0))})",
            width,
        )
    device = float(summary.get("mean_device_step_time_us") or 0.0)
    saving = float(summary.get("predicted_saving_per_step_us") or 0.0)
    method = summary.get("saving_method") or "bound"
    spans = f" (host {format_us(host)}, device {format_us(device)})" if device else ""
    if not device and summary.get("gpu_idle_measured") is False:
        spans = " (the host's: the trace holds no task of the NPU's own)"
    lines = _wrap_labelled("step time", f"{format_us(wall)} mean{spans}", width)
    approx = "~" if method == "replay" else "≤"
    share = saving / wall if wall else 0.0
    text = (
        f"{approx}{format_us(saving)} per step ({format_share(share)}) with every sync "
        f"removed; step ~{format_us(max(wall - saving, 0.0))}"
    )
    if summary.get("gpu_idle_measured") is False:
        # The host wait alone is no bound: "saves ≤522 us" would be a promise.
        text = "not predicted (see how obtained)"
    idle = float(summary.get("sync_idle_share") or 0.0)
    if method != "bound":
        # All the idle the syncs cause, in the bubbles right after them and where the launches
        # they delayed come late: more than "GPU idle after" (those bubbles only).
        text += (
            f"; GPU idle caused by syncs (after them and later) {format_share(idle)} of the time"
        )
    lines.extend(_wrap_labelled("saving", text, width))
    if for_job:
        lines.extend(_wrap_labelled("for the job", for_job, width))
    how = summary.get("saving_how") or ""
    note = summary.get("saving_note")
    profiler = summary.get("profiler_note")
    if summary.get("gpu_idle_measured") is False and str(note or "").startswith(NPU_NOT_REPLAYED):
        note = None  # the line above says it (with the workers it holds for, in a job)
    if how:
        lines.extend(_wrap_labelled("how obtained", how + (f" ({note})" if note else ""), width))
    unprofiled = summary.get("unprofiled_step_time_us")
    if profiler:
        if not unprofiled and summary.get("saving_method") == "replay":
            # The terminal's user can give the step time; the note (also the tab's) can't say so.
            give = style.term("--unprofiled-step-ms T")
            profiler += f" Give it with {give} for a prediction without the profiler."
        lines.extend(_wrap_labelled("profiler", profiler, width))
    if unprofiled:
        text = unprofiled_text(summary, fit_notes, fit_scales, device_word)
        lines.extend(_wrap_labelled("unprofiled", text, width))
    return lines


# The figures in a reason a trace was not fitted: two reasons alike but for them are one.
_FIGURES = re.compile(r"\d+(?:\.\d+)?")


def unprofiled_text(
    summary: dict[str, Any],
    fit_notes: Sequence[str] = (),
    fit_scales: Sequence[float] = (),
    device: str = "GPU",
) -> str:
    """What a report with ``summary.unprofiled_step_time_us`` says of the step without the
    profiler (the terminal's "unprofiled" line, the tab's under its input): the step time
    given, what fixing every sync then saves, or why there is no figure, and the bound.
    ``fit_notes`` and ``fit_scales`` as ``_saving_lines`` takes them."""
    unprofiled = summary.get("unprofiled_step_time_us")
    saving = float(summary.get("predicted_saving_per_step_us") or 0.0)
    at_most = summary.get("unprofiled_saving_at_most_per_step_us")
    # The step time as the user gave it (14.51 ms), not rounded to 3 digits as a figure
    # the tool measured would be ("14.5 ms" read as a different time from the one typed).
    text = f"{given_ms(float(unprofiled))} ms per step (given)"
    corrected = summary.get("unprofiled_predicted_saving_per_step_us")
    if corrected is not None:
        if not fit_scales:
            how = "no sync to remove"
        elif not any(fit_scales):
            how = (
                "the profiled replay's typical step takes no longer than that: nothing of "
                "the profiler's is taken out; the typical step's saving, where the line "
                "above is the mean over every profiled step"
            )
        else:
            how = (
                "replayed with the profiler's estimated host overhead taken out, scaled "
                "so that the typical step, the median after the first, takes the time "
                "given; what removing them takes off that step"
            )
        text += (
            f": fixing every sync saves ~{format_us(float(corrected))} per step without "
            f"the profiler ({how})"
        )
    elif fit_notes:
        # Each reason once, with how many traces gave it ("alike": the same reason, its
        # figures the trace's own); a rank not fitted for another reason is said too, not
        # counted as alike (a job's rank 0 with no sync, its rank 1 not fitted).
        by_reason: dict[str, list[str]] = {}
        # A trace that had nothing to remove is said last: first, why those with syncs got
        # no figure (a job's rank 0 without a sync read as the job having nothing to save).
        for note in sorted(fit_notes, key=lambda note: note == NO_SYNC_TO_REMOVE):
            by_reason.setdefault(_FIGURES.sub("#", note), []).append(note)
        parts = []
        for notes in by_reason.values():
            more = len(notes) - 1
            if not parts:
                alike = f" (and in {plural(more, 'trace')} more alike)" if more else ""
                parts.append(f"{notes[0]}{alike}")
            else:
                parts.append(f"in {plural(len(notes), 'other trace')}: {notes[0]}")
        text += f": no prediction without the profiler ({'; '.join(parts)})"
    if step_time_ruled_out(fit_notes, bool(fit_scales)):
        return text  # a bound from a step ruled out is none
    if at_most is None:
        text += (
            f"{';' if corrected is not None or fit_notes else ':'} the trace gives no "
            "device busy time to bound the saving by"
        )
    else:
        busiest = summary.get("busiest_worker_device_busy_per_step_us")
        of_workers = busiest is not None and busiest != summary.get("device_busy_per_step_us")
        text += (
            f"; at most {format_us(float(at_most))} per step "
            if corrected is not None or fit_notes
            else f": fixing every sync saves at most {format_us(float(at_most))} per step "
        )
        text += f"(the step minus the {'busiest worker' if of_workers else device}'s busy time"
        if saving > at_most:
            text += f"; the {format_us(saving)} above is the profiled program's"
        text += ")"
    return text


def unprofiled_fits(traces: Sequence[dict[str, Any]]) -> tuple[list[str], list[float]]:
    """The readable traces' fits without the profiler, as ``unprofiled_text`` takes them:
    why each one not fitted was not (``unprofiled_note``), and each fitted one's scale."""
    notes = [t["unprofiled_note"] for t in traces if t.get("unprofiled_note")]
    scales = [
        float(t["unprofiled_overhead_scale"])
        for t in traces
        if t.get("unprofiled_overhead_scale") is not None
    ]
    return notes, scales


def recorded_nothing(trace: dict[str, Any]) -> bool:
    """A trace that recorded nothing of the program (its device then defaults to "cpu"):
    no event at all, or, as Kineto writes a file stopped before any step, only metadata,
    the profiler's own span and instants: no step and no host event."""
    nothing = trace.get("event_count") == 0 or (
        trace.get("step_markers") is False and trace.get("host_events_per_step") == 0
    )
    return (
        nothing
        and trace.get("device") in (None, "cpu")
        and not trace.get("has_gpu_activity")
        and not trace.get("has_runtime")
    )


def _traces_line(traces: list[dict[str, Any]]) -> str:
    ok = [t for t in traces if not t.get("error")]
    devices: dict[str, int] = {}
    for t in ok:
        device = "empty" if recorded_nothing(t) else t.get("device") or "unknown"
        devices[device] = devices.get(device, 0) + 1
    text = plural(len(traces), "trace")
    if devices:
        text += " (" + ", ".join(f"{d} {n}" for d, n in sorted(devices.items())) + ")"
    failed = len(traces) - len(ok)
    if failed:
        text += f", {failed} unreadable"
    return text


def _error_lines(traces: list[dict[str, Any]], style: _Style) -> list[str]:
    failed = [t for t in traces if t.get("error")]
    if not failed:
        return []
    lines = [style(f"Errors ({plural(len(failed), 'file')} skipped)", _BOLD, _RED)]
    for t in failed:
        lines.append(f"  {t.get('path')}: {t.get('error')}")
    return lines


def _repair_lines(traces: list[dict[str, Any]], style: _Style) -> list[str]:
    """Traces that were read only after fixing or skipping parts of them: say what, so a
    finding missing from a damaged trace is not taken for an absent sync."""
    repaired = [t for t in traces if t.get("repairs") and not t.get("error")]
    if not repaired:
        return []
    lines = [style(f"Read with repairs ({plural(len(repaired), 'file')})", _BOLD, _YELLOW)]
    for t in repaired:
        lines.append(f"  {t.get('path')}: {'; '.join(t['repairs'])}")
    return lines


def _report_body(data: dict[str, Any], style: _Style, top: int | None, width: int) -> list[str]:
    """Sites, latent sites, summary and errors of one report, without its title line."""
    traces = data.get("traces") or []
    summary = data.get("summary") or {}
    sites = data.get("sites") or []
    latent_sites = data.get("latent_sites") or []

    lines: list[str] = []
    steps_note = summary.get("steps_note")
    if steps_note:
        # Before the sites: every /step figure below is over these steps.
        lines.extend(wrap(steps_note[:1].upper() + steps_note[1:] + ".", width, "", "  "))
        lines.append("")
    annotated = {t.get("steps_from_annotation") for t in traces if t.get("steps_from_annotation")}
    if annotated:
        names = ", ".join(f"record_function({name!r})" for name in sorted(annotated))
        matched = several_step_annotation_names(traces)
        lines.extend(
            wrap(
                f"Steps: the spans of {names} (--step-annotation), each to the next one's "
                "start, in "
                f"{plural(sum(1 for t in traces if t.get('steps_from_annotation')), 'trace')} "
                "without ProfilerStep markers"
                + (
                    f"; it matched {len(matched)} names ({', '.join(map(repr, matched))}), "
                    "each span of each counted as a step."
                    if matched
                    else "."
                ),
                width,
                "",
                "  ",
            )
        )
        lines.append("")
    readable = [t for t in traces if not t.get("error")]
    cpu_only = (
        bool(readable)
        and not sites
        and not any(
            t.get("has_gpu_activity") or t.get("device") not in (None, "cpu") for t in readable
        )
    )
    # torch_npu traces at its default profiler level: NPU work, but no AscendCL call, so no
    # wait can be seen (not CPU-only traces, and not clean ones). Decided per trace: a run
    # may also hold traces recorded at a level that records them, or CPU-only ones.
    unrecorded = [t for t in readable if npu_without_calls(t)]
    cpu_traces = [
        t for t in readable if t.get("device") in (None, "cpu") and not t.get("has_gpu_activity")
    ]
    npu_unrecorded = bool(unrecorded) and not sites and not cpu_traces
    npu_latent = bool(unrecorded) and not cpu_traces  # the latent sites are the NPU's
    # Nothing recorded at all: not a CPU-only trace (an empty torch_npu or CUDA file said
    # "nothing ran on a GPU"), and no summary of zeros.
    empty = (
        not sites and not latent_sites and bool(readable) and all(map(recorded_nothing, readable))
    )
    if empty:
        title = (
            f"{'Empty trace' if len(readable) == 1 else 'Empty traces'}: no event of the "
            "program was recorded, so there is nothing to analyse (was the file written before the "
            "profiler recorded a step?)"
        )
        lines.extend(style(line, _BOLD) for line in wrap(title, width))
        lines.append("")
    elif sites:
        # Nothing predicted where the device's idle time is unread: ranked by the host's wait.
        ranked_by = (
            "host wait"
            if all(site.get("gpu_idle_measured") is False for site in sites)
            else "predicted saving without the profiler"
            if _by_unprofiled(sites)
            else "predicted saving"
        )
        title = f"Host-device synchronizations by {ranked_by} ({plural(len(sites), 'site')})"
        lines.append(style(title, _BOLD))
        lines.extend(_site_table(data, sites, style, top, latent=False, width=width))
        if unrecorded:
            lines.extend(
                wrap(
                    f"{plural(len(unrecorded), 'NPU trace')} of these without AscendCL calls: "
                    f"no wait can be seen in {'it' if len(unrecorded) == 1 else 'them'}; "
                    f"{NPU_LEVEL_ADVICE}.",
                    width,
                )
            )
        lines.append("")
    elif cpu_only:
        title = "CPU-only trace: nothing ran on a GPU, so nothing waited for one."
        lines.extend(style(line, _BOLD) for line in wrap(title, width))
        hidden = int(summary.get("latent_count") or 0)
        if hidden and not latent_sites:  # report --no-latent: counted, not listed
            lines.extend(
                wrap(
                    f"Latent syncs not listed (--no-latent): {plural(hidden, 'call')} in it "
                    "would synchronize on a GPU.",
                    width,
                    "  ",
                )
            )
        elif not latent_sites:
            # What a CPU-only trace cannot show stays said (the tab says it there too): a
            # ``.to("cuda")`` upload or pageable copy would sync on a GPU all the same.
            copies = library_copies_text(readable)
            lines.append(
                "  No operator in it would synchronize on a GPU either"
                + (", but for the copies libraries made (below)." if copies else ".")
            )
            if copies:
                lines.extend(wrap(copies, width, "  ", "    "))
            lines.extend(wrap(latent_not_listed(readable), width, "  "))
            unrun = unrun_syncs_text(readable)
            if unrun:
                lines.extend(wrap(unrun, width, "  ", "    "))
        lines.append("")
    elif npu_unrecorded:
        title = "NPU trace without AscendCL calls: no wait for the NPU can be seen in it."
        lines.extend(style(line, _BOLD) for line in wrap(title, width))
        lines.extend(wrap(f"{NPU_LEVEL_ADVICE}.", width, "  "))
        lines.append("")
    elif readable:
        checked = summary.get("checked") or []
        lines.append(style("No host-device synchronizations found.", _BOLD, _GREEN))
        if checked:
            head = "  checked: "
            body = wrap(", ".join(checked), width, head, "")
            # The label once, the rest aligned under the list (wrap repeats its indent).
            lines.extend([body[0]] + [" " * len(head) + line[len(head) :] for line in body[1:]])
        lines.append("")
    unjudged = unjudged_uploads_text(readable)
    if unjudged:
        lines.extend(style(line, _YELLOW) for line in wrap("Not judged: " + unjudged, width))
        lines.append("")
    if latent_sites:
        lines.extend(
            style(line, _BOLD)
            for line in wrap(
                f"Latent syncs ({plural(len(latent_sites), 'site')}): these operators "
                "synchronize on the NPU (their waits are not in this trace)"
                if npu_latent
                else f"Latent syncs ({plural(len(latent_sites), 'site')}): these operators "
                "would synchronize on a device (CPU-only traces, and NPU traces without "
                "AscendCL calls)"
                if unrecorded
                else f"Latent syncs ({plural(len(latent_sites), 'site')}): CPU-only trace, "
                "these operators would synchronize on a GPU",
                width,
            )
        )
        lines.extend(_site_table(data, latent_sites, style, top, latent=True, width=width))
        copies = library_copies_text(readable)
        if copies:
            lines.extend(wrap(copies, width, "", "  "))
        lines.extend(wrap(latent_not_listed(readable), width))
        unrun = unrun_syncs_text(readable)
        if unrun:
            lines.extend(wrap(unrun, width, "", "  "))
        lines.append("")
    if readable and not empty:
        unmarked = sum(1 for t in readable if t.get("step_markers") is False)
        marked = {t.get("path") for t in readable if t.get("step_markers") is not False}
        outside = sum(
            1
            for sync in data.get("syncs") or []
            if sync.get("step") is None and sync.get("trace") in marked
        )
        job = data.get("job") or {}
        ranks = len(job.get("ranks") or [])
        fit_notes, fit_scales = unprofiled_fits(readable)
        lines.extend(
            _summary_lines(
                summary,
                style,
                width,
                cpu_only or npu_unrecorded,
                unmarked,
                outside,
                ranks=ranks,
                device="NPU" if npu_latent else "GPU",
                step_hint=step_annotation_hint(readable),
                fit_notes=fit_notes,
                fit_scales=fit_scales,
                idle_device=_device_word(data),
                job=job,
                library_copies=sum(
                    int(copy.get("count") or 0)
                    for trace in readable
                    for copy in trace.get("library_copies") or ()
                ),
                latent_after_reads=sum(
                    1 for sync in data.get("latent") or [] if sync.get("after_read")
                ),
            )
        )
        lines.append("")
    from tb_syncfinder.outputs.job_text import job_lines  # the job section (multi-rank runs)

    job = job_lines(data, style, width, _BOLD, _YELLOW, top)
    if job:
        lines.extend([*job, ""])
    apart = _listed_apart_lines(data, style, width)
    if apart:
        lines.extend(apart)
        lines.append("")
    repairs = _repair_lines(traces, style)
    if repairs:
        lines.extend(repairs)
        lines.append("")
    lines.extend(_error_lines(traces, style))
    while lines and lines[-1] == "":
        lines.pop()
    return lines


def unjudged_uploads_text(traces: list[dict[str, Any]]) -> str | None:
    """The sentence on the host-to-device copies whose records do not say whether the
    host memory was pinned (``TraceInfo.unjudged_uploads``), or None where there are none."""
    count = sum(int(t.get("unjudged_uploads") or 0) for t in traces)
    if not count:
        return None
    host_us = sum(float(t.get("unjudged_upload_host_us") or 0.0) for t in traces)
    return (
        f"{plural(count, 'asynchronous host-to-device copy', 'asynchronous host-to-device copies')}"
        f" ({format_us(host_us)} of host time in the calls): ROCm traces do not record whether "
        "the host memory was pinned, and from pageable memory such a copy blocks the host. "
        "Load into pinned memory (pin_memory=True) to be sure it does not."
    )


def _finish(lines: list[str]) -> str:
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


def render_report(
    report: Report | dict[str, Any],
    color: bool = False,
    top: int | None = None,
    width: int | None = None,
    python: bool = False,
) -> str:
    """The report as terminal text: sites by cost, latent findings, summary, errors.

    ``report`` is a ``Report`` or its ``to_json()`` dict; ``top`` limits the sites shown
    (None or 0: all); ``width`` in columns (None: the terminal's). Returns text ending in a
    newline; ANSI colours only when ``color``; hints in Python's words when ``python``.
    """
    data = report.to_json() if isinstance(report, Report) else report
    width = _width(width)
    style = _Style(color, python)
    lines = [
        style("Sync Advisor", _BOLD, _CYAN) + "  " + _traces_line(data.get("traces") or []),
        "",
    ]
    lines.extend(_report_body(data, style, top, width))
    return _finish(lines)


def _is_cpu_only(data: dict[str, Any]) -> bool:
    readable = [t for t in data.get("traces") or [] if not t.get("error")]
    return (
        bool(readable)
        and not (data.get("sites") or [])
        and not any(
            t.get("has_gpu_activity") or t.get("device") not in (None, "cpu") for t in readable
        )
    )


def _overview_cells(data: dict[str, Any]) -> list[str] | None:
    """The overview cells of one run (steps, syncs/step, wait/step, share, latent/step);
    None when no trace of it could be read."""
    traces = data.get("traces") or []
    summary = data.get("summary") or {}
    if not [t for t in traces if not t.get("error")]:
        return None
    steps = int(summary.get("step_count") or 0)
    count = int(summary.get("sync_count") or 0)
    latent = int(summary.get("latent_count") or 0)
    # No ProfilerStep markers: the whole trace counts as one step, as the summary says.
    per = max(steps, 1)
    readable = [t for t in traces if not t.get("error")]
    if count == 0 and (_is_cpu_only(data) or all(npu_without_calls(t) for t in readable)):
        # CPU-only, or torch_npu without AscendCL calls: no wait to measure; what matters is
        # how many syncs it would make.
        return [str(steps), "-", "-", "-", f"{latent / per:.1f}"]
    return [
        str(steps),
        f"{count / per:.1f}",
        format_us(float(summary.get("host_wait_us") or 0.0) / per),
        format_share(float(summary.get("share_of_step") or 0.0)),
        f"{latent / per:.1f}" if latent else "-",
    ]


def _overview_lines(runs: list[tuple[str, dict[str, Any]]], style: _Style, width: int) -> list[str]:
    rows = [(name, data, _overview_cells(data)) for name, data in runs]

    def cell(i: int) -> Callable[[Any], str]:
        return lambda row: row[2][i] if row[2] is not None else ""

    columns = [
        Column("run", lambda row: row[0], align="<", wrap=True),
        Column("steps", cell(0)),
        Column("syncs/step", cell(1)),
        Column("wait/step", cell(2)),
        Column("share", cell(3)),
        Column("latent/step", cell(4), drop=1, below=lambda v: f"latent {v} per step"),
    ]
    layout = _layout(columns, rows, width)
    lines = [style(f"Runs ({len(runs)})", _BOLD), style(layout.header(), _BOLD)]
    for index, (name, data, cells) in enumerate(rows):
        if cells is None:
            lines.append(style(f"{name}  no trace could be read", _RED))
            continue
        share = float((data.get("summary") or {}).get("share_of_step") or 0.0)
        color = _RED if share >= _SHARE_RED else (_YELLOW if share >= _SHARE_YELLOW else "")
        lines.extend(style(line, color) for line in layout.row(index))
        lines.extend(
            wrap(", ".join(layout.below(index)), width, _INDENT) if layout.below(index) else []
        )
    return lines


def render_runs(
    runs: list[tuple[str, dict[str, Any]]],
    color: bool = False,
    top: int | None = None,
    width: int | None = None,
) -> str:
    """Several runs of one logdir: one section per run, then a line per run to compare.

    ``runs`` is ``(run name, report JSON of that run's traces)`` in display order. Each run
    is reported on its own, so per-step figures are over that run's steps only; a single run
    reads exactly as ``render_report``.
    """
    width = _width(width)
    if len(runs) == 1:
        return render_report(runs[0][1], color=color, top=top, width=width)
    style = _Style(color)
    all_traces = [t for _, data in runs for t in data.get("traces") or []]
    lines = [
        style("Sync Advisor", _BOLD, _CYAN)
        + "  "
        + f"{len(runs)} runs, "
        + _traces_line(all_traces),
        "",
    ]
    for name, data in runs:
        heading = f"== {name}: {_traces_line(data.get('traces') or [])} "
        lines.append(style(heading.ljust(width, "="), _BOLD, _CYAN))
        lines.append("")
        lines.extend(_report_body(data, style, top, width))
        lines.append("")
    lines.extend(_overview_lines(runs, style, width))
    return _finish(lines)


_STATUS_STYLE = {"new": _RED, "worse": _RED, "better": _GREEN, "fixed": _GREEN, "same": _DIM}


def _change_text(us: float) -> str:
    sign = "+" if us > 0 else "-" if us < 0 else "±"
    return sign + format_us(abs(us))


def _compare_location(row: dict[str, Any]) -> str:
    """A compare row's site as the report names it, with every line of the sites merged
    into the row (``train.py:95,96``), from the side its ``line`` is of."""
    location = site_location(
        {
            "file": row.get("file"),
            "line": row.get("line"),
            "line_exact": True,
            "ops": row.get("ops"),
            "apis": row.get("apis"),
            "cell": row.get("cell"),
        }
    )
    lines = (row.get("after") or row.get("before") or {}).get("lines") or []
    if row.get("file") and len(lines) > 1:
        location = f"{location.rsplit(':', 1)[0]}:{','.join(str(line) for line in lines)}"
    if _marked_inexact(row):
        location += "*"
    # A row that merges a function's sites of one kind: the lines it had before, where the
    # fix removed some of them (the one fixed was named nowhere).
    before = (row.get("before") or {}).get("lines") or []
    if row.get("file") and row.get("after") and before and before != lines:
        location += f" (before: {','.join(str(line) for line in before)})"
    return location


def _marked_inexact(row: dict[str, Any]) -> bool:
    """A compared row whose line is not the syncing call's ("*")."""
    return bool(row.get("file")) and row.get("line") is not None and row.get("line_exact") is False


# Why a compared line may not be the call's: the report gives each site's reason.
COMPARE_INEXACT_NOTE = (
    "* not the line of the syncing call: the function's line (the source was not found, or "
    "its calls could not be told apart); `tb-syncfinder report` says which for each site"
)


def _compare_columns(by_count: bool = False) -> list[Column]:
    """``by_count``: the sites were compared by syncs per step (one run CPU-only, whose
    waits cost nothing there): the columns show counts, not a cost beside "same"."""

    def side(key: str) -> Callable[[Any], str]:
        if by_count:
            return lambda row: (
                _per_step_text(float((row.get(key) or {}).get("per_step") or 0))
                if row.get(key)
                else "-"
            )
        return lambda row: (
            format_us((row.get(key) or {}).get("cost_per_step_us")) if row.get(key) else "-"
        )

    def count_change(row: dict[str, Any]) -> str:
        change = float((row.get("after") or {}).get("per_step") or 0) - float(
            (row.get("before") or {}).get("per_step") or 0
        )
        return ("+" if change > 0 else "-" if change < 0 else "±") + _per_step_text(abs(change))

    if by_count:
        return [
            Column("status", lambda row: row.get("status", "?"), align="<"),
            Column("site (file:line)", _compare_location, align="<", wrap=True),
            Column(
                "function",
                lambda row: row.get("func") or "-",
                align="<",
                drop=1,
                max_width=28,
                below=lambda v: f"in {v}()",
            ),
            Column("before", side("before")),
            Column("after", side("after")),
            Column("change", count_change),
        ]
    return [
        Column("status", lambda row: row.get("status", "?"), align="<"),
        Column("site (file:line)", _compare_location, align="<", wrap=True),
        Column(
            "function",
            lambda row: row.get("func") or "-",
            align="<",
            drop=1,
            max_width=28,
            below=lambda v: f"in {v}()",
        ),
        Column("before", side("before")),
        Column("after", side("after")),
        Column("change", lambda row: _change_text(float(row.get("change_us") or 0.0))),
        Column(
            "/step",
            lambda row: (
                f"{_per_step_text(float((row.get('before') or {}).get('per_step') or 0))}>"
                f"{_per_step_text(float((row.get('after') or {}).get('per_step') or 0))}"
            ),
        ),
    ]


def _predicted_saving_text(before: dict[str, Any] | None) -> str | None:
    """What the baseline's report predicted fixing a site saves per step: the cost columns
    (wait + idle) overstate it where other work fills the gap."""
    side = before or {}
    saving = side.get("predicted_saving_per_step_us")
    if saving is None:
        return None
    if side.get("gpu_idle_measured") is False:
        return "fixing it saves: not predicted (the trace holds no task of the NPU's own)"
    approx = "~" if side.get("saving_method") == "replay" else "≤"
    return f"fixing it saves {approx}{format_us(float(saving))}/step (predicted)"


def _latent_only(summary: dict[str, Any]) -> bool:
    """A side that measured no wait but lists latent syncs (CPU-only, or torch_npu without
    AscendCL calls): its 0 syncs and 0 % share are no measurement."""
    return not summary.get("sync_count") and bool(summary.get("latent_count"))


def _compare_syncs_text(summary: dict[str, Any]) -> str:
    if _latent_only(summary):
        steps = max(int(summary.get("step_count") or 0), 1)
        return f"{_per_step_text(int(summary['latent_count']) / steps)} latent"
    return _per_step_text(float(summary.get("syncs_per_step") or 0))


def _compare_share_text(summary: dict[str, Any]) -> str:
    return "-" if _latent_only(summary) else format_share(summary.get("share_of_step"))


def replaces_text(row: dict[str, Any], rows: list[dict[str, Any]]) -> str | None:
    """The words "in place of the syncs at line 122 (...)" for a new row that took the
    place of its function's fixed or fewer syncs (compare's ``replaces``), else None."""
    keys = set(row.get("replaces") or ())
    if not keys:
        return None
    lines = sorted(
        {
            line
            for other in rows
            if other.get("key") in keys
            for line in ((other.get("before") or {}).get("lines") or [])
            if line is not None
        }
    )
    where = (
        f" at line{'s' if len(lines) != 1 else ''} {', '.join(map(str, lines))}" if lines else ""
    )
    return f"in place of the syncs{where} (fewer syncs in this function than before)"


def render_compare(result: dict[str, Any], color: bool = False, width: int | None = None) -> str:
    """``compare.compare(...)`` as terminal text: one line per site, then the step time."""
    width = _width(width)
    style = _Style(color)
    sites = result.get("sites") or []
    counts = result.get("counts") or {}
    tally = [f"{n} {status}" for status, n in counts.items() if n]
    # Between CPU-only runs the latent sites are all there is: the headline counts them.
    latent_rows = result.get("latent_sites") or []
    latent_tally = [
        f"{n} {status}"
        for status in counts or ("new", "worse", "better", "same", "fixed")
        if (n := sum(1 for row in latent_rows if row.get("status") == status))
    ]
    if latent_tally:
        tally.append(", ".join(latent_tally) + " (latent)")
    if result.get("steps_differ"):
        # Statuses of figures per step that do not compare: none is a verdict (below).
        tally = [": ".join(["per step not comparable", *(["; ".join(tally)] if tally else [])])]
    lines = [style("Sync Advisor: compare", _BOLD, _CYAN) + "  " + "; ".join(tally)]
    unreadable = result.get("unreadable") or []
    if unreadable:
        # In the file too, not only on stderr: a reviewer of the output must see that the
        # comparison left traces out.
        lines.extend(
            style(line, _YELLOW)
            for line in wrap(
                f"{len(unreadable)} trace file{'s' if len(unreadable) != 1 else ''} could not "
                f"be read and {'were' if len(unreadable) != 1 else 'was'} left out of the "
                "comparison:",
                width,
                "  ",
            )
        )
        for entry in unreadable:
            side = "baseline" if entry.get("side") == "base" else "new run"
            lines.extend(
                wrap(f"{side}: {entry.get('path')}: {entry.get('error')}", width, "    ", "      ")
            )
    if result.get("note"):
        lines.extend(wrap(str(result["note"]), width, "  "))
    if result.get("detection_note"):
        lines.extend(wrap(str(result["detection_note"]), width, "  "))
    if result.get("replacement_note"):
        lines.extend(wrap(str(result["replacement_note"]), width, "  "))
    if result.get("runs_note"):
        lines.extend(wrap(str(result["runs_note"]), width, "  "))
    lines.append("")
    if sites:
        by_count = bool(result.get("note"))  # one run CPU-only: compared by count per step
        layout = _layout(_compare_columns(by_count), sites, width)
        header = layout.header()
        note = "  (syncs per step)" if by_count else "  (cost = wait + idle per step)"
        lines.append(style(header + note if len(header) + len(note) <= width else header, _BOLD))
        for index, row in enumerate(sites):
            status_style = _STATUS_STYLE.get(row.get("status", ""), "")
            lines.extend(style(line, status_style) for line in layout.row(index))
            ops = " > ".join(row.get("ops") or []) or "(no operator)"
            detail = f"{row.get('kind')}: {ops}"
            library = row.get("library") or {}
            if library.get("file"):  # one call of the user's, several of a library's reads
                detail += " · " + library_text(library, row.get("file"))
            # On a fixed row, as the dashboard: what the fix was worth, as predicted.
            saving = (
                _predicted_saving_text(row.get("before")) if row.get("status") == "fixed" else None
            )
            if saving:
                detail = f"{saving} · {detail}"
            replaced = replaces_text(row, sites)
            if replaced:
                detail = f"{replaced} · {detail}"
            moved = layout.below(index)
            if moved:
                detail = ", ".join(moved) + " · " + detail
            lines.extend(style(line, _DIM) for line in wrap(detail, width - 7, " " * 7))
        if not by_count:
            # A fixed row's -8.78 ms beside "saves ~3.20 ms/step" read as two savings.
            lines.extend(
                style(line, _DIM)
                for line in wrap(
                    "before, after, change: what the site's syncs cost per step (host wait + "
                    "GPU idle right after them), not what the step gains: a step gains less "
                    "where the GPU had other work queued (what a fix saves is said under a fixed "
                    "row, the measured step time change in the summary)",
                    width,
                )
            )
    elif latent_rows:
        lines.append("  no measured synchronization in either run (CPU-only: latent sites below)")
    else:
        lines.append("  no synchronization sites in either run")
    latent = [r for r in result.get("latent_sites") or [] if r.get("status") != "same"]
    if latent:
        lines.append("")
        lines.append(style("Latent sites (CPU-only traces) that changed", _BOLD))
        for row in latent:
            lines.extend(
                wrap(
                    f"{row.get('status', '?'):<6} {_compare_location(row)} "
                    f"{row.get('func') or '-'} "
                    f"{' > '.join(row.get('ops') or [])} ({row.get('kind')})"
                    + (
                        f" · {library_text(row['library'], row.get('file'))}"
                        if (row.get("library") or {}).get("file")
                        else ""
                    )
                    + (f" · {replaced}" if (replaced := replaces_text(row, latent_rows)) else ""),
                    width,
                    "  ",
                    "       ",
                )
            )
    inexact = [row for row in sites + latent if _marked_inexact(row)]
    if inexact:
        lines.extend(wrap(COMPARE_INEXACT_NOTE, width, "  ", "    "))
    lines.append("")
    base = result.get("base") or {}
    new = result.get("new") or {}
    lines.append(style("Summary", _BOLD))
    lines.append(
        _label("syncs per step") + f"{_compare_syncs_text(base)} -> {_compare_syncs_text(new)}"
    )
    lines.append(
        _label("share of step") + f"{_compare_share_text(base)} -> {_compare_share_text(new)}"
    )
    change = result.get("wall_step_time_change_us", result.get("step_time_change_us"))
    if change is not None:
        lines.extend(
            _wrap_labelled(
                "mean step time",
                f"{format_us(_wall(base))} -> {format_us(_wall(new))} ({_change_text(change)})",
                width,
            )
        )
    predicted = result.get("predicted_saving_us")
    measured = result.get("measured_saving_us")
    if result.get("note"):
        # One run CPU-only: its step time measures another machine, as the dashboard says.
        note = str(result["note"])
        why = (
            "one run's waits were not recorded"
            if "without AscendCL calls" in note
            else "an NPU run's step time does not compare with a GPU run's"
            if "on an NPU and the other on a GPU" in note
            else "a CPU-only run's step time does not compare"
        )
        lines.extend(_wrap_labelled("saving", f"not measured: {why}", width))
    elif result.get("unmeasured") == "npu":
        lines.extend(
            _wrap_labelled(
                "saving",
                "not measured: the NPU traces recorded no AscendCL call, so no wait is in them "
                "(torch_npu's profiler level 1 records them)",
                width,
            )
        )
    elif result.get("unmeasured") == "cpu":
        # Both CPU-only: no sync waited, so nothing was predicted and the step time change
        # is CPU timing, as the dashboard says.
        lines.extend(
            _wrap_labelled(
                "saving",
                "not measured: on the CPU these syncs cost nothing, so the step time change "
                "is CPU timing, not theirs; the fixed and new latent sites are what counts",
                width,
            )
        )
    elif predicted is not None and measured is not None:
        lines.extend(_wrap_labelled("saving", _compare_saving_text(result, base), width))
    return "\n".join(lines) + "\n"


def _compare_saving_text(result: dict[str, Any], base: dict[str, Any]) -> str:
    """The baseline's prediction for what the new run fixed, beside the measured change: the
    all-syncs figure only where every baseline site was fixed (beside a fix of one site of
    several, it read as a prediction the fix missed)."""
    approx = "~" if base.get("saving_method") == "replay" else "≤"
    every = f"{approx}{format_us(float(result['predicted_saving_us']))}"
    measured = float(result["measured_saving_us"])
    measured_text = format_us(measured) if measured >= 0 else f"-{format_us(-measured)}"
    if base.get("gpu_idle_measured") is False:
        # The host wait alone bounds nothing: no prediction to set beside the measure.
        return (
            "not predicted (no task of the NPU's own in the trace), measured "
            f"{measured_text} (wall step times of the profiled runs)"
        )
    what, units = _fixed_what(result)
    rows = result.get("sites") or []
    own = "its own prediction" if units == 1 else "each one's own prediction, summed"
    of_fixed = result.get("predicted_saving_of_fixed_us")
    if not any(row.get("before") for row in rows):
        predicted = "the baseline had no sync to fix"
    elif result.get("every_site_fixed"):
        predicted = f"predicted {every} per step (every baseline site fixed)"
    elif what and of_fixed is not None:
        predicted = (
            f"predicted {approx}{format_us(float(of_fixed))} per step for what was fixed "
            f"({what}; {own}; every baseline sync: {every})"
        )
    elif what:
        # Fixed, but a report without per-site predictions: only the all-syncs figure.
        predicted = f"{what} fixed, without a prediction of its own (every baseline sync: {every})"
    else:
        predicted = f"no site fixed (every baseline sync fixed: predicted {every} per step)"
    median = result.get("measured_saving_median_us")
    how = "wall step times of the profiled runs"
    if median is not None and _mean_and_median_disagree(
        measured, median, max(_wall(base), _wall(result.get("new") or {}))
    ):
        median_text = format_us(median) if median >= 0 else f"-{format_us(-median)}"
        how = f"mean wall step times of the profiled runs; from their median steps {median_text}"
    return f"{predicted}, measured {measured_text} ({how})"


def _mean_and_median_disagree(mean_us: float, median_us: float, step_us: float) -> bool:
    """Whether the saving measured from the runs' mean steps and from their median steps
    disagree enough to say both: by a quarter of the larger and a fiftieth of the longer
    of the two runs' steps (against a tenth of the baseline's step, the demo seg's 2.73 ms
    against 1.20 ms went unsaid one way round and was said the other, whose baseline step
    was shorter). The dashboard's ``savingTexts`` holds the same rule."""
    gap = abs(median_us - mean_us)
    return gap > 0.25 * max(abs(mean_us), abs(median_us)) and gap > 0.02 * step_us


def _fixed_what(result: dict[str, Any]) -> tuple[str, int]:
    """What a comparison fixed, in words (``1 site``, ``2 lines of a site still there``,
    ``1 site and 1 line of a site still there``; empty when nothing), and how many."""
    rows = result.get("sites") or []
    sites = sum(1 for row in rows if row.get("status") == "fixed")
    merged = [row for row in rows if row.get("lines_fixed_count")]
    lines = sum(int(row["lines_fixed_count"]) for row in merged)
    parts = []
    if sites:
        parts.append(f"{sites} site{'s' if sites != 1 else ''}")
    if lines:
        parts.append(
            f"{lines} line{'s' if lines != 1 else ''} of "
            f"{'a site' if len(merged) == 1 else 'sites'} still there"
        )
    return " and ".join(parts), sites + lines


def _wall(summary: dict[str, Any]) -> float:
    """Mean step time, the longer of host and device span (the host's for old reports)."""
    return float(summary.get("mean_wall_step_time_us") or summary.get("mean_step_time_us") or 0.0)


def render(report_set: ReportSet, options: RenderOptions) -> bytes:
    """The registry's ``table`` format: one section per run when there are several, as wide
    as the terminal; files under the source root (default: the working directory) named
    relative to it, as the user's shell would (the JSON keeps them as recorded)."""
    root = options.source_root or os.getcwd()
    runs = [(name, with_relative_files(data, root)) for name, data in report_set.runs.items()]
    return render_runs(runs, color=options.color, top=options.top).encode("utf-8")


def relative_file(path: str | None, root: str | None) -> str | None:
    """``path`` relative to ``root`` where it is an absolute path under it, else as is."""
    if not path or not root or not os.path.isabs(path):
        return path
    try:
        relative = os.path.relpath(path, root)
    except ValueError:  # another drive (Windows)
        return path
    return path if relative == os.curdir or relative.startswith(os.pardir) else relative


def with_relative_files(data: dict[str, Any], root: str | None) -> dict[str, Any]:
    """A report (or compare) JSON for the terminal: its sites' files, the lines that ran a
    backward pass and the library lines that synced, relative to ``root`` where under it (a
    copy; ``data`` is unchanged).
    A trace recorded from an editable install names /home/me/repo/pkg/mod.py where the
    user, in /home/me/repo, reads pkg/mod.py."""
    if not root:
        return data
    # The file each site's syncs were read from: a path the trace recorded relative to its
    # script's folder (``main.py`` of ``vae/main.py``, run from the folder above) is named
    # as the shell names it, as SARIF does.
    read_from: dict[str, str] = {}
    for sync in (data.get("syncs") or []) + (data.get("latent") or []):
        source = sync.get("source") or {}
        key = sync.get("site_key")
        if key and key not in read_from and source.get("resolved_path"):
            read_from[key] = str(source["resolved_path"])

    def shown_file(row: dict[str, Any]) -> str | None:
        file = row.get("file")
        read = read_from.get(str(row.get("key") or ""))
        if (
            file
            and read
            and not os.path.isabs(file)
            and read.replace("\\", "/").endswith("/" + file.replace("\\", "/"))
        ):
            shown = relative_file(read, root)
            return shown if shown != read else file
        return relative_file(file, root)

    def site(row: dict[str, Any]) -> dict[str, Any]:
        changed: dict[str, Any] = {"file": shown_file(row)}
        cell = row.get("cell")
        if isinstance(cell, dict) and cell.get("notebook"):
            changed["cell"] = {**cell, "notebook": relative_file(cell["notebook"], root)}
        for field in ("run_by", "library"):  # the line that ran a backward, the one that synced
            inner = row.get(field)
            if isinstance(inner, dict) and inner.get("file"):
                changed[field] = {**inner, "file": relative_file(inner["file"], root)}
        return {**row, **changed}

    out = dict(data)
    for field in ("sites", "latent_sites"):
        if data.get(field):
            out[field] = [site(row) for row in data[field]]
    job = data.get("job")
    if isinstance(job, dict) and job.get("sites"):
        out["job"] = {**job, "sites": [site(row) for row in job["sites"]]}
    return out


def latent_not_listed(traces: list[dict[str, Any]]) -> str:
    """What a run's latent list leaves out, said under it (the terminal's and the tab's):
    torch_npu's traces without AscendCL calls (and no CPU-only trace) miss the copies, which
    only those calls show; a CPU-only trace, ``_not_listed_on_cpu``. ``traces``: the
    readable ``TraceInfo``s as JSON."""
    unrecorded = any(npu_without_calls(t) for t in traces)
    cpu = any(t.get("device") in (None, "cpu") and not t.get("has_gpu_activity") for t in traces)
    npu_text = (
        "Not listed: copies to or from the host (.cpu(), .tolist(), .to()), which only the "
        "AscendCL calls show."
    )
    if unrecorded and not cpu:
        return npu_text
    if unrecorded:  # NPU traces and CPU-only ones: what each leaves out
        return f"{npu_text[:-1]} (the NPU traces). {_not_listed_on_cpu(traces)}"
    return _not_listed_on_cpu(traces)


def unrun_syncs_text(traces: Sequence[dict[str, Any]], most: int = 5) -> str | None:
    """The explicit synchronizes a CPU-only run's functions hold, none of which ran
    (``TraceInfo.unrun_syncs``), said under its latent list: on a GPU each waits wherever
    its condition holds. None: none."""
    found: dict[tuple[str, int, str], dict[str, Any]] = {}
    calls: dict[tuple[str, int, str], int] = {}
    for trace in traces:
        for unrun in trace.get("unrun_syncs") or ():
            key = (unrun["file"], unrun["line"], unrun["code"])
            found.setdefault(key, unrun)
            calls[key] = calls.get(key, 0) + int(unrun.get("calls") or 0)
    if not found:
        return None
    steps = sum(int(trace.get("steps") or 0) for trace in traces)
    named = []
    # The user's own first: theirs to change.
    ordered = sorted(found.items(), key=lambda item: (bool(item[1].get("library")), item[0]))
    for (file, line, code), unrun in ordered[:most]:
        guard = unrun.get("guard")
        guards = unrun.get("guards") or ([guard] if guard else [])
        where = f"in {unrun.get('func')}" + (
            ", under " + " and ".join(f"`if {test}:`" for test in guards) if guards else ""
        )
        library = unrun.get("library")
        if library:
            # A library's: its path as the trace names it, whose code it is, how often it ran.
            ran_calls = calls[(file, line, code)]  # in every trace of the run
            ran = f"; its function ran {plural(ran_calls, 'time')}" + (
                f", {ran_calls / steps:.1f} a step" if steps else ""
            )
            if unrun.get("calls") is None:  # in the loop its function held as profiling began
                ran = "; in the loop it was running when profiling started"
            owner = f"{library}'" if library.endswith("s") else f"{library}'s"
            named.append(f"{file}:{line} {code} ({owner} own code, {where}{ran})")
            continue
        named.append(f"{os.path.basename(file)}:{line} {code} ({where})")
    more = f"; and {len(found) - most} more" if len(found) > most else ""
    libraries = [unrun for unrun in found.values() if unrun.get("library")]
    own = [unrun for unrun in found.values() if not unrun.get("library")]
    if not own and all(unrun.get("library") in CHECKPOINT_WRITERS for unrun in libraries):
        fix = UNRUN_CHECKPOINT_FIX
    elif not own:
        fix = "an edit of the library's own code: no setting of it is known to avoid them."
    else:
        # A copy under a test of the tensor's device (``if x.device != cpu: x = x.cpu()``)
        # is not a synchronize to drop: it is a copy to make less often.
        copies = all("synchronize" not in str(unrun.get("code")) for unrun in own)
        fix = (UNRUN_COPY_FIX if copies else UNRUN_SYNC_FIX) + (
            " A library's are edits of its own code: no setting of it is known to avoid them."
            if libraries
            else ""
        )
    return (
        "Not run on this CPU trace, but each waits for the GPU wherever it runs: "
        + "; ".join(named)
        + more
        + ". Fix: "
        + fix
    )


def library_copies_text(traces: Sequence[dict[str, Any]], most: int = 5) -> str | None:
    """The copies to the host libraries made in their own code in a CPU-only run
    (``TraceInfo.library_copies``), said under its latent list: not listed, since a library
    copies host tensors as often as not, but counted, with where. None: none. A step is
    any of the run's traces' (those of a trace without a copy had been left out: one copy
    in two traces of 5 steps each read "0.2 a step (in 1 of 5 steps)", a walk)."""
    counts: dict[tuple[Any, ...], int] = {}
    in_steps: dict[tuple[Any, ...], int] = {}  # ``steps_with_copies``, where counted
    steps = 0
    for trace in traces:
        copies = trace.get("library_copies") or ()
        steps += int(trace.get("steps") or 0)
        for copy in copies:
            key = (
                copy.get("file"),
                copy.get("line") if copy.get("line_exact") else None,
                copy.get("func"),
                copy.get("method"),
                copy.get("user_file"),
                # Marked as a site's line is where it is not certain (``user_line_exact``).
                f"{copy.get('user_line')}{'' if copy.get('user_line_exact', True) else '*'}",
            )
            counts[key] = counts.get(key, 0) + int(copy.get("count") or 0)
            in_steps[key] = in_steps.get(key, 0) + int(copy.get("steps_with_copies") or 0)
    if not counts:
        return None
    steps = max(steps, 1)
    ordered = sorted(counts.items(), key=lambda item: (-item[1], str(item[0][0]), item[0][1] or 0))
    users = {(key[4], key[5]) for key in counts}
    one_user = len(users) == 1 and next(iter(users))[0] is not None
    named = []
    for key, count in ordered[:most]:
        file, line, func, method, user_file, user_line = key
        where = f"{file}:{line}" if line is not None else str(file)
        under = "" if one_user or user_file is None else f", under {user_file}:{user_line}"
        # All in a few steps (a metric's ``compute()``): a mean a step would hide it.
        spread = in_steps.get(key, 0)
        within = f" (in {spread} of {steps} steps)" if 0 < spread < steps else ""
        named.append(
            f"{_per_step_text(count / steps)} a step{within} at {where} "
            f"({func}, .{method}(){under})"
        )
    more = f"; and {len(ordered) - most} more places" if len(ordered) > most else ""
    total = sum(counts.values())
    user_file, user_line = next(iter(users))
    return (
        "Copies to the host that libraries made in their own code, not listed: on a GPU "
        "each waits where its tensor lives there, which a CPU trace cannot tell (profile on "
        "the GPU to see): "
        + "; ".join(named)
        + more
        + f"; {_per_step_text(total / steps)} a step in all"
        + (f", under {user_file}:{user_line}" if one_user else "")
        + "."
    )


# What to do about an explicit synchronize a CPU trace shows only in the source (it had no
# fix of its own, a user's walk found): most time a step, as build-nanogpt's does.
UNRUN_SYNC_FIX = (
    f"{catalogue_kind(EXPLICIT_SYNC).advice.title.lower()}; to time steps, synchronize only "
    "every N steps, or record torch.cuda.Event(enable_timing=True) and read it every N steps."
)


# What to do about a copy to the host that runs only off the host (``if x.is_cuda:
# x = x.cpu()``): one copy where several were, as for any copy back.
UNRUN_COPY_FIX = (
    "keep the values on the device and copy them back once, after the loop or every N "
    "steps (one torch.stack(...).cpu() for several)."
)


# What to do about a checkpoint writer's unrun copies (``catalogue.CHECKPOINT_WRITERS``):
# a checkpoint has to reach the host (a walk: "no setting of it is known" for copies whose
# frequency is the user's ``checkpointing_steps``).
UNRUN_CHECKPOINT_FIX = (
    "a checkpoint has to reach the host, so each save copies every tensor and waits for the "
    "GPU: save less often (a larger checkpoint interval, accelerate's checkpointing_steps), "
    "or only at the end."
)


def _not_listed_on_cpu(traces: list[dict[str, Any]]) -> str:
    """What a CPU-only trace's latent list leaves out: ``.cpu()`` and ``.tolist()`` are
    seen only as recorded calls (``with_stack``) of the user's own code (a library's are of
    host tensors as often as not: ``catalogue.LATENT_TENSOR_METHODS``), the other copies
    never."""
    cpu = [t for t in traces if t.get("device") == "cpu"]
    if cpu and all(t.get("has_stacks") for t in cpu):
        # Those counted (``library_copies_text``) are said apart: here, the others.
        other = "other " if any(t.get("library_copies") for t in traces) else ""
        return (
            "Not listed on a CPU-only trace: .to() copies whose line does not name the host "
            f"(.to(device)), the {other}copies libraries make in their own code (torchvision's "
            "save_image, torch.save of GPU tensors) and pageable uploads; nothing on a CPU "
            "run says which tensors would live on the GPU. Profile on the GPU to see them."
        )
    return (
        "Not listed on a CPU-only trace without Python stacks: copies to or from the host "
        "(.cpu(), .tolist(), .to(), pageable uploads), and reads inside a DataLoader's fetch "
        "or an Adam-family optimizer's step, taken for torch's own of host tensors (a read "
        "of yours there, in a dataset on the GPU or a step hook, cannot be told from them). "
        "Record with with_stack=True to list .cpu(), .tolist() and .to('cpu') and to tell "
        "those reads apart; profile on the GPU to see the rest."
    )


def _per_step_text(value: float) -> str:
    """A rate per step: one decimal, and a rate below 0.1 to its first significant digit
    (a site synced 800 times in 40,000 steps is 0.02 per step, not 0.0)."""
    if value == 0 or abs(value) >= 0.095 or value != value:
        return f"{value:.1f}"
    decimals = min(6, -math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"
