// @ts-check
/**
 * The dashboard: state (in the iframe's location hash), the runs poller, and the top-level
 * layout (header, banners, hotspots or compare view, detail panel).
 */
import { ApiError, clearCache, getJson } from "./api.js";
import { kindStyles, setCatalogue } from "./catalogue.js";
import { pickBaseline, selfBaselineText } from "./compare.js";
import { renderCompare } from "./compare_view.js";
import { renderDetail } from "./detail.js";
import { h, replace } from "./dom.js";
import { spanLabels } from "./format.js";
import { CHART_TAB_STOP, renderHotspots } from "./hotspots.js";
import { renderJob } from "./job.js";
import { apiUrl } from "./query.js";
import { otherRunsUnreadable, readableCount, repairNotices, runOptionLabel, unreadableBanner } from "./repairs.js";
import {
  decodeState,
  encodeState,
  hashNeedsRewrite,
  linkStepTimeProblem,
  missingWorkerOrSpan,
  parseTbHash,
  patchState,
  pickRun,
  reconcileRun,
  runsSignature,
  shareUrl,
  sortRuns,
  sortWorkers,
  stateFromTbHash,
  TB_PREFIX,
  tbHashWithState,
  vscodeAncestry,
  vscodeFlag,
} from "./state.js";
import { chooseTheme } from "./theme.js";

/** @typedef {import("./state.js").ViewState} ViewState */
/** @typedef {import("./dom.js").Child} Child */

/** The parts of the view state whose change is a move Back returns from (`setState`). */
const NAVIGATION_KEYS = Object.freeze(["run", "worker", "span", "view", "base", "site", "step"]);
// How soon after a picker's change (run, worker, span, baseline) another counts as the same
// burst of arrow presses: one history entry for them all.
const PICK_BURST_MS = 1000;

/** How often the runs list is polled: fast while the plugin is still loading traces. */
const POLL_LOADING_MS = 3000;
// 10 s: the plugin's own default reload interval, so a run added to the logdir shows within
// about two of them (TensorBoard's reload button, in the page around this frame, reaches no
// plugin frame).
const POLL_IDLE_MS = 10000;

export class App {
  /** @param {HTMLElement} root */
  constructor(root) {
    this.root = root;
    /** When a picker last changed the view (ms), for one history entry per burst; null: not the last change. @type {number | null} */
    this.lastPick = null;
    this.inVsCode = detectVsCode();
    /**
     * TensorBoard's page around this frame (same origin), whose address bar shows only its
     * own hash: the view state is mirrored there too, so a reload (F5) or a copied
     * TensorBoard link opens the same view. Null standalone and inside VS Code.
     */
    this.tb = this.inVsCode ? null : tensorBoardPage();
    const fromFrame = location.hash.length > 1 || !this.tb;
    /** @type {ViewState} */
    this.state = fromFrame ? decodeState(location.hash) : stateFromTbHash(this.tb.location.hash) ?? decodeState("");
    /** @type {any} */
    this.runs = null;
    /** @type {ApiError | null} */
    this.runsError = null;
    this.renderGen = 0;
    this.runsSignature = "";
    /**
     * A run the view named that the logdir does not hold (a typo, or deleted while shown):
     * said in a notice until the user picks a run; `gone` when it was shown before.
     * @type {{name: string, gone: boolean, shown: string | null} | null}
     */
    this.missingRun = null;
    /**
     * A site, step, sync, worker or span the view named (a link from another run, or from
     * before the run was profiled again) that the run shown does not have: said in a
     * notice, with what the view did instead (`outcome`; "closed" when none).
     * @type {{what: string, where: string, outcome?: string} | null}
     */
    this.missingPart = null;
    /**
     * Whether the view state is the one an address gave (the page opened, Back, an edited
     * address), not one the user's clicks made: only then is a site or step the selection
     * lacks said to be missing (a step bar clicked with a site open narrows the selection
     * to the bar's span: the detail just closes).
     */
    this.stateFromUrl = true;
    /** The run the view last showed. @type {string | null} */
    this.shownRun = null;
    /**
     * The same for the compare view's baseline: a baseline run the view named that the
     * logdir does not hold, said until the user picks a baseline or a run.
     * @type {{name: string, gone: boolean} | null}
     */
    this.missingBase = null;
    /**
     * The run the compare view compares, named as its own baseline (picked as the run while
     * it was the baseline, or a link naming both): said until the user picks a baseline or a
     * run, and the URL names the baseline used instead, if any.
     * @type {string | null}
     */
    this.selfBase = null;
    /**
     * What was wrong with the step time the view's link named, dropped (`unprof=-5`): said
     * until dismissed or another link is followed. @type {string | null}
     */
    this.badStepTime = linkStepTimeProblem(fromFrame ? location.hash : this.tb?.location.hash, this.state, !fromFrame);
    /** The baseline the compare view last used. @type {string | null} */
    this.shownBase = null;
    /** A data-focus-key to focus after the next render (instead of the focused element's). */
    this.pendingFocus = /** @type {string | null} */ (null);
    // Set by a click on a site's row ("row"): the detail it opens is scrolled into view if
    // it is drawn off the screen (below the table), or beside the table with only its top
    // edge in view. A link that names a site opens with its detail in view too (true), the
    // page left where it is unless the detail is off the screen.
    /** @type {boolean | "row"} */
    this.revealDetail = Boolean(this.state.site);
    // The selection whose view is drawn (run, worker, span, view, base), as JSON; null
    // before the first.
    this.drawnKey = /** @type {string | null} */ (null);
    /**
     * What the `summary` of the selection whose JSON is `key` says about its trace files:
     * repair notices, and how many were analysed (null until it answers).
     */
    this.repairs = { key: "", notices: /** @type {{path: string, text: string}[]} */ ([]), more: 0, readable: /** @type {number | null} */ (null) };
    /** Whether TensorBoard shows the PyTorch Profiler tab (its `plugins_listing`). */
    this.profilerTab = false;
    this.toastEl = h("div", { class: "sa-toast", role: "status", "aria-live": "polite" });
    this.headerEl = h("header", { class: "sa-header" });
    /**
     * The notices that the view shows another run or baseline than the one it was given (one
     * not in the logdir, a run named as its own baseline). A polite live region that is in
     * the page from the start, before any notice: a screen reader reads a notice written
     * into it, not one inserted already holding its text. Rewritten only when what it says
     * changes, so that a redraw does not read it out again.
     */
    this.noticeEl = h("div", { class: "sa-notices", role: "status", "aria-live": "polite", "data-testid": "notices" });
    /** What `noticeEl` says now (its notices' ids and texts). */
    this.noticeKey = "";
    this.bannerEl = h("div", { class: "sa-banners" });
    this.viewEl = h("main", { class: "sa-view", "aria-live": "off" });
    // What a screen reader is told when a row opens its site's detail (the focus stays on
    // the row, and nothing else would say the detail changed).
    this.announceEl = h("div", { class: "visually-hidden", role: "status", "data-testid": "announce" });
    this.appEl = h("div", { class: "sa-app" }, this.headerEl, this.noticeEl, this.bannerEl, this.viewEl, this.announceEl);
    replace(root, this.appEl, this.toastEl);
    // Drawings are laid out for the frame's width: redraw when it changes a lot.
    this.lastWidth = 0;
    let resizeTimer = 0;
    window.addEventListener("resize", () => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(() => {
        if (Math.abs(this.viewWidth() - this.lastWidth) > 40) this.render();
      }, 200);
    });
    this.polling = false;
    this.pollTimer = 0;
    window.addEventListener("focus", () => this.pollRunsNow());
    document.addEventListener("visibilitychange", () => {
      if (document.visibilityState === "visible") this.pollRunsNow();
    });
    window.addEventListener("hashchange", () => {
      this.lastPick = null; // Back or Forward ends a burst: the next pick is a new entry
      this.state = decodeState(location.hash);
      this.stateFromUrl = true;
      this.missingRun = null;
      this.missingPart = null;
      this.missingBase = null;
      this.selfBase = null;
      this.badStepTime = linkStepTimeProblem(location.hash, this.state);
      if (hashNeedsRewrite(location.hash, this.state)) this.writeUrl();
      this.render();
    });
    // TensorBoard's hash changed (Back/Forward, an edited or pasted address, a tab switch):
    // take the view it names, or put ours back where it has none.
    this.tb?.addEventListener("hashchange", () => {
      const tb = /** @type {Window} */ (this.tb);
      if (parseTbHash(tb.location.hash).tab !== "sync_advisor") return;
      const named = stateFromTbHash(tb.location.hash);
      if (named === null) {
        this.writeUrl();
      } else if (encodeState(named) !== encodeState(this.state)) {
        this.lastPick = null;
        this.state = named;
        this.stateFromUrl = true;
        this.missingRun = null;
        this.missingPart = null;
        this.missingBase = null;
        this.selfBase = null;
        this.badStepTime = linkStepTimeProblem(tb.location.hash, named, true);
        this.writeUrl();
        this.render();
      } else if (hashNeedsRewrite(tb.location.hash, named, true)) {
        // The same view, its address edited: a step time added there that is none is said
        // too (else it was rewritten away without a word).
        const problem = linkStepTimeProblem(tb.location.hash, named, true);
        if (problem) {
          this.badStepTime = problem;
          this.renderNotices();
        }
        this.writeUrl();
      }
    });
    this.setupTheme();
    // A malformed `occ` (the occurrences list's start) was read as a valid one, an unknown
    // `osort` (its order) as none: the address says so too, not only the view (a start past
    // the list's end is put right once it is listed).
    if (hashNeedsRewrite(fromFrame ? location.hash : this.tb?.location.hash, this.state, !fromFrame)) this.writeUrl();
  }

  start() {
    // TensorBoard's own listing (relative to the plugin routes, so it works under any
    // --path_prefix): the detail links to the PyTorch Profiler tab only where it exists.
    const listing = fetch("../../plugins_listing", { credentials: "same-origin" })
      .then((r) => (r.ok ? r.json() : null))
      .then((plugins) => {
        this.profilerTab = !!plugins?.pytorch_profiler?.enabled;
      })
      .catch(() => {});
    // Kind labels and colours come from the plugin's catalogue; without it the view still
    // works, with plain names.
    const catalogue = getJson("catalogue")
      .then((data) => {
        setCatalogue(data);
        const style = document.createElement("style");
        style.textContent = kindStyles();
        // First in <head>: the main sheet's later rules (latent badges) win ties.
        document.head.prepend(style);
      })
      .catch(() => setCatalogue(null));
    Promise.allSettled([catalogue, listing]).then(() => {
      this.render();
      this.pollRuns();
    });
  }

  /**
   * Poll `runs` now instead of at the next tick: the user came back to the page (from the
   * editor where they changed the code, or the terminal that wrote a trace).
   */
  pollRunsNow() {
    if (this.polling || this.runs === null) return;
    clearTimeout(this.pollTimer);
    this.pollRuns();
  }

  /** Poll `runs`: new runs and traces appear without a reload. */
  async pollRuns() {
    // A hidden tab (another TensorBoard tab, a minimised window) asks nothing: becoming
    // visible polls at once (``visibilitychange``), as the first answer always did.
    if (this.runs !== null && document.visibilityState === "hidden") {
      this.pollTimer = setTimeout(() => this.pollRuns(), POLL_IDLE_MS);
      return;
    }
    this.polling = true;
    let delay = POLL_IDLE_MS;
    try {
      const runs = await getJson("runs", {}, { fresh: true });
      // In TensorBoard's order: a run added while it runs goes where its name sorts.
      runs.runs = sortRuns(runs.runs || []);
      this.runsError = null;
      const signature = runsSignature(runs);
      if (signature !== this.runsSignature) {
        const first = this.runs === null;
        this.runsSignature = signature;
        this.runs = runs;
        // A run's traces changed: cached summaries/sites (and their repairs) may be stale.
        if (!first) {
          clearCache();
          this.repairs = { key: "", notices: [], more: 0, readable: null };
        }
        this.render();
      }
      delay = runs.loading ? POLL_LOADING_MS : POLL_IDLE_MS;
    } catch (e) {
      this.runsError = e instanceof ApiError ? e : new ApiError(0, String(e));
      delay = POLL_LOADING_MS;
      this.render();
    }
    this.polling = false;
    this.pollTimer = setTimeout(() => this.pollRuns(), delay);
  }

  /**
   * Change the view state, write it to the location hash (replace: no history spam for
   * every keystroke) and re-render.
   * @param {Partial<ViewState>} patch
   * @param {{picked?: boolean}} [options] `picked`: a picker's own change (a burst of them is
   *   one history entry)
   */
  setState(patch, { picked: picked_ = false } = {}) {
    // A move to another place (run, worker, view, site, step) is a history entry, so that
    // Back returns to the run and site before it and not out of the tab; a sort, a filter
    // typed, an occurrence picked replace the current one.
    // Naming what is shown by default (the run or baseline it opened on) moves nowhere.
    /** @type {Record<string, string | null>} */
    const shown = { run: this.shownRun, base: this.shownBase ?? null };
    const moved = NAVIGATION_KEYS.some((key) => {
      const was = /** @type {any} */ (this.state)[key];
      const to = /** @type {any} */ (patch)[key];
      return key in patch && to !== was && !(was === null && key in shown && to === shown[key]);
    });
    // Arrow keys on a closed picker change it at every press: one history entry for the
    // burst (Back then returns to the run before it, not through each run passed over).
    const now = Date.now();
    // A picker's change (its select's own handler says so; a row or bar click that resets
    // the worker is none), to "all workers" or "no baseline" too.
    const picked = moved && picked_;
    const burst = picked && this.lastPick !== null && now - this.lastPick < PICK_BURST_MS;
    this.lastPick = picked ? now : null;
    const push = moved && !burst;
    if (push) {
      // The entry Back returns to names the view it showed: the run opened by default
      // included (an entry without the plugin's keys would be given the new view).
      if (this.state.run === null && this.shownRun) this.state = { ...this.state, run: this.shownRun };
      this.writeUrl(false);
    }
    if (moved) this.stateFromUrl = false;
    this.state = patchState(this.state, patch);
    // The user picked a run (or a baseline): the notice about a missing one has done its job.
    if ("run" in patch) this.missingRun = null;
    if ("run" in patch || "site" in patch || "step" in patch) this.missingPart = null;
    if ("unprof" in patch) this.badStepTime = null; // a step time given since: said no more
    if ("run" in patch || "base" in patch) {
      this.missingBase = null;
      this.selfBase = null;
    }
    this.writeUrl(push);
    this.render();
  }

  /**
   * A site or step named in the view that the run shown does not have: forget it (the
   * detail, the step filter), say so, and write the URL without it.
   * @param {string} what e.g. `Site "cnn.py:95:aten::to"`
   * @param {string} where e.g. `run "baseline"`, `worker w0 of run "baseline"`
   * @param {Partial<ViewState>} patch what to clear
   */
  dropMissing(what, where, patch, outcome = "") {
    if (this.stateFromUrl) this.missingPart = outcome ? { what, where, outcome } : { what, where };
    this.noteState(patch);
    this.renderNotices();
  }

  /**
   * Change the view state and write it to the URL without drawing the view again: for a
   * part of the view that has drawn the change itself (the detail's occurrences page).
   * @param {Partial<ViewState>} patch
   */
  noteState(patch) {
    this.state = patchState(this.state, patch);
    this.writeUrl();
  }

  /**
   * Write the view state to the location hash, and to TensorBoard's page's hash beside its
   * own keys (see `tbUrl`). `push`: as a new history entry (a move the user made, see
   * `setState`), in the address the user sees: TensorBoard's inside it, else this frame's;
   * otherwise the current entry is replaced (no history spam for every keystroke).
   * @param {boolean} [push]
   */
  writeUrl(push = false) {
    const url = shareUrl(location.href, this.state);
    const tbUrl = this.tbUrl();
    const inTb = !!(tbUrl && this.tb);
    try {
      if (push && !inTb && url !== location.href) history.pushState(null, "", url);
      else history.replaceState(null, "", url);
    } catch {
      // Sandboxed frames may refuse history writes: the view still works, unshared.
    }
    if (tbUrl && this.tb && tbUrl !== this.tb.location.href) {
      try {
        // As TensorBoard writes its own hash, keeping its history state.
        if (push) this.tb.history.pushState(this.tb.history.state, "", tbUrl);
        else this.tb.history.replaceState(this.tb.history.state, "", tbUrl);
      } catch {
        // the page went away or refuses: the frame's own hash still holds the view
      }
    }
  }

  /**
   * TensorBoard's address with this view in its hash (`#sync_advisor&p.sync_advisor.run=…`),
   * or null outside TensorBoard. An address without a tab yet (TensorBoard still choosing
   * its first dashboard) gets this tab only while this frame is shown.
   * @returns {string | null}
   */
  tbUrl() {
    if (!this.tb) return null;
    try {
      const { href, hash } = this.tb.location;
      let tab = parseTbHash(hash).tab;
      if (!tab) {
        if (!window.innerWidth) return null;
        tab = "sync_advisor";
      }
      const at = href.indexOf("#");
      return (at < 0 ? href : href.slice(0, at)) + tbHashWithState(hash, this.state, tab);
    } catch {
      return null;
    }
  }

  /**
   * A run named in the URL (or shown until its folder was deleted) that the logdir does not
   * hold: show the run the dashboard opens on instead, say so, and put the run shown in the
   * URL, so that "Copy link" and a reload name it; nothing of the missing run's selection
   * (site, sync, step, worker) is opened in the other run.
   */
  reconcileRun() {
    const fix = this.runs ? reconcileRun(this.runs.runs || [], this.state) : null;
    if (fix) {
      this.missingRun = { name: fix.missing, gone: fix.missing === this.shownRun, shown: fix.patch.run ?? null };
      this.state = { ...this.state, ...fix.patch };
      this.writeUrl();
    }
    this.reconcileWorker();
  }

  /**
   * A worker or span the view names that the run shown does not have, once its traces are
   * all listed: the view showed the whole run (or worker) with the name kept in the URL,
   * and "Copy link" passed it on. Said, and dropped from the URL.
   */
  reconcileWorker() {
    const run = this.currentRun();
    if (!run || run.loading || (this.state.worker === null && this.state.span === null)) return;
    const fix = missingWorkerOrSpan(run, this.state.worker, this.state.span);
    if (!fix) return;
    if (this.stateFromUrl) this.missingPart = { what: fix.what, where: fix.where, outcome: fix.outcome };
    this.state = patchState(this.state, { ...fix.patch, site: null, sync: null, step: null, occ: 0 });
    this.writeUrl();
  }

  /**
   * The compare view's baseline, as `reconcileRun` does for the run: a baseline named in the
   * URL (or shown until its folder was deleted) that the logdir does not hold is replaced by
   * the default baseline, said so, and the URL names the baseline used. So is the run
   * compared named as its own baseline: never compared with itself, nor replaced unsaid.
   */
  reconcileBase() {
    const names = (this.runs?.runs || []).map((/** @type {any} */ r) => r.name);
    if (this.state.view !== "compare" || !names.length) return;
    const { base, missing, self } = pickBaseline(names, this.currentRun()?.name ?? null, this.state.base, this.shownBase);
    if (missing) this.missingBase = { name: missing, gone: missing === this.shownBase };
    if (self) this.selfBase = self;
    // A default baseline picked as the run: said, but the URL still names no baseline.
    if (missing || (self && this.state.base !== null)) {
      this.state = { ...this.state, base };
      this.writeUrl();
    }
    this.shownBase = base;
  }

  /**
   * Close the detail panel (Escape inside it, or its × button) and put the focus back on
   * the site's row, where the keyboard user opened it.
   */
  closeDetail() {
    if (this.state.site) this.pendingFocus = `site-${this.state.site}`;
    this.setState({ site: null, sync: null });
  }

  /** Width available to the view, for SVG layouts. */
  viewWidth() {
    return this.viewEl.clientWidth || document.documentElement.clientWidth || 960;
  }

  /** The selected run's entry in `runs`, else the run the dashboard opens on (`pickRun`). */
  currentRun() {
    return pickRun(this.runs?.runs || [], this.state.run);
  }

  /**
   * The spans of the selected worker, as the span selector lists them (none without a
   * worker): what names a span in a sentence as the selector does (`selectionName`).
   * @returns {string[]}
   */
  workerSpans() {
    const name = this.selection()?.worker ?? null;
    const worker = (this.currentRun()?.workers || []).find((/** @type {any} */ w) => w.name === name);
    return (worker?.spans || []).filter((/** @type {any} */ s) => s !== null);
  }

  /** run/worker/span as request parameters, validated against the runs list. */
  selection() {
    const run = this.currentRun();
    if (!run) return null;
    const worker = (run.workers || []).find((/** @type {any} */ w) => w.name === this.state.worker);
    const span =
      worker && this.state.span !== null && (worker.spans || []).includes(this.state.span)
        ? this.state.span
        : null;
    return { run: run.name, worker: worker ? worker.name : null, span };
  }

  async render() {
    const gen = ++this.renderGen;
    /** @type {{key: string, start: number | null, end: number | null} | null} */
    let focus = rememberFocus();
    // Kept until a render completes: a render that a newer one overtakes (a poll, a second
    // event) would lose it, and the newer one would remember an element it removes.
    const pending = this.pendingFocus;
    if (pending) focus = { key: pending, start: null, end: null };
    this.reconcileRun();
    this.reconcileBase();
    const inHeader = this.headerEl?.contains(document.activeElement) ?? false;
    this.renderHeader();
    this.renderBanners();
    // The header is drawn anew at once: a control of it keeps the focus now, not once the
    // view's answers come (a run's arrow key pressed meanwhile went to the page's body,
    // and a keyboard user's next press changed nothing: 200 ms on a loaded machine).
    if (inHeader && focus && !pending) restoreFocus(focus);
    const sel = this.selection();
    if (!sel) {
      if (this.pendingFocus === pending) this.pendingFocus = null;
      replace(this.viewEl, this.emptyRunsView());
      this.drawnKey = null;
      this.viewEl.classList.remove("sa-stale");
      this.viewEl.removeAttribute("aria-busy");
      return;
    }
    // The run the dashboard opened on is the view's once every run is known (while traces
    // load, a run with GPU work may still turn up and be the better default): a run added to
    // the logdir later, sorting first, took the view over at the next poll, its site too.
    if (this.state.run === null && this.runs && !this.runs.loading) {
      this.state = { ...this.state, run: sel.run };
      this.writeUrl();
    }
    this.shownRun = sel.run;
    this.loadRepairs(sel);
    this.lastWidth = this.viewWidth();
    // Another run (worker, span, view) than the one drawn: until its answers come, what is
    // on the page is the previous selection's, under the new one's name in the header (a
    // review read a job's figures as the fixed run's for 7 s). Marked stale meanwhile.
    const shownKey = JSON.stringify([sel.run, sel.worker, sel.span, this.state.view, this.state.base]);
    if (this.drawnKey !== null && shownKey !== this.drawnKey) {
      this.viewEl.classList.add("sa-stale");
      this.viewEl.setAttribute("aria-busy", "true");
    }
    const ctx = {
      app: this,
      sel,
      state: this.state,
      width: this.lastWidth,
      isCurrent: () => gen === this.renderGen,
    };
    try {
      const body =
        this.state.view === "compare" ? await renderCompare(ctx) : await renderHotspots(ctx);
      // A run whose traces are the ranks of a job: its job view above the hotspots.
      const job = this.state.view === "compare" ? null : await renderJob(ctx);
      if (gen !== this.renderGen) return;
      replace(this.viewEl, job ? [job, body] : body);
      this.drawnKey = shownKey;
      this.viewEl.classList.remove("sa-stale");
      this.viewEl.removeAttribute("aria-busy");
      if (this.pendingFocus === pending) this.pendingFocus = null;
      restoreFocus(focus);
      if (this.state.view === "compare" || !this.state.site) this.revealDetail = false;
      if (this.state.view !== "compare" && this.state.site) {
        const panel = this.viewEl.querySelector(".sa-detail-slot");
        if (!panel) this.revealDetail = false;
        // The focus was inside the detail (an occurrence's row): back there once it is drawn.
        if (panel) {
          const reveal = this.revealDetail;
          renderDetail(ctx, /** @type {HTMLElement} */ (panel)).then(() => {
            // A render overtaken (a poll of the runs while the first answers load) keeps the
            // reveal for the one after it.
            if (gen !== this.renderGen) return;
            this.revealDetail = false;
            // Opened by a row below which it is drawn (one column: a narrow page or
            // panel), off the screen, or beside the table with only its top edge in view
            // (a 1600x857 window: the cards, notes and chart fill most of it): scrolled
            // to, or the click seemed to do nothing but drop columns from the table.
            if (reveal && panel.getBoundingClientRect().top > (reveal === "row" ? innerHeight * 0.6 : innerHeight - 48)) {
              panel.scrollIntoView({ block: "start" });
            }
            if (reveal) {
              const title = panel.querySelector("h2")?.textContent;
              if (title) this.announce(`Detail shown: ${title}`);
            }
            if (gen !== this.renderGen || !focus || document.activeElement !== document.body) return;
            restoreFocus(focus);
            // The panel is drawn anew, scrolled to its top: show the row focused in it.
            if (panel.contains(document.activeElement)) document.activeElement?.scrollIntoView({ block: "nearest" });
          }, () => {
            // Failed to draw: no later, unrelated detail is to be scrolled to.
            if (gen === this.renderGen) this.revealDetail = false;
          });
        }
      }
    } catch (e) {
      if (gen !== this.renderGen) return;
      if (this.pendingFocus === pending) this.pendingFocus = null;
      replace(this.viewEl, errorBanner(e, "Could not load this view"));
      this.drawnKey = shownKey;
      this.viewEl.classList.remove("sa-stale");
      this.viewEl.removeAttribute("aria-busy");
    }
  }

  /**
   * What reading had to repair in the selection's traces comes with its `summary` (cached:
   * the hotspots view asks for the same URL); the banners are redrawn when it answers.
   * @param {{run: string, worker: string | null, span: string | null}} sel
   */
  async loadRepairs(sel) {
    const key = JSON.stringify(sel);
    if (this.repairs.key === key) return;
    let found;
    let traces;
    try {
      traces = (await getJson("summary", sel)).traces;
      found = repairNotices(traces);
    } catch {
      return; // the view itself reports a summary that cannot be loaded
    }
    if (JSON.stringify(this.selection()) !== key) return; // the user moved on meanwhile
    const exportsBefore = this.exportFormats().join();
    this.repairs = { key, ...found, readable: readableCount(traces) };
    if (found.notices.length) this.renderBanners();
    if (this.exportFormats().join() !== exportsBefore) {
      const focus = rememberFocus();
      this.renderHeader();
      restoreFocus(focus);
    }
  }

  /**
   * The export formats the selection can give: none but the JSON (which names each
   * unreadable file) when no trace of it could be read, and the annotated trace (a "Sync
   * Advisor" track to open in Perfetto) only when exactly one trace of it was analysed.
   * @returns {string[]}
   */
  exportFormats() {
    const run = this.currentRun();
    const sel = this.selection();
    if (!run || !sel) return [];
    const known = this.repairs.key === JSON.stringify(sel) ? this.repairs.readable : null;
    const whole = sel.worker === null;
    // Until the selection's summary answers, the runs list tells for a whole run.
    const readable = known ?? (whole ? Math.max(0, (run.trace_count || 0) - (run.error_count || 0)) : null);
    if (readable === 0 && !run.loading) return ["json"];
    const worker = (run.workers || []).find((/** @type {any} */ w) => w.name === sel.worker);
    const spans = (worker?.spans || []).filter((/** @type {any} */ s) => s !== null);
    const single = readable !== null ? readable === 1 : !!(sel.worker && (spans.length <= 1 || sel.span));
    return single ? ["json", "csv", "sarif", "trace"] : ["json", "csv", "sarif"];
  }

  renderHeader() {
    const runs = this.runs?.runs || [];
    const run = this.currentRun();
    const sel = this.selection();
    const workers = sortWorkers(run?.workers || []);
    const worker = workers.find((/** @type {any} */ w) => w.name === sel?.worker);
    const spans = (worker?.spans || []).filter((/** @type {any} */ s) => s !== null);
    const runSelect = h(
      "select",
      {
        id: "sa-run",
        "data-focus-key": "run",
        onchange: (/** @type {Event} */ e) =>
          this.setState(
            {
              run: /** @type {HTMLSelectElement} */ (e.target).value,
              worker: null,
              span: null,
              site: null,
              sync: null,
              step: null,
            },
            { picked: true },
          ),
      },
      runs.map((/** @type {any} */ r) =>
        h(
          "option",
          { value: r.name, selected: r.name === run?.name },
          runOptionLabel(r),
        ),
      ),
    );
    const workerSelect = h(
      "select",
      {
        id: "sa-worker",
        "data-focus-key": "worker",
        disabled: workers.length === 0,
        onchange: (/** @type {Event} */ e) => {
          const v = /** @type {HTMLSelectElement} */ (e.target).value;
          this.setState({ worker: v || null, span: null, site: null, sync: null, step: null }, { picked: true });
        },
      },
      h("option", { value: "" }, workers.length > 1 ? `All workers (${workers.length})` : "All workers"),
      workers.map((/** @type {any} */ w) =>
        h("option", { value: w.name, selected: w.name === sel?.worker }, w.name),
      ),
    );
    const spanNames = spanLabels(spans);
    const spanField =
      spans.length > 0
        ? h(
            "span",
            { class: "sa-field" },
            h("label", { for: "sa-span" }, "Span"),
            h(
              "select",
              {
                id: "sa-span",
                "data-focus-key": "span",
                onchange: (/** @type {Event} */ e) => {
                  const v = /** @type {HTMLSelectElement} */ (e.target).value;
                  this.setState({ span: v || null, site: null, sync: null, step: null }, { picked: true });
                },
              },
              h("option", { value: "" }, "All spans"),
              // An epoch-millisecond span as a date-time; the raw value in its tooltip.
              spans.map((/** @type {string} */ s) => h("option", { value: s, selected: s === sel?.span, title: s }, spanNames.get(s) ?? s)),
            ),
          )
        : null;
    const tab = (/** @type {string} */ view, /** @type {string} */ label) =>
      h(
        "button",
        {
          "aria-pressed": String(this.state.view === view),
          "data-focus-key": `tab-${view}`,
          "data-view": view,
          onclick: () => this.setState({ view }),
        },
        label,
      );
    const formats = this.exportFormats();
    const exports = sel
      ? h(
          "span",
          { class: "sa-exports" },
          "Export:",
          formats.map((format) =>
            h(
              "a",
              {
                href: apiUrl("export", { ...sel, format }),
                download: "",
                title: format === "trace" ? "The trace with a Sync Advisor track, for Perfetto or chrome://tracing" : `The report as ${format.toUpperCase()}`,
              },
              format === "trace" ? "Trace+track" : format.toUpperCase(),
            ),
          ),
        )
      : null;
    replace(
      this.headerEl,
      h("h1", { class: "sa-title" }, h("span", null, "Sync"), " Advisor"),
      h("span", { class: "sa-field" }, h("label", { for: "sa-run" }, "Run"), runSelect),
      h("span", { class: "sa-field" }, h("label", { for: "sa-worker" }, "Worker"), workerSelect),
      spanField,
      h("span", { class: "sa-tabs", role: "group", "aria-label": "View" }, tab("hotspots", "Hotspots"), tab("compare", "Compare")),
      h("span", { class: "sa-spacer" }),
      exports,
      this.copyLinkButton(),
    );
  }

  /**
   * "Copy link": inside TensorBoard, TensorBoard's own address with this view in its hash
   * (what its address bar shows too), which opens TensorBoard on this tab and this view;
   * standalone, the frame's own URL. Not shown inside VS Code: there the frame's URL is a
   * webview- or port-forwarding-internal address that does not open anywhere else.
   */
  copyLinkButton() {
    if (this.inVsCode) return null;
    return h(
      "button",
      {
        class: "sa-copy-link",
        "data-testid": "copy-link",
        "data-focus-key": "copy-link",
        title: this.tb
          ? "Copy a TensorBoard link that opens this view (run, filters, selected site)"
          : "Copy a link that opens this view (run, filters, selected site) in a browser tab",
        onclick: () => this.copyWithToast(this.tbUrl() ?? shareUrl(location.href, this.state), "link to this view"),
      },
      "Copy link",
    );
  }

  renderBanners() {
    this.renderNotices();
    const parts = [];
    if (this.runsError) parts.push(errorBanner(this.runsError, "Cannot list runs"));
    if (this.runs?.loading) {
      const loadingRuns = (this.runs.runs || []).filter((/** @type {any} */ r) => r.loading);
      parts.push(
        h(
          "div",
          { class: "sa-banner info", role: "status", "data-testid": "loading" },
          h("span", { class: "sa-spinner", "aria-hidden": "true" }),
          "Analysing traces",
          loadingRuns.length ? `: ${loadingRuns.map((/** @type {any} */ r) => r.name).join(", ")}` : "…",
          loadingRuns.length ? ". Runs appear as they finish." : " Runs appear as they finish.",
        ),
      );
    }
    // Errors of the selected run (and of the logdir itself) first; other runs' are counted.
    const allErrors = this.runs?.errors || [];
    const runName = this.currentRun()?.name;
    const errors = allErrors.filter((/** @type {any} */ e) => !e.run || e.run === runName);
    const elsewhere = allErrors.length - errors.length;
    // Redrawing must not fold a list the user has unfolded.
    const errorsOpen = !!this.bannerEl.querySelector("details[data-testid=file-errors][open]");
    if (errors.length) {
      // Every trace of the run failed: there are no others, and the reasons are all there is.
      const ofRun = errors.filter((/** @type {any} */ e) => e.run === runName).length;
      const writing = errors.filter((/** @type {any} */ e) => e.run === runName && e.being_written).length;
      const banner = unreadableBanner(this.currentRun()?.trace_count || 0, ofRun, writing);
      parts.push(
        h(
          "details",
          {
            // Being written is no failure: not red.
            class: banner.all && ofRun > 0 && writing === ofRun ? "sa-banner info" : "sa-banner error",
            "data-testid": "file-errors",
            "data-all": String(banner.all),
            open: errorsOpen || banner.open,
          },
          h(
            "summary",
            null,
            // The logdir's own: a logdir not listed, torch_npu's folders not parsed yet, a
            // trace under a name of the user's: none was read, each says why.
            ofRun ? banner.title : `${errors.length} path${errors.length > 1 ? "s" : ""} of the logdir not read as traces`,
            elsewhere ? `; ${elsewhere} more in other runs` : "",
          ),
          h(
            "ul",
            { class: "sa-errors" },
            errors.map((/** @type {any} */ e) =>
              h(
                "li",
                null,
                h("code", null, e.path),
                ": ",
                e.reason,
                e.being_written
                  ? " (being written: shown as soon as it is complete)"
                  : e.retrying
                    ? " (retrying: it may still be being written)"
                    : "",
              ),
            ),
          ),
        ),
      );
    } else if (elsewhere) {
      parts.push(
        h(
          "div",
          { class: "sa-note", "data-testid": "other-errors" },
          otherRunsUnreadable(allErrors.filter((/** @type {any} */ e) => e.run && e.run !== runName)),
        ),
      );
    }
    const unsummarised = (this.runs?.no_summary || []).find((/** @type {any} */ e) => e.run === runName);
    if (unsummarised) {
      // A summarised run (a job summarised on its cluster): the plugin lists the traces that
      // have no summary instead of parsing them itself.
      parts.push(
        h(
          "details",
          { class: "sa-banner info", "data-testid": "no-summary", open: true },
          h(
            "summary",
            null,
            `${unsummarised.count} trace file${unsummarised.count > 1 ? "s" : ""} of this run ${unsummarised.count > 1 ? "have" : "has"} no summary yet and ${unsummarised.count > 1 ? "are" : "is"} not shown (${unsummarised.reasons.join("; ")}). Write the summaries with:`,
          ),
          h("pre", { class: "sa-code" }, unsummarised.command),
          h(
            "ul",
            { class: "sa-errors" },
            unsummarised.paths.map((/** @type {string} */ p) => h("li", null, h("code", null, p))),
            unsummarised.count > unsummarised.paths.length
              ? h("li", null, `and ${unsummarised.count - unsummarised.paths.length} more`)
              : null,
          ),
        ),
      );
    }
    const repairs = this.repairs;
    if (repairs.notices.length && repairs.key === JSON.stringify(this.selection())) {
      // Quieter than an error: the trace was analysed, but a damaged part may hide a finding.
      parts.push(
        h(
          "div",
          { class: "sa-note sa-repairs", role: "note", "data-testid": "file-repairs" },
          repairs.notices.map((n) => h("p", null, h("code", null, n.path), ": ", n.text)),
          repairs.more ? h("p", null, `${repairs.more} more trace file${repairs.more > 1 ? "s" : ""} read with repairs.`) : null,
          h("p", null, "Their findings are shown; a sync in a repaired or skipped part of a trace could be missing."),
        ),
      );
    }
    replace(this.bannerEl, parts);
  }

  /**
   * Write the notices of a run or baseline the view was given and does not show into the
   * live region `noticeEl`, when what they say changed (see `noticeEl`).
   */
  renderNotices() {
    /** @type {{testid: string, text: Child[], pickerId: string, forget: () => void}[]} */
    const notices = [];
    const missing = this.missingRun;
    if (missing) {
      const instead = missing.shown ? `: showing run "${missing.shown}" instead.` : ".";
      notices.push({ testid: "missing-run", text: missingText(`Run "${missing.name}"`, missing.gone, instead), pickerId: "sa-run", forget: () => (this.missingRun = null) });
    }
    const part = this.missingPart;
    if (part) {
      const text = [h("b", null, `${part.what} is not in ${part.where}`), ` (a link from another run, or from before it was profiled again): ${part.outcome || "closed"}.`];
      notices.push({ testid: "missing-part", text, pickerId: "sa-run", forget: () => (this.missingPart = null) });
    }
    const compare = this.state.view === "compare";
    const missingBase = compare ? this.missingBase : null;
    if (missingBase) {
      const base = this.shownBase;
      const instead = base ? `: comparing with run "${base}" instead.` : ": pick a baseline run.";
      notices.push({ testid: "missing-base", text: missingText(`Baseline run "${missingBase.name}"`, missingBase.gone, instead), pickerId: "sa-base", forget: () => (this.missingBase = null) });
    }
    const selfBase = compare ? this.selfBase : null;
    if (selfBase) {
      notices.push({ testid: "self-base", text: [selfBaselineText(selfBase, this.shownBase)], pickerId: "sa-base", forget: () => (this.selfBase = null) });
    }
    if (this.badStepTime) {
      const text = [h("b", null, "The step time without the profiler in the link was left out"), `: ${this.badStepTime}.`];
      notices.push({ testid: "bad-step-time", text, pickerId: "sa-unprof-input", forget: () => (this.badStepTime = null) });
    }
    const els = notices.map((n) => this.notice(n.testid, n.text, n.pickerId, n.forget));
    const key = els.map((el) => `${el.dataset.testid}: ${el.textContent}`).join("\n");
    if (key === this.noticeKey) return;
    this.noticeKey = key;
    replace(this.noticeEl, els);
  }

  /**
   * A notice that the view shows another run than the one it was given, and what instead.
   * Dismissing it puts the focus on the picker of that run, not on the page.
   * @param {string} testid
   * @param {Child[]} text what it says
   * @param {string} pickerId the id of the select that picks that run
   * @param {() => void} forget clears the notice's state
   */
  notice(testid, text, pickerId, forget) {
    return h(
      "div",
      { class: "sa-banner", "data-testid": testid },
      text,
      " ",
      h(
        "button",
        {
          class: "sa-linkish",
          "data-focus-key": `dismiss-${testid}`,
          onclick: () => {
            forget();
            this.renderNotices();
            document.getElementById(pickerId)?.focus();
          },
        },
        "Dismiss",
      ),
    );
  }

  emptyRunsView() {
    if (this.runs === null && !this.runsError) {
      return h("div", { class: "sa-empty" }, h("span", { class: "sa-spinner" }), "Loading runs…");
    }
    if (this.runs?.loading) {
      return h("div", { class: "sa-empty" }, h("h2", null, "Analysing traces…"), "The first run appears as soon as it is read.");
    }
    return h(
      "div",
      { class: "sa-empty" },
      h("h2", null, "No PyTorch profiler traces in this logdir"),
      h("p", null, "The Sync Advisor reads the traces torch.profiler writes with tensorboard_trace_handler (*.pt.trace.json[.gz])."),
      h(
        "pre",
        { class: "sa-code", style: { "text-align": "left", padding: "8px" } },
        [
          "with torch.profiler.profile(",
          "    schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),",
          "    on_trace_ready=torch.profiler.tensorboard_trace_handler(\"./logs/run1\"),",
          "    with_stack=True,",
          ") as prof:",
          "    for batch in loader:",
          "        train_step(batch)",
          "        prof.step()",
        ].join("\n"),
      ),
    );
  }

  /**
   * Say `text` to a screen reader, from a live region that outlives the view's redraws (a
   * region drawn anew with the view is often not read).
   * @param {string} text
   */
  announce(text) {
    if (this.announceEl.textContent !== text) this.announceEl.textContent = text;
  }

  /**
   * Show a short message at the bottom of the frame.
   * @param {string} text
   */
  toast(text) {
    this.toastEl.textContent = text;
    this.toastEl.classList.add("show");
    clearTimeout(this.toastTimer);
    this.toastTimer = setTimeout(() => this.toastEl.classList.remove("show"), 2600);
  }

  /**
   * Open a frame: in VS Code post `{filename, line}` (0-based) to the webview host as the
   * PyTorch Profiler tab does; elsewhere copy `path:line`.
   * @param {{file: string, line: number | null}} frame
   * @param {{vscodeMessage: Function, frameLocation: Function}} helpers
   */
  async openFrame(frame, helpers) {
    if (this.inVsCode) {
      try {
        window.parent.parent.postMessage(helpers.vscodeMessage(frame), "*");
        this.toast(`Opening ${helpers.frameLocation(frame)} in VS Code`);
        return;
      } catch {
        // fall through to the clipboard
      }
    }
    const text = helpers.frameLocation(frame);
    await this.copyWithToast(text, text);
  }

  /**
   * Open TensorBoard's PyTorch Profiler tab: in TensorBoard (or VS Code, whose frame holds
   * TensorBoard's page) by switching the page's tab; standalone in a new browser tab. The
   * tab takes no run, view or time from a URL, so `search` (the operator to find in its
   * Trace view) is copied to paste into its search box.
   * @param {string | null} search
   */
  async openProfilerTab(search) {
    if (search) await copyText(search);
    try {
      if (window.parent !== window && window.parent.document) {
        // As TensorBoard's own tab bar does: the other keys (this view's too) stay.
        const hash = window.parent.location.hash;
        window.parent.location.hash = this.tb ? tbHashWithState(hash, this.state, "pytorch_profiler") : "pytorch_profiler";
        return;
      }
    } catch {
      // a cross-origin parent: open the tab in a new browser tab instead
    }
    // The plugin frame's base is .../data/plugin/sync_advisor/: TensorBoard is three up.
    window.open(new URL("../../../#pytorch_profiler", document.baseURI).href, "_blank", "noopener");
  }

  /**
   * Copy `text` and say so in the toast; where the clipboard refuses, the toast shows the
   * text itself to copy by hand.
   * @param {string} text
   * @param {string} what how the toast names what was copied
   */
  async copyWithToast(text, what) {
    if (await copyText(text)) this.toast(`Copied ${what}`);
    else this.toast(`Copy this: ${text}`);
  }

  setupTheme() {
    const media = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;
    const apply = () => {
      const theme = chooseTheme({
        parentDark: parentDarkMode(),
        prefersDark: !!media?.matches,
        override: new URLSearchParams(location.search).get("theme"),
      });
      document.documentElement.dataset.theme = theme;
    };
    apply();
    media?.addEventListener?.("change", apply);
    // TensorBoard toggles `dark-mode` on its body when the user flips the setting.
    try {
      const body = window.parent !== window ? window.parent.document.body : null;
      if (body) new MutationObserver(apply).observe(body, { attributes: true, attributeFilter: ["class"] });
    } catch {
      // cross-origin parent (VS Code webview): the system preference decides
    }
  }
}

/**
 * What a notice says of a run the view named that is not in the logdir (any more), and
 * what is shown instead.
 * @param {string} what `Run "x"`, `Baseline run "x"`
 * @param {boolean} gone whether it was shown before (its folder removed while open)
 * @param {string} instead what the view shows instead, as the end of the sentence
 * @returns {Child[]}
 */
function missingText(what, gone, instead) {
  return [
    h("b", null, `${what} is not in the logdir${gone ? " any more" : ""}`),
    gone ? " (its folder was removed or renamed)" : " (renamed, removed, or a typo in the link)",
    instead,
  ];
}

/** TensorBoard's dark mode from the parent document, or null when it cannot be read. */
function parentDarkMode() {
  try {
    if (window.parent === window) return null;
    const body = window.parent.document.body;
    return body ? body.classList.contains("dark-mode") : null;
  } catch {
    return null;
  }
}

/**
 * TensorBoard's page when it is this frame's parent (same origin, its `<tb-webapp>`), else
 * null (standalone, another host, a cross-origin parent).
 * @returns {Window | null}
 */
function tensorBoardPage() {
  try {
    const parent = window.parent;
    if (parent === window || !parent.document.querySelector("tb-webapp")) return null;
    return parent;
  } catch {
    return null;
  }
}

/**
 * VS Code shows TensorBoard in an iframe inside its webview: told by the frames' origins
 * (`vscodeAncestry`), not by the nesting, which any page framing TensorBoard has (Jupyter's
 * `%tensorboard`). Also: a frame around it that is VS Code's webview page on a server's own
 * origin (code-server, openvscode-server: `.../contrib/webview/...`), where it can be read;
 * and the `vscode=1` flag, in the plugin's address or as `p.sync_advisor.vscode=1` in
 * TensorBoard's, for hosts that cannot be told.
 */
function detectVsCode() {
  if (vscodeFlag(location.search, location.hash)) return true;
  if (vscodeAncestry(location.ancestorOrigins ? Array.from(location.ancestorOrigins) : null)) return true;
  /** @type {Window} */
  let frame = window;
  for (let depth = 0; depth < 4 && frame.parent !== frame; depth++) {
    frame = frame.parent;
    try {
      if (depth === 0 && parseTbHash(frame.location.hash).params.some(([k, v]) => k === `${TB_PREFIX}vscode` && (v === "1" || v === "true"))) return true;
      if (/\/contrib\/webview\//.test(frame.location.pathname)) return true;
    } catch {
      // another origin: its origin was in ancestorOrigins
    }
  }
  return false;
}

/**
 * Copy to the clipboard; falls back to a hidden textarea + execCommand where the async
 * clipboard API is missing or denied (iframes without clipboard-write permission).
 * @param {string} text
 * @returns {Promise<boolean>}
 */
async function copyText(text) {
  try {
    if (navigator.clipboard?.writeText) {
      await navigator.clipboard.writeText(text);
      return true;
    }
  } catch {
    // permission denied in the iframe: try the fallback
  }
  const ta = /** @type {HTMLTextAreaElement} */ (
    h("textarea", { style: { position: "fixed", top: "-1000px", opacity: "0" }, "aria-hidden": "true" })
  );
  ta.value = text;
  document.body.appendChild(ta);
  ta.select();
  let ok = false;
  try {
    ok = document.execCommand("copy");
  } catch {
    ok = false;
  }
  ta.remove();
  return ok;
}

/**
 * A banner for a failed request, with the server's message and hint.
 * @param {unknown} e
 * @param {string} title
 */
export function errorBanner(e, title) {
  const err = e instanceof ApiError ? e : null;
  return h(
    "div",
    { class: "sa-banner error", role: "alert" },
    h("h3", null, title),
    h("p", null, e instanceof Error ? e.message : String(e)),
    err?.hint ? h("p", null, err.hint) : null,
  );
}

/** Which element had focus (by data-focus-key) and its caret, to restore after a render. */
function rememberFocus() {
  const el = /** @type {HTMLElement | null} */ (document.activeElement);
  const key = el?.getAttribute?.("data-focus-key");
  if (!key) return null;
  const input = /** @type {HTMLInputElement} */ (el);
  return { key, start: input.selectionStart ?? null, end: input.selectionEnd ?? null };
}

/** @param {{key: string, start: number | null, end: number | null} | null} focus */
function restoreFocus(focus) {
  if (!focus) return;
  const el = /** @type {HTMLInputElement | null} */ (
    focus.key === CHART_TAB_STOP
      ? // The chart's Tab stop, else (no chart drawn) the sites table's.
        document.querySelector('[data-testid="step-chart"] g.step[tabindex="0"]') ??
          document.querySelector('[data-testid="sites"] tbody tr[tabindex="0"]')
      : document.querySelector(`[data-focus-key="${CSS.escape(focus.key)}"]`)
  );
  if (!el || el === document.activeElement) return;
  // A row or bar of a roving-tabindex group becomes the group's Tab stop.
  if (el.getAttribute("tabindex") === "-1" && el.parentElement) {
    for (const sibling of el.parentElement.children) if (sibling.hasAttribute("tabindex")) sibling.setAttribute("tabindex", "-1");
    el.setAttribute("tabindex", "0");
  }
  el.focus({ preventScroll: true });
  if (focus.start !== null && typeof el.setSelectionRange === "function") {
    try {
      el.setSelectionRange(focus.start, focus.end ?? focus.start);
    } catch {
      // not a text input
    }
  }
}
