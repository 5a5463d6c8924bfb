import assert from "node:assert/strict";
import { test } from "node:test";

import { jobParts, lateCell, rankList, jobStart } from "../src/job.js";

test("a rank that held the others reads +, one that waited reads −, absent reads ·", () => {
  assert.deepEqual(lateCell({ late_us: 80000, wait_us: 0 }), { text: "+80.0 ms", cls: "sa-job-late" });
  assert.deepEqual(lateCell({ late_us: 0, wait_us: 4000 }), { text: "\u22124.00 ms", cls: "sa-job-wait" });
  assert.deepEqual(lateCell(undefined), { text: "·", cls: "sa-job-none" });
  assert.deepEqual(lateCell({ late_us: 0, wait_us: 0 }), { text: "0", cls: "sa-job-none" });
  // A step where none of the rank's collectives was matched: as the legend says, not "0".
  assert.deepEqual(lateCell({ late_us: 0, wait_us: 0, collectives: 0 }), { text: "·", cls: "sa-job-none" });
});

test("ranks read as a list with ranges", () => {
  assert.equal(rankList([0]), "rank 0");
  assert.equal(rankList([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]), "ranks 1\u201315");
  assert.equal(rankList([7, 0, 2, 5, 6]), "ranks 0, 2, 5\u20137");
  assert.equal(rankList([3, 4]), "ranks 3, 4");
});

const issue = (code, message) => ({ code, message, severity: "warning" });

test("unrelated traces of one rank each: one line, no counts, grid, sites or rank rows", () => {
  // A folder of traces from three jobs, one rank of each (HTA's real traces).
  const job = {
    world_size: 2,
    ranks: [1],
    missing_ranks: [0],
    rank_steps: [],
    sites: [],
    rank_totals: [{ rank: 1, sync_wait_us: 0 }],
    issues: [issue("missing_ranks", "1 of 2 ranks have no trace: 0; the analysis is partial"), issue("other_job", "the run holds 3 jobs …")],
    other_jobs: [
      { world_size: 2, ranks: [0] },
      { world_size: 16, ranks: [0] },
    ],
  };
  const parts = jobParts(job);
  assert.equal(parts.title, "Ranks of 3 jobs");
  assert.match(parts.alone, /come from 3 different jobs .*nothing to compare across ranks/);
  assert.equal(parts.missing, null);
  assert.deepEqual(parts.issues, []);
  assert.equal(parts.grid, false);
  assert.equal(parts.ranks, false);
  assert.deepEqual(parts.sites, []);
  // One rank of one job: said so, without "missing 0" beside "1 of 2".
  const lone = jobParts({ ...job, other_jobs: [], issues: [job.issues[0]] });
  assert.equal(lone.title, "Job of 2 ranks");
  assert.match(lone.alone, /^Only rank 1's trace of this 2-rank job is here/);
  assert.deepEqual(lone.issues, []);
});

test("a real job keeps its grid and ranks, says the missing ranks once, drops zero-cost sites", () => {
  const site = (rank, caused, saving) => ({ rank, file: "train.py", line: 88, caused_wait_us: caused, job_saving_us: saving, job_saving_per_step_us: saving / 5 });
  const parts = jobParts({
    world_size: 8,
    ranks: [0, 1, 2, 3, 4, 5, 7],
    missing_ranks: [6],
    rank_steps: [{ rank: 0, step: 1 }],
    sites: [site(3, 246, 41), site(0, 0, 0), site(5, 12, 0)],
    issues: [issue("missing_ranks", "1 of 8 ranks have no trace: 6; the analysis is partial"), { code: "clock_skew", message: "clocks aligned", severity: "info" }],
  });
  assert.equal(parts.title, "Job: 7 of 8 ranks");
  assert.equal(parts.missing, "no trace of rank 6");
  assert.deepEqual(parts.issues, []);
  assert.equal(parts.alone, null);
  assert.equal(parts.grid, true);
  assert.equal(parts.ranks, true);
  assert.deepEqual(parts.sites.map((s) => s.rank), [3, 5]);
  // No collective matched across the ranks: a grid of dots says nothing, and is not drawn.
  assert.equal(jobParts({ world_size: 2, ranks: [0, 1], missing_ranks: [], rank_steps: [{ rank: 0, step: 1 }], collective_count: 0 }).grid, false);
});

test("the rank that sets the job's pace is said, other notes are not", () => {
  const pace = "rank 1 sets the job's pace: its own work takes 32.32 ms per step, 4.29 ms more than rank 0's";
  const parts = jobParts({
    world_size: 2,
    ranks: [0, 1],
    missing_ranks: [],
    rank_steps: [{ rank: 0, step: 1 }],
    issues: [{ code: "clock_skew", message: "clocks aligned", severity: "info" }, { code: "pace", message: pace, severity: "info" }],
  });
  assert.deepEqual(parts.issues, [{ message: pace, warning: false }]);
});

test("one rank of a job beside another job that does compare keeps the other job's warning", () => {
  const parts = jobParts({
    world_size: 2,
    ranks: [1],
    missing_ranks: [0],
    issues: [issue("other_job", "the run holds 2 jobs: the 4-rank one is analysed apart")],
    other_jobs: [{ world_size: 4, ranks: [0, 1, 2, 3] }],
  });
  assert.equal(parts.title, "Job of 2 ranks");
  assert.match(parts.alone, /^Only rank 1's trace of this 2-rank job is here/);
  // The view does not say there is another job: the warning does.
  assert.deepEqual(parts.issues, [{ message: "the run holds 2 jobs: the 4-rank one is analysed apart", warning: true }]);
});

test("a job of many ranks shows the ranks that matter first and folds the rest", async () => {
  const { rankOrder, SITE_COLUMNS } = await import("../src/job.js");
  const totals = Array.from({ length: 320 }, (_, rank) => ({ rank, late_us: 0, caused_wait_us: 0 }));
  totals[5] = { rank: 5, late_us: 1000, caused_wait_us: 300000 };
  totals[200] = { rank: 200, late_us: 9000, caused_wait_us: 900000 };
  totals[17] = { rank: 17, late_us: 50, caused_wait_us: 0 };
  const { first, rest } = rankOrder({ rank_totals: totals, rank_steps: [] });
  assert.deepEqual(first, [200, 5, 17]);
  assert.equal(rest.length, 317);
  assert.deepEqual(rest.slice(0, 3), [0, 1, 2]);
  // a small job: every rank, by number, nothing folded
  const small = rankOrder({ rank_totals: [{ rank: 2, late_us: 5 }, { rank: 0 }, { rank: 1 }], rank_steps: [] });
  assert.deepEqual(small, { first: [0, 1, 2], rest: [] });
  // the sites table's column is the wait the site caused, with a tooltip saying so
  const caused = SITE_COLUMNS.find((c) => c.label === "wait it caused");
  assert.ok(caused && /explain/.test(caused.title));
  assert.ok(!SITE_COLUMNS.some((c) => c.label === "others waited"));
});

test("another job of the run is dated from its key, in UTC", () => {
  assert.equal(jobStart("world 4 from 1795762674.612556s (gloo)"), "2026-11-27 06:57:54 UTC");
  assert.equal(jobStart("world 2 from 0s"), "1970-01-01 00:00:00 UTC");
  assert.equal(jobStart(null), null);
  assert.equal(jobStart("world 4"), null);
});

test("a rank renumbered is said, and how many collectives were matched above what floor", () => {
  const renumbered = "rank 1's steps are numbered 6-10 where the other ranks' over the same time are 1-5";
  const parts = jobParts({
    world_size: 2,
    ranks: [0, 1],
    missing_ranks: [],
    rank_steps: [{ rank: 0, step: 1 }],
    collective_count: 5,
    late_collective_count: 0,
    noise_us: 43500,
    issues: [{ code: "steps_renumbered", message: renumbered, severity: "info" }],
  });
  assert.deepEqual(parts.issues, [{ message: renumbered, warning: false }]);
  assert.equal(parts.matched, "5 collectives matched, 0 with a late rank; lateness below 43.5 ms is not called lateness");
  assert.equal(jobParts({ world_size: 2, ranks: [1], missing_ranks: [0], issues: [] }).matched, null);
});
