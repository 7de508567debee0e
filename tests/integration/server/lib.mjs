// Helpers for the ds4-server integration tests: start a server on a free loopback port, raw
// HTTP requests (no connection reuse), SSE parsing, /metrics parsing, /proc counters.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';

export const SERVER_BIN = process.env.DS4_SERVER_BIN;
export const MODEL = process.env.DS4_MODEL;
export const NPM_DIR = process.env.DS4_NPM_DIR;
export const HERE = path.dirname(new URL(import.meta.url).pathname);
if (!SERVER_BIN || !MODEL) throw new Error('set DS4_SERVER_BIN and DS4_MODEL (and DS4_NPM_DIR for the SDK tests)');

export async function importSdk(name) {
  const pkg = JSON.parse(fs.readFileSync(path.join(NPM_DIR, name, 'package.json'), 'utf8'));
  const entry = pkg.exports?.['.']?.import?.default ?? pkg.exports?.['.']?.import ?? pkg.module ?? 'index.mjs';
  return (await import(path.join(NPM_DIR, name, typeof entry === 'string' ? entry : 'index.mjs'))).default;
}

// `ctx`: context size (the coding-agent clients send prompts of several thousand tokens).
export async function startServer(extraArgs = [], { ctx = 2048 } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds4srv-'));
  const portFile = path.join(dir, 'port');
  const args = ['-m', MODEL, '--port', '0', '--port-file', portFile, '-c', String(ctx), '-t', '2', ...extraArgs];
  const proc = spawn(SERVER_BIN, args, { stdio: ['ignore', 'inherit', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (d) => { stderr += d; });
  const deadline = Date.now() + 30000;
  while (!fs.existsSync(portFile)) {
    if (proc.exitCode !== null) throw new Error(`ds4-server exited (${proc.exitCode}): ${stderr}`);
    if (Date.now() > deadline) throw new Error(`ds4-server did not start: ${stderr}`);
    await sleep(20);
  }
  const port = Number(fs.readFileSync(portFile, 'utf8').trim());
  return {
    port,
    pid: proc.pid,
    url: `http://127.0.0.1:${port}`,
    stderr: () => stderr,
    alive: () => proc.exitCode === null && proc.signalCode === null,
    async stop() {
      if (proc.exitCode !== null || proc.signalCode !== null) return proc.exitCode;
      const done = new Promise((r) => proc.once('exit', (code, sig) => r(code ?? sig)));
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), 10000);
      const code = await done;
      clearTimeout(t);
      if (code !== 0) process.stderr.write(`ds4-server exited with ${code}; its stderr:\n${stderr}\n`);
      fs.rmSync(dir, { recursive: true, force: true });
      return code;
    },
  };
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// One request on a fresh connection. Resolves {status, headers, body, json}.
export function request(srv, method, p, body, headers = {}) {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body);
    const req = http.request(
      { host: '127.0.0.1', port: srv.port, method, path: p, agent: false,
        headers: { 'content-type': 'application/json', connection: 'close',
          ...(data !== undefined ? { 'content-length': Buffer.byteLength(data) } : {}), ...headers } },
      (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let json;
          try { json = JSON.parse(text); } catch { json = undefined; }
          resolve({ status: res.statusCode, headers: res.headers, body: text, json });
        });
        res.on('error', reject);
      });
    req.on('error', reject);
    if (data !== undefined) req.write(data);
    req.end();
  });
}

// Parses SSE text into [{event, data}] (data JSON-parsed when possible) and counts comments.
export function parseSse(text) {
  const events = [];
  let comments = 0;
  for (const block of text.split('\n\n')) {
    if (!block.trim()) continue;
    let event = null, data = [];
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) comments++;
      else if (line.startsWith('event: ')) event = line.slice(7);
      else if (line.startsWith('data: ')) data.push(line.slice(6));
    }
    if (!data.length && !event) continue;
    const raw = data.join('\n');
    let parsed = raw;
    try { parsed = JSON.parse(raw); } catch { /* [DONE] */ }
    events.push({ event, data: parsed });
  }
  return { events, comments };
}

export async function metrics(srv) {
  const r = await request(srv, 'GET', '/metrics');
  const out = {};
  for (const line of r.body.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    out[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return out;
}

export function fdCount(pid) { return fs.readdirSync(`/proc/${pid}/fd`).length; }
export function threadCount(pid) { return fs.readdirSync(`/proc/${pid}/task`).length; }

export const chatBody = (content, extra = {}) => ({
  model: 'deepseek-v4-flash',
  messages: [{ role: 'user', content }],
  max_tokens: 8,
  ...extra,
});
