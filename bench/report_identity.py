"""Prove that a refactoring changed no output: the JSON report of every trace, byte for byte.

    python bench/report_identity.py write SNAPSHOT_DIR [--demo-logdir DIR]
    python bench/report_identity.py check SNAPSHOT_DIR [--demo-logdir DIR]

``write`` analyses every trace in ``../shared/traces`` (real and H100 demo runs) and every
run of the demo logdir (recorded once by ``tb-syncfinder demo --no-tensorboard`` into
``--demo-logdir`` if it is not there yet) and stores, per input, the report JSON
(``tb_syncfinder.analyze``) plus the detail-view contexts of each sync
(``engine.analyze_trace``), serialised with sorted keys. ``check`` does the same again and
compares the bytes: it prints one line per input (identical, or the first differing JSON
path) and exits 1 when any differs. Keep the demo logdir between the two: re-recording
makes new traces with new timings.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "traces"


def _inputs(demo_logdir: Path) -> list[tuple[str, Path]]:
    inputs: list[tuple[str, Path]] = []
    for folder in ("real", "h100_demo"):
        for path in sorted((SHARED_TRACES / folder).glob("*.pt.trace.json*")):
            inputs.append((f"{folder}/{path.name}", path))
    if demo_logdir.is_dir():
        for run in sorted(p for p in demo_logdir.iterdir() if p.is_dir()):
            inputs.append((f"demo/{run.name}", run))
        inputs.append(("demo/(logdir)", demo_logdir))
    return inputs


def _record_demo(demo_logdir: Path) -> None:
    if demo_logdir.is_dir() and any(demo_logdir.iterdir()):
        return
    print(f"recording the demo runs into {demo_logdir} (once)", file=sys.stderr)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "tb_syncfinder",
            "demo",
            "--no-tensorboard",
            "--logdir",
            str(demo_logdir),
        ],
        check=True,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
    )


def _snapshot(path: Path) -> dict[str, Any]:
    from tb_syncfinder import analyze
    from tb_syncfinder.discovery import find_traces
    from tb_syncfinder.engine import Options, analyze_trace

    report = analyze(str(path), source_roots=[str(REPO)]).to_json()
    options = Options(source_roots=(str(REPO),))
    contexts = {}
    for ref in find_traces(str(path)):
        contexts.update(analyze_trace(ref, options).contexts)
    return {"report": report, "contexts": contexts}


def _differences(a: Any, b: Any, where: str = "$") -> list[str]:
    """Every JSON path where ``a`` and ``b`` differ (a list of unequal length is one)."""
    if type(a) is not type(b):
        return [f"{where}: {type(a).__name__} vs {type(b).__name__}"]
    if isinstance(a, dict):
        found = []
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                found.append(f"{where}.{key}: only in {'new' if key in b else 'snapshot'}")
            else:
                found.extend(_differences(a[key], b[key], f"{where}.{key}"))
        return found
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} vs {len(b)} items"]
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in _differences(x, y, f"{where}[{i}]")
        ]
    return [] if a == b else [f"{where}: {a!r} vs {b!r}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("write", "check"))
    parser.add_argument("snapshot_dir", type=Path)
    parser.add_argument("--demo-logdir", type=Path, default=Path("/tmp/report-identity-demo"))
    parser.add_argument("--show", type=int, default=5, help="differing paths shown per input")
    args = parser.parse_args(argv)
    _record_demo(args.demo_logdir)
    args.snapshot_dir.mkdir(parents=True, exist_ok=True)
    differing = 0
    for name, path in _inputs(args.demo_logdir):
        text = json.dumps(_snapshot(path), sort_keys=True, indent=1)
        stored = args.snapshot_dir / (name.replace("/", "__") + ".json")
        if args.mode == "write":
            stored.write_text(text)
            print(f"wrote      {name}")
            continue
        if not stored.exists():
            print(f"NO SNAPSHOT {name}")
            differing += 1
            continue
        old = stored.read_text()
        if old == text:
            print(f"identical  {name}")
        else:
            differing += 1
            found = _differences(json.loads(old), json.loads(text))
            print(f"DIFFERS    {name}: {len(found)} paths")
            for line in found[: args.show]:
                print(f"    {line[:160]}")
    if args.mode == "check":
        print(f"{differing} of {len(_inputs(args.demo_logdir))} inputs differ")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
