// @ts-check
/**
 * A small Python tokenizer for the code view. It returns tokens whose texts concatenate to
 * exactly the input; the DOM layer puts each in a text node, so markup in source or in
 * names is shown, never interpreted. Pure.
 */

const KEYWORDS = new Set(
  (
    "False None True and as assert async await break class continue def del elif else " +
    "except finally for from global if import in is lambda nonlocal not or pass raise " +
    "return try while with yield match case"
  ).split(" "),
);

const BUILTINS = new Set(
  "print len range int float str list dict set tuple bool isinstance super self".split(" "),
);

/**
 * @typedef {{type: "kw" | "builtin" | "str" | "com" | "num" | "txt" | "call", text: string}} Token
 */

/**
 * Tokenize one line of Python. Strings that continue onto the next line are closed at the
 * end of the line (good enough for a few lines of context).
 * @param {string} line
 * @returns {Token[]}
 */
export function tokenizePython(line) {
  /** @type {Token[]} */
  const out = [];
  const re =
    /(#.*$)|([rRbBuUfF]{0,2}(?:"""|'''|"(?:[^"\\]|\\.)*"?|'(?:[^'\\]|\\.)*'?))|(\b\d[\d_]*(?:\.\d*)?(?:[eE][+-]?\d+)?j?\b)|([A-Za-z_][A-Za-z0-9_]*)/g;
  let last = 0;
  let m;
  while ((m = re.exec(line)) !== null) {
    if (m.index > last) push(out, "txt", line.slice(last, m.index));
    const text = m[0];
    if (m[1]) push(out, "com", text);
    else if (m[2]) push(out, "str", text);
    else if (m[3]) push(out, "num", text);
    else if (KEYWORDS.has(text)) push(out, "kw", text);
    else if (BUILTINS.has(text)) push(out, "builtin", text);
    else if (line[re.lastIndex] === "(") push(out, "call", text);
    else push(out, "txt", text);
    last = re.lastIndex;
  }
  if (last < line.length) push(out, "txt", line.slice(last));
  return out;
}

/**
 * @param {Token[]} out
 * @param {Token["type"]} type
 * @param {string} text
 */
function push(out, type, text) {
  const prev = out[out.length - 1];
  if (prev && prev.type === type && type === "txt") prev.text += text;
  else out.push({ type, text });
}
