// Soak: 200 mixed requests (valid, malformed, disconnecting; 8 at a time) must leave the
// server alive, answering correctly, with open descriptors and threads back to baseline.
import assert from 'node:assert/strict';
import http from 'node:http';
import { test } from 'node:test';

import { chatBody, fdCount, metrics, request, sleep, startServer, threadCount } from './lib.mjs';

function abortAfter(srv, path, body, { afterBytes = 1, afterMs = null } = {}) {
  return new Promise((resolve) => {
    const data = JSON.stringify(body);
    const req = http.request({ host: '127.0.0.1', port: srv.port, method: 'POST', path, agent: false,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } }, (res) => {
      let got = 0;
      res.on('data', (c) => { got += c.length; if (afterMs === null && got >= afterBytes) { req.destroy(); resolve('aborted'); } });
      res.on('end', () => resolve('ended'));
      res.on('error', () => resolve('aborted'));
    });
    req.on('error', () => resolve('aborted'));
    req.end(data);
    if (afterMs !== null) setTimeout(() => { req.destroy(); resolve('aborted'); }, afterMs);
  });
}

const greedy = chatBody('And the LORD spake unto Moses, saying', { max_tokens: 16, temperature: 0, thinking: { type: 'disabled' } });

const kinds = [
  async (s) => { const r = await request(s, 'POST', '/v1/chat/completions', chatBody('Blessed is the man', { max_tokens: 4 })); assert.equal(r.status, 200, r.body); assert.equal(r.json.usage.completion_tokens <= 4, true); },
  async (s) => { const r = await request(s, 'POST', '/v1/chat/completions', chatBody('The LORD is my shepherd', { max_tokens: 4, stream: true })); assert.equal(r.status, 200); assert.match(r.body, /data: \[DONE\]\n\n$/); },
  async (s) => { const r = await request(s, 'POST', '/v1/chat/completions', '{"messages": [{"role": "user", "content": "x"}'); assert.equal(r.status, 400); },
  async (s) => { const r = await request(s, 'POST', '/v1/chat/completions', { ...chatBody('x'), top_k: 'many' }); assert.equal(r.status, 400); assert.equal(r.json.error.param, 'top_k'); },
  async (s) => { const r = await request(s, 'POST', '/v1/messages', { model: 'nope', max_tokens: 3, messages: [{ role: 'user', content: 'x' }] }); assert.equal(r.status, 404); },
  async (s) => { await abortAfter(s, '/v1/chat/completions', chatBody('In the beginning', { max_tokens: 500, stream: true, seed: 1 }), { afterBytes: 300 }); },
  async (s) => { await abortAfter(s, '/v1/chat/completions', chatBody('Vanity of vanities', { max_tokens: 500, seed: 1 }), { afterMs: 30 }); },
  async (s) => { const r = await request(s, 'POST', '/v1/messages', { model: 'deepseek-v4-flash', max_tokens: 4, stream: true, messages: [{ role: 'user', content: 'Hear, O Israel' }] }); assert.equal(r.status, 200); assert.match(r.body, /event: message_stop/); },
  async (s) => { const r = await request(s, 'POST', '/v1/responses', { model: 'deepseek-v4-flash', input: 'Praise ye the LORD', max_output_tokens: 4 }); assert.equal(r.status, 200, r.body); assert.equal(r.json.object, 'response'); },
  async (s) => { const r = await request(s, 'POST', '/v1/completions', { prompt: 'And Noah', max_tokens: 4, stream: true }); assert.equal(r.status, 200); },
  async (s) => { const r = await request(s, 'GET', '/v1/models'); assert.equal(r.status, 200); },
  async (s) => { await abortAfter(s, '/v1/responses', { input: 'Woe unto', max_output_tokens: 400, stream: true, seed: 1 }, { afterBytes: 200 }); },
];

test('200 mixed requests, 8 concurrent', async () => {
  const srv = await startServer();
  try {
    const want = await request(srv, 'POST', '/v1/chat/completions', greedy);
    assert.equal(want.status, 200);
    await sleep(300);
    const fd0 = fdCount(srv.pid), th0 = threadCount(srv.pid);
    let done = 0;
    const failures = [];
    for (let i = 0; i < 200; i += 8) {
      await Promise.all(Array.from({ length: 8 }, (_, k) => kinds[(i + k) % kinds.length](srv)
        .then(() => done++).catch((e) => failures.push(`${(i + k) % kinds.length}: ${e.message}`))));
    }
    assert.deepEqual(failures, []);
    assert.equal(done, 200);
    assert.ok(srv.alive());
    // Let cancelled jobs drain and server-side sockets close.
    for (let i = 0; i < 200; i++) {
      const m = await metrics(srv);
      if (m.ds4_active_jobs === 0 && m.ds4_queue_length === 0) break;
      await sleep(25);
    }
    const m = await metrics(srv);
    assert.ok(m.ds4_cancelled_total >= 10, `cancelled ${m.ds4_cancelled_total}`);
    const again = await request(srv, 'POST', '/v1/chat/completions', greedy);
    assert.equal(again.json.choices[0].message.content, want.json.choices[0].message.content, 'same greedy answer after the soak');
    let fd1, th1;
    for (let i = 0; i < 40; i++) {
      await sleep(100);
      fd1 = fdCount(srv.pid);
      th1 = threadCount(srv.pid);
      if (fd1 === fd0 && th1 === th0) break;
    }
    assert.equal(fd1, fd0, 'open descriptors back to baseline');
    assert.equal(th1, th0, 'threads back to baseline');
    assert.equal((await request(srv, 'GET', '/health')).json.status, 'ok');
  } finally {
    assert.equal(await srv.stop(), 0);
  }
});
