// Disk KV cache and several live sessions (issue 15), end to end on the demo model: restart
// after SIGINT, three conversations over two sessions, a short unrelated request between two
// turns, tool-call replay surviving a restart, damaged / foreign files, a full disk, the
// budget, two servers on one directory, kill -9.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';

import { HERE, MODEL, SERVER_BIN, metrics, request, sleep } from './lib.mjs';

const CHAT_MODEL_MAKER = process.env.DS4_MAKE_CHAT_MODEL;

// Like lib.mjs's startServer, but the cache directory outlives the server, the stop signal is
// chosen, and a shell prefix (ulimit) can wrap the binary.
async function start(kvDir, extra = [], { model = MODEL, shell = '' } = {}) {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ds4kv-'));
  const portFile = path.join(tmp, 'port');
  const args = ['-m', model, '--port', '0', '--port-file', portFile, '-c', '2048', '-t', '2',
    ...(kvDir ? ['--kv-disk-dir', kvDir] : []), ...extra];
  const proc = shell
    ? spawn('/bin/sh', ['-c', `${shell}; exec "$0" "$@"`, SERVER_BIN, ...args], { stdio: ['ignore', 'inherit', 'pipe'] })
    : spawn(SERVER_BIN, args, { stdio: ['ignore', 'inherit', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (d) => { stderr += d; });
  const exited = new Promise((r) => proc.once('exit', (code, sig) => r(code ?? sig)));
  const deadline = Date.now() + 30000;
  while (!fs.existsSync(portFile)) {
    if (proc.exitCode !== null) throw new Error(`ds4-server exited (${proc.exitCode}): ${stderr}`);
    if (Date.now() > deadline) throw new Error(`ds4-server did not start: ${stderr}`);
    await sleep(20);
  }
  const port = Number(fs.readFileSync(portFile, 'utf8').trim());
  return {
    port, pid: proc.pid, stderr: () => stderr,
    async stop(signal = 'SIGINT') {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      const t = setTimeout(() => proc.kill('SIGKILL'), 20000);
      const code = await exited;
      clearTimeout(t);
      fs.rmSync(tmp, { recursive: true, force: true });
      if (code !== 0 && signal !== 'SIGKILL') process.stderr.write(`ds4-server exited with ${code}:\n${stderr}\n`);
      return code;
    },
  };
}

const kvDir = (tag) => fs.mkdtempSync(path.join(os.tmpdir(), `ds4kvdir-${tag}-`));
const kvFiles = (dir) => fs.readdirSync(dir).filter((n) => n.endsWith('.kv')).sort();
const tmpFiles = (dir) => fs.readdirSync(dir).filter((n) => n.endsWith('.tmp'));

// Long, distinct user texts (the demo model was trained on the KJV; any text tokenizes).
const verse = (seed, words) => {
  const vocab = ['and', 'the', 'LORD', 'said', 'unto', 'Moses', 'behold', 'land', 'of', 'Egypt', 'children',
    'Israel', 'went', 'up', 'out', 'day', 'night', 'water', 'bread', 'house', 'king', 'David', 'city', 'gate'];
  let x = seed * 2654435761 >>> 0;
  const out = [];
  for (let i = 0; i < words; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    out.push(vocab[x % vocab.length]);
  }
  return out.join(' ') + '.';
};

const chat = (srv, messages, extra = {}) =>
  request(srv, 'POST', '/v1/chat/completions', { model: 'deepseek-v4-flash', messages, max_tokens: 8, temperature: 0,
    thinking: { type: 'disabled' }, ...extra });

const turn = async (srv, messages) => {
  const r = await chat(srv, messages);
  assert.equal(r.status, 200, r.body);
  return { usage: r.json.usage, reply: r.json.choices[0].message.content };
};
const cached = (u) => u.prompt_tokens_details.cached_tokens;

test('restart: SIGINT saves the conversation, the next start prefills only the tail', async () => {
  const dir = kvDir('restart');
  const sys = { role: 'system', content: 'Thou art a scribe.' };
  const u1 = { role: 'user', content: verse(1, 620) };
  // No cold saves: the file the next start uses can only be the one written at shutdown.
  let srv = await start(dir, ['--kv-cache-cold-max-tokens', '0']);
  const t1 = await turn(srv, [sys, u1]);
  const p1 = t1.usage.prompt_tokens;
  assert.ok(p1 >= 560, `first prompt ${p1} tokens`);
  assert.equal(await srv.stop('SIGINT'), 0);
  assert.match(srv.stderr(), /saved 1 session\(s\) at shutdown/);
  assert.ok(kvFiles(dir).length >= 1);

  srv = await start(dir);
  const m0 = await metrics(srv);
  const msgs = [sys, u1, { role: 'assistant', content: t1.reply }, { role: 'user', content: 'And the evening and the morning.' }];
  const t2 = await turn(srv, msgs);
  const m1 = await metrics(srv);
  const c = cached(t2.usage);
  assert.ok(c >= 512, `cached ${c}`);
  assert.ok(c >= p1 - 32, `cached ${c} vs first prompt ${p1} (shutdown point: prompt - 32)`);
  const prefilled = m1.ds4_prompt_prefilled_tokens_total - m0.ds4_prompt_prefilled_tokens_total;
  assert.equal(prefilled, t2.usage.prompt_tokens - c);
  assert.ok(prefilled <= t2.usage.prompt_tokens - p1 + 32, `prefilled ${prefilled}`);
  assert.equal(m1.ds4_kv_disk_hits_total, 1);
  assert.equal(m1.ds4_kv_disk_tokens_total, c);
  assert.ok(m1.ds4_kv_disk_bytes_read_total > 0);
  // Anthropic reports the same reuse as cache_read_input_tokens.
  const an = (content) => request(srv, 'POST', '/v1/messages', { model: 'deepseek-v4-flash', max_tokens: 4,
    system: 'Thou art a scribe.', messages: [{ role: 'user', content }], thinking: { type: 'disabled' } });
  const long = verse(2, 620);
  const a1 = await an(long);
  assert.equal(a1.status, 200, a1.body);
  assert.equal(await srv.stop('SIGTERM'), 0);
  srv = await start(dir);
  const a2 = await an(long);
  assert.equal(a2.status, 200, a2.body);
  assert.ok(a2.json.usage.cache_read_input_tokens >= 512, JSON.stringify(a2.json.usage));
  assert.equal(a2.json.usage.input_tokens + a2.json.usage.cache_read_input_tokens, a1.json.usage.input_tokens);
  assert.equal(await srv.stop(), 0);
  fs.rmSync(dir, { recursive: true, force: true });
});

test('three conversations round-robin over --max-sessions 2: never a full prefill after the first turn', async () => {
  const dir = kvDir('rr');
  // No cold saves: what the disk serves comes from evict saves.
  const srv = await start(dir, ['--max-sessions', '2', '--kv-cache-min-tokens', '64', '--kv-cache-cold-max-tokens', '0']);
  try {
    const conv = [0, 1, 2].map((c) => [{ role: 'user', content: verse(10 + c, 120) }]);
    const last = [0, 0, 0];
    let fromDisk = 0;
    for (let round = 0; round < 3; round++) {
      for (let c = 0; c < 3; c++) {
        const m0 = await metrics(srv);
        const t = await turn(srv, conv[c]);
        const m1 = await metrics(srv);
        if (round > 0) {
          assert.ok(cached(t.usage) >= last[c] - 32, `round ${round} conversation ${c}: cached ${cached(t.usage)} of ${t.usage.prompt_tokens}, previous prompt ${last[c]}`);
        } else {
          assert.ok(cached(t.usage) <= 2, `first turn cached ${cached(t.usage)}`);
        }
        fromDisk += m1.ds4_kv_disk_hits_total - m0.ds4_kv_disk_hits_total;
        last[c] = t.usage.prompt_tokens;
        conv[c].push({ role: 'assistant', content: t.reply }, { role: 'user', content: verse(100 + round * 3 + c, 25) });
      }
    }
    const m = await metrics(srv);
    assert.ok(fromDisk >= 1, `disk hits ${fromDisk}`);
    assert.equal(m.ds4_live_sessions, 2);
    assert.equal(m.ds4_max_sessions, 2);
    assert.ok(m.ds4_session_evictions_total >= 1);
    assert.ok(m['ds4_kv_disk_saves_total{reason="evict"}'] >= 1);
  } finally {
    assert.equal(await srv.stop(), 0);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

// opencode sends a short title-generation request, with its own system prompt, between two
// turns of the long conversation (issue 11): the long one must keep its prefix in RAM.
test('a title request between two turns does not cost the long conversation its prefix', async () => {
  const srv = await start(null, ['--max-sessions', '2']);
  try {
    const sys = { role: 'system', content: 'You are a coding agent.' };
    const u1 = { role: 'user', content: verse(20, 300) };
    const t1 = await turn(srv, [sys, u1]);
    const title = await turn(srv, [{ role: 'system', content: 'Generate a short title.' }, { role: 'user', content: 'fix the build' }]);
    assert.ok(cached(title.usage) <= 2, `title request cached ${cached(title.usage)}`);
    const t2 = await turn(srv, [sys, u1, { role: 'assistant', content: t1.reply }, { role: 'user', content: 'go on' }]);
    assert.ok(cached(t2.usage) >= t1.usage.prompt_tokens + t1.usage.completion_tokens - 4,
      `cached ${cached(t2.usage)}, first turn ${t1.usage.prompt_tokens} + ${t1.usage.completion_tokens}`);
  } finally {
    assert.equal(await srv.stop(), 0);
  }
});

test('exact tool-call replay survives a restart (tool map saved in the cache files)', async () => {
  const dir = kvDir('tools');
  const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: {} } } }];
  const script = ['--debug-script', path.join(HERE, 'script.json'), '--kv-cache-min-tokens', '64'];
  const user = { role: 'user', content: `TOOLTEST: weather? ${verse(30, 100)}` };
  let srv = await start(dir, script);
  const r1 = await chat(srv, [user], { tools, max_tokens: 200 });
  assert.equal(r1.status, 200, r1.body);
  const m = r1.json.choices[0].message;
  const tc = m.tool_calls[0];
  const args = JSON.parse(tc.function.arguments);
  const back = { ...tc, function: { name: tc.function.name, arguments: JSON.stringify({ days: args.days, city: args.city }) } };
  const msgs2 = [user, { role: 'assistant', content: m.content, reasoning_content: m.reasoning_content, tool_calls: [back] },
    { role: 'tool', tool_call_id: tc.id, content: 'sunny in Paris' }];
  const r2 = await chat(srv, msgs2, { tools, max_tokens: 200 });
  assert.equal(r2.status, 200, r2.body);
  assert.equal(await srv.stop('SIGINT'), 0);
  const first = srv.stderr();

  srv = await start(dir, script);
  try {
    const msgs3 = [...msgs2, { role: 'assistant', content: r2.json.choices[0].message.content }, { role: 'user', content: 'thanks' }];
    const r3 = await chat(srv, msgs3, { tools, max_tokens: 200 });
    assert.equal(r3.status, 200, r3.body);
    // The second prompt (which holds the replayed block) came back from disk; with canonical
    // re-rendering the prompt would differ inside the block, far before its end.
    assert.ok(cached(r3.json.usage) >= r2.json.usage.prompt_tokens - 32,
      `cached ${cached(r3.json.usage)}, second prompt ${r2.json.usage.prompt_tokens}: ${first} ${srv.stderr()}`);
    assert.match(srv.stderr(), /\(2 files, [1-9][0-9]* tool-call ids/);
  } finally {
    assert.equal(await srv.stop(), 0);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('truncated, corrupt and other-model files are removed with a warning; serving continues', async (t) => {
  if (!CHAT_MODEL_MAKER) return t.skip('DS4_MAKE_CHAT_MODEL not set');
  const dir = kvDir('bad');
  const small = ['--kv-cache-min-tokens', '64', '--max-sessions', '1'];
  // A file of another model (the chat test model) in the directory.
  const other = path.join(os.tmpdir(), `ds4kv-other-${process.pid}.gguf`);
  assert.equal(spawnSync(CHAT_MODEL_MAKER, [other]).status, 0);
  let srv = await start(dir, small, { model: other });
  await turn(srv, [{ role: 'user', content: 'x'.repeat(200) }]);
  assert.equal(await srv.stop(), 0);
  fs.rmSync(other, { force: true });
  const foreign = kvFiles(dir);
  assert.equal(foreign.length, 1);
  // The demo model's server removes it, then writes one file per conversation (cold point =
  // evict point = prompt - 32 with the default alignment: one file each).
  srv = await start(dir, small);
  assert.match(srv.stderr(), /written for model [0-9a-f]{16}, this is model [0-9a-f]{16}/);
  assert.ok(!fs.existsSync(path.join(dir, foreign[0])));
  const convs = [0, 1, 2].map((c) => [{ role: 'user', content: verse(40 + c, 100) }]);
  for (const cv of convs) await turn(srv, cv);
  assert.equal(await srv.stop(), 0);
  const ours = kvFiles(dir);
  assert.equal(ours.length, 3, ours.join(' '));
  const cut = path.join(dir, ours[0]);
  fs.truncateSync(cut, fs.statSync(cut).size - 1000);
  const flip = path.join(dir, ours[1]);
  const b = fs.readFileSync(flip);
  b[b.length - 5000] ^= 0x55;  // inside the payload: only the body checksum sees it
  fs.writeFileSync(flip, b);
  srv = await start(dir, small);
  try {
    assert.match(srv.stderr(), /truncated/);
    for (const cv of convs) await turn(srv, cv);  // every request is answered
    const m = await metrics(srv);
    assert.match(srv.stderr(), /body checksum mismatch/);
    assert.equal(m.ds4_kv_disk_removed_total, 2);
    assert.equal(m.ds4_kv_disk_hits_total, 1);  // only the intact file was used
    assert.equal(m.ds4_kv_disk_misses_total, 2);
  } finally {
    assert.equal(await srv.stop(), 0);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a full disk (file-size limit) warns, writes nothing, and serving continues', async () => {
  const dir = kvDir('full');
  const srv = await start(dir, ['--kv-cache-min-tokens', '64'], { shell: 'ulimit -f 64' });  // 64 KiB
  try {
    const r1 = await turn(srv, [{ role: 'user', content: verse(50, 120) }]);
    const r2 = await turn(srv, [{ role: 'user', content: verse(51, 120) }]);
    assert.ok(r1.usage.prompt_tokens > 64 && r2.usage.prompt_tokens > 64);
    const m = await metrics(srv);
    assert.ok(m.ds4_kv_disk_save_failures_total >= 1, JSON.stringify(m));
    assert.match(srv.stderr(), /not saved .*File too large/);
    assert.deepEqual(kvFiles(dir), []);
    assert.deepEqual(tmpFiles(dir), []);
  } finally {
    assert.equal(await srv.stop(), 0);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('the budget keeps the directory under --kv-disk-space-mb', async () => {
  const dir = kvDir('budget');
  // One file first, to learn the size of a state.
  let srv = await start(dir, ['--kv-cache-min-tokens', '64']);
  await turn(srv, [{ role: 'user', content: verse(60, 120) }]);
  assert.equal(await srv.stop(), 0);
  const one = fs.statSync(path.join(dir, kvFiles(dir)[0])).size;
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(dir);
  const mb = Math.ceil((2.5 * one) / (1 << 20));
  srv = await start(dir, ['--kv-cache-min-tokens', '64', '--kv-cache-budget', String(mb), '--max-sessions', '1']);
  try {
    for (let c = 0; c < 6; c++) await turn(srv, [{ role: 'user', content: verse(61 + c, 120) }]);
    const m = await metrics(srv);
    const total = kvFiles(dir).reduce((s, n) => s + fs.statSync(path.join(dir, n)).size, 0);
    assert.ok(total <= mb * (1 << 20), `${total} bytes on disk, budget ${mb} MB`);
    assert.ok(m.ds4_kv_disk_evictions_total >= 1, JSON.stringify(m));
    assert.equal(m.ds4_kv_disk_bytes, total);
  } finally {
    assert.equal(await srv.stop(), 0);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('two servers on one directory: the second warns and serves without the disk cache', async () => {
  const dir = kvDir('two');
  const a = await start(dir, ['--kv-cache-min-tokens', '64']);
  const b = await start(dir, ['--kv-cache-min-tokens', '64']);
  try {
    assert.match(b.stderr(), new RegExp(`in use by another process \\(pid ${a.pid}`));
    assert.match(b.stderr(), /serving without the disk KV cache/);
    const mb = await metrics(b);
    assert.equal(mb.ds4_kv_disk_enabled, 0);
    assert.equal(mb.ds4_kv_disk_unavailable, 1);
    await turn(b, [{ role: 'user', content: verse(70, 120) }]);
    await turn(a, [{ role: 'user', content: verse(71, 120) }]);
    assert.equal((await metrics(a)).ds4_kv_disk_enabled, 1);
    assert.ok(kvFiles(dir).length >= 1);
  } finally {
    assert.equal(await b.stop(), 0);
    assert.equal(await a.stop(), 0);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('kill -9: the next start uses the files already written and the lock is free again', async () => {
  const dir = kvDir('kill');
  const conv = [{ role: 'user', content: verse(80, 150) }];
  let srv = await start(dir, ['--kv-cache-min-tokens', '64']);
  const t1 = await turn(srv, conv);  // cold save: prompt - 32, aligned down when >= 64
  await srv.stop('SIGKILL');
  assert.ok(kvFiles(dir).length >= 1);
  srv = await start(dir, ['--kv-cache-min-tokens', '64']);
  try {
    assert.doesNotMatch(srv.stderr(), /in use by another process/);
    const t2 = await turn(srv, conv);
    assert.ok(cached(t2.usage) >= 64, `cached ${cached(t2.usage)} of ${t1.usage.prompt_tokens}`);
  } finally {
    assert.equal(await srv.stop(), 0);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
