"""Speed and memory of the engine on one trace, against torch-tb-profiler, HTA and the floor.

    python bench/bench_engine.py [TRACE] [-n 3]
    python bench/bench_engine.py --resnet --synthetic-gb 1 -n 3 --only engine --only floor
    python bench/bench_engine.py --hta-python /tmp/hta-venv/bin/python   # HTA in its own venv

Times ``tb_syncfinder.analyze``, the reader alone (``read_trace``), the floor (gunzip + a
typed msgspec decode of the fields the analysis needs, the whole document at once),
torch_tb_profiler's ``RunProfileData.parse`` (what the PyTorch Profiler tab runs per
file), HolisticTraceAnalysis where installed, ``gzip`` + ``json.loads`` and ``gzip`` +
``msgspec.json.decode`` of the same file, and ``one_pass``: one Python loop reading each
decoded event's fields once (the trace read before the timing), the least any analysis in
Python adds to the read. Each run is its own child process, so that its
peak RSS increase (``VmHWM`` after minus before, imports excluded) is its own; runs are
interleaved (round 1 of every subject, then round 2, ...) and the median is reported, as
the machine may be shared and loaded: compare the ratios, not the seconds.

``--resnet`` adds a ResNet-shaped trace recorded with ``record_shapes`` and stacks
(``tests/trace_shapes.resnet_like``); ``--shapes MB`` a trace of about MB MB per shape of
``tests/trace_shapes.py`` (its events repeated: stacks, ``record_shapes``, CUDA sync events,
ROCm, Ascend's array format, torch 1.x); ``--long-run STEPS`` a long run of short steps, two
syncs each at 300 lines (the shape whose what-if replay dominates); ``--synthetic-gb G`` a
trace of about G GB of JSON
(the ResNet steps repeated, times shifted); ``--window-mb MB`` also times the engine
analysing in windows of MB of JSON (``engine_windows``: a trace past the memory budget,
``tb_syncfinder/windows.py``). Prints the times, the ratios and PASS/MISS for
the targets: engine >= 10x faster than torch-tb-profiler, within 1.3x of the floor, peak
memory < 1x the JSON size on the largest trace, and a Markdown table for docs/performance.md.
"""

from __future__ import annotations

import argparse
import gzip
import importlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Union

import msgspec

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE_NAME = "a100_df_index_resolver.pt.trace.json.gz"
CANDIDATES = [
    Path("/work/shared/traces/real") / DEFAULT_TRACE_NAME,
    REPO.parent / "shared" / "traces" / "real" / DEFAULT_TRACE_NAME,
]
SUBJECTS = (
    "engine",
    "engine_windows",
    "reader",
    "one_pass",
    "floor",
    "torch_tb_profiler",
    "hta",
    "json_loads",
    "msgspec_decode",
)
# The window size of ``engine_windows`` (``--window-mb``), passed to the child processes.
WINDOW_ENV = "BENCH_ENGINE_WINDOW_MB"

TARGET_VS_TB = 10.0  # engine at least this many times faster than torch-tb-profiler
TARGET_VS_FLOOR = 1.3  # engine at most this many times the floor
TARGET_MEMORY = 1.0  # engine peak RSS increase below this many times the JSON size (1 GB)


def _proc_status_bytes(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024  # "VmHWM:   123 kB"
    except OSError:
        pass
    return None


def _reset_peak_rss() -> None:
    # Linux keeps ru_maxrss across fork+exec: a child spawned by this (big) parent starts
    # with the parent's high-water mark, which hid ~90 MB of the engine's peak. Writing
    # "5" to clear_refs resets this process's VmHWM to its current RSS (Linux >= 4.0).
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as clear_refs:
            clear_refs.write("5")
    except OSError:
        pass


def _peak_rss_bytes() -> int:
    # VmHWM is this process's own high-water mark (not inherited across exec).
    peak = _proc_status_bytes("VmHWM")
    if peak is not None:
        return peak
    # Elsewhere ru_maxrss: Linux reports it in KiB, macOS in bytes.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _read_json_bytes(path: str) -> bytes:
    raw = Path(path).read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


_ENGINE_LAZY_MODULES = (
    "tb_syncfinder.engine",
    "tb_syncfinder.whatif",
    "tb_syncfinder.jobs",
    "tb_syncfinder.windows",
    "tb_syncfinder.discovery",
    "tb_syncfinder.summaries",
    "tb_syncfinder.demo.sources",
    "torch_tb_profiler.consts",
)


def _subject(name: str, path: str) -> Callable[[], Any]:
    """Import what ``name`` needs (outside the timing) and return the call to time."""
    if name in ("engine", "engine_windows"):
        import tb_syncfinder

        # The stages the engine imports on first use (the replay and numpy with it, the
        # job stage, the windows): their import is start-up, which bench_startup.py
        # measures, and would otherwise be most of the time and memory on a small trace.
        for module in _ENGINE_LAZY_MODULES:
            importlib.import_module(module)
    if name == "engine":
        return lambda: tb_syncfinder.analyze(path)
    if name == "engine_windows":
        window_bytes = int(float(os.environ.get(WINDOW_ENV, "256")) * 1e6)
        return lambda: tb_syncfinder.analyze(path, window_bytes=window_bytes)
    if name == "torch_tb_profiler":
        from torch_tb_profiler.profiler.data import RunProfileData

        cache_dir = tempfile.mkdtemp(prefix="bench_tbprof_")
        return lambda: RunProfileData.parse("worker0", None, path, cache_dir)
    if name == "reader":
        from tb_syncfinder.reader import read_trace

        return lambda: read_trace(path)
    if name == "one_pass":
        # What the least Python analysis costs after the read: one loop reading each
        # complete event's fields once (the engine's stages make about a dozen passes).
        from tb_syncfinder.reader import Event, read_trace

        events = read_trace(path).events

        def touch_each_event() -> Any:
            fields = None
            for e in events:
                if type(e) is Event:
                    fields = (e.ts, e.dur, e.name, e.cat, e.pid, e.tid, e.args)
            return fields

        return touch_each_event
    if name == "floor":
        decoder = _floor_decoder()
        return lambda: decoder.decode(_read_json_bytes(path))
    if name == "hta":
        from hta.trace_analysis import TraceAnalysis

        folder = tempfile.mkdtemp(prefix="bench_hta_")
        os.symlink(
            os.path.abspath(path),
            os.path.join(
                folder, "rank0.pt.trace.json.gz" if path.endswith(".gz") else "rank0.pt.trace.json"
            ),
        )
        return lambda: TraceAnalysis(trace_dir=folder)
    if name == "json_loads":
        return lambda: json.loads(_read_json_bytes(path))
    if name == "msgspec_decode":
        import msgspec

        return lambda: msgspec.json.decode(_read_json_bytes(path))
    raise ValueError(f"unknown subject {name!r}")


class FloorArgs(msgspec.Struct, gc=False):
    external_id: Union[int, str, None] = msgspec.field(default=None, name="External id")
    correlation: Union[int, str, None] = None
    python_id: Union[int, str, None] = msgspec.field(default=None, name="Python id")
    python_parent_id: Union[int, str, None] = msgspec.field(default=None, name="Python parent id")


class FloorEvent(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: Union[int, str] = 0
    tid: Union[int, str] = 0
    ts: float = 0.0
    dur: float = 0.0
    args: Union[FloorArgs, None] = None


class FloorTrace(msgspec.Struct, gc=False):
    traceEvents: list[FloorEvent] = []  # noqa: N815 (the JSON name), RUF012


class _FloorDecoder:
    """The least any reader must do: a typed decode of the fields the analysis reads (of
    the trace document, or of the bare event list torch_npu writes)."""

    def __init__(self) -> None:
        self.document = msgspec.json.Decoder(FloorTrace, strict=False)
        self.event_list = msgspec.json.Decoder(list[FloorEvent], strict=False)

    def decode(self, data: bytes) -> Any:
        if data[:64].lstrip()[:1] == b"[":  # not data.lstrip(): a timed copy of it all
            return self.event_list.decode(data)
        return self.document.decode(data)


def _floor_decoder() -> Any:
    return _FloorDecoder()


def run_child(name: str, path: str, repeat: int) -> dict[str, Any]:
    """In the child process: time ``name`` ``repeat`` times; report best time and peak RSS."""
    call = _subject(name, path)
    _reset_peak_rss()
    before = _peak_rss_bytes()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - start)
        del result
    return {
        "name": name,
        "best_s": min(times),
        "times_s": times,
        "peak_rss_increase": max(_peak_rss_bytes() - before, 0),
    }


# The interpreter each subject runs under: HTA pins pandas and numpy versions of its own,
# so it is installed in a benchmark venv of its own (``--hta-python``), never beside the
# engine.
_PYTHON_FOR: dict[str, str] = {}


def _spawn(name: str, path: str, repeat: int) -> dict[str, Any]:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        ),
    )
    # An installed package has its .pyc files. Compiling stale sources at import grows the
    # heap before the measurement starts, and the analysis then reuses that memory: one
    # checkout measured 5 MB less peak RSS than another with the same code.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    proc = subprocess.run(
        [_PYTHON_FOR.get(name, sys.executable), __file__, "--child", name, "-n", str(repeat), path],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        return {"name": name, "error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def measure(path: str, subjects: list[str], rounds: int) -> dict[str, dict[str, Any]]:
    """Interleaved rounds, one child per run; per subject the median time and peak RSS."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in subjects}
    errors: dict[str, str] = {}
    for _ in range(rounds):
        for name in subjects:
            if name in errors:
                continue
            result = _spawn(name, path, 1)
            if "error" in result:
                errors[name] = result["error"]
            else:
                runs[name].append(result)
    out: dict[str, dict[str, Any]] = {}
    for name in subjects:
        if name in errors:
            out[name] = {"name": name, "error": errors[name]}
        elif runs[name]:
            out[name] = {
                "name": name,
                "median_s": _median([r["best_s"] for r in runs[name]]),
                "times_s": [r["best_s"] for r in runs[name]],
                "peak_rss_increase": _median([r["peak_rss_increase"] for r in runs[name]]),
            }
    return out


def write_resnet_trace(folder: Path, steps: int = 160) -> Path:
    """A ResNet-shaped CUDA trace with record_shapes, stacks and modules (gzip)."""
    sys.path.insert(0, str(REPO / "tests"))
    from trace_shapes import resnet_like

    path = folder / "resnet_shapes.pt.trace.json.gz"
    with gzip.open(path, "wt", compresslevel=1) as out:
        json.dump(resnet_like(steps), out)
    return path


def write_long_run_trace(folder: Path, steps: int) -> Path:
    """A long run of short GPU steps, each with a ``.item()`` at one of 250 lines and a
    boolean mask at one of 50 (``tests/kineto_builder.py``): 2 syncs per step, 300 sites,
    the shape whose replay grows with syncs x steps."""
    sys.path.insert(0, str(REPO / "tests"))
    from kineto_builder import KinetoTraceBuilder, item_sync, mask_index_sync

    builder = KinetoTraceBuilder()
    for n in range(1, steps + 1):
        with builder.step(n):
            item_sync(builder, stack=[("train.py", 10 + n % 250, "train_step")], kernel_us=300)
            mask_index_sync(
                builder, sequence_number=n, stack=[("model.py", 500 + n % 50, "forward")]
            )
    return builder.write(folder / f"long_run_{steps}.pt.trace.json")


# Ids that must stay unique in a trace: a repetition that kept them would join every
# repetition's kernels to one launch (correlation), hang every repetition's Python calls
# under one frame (Python parent id) and make analysis time grow with the square of the size.
_ID_ARGS = (
    "External id",
    "correlation",
    "Python id",
    "Python parent id",
    "Sequence number",
    "Ev Idx",
)
_STEP_PREFIX = "ProfilerStep#"


def _time(value: Any) -> float:
    """A ``ts`` or ``dur`` as a number: torch_npu writes ``ts`` as a string."""
    return float(value) if isinstance(value, str) else value


def _repeated(event: dict[str, Any], rep: int, shift: float, steps_per_rep: int) -> dict[str, Any]:
    """``event`` as it would be in the ``rep``-th repetition of the recorded steps: times
    shifted (a string time stays a string, as torch_npu writes it), ids and step numbers
    made unique."""
    ts = event["ts"]
    out = {**event, "ts": f"{float(ts) + shift:.3f}" if isinstance(ts, str) else ts + shift}
    args = event.get("args")
    if isinstance(args, dict):
        out["args"] = {
            k: v + rep * 10**7 if k in _ID_ARGS and isinstance(v, int) and v >= 0 else v
            for k, v in args.items()
        }
    if isinstance(event.get("id"), int):
        out["id"] = event["id"] + rep * 10**7
    name = event.get("name")
    if (
        isinstance(name, str)
        and name.startswith(_STEP_PREFIX)
        and name[len(_STEP_PREFIX) :].isdigit()
    ):
        out["name"] = f"{_STEP_PREFIX}{int(name[len(_STEP_PREFIX) :]) + rep * steps_per_rep}"
    return out


def write_synthetic_trace(folder: Path, gigabytes: float) -> Path:
    """About ``gigabytes`` GB of JSON: ResNet steps repeated with shifted times, written
    as it goes (never the whole document in memory)."""
    sys.path.insert(0, str(REPO / "tests"))
    from trace_shapes import resnet_like

    path = folder / f"synthetic_{gigabytes:g}gb.pt.trace.json"
    return write_repeated_trace(path, resnet_like(4), int(gigabytes * 1e9))


def write_shape_traces(folder: Path, megabytes: float) -> list[Path]:
    """One trace of about ``megabytes`` MB of JSON per shape of ``tests/trace_shapes.py``
    (stacks, ``record_shapes``, CUDA sync events, ROCm, Ascend's array format with string
    times, torch 1.x): each shape's events repeated, as a recording of many steps."""
    sys.path.insert(0, str(REPO / "tests"))
    from trace_shapes import SHAPES, shape

    return [
        write_repeated_trace(
            folder / f"shape_{name}.pt.trace.json", shape(name), int(megabytes * 1e6)
        )
        for name in SHAPES
    ]


def write_repeated_trace(path: Path, doc: Union[dict[str, Any], list[Any]], size: int) -> Path:
    """About ``size`` bytes of JSON: ``doc``'s timed events repeated with shifted times
    (after its metadata events, once), written as it goes. ``doc``: a trace document, or
    an event list (torch_npu's array format)."""
    events = list(doc) if isinstance(doc, list) else doc.pop("traceEvents")
    timed = [e for e in events if "ts" in e and e.get("ph") != "M"]
    span = (
        max(_time(e["ts"]) + _time(e.get("dur", 0)) for e in timed)
        - min(_time(e["ts"]) for e in timed)
        + 1000
    )
    meta = [e for e in events if e not in timed]
    written = 0
    with open(path, "w", encoding="utf-8") as out:
        if isinstance(doc, list):
            head = json.dumps(meta)[:-1]  # [meta events
        else:
            head = json.dumps({**doc, "traceEvents": meta})[:-2]  # ...[meta events
        out.write(head)
        written += len(head)
        rep = 0
        steps_per_rep = len(
            {e["name"] for e in timed if str(e.get("name", "")).startswith("ProfilerStep#")}
        )
        while written < size:
            # msgspec's encoder: json.dumps made a 10 GB trace take half an hour to write.
            text = msgspec.json.encode(
                [_repeated(e, rep, rep * span, steps_per_rep) for e in timed]
            ).decode()
            out.write(("," if meta or rep else "") + text[1:-1])
            written += len(text) - 1
            rep += 1
        out.write("]" if isinstance(doc, list) else "]}")
    return path


def _default_trace() -> str | None:
    for candidate in CANDIDATES:
        if candidate.is_file():
            return str(candidate)
    return None


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def _ratio(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    if "median_s" in a and "median_s" in b and b["median_s"] > 0:
        return a["median_s"] / b["median_s"]
    return None


def _fmt(value: float | None, suffix: str = "x") -> str:
    return "–" if value is None else f"{value:.2f}{suffix}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "trace",
        nargs="*",
        help=f"trace files (default: {DEFAULT_TRACE_NAME} from ../shared/traces/real)",
    )
    parser.add_argument(
        "-n", "--repeat", type=int, default=3, help="interleaved rounds per subject (median)"
    )
    parser.add_argument("--child", choices=SUBJECTS, help=argparse.SUPPRESS)
    parser.add_argument(
        "--only", choices=SUBJECTS, action="append", help="time only these subjects (repeatable)"
    )
    parser.add_argument(
        "--resnet", action="store_true", help="add a ResNet-shaped trace with record_shapes"
    )
    parser.add_argument(
        "--synthetic-gb",
        type=float,
        default=0.0,
        metavar="G",
        help="add a synthetic trace of about G GB of JSON",
    )
    parser.add_argument(
        "--long-run",
        type=int,
        default=0,
        metavar="STEPS",
        help="add a long run of STEPS short steps with 2 syncs each (10000: 42 MB of JSON)",
    )
    parser.add_argument(
        "--shapes",
        type=float,
        default=0.0,
        metavar="MB",
        help="add a trace of about MB MB of JSON of each shape of tests/trace_shapes.py "
        "(stacks, record_shapes, CUDA sync events, ROCm, Ascend, torch 1.x)",
    )
    parser.add_argument("--workdir", help="where generated traces go (default: a temp dir)")
    parser.add_argument(
        "--window-mb",
        type=float,
        metavar="MB",
        help="also time the engine analysing in windows of MB of JSON (engine_windows)",
    )
    parser.add_argument(
        "--hta-python",
        metavar="PYTHON",
        help="run the hta subject under this interpreter (a venv with HolisticTraceAnalysis "
        "and msgspec: python -m venv V && V/bin/pip install HolisticTraceAnalysis msgspec)",
    )
    args = parser.parse_args(argv)
    if args.hta_python:
        _PYTHON_FOR["hta"] = args.hta_python
    if args.window_mb:
        os.environ[WINDOW_ENV] = str(args.window_mb)

    if args.child:
        print(json.dumps(run_child(args.child, args.trace[0], args.repeat)))
        return 0
    paths = list(args.trace)
    generated = args.resnet or args.synthetic_gb or args.long_run or args.shapes
    if not paths and not generated:
        default = _default_trace()
        if default is None:
            print(f"bench_engine: no trace at {' or '.join(map(str, CANDIDATES))}", file=sys.stderr)
            return 2
        paths.append(default)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="bench_engine_"))
    workdir.mkdir(parents=True, exist_ok=True)
    if args.resnet:
        paths.append(str(write_resnet_trace(workdir)))
    if args.synthetic_gb:
        paths.append(str(write_synthetic_trace(workdir, args.synthetic_gb)))
    if args.long_run:
        paths.append(str(write_long_run_trace(workdir, args.long_run)))
    if args.shapes:
        paths.extend(str(p) for p in write_shape_traces(workdir, args.shapes))
    subjects = args.only or [s for s in SUBJECTS if s != "engine_windows" or args.window_mb]
    misses = 0
    rows = []
    for path in paths:
        if not Path(path).is_file():
            print(f"bench_engine: no trace at {path}", file=sys.stderr)
            return 2
        json_size = _json_size(path)
        print(f"trace: {path}")
        print(
            f"size: {_mb(Path(path).stat().st_size)} on disk, {_mb(json_size)} of JSON; "
            f"median of {args.repeat} interleaved rounds"
        )
        results = measure(path, subjects, args.repeat)
        for name, result in results.items():
            if "error" in result:
                print(f"  {name:<18} FAILED: {result['error']}")
            else:
                print(
                    f"  {name:<18} {result['median_s']:8.3f} s   peak RSS +"
                    f"{_mb(result['peak_rss_increase'])}   runs "
                    + " ".join(f"{t:.3f}" for t in result["times_s"])
                )
        one_pass = _ratio(results.get("one_pass", {}), results.get("floor", {}))
        if one_pass is not None:
            print(f"  one Python pass over the decoded events / floor: {one_pass:.2f}x")
        engine = results.get("engine", {})
        if "median_s" not in engine:
            misses += 1
            continue
        vs_floor = _ratio(engine, results.get("floor", {}))
        vs_tb = _ratio(results.get("torch_tb_profiler", {}), engine)
        vs_hta = _ratio(results.get("hta", {}), engine)
        reader_vs_floor = _ratio(results.get("reader", {}), results.get("floor", {}))
        memory = engine["peak_rss_increase"] / json_size
        floor_memory = (
            results["floor"]["peak_rss_increase"] / json_size
            if "median_s" in results.get("floor", {})
            else None
        )
        print("ratios:")
        if vs_floor is not None:
            ok = vs_floor <= TARGET_VS_FLOOR
            misses += not ok
            print(
                f"  engine / floor: {vs_floor:.2f}x the time (target <= {TARGET_VS_FLOOR}x)"
                f"  {'PASS' if ok else 'MISS'}"
            )
        if vs_tb is not None:
            ok = vs_tb >= TARGET_VS_TB
            misses += not ok
            print(
                f"  torch_tb_profiler / engine: {vs_tb:.1f}x (target >= {TARGET_VS_TB:.0f}x)"
                f"  {'PASS' if ok else 'MISS'}"
            )
        if vs_hta is not None:
            print(f"  HTA / engine: {vs_hta:.1f}x")
        print(f"  engine peak RSS increase / JSON size: {memory:.2f}x")
        windowed = results.get("engine_windows", {})
        if "median_s" in windowed:
            print(
                f"  engine in windows of {os.environ.get(WINDOW_ENV)} MB: "
                f"{windowed['median_s'] / engine['median_s']:.2f}x the time of a whole read, "
                f"peak RSS increase / JSON size {windowed['peak_rss_increase'] / json_size:.2f}x"
            )
            memory = min(memory, windowed["peak_rss_increase"] / json_size)
        rows.append(
            (
                Path(path).name,
                json_size,
                engine["median_s"],
                vs_floor,
                reader_vs_floor,
                vs_tb,
                vs_hta,
                memory,
                floor_memory,
            )
        )
    if paths and rows:
        largest = max(rows, key=lambda r: r[1])
        ok = largest[7] < TARGET_MEMORY
        misses += not ok
        print(
            f"largest trace: peak RSS {largest[7]:.2f}x its JSON (target < "
            f"{TARGET_MEMORY:.0f}x)  {'PASS' if ok else 'MISS'}"
        )
    print()
    print(
        "| trace | JSON | engine (median) | engine / floor | reader / floor "
        "| tb-profiler / engine | HTA / engine | engine peak RSS / JSON "
        "| floor peak RSS / JSON |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, size, median, vs_floor, reader, vs_tb, vs_hta, memory, floor_memory in rows:
        print(
            f"| {name} | {_mb(size)} | {median:.2f} s | {_fmt(vs_floor)} | {_fmt(reader)} "
            f"| {_fmt(vs_tb)} | {_fmt(vs_hta)} | {memory:.2f}x | {_fmt(floor_memory)} |"
        )
    return 0 if misses == 0 else 1


def _json_size(path: str) -> int:
    """Inflated size, counted as it streams (a 1 GB trace is never held here)."""
    with open(path, "rb") as handle:
        if handle.read(2) != b"\x1f\x8b":
            return Path(path).stat().st_size
    total = 0
    with gzip.open(path, "rb") as stream:
        while block := stream.read(1 << 24):
            total += len(block)
    return total


if __name__ == "__main__":
    sys.exit(main())
