// @ts-check
/**
 * The job view (issue 17): for a run whose traces are the ranks of one multi-rank job, a
 * rank x step grid of lateness (held the others vs waited for a peer), per-rank host wait
 * beside collective wait, and the top sites by cost to the job with rank and line. Runs
 * that are not jobs (`job` null in the `job` route) show nothing.
 */

import { getJson } from "./api.js";
import { h } from "./dom.js";
import { fileLine, formatUs } from "./format.js";

/**
 * One grid cell's text and class: `+` for the time this rank held the others, `−` for the
 * time it waited on a peer, `·` where it took no part in that step.
 * @param {any} row  a `rank_steps` entry or undefined
 * @returns {{text: string, cls: string}}
 */
export function lateCell(row) {
  if (!row) return { text: "·", cls: "sa-job-none" };
  if (row.late_us > 0) return { text: `+${formatUs(row.late_us)}`, cls: "sa-job-late" };
  if (row.wait_us > 0) return { text: `\u2212${formatUs(row.wait_us)}`, cls: "sa-job-wait" };
  return { text: "0", cls: "sa-job-none" };
}

/**
 * @param {any} job
 */
function latenessGrid(job) {
  const rows = job.rank_steps || [];
  const steps = [...new Set(rows.map((/** @type {any} */ r) => r.step))].sort((a, b) => a - b);
  /** @type {Map<number, Map<number, any>>} */
  const grid = new Map();
  for (const r of rows) {
    if (!grid.has(r.rank)) grid.set(r.rank, new Map());
    grid.get(r.rank)?.set(r.step, r);
  }
  const ranks = [...grid.keys()].sort((a, b) => a - b);
  return h(
    "table",
    { class: "sa-table sa-job-grid", "data-testid": "job-grid" },
    h("thead", null, h("tr", null, h("th", null, "rank"), steps.map((s) => h("th", null, `step ${s}`)))),
    h(
      "tbody",
      null,
      ranks.map((rank) =>
        h(
          "tr",
          { "data-rank": String(rank) },
          h("th", null, String(rank)),
          steps.map((s) => {
            const cell = lateCell(grid.get(rank)?.get(s));
            return h("td", { class: cell.cls }, cell.text);
          }),
        ),
      ),
    ),
  );
}

/**
 * @param {any} job
 */
function rankTable(job) {
  return h(
    "table",
    { class: "sa-table", "data-testid": "job-ranks" },
    h("thead", null, h("tr", null, ["rank", "host wait", "blocking", "collective wait", "late", "others waited"].map((t) => h("th", null, t)))),
    h(
      "tbody",
      null,
      (job.rank_totals || []).map((/** @type {any} */ r) =>
        h(
          "tr",
          null,
          h("td", null, String(r.rank)),
          h("td", null, formatUs(r.sync_wait_us)),
          h("td", null, formatUs(r.blocking_wait_us)),
          h("td", null, formatUs(r.wait_in_collectives_us)),
          h("td", null, formatUs(r.late_us)),
          h("td", null, formatUs(r.caused_wait_us)),
        ),
      ),
    ),
  );
}

/**
 * @param {any} job
 */
function siteTable(job) {
  const sites = (job.sites || []).slice(0, 10);
  if (!sites.length) return h("p", { class: "sa-note" }, "No host wait on a late rank explains its lateness.");
  return h(
    "table",
    { class: "sa-table", "data-testid": "job-sites" },
    h("thead", null, h("tr", null, ["rank", "site", "op", "others waited", "job saves / step"].map((t) => h("th", null, t)))),
    h(
      "tbody",
      null,
      sites.map((/** @type {any} */ s) =>
        h(
          "tr",
          null,
          h("td", null, String(s.rank)),
          h("td", null, h("code", null, fileLine(s.file, s.line))),
          h("td", null, s.op || "\u2013"),
          h("td", null, formatUs(s.caused_wait_us)),
          h("td", { title: s.bound ? "upper bound" : "" }, formatUs(s.job_saving_per_step_us), s.bound ? "*" : ""),
        ),
      ),
    ),
  );
}

/**
 * The job section of a run, or null when the run is not a job.
 * @param {{sel: {run: string}}} ctx
 * @returns {Promise<HTMLElement | null>}
 */
export async function renderJob(ctx) {
  const resp = await getJson("job", { run: ctx.sel.run });
  const job = resp && resp.job;
  if (!job || !job.world_size) return null;
  const late = job.lateness || {};
  const missing = job.missing_ranks || [];
  return h(
    "section",
    { class: "sa-job", "aria-label": "Job", "data-testid": "job" },
    h(
      "div",
      { class: "sa-section-title" },
      `Job: ${(job.ranks || []).length} of ${job.world_size} ranks`,
      job.backend ? h("span", { class: "sa-chip" }, job.backend) : null,
      missing.length ? h("span", { class: "sa-chip", "data-testid": "job-missing" }, `missing ${missing.join(", ")}`) : null,
    ),
    (job.issues || [])
      .filter((/** @type {any} */ i) => i.severity === "warning")
      .map((/** @type {any} */ i) => h("p", { class: "sa-note", "data-testid": "job-issue" }, i.message)),
    h("h4", null, "Lateness per rank and step (+ held the others, \u2212 waited for a peer)"),
    latenessGrid(job),
    h("h4", null, "Top sites by cost to the job"),
    siteTable(job),
    h("h4", null, "Host wait beside collective wait"),
    rankTable(job),
    late.late_us
      ? h(
          "p",
          { class: "sa-note", "data-testid": "job-lateness" },
          `Lateness ${formatUs(late.late_us)}: explained by host waits ${formatUs(late.explained_us)}, `,
          `carried in from before the window ${formatUs(late.carried_in_us)}, `,
          `not explained by host waits (data loading, Python, GPU compute) ${formatUs(late.not_explained_us)}.`,
        )
      : null,
  );
}
