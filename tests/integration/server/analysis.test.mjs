// Live imatrix and expert profile in ds4-server: --imatrix-out / --expert-profile-out collect from
// real requests, the files are flushed every --imatrix-flush-s seconds and at shutdown (never a
// half-written file under the name), /metrics counts the tokens, and a server without the flags
// has no such metric.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { metrics, request, sleep, startServer } from './lib.mjs';

let dir, srv, plain, imx, prof;

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds4analysis-'));
  imx = path.join(dir, 'live.imatrix.gguf');
  prof = path.join(dir, 'live.profile.json');
  srv = await startServer(['--imatrix-out', imx, '--expert-profile-out', prof, '--imatrix-flush-s', '1']);
  plain = await startServer([]);
});
after(async () => {
  if (plain) assert.equal(await plain.stop(), 0);
  fs.rmSync(dir, { recursive: true, force: true });
});

test('traffic is collected, flushed periodically and at shutdown', async () => {
  assert.equal(fs.existsSync(imx), false);  // nothing evaluated, nothing written
  const body = JSON.stringify({ model: 'deepseek-v4-flash', prompt: 'And God said, Let there be light', max_tokens: 16,
    temperature: 0 });
  const r = await request(srv, 'POST', '/v1/completions', body, { 'Content-Type': 'application/json' });
  assert.equal(r.status, 200, r.body);
  const n = (await metrics(srv)).ds4_analysis_tokens;
  assert.ok(n >= 16, `ds4_analysis_tokens ${n}`);
  for (let i = 0; i < 50 && !(fs.existsSync(imx) && fs.existsSync(prof)); ++i) await sleep(100);
  assert.equal(fs.readFileSync(imx).subarray(0, 4).toString(), 'GGUF');
  let p = JSON.parse(fs.readFileSync(prof, 'utf8'));
  assert.equal(p.format, 'ds4-expert-profile');
  assert.equal(p.tokens, n);
  const sum = p.layers[3].count.reduce((a, b) => a + b, 0);
  assert.equal(sum, 2 * n);  // 2 experts per token
  // A second request; the shutdown flush writes its tokens too.
  const r2 = await request(srv, 'POST', '/v1/completions', body.replace('light', 'a firmament'),
    { 'Content-Type': 'application/json' });
  assert.equal(r2.status, 200, r2.body);
  const n2 = (await metrics(srv)).ds4_analysis_tokens;
  assert.ok(n2 > n);
  assert.equal(await srv.stop(), 0);
  p = JSON.parse(fs.readFileSync(prof, 'utf8'));
  assert.equal(p.tokens, n2);
  assert.equal(fs.existsSync(imx + '.tmp'), false);
  assert.equal(fs.existsSync(prof + '.tmp'), false);
});

test('no analysis metric without the flags', async () => {
  assert.equal((await metrics(plain)).ds4_analysis_tokens, undefined);
});
