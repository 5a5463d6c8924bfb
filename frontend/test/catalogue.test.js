import { test } from "node:test";
import assert from "node:assert/strict";
import { kindDescription, kindLabel, kindRank, kindStyles, setCatalogue } from "../src/catalogue.js";

const served = {
  kinds: [
    { name: "scalar_readback", label: "scalar readback", description: "read back", colour: "#d84315", colour_dark: "#ff8a65" },
    { name: "collective_wait", label: "collective wait", description: "waits on peers", colour: "#1565c0", colour_dark: "#90caf9" },
  ],
};

test("kind labels, descriptions and order come from the served catalogue", () => {
  setCatalogue(served);
  assert.equal(kindLabel("collective_wait"), "collective wait");
  assert.equal(kindDescription("scalar_readback"), "read back");
  assert.ok(kindRank("scalar_readback") < kindRank("collective_wait"));
  assert.equal(kindRank("not_served"), 2);
});

test("kinds the catalogue does not know read as their names, on a neutral badge", () => {
  setCatalogue(null);
  assert.equal(kindLabel("some_new_kind"), "some new kind");
  assert.equal(kindLabel(null), "unknown");
  assert.equal(kindDescription("some_new_kind"), "");
  assert.equal(kindStyles(), "");
});

test("badge colours become CSS rules only for safe names and colours", () => {
  setCatalogue({
    kinds: [
      ...served.kinds,
      { name: "x} body { display:none", label: "bad", colour: "#000" },
      { name: "ok_name", label: "ok", colour: "red; background-image:url(x)" },
    ],
  });
  const css = kindStyles();
  assert.match(css, /\.sa-badge\.k-scalar_readback \{ background: #d84315; \}/);
  assert.match(css, /:root\[data-theme="dark"\] \.sa-badge\.k-collective_wait \{ background: #90caf9; \}/);
  assert.doesNotMatch(css, /display:none|url\(/);
});
