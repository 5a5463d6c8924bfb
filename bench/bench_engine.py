"""Speed and memory of the engine on one trace, against torch-tb-profiler and a bare decode.

    python bench/bench_engine.py [TRACE] [-n 3]

Times (best of N) ``tb_syncfinder.analyze``, torch_tb_profiler's
``RunProfileData.parse`` (what the PyTorch Profiler tab runs per file), ``gzip`` +
``json.loads`` and ``gzip`` + ``msgspec.json.decode`` of the same file; each runs in its own
child process so that its peak RSS increase (``VmHWM`` after minus before, imports
excluded) is its own. Prints the times, the ratios and PASS/MISS for the targets:
engine >= 10x faster than torch-tb-profiler, within 2x of the bare json.loads decode, peak
memory < 3x the JSON size.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE_NAME = "a100_df_index_resolver.pt.trace.json.gz"
CANDIDATES = [
    Path("/work/shared/traces/real") / DEFAULT_TRACE_NAME,
    REPO.parent / "shared" / "traces" / "real" / DEFAULT_TRACE_NAME,
]
SUBJECTS = ("engine", "torch_tb_profiler", "json_loads", "msgspec_decode")

TARGET_VS_TB = 10.0  # engine at least this many times faster than torch-tb-profiler
TARGET_VS_DECODE = 2.0  # engine at most this many times slower than a bare json.loads
TARGET_MEMORY = 3.0  # engine peak RSS increase at most this many times the JSON size


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


def _subject(name: str, path: str) -> Callable[[], Any]:
    """Import what ``name`` needs (outside the timing) and return the call to time."""
    if name == "engine":
        import tb_syncfinder

        return lambda: tb_syncfinder.analyze(path)
    if name == "torch_tb_profiler":
        from torch_tb_profiler.profiler.data import RunProfileData

        cache_dir = tempfile.mkdtemp(prefix="bench_tbprof_")
        return lambda: RunProfileData.parse("worker0", None, path, cache_dir)
    if name == "json_loads":
        return lambda: json.loads(_read_json_bytes(path))
    if name == "msgspec_decode":
        import msgspec

        return lambda: msgspec.json.decode(_read_json_bytes(path))
    raise ValueError(f"unknown subject {name!r}")


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
    return {"name": name, "best_s": min(times), "times_s": times,
            "peak_rss_increase": max(_peak_rss_bytes() - before, 0)}


def _spawn(name: str, path: str, repeat: int) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    proc = subprocess.run(
        [sys.executable, __file__, "--child", name, "-n", str(repeat), path],
        capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        return {"name": name, "error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _default_trace() -> str | None:
    for candidate in CANDIDATES:
        if candidate.is_file():
            return str(candidate)
    return None


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", nargs="?", help=f"trace file (default: {DEFAULT_TRACE_NAME} "
                                                 "from ../shared/traces/real)")
    parser.add_argument("-n", "--repeat", type=int, default=3, help="runs per subject (best)")
    parser.add_argument("--child", choices=SUBJECTS, help=argparse.SUPPRESS)
    parser.add_argument("--only", choices=SUBJECTS, action="append",
                        help="time only these subjects (repeatable)")
    args = parser.parse_args(argv)

    path = args.trace or _default_trace()
    if not path or not Path(path).is_file():
        print(f"bench_engine: no trace at {path or ' or '.join(map(str, CANDIDATES))}",
              file=sys.stderr)
        return 2
    if args.child:
        print(json.dumps(run_child(args.child, path, args.repeat)))
        return 0

    json_size = len(_read_json_bytes(path))
    file_size = Path(path).stat().st_size
    print(f"trace: {path}")
    print(f"size: {_mb(file_size)} on disk, {_mb(json_size)} of JSON; best of {args.repeat}")
    results: dict[str, dict[str, Any]] = {}
    for name in args.only or SUBJECTS:
        result = _spawn(name, path, args.repeat)
        results[name] = result
        if "error" in result:
            print(f"  {name:<18} FAILED: {result['error']}")
        else:
            print(f"  {name:<18} {result['best_s']:8.3f} s   peak RSS +"
                  f"{_mb(result['peak_rss_increase'])}")

    engine = results.get("engine", {})
    if "best_s" not in engine:
        return 1
    print("ratios:")
    misses = 0

    def verdict(ok: bool) -> str:
        nonlocal misses
        misses += 0 if ok else 1
        return "PASS" if ok else "MISS"

    tb = results.get("torch_tb_profiler", {})
    if "best_s" in tb:
        speedup = tb["best_s"] / engine["best_s"]
        print(f"  engine vs torch_tb_profiler: {speedup:6.1f}x faster "
              f"(target >= {TARGET_VS_TB:.0f}x)  {verdict(speedup >= TARGET_VS_TB)}")
    decode = results.get("json_loads", {})
    if "best_s" in decode:
        slower = engine["best_s"] / decode["best_s"]
        print(f"  engine vs gunzip+json.loads: {slower:6.2f}x the time "
              f"(target <= {TARGET_VS_DECODE:.0f}x)  {verdict(slower <= TARGET_VS_DECODE)}")
    fast_decode = results.get("msgspec_decode", {})
    if "best_s" in fast_decode:
        print(f"  engine vs gunzip+msgspec.json.decode: "
              f"{engine['best_s'] / fast_decode['best_s']:6.2f}x the time (no target)")
    memory = engine["peak_rss_increase"] / json_size
    print(f"  engine peak RSS increase / JSON size: {memory:6.2f}x "
          f"(target < {TARGET_MEMORY:.0f}x)  {verdict(memory < TARGET_MEMORY)}")
    return 0 if misses == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
