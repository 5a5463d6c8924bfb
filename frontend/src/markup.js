// @ts-check
/**
 * The little markup the catalogue's advice uses: `code` between backticks. Pure: the DOM
 * layer turns the parts into text nodes and <code> elements (never HTML).
 */

/**
 * Split text at backticks into plain and code parts; an unpaired backtick stays text.
 * @param {string | null | undefined} text
 * @returns {{code: boolean, text: string}[]}
 */
export function inlineCode(text) {
  const source = text || "";
  /** @type {{code: boolean, text: string}[]} */
  const parts = [];
  let at = 0;
  const re = /`([^`]+)`/g;
  let m;
  while ((m = re.exec(source)) !== null) {
    if (m.index > at) parts.push({ code: false, text: source.slice(at, m.index) });
    parts.push({ code: true, text: m[1] });
    at = re.lastIndex;
  }
  if (at < source.length) parts.push({ code: false, text: source.slice(at) });
  return parts;
}
