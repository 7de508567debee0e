#!/usr/bin/env node
// Same outputs as reference_ids.py, through HF tokenizers' Node binding (npm `tokenizers`,
// the same Rust core and version as the Python package). Used on the dev machine, where the
// Python package is absent; the committed fixtures were cross-checked against the Python run.
//
//   NODE_PATH=/path/to/node_modules node reference_ids.mjs --tokenizer-json T --corpus C --out DIR [--probe]
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const { Tokenizer } = require(process.env.HF_TOKENIZERS_MODULE || 'tokenizers');

function arg(name, def) {
  const i = process.argv.indexOf(name);
  if (i < 0) return def;
  return process.argv[i + 1];
}

const here = path.dirname(fileURLToPath(import.meta.url));
const tjPath = arg('--tokenizer-json');
const corpusPath = arg('--corpus');
const outDir = arg('--out');
const v4Path = arg('--v4', path.join(here, 'v4_added_tokens.json'));
if (!tjPath || !corpusPath || !outDir) {
  console.error('usage: reference_ids.mjs --tokenizer-json T --corpus C --out DIR [--probe]');
  process.exit(2);
}
fs.mkdirSync(outDir, { recursive: true });

const base = JSON.parse(fs.readFileSync(tjPath, 'utf8'));
const texts = fs.readFileSync(corpusPath, 'utf8').split('\n').filter((l) => l.length > 0)
  .map((l) => { const o = JSON.parse(l); return 'text' in o ? o.text : null; });

const plain = structuredClone(base);
plain.added_tokens = [];
const v4 = structuredClone(base);
for (const t of JSON.parse(fs.readFileSync(v4Path, 'utf8')).tokens) {
  v4.added_tokens.push({ id: t.id, content: t.content, single_word: false, lstrip: false, rstrip: false,
                         normalized: false, special: true });
}

async function encodeAll(tok) {
  const rows = [];
  for (const t of texts) {
    if (t === null) { rows.push(null); continue; }
    const e = await tok.encode(t, null, { addSpecialTokens: true });
    rows.push(Array.from(e.getIds()));
  }
  return rows;
}

const writeJsonl = (p, rows) => fs.writeFileSync(p, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');

for (const [name, js] of [['plain', plain], ['special', base], ['special_v4', v4]]) {
  const tok = Tokenizer.fromString(JSON.stringify(js));
  writeJsonl(path.join(outDir, `ref_${name}.jsonl`), await encodeAll(tok));
  console.error(name, 'done');
}

if (process.argv.includes('--probe')) {
  const cps = [];
  for (let c = 0; c < 0x110000; c++) if (c < 0xd800 || c > 0xdfff) cps.push(c);
  const s = String.fromCodePoint(...cps.slice(0, 1)) === '' ? '' : cps.map((c) => String.fromCodePoint(c)).join('');
  const pats = {
    N: '\\p{N}', L: '\\p{L}', M: '\\p{M}', P: '\\p{P}', S: '\\p{S}', s: '\\s', S_upper: '\\S',
    notLPS: '[^\\r\\n\\p{L}\\p{P}\\p{S}]', LM: '[\\p{L}\\p{M}]', PS: '[\\p{P}\\p{S}]',
    cjk: '[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]',
  };
  const out = {};
  for (const [name, p] of Object.entries(pats)) {
    const js = structuredClone(plain);
    js.pre_tokenizer = { type: 'Split', pattern: { Regex: p }, behavior: 'Removed', invert: false };
    const pt = Tokenizer.fromString(JSON.stringify(js)).getPreTokenizer();
    const kept = new Set();
    for (const [piece] of pt.preTokenizeString(s)) for (const ch of piece) kept.add(ch.codePointAt(0));
    const ranges = [];
    for (const c of cps) {
      if (kept.has(c)) continue;
      if (ranges.length && ranges[ranges.length - 1][1] === c - 1) ranges[ranges.length - 1][1] = c;
      else ranges.push([c, c]);
    }
    out[name] = ranges;
  }
  fs.writeFileSync(path.join(outDir, 'classes.json'), JSON.stringify(out));
  console.error('probe done');
}
