// @ts-check
/**
 * Entry point of the Sync Advisor dashboard. TensorBoard imports this ES module into the
 * plugin iframe (`data/plugin_entry.html?name=sync_advisor`) and the module renders into
 * `document.body`. Styles ship inside the bundle: nothing is fetched but the plugin's JSON.
 */
import { App } from "./app.js";
import css from "./styles.css";

const style = document.createElement("style");
style.textContent = css;
document.head.appendChild(style);
document.title = "Sync Advisor";
new App(document.body).start();
