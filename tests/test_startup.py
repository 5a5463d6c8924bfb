"""Start-up: every module imports on its own, and a report loads only the stages it runs.

Speed itself is measured by ``bench/bench_startup.py``; these check the structure that
keeps it: no import cycle that only works in one order, and the replay (numpy) and the
job stage imported only for a trace that needs them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

from kineto_builder import KinetoTraceBuilder

import tb_syncfinder

REPO = Path(__file__).resolve().parents[1]
# The demo's workloads import torch and run at import, and ``__main__`` runs the CLI.
NOT_IMPORTED_ALONE = {"tb_syncfinder.demo.cnn", "tb_syncfinder.demo.seg", "tb_syncfinder.__main__"}
if importlib.util.find_spec("torch") is None:  # the demo needs torch; the tool does not
    NOT_IMPORTED_ALONE |= {"tb_syncfinder.demo.cli", "tb_syncfinder.demo.runner"}


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("OPENBLAS_NUM_THREADS", None)
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_every_module_imports_first_in_a_fresh_interpreter() -> None:
    names = sorted(
        m.name
        for m in pkgutil.walk_packages(tb_syncfinder.__path__, "tb_syncfinder.")
        if m.name not in NOT_IMPORTED_ALONE
    )
    # Each module imported first, with every tb_syncfinder module forgotten before: an
    # import cycle that works only when another module happens to be imported first fails.
    code = """
import importlib, sys, traceback
failed = []
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m.split(".")[0] == "tb_syncfinder"]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception:
        failed.append(name + ": " + traceback.format_exc(limit=1).strip().splitlines()[-1])
print("\\n".join(failed))
"""
    proc = _python(code, *names)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", proc.stdout
    assert len(names) > 30


def _loaded_after_report(trace: Path) -> tuple[set[str], dict, int | None]:
    """The modules a report loaded, the report, and the process's threads after it."""
    code = """
import contextlib, io, json, os, sys
from tb_syncfinder.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(["report", "--json", sys.argv[1]])
threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else None
print(json.dumps({"code": code, "modules": sorted(sys.modules), "report": out.getvalue(),
                  "threads": threads}))
"""
    proc = _python(code, str(trace))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["code"] == 0
    return set(result["modules"]), json.loads(result["report"]), result["threads"]


def test_a_cpu_only_report_loads_neither_numpy_nor_the_replay_nor_the_job_stage(
    tmp_path: Path,
) -> None:
    b = KinetoTraceBuilder(gpu=False)
    with b.step(1), b.op("aten::nonzero", stack=[("train.py", 8, "train_step")]):
        b.advance(30)
    trace = b.write(tmp_path / "run" / "worker0.pt.trace.json")
    modules, report, _threads = _loaded_after_report(trace)
    assert report["traces"][0]["error"] is None
    assert report["latent"], "the CPU trace's would-sync is reported"
    assert "numpy" not in modules
    assert "tb_syncfinder.whatif" not in modules
    assert "tb_syncfinder.jobs" not in modules
    assert "tb_syncfinder.ranks" not in modules
    # Its records are msgspec Structs: a dataclass compiles its methods at import.
    assert "dataclasses" not in modules
    assert "logging" not in modules  # only failures log (summaries, the source search)
    assert "hashlib" not in modules  # it loads OpenSSL (~3 ms); sync ids use ``_sha1``


def test_a_gpu_report_loads_the_replay_and_a_single_trace_no_job_stage(tmp_path: Path) -> None:
    b = KinetoTraceBuilder()
    with b.step(1):
        b.kernel(dur=300)
        with b.op("aten::item", stack=[("train.py", 8, "train_step")], called="item"):
            with b.op("aten::_local_scalar_dense"):
                b.runtime("cudaMemcpyAsync", dur=5, memcpy=("DtoH", "Pageable"), bytes=4)
                b.runtime("cudaStreamSynchronize")
    trace = b.write(tmp_path / "run" / "worker0.pt.trace.json")
    modules, report, threads = _loaded_after_report(trace)
    assert report["syncs"][0]["saving_method"] == "replay"
    assert "tb_syncfinder.whatif" in modules
    import numpy

    if int(numpy.__version__.split(".")[0]) >= 2:  # numpy 1.x's own import loads numpy.ma
        assert "numpy.ma" not in modules  # 25 ms of start-up for nothing (np.unique, ...)
    assert "tb_syncfinder.jobs" not in modules
    assert "hashlib" not in modules
    # numpy's OpenBLAS started with one thread: each of its threads spins at start-up
    # (75 ms of CPU on 2 cores, a second on 17), and the analysis never calls BLAS.
    if threads is not None and (os.cpu_count() or 1) > 1:
        assert threads == 1


def test_the_command_exits_with_the_reports_status_and_writes_all_of_it(tmp_path: Path) -> None:
    """``tb-syncfinder`` freezes the collector before the interpreter's shutdown: the JSON
    it wrote is still whole when piped, and a failure's status still comes out."""
    b = KinetoTraceBuilder()
    for step in range(1, 41):
        with b.step(step):
            b.kernel(dur=300)
            with b.op("aten::item", stack=[("train.py", 8, "train_step")], called="item"):
                with b.op("aten::_local_scalar_dense"):
                    b.runtime("cudaMemcpyAsync", dur=5, memcpy=("DtoH", "Pageable"), bytes=4)
                    b.runtime("cudaStreamSynchronize")
    trace = b.write(tmp_path / "run" / "worker0.pt.trace.json")
    ok = _python("from tb_syncfinder.cli import run; run()", "report", "--json", str(trace))
    assert ok.returncode == 0, ok.stderr
    assert len(json.loads(ok.stdout)["syncs"]) == 40
    missing = _python("from tb_syncfinder.cli import run; run()", "report", str(tmp_path / "no"))
    assert missing.returncode == 2
    assert "no such file or directory" in missing.stderr
