// Directional steering through ds4-server: a direction file built by `ds4-gguf steer-build` on
// the demo model, the steering reported in /v1/models and /metrics, and a greedy completion that
// differs from the unsteered server's.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { MODEL, metrics, request, startServer } from './lib.mjs';

const GGUF_BIN = process.env.DS4_GGUF_BIN;
let dir, file, steered, plain;

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds4steer-'));
  const pos = path.join(dir, 'pos.jsonl'), neg = path.join(dir, 'neg.jsonl');
  fs.writeFileSync(pos, ['The LORD is my shepherd; I shall not want.', 'Praise ye the LORD. Praise God in his sanctuary.',
    'A soft answer turneth away wrath: but grievous words stir up anger.'].map((t) => JSON.stringify(t)).join('\n'));
  fs.writeFileSync(neg, ['And Abram went up out of Egypt, he, and his wife.', 'And it came to pass in those days, that Moses went out.',
    'And David arose, and went down to the wilderness of Paran.'].map((t) => JSON.stringify({ text: t })).join('\n'));
  file = path.join(dir, 'dir.f32');
  execFileSync(GGUF_BIN, ['steer-build', '-m', MODEL, '--raw', '--threads', '2', '--positive', pos, '--negative', neg,
    '--out', file]);
  steered = await startServer(['--dir-steering-file', file, '--dir-steering-ffn', '1']);
  plain = await startServer([]);
});
after(async () => {
  assert.equal(await steered.stop(), 0);
  assert.equal(await plain.stop(), 0);
  fs.rmSync(dir, { recursive: true, force: true });
});

test('/v1/models and /metrics report the steering', async () => {
  const m = (await request(steered, 'GET', '/v1/models')).json;
  for (const e of m.data) {
    assert.equal(e.steering.file, file);
    assert.match(e.steering.id, /^[0-9a-f]{16}$/);
    assert.equal(e.steering.first_layer, 0);
    assert.equal(e.steering.layers, 6);
    assert.equal(e.steering.attn, 0);
    assert.equal(e.steering.ffn, 1);
  }
  const g = await metrics(steered);
  assert.equal(g.ds4_steering_attn_scale, 0);
  assert.equal(g.ds4_steering_ffn_scale, 1);
  assert.equal(g.ds4_steering_layers, 6);
  const p = (await request(plain, 'GET', '/v1/models')).json;
  for (const e of p.data) assert.equal(e.steering, undefined);
  assert.equal((await metrics(plain)).ds4_steering_layers, 0);
});

test('a greedy completion differs from the unsteered one', async () => {
  const body = JSON.stringify({ model: 'deepseek-v4-flash', prompt: 'And it came to pass', max_tokens: 24, temperature: 0 });
  const a = await request(steered, 'POST', '/v1/completions', body, { 'Content-Type': 'application/json' });
  const b = await request(plain, 'POST', '/v1/completions', body, { 'Content-Type': 'application/json' });
  assert.equal(a.status, 200, a.body);
  assert.equal(b.status, 200, b.body);
  assert.ok(b.json.choices[0].text.length > 0);
  assert.notEqual(a.json.choices[0].text, b.json.choices[0].text);
});

// (A well-formed file of another model is refused too: tests/unit/session/test_steering.cpp.)
test('a damaged file stops the server at startup, naming the check', async () => {
  const bad = path.join(dir, 'damaged.f32');
  const bytes = fs.readFileSync(file);
  bytes.write('0000000000000000', 16, 'ascii');  // edited model id: the checksum no longer matches
  fs.writeFileSync(bad, bytes);
  await assert.rejects(startServer(['--dir-steering-file', bad]), /damaged\.f32: checksum at byte \d+ does not match/);
});
