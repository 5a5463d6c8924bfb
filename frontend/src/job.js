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
import { siteWhere } from "./sites.js";

/**
 * One grid cell's text and class: `+` for the time this rank held the others, `−` for the
 * time it waited on a peer, `·` where none of its collectives was matched in that step.
 * @param {any} row  a `rank_steps` entry or undefined
 * @returns {{text: string, cls: string}}
 */
export function lateCell(row) {
  if (!row || row.collectives === 0) return { text: "·", cls: "sa-job-none" };
  if (row.late_us > 0) return { text: `+${formatUs(row.late_us)}`, cls: "sa-job-late" };
  if (row.wait_us > 0) return { text: `\u2212${formatUs(row.wait_us)}`, cls: "sa-job-wait" };
  return { text: "0", cls: "sa-job-none" };
}

/**
 * Ranks as a person reads them: `rank 0`, `ranks 1–15`, `ranks 0, 2, 5–7`.
 * @param {number[]} ranks
 * @returns {string}
 */
export function rankList(ranks) {
  const sorted = [...new Set(ranks)].sort((a, b) => a - b);
  const parts = [];
  for (let i = 0; i < sorted.length; ) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j] + 1) j++;
    parts.push(j - i >= 2 ? `${sorted[i]}–${sorted[j]}` : sorted.slice(i, j + 1).join(", "));
    i = j + 1;
  }
  return `${sorted.length === 1 ? "rank" : "ranks"} ${parts.join(", ")}`;
}

/** Notes (not warnings) the view shows: the pace rank, and a rank whose steps it numbers
 * otherwise than its trace does (the terminal lists every note). */
const INFO_SHOWN = new Set(["pace", "steps_renumbered"]);

/**
 * What the job view shows of a `job` object, without contradiction or empty parts: the
 * ranks whose traces are missing said once (not "missing 0" beside a count), the parts that
 * compare ranks only when at least two ranks of the job have a trace (else one line saying
 * why there is nothing to compare), the lateness grid only when a step of the job was
 * matched, and the top sites that cost the job something.
 * @param {any} job
 */
export function jobParts(job) {
  const ranks = job.ranks || [];
  const missing = job.missing_ranks || [];
  const others = (job.other_jobs || []).filter((/** @type {any} */ j) => j && j.world_size);
  const compared = ranks.length >= 2;
  // One rank's trace of each of several jobs: nothing in the run compares across ranks.
  const unrelated = !compared && others.length > 0 && !others.some((/** @type {any} */ j) => (j.ranks || []).length >= 2);
  /** @type {string | null} */
  let alone = null;
  if (unrelated) {
    alone = `The traces of this run come from ${others.length + 1} different jobs (or profiled windows), one rank's trace each: there is nothing to compare across ranks.`;
  } else if (!compared) {
    alone = `Only ${rankList(ranks)}'s trace of this ${job.world_size}-rank job is here: lateness and waits across ranks need the traces of at least two of its ranks.`;
  }
  const sites = (job.sites || []).filter(
    (/** @type {any} */ s) => (s.caused_wait_us || 0) > 0 || (s.job_saving_us || 0) > 0 || (s.job_saving_per_step_us || 0) > 0,
  );
  return {
    title: compared ? `Job: ${ranks.length} of ${job.world_size} ranks` : unrelated ? `Ranks of ${others.length + 1} jobs` : `Job of ${job.world_size} ranks`,
    missing: compared && missing.length ? `no trace of ${rankList(missing)}` : null,
    // Issues the view says itself: the missing ranks, and the other jobs when it says the
    // traces come from unrelated jobs (another job that does compare stays a warning). Of
    // the notes, the rank that sets the job's pace: with collectives waited for later, the
    // grid may show little waiting yet.
    issues: (job.issues || [])
      .filter(
        (/** @type {any} */ i) =>
          (i.severity === "warning" && i.code !== "missing_ranks" && !(unrelated && i.code === "other_job")) ||
          (compared && INFO_SHOWN.has(i.code)),
      )
      // A warning says the figures may mislead; a note only adds to them: told apart.
      .map((/** @type {any} */ i) => ({ message: String(i.message), warning: i.severity === "warning" })),
    // What the terminal's first line under the title says: without it, a view with no late
    // rank gave no hint that its collectives were matched at all, or below what floor.
    matched: compared
      ? `${job.collective_count || 0} collectives matched, ${job.late_collective_count || 0} with a late rank; lateness below ${formatUs(job.noise_us || 0)} is not called lateness`
      : null,
    alone,
    grid: compared && (job.rank_steps || []).length > 0 && job.collective_count !== 0,
    sites: compared ? sites.slice(0, 10) : [],
    ranks: compared,
  };
}

/** Jobs of more ranks than this show the ranks that matter first and fold the rest. */
export const RANKS_UNFOLDED = 16;
/** How many ranks that matter a folded job shows before "show all N ranks". */
export const RANKS_FIRST = 10;

/**
 * Which ranks a job's grid and rank table show first and which behind "show all N ranks".
 * Up to `RANKS_UNFOLDED` ranks: all, by rank number. More: the ranks that matter first, the
 * ones whose lateness made the others wait most, then the latest (at most `RANKS_FIRST`),
 * and the rest folded, by rank number.
 * @param {any} job
 * @param {number} [first]
 * @returns {{first: number[], rest: number[]}}
 */
export function rankOrder(job, first = RANKS_FIRST) {
  /** @type {Map<number, {late: number, caused: number}>} */
  const weight = new Map();
  const at = (/** @type {number} */ rank) => {
    if (!weight.has(rank)) weight.set(rank, { late: 0, caused: 0 });
    return /** @type {{late: number, caused: number}} */ (weight.get(rank));
  };
  const totals = job.rank_totals || [];
  for (const r of totals) {
    const w = at(r.rank);
    w.late = r.late_us || 0;
    w.caused = r.caused_wait_us || 0;
  }
  for (const r of job.rank_steps || []) {
    const w = at(r.rank);
    if (!totals.length) w.late += r.late_us || 0;
  }
  const all = [...weight.keys()].sort((a, b) => a - b);
  if (all.length <= RANKS_UNFOLDED) return { first: all, rest: [] };
  const matter = all
    .filter((r) => at(r).late > 0 || at(r).caused > 0)
    .sort((a, b) => at(b).caused - at(a).caused || at(b).late - at(a).late || a - b)
    .slice(0, first);
  const shown = new Set(matter);
  return { first: matter, rest: all.filter((r) => !shown.has(r)) };
}

/**
 * A table body's rows of the ranks that matter, then the others folded (hidden) behind a
 * "show all N ranks" button under the table.
 * @param {HTMLElement} table
 * @param {string} testid
 * @param {number} total
 * @param {number} folded
 */
function foldable(table, testid, total, folded) {
  // In a scroll box of its own: a wide grid (many steps, long worker names) scrolls
  // sideways instead of widening the page.
  const wrapped = h("div", { class: "sa-table-wrap" }, table);
  if (!folded) return wrapped;
  const button = h(
    "button",
    {
      class: "sa-linkish",
      "data-testid": `${testid}-all`,
      "data-focus-key": `${testid}-all`,
      "aria-expanded": "false",
      onclick: () => {
        const open = button.getAttribute("aria-expanded") !== "true";
        for (const row of table.querySelectorAll("tr.sa-job-folded")) /** @type {HTMLElement} */ (row).hidden = !open;
        button.setAttribute("aria-expanded", String(open));
        button.textContent = open ? `show only the ${total - folded} ranks that matter` : `show all ${total} ranks`;
      },
    },
    `show all ${total} ranks`,
  );
  return h("div", null, wrapped, h("p", { class: "sa-note" }, `${total - folded} of ${total} ranks shown: the late ones and those the others waited for most. `, button));
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
  const order = rankOrder(job);
  const folded = new Set(order.rest);
  const ranks = [...order.first, ...order.rest].filter((r) => grid.has(r));
  const table = h(
    "table",
    { class: "sa-table sa-job-grid", "data-testid": "job-grid" },
    h("thead", null, h("tr", null, h("th", null, "rank"), steps.map((s) => h("th", null, `step ${s}`)))),
    h(
      "tbody",
      null,
      ranks.map((rank) =>
        h(
          "tr",
          { "data-rank": String(rank), class: folded.has(rank) ? "sa-job-folded" : null, hidden: folded.has(rank) },
          h("th", null, String(rank)),
          steps.map((s) => {
            const cell = lateCell(grid.get(rank)?.get(s));
            return h("td", { class: cell.cls }, cell.text);
          }),
        ),
      ),
    ),
  );
  return foldable(table, "job-grid", ranks.length, ranks.filter((r) => folded.has(r)).length);
}

/** The columns of the job's rank table, as the terminal's "Ranks" table has them. */
export const RANK_COLUMNS = ["rank", "worker", "host wait", "blocking", "collective wait", "late", "others waited"];

/**
 * @param {any} job
 */
function rankTable(job) {
  const order = rankOrder(job);
  const folded = new Set(order.rest);
  const byRank = new Map((job.rank_totals || []).map((/** @type {any} */ r) => [r.rank, r]));
  const rows = [...order.first, ...order.rest].filter((r) => byRank.has(r)).map((r) => byRank.get(r));
  // No collective matched across ranks: the collectives' columns measured nothing ("–",
  // not "0 µs" beside a rank's collective wait sites).
  const ofMatched = (/** @type {number} */ us) => (job.collective_count === 0 ? "–" : formatUs(us));
  const table = h(
    "table",
    { class: "sa-table", "data-testid": "job-ranks" },
    h("thead", null, h("tr", null, RANK_COLUMNS.map((t) => h("th", null, t)))),
    h(
      "tbody",
      null,
      rows.map((/** @type {any} */ r) =>
        h(
          "tr",
          { "data-rank": String(r.rank), class: folded.has(r.rank) ? "sa-job-folded" : null, hidden: folded.has(r.rank) },
          h("td", null, String(r.rank)),
          // The worker names the rank's trace (the terminal's column); its path on hover.
          h("td", { class: "sa-job-worker", title: r.path || null }, r.worker || "-"),
          h("td", null, formatUs(r.sync_wait_us)),
          h("td", null, formatUs(r.blocking_wait_us)),
          h("td", null, ofMatched(r.wait_in_collectives_us)),
          h("td", null, ofMatched(r.late_us)),
          h("td", null, ofMatched(r.caused_wait_us)),
        ),
      ),
    ),
  );
  return foldable(table, "job-ranks", rows.length, rows.filter((/** @type {any} */ r) => folded.has(r.rank)).length);
}

/**
 * The columns of "Top sites by cost to the job". "wait it caused" is the part of the other
 * ranks' wait that this site's syncs explain, not the rank's whole lateness times its peers
 * (the Ranks table's "others waited"); the CLI names it the same.
 */
export const SITE_COLUMNS = [
  { label: "rank", title: null },
  { label: "site", title: null },
  { label: "op", title: null },
  {
    label: "wait it caused",
    title: "The part of the other ranks' wait for this rank that this site's syncs explain (over ranks and steps); the Ranks table's \"others waited\" is the rank's whole lateness times its peers.",
  },
  { label: "job saves / step", title: null },
];

/**
 * @param {any} job
 * @param {any[]} sites the ones that cost the job something (`jobParts`)
 * @param {any} [app] a row opens its site's detail below (the rows looked clickable, and a
 *   click did nothing)
 */
function siteTable(job, sites, app = null) {
  if (!sites.length) return h("p", { class: "sa-note" }, "No host wait on a late rank explains its lateness.");
  return h(
    "div",
    { class: "sa-table-wrap" },
    h(
    "table",
    { class: "sa-table", "data-testid": "job-sites" },
    h(
      "thead",
      null,
      h(
        "tr",
        null,
        SITE_COLUMNS.map((c) => h("th", { title: c.title }, c.label)),
      ),
    ),
    h(
      "tbody",
      null,
      sites.map((/** @type {any} */ s) => {
        // A sync's site is in the run's sites; a blocking call (a sleep, a wait on a
        // collective) is not, and has no detail to open. The table lists every rank's
        // sites: opened with all workers, not within one picked before.
        const open = app && s.is_sync && s.site_key ? () => app.setState({ site: s.site_key, sync: null, step: null, worker: null, span: null }) : null;
        return h(
          "tr",
          {
            class: open ? null : "sa-static",
            tabindex: open ? "0" : null,
            "data-site": s.site_key || null,
            title: open ? "Open this site's detail" : null,
            onclick: open,
            onkeydown: open
              ? (/** @type {KeyboardEvent} */ e) => {
                  if (e.key === "Enter" || e.key === " ") {
                    e.preventDefault();
                    open();
                  }
                }
              : null,
          },
          h("td", null, String(s.rank)),
          h("td", { title: s.line_exact === false ? siteWhere(s).title : null }, h("code", null, fileLine(s.file, s.line), s.line_exact === false && s.file ? "*" : "")),
          h("td", null, s.op || "\u2013"),
          h("td", null, formatUs(s.caused_wait_us)),
          h("td", { title: s.bound ? "upper bound" : "" }, formatUs(s.job_saving_per_step_us), s.bound ? "*" : ""),
        );
      }),
    ),
    ),
  );
}

/**
 * The job section of a run, or null when the run is not a job.
 * @param {{sel: {run: string}, app?: any}} ctx
 * @returns {Promise<HTMLElement | null>}
 */
export async function renderJob(ctx) {
  const resp = await getJson("job", { run: ctx.sel.run });
  const job = resp && resp.job;
  if (!job || !job.world_size) return null;
  // Another job of the run whose ranks compare (two jobs' traces in one folder): shown in
  // full after the main one, where only a line named it (its late rank and its cost were
  // in the JSON alone).
  const others = (job.other_jobs || []).filter((/** @type {any} */ j) => j && j.world_size && (j.ranks || []).length >= 2);
  const main = jobSection(job, ctx, null);
  if (!others.length) return main;
  return h("div", { class: "sa-jobs" }, main, others.map((/** @type {any} */ other) => jobSection(other, ctx, other)));
}

/**
 * When a job's window began, from its key ("world 4 from 1795762674.612556s (gloo)"), as
 * UTC; null where the key says no time.
 * @param {string | null | undefined} key
 */
export function jobStart(key) {
  const found = /from (\d+(?:\.\d+)?)s/.exec(String(key || ""));
  if (!found) return null;
  const date = new Date(Number(found[1]) * 1000);
  return Number.isNaN(date.getTime()) ? null : `${date.toISOString().slice(0, 19).replace("T", " ")} UTC`;
}

/**
 * @param {any} job
 * @param {any} ctx
 * @param {any} other this job again where it is another job of the run (null: the main one)
 */
function jobSection(job, ctx, other) {
  const late = job.lateness || {};
  const parts = jobParts(job);
  const start = other ? jobStart(job.key) : null;
  return h(
    "section",
    { class: "sa-job", "aria-label": other ? "Another job" : "Job", "data-testid": other ? "other-job" : "job" },
    h(
      "div",
      { class: "sa-section-title" },
      other ? `Another job in this run${start ? `, recorded from ${start}` : ""}: ` : null,
      parts.title,
      job.backend ? h("span", { class: "sa-chip" }, job.backend) : null,
      parts.missing ? h("span", { class: "sa-chip", "data-testid": "job-missing", title: "the analysis is partial" }, parts.missing) : null,
    ),
    parts.alone ? h("p", { class: "sa-note", "data-testid": "job-alone" }, parts.alone) : null,
    parts.matched ? h("p", { class: "sa-note", "data-testid": "job-matched" }, parts.matched) : null,
    parts.issues.map((issue) =>
      issue.warning
        ? h("p", { class: "sa-note sa-job-warning", "data-testid": "job-issue", "data-severity": "warning" }, h("b", null, "Warning: "), issue.message)
        : h("p", { class: "sa-note", "data-testid": "job-issue", "data-severity": "info" }, issue.message),
    ),
    parts.grid ? [h("h4", null, "Lateness per rank and step (+ held the others, \u2212 waited for a peer, \u00b7 none of the rank's collectives matched in that step)"), latenessGrid(job)] : null,
    parts.ranks ? [h("h4", null, "Top sites by cost to the job"), siteTable(job, parts.sites, ctx.app)] : null,
    parts.ranks ? [h("h4", null, "Host wait beside collective wait"), rankTable(job)] : null,
    parts.ranks && late.late_us
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
