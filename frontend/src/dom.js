// @ts-check
/**
 * Minimal element builders. Every piece of text goes in through `createTextNode` (or
 * `textContent`): trace data such as operator and function names can contain markup
 * (`<img src=x onerror=...>`) and must show as text. There is no innerHTML anywhere.
 */

const SVG_NS = "http://www.w3.org/2000/svg";

/**
 * @typedef {string | number | Node | null | undefined | false | Child[]} Child
 */

/**
 * Create an HTML element. `attrs`: `class`, `style` (object), `on*` functions (listeners),
 * `dataset` (object), booleans (present/absent) and strings (setAttribute).
 * @param {string} tag
 * @param {Record<string, any> | null} [attrs]
 * @param {...Child} children
 * @returns {HTMLElement}
 */
export function h(tag, attrs, ...children) {
  const el = /** @type {Document} */ (globalThis.document).createElement(tag);
  applyAttrs(el, attrs);
  append(el, children);
  return el;
}

/**
 * Create an SVG element (same conventions as `h`).
 * @param {string} tag
 * @param {Record<string, any> | null} [attrs]
 * @param {...Child} children
 * @returns {SVGElement}
 */
export function s(tag, attrs, ...children) {
  const el = /** @type {SVGElement} */ (
    /** @type {Document} */ (globalThis.document).createElementNS(SVG_NS, tag)
  );
  applyAttrs(el, attrs);
  append(el, children);
  return el;
}

/**
 * @param {Element} el
 * @param {Record<string, any> | null | undefined} attrs
 */
function applyAttrs(el, attrs) {
  if (!attrs) return;
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2).toLowerCase(), value);
    } else if (key === "style" && typeof value === "object") {
      for (const [p, v] of Object.entries(value)) {
        /** @type {any} */ (el).style.setProperty(p, String(v));
      }
    } else if (key === "dataset" && typeof value === "object") {
      for (const [k, v] of Object.entries(value)) /** @type {any} */ (el).dataset[k] = String(v);
    } else if (key === "innerHTML" || key === "outerHTML" || /^on/i.test(key)) {
      // Markup and inline handler strings would run data as code.
      throw new Error(`refusing to set ${key} from data`);
    } else {
      el.setAttribute(key, value === true ? "" : String(value));
    }
  }
}

/**
 * @param {Node} parent
 * @param {Child[]} children
 */
export function append(parent, children) {
  const doc = /** @type {Document} */ (globalThis.document);
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(parent, c);
    else if (typeof c === "string" || typeof c === "number") parent.appendChild(doc.createTextNode(String(c)));
    else parent.appendChild(c);
  }
}

/**
 * Replace all children of `el`.
 * @param {Element} el
 * @param {...Child} children
 */
export function replace(el, ...children) {
  while (el.firstChild) el.removeChild(el.firstChild);
  append(el, children);
}

/**
 * The keydown listener of a roving-tabindex group, for the element holding its items (a
 * table's body, a chart): the group is one Tab stop (the item with tabindex 0, the others
 * -1), the navigation keys that `next` knows move the focus and the Tab stop between the
 * items, Enter and Space act on the focused item as a click does.
 * @param {string} selector the group's items inside the element listened to
 * @param {(current: number, key: string, length: number) => number | null} next the item a key
 *   moves to, null for a key that does not move (`nextRowIndex`, `nextBarIndex`)
 * @param {(index: number) => void} activate what Enter or Space on item `index` does
 * @returns {(e: KeyboardEvent) => void}
 */
export function rovingKeys(selector, next, activate) {
  return (e) => {
    const group = /** @type {Element} */ (e.currentTarget);
    const item = /** @type {Element} */ (e.target).closest?.(selector);
    if (!item || !group.contains(item)) return;
    const all = /** @type {HTMLElement[]} */ ([...group.querySelectorAll(selector)]);
    const current = all.indexOf(/** @type {HTMLElement} */ (item));
    if (current < 0) return;
    if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      activate(current);
      return;
    }
    const to = next(current, e.key, all.length);
    if (to === null) return;
    e.preventDefault();
    all.forEach((el, i) => el.setAttribute("tabindex", i === to ? "0" : "-1"));
    all[to].focus();
  };
}
