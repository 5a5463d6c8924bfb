// Bundle and minify the dashboard into the Python package (tb_syncfinder/static/index.js).
// Deterministic: same sources + same esbuild version => byte-identical output, which CI
// checks with `git diff --exit-code tb_syncfinder/static` after `npm ci && npm run build`.
import { build } from "esbuild";
import { fileURLToPath } from "node:url";
import path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));

await build({
  entryPoints: [path.join(here, "src/main.js")],
  outfile: path.join(here, "../tb_syncfinder/static/index.js"),
  bundle: true,
  minify: true,
  format: "esm",
  target: ["es2020", "chrome100", "firefox100", "safari15"],
  loader: { ".css": "text" },
  legalComments: "none",
  charset: "utf8",
  sourcemap: false,
  logLevel: "warning",
});
