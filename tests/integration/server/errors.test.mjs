// Raw HTTP: every error path answers in its API's JSON error shape with the right status;
// disconnects cancel generation; slow prefills stream keepalives; auth and CORS.
// Generations that tests cut short use fixed seeds: the demo model then runs to max_tokens
// (checked: it never samples EOS for these prompts), so a cancellation always has work to stop.
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { after, before, test } from 'node:test';

import { chatBody, metrics, parseSse, request, sleep, startServer } from './lib.mjs';

let srv;
before(async () => { srv = await startServer(['--max-body-bytes', '65536']); });
after(async () => { assert.ok(srv.alive(), 'server still running'); assert.equal(await srv.stop(), 0); });

function assertOpenAiError(r, status, { param, match } = {}) {
  assert.equal(r.status, status, r.body);
  assert.match(r.headers['content-type'], /application\/json/);
  assert.equal(typeof r.json.error.message, 'string');
  assert.equal(typeof r.json.error.type, 'string');
  if (param !== undefined) assert.equal(r.json.error.param, param);
  if (match) assert.match(r.json.error.message, match);
}
function assertAnthropicError(r, status, type, match) {
  assert.equal(r.status, status, r.body);
  assert.equal(r.json.type, 'error');
  assert.equal(r.json.error.type, type);
  if (match) assert.match(r.json.error.message, match);
}

test('invalid JSON → 400 in each API shape', async () => {
  for (const p of ['/v1/chat/completions', '/v1/completions', '/v1/responses']) {
    assertOpenAiError(await request(srv, 'POST', p, '{"messages": [}'), 400, { match: /not valid JSON \(byte \d+\)/ });
  }
  assertAnthropicError(await request(srv, 'POST', '/v1/messages', 'nope'), 400, 'invalid_request_error', /not valid JSON/);
});

test('wrong field types → 400 naming the field', async () => {
  const cases = [
    [{ ...chatBody('x'), temperature: 'hot' }, 'temperature', /expected a number, got a string/],
    [{ ...chatBody('x'), max_tokens: 2.5 }, 'max_tokens', /expected an integer/],
    [{ ...chatBody('x'), top_p: 3 }, 'top_p', /outside/],
    [{ ...chatBody('x'), stream: 'yes' }, 'stream', /expected a boolean/],
    [{ ...chatBody('x'), stop: [1] }, 'stop[0]', /expected a string/],
    [{ model: 'deepseek-v4-flash', messages: [{ role: 'wizard', content: 'x' }] }, 'messages[0].role', /unknown role/],
    [{ model: 'deepseek-v4-flash', messages: [{ role: 'user', content: 5 }] }, 'messages[0].content', /expected a string/],
    [{ model: 'deepseek-v4-flash', messages: 'hi' }, 'messages', /expected an array/],
    [{ ...chatBody('x'), tools: [{ type: 'function' }] }, 'tools[0].function', /missing/],
    [{ ...chatBody('x'), reasoning_effort: 'extreme' }, 'reasoning_effort', /unknown effort/],
    [[1, 2], 'request', /expected a JSON object/],
  ];
  for (const [body, param, match] of cases) {
    assertOpenAiError(await request(srv, 'POST', '/v1/chat/completions', body), 400, { param, match });
  }
  assertOpenAiError(await request(srv, 'POST', '/v1/responses', { input: 7 }), 400, { param: 'input' });
  assertOpenAiError(await request(srv, 'POST', '/v1/responses', { input: [{ type: 'bogus' }] }), 400, { param: 'input[0].type' });
  assertOpenAiError(await request(srv, 'POST', '/v1/completions', { prompt: { a: 1 } }), 400, { param: 'prompt' });
  assertAnthropicError(await request(srv, 'POST', '/v1/messages', { messages: [{ role: 'user', content: 'x' }] }),
    400, 'invalid_request_error', /max_tokens: missing/);
  assertAnthropicError(await request(srv, 'POST', '/v1/messages',
    { max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] }),
    400, 'invalid_request_error', /messages\[0\]\.content\[0\]\.type: unsupported block type 'image'/);
});

test('unknown model → 404; unknown route → 404', async () => {
  assertOpenAiError(await request(srv, 'POST', '/v1/chat/completions', { ...chatBody('x'), model: 'gpt-9' }), 404,
    { param: 'model', match: /model 'gpt-9' not found/ });
  assertOpenAiError(await request(srv, 'GET', '/v1/models/gpt-9'), 404);
  assertAnthropicError(await request(srv, 'POST', '/v1/messages',
    { model: 'claude-x', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }), 404, 'not_found_error');
  assertOpenAiError(await request(srv, 'GET', '/v1/nothing-here'), 404, { match: /no route/ });
  const ok = await request(srv, 'GET', '/v1/models/deepseek-v4-flash');
  assert.equal(ok.status, 200);
  assert.equal(ok.json.id, 'deepseek-v4-flash');
});

test('oversized body → 413', async () => {
  const big = chatBody('x'.repeat(70000));
  assertOpenAiError(await request(srv, 'POST', '/v1/chat/completions', big), 413, { match: /larger than the limit of 65536/ });
  assertAnthropicError(await request(srv, 'POST', '/v1/messages', { max_tokens: 5, messages: [{ role: 'user', content: 'y'.repeat(70000) }] }),
    413, 'request_too_large');
});

test('context overflow → 400 saying by how much', async () => {
  // ~3000 words in a 2048-token context.
  const words = Array.from({ length: 3000 }, (_, i) => `w${i}`).join(' ');
  const r = await request(srv, 'POST', '/v1/chat/completions', chatBody(words.slice(0, 60000)));
  assertOpenAiError(r, 400, { match: /context overflow: the prompt is (\d+) tokens and the context holds 2048; it is (\d+) tokens too long/ });
  const [, n, over] = r.json.error.message.match(/prompt is (\d+) tokens.*it is (\d+) tokens/);
  assert.equal(Number(over), Number(n) - 2048 + 1);
  assert.equal(r.json.error.code, 'context_length_exceeded');
});

test('client disconnect mid-stream cancels the generation', async () => {
  const m0 = await metrics(srv);
  await new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: srv.port, method: 'POST', path: '/v1/chat/completions', agent: false,
      headers: { 'content-type': 'application/json' } }, (res) => {
      let n = 0;
      res.on('data', () => { if (++n === 3) { req.destroy(); clearTimeout(timer); resolve(); } });
      res.on('error', () => {});
    });
    req.on('error', () => {});
    req.end(JSON.stringify(chatBody('And it came to pass', { max_tokens: 1900, stream: true, seed: 1 })));
    const timer = setTimeout(() => reject(new Error('no data')), 20000);
  });
  // The worker notices before its next token; wait until the job is gone.
  let m1;
  for (let i = 0; i < 100; i++) {
    m1 = await metrics(srv);
    if (m1.ds4_cancelled_total > m0.ds4_cancelled_total && m1.ds4_active_jobs === 0) break;
    await sleep(20);
  }
  assert.equal(m1.ds4_cancelled_total, m0.ds4_cancelled_total + 1);
  const generated = m1.ds4_generated_tokens_total - m0.ds4_generated_tokens_total;
  assert.ok(generated < 1900, `stopped early (${generated} tokens)`);
  await sleep(300);
  const m2 = await metrics(srv);
  assert.equal(m2.ds4_generated_tokens_total, m1.ds4_generated_tokens_total, 'nothing generated after the cancel');
  // A non-streamed request whose client leaves is cancelled too.
  const sock = net.connect(srv.port, '127.0.0.1');
  await new Promise((r) => sock.once('connect', r));
  const body = JSON.stringify(chatBody('And it came to pass', { max_tokens: 1900, seed: 1 }));
  sock.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  await sleep(150);
  sock.destroy();
  for (let i = 0; i < 100; i++) {
    m1 = await metrics(srv);
    if (m1.ds4_cancelled_total === m0.ds4_cancelled_total + 2 && m1.ds4_active_jobs === 0) break;
    await sleep(20);
  }
  assert.equal(m1.ds4_cancelled_total, m0.ds4_cancelled_total + 2);
  const ok = await request(srv, 'POST', '/v1/chat/completions', chatBody('x', { max_tokens: 2 }));
  assert.equal(ok.status, 200);
});

test('auth, CORS, keepalives during a slow prefill', async () => {
  const s2 = await startServer(['--api-key', 'sekrit', '--cors', '--debug-prefill-delay-ms', '25', '--sse-keepalive-ms', '100',
    '--max-queue', '1']);
  try {
    assertOpenAiError(await request(s2, 'POST', '/v1/chat/completions', chatBody('x')), 401);
    assertAnthropicError(await request(s2, 'POST', '/v1/messages', { max_tokens: 2, messages: [{ role: 'user', content: 'x' }] }),
      401, 'authentication_error');
    assert.equal((await request(s2, 'GET', '/v1/models', undefined, { authorization: 'Bearer wrong' })).status, 401);
    assert.equal((await request(s2, 'GET', '/v1/models', undefined, { authorization: 'Bearer sekrit' })).status, 200);
    assert.equal((await request(s2, 'GET', '/v1/models', undefined, { 'x-api-key': 'sekrit' })).status, 200);
    assert.equal((await request(s2, 'GET', '/health')).status, 200);
    const pre = await request(s2, 'OPTIONS', '/v1/chat/completions', undefined, { origin: 'http://example.test' });
    assert.equal(pre.status, 204);
    assert.equal(pre.headers['access-control-allow-origin'], '*');

    // ~40 prompt tokens at 25 ms each: about a second of prefill, keepalives every 100 ms.
    const t0 = Date.now();
    const r = await request(s2, 'POST', '/v1/chat/completions',
      chatBody('And God said, Let there be light: and there was light. And God saw the light, that it was good.',
        { stream: true, max_tokens: 3 }), { authorization: 'Bearer sekrit' });
    const elapsed = Date.now() - t0;
    assert.equal(r.status, 200);
    const { events, comments } = parseSse(r.body);
    assert.ok(elapsed > 700, `slow prefill took ${elapsed} ms`);
    assert.ok(comments >= 4, `${comments} keepalive comments`);
    const emptyDeltas = events.filter((e) => e.data?.choices?.[0] && Object.keys(e.data.choices[0].delta).length === 0 &&
      e.data.choices[0].finish_reason === null);
    assert.ok(emptyDeltas.length >= 4, `${emptyDeltas.length} empty deltas`);
    assert.equal(events.at(-1).data, '[DONE]');

    // Disconnect during the prefill cancels it.
    const m0 = await metrics(s2);
    const req = http.request({ host: '127.0.0.1', port: s2.port, method: 'POST', path: '/v1/chat/completions', agent: false,
      headers: { 'content-type': 'application/json', authorization: 'Bearer sekrit' } }, (res) => res.on('data', () => {}));
    req.on('error', () => {});
    // No common prefix with the previous prompt beyond the template: ~20 tokens to prefill.
    req.end(JSON.stringify(chatBody('Now the serpent was more subtil than any beast of the field.', { stream: true })));
    await sleep(200);
    req.destroy();
    let m1;
    for (let i = 0; i < 100; i++) {
      m1 = await metrics(s2);
      if (m1.ds4_cancelled_total > m0.ds4_cancelled_total && m1.ds4_active_jobs === 0) break;
      await sleep(20);
    }
    assert.equal(m1.ds4_cancelled_total, m0.ds4_cancelled_total + 1);
    assert.equal(m1.ds4_generated_tokens_total, m0.ds4_generated_tokens_total);

    // Queue full → 503: one job prefilling slowly, one queued, the third is refused.
    const auth = { authorization: 'Bearer sekrit' };
    const slow = (text) => request(s2, 'POST', '/v1/chat/completions', chatBody(text, { max_tokens: 1 }), auth);
    // ~60 new tokens at 25 ms: A stays in its prefill for about 1.5 s while B and C arrive.
    const a = slow('For God so loved the world, that he gave his only begotten Son, that whosoever believeth in him ' +
      'should not perish, but have everlasting life. For God sent not his Son into the world to condemn the world.');
    await sleep(150);
    const b = slow('Jesus wept, and the people marvelled at the words of his mouth.');
    await sleep(100);
    const c = await request(s2, 'POST', '/v1/chat/completions', chatBody('third', { max_tokens: 1 }), auth);
    assertOpenAiError(c, 503, { match: /queue is full/ });
    assert.equal(c.headers['retry-after'], '1');
    assert.equal((await a).status, 200);
    assert.equal((await b).status, 200);
  } finally {
    assert.equal(await s2.stop(), 0);
  }
});
