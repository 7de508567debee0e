// A hostile client against a real ds4-server (demo model, loopback only, every wait bounded):
// malformed and oversized requests are answered at once with 400/413/431, deep JSON cannot
// crash it, slow or idle connection floods do not stop other requests or an ongoing stream,
// pipelined requests are answered in order. Afterwards the server is alive and its
// descriptor and thread counts are back to their baseline.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import { after, before, test } from 'node:test';

import { chatBody, fdCount, parseSse, request, sleep, startServer, threadCount } from './lib.mjs';

const LIMIT = 262144;
const HEADER_TIMEOUT_MS = 1500;
let srv;
let base;

before(async () => {
  srv = await startServer(['--max-body-bytes', String(LIMIT), '--max-header-bytes', '16384',
    '--header-timeout-ms', String(HEADER_TIMEOUT_MS), '--body-timeout-ms', String(HEADER_TIMEOUT_MS)]);
  // Warm up (worker, compute threads, one generation) before taking the baseline.
  assert.equal((await request(srv, 'POST', '/v1/chat/completions', chatBody('x', { max_tokens: 2 }))).status, 200);
  await sleep(200);
  base = { fds: fdCount(srv.pid), threads: threadCount(srv.pid) };
});

after(async () => {
  assert.ok(srv.alive(), 'server still running');
  assert.equal((await request(srv, 'GET', '/health')).status, 200);
  // Every connection this file opened is closed; the counts return to the baseline.
  let now;
  for (let i = 0; i < 100; i++) {
    now = { fds: fdCount(srv.pid), threads: threadCount(srv.pid) };
    if (now.fds <= base.fds && now.threads <= base.threads) break;
    await sleep(50);
  }
  assert.ok(now.fds <= base.fds, `descriptors ${now.fds}, baseline ${base.fds}`);
  assert.ok(now.threads <= base.threads, `threads ${now.threads}, baseline ${base.threads}`);
  assert.equal(await srv.stop(), 0);
});

// Writes `chunks` (strings/Buffers, or functions returning them, awaited in turn) to a fresh
// connection and collects what comes back until the server closes it or `timeoutMs` passes.
function raw(chunks, { timeoutMs = 5000, gapMs = 0 } = {}) {
  return new Promise((resolve) => {
    const sock = net.connect(srv.port, '127.0.0.1');
    const got = [];
    const t0 = Date.now();
    let firstByteMs = null, closed = false;
    const done = () => {
      if (closed) return;
      closed = true;
      clearTimeout(timer);
      sock.destroy();
      resolve({ text: Buffer.concat(got).toString('latin1'), firstByteMs, ms: Date.now() - t0, closedByServer });
    };
    let closedByServer = false;
    const timer = setTimeout(done, timeoutMs);
    sock.on('data', (d) => { if (firstByteMs === null) firstByteMs = Date.now() - t0; got.push(d); });
    sock.on('end', () => { closedByServer = true; done(); });
    sock.on('close', () => { closedByServer = true; done(); });
    sock.on('error', () => {});
    sock.on('connect', async () => {
      for (const c of chunks) {
        if (closed) return;
        sock.write(c);
        if (gapMs) await sleep(gapMs);
      }
    });
  });
}

const statusOf = (text) => Number(/^HTTP\/1\.1 (\d+)/.exec(text)?.[1] ?? 0);
const bodyOf = (text) => { const i = text.indexOf('\r\n\r\n'); return i < 0 ? '' : text.slice(i + 4); };

test('deeply nested JSON → 400 naming the limit, on every POST endpoint', async () => {
  const deep = '['.repeat(50000) + ']'.repeat(50000);
  for (const p of ['/v1/chat/completions', '/v1/completions', '/v1/responses', '/v1/messages']) {
    for (const body of [deep, `{"x":${deep},"model":"deepseek-v4-flash"}`]) {
      const r = await request(srv, 'POST', p, body);
      assert.equal(r.status, 400, r.body.slice(0, 200));
      const msg = r.json.error.message;
      assert.match(msg, /JSON nested deeper than 128 levels/);
    }
  }
  const r = await request(srv, 'POST', '/v1/chat/completions', '{"messages":[{"role":"user","content":"x"}],"temperature":1e400}');
  assert.equal(r.status, 400);
  assert.equal(r.json.error.message, 'request: not valid JSON (a number is out of range)');
});

test('bad Content-Length, Expect, duplicate lengths, huge headers → answered at once', async () => {
  const post = (headers) => `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${headers}\r\n`;
  const cases = [
    ['Content-Length: -5\r\n', 400, /invalid Content-Length/],
    ['Content-Length: 18446744073709551616\r\n', 400, /invalid Content-Length/],
    ['Content-Length: 107374182400\r\n', 413, new RegExp(`larger than the limit of ${LIMIT} bytes`)],
    ['Content-Length: 100000000\r\nExpect: 100-continue\r\n', 413, /larger than the limit/],
    ['Content-Length: 5\r\nContent-Length: 6\r\n', 400, /conflicting Content-Length/],
  ];
  for (const [h, status, match] of cases) {
    const r = await raw([post(h)], { timeoutMs: 3000 });
    assert.equal(statusOf(r.text), status, `${JSON.stringify(h)} → ${r.text.slice(0, 200)}`);
    assert.ok(r.firstByteMs < 3000, `answered after ${r.firstByteMs} ms`);
    assert.ok(!r.text.includes('100 Continue'), 'no 100 Continue for a body over the limit');
    assert.match(JSON.parse(bodyOf(r.text)).error.message, match);
    assert.ok(r.closedByServer, 'connection closed after the error');
  }
  // A body within the limit with Expect: 100-continue gets the 100 and then its answer.
  const body = JSON.stringify(chatBody('x', { max_tokens: 1 }));
  const ok = await raw([post(`Content-Length: ${Buffer.byteLength(body)}\r\nExpect: 100-continue\r\nConnection: close\r\n`),
    body], { timeoutMs: 10000, gapMs: 300 });
  assert.match(ok.text, /^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 /);
  // 20 MB of headers: 431 once 16 KiB have arrived, not after reading them all.
  const line = 'X-Filler: ' + 'a'.repeat(1000) + '\r\n';
  const chunks = ['GET /health HTTP/1.1\r\nHost: x\r\n', ...Array.from({ length: 20000 }, () => line)];
  const big = await raw(chunks, { timeoutMs: 5000, gapMs: 0 });
  assert.equal(statusOf(big.text), 431, big.text.slice(0, 200));
  assert.match(JSON.parse(bodyOf(big.text)).error.message, /headers are larger than the limit of 16384 bytes/);
});

test('chunked bodies obey --max-body-bytes while being read', async () => {
  const rss = () => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${srv.pid}/status`, 'utf8'))[1]);
  const rss0 = rss();
  const head = 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n';
  const piece = Buffer.alloc(16384, 'a');
  const frame = Buffer.concat([Buffer.from(piece.length.toString(16) + '\r\n'), piece, Buffer.from('\r\n')]);
  // 8 MB of chunks and never the final empty chunk: only a server that checks the limit while
  // reading can answer (one that reads the whole body first waits for the end forever).
  const r = await new Promise((resolve) => {
    const sock = net.connect(srv.port, '127.0.0.1');
    const got = [];
    const finish = () => { clearTimeout(timer); sock.destroy(); resolve(Buffer.concat(got).toString()); };
    const timer = setTimeout(finish, 5000);
    sock.on('data', (d) => { got.push(d); if (Buffer.concat(got).includes('\r\n\r\n{')) setTimeout(finish, 100); });
    sock.on('close', finish);
    sock.on('error', () => {});
    sock.on('connect', () => {
      sock.write(head);
      for (let i = 0; i < 512; i++) sock.write(frame);
    });
  });
  assert.equal(statusOf(r), 413, r.slice(0, 200));
  assert.match(JSON.parse(bodyOf(r)).error.message, new RegExp(`larger than the limit of ${LIMIT} bytes`));
  assert.ok(rss() - rss0 < 32 * 1024, `RSS grew by ${rss() - rss0} kB`);
});

test('pipelined requests are answered in order', async () => {
  const body = JSON.stringify(chatBody('x', { max_tokens: 2 }));
  const reqs = [
    'GET /health HTTP/1.1\r\nHost: x\r\n\r\n',
    `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    'GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n',
    'GET /v1/nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
  ];
  const r = await raw([reqs.join('')], { timeoutMs: 15000 });
  const statuses = [...r.text.matchAll(/HTTP\/1\.1 (\d+) /g)].map((m) => Number(m[1]));
  assert.deepEqual(statuses, [200, 200, 200, 404], r.text.slice(0, 500));
  const iHealth = r.text.indexOf('"queue_length"'), iChat = r.text.indexOf('"chat.completion"'),
    iModels = r.text.indexOf('"object":"list"'), iNo = r.text.indexOf('no route');
  assert.ok(iHealth < iChat && iChat < iModels && iModels < iNo, 'bodies in request order');
  assert.ok(r.closedByServer);
});

test('slow and idle connection floods do not stop other requests or a stream', async () => {
  // An ongoing stream, started before the flood.
  const streamed = request(srv, 'POST', '/v1/chat/completions',
    chatBody('And it came to pass', { stream: true, max_tokens: 300, seed: 1 }));
  await sleep(100);
  // 64 connections trickling a header byte every 100 ms, and 200 that send nothing.
  const slowHead = 'GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ' + 'z'.repeat(200);
  const slow = Array.from({ length: 64 }, () => raw([...slowHead], { timeoutMs: HEADER_TIMEOUT_MS + 6000, gapMs: 100 }));
  const idle = Array.from({ length: 200 }, () => raw([], { timeoutMs: HEADER_TIMEOUT_MS + 6000 }));
  await sleep(300);
  for (let i = 0; i < 5; i++) {
    for (const p of ['/health', '/v1/models']) {
      const t0 = Date.now();
      const r = await request(srv, 'GET', p);
      assert.equal(r.status, 200);
      assert.ok(Date.now() - t0 < 3000, `${p} took ${Date.now() - t0} ms during the flood`);
    }
    await sleep(100);
  }
  // The flood is cut off at the header deadline (no slow connection lives on).
  const results = await Promise.all([...slow, ...idle]);
  for (const r of results) {
    assert.ok(r.closedByServer, 'closed by the server');
    assert.ok(r.ms < HEADER_TIMEOUT_MS + 4000, `closed after ${r.ms} ms`);
  }
  const s = await streamed;
  assert.equal(s.status, 200);
  const { events } = parseSse(s.body);
  assert.equal(events.at(-1).data, '[DONE]');
  assert.ok(events.length > 10, `${events.length} events`);
});

test('a generation request with a body that stops arriving is dropped at the body deadline', async () => {
  const head = 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"mess';
  const r = await raw([head], { timeoutMs: HEADER_TIMEOUT_MS + 6000 });
  assert.ok(r.closedByServer && r.ms < HEADER_TIMEOUT_MS + 4000, `closed after ${r.ms} ms`);
});

test('too many generation requests at once → 503 with Retry-After', async () => {
  const s2 = await startServer(['--http-threads', '1', '--debug-prefill-delay-ms', '20']);
  try {
    const a = request(s2, 'POST', '/v1/chat/completions', chatBody('For God so loved the world, that he gave', { max_tokens: 1 }));
    await sleep(150);
    const b = await request(s2, 'POST', '/v1/chat/completions', chatBody('y', { max_tokens: 1 }));
    assert.equal(b.status, 503, b.body);
    assert.equal(b.headers['retry-after'], '1');
    assert.match(b.json.error.message, /retry later/);
    assert.equal((await a).status, 200);
  } finally {
    assert.equal(await s2.stop(), 0);
  }
});
