"""Reads of tensors the code made on the host from Python data are no latent syncs: on a GPU
run they wait for nothing either. torchvision's reference ``SmoothedValue.median``
(``torch.tensor(list(self.deque)).median().item()``) was the first latent site of every
CPU trace of its training script, and failed a ``--max-syncs-per-step`` gate."""

from __future__ import annotations

import ast
import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

from tb_syncfinder import analyze, catalogue
from tb_syncfinder.source import reads_host_made_tensor, touches_only_host_values

torch = pytest.importorskip("torch")


def _reads_host_made(code: str, line: int) -> bool:
    scope = ast.parse(textwrap.dedent(code)).body[0]
    return reads_host_made_tensor(scope, line)


@pytest.mark.parametrize(
    ("code", "line", "host"),
    [
        ("def f(q):\n    d = torch.tensor(list(q))\n    return d.median().item()\n", 3, True),
        ("def f(q):\n    return torch.tensor(q).mean().item()\n", 2, False),  # q: a tensor?
        ("def f(q):\n    return float(torch.as_tensor(list(q)).sum())\n", 2, True),
        (
            "def f(q):\n    d = torch.tensor(list(q), dtype=torch.float32)\n"
            "    return d.mean().tolist()\n",
            3,
            True,
        ),
        # On a device, moved, a parameter, rebound, or one of two reads unknown: kept.
        ("def f(q, dev):\n    return torch.tensor(q, device=dev).item()\n", 2, False),
        ("def f(q, dev):\n    d = torch.tensor(q).to(dev)\n    return d.item()\n", 3, False),
        ("def f(q):\n    d = torch.tensor(q)\n    d = d.cuda()\n    return d.item()\n", 4, False),
        ("def f(d):\n    return d.median().item()\n", 2, False),
        ("def f(q, y):\n    return torch.tensor(q).item() + y.item()\n", 2, False),
        ("def f(q, kw):\n    return torch.tensor(q, **kw).item()\n", 2, False),
        ("def f(q):\n    for d in q:\n        d.item()\n", 3, False),
        # Found by a review: data that may be tensors, and methods taking another tensor.
        ("def f(losses):\n    return torch.tensor(losses).mean().item()\n", 2, False),
        ("def f(t):\n    return torch.as_tensor(t).item()\n", 2, False),
        ("def f(loss):\n    return torch.tensor(0.5).mul(loss).item()\n", 2, False),
        ("def f(loss):\n    return torch.tensor(2.0).type_as(loss).item()\n", 2, False),
        ("def f(q):\n    return torch.tensor([1.0, 2.0]).sum(0).item()\n", 2, True),
        ("def f(loss):\n    return loss.item()\n", 2, False),
        # Factories of sizes without a device (nanoGPT's ``torch.zeros(eval_iters)``).
        ("def f(n):\n    d = torch.zeros(n)\n    return d.mean().item()\n", 3, True),
        ("def f(n, dev):\n    return torch.randint(n, (2,), device=dev).sum().item()\n", 2, False),
        ("def f(x):\n    return torch.zeros_like(x).sum().item()\n", 2, False),
        # A copy's result is on the host (minGPT's adder reads ``correct = (...).cpu()``
        # element by element, and tests it): indexed, tested, compared with constants.
        ("def f(y):\n    c = (y > 0).cpu()\n    return int(c[0, 0])\n", 3, True),
        ("def f(y):\n    return y.to('cpu').sum().item()\n", 2, True),
        ("def f(y):\n    return y.to(device=torch.device('cpu')).item()\n", 2, True),
        ("def f(y):\n    c = y.cpu()\n    if not c[0]:\n        pass\n", 3, True),
        ("def f():\n    h = torch.tensor([1.0])\n    if h.sum() > 0:\n        pass\n", 3, True),
        ("def f(y, n):\n    c = y.cpu()\n    if not c[0] and n < 5:\n        pass\n", 3, False),
        ("def f(y):\n    if y.sum() > 0:\n        pass\n", 2, False),
        ("def f(y):\n    c = y.cpu()\n    while c[0] > y[0]:\n        pass\n", 3, False),
        # A list the function fills (``results = []`` appended to): host data.
        (
            "def f(xs):\n    results = []\n    for x in xs:\n        results.append(int(x))\n"
            "    rt = torch.tensor(results)\n    return rt.sum().item()\n",
            6,
            True,
        ),
        ("def f(results):\n    return torch.tensor(results).sum().item()\n", 2, False),
        # No call reads on the line: a slice's bounds or an index are read (x-transformers'
        # ``self.data[start : start + n]`` of a start drawn on the host).
        (
            "def f(self):\n    s = torch.randint(0, 9, (1,))\n    return self.data[s : s + 5]\n",
            3,
            True,
        ),
        ("def f(self, s):\n    return self.data[s : s + 5]\n", 2, False),
        ("def f(self, m):\n    n = m.sum()\n    return self.data[:n]\n", 3, False),
        ("def f(a):\n    t = torch.tensor(3)\n    return a[t]\n", 3, True),
    ],
)
def test_a_read_is_host_made_only_where_every_read_on_the_line_is_of_a_python_made_tensor(
    code, line, host
):
    assert _reads_host_made(code, line) is host


SMOOTHED = textwrap.dedent(
    """\
    from collections import deque

    import torch
    from torch.profiler import ProfilerActivity, profile


    class SmoothedValue:
        def __init__(self):
            self.deque = deque(maxlen=20)

        def update(self, value):
            self.deque.append(value)

        @property
        def median(self):
            d = torch.tensor(list(self.deque))
            return d.median().item()


    def main(out):
        meter = SmoothedValue()
        w = torch.randn(8, 8, device="cpu")  # where a GPU run puts it
        with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
            for _ in range(4):
                loss = (w @ w).sum()
                meter.update(loss.item())
                print(meter.median)
        prof.export_chrome_trace(out)
    """
)
LOSS_ITEM = 26


def test_a_cpu_trace_lists_the_losss_read_and_not_the_meters_host_median(tmp_path: Path):
    (tmp_path / "smoothed.py").write_text(SMOOTHED)
    spec = importlib.util.spec_from_file_location("smoothed", tmp_path / "smoothed.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["smoothed"] = module
    spec.loader.exec_module(module)
    out = tmp_path / "host_1.1700000000000.pt.trace.json"
    module.main(str(out))
    sys.modules.pop("smoothed", None)
    report = analyze(str(out), source_roots=[str(tmp_path)])
    assert [(s.line, s.line_exact, s.count) for s in report.latent_sites] == [(LOSS_ITEM, True, 4)]


def test_a_program_that_sets_the_default_device_keeps_its_factories_reads(tmp_path: Path):
    """``torch.set_default_device("cuda")`` puts ``torch.tensor(...)`` on the GPU. (Only
    written, not run: it would change every later trace of the test process.)"""
    code = SMOOTHED + '\n\ndef on_gpu():\n    torch.set_default_device("cuda")\n'
    (tmp_path / "smoothed.py").write_text(code)
    spec = importlib.util.spec_from_file_location("smoothed", tmp_path / "smoothed.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["smoothed"] = module
    spec.loader.exec_module(module)
    out = tmp_path / "host_1.1700000000000.pt.trace.json"
    module.main(str(out))
    sys.modules.pop("smoothed", None)
    report = analyze(str(out), source_roots=[str(tmp_path)])
    assert len(report.latent_sites) == 2  # the median's read is listed again


def test_averaged_models_counter_reads_get_the_every_n_steps_fix():
    found = catalogue.library_fix(
        [("<built-in>", "__bool__"), ("torch/optim/swa_utils.py", "update_parameters")],
        ["aten::is_nonzero", "aten::item", "aten::_local_scalar_dense"],
    )
    assert found is not None
    assert found[0].advice.title == "Update the AveragedModel every N steps, not every step"
    assert "ema_steps" in found[0].advice.after


def test_factories_under_a_device_context_keep_their_reads(tmp_path: Path):
    """``with torch.device("cuda"):`` puts ``torch.zeros(...)`` on the GPU: a file with one
    is not read for host-made tensors."""
    code = SMOOTHED + '\n\ndef on_gpu():\n    with torch.device("cuda"):\n        pass\n'
    (tmp_path / "smoothed.py").write_text(code)
    spec = importlib.util.spec_from_file_location("smoothed", tmp_path / "smoothed.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["smoothed"] = module
    spec.loader.exec_module(module)
    out = tmp_path / "host_1.1700000000000.pt.trace.json"
    module.main(str(out))
    sys.modules.pop("smoothed", None)
    report = analyze(str(out), source_roots=[str(tmp_path)])
    assert len(report.latent_sites) == 2


def test_a_librarys_read_of_a_tensor_it_made_on_the_host_is_no_latent_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """timm's scheduler draws its learning-rate noise with a CPU generator and reads it
    (``torch.randn(1, generator=g).item()``, in a ``while`` loop with another such read):
    14 of a run's 19 latent syncs, read in the library's code, where only the user's line
    was checked. The library's lines are now checked too, each of its candidates."""
    packages = tmp_path / "site-packages"
    (packages / "noisylib").mkdir(parents=True)
    (packages / "noisylib" / "__init__.py").write_text("")
    (packages / "noisylib" / "sched.py").write_text(
        textwrap.dedent(
            """\
            import torch


            def calculate_noise(t, normal=True):
                g = torch.Generator()
                g.manual_seed(42 + t)
                if normal:
                    while True:
                        noise = torch.randn(1, generator=g).item()
                        if abs(noise) < 2.0:
                            return noise
                return torch.rand(1, generator=g).item() - 0.5


            def device_noise(t, device):
                return torch.randn(1, device=device).item()
            """
        )
    )
    (tmp_path / "train.py").write_text(
        textwrap.dedent(
            """\
            import torch
            from noisylib import sched


            def run(out):
                w = torch.randn(4, 4, device=DEVICE)
                with torch.profiler.profile(
                    activities=[torch.profiler.ProfilerActivity.CPU],
                    with_stack=True,
                    schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
                    on_trace_ready=lambda p: p.export_chrome_trace(out),
                ) as prof:
                    for step in range(5):
                        lr = 0.1 * (1 + sched.calculate_noise(step))
                        other = sched.device_noise(step, DEVICE)
                        loss = (w @ w).sum().item()
                        prof.step()
            """
        )
    )
    monkeypatch.syspath_prepend(str(packages))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("noisylib", None)
    sys.modules.pop("noisylib.sched", None)
    import train  # type: ignore[import-not-found]

    train.DEVICE = "cpu"
    out = tmp_path / "host_1.1700000000000.pt.trace.json"
    try:
        train.run(str(out))
    finally:
        for name in ("train", "noisylib", "noisylib.sched"):
            sys.modules.pop(name, None)
    report = analyze(str(out), source_roots=[str(tmp_path)])
    listed = {(s.line, s.library.func if s.library else None): s.count for s in report.latent_sites}
    # The loss's read and the library's read of a tensor made where ``device`` says stay.
    assert listed == {(15, "device_noise"): 3, (16, None): 3}, listed


_COPY_RESULTS = textwrap.dedent(
    """\
    import torch

    # Where the model's outputs are: a GPU run's device (the copy below waits there).
    x = torch.randn(4, 8, device="cuda" if torch.cuda.is_available() else "cpu")
    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR),
    )
    prof.start()
    for step in range(5):
        y = x * 2
        c = (y > 0).cpu()
        n = c.sum().item()
        k = int(c[0, 0])
        if c[0, 1]:
            pass
        results = [1.0, 2.0]
        rt = torch.tensor(results)
        s = rt.sum().item()
        if rt.sum() > 0:
            pass
        probs = [{j: c[i, j].item() for j in range(2)} for i in range(c.shape[0])]
        prof.step()
    prof.stop()
    """
)


def test_reads_of_a_copys_result_are_no_latent_syncs(tmp_path):
    """minGPT's adder copies its correct answers back with ``.cpu()`` and reads them one by
    one (``int(correct[i])``, ``if not correct[i]``): 20,000 of its 20,148 latent syncs, its
    first two sites. Only the copy waits on a GPU. Read in a comprehension (whisper's
    ``detect_language``, 99 reads a step of its greedy decoding), likewise."""
    import runpy

    script = tmp_path / "w.py"
    script.write_text(_COPY_RESULTS)
    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir)})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    assert [(site.line, site.count) for site in report.latent_sites] == [(14, 3)]


_ACTOR_CRITIC = """\
eps = np.finfo(np.float32).eps.item()


def finish(model, saved):
    R = 0
    returns = []
    for r in model.rewards[::-1]:
        R = r + 0.99 * R
        returns.insert(0, R)
    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + eps)
    for (log_prob, value), R in zip(saved, returns):
        a = R.item()
        b = torch.tensor([R])
        c = value.item()
    r0 = returns[0]
    d = torch.tensor([r0, 1.0])
"""


@pytest.mark.parametrize(
    ("line", "by_factory", "host"),
    [
        (13, False, True),  # R: an element of returns, through zip
        (14, True, True),  # torch.tensor([R]) reads R, made on the host
        (15, False, False),  # value: an element of saved, not known
        (17, True, True),  # r0 = returns[0]; the number beside it reads nothing
    ],
)
def test_pytorch_examples_actor_critic_returns_are_made_on_the_host(line, by_factory, host):
    """pytorch/examples' actor_critic normalises its returns, made from Python floats,
    and reads each through a loop over ``zip(saved_actions, returns)`` with
    ``torch.tensor([R])``: 49 of a run's 245 latent reads were listed, each a host read
    (a user's walk). Its ``eps`` is the module's."""
    module = ast.parse(_ACTOR_CRITIC)
    scope = module.body[1]
    assert reads_host_made_tensor(scope, line, module, by_factory=by_factory) is host
    if line == 14:  # without the module, eps is not known: kept
        assert reads_host_made_tensor(scope, line, None, by_factory=True) is False


@pytest.mark.parametrize(
    ("code", "line", "host", "by_factory"),
    [
        # A list filled with what may be GPU tensors stays unknown, and so its elements.
        (
            "def f(loss):\n    ls = []\n    ls.append(loss)\n    return ls[-1].item()\n",
            4,
            False,
            False,
        ),
        # A name rebound later in the loop that reads it may hold that value next pass.
        (
            "def f(gpu):\n    x = torch.tensor([1.0])\n    for i in range(3):\n"
            "        x.item()\n        x = gpu\n",
            4,
            False,
            False,
        ),
        # Arithmetic of a host tensor with a name not known: kept.
        ("def f(g):\n    h = torch.zeros(3)\n    return (h + g).sum().item()\n", 3, False, False),
        ("def f():\n    h = torch.zeros(3)\n    return (h * 2 - 1).sum().item()\n", 3, True, False),
        # A method given host values keeps a host tensor on the host (torchvision's
        # detection transform draws its size so); given a tensor not known, not.
        (
            "def f(k):\n    return int(torch.empty(1).uniform_(0.0, float(len(k))).item())\n",
            2,
            True,
            False,
        ),
        ("def f(x):\n    return torch.empty(1).uniform_(0.0, x.max()).item()\n", 2, False, False),
        # A factory given a list not written out, or an element not known: kept.
        ("def f(losses):\n    return torch.tensor(losses)\n", 2, False, True),
        ("def f(v):\n    return torch.tensor([v])\n", 2, False, True),
        # A loop over a DataLoader's batches: not known.
        ("def f(loader):\n    for x, y in loader:\n        x.sum().item()\n", 3, False, False),
        ("def f():\n    for i, t in enumerate(torch.ones(3)):\n        t.item()\n", 3, True, False),
        # ``+=`` of a number keeps a host tensor on the host (the char-RNN tutorial's
        # ``loss = torch.Tensor([0])``); of a tensor not known, not.
        (
            "def f():\n    b = torch.tensor([0.0])\n    b += 1\n    return b.item()\n",
            4,
            True,
            False,
        ),
        (
            "def f(g):\n    b = torch.tensor([0.0])\n    b += g\n    return b.item()\n",
            4,
            False,
            False,
        ),
        (
            "def f(n):\n    b = torch.zeros(1)\n    for i in range(n):\n        b += 1\n"
            "    return b.item()\n",
            5,
            True,
            False,
        ),
    ],
)
def test_reads_through_loops_rebindings_and_factories_are_host_made_only_where_known(
    code, line, host, by_factory
):
    module = ast.parse(code)
    assert reads_host_made_tensor(module.body[0], line, module, by_factory) is host


_TO_CPU_DEVICE = """\
import torch

model = torch.nn.Linear(4, 4)
cpu_device = torch.device("cpu")
other = torch.device(DEVICE)
prof = torch.profiler.profile(
    activities=[torch.profiler.ProfilerActivity.CPU],
    with_stack=True,
    schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
    on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR),
)
prof.start()
for _ in range(5):
    outputs = [{"boxes": model(torch.randn(2, 4))}]
    outputs = [{k: v.to(cpu_device) for k, v in t.items()} for t in outputs]
    moved = [o["boxes"].to(other) for o in outputs]
    pinned = outputs[0]["boxes"].to(cpu_device, non_blocking=True)
    prof.step()
prof.stop()
"""


def test_a_copy_to_a_device_named_by_a_host_binding_is_listed(tmp_path: Path) -> None:
    """torchvision's detection ``evaluate`` copies its outputs back with ``v.to(cpu_device)``
    after ``cpu_device = torch.device("cpu")``: a ``.to()`` whose line names no host was
    not listed (3 copies a step missing). A name bound only to the host is read now; one
    bound to anything else, and a ``non_blocking`` copy, still are not."""
    import runpy

    script = tmp_path / "w.py"
    script.write_text(_TO_CPU_DEVICE)
    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir), "DEVICE": "cpu"})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    assert [(s.line, s.line_exact, s.count) for s in report.latent_sites] == [(15, True, 3)]


@pytest.mark.parametrize(
    ("code", "line", "host"),
    [
        # The loop moves what its loader gives to the device: before that, it is the
        # host's; after it, the device's.
        (
            "def f(loader, dev):\n    for (ei,) in loader:\n        ei = ei[0]\n"
            "        n = int(ei.max())\n        ei = ei.to(dev)\n        m = int(ei.max())\n",
            4,
            True,
        ),
        (
            "def f(loader, dev):\n    for (ei,) in loader:\n        ei = ei[0]\n"
            "        n = int(ei.max())\n        ei = ei.to(dev)\n        m = int(ei.max())\n",
            6,
            False,
        ),
        # A field of the batch, and the move in a comprehension over it.
        (
            "def f(loader, dev):\n    for data in loader:\n        data.y.sum().item()\n"
            "        data = {k: v.to(dev) for k, v in data.items()}\n",
            3,
            True,
        ),
        # A move of one field says nothing of the others (PyG's reddit.py keeps ``x`` and
        # ``y`` on the device and moves ``edge_index`` per batch).
        (
            "def f(loader, dev):\n    for batch in loader:\n        int(batch.y.sum())\n"
            "        batch.edge_index.to(dev)\n",
            3,
            False,
        ),
        # A part of the batch the loop never moves, beside one it moves: the loader's
        # (pytorch-metric-learning's README loop moves ``data`` alone).
        (
            "def f(loader, dev):\n    for i, (data, labels) in enumerate(loader):\n"
            "        data = data.to(dev)\n        n = labels.max().item()\n",
            4,
            True,
        ),
        (
            "def f(loader, dev):\n    for data, labels in loader:\n"
            "        data, labels = data.to(dev), labels.to(dev)\n        labels.sum().item()\n",
            4,
            False,
        ),
        # A loader over tensors moved to the device keeps every part there (a review).
        (
            "def f(X, Y, dev):\n"
            "    loader = DataLoader(TensorDataset(X.to(dev), Y.to(dev)), batch_size=32)\n"
            "    for xb, yb in loader:\n        xb = xb.to(dev)\n        yb.sum().item()\n",
            5,
            False,
        ),
        (
            "def f(loader):\n    for data, labels in loader:\n        labels.sum().item()\n",
            3,
            False,
        ),
        # Parts of several iterables: a move of one says nothing of the other.
        (
            "def f(a, b, dev):\n    for x, y in zip(a, b):\n        x = x.to(dev)\n"
            "        y.sum().item()\n",
            4,
            False,
        ),
        # A cast is not a move: nothing says where the loader's batch is.
        (
            "def f(loader):\n    for x in loader:\n        x.sum().item()\n"
            "        x = x.to(torch.float16)\n",
            3,
            False,
        ),
        # A loader over host-made tensors gives host tensors.
        (
            "from torch.utils.data import DataLoader, TensorDataset\n"
            "def f():\n"
            "    loader = DataLoader(TensorDataset(torch.randint(0, 9, (8, 3))), batch_size=2)\n"
            "    for (x,) in loader:\n        x.sum().item()\n",
            5,
            True,
        ),
        # A module's function whose every return is a copy to the host.
        (
            "def infer(t):\n    return (t * 2).cpu()\n"
            "def f(x):\n    h = infer(x)\n    return h.sum().item()\n",
            5,
            True,
        ),
        (
            "def infer(t):\n    return t * 2\n"
            "def f(x):\n    h = infer(x)\n    return h.sum().item()\n",
            5,
            False,
        ),
        # A legacy constructor of Python data (flair's ``torch.LongTensor(lengths)``), a part of
        # a tuple of results of a host copy (``torch.max(copy, dim=1)``), and a name sliced from
        # itself in a loop: the host's.
        (
            "def f(xs):\n    n = torch.LongTensor([len(x) for x in xs])\n"
            "    return n.max().item()\n",
            3,
            True,
        ),
        (
            "def f(xs):\n    n = torch.cuda.LongTensor([len(x) for x in xs])\n"
            "    return n.max().item()\n",
            3,
            False,
        ),
        (
            "import torch\ndef f(x, ns):\n    h = x.cpu()\n    v, i = torch.max(h, dim=1)\n"
            "    for n in ns:\n        s = v[:n].sum().item()\n        v = v[n:]\n",
            6,
            True,
        ),
        (
            "def f(x, ns, dev):\n    v = x.cpu()\n"
            "    for n in ns:\n        s = v[:n].sum().item()\n        v = v.to(dev)\n",
            4,
            False,
        ),
        # A name a `while` loop rebinds after the read reaches the read next pass.
        (
            "def f(gpu):\n    x = torch.zeros(1)\n    while True:\n        x.item()\n"
            "        x = gpu\n",
            4,
            False,
        ),
    ],
)
def test_loader_batches_and_helpers_results_are_host_made_only_where_the_code_says(
    code, line, host
):
    module = ast.parse(code)
    scope = next(n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "f")
    assert reads_host_made_tensor(scope, line, module) is host


@pytest.mark.parametrize(
    ("code", "line", "host"),
    [
        # A known library's function given a host batch computes on the host.
        (
            "from torch_geometric.utils import remove_self_loops\n"
            "def f(loader, dev):\n    for (ei,) in loader:\n"
            "        ei, _ = remove_self_loops(ei)\n        ei = ei.to(dev)\n",
            4,
            True,
        ),
        # A part of the batch the loop never moves, beside one it moves.
        (
            "import torch\ndef f(loader, dev):\n    for i, (data, labels) in enumerate(loader):\n"
            "        data = data.to(dev)\n        n = len(torch.unique(labels))\n",
            5,
            True,
        ),
        # A boolean mask of a host tensor, and a write through one.
        ("def f():\n    h = torch.zeros(4).cpu()\n    k = int(h[h > 0].sum())\n", 3, True),
        ("def f():\n    h = torch.zeros(4)\n    h[h > 0] = 1.0\n", 3, True),
        # A module (an object the code did not make on the host) or a device move: not.
        ("def f(model):\n    h = torch.zeros(4)\n    y = model(h)[h > 0]\n", 3, False),
        ("def f(dev):\n    h = torch.zeros(4)\n    k = int(h.to(dev)[h > 0].sum())\n", 3, False),
        # A library function of its own device, or of constants alone: not known.
        ("def f():\n    h = torch.zeros(4)\n    torch.cuda.comm.broadcast(h, [0, 1])\n", 3, False),
        ("from mylib import make\ndef f():\n    make(4).sum().item()\n", 3, False),
        # A function of the user's own module not known to stay on the host.
        (
            "from utils import helper\ndef f():\n    h = torch.zeros(4)\n    helper(h)[h > 0]\n",
            4,
            False,
        ),
    ],
)
def test_lines_of_host_values_only_are_told_from_lines_that_may_touch_the_device(code, line, host):
    module = ast.parse(code)
    scope = next(n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "f")
    assert touches_only_host_values(scope, line, module) is host


_LOADER_BATCH = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def infer(t):
    return (t * 2).cpu()


def run(logdir):
    loader = DataLoader(TensorDataset(torch.randint(0, 50, (64, 30))), batch_size=8)
    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        with_stack=True,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(logdir),
    )
    prof.start()
    for (ei,) in loader:
        n = int(ei.max())
        kept = torch.unique(ei[ei > 0])
        ei = ei.to(DEV)
        m = int(ei.max())
        h = infer(ei)
        k = int(h[h > 0].sum())
        prof.step()
    prof.stop()
"""


def test_reads_of_a_loaders_batch_before_its_move_and_of_a_helpers_copy_are_not_listed(
    tmp_path, monkeypatch
):
    """PyG's walk: reads of the loader's batch before its ``.to(device)`` (by the user or
    a library's function) and of a helper's ``.cpu()`` result wait for no GPU; 42 of the
    walk's 128 latent syncs were such. The read after the move and the helper's copy
    stay."""
    script = tmp_path / "loader_batch.py"
    script.write_text(_LOADER_BATCH)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    module = importlib.import_module("loader_batch")
    try:
        module.run(str(tmp_path / "logs"))
    finally:
        sys.modules.pop("loader_batch", None)
    report = analyze(str(tmp_path / "logs"), source_roots=[str(tmp_path)])
    listed = sorted({(site.line, site.kind) for site in report.latent_sites})
    assert listed == [(8, "device_to_host_copy"), (24, "scalar_readback")], listed


@pytest.mark.parametrize(
    ("code", "line", "host_only"),
    [
        # torchmetrics' normalize_logits_if_needed: the read under the CPU test only.
        (
            "def f(t):\n    if t.device == torch.device('cpu'):\n"
            "        if not torch.all(t >= 0):\n            t = t.sigmoid()\n"
            "        return t\n    c = (t < 0).any()\n    return torch.where(c, t.sigmoid(), t)\n",
            3,
            True,
        ),
        ("def f(t):\n    if t.is_cuda:\n        pass\n    else:\n        t.item()\n", 5, True),
        ("def f(t):\n    if t.is_cuda:\n        t.item()\n", 3, False),
        ("def f(t):\n    if t.device.type == 'cpu':\n        pass\n    t.item()\n", 4, False),
        ("def f(t, flag):\n    if flag:\n        t.item()\n", 3, False),
    ],
)
def test_a_line_under_a_test_that_holds_only_on_the_host_runs_there_only(code, line, host_only):
    from tb_syncfinder.source import runs_on_the_host_only

    assert runs_on_the_host_only(ast.parse(code).body[0], line) is host_only


def _scope_of(tree: ast.Module, kind: type, first_line: int) -> ast.AST:
    return next(
        node
        for node in ast.walk(tree)
        if isinstance(node, kind) and getattr(node, "lineno", None) == first_line
    )


_DETECT_LANGUAGE = """\
import numpy as np
import torch


def detect(logits):
    p = logits.softmax(dim=-1).cpu()
    return [{j: p[i, j].item() for j in range(3)} for i in range(p.shape[0])]


def detect_on_device(logits):
    p = logits.softmax(dim=-1)
    return [{j: p[i, j].item() for j in range(3)} for i in range(p.shape[0])]


def schedule(pcts):
    pcts = torch.cumsum(torch.tensor([0.0, 0.25, 1.0]), 0)

    def inner():
        return pcts[-1].item()

    return inner


def stamps():
    tokens = torch.tensor([1, 5, 9, 2])
    mask: torch.Tensor = tokens.ge(4)
    return mask.sum().item()


def postprocess(arrs):
    masks = torch.as_tensor(np.stack(arrs))
    keep = torch.nonzero(masks.sum((1, 2)) > 3).flatten()
    return [arrs[i] for i in keep]
"""


@pytest.mark.parametrize(
    ("kind", "first_line", "line", "host"),
    [
        (ast.DictComp, 7, 7, True),
        (ast.ListComp, 7, 7, True),
        (ast.DictComp, 12, 12, False),
        (ast.FunctionDef, 18, 19, True),
        (ast.FunctionDef, 24, 27, True),
        (ast.ListComp, 33, 33, True),
    ],
)
def test_reads_in_comprehensions_closures_and_annotated_names_are_followed_out(
    kind, first_line, line, host
):
    """whisper's ``detect_language`` reads a ``.cpu()`` result element by element in a
    comprehension, whose frame binds no ``p``: 99 reads a step, the first site of its
    greedy report, were listed (a walk). A comprehension's free name is read where it
    stands in the function around it; a closure's after that function bound it; and
    ``mask: torch.Tensor = tokens.ge(4)`` is a binding as ``mask = ...`` is (whisper's
    ``transcribe``)."""
    tree = ast.parse(_DETECT_LANGUAGE)
    scope = _scope_of(tree, kind, first_line)
    assert reads_host_made_tensor(scope, line, tree) is host


def test_numpys_results_and_a_host_nonzeros_method_results_are_host_values():
    """Segment Anything's ``torch.as_tensor(np.stack(masks))`` is made on the host from a
    NumPy array, and ``torch.nonzero(...).flatten()`` of it stays there; both were taken
    for device values (a walk: 50 of a run's 1,218 reads), the method of the nonzero's
    result read as a function of ``torch``."""
    tree = ast.parse(_DETECT_LANGUAGE)
    scope = _scope_of(tree, ast.FunctionDef, 30)
    assert touches_only_host_values(scope, 32, tree)
    device = ast.parse("def f(x):\n    return torch.nonzero(x > 3).flatten()\n")
    assert not touches_only_host_values(device.body[0], 2, device)


def test_a_default_device_set_in_another_file_of_the_program_keeps_the_reads(tmp_path: Path):
    """nerf-pytorch's ``run_nerf.py`` sets ``torch.cuda.FloatTensor`` as the default type,
    and its helpers' ``torch.Tensor([10.]).item()`` reads a GPU tensor: the read, in a
    file that sets no default, was dropped as a host tensor's (a walk). The program's
    files are its frames' (written, not run, as above)."""
    meter, train = SMOOTHED.split("\n\ndef main(out):\n")
    (tmp_path / "meters.py").write_text(meter)
    main_code = (
        "import torch\nfrom torch.profiler import ProfilerActivity, profile\n"
        "from meters import SmoothedValue\n\n\ndef main(out):\n" + train
    )
    for sets_default in (False, True):
        extra = '\n\ndef on_gpu():\n    torch.set_default_tensor_type("torch.cuda.FloatTensor")\n'
        (tmp_path / "train_split.py").write_text(main_code + (extra if sets_default else ""))
        sys.path.insert(0, str(tmp_path))
        try:
            spec = importlib.util.spec_from_file_location(
                "train_split", tmp_path / "train_split.py"
            )
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            out = tmp_path / f"split_{int(sets_default)}.1700000000000.pt.trace.json"
            module.main(str(out))
        finally:
            sys.path.remove(str(tmp_path))
            sys.modules.pop("meters", None)
        report = analyze(str(out), source_roots=[str(tmp_path)])
        files = sorted(Path(s.file).name for s in report.latent_sites)
        assert files == (["meters.py", "train_split.py"] if sets_default else ["train_split.py"])


@pytest.mark.parametrize(
    ("text", "gpu"),
    [
        (
            b"torch.set_default_tensor_type("
            b"'torch.cuda.FloatTensor' if ok else 'torch.FloatTensor')",
            True,
        ),
        (b'torch.set_default_device("cuda")', True),
        (b"torch.set_default_device(device)", True),
        (b'with torch.device("cuda:0"):', True),
        # Not a GPU for the other files (a review): meta, the CPU, a comment.
        (b'with torch.device("meta"):', False),
        (b"torch.set_default_tensor_type(torch.DoubleTensor)", False),
        (b'# torch.set_default_device("cuda")', False),
    ],
)
def test_a_default_device_that_may_be_a_gpu_is_told_from_meta_and_the_cpu(text, gpu):
    from tb_syncfinder.source import _GPU_DEFAULT_SET

    assert (_GPU_DEFAULT_SET.search(text) is not None) is gpu


@pytest.mark.parametrize(
    ("code", "line", "host"),
    [
        # TransformerLens' demo: a print of the `.cpu()` copy the line makes (the copy is
        # the read, its own site), on one line and across several.
        ("def f(x):\n    print('A:', x.sum(0).detach().cpu().round(decimals=3))\n", 2, True),
        (
            "def f(x):\n    print(\n        'B:',\n        x.cpu()\n        .round(3),\n    )\n",
            4,
            True,
        ),
        ("def f(x):\n    h = x.cpu()\n    print(f'{h.sum():.3f}')\n", 3, True),
        # A device tensor printed: a read.
        ("def f(x):\n    print('A:', x.round(3))\n", 2, False),
        ("def f(x):\n    print(f'{x.sum():.3f}')\n", 2, False),
        ("def f(x):\n    s = str(x.cpu()) + str(x)\n", 2, False),
    ],
)
def test_a_print_of_host_values_only_is_told_from_a_print_of_a_device_tensor(code, line, host):
    from tb_syncfinder.source import prints_host_values

    scope = ast.parse(code).body[0]
    assert prints_host_values(scope, line) is host
