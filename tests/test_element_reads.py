"""A tensor converted one element at a time (minGPT's chargpt decodes a sample with
``[itos[int(i)] for i in y]``: 513 reads where one ``y.tolist()`` does): the advice was to
keep the value on the device, which cannot be done for text. It now says to convert the
tensor once."""

from __future__ import annotations

import ast
import runpy

import pytest

from tb_syncfinder import analyze
from tb_syncfinder.catalogue import SCALAR_READBACK, TENSOR_TEXT_OP, advice_for
from tb_syncfinder.source import read_as_size, reads_elements
from tests.test_callers import _COMPREHENSION_SCRIPT

torch = pytest.importorskip("torch")


@pytest.mark.parametrize(
    ("code", "line", "per_element"),
    [
        ("def f(y):\n    s = ''.join([itos[int(i)] for i in y])\n", 2, True),
        ("def f(y):\n    for i in y:\n        print(i.item())\n", 3, True),
        ("def f(ys):\n    return [float(v) for v in ys]\n", 2, True),
        # A reduction of each tensor of a list, read one by one (Captum's ``sum(torch.sum(m)
        # .item() for m in masks)``); not one of a tensor the loop does not give.
        ("def f(ms):\n    return sum(torch.sum(m).item() for m in ms)\n", 2, True),
        ("def f(ms):\n    return max(m.max().item() for m in ms)\n", 2, True),
        ("def f(ms, t):\n    return [t.sum().item() for m in ms]\n", 2, False),
        # Names of a tuple target over ``zip(...)``, through ``list(...)[:n]`` (flair's
        # decoding, a walk); not over ``zip`` of a range.
        (
            "def f(ts, cs, n):\n"
            "    return [(names[t], c.item()) for t, c in list(zip(ts, cs))[:n]]\n",
            2,
            True,
        ),
        (
            "def f(points, conf, idx):\n    for p, c, i in zip(points, conf, idx):\n"
            "        v = names[i.item()]\n",
            3,
            True,
        ),
        ("def f(n, cs):\n    for i, c in zip(range(n), cs):\n        print(i)\n", 3, False),
        # d2l's ``Accumulator.add``: one value an argument, not elements of a tensor.
        (
            "def add(self, *args):\n"
            "    self.data = [a + float(b) for a, b in zip(self.data, args)]\n",
            2,
            False,
        ),
        # Names the loop's body binds from an element, formatted or indexing (TransformerLens'
        # demo: ``layer = head // n_heads`` then ``f"L{layer}H{head_index}"``).
        (
            "def f(heads, n, labels, attn):\n    for head in heads:\n"
            "        layer = head // n\n        index = head % n\n"
            "        labels.append(f'L{layer}H{index}')\n",
            5,
            True,
        ),
        (
            "def f(heads, n, attn):\n    for head in heads:\n"
            "        layer = head // n\n        p = attn[layer][0]\n",
            4,
            True,
        ),
        # A name bound from something else: no element.
        (
            "def f(heads, loss, labels):\n    for head in heads:\n"
            "        v = loss * 2\n        labels.append(f'{v}')\n",
            4,
            False,
        ),
        ("def f(ms):\n    return [m.sum(dim).item() for m in ms]\n", 2, False),
        # An element indexed by a ``range()`` loop's target is one too (a CRNN decode's
        # ``for i in range(length): if t[i] != 0 and ...``: 1,248 reads told not to branch),
        # read by a call, a truth test or an index; the index itself reads nothing.
        ("def f(y):\n    for i in range(3):\n        print(y[i].item())\n", 3, True),
        (
            "def f(t, n):\n    for i in range(n):\n        if t[i] != 0 and t[i - 1] != t[i]:\n"
            "            pass\n",
            3,
            True,
        ),
        ("def f(t, a):\n    return ''.join([a[i - 1] for i in t])\n", 2, True),
        ("def f(t, n, a):\n    for i in range(n):\n        print(a[t[i] - 1])\n", 3, True),
        ("def f(t, n, a):\n    for i in range(n):\n        print(a[i])\n", 3, False),
        (
            "def f(t, n):\n    for i in range(n):\n        if t[i] != n.sum():\n            pass\n",
            3,
            False,
        ),
        # A tensor the loop fills as it goes (a decoder's tokens): no conversion before it.
        (
            "def f(out, tokens, n):\n    for t in range(n):\n        tokens[t] = out.argmax()\n"
            "        if tokens[t] == 2:\n            break\n",
            4,
            False,
        ),
        # A tensor made again from a tensor's elements (the chatbot tutorial's next decoder
        # input, 56 reads a step told they set a size), and a part of each element.
        (
            "def f(topi, n):\n    return torch.LongTensor([[topi[i][0] for i in range(n)]])\n",
            2,
            True,
        ),
        ("def f(y):\n    return [row[0].item() for row in y]\n", 2, True),
        ("def f(n):\n    return torch.LongTensor([[1 for _ in range(n)]])\n", 2, False),
        # Another tensor, an unpacked element: not so.
        ("def f(y, t):\n    for i in y:\n        print(t.item())\n", 3, False),
        ("def f(y):\n    for b, (x, z) in enumerate(y):\n        print(x.item())\n", 3, False),
        ("def f(y, t):\n    for i in y:\n        print(i.item(), t.item())\n", 3, False),
        ("def f(loss):\n    return loss.item()\n", 2, False),
    ],
)
def test_a_read_of_each_element_of_what_a_loop_iterates_is_told(code, line, per_element):
    assert reads_elements(ast.parse(code).body[0], line) is per_element


def test_the_advice_for_element_reads_is_to_convert_once():
    advice = advice_for(SCALAR_READBACK, ["aten::item"], per_element=True)
    assert advice["title"] == "Convert the tensor once, not each element"
    assert "y.tolist()" in advice["after"]
    assert advice_for(SCALAR_READBACK, ["aten::item"])["title"] != advice["title"]
    # A truth test of each element is read the same way: converted once, not "do not branch".
    test_ops = ["aten::is_nonzero", "aten::item", "aten::_local_scalar_dense"]
    assert advice_for(SCALAR_READBACK, test_ops, per_element=True)["title"] == advice["title"]


def test_a_samples_decoding_is_told_to_convert_the_tensor_once(tmp_path):
    script = tmp_path / "w.py"
    script.write_text(_COMPREHENSION_SCRIPT)
    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir)})
    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    titles = {s.line: s.advice["title"] for s in report.latent_sites}
    assert titles[12] == "Convert the tensor once, not each element"
    # Line 9 reads under `if it % 3 == 0:`: every N steps already.
    assert titles[9] == "Read every N steps already: read the values together, or less often"


def test_the_element_fix_gives_the_text_the_reads_gave():
    from tb_syncfinder.catalogue import ELEMENT_READ_ADVICE

    made = {}
    for code in (ELEMENT_READ_ADVICE.before, ELEMENT_READ_ADVICE.after):
        scope = {"itos": dict(enumerate("abcdef")), "y": torch.tensor([3, 1, 4])}
        exec(code, scope)  # noqa: S102 - the catalogue's own example code
        made[code] = scope["text"]
    assert list(made.values()) == ["dbe", "dbe"]


@pytest.mark.parametrize(
    ("code", "line", "loop"),
    [
        # A loop over the groups of one step: the selection runs once per group.
        ("def f(x, m, n):\n    for e in range(n):\n        x[m == e]\n", 3, 2),
        # The training loop: one pass per step (PyG's ``for batch in loader``), not groups.
        (
            "def f(loader, model, opt):\n    for x, y in loader:\n        keep = y >= 0\n"
            "        model(x)[keep].sum().backward()\n        opt.step()\n",
            4,
            None,
        ),
        (
            "def f(loader, prof):\n    for x, y in loader:\n        y[y > 0]\n"
            "        prof.step()\n",
            3,
            None,
        ),
        # A loop over a few masks written out (PyG's ``test()``): not groups.
        ("def f(p, y, a, b):\n    for m in [a, b]:\n        (p[m] == y[m]).sum()\n", 3, None),
    ],
)
def test_a_selection_in_the_training_loop_is_not_one_per_group(code, line, loop):
    from tb_syncfinder.source import loop_around

    assert loop_around(ast.parse(code).body[0], line) == loop


def test_a_size_that_is_a_modules_number_is_no_read_of_the_line():
    """``range(batch_size)`` of a module's ``batch_size = 64`` on a line whose constructor
    reads a tensor's elements: the line's reads were told they set a size."""
    module = ast.parse(
        "batch_size = 64\n\n"
        "def f(topi):\n"
        "    return torch.LongTensor([[topi[i][0] for i in range(batch_size)]])\n"
        "def g(x, n):\n"
        "    return x[:n]\n"
    )
    f, g = module.body[1], module.body[2]
    assert not read_as_size(f, 4, frameless=True, module=module)
    assert read_as_size(g, 6, frameless=True, module=module)


@pytest.mark.parametrize(
    ("code", "line", "size"),
    [
        # lightly's memory bank: the pointer read into a name, then slice bounds.
        (
            "def f(self, batch):\n"
            "    n = batch.shape[0]\n"
            "    ptr = int(self.bank_ptr)\n"
            "    self.bank[ptr : ptr + n] = batch\n",
            3,
            True,
        ),
        (
            "def f(t):\n    k = t.sum().item()\n    return torch.zeros(k)\n",
            2,
            True,
        ),
        # Used as a number, or bound again before a slice: no size.
        ("def f(t, x):\n    v = t.item()\n    return x * v\n", 2, False),
        (
            "def f(t, x):\n    v = t.item()\n    v = 3\n    return x[:v]\n",
            2,
            False,
        ),
    ],
)
def test_a_read_bound_to_a_name_then_used_as_a_bound_sets_a_size(code, line, size):
    import ast

    assert read_as_size(ast.parse(code).body[0], line) is size


def test_a_read_in_a_generator_expression_on_one_line_is_exact(tmp_path):
    """A Captum walk: ``sum(torch.sum(m).item() for m in y)`` was marked at its def line (the
    ``<genexpr>`` frame's calls did not align); one line runs every call it makes."""
    import runpy

    script = tmp_path / "w.py"
    script.write_text(
        "import torch\n"
        "masks = [torch.ones(3) for _ in range(4)]\n"
        "prof = torch.profiler.profile(\n"
        "    activities=[torch.profiler.ProfilerActivity.CPU],\n"
        "    with_stack=True,\n"
        "    schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),\n"
        "    on_trace_ready=torch.profiler.tensorboard_trace_handler(LOGDIR),\n"
        ")\n"
        "prof.start()\n"
        "for i in range(5):\n"
        "    y = [m * (i + 1) for m in masks]\n"
        "    total = sum(torch.sum(m).item() for m in y)\n"
        "    prof.step()\n"
        "prof.stop()\n"
    )
    logdir = tmp_path / "logs"
    runpy.run_path(str(script), init_globals={"LOGDIR": str(logdir)})
    from tb_syncfinder import analyze

    report = analyze(str(logdir), source_roots=[str(tmp_path)])
    (site,) = report.latent_sites
    assert (site.line, site.line_exact, site.count) == (12, True, 12)
    assert site.advice["title"] == "Convert the tensor once, not each element"


def test_an_element_formatted_one_at_a_time_gets_the_conversion_fix():
    advice = advice_for(
        SCALAR_READBACK,
        [TENSOR_TEXT_OP, "aten::item", "aten::_local_scalar_dense"],
        per_element=True,
    )
    assert advice["title"] == "Convert the tensor once, not each element"
