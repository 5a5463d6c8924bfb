// @ts-check
/**
 * Entry point of the Sync Advisor dashboard. TensorBoard's plugin_entry.html runs
 * `import("./index.js").then((m) => void m.render())` inside the plugin iframe, whose
 * `<base href="plugin/sync_advisor/">` makes every relative URL hit the plugin's routes.
 * `render()` fills `document.body`. Styles ship inside the bundle: nothing is fetched but
 * the plugin's JSON.
 */
import { App } from "./app.js";
import css from "./styles.css";

let started = false;

/** Render the dashboard into `document.body` (idempotent: a second call does nothing). */
export function render() {
  if (started) return;
  started = true;
  const style = document.createElement("style");
  style.textContent = css;
  document.head.appendChild(style);
  document.title = "Sync Advisor";
  // TensorBoard's frame page declares no language: screen readers guess it otherwise.
  if (!document.documentElement.lang) document.documentElement.lang = "en";
  new App(document.body).start();
}
