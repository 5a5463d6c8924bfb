import assert from "node:assert/strict";
import { test } from "node:test";
import { layoutStepChart, layoutTimeline, MIN_BUBBLE_PX, niceMax, niceStep } from "../src/layout.js";
import { h, replace, rovingKeys } from "../src/dom.js";
import { nextRowIndex } from "../src/sites.js";

test("axis maxima are round numbers at or above the data", () => {
  assert.equal(niceMax(0), 0);
  assert.equal(niceMax(7), 7);
  assert.equal(niceMax(180), 180);
  assert.equal(niceMax(2100), 2250);
  assert.equal(niceMax(4999), 5000);
  assert.equal(niceMax(0.7), 0.7); // not 0.7000000000000001
  // A count's axis goes in whole steps.
  assert.equal(niceMax(0.3, { integer: true }), 1);
  assert.equal(niceMax(3.3, { integer: true }), 4);
});

test("the axis maximum is just above the tallest bar, never about twice it", () => {
  // Rounding the tallest bar itself up to 1, 2, 2.5 or 5 x 10^k gave 2 ms for 1.01 ms.
  assert.equal(niceMax(1010), 1200);
  assert.equal(niceMax(5100), 6000);
  assert.equal(niceMax(2300), 2500);
  for (let e = -2; e < 8; e++) {
    for (let i = 100; i < 1000; i += 7) {
      const v = (i / 100) * 10 ** e;
      const max = niceMax(v);
      assert.ok(max >= v * (1 - 1e-12), `${v} -> ${max}`);
      assert.ok(max < v * 1.2, `${v} -> ${max}`);
      // A whole number of nice steps (1, 2, 2.5 or 5 x 10^k).
      const step = niceStep(v / 10);
      const m = step / 10 ** Math.floor(Math.log10(step) + 1e-9);
      assert.ok([1, 2, 2.5, 5].some((x) => Math.abs(x - m) < 1e-9), `${v}: step ${step}`);
      assert.ok(Math.abs(max / step - Math.round(max / step)) < 1e-6, `${v} -> ${max} (step ${step})`);
    }
  }
});

test("the step chart's tallest bar fills most of the plot", () => {
  const steps = [
    { step: 1, sync_count: 11, host_wait_us: 900, gpu_idle_us: 110 },
    { step: 2, sync_count: 3, host_wait_us: 200, gpu_idle_us: 0 },
  ];
  const L = layoutStepChart(steps, { width: 300, height: 140, pad: { l: 0, r: 0, t: 0, b: 0 } });
  assert.equal(L.maxUs, 1200);
  assert.equal(L.maxCount, 12);
  const tallest = L.bars[0].waitH + L.bars[0].idleH;
  assert.ok(tallest >= (5 / 6) * L.plotH, `${tallest} of ${L.plotH}`);
});

test("step bars stack host wait under GPU idle on a shared scale", () => {
  const steps = [
    { step: 1, sync_count: 2, host_wait_us: 100, gpu_idle_us: 100 },
    { step: 2, sync_count: 4, host_wait_us: 50, gpu_idle_us: 0 },
  ];
  const L = layoutStepChart(steps, { width: 300, height: 140, pad: { l: 0, r: 0, t: 0, b: 0 } });
  assert.equal(L.maxUs, 200);
  assert.equal(L.maxCount, 4);
  const [a, b] = L.bars;
  assert.equal(a.waitH, 70);
  assert.equal(a.idleH, 70);
  assert.equal(a.idleY + a.idleH, a.waitY); // idle sits right on top of the wait
  assert.equal(b.waitH, 35);
  assert.ok(b.x > a.x);
  assert.equal(L.points[1].y, 140 - (4 / 4) * 140);
});

test("an empty step list gives an empty chart, not NaN", () => {
  const L = layoutStepChart([], { width: 300, height: 100 });
  assert.deepEqual(L.bars, []);
  assert.equal(L.maxUs, 0);
});

test("timeline puts the wait and the GPU bubble where the sync and idle are", () => {
  const ctx = {
    window: [0, 1000],
    sync: { ts_us: 200, end_us: 400, idle_end_us: 700 },
    host: [
      { name: "aten::item", cat: "cpu_op", ts_us: 150, dur_us: 300, depth: 0 },
      { name: "cudaStreamSynchronize", cat: "cuda_runtime", ts_us: 200, dur_us: 200, depth: 1 },
    ],
    device: [
      { lane: "GPU 0 stream 7", name: "kernel_a", cat: "kernel", ts_us: 0, dur_us: 390 },
      { lane: "GPU 0 stream 7", name: "kernel_b", cat: "kernel", ts_us: 700, dur_us: 100 },
      { lane: "GPU 0 stream 13", name: "Memcpy DtoH", cat: "gpu_memcpy", ts_us: 390, dur_us: 5 },
      { lane: "GPU 0 stream 9", name: "outside", cat: "kernel", ts_us: 5000, dur_us: 5 },
    ],
  };
  const L = layoutTimeline(ctx, { width: 1100, labelW: 100 }); // plot 992 px for 1000 us
  assert.equal(L.hostRows, 2);
  assert.deepEqual(L.rows.map((r) => r.label), ["host thread", "", "GPU 0 stream 7", "GPU 0 stream 13"]);
  assert.ok(Math.abs(L.wait.x - (100 + 0.2 * 992)) < 1e-9);
  assert.ok(Math.abs(L.wait.w - 0.2 * 992) < 1e-9);
  assert.ok(Math.abs(L.bubble.x - (100 + 0.4 * 992)) < 1e-9);
  assert.ok(Math.abs(L.bubble.w - 0.3 * 992) < 1e-9);
});

test("the rows reach the sync's own call however deep it sits, and no deeper than needed", () => {
  // A step of a trace with stacks: the call that waited is 5 levels down.
  const chain = ["ProfilerStep#6", "train_step", "aten::item", "aten::_local_scalar_dense", "cudaMemcpyAsync", "cudaStreamSynchronize"];
  const ctx = {
    window: [0, 1000],
    sync: { ts_us: 200, end_us: 400, idle_end_us: null },
    host: chain.map((name, depth) => ({ name, cat: "cpu_op", ts_us: depth < 4 ? 100 + depth : 200, dur_us: depth < 4 ? 500 - 2 * depth : depth === 4 ? 10 : 200, depth })),
    device: [],
  };
  ctx.host[4] = { ...ctx.host[4], ts_us: 150, dur_us: 10 }; // an earlier call at depth 4
  const L = layoutTimeline(ctx, { width: 800 });
  assert.equal(L.hostRows, 6);
  assert.ok(L.rows[5].items.some((i) => i.name === "cudaStreamSynchronize"));
  // The sync's span is its operator's (wider than the call): its API's row is drawn.
  const wide = { ...ctx, sync: { ts_us: 120, end_us: 450, idle_end_us: null } };
  assert.equal(layoutTimeline(wide, { width: 800 }).hostRows, 4);
  const withApi = layoutTimeline(wide, { width: 800, syncApis: ["cudaStreamSynchronize"] });
  assert.equal(withApi.hostRows, 6);
  // Nothing of the sync's below depth 1: the default 4 rows, no more than the events need.
  const shallow = { ...ctx, sync: { ts_us: 950, end_us: 990, idle_end_us: null } };
  assert.equal(layoutTimeline(shallow, { width: 800 }).hostRows, 4);
  assert.equal(layoutTimeline({ ...ctx, host: ctx.host.slice(0, 2) }, { width: 800 }).hostRows, 2);
});

test("a context without idle has no bubble, and a bad window gives no drawing", () => {
  const ctx = { window: [0, 100], sync: { ts_us: 10, end_us: 20, idle_end_us: null }, host: [], device: [] };
  assert.equal(layoutTimeline(ctx, { width: 400 }).bubble, null);
  assert.equal(layoutTimeline({ ...ctx, window: [5, 5] }, { width: 400 }), null);
  assert.equal(layoutTimeline(null, { width: 400 }), null);
});

test("a short bubble after a long wait is drawn visibly inside the plot and marked thin", () => {
  // The real A100 copy: 139 ms of wait, then 472 µs of GPU idle, 300 µs of margin.
  const t0 = 1683564901566011;
  const ctx = {
    window: [t0, t0 + 139879],
    sync: { ts_us: t0 + 300, end_us: t0 + 139107, idle_end_us: t0 + 139579 },
    host: [],
    device: [],
  };
  const L = layoutTimeline(ctx, { width: 520, labelW: 110 });
  const right = L.labelW + L.plotW;
  assert.equal(L.bubble.thin, true);
  assert.equal(L.bubble.clipped, false);
  assert.ok(L.bubble.w >= MIN_BUBBLE_PX);
  assert.ok(L.bubble.x + L.bubble.w <= right + 1e-9);
  assert.ok(L.bubble.x >= L.wait.x + L.wait.w - 1);
  // A wide bubble is neither.
  const wide = layoutTimeline({ ...ctx, sync: { ...ctx.sync, end_us: t0 + 1000, idle_end_us: t0 + 100000 } }, { width: 520, labelW: 110 });
  assert.equal(wide.bubble.thin, false);
});

test("a bubble past the window's end is clipped, one starting past it is not drawn", () => {
  const ctx = { window: [0, 1000], sync: { ts_us: 100, end_us: 900, idle_end_us: 1500 }, host: [], device: [] };
  const clipped = layoutTimeline(ctx, { width: 400, labelW: 100 });
  assert.equal(clipped.bubble.clipped, true);
  assert.ok(clipped.bubble.x + clipped.bubble.w <= clipped.labelW + clipped.plotW + 1e-9);
  const beyond = layoutTimeline({ ...ctx, sync: { ts_us: 100, end_us: 1000, idle_end_us: 1500 } }, { width: 400, labelW: 100 });
  assert.equal(beyond.bubble, null);
  assert.equal(beyond.bubbleBeyond, true);
});

/** A tiny stand-in document that records how nodes were made. */
function fakeDocument() {
  class Node {
    constructor(kind, name) {
      this.kind = kind;
      this.name = name;
      this.childNodes = [];
      this.attrs = {};
      this.listeners = {};
      this.style = { setProperty: (k, v) => (this.attrs[`style:${k}`] = v) };
      this.dataset = {};
    }
    get firstChild() {
      return this.childNodes[0] || null;
    }
    appendChild(c) {
      this.childNodes.push(c);
      return c;
    }
    removeChild(c) {
      this.childNodes.splice(this.childNodes.indexOf(c), 1);
    }
    setAttribute(k, v) {
      this.attrs[k] = v;
    }
    addEventListener(k, f) {
      this.listeners[k] = f;
    }
    set innerHTML(_) {
      throw new Error("innerHTML used");
    }
  }
  return {
    createElement: (tag) => new Node("element", tag),
    createElementNS: (_ns, tag) => new Node("svg", tag),
    createTextNode: (text) => Object.assign(new Node("text", "#text"), { text }),
  };
}

test("markup in data becomes a text node, never parsed HTML", () => {
  globalThis.document = fakeDocument();
  const evil = "<img src=x onerror=window.__xss=1>";
  const el = h("td", { class: "mono", title: evil }, evil, 42, null, false, [evil]);
  assert.equal(el.childNodes.length, 3);
  assert.ok(el.childNodes.every((c) => c.kind === "text"));
  assert.equal(el.childNodes[0].text, evil);
  assert.equal(el.childNodes[1].text, "42");
  assert.equal(el.attrs.title, evil); // attribute values are data too, set with setAttribute
  assert.throws(() => h("div", { innerHTML: evil }), /refusing/);
  replace(el, "x");
  assert.equal(el.childNodes.length, 1);
  delete globalThis.document;
});

test("event handlers are attached as listeners, not as inline attribute code", () => {
  globalThis.document = fakeDocument();
  const f = () => {};
  const el = h("button", { onclick: f });
  assert.equal(el.listeners.click, f);
  assert.equal(el.attrs.onclick, undefined);
  // A string on an on* key would become inline script: refused.
  assert.throws(() => h("button", { onmouseover: "alert(1)" }), /refusing/);
  assert.throws(() => h("a", { ONCLICK: "alert(1)" }), /refusing/);
  delete globalThis.document;
});

test("a roving-tabindex group is one Tab stop: arrow keys move it, Enter and Space act", () => {
  /** Rows of a table body: the focus and the Tab stop are what the handler changes. */
  let focused = null;
  const rows = [0, 1, 2].map((i) => ({
    i,
    attrs: { tabindex: i === 0 ? "0" : "-1" },
    setAttribute(k, v) {
      this.attrs[k] = v;
    },
    focus() {
      focused = this;
    },
    closest(selector) {
      return selector === "tr" ? this : null;
    },
  }));
  const body = { querySelectorAll: () => rows, contains: (el) => rows.includes(el) };
  const acted = [];
  const onKey = rovingKeys("tr", nextRowIndex, (i) => acted.push(i));
  const press = (key, row) => {
    let prevented = false;
    onKey({ key, target: row, currentTarget: body, preventDefault: () => (prevented = true) });
    return prevented;
  };
  const stops = () => rows.filter((r) => r.attrs.tabindex === "0").map((r) => r.i);
  assert.ok(press("ArrowDown", rows[0]));
  assert.equal(focused, rows[1]);
  assert.deepEqual(stops(), [1]);
  press("End", rows[1]);
  assert.equal(focused, rows[2]);
  assert.deepEqual(stops(), [2]);
  press("ArrowDown", rows[2]); // stays on the last row
  assert.deepEqual(stops(), [2]);
  press("Home", rows[2]);
  press("ArrowUp", rows[0]);
  assert.deepEqual(stops(), [0]);
  // Enter and Space act on the focused row, as a click; neither scrolls the page.
  assert.ok(press("Enter", rows[1]));
  assert.ok(press(" ", rows[2]));
  assert.deepEqual(acted, [1, 2]);
  // Other keys (Tab) are left to the browser: Tab leaves the group.
  assert.equal(press("Tab", rows[0]), false);
  assert.deepEqual(stops(), [0]);
});

test("a stream's sync records get a row of their own under it, off its kernels", () => {
  const ctx = {
    window: [0, 1000],
    sync: { ts_us: 100, end_us: 500, idle_end_us: null },
    host: [],
    device: [
      { lane: "GPU 0 stream 7", name: "kernel_a", cat: "kernel", ts_us: 0, dur_us: 300 },
      { lane: "GPU 0 stream 7", name: "Stream Sync", cat: "cuda_sync", ts_us: 100, dur_us: 400 },
    ],
  };
  const L = layoutTimeline(ctx, { width: 800 });
  assert.deepEqual(L.rows.map((r) => r.label), ["GPU 0 stream 7", "GPU 0 stream 7 syncs"]);
  assert.deepEqual(L.rows.map((r) => r.items.map((i) => i.name)), [["kernel_a"], ["Stream Sync"]]);
});
