// ds4-server's chat page in a real browser: Debian's headless Chromium driven by the pinned
// playwright-core (third_party/webui), against ds4-server on the demo model with a debug
// script (tests/browser/script.json) for the answers a tiny model never writes by itself.
// Screenshots go to DS4_ARTIFACT_DIR (build/test-artifacts/webui under ctest).
//
// Run by tests/browser/run.sh, which skips (exit 77) when chromium is absent.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import zlib from 'node:zlib';
import { after, before, test } from 'node:test';

import { metrics, request, startServer } from '../integration/server/lib.mjs';

const HERE = path.dirname(new URL(import.meta.url).pathname);
const MODULES = process.env.DS4_WEBUI_MODULES;
const CHROMIUM = process.env.DS4_CHROMIUM || '/usr/bin/chromium';
const ARTIFACTS = process.env.DS4_ARTIFACT_DIR || path.join(process.cwd(), 'webui-artifacts');
if (!MODULES) throw new Error('set DS4_WEBUI_MODULES (third_party/webui/node_modules)');
const { chromium } = await import(path.join(MODULES, 'playwright-core', 'index.mjs'));

// What the page shows for the scripted answers is checked against script.json.
const SCRIPT = JSON.parse(fs.readFileSync(path.join(HERE, 'script.json'), 'utf8'));
const scripted = (when) => SCRIPT.rules.find((r) => r.when === when).text;
const XSS_CODE = 'print("<b>not bold</b>")';

let srv, browser, ctx, page;
const consoleErrors = [];
const foreignRequests = [];

// GET with the given headers; resolves {status, headers, bytes} (the body as sent, undecoded).
function rawGet(s, p, headers) {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port: s.port, path: p, headers, agent: false }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, bytes: Buffer.concat(chunks) }));
    }).on('error', reject);
  });
}

async function shot(p, name) {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  await p.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: false });
}

function watch(p, origin) {
  p.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
  p.on('pageerror', (e) => consoleErrors.push(`pageerror: ${e.message}`));
  // Requests to other origins, with how they ended ('' for a response).
  const foreign = (r) => !r.url().startsWith(origin) && !r.url().startsWith('data:');
  p.on('requestfailed', (r) => { if (foreign(r)) foreignRequests.push(`${r.url()} ${r.failure().errorText}`); });
  p.on('requestfinished', (r) => { if (foreign(r)) foreignRequests.push(`${r.url()} answered`); });
}

async function newPage(url, options = {}) {
  const c = await browser.newContext({ viewport: { width: 1100, height: 760 }, colorScheme: 'light', ...options });
  await c.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: url });
  const p = await c.newPage();
  watch(p, url);
  p.on('dialog', (d) => d.accept());
  await p.goto(url + '/');
  return { c, p };
}

const lastAnswer = (p) => p.locator('#messages .msg.assistant').last();
// An answer's rendered text (markdown-it ends each block with a newline).
const answerText = async (a) => (await a.locator('.body').textContent()).trim();
const idle = (p) => p.waitForFunction(() => document.getElementById('stop').hidden && !document.getElementById('send').disabled);

async function setSetting(p, id, value) {
  if (await p.locator('#settings').isHidden()) await p.click('#toggle-settings');
  const tag = await p.locator(`#${id}`).evaluate((e) => e.tagName);
  if (tag === 'SELECT') await p.selectOption(`#${id}`, value);
  else {
    await p.fill(`#${id}`, String(value));
    await p.locator(`#${id}`).dispatchEvent('change');
  }
}

// Sends `text` with the keyboard and waits until the answer is complete.
async function sendAndWait(p, text) {
  const n = await p.locator('#messages .msg.assistant').count();
  await p.fill('#input', text);
  await p.press('#input', 'Enter');
  await p.waitForFunction((k) => document.querySelectorAll('#messages .msg.assistant').length === k + 1, n);
  await idle(p);
  return lastAnswer(p);
}

// "prompt P tokens (C cached) · [prefill X t/s · ]N tokens[ (R thinking)] · [Y t/s · ]finish"
function parseStats(s) {
  const m = /^prompt (\d+) tokens \((\d+) cached\)(?: · prefill ([\d.]+) t\/s)? · (\d+) tokens(?: \((\d+) thinking\))?(?: · ([\d.]+) t\/s)? · (.+)$/.exec(s);
  assert.ok(m, `stats line not understood: ${JSON.stringify(s)}`);
  return { prompt: +m[1], cached: +m[2], prefill: m[3] ? +m[3] : 0, completion: +m[4], thinking: m[5] ? +m[5] : 0,
    gen: m[6] ? +m[6] : 0, finish: m[7] };
}

before(async () => {
  srv = await startServer(['--debug-script', path.join(HERE, 'script.json')]);
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    // As root Chromium needs --no-sandbox; the network flags keep it from calling out.
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic'],
  });
  ({ c: ctx, p: page } = await newPage(srv.url));
});

after(async () => {
  await browser?.close();
  await srv?.stop();
});

test('the page comes from the binary with its security headers, and shows the model', async () => {
  const r = await request(srv, 'GET', '/');
  assert.equal(r.status, 200);
  assert.match(r.headers['content-type'], /^text\/html/);
  assert.match(r.headers['content-security-policy'], /default-src 'none'/);
  assert.match(r.headers['content-security-policy'], /script-src 'self'/);
  assert.equal(r.headers['x-content-type-options'], 'nosniff');
  const js = await request(srv, 'GET', '/webui/app.js');
  assert.equal(js.status, 200);
  assert.match(js.headers['content-type'], /^text\/javascript/);
  const again = await request(srv, 'GET', '/webui/app.js', undefined, { 'if-none-match': js.headers.etag });
  assert.equal(again.status, 304);
  assert.equal(again.body, '');
  assert.equal((await request(srv, 'GET', '/webui/nothing.js')).status, 404);
  // gzip for clients that accept it, the same bytes once decompressed.
  for (const f of ['/', '/webui/app.js', '/webui/app.css']) {
    const plain = await rawGet(srv, f, {});
    const gz = await rawGet(srv, f, { 'accept-encoding': 'gzip, deflate, br' });
    assert.equal(plain.headers['content-encoding'], undefined);
    assert.equal(gz.headers['content-encoding'], 'gzip');
    assert.equal(gz.headers.vary, 'Accept-Encoding');
    assert.ok(zlib.gunzipSync(gz.bytes).equals(plain.bytes), `${f}: gzip body differs`);
  }

  await page.locator('#model-info', { hasText: 'tokens of context' }).waitFor();
  assert.equal(await page.textContent('#model-info'), 'ds4-demo · 2048 tokens of context');
  const options = await page.locator('#set-model option').allTextContents();
  assert.deepEqual(options, ['deepseek-v4-flash', 'deepseek-chat', 'deepseek-reasoner', 'ds4-demo']);
  assert.equal(await page.locator('#messages .empty').count(), 1);
  await shot(page, '01-empty');
});

test('a message streams in, the stop button shows while it does, and the stats line matches the server', async () => {
  await setSetting(page, 'set-thinking', 'off');
  await setSetting(page, 'set-max_tokens', 120);
  await page.evaluate(() => {
    window.__snaps = [];
    new MutationObserver(() => {
      const b = [...document.querySelectorAll('#messages .msg.assistant .body')].pop();
      window.__snaps.push({ len: b ? b.textContent.length : 0, busy: !document.getElementById('stop').hidden });
    }).observe(document.getElementById('messages'), { childList: true, subtree: true, characterData: true });
  });
  const m0 = await metrics(srv);
  // STREAMTEST: a scripted answer paced at 25 ms a token, so pieces arrive over about a second.
  const answer = await sendAndWait(page, 'STREAMTEST hello');
  const m1 = await metrics(srv);
  const snaps = await page.evaluate(() => window.__snaps);
  const whileBusy = new Set(snaps.filter((s) => s.busy && s.len > 0).map((s) => s.len));
  assert.equal(await answerText(answer), scripted('STREAMTEST'));
  const final = scripted('STREAMTEST').length;
  assert.ok(whileBusy.size >= 5, `text should arrive in pieces while the stop button shows; saw lengths ${[...whileBusy]}`);
  assert.ok(Math.min(...whileBusy) < final / 2, 'the first pieces should be much shorter than the answer');

  const stats = parseStats(await answer.locator('.stats').textContent());
  assert.equal(stats.prompt, m1.ds4_prompt_tokens_total - m0.ds4_prompt_tokens_total);
  assert.equal(stats.cached, m1.ds4_prompt_cached_tokens_total - m0.ds4_prompt_cached_tokens_total);
  assert.equal(stats.completion, m1.ds4_generated_tokens_total - m0.ds4_generated_tokens_total);
  assert.ok(stats.prefill > 0, 'a fresh prompt was prefilled: its rate should show');
  assert.ok(stats.gen > 0);
  assert.equal(stats.finish, 'stop');
  assert.equal(await page.locator('#conv-list li .title').first().textContent(), 'STREAMTEST hello');
  await shot(page, '02-answer');
});

test('regenerate replaces the answer and reuses the cached prompt', async () => {
  const before = await page.locator('#messages .msg').count();
  await lastAnswer(page).locator('button.regenerate').click();
  await page.waitForFunction(() => !document.getElementById('stop').hidden || document.querySelector('#messages .msg.assistant .stats'));
  await idle(page);
  assert.equal(await page.locator('#messages .msg').count(), before, 'regenerate should replace, not add');
  const stats = parseStats(await lastAnswer(page).locator('.stats').textContent());
  // Same conversation, same prompt: the live session holds it, so (almost) all of it is reused.
  assert.ok(stats.cached > 0 && stats.cached >= stats.prompt - 1, `cached ${stats.cached} of ${stats.prompt}`);
});

test('Shift+Enter makes a new line, Enter sends; thinking shows collapsed apart from the answer', async () => {
  await setSetting(page, 'set-thinking', 'high');
  const n = await page.locator('#messages .msg.user').count();
  await page.fill('#input', 'REPLYTEST line one');
  await page.press('#input', 'Shift+Enter');
  await page.type('#input', 'line two');
  assert.equal(await page.inputValue('#input'), 'REPLYTEST line one\nline two');
  assert.equal(await page.locator('#messages .msg.user').count(), n, 'Shift+Enter must not send');
  await page.press('#input', 'Enter');
  await page.waitForFunction((k) => document.querySelectorAll('#messages .msg.user').length === k + 1, n);
  await idle(page);
  assert.equal(await page.locator('#messages .msg.user .body').last().textContent(), 'REPLYTEST line one\nline two');
  const a = lastAnswer(page);
  const det = a.locator('details.thinking');
  assert.equal(await det.count(), 1);
  assert.equal(await det.evaluate((d) => d.open), false, 'thinking is collapsed once the answer is there');
  assert.equal(await det.locator('.reasoning').textContent(), 'Thinking about <i>it</i>.');
  assert.equal(await det.locator('i').count(), 0, 'reasoning is text, never HTML');
  assert.equal(await answerText(a), 'The answer is 42.');
  assert.equal(await a.locator('.body strong').textContent(), '42');
  const stats = parseStats(await a.locator('.stats').textContent());
  assert.ok(stats.thinking > 0, 'reasoning tokens are counted');
  await det.locator('summary').click();
  assert.equal(await det.evaluate((d) => d.open), true);
  await shot(page, '03-thinking');
});

test('edit and resend cuts the conversation there and answers the new text', async () => {
  // [STREAMTEST hello, answer, REPLYTEST line one/two, answer]: edit the second question.
  const users = page.locator('#messages .msg.user');
  assert.equal(await users.count(), 2);
  await users.nth(1).locator('button.edit').click();
  const ta = page.locator('#messages textarea.edit');
  await ta.fill('REPLYTEST edited');
  await ta.press('Enter');
  await page.waitForFunction(() => !document.querySelector('#messages textarea.edit'));
  await idle(page);
  assert.equal(await page.locator('#messages .msg').count(), 4);
  assert.deepEqual(await page.locator('#messages .msg.user .body').allTextContents(), ['STREAMTEST hello', 'REPLYTEST edited']);
  assert.equal(await answerText(lastAnswer(page)), 'The answer is 42.');
  // The first exchange is a prefix of the earlier prompt: the server reuses it.
  const stats = parseStats(await lastAnswer(page).locator('.stats').textContent());
  assert.ok(stats.cached > 10, `cached ${stats.cached} of ${stats.prompt}`);
});

test('a Markdown answer with <script> renders as Markdown and text, and nothing executes', async () => {
  await page.click('#new-chat');
  assert.equal(await page.locator('#conv-list li').count(), 2);
  await setSetting(page, 'set-thinking', 'off');
  await setSetting(page, 'set-max_tokens', '');  // the server's default: the whole scripted answer
  await page.evaluate(() => {
    window.__violations = [];
    document.addEventListener('securitypolicyviolation', (e) => window.__violations.push(`${e.violatedDirective} ${e.blockedURI}`));
  });
  const a = await sendAndWait(page, 'XSSTEST please');
  const body = a.locator('.body');
  assert.equal(parseStats(await a.locator('.stats').textContent()).finish, 'stop');
  assert.equal(await body.locator('h1').textContent(), 'Heading');
  assert.equal(await body.locator('strong').textContent(), 'bold');
  assert.equal(await body.locator('p > code').textContent(), 'inline code');
  const text = await body.textContent();
  assert.ok(text.includes('<script>window.__pwned = 1</script>'), 'the script tag is shown as text');
  assert.ok(text.includes('<img src=x onerror="window.__pwned = 2">'), 'the img tag is shown as text');
  assert.equal(await page.locator('#messages script, #messages iframe, #messages [onerror], #messages [onclick]').count(), 0);
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  // javascript: links are not links; the others open in a new tab without opener.
  assert.equal(await body.locator('a[href^="javascript"]').count(), 0);
  const safe = body.locator('a', { hasText: 'a safe one' });
  assert.equal(await safe.getAttribute('href'), 'https://example.invalid/page');
  assert.equal(await safe.getAttribute('rel'), 'noopener noreferrer');
  // The remote image is an <img>, but the Content-Security-Policy keeps the browser from loading it.
  assert.equal(await body.locator('img').getAttribute('src'), 'http://127.0.0.2:9/pixel.png');
  await page.waitForFunction(() => window.__violations.length > 0);
  // (One per render of the streamed answer.)
  const v = new Set(await page.evaluate(() => window.__violations));
  assert.deepEqual([...v], ['img-src http://127.0.0.2:9/pixel.png']);
  // The code block keeps its text (tags included) and its copy button copies exactly that.
  const code = body.locator('pre code');
  assert.equal((await code.textContent()).trim(), XSS_CODE);
  assert.equal(await code.getAttribute('class'), 'language-python');
  await body.locator('.code button.copy').click();
  await body.locator('.code button.copy', { hasText: 'Copied' }).waitFor();
  assert.equal((await page.evaluate(() => navigator.clipboard.readText())).trim(), XSS_CODE);
  await shot(page, '04-markdown');
});

test('stop ends a generation midway; the server cancels it and the page is ready again', async () => {
  // STOPTEST: a long scripted answer at 20 ms a token (several seconds in all).
  const m0 = await metrics(srv);
  await page.fill('#input', 'STOPTEST tell me a very long story');
  await page.press('#input', 'Enter');
  await page.waitForFunction(() => {
    const b = [...document.querySelectorAll('#messages .msg.assistant .body')].pop();
    return b && b.textContent.length > 40;
  });
  assert.equal(await page.isVisible('#stop'), true);
  await page.click('#stop');
  await idle(page);
  const a = lastAnswer(page);
  assert.equal(await a.locator('.stats').textContent(), 'stopped');
  const kept = await answerText(a);
  assert.ok(kept.length > 40, 'what arrived before the stop stays');
  assert.ok(scripted('STOPTEST').startsWith(kept), 'the part kept is the beginning of the answer');
  assert.ok(kept.length < scripted('STOPTEST').length / 2, `stopped midway: ${kept.length} of ${scripted('STOPTEST').length} characters`);
  // The server saw the disconnect and cancelled.
  let m1;
  for (let i = 0; i < 100; i++) {
    m1 = await metrics(srv);
    if (m1.ds4_cancelled_total > m0.ds4_cancelled_total) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(m1.ds4_cancelled_total, m0.ds4_cancelled_total + 1);
  assert.equal(m1.ds4_active_jobs, 0);
  await shot(page, '05-stopped');
  // Ready again: the next message is answered.
  await setSetting(page, 'set-max_tokens', 40);
  const next = await sendAndWait(page, 'And now a short one');
  parseStats(await next.locator('.stats').textContent());
});

test('an error from the server shows its message', async () => {
  const long = 'word '.repeat(3000);
  const a = await sendAndWait(page, long);
  const err = await a.locator('.error').textContent();
  assert.match(err, /^The server answered 400: /);
  assert.match(err, /too long/);
  await shot(page, '06-error');
});

test('conversations: switch, rename, delete, and all of it survives a reload', async () => {
  const list = page.locator('#conv-list li');
  assert.equal(await list.count(), 2);
  // The first conversation (now second in the list, newest first) comes back with its answer.
  await list.nth(1).locator('.title').click();
  assert.equal(await page.locator('#messages .msg.user .body').last().textContent(), 'REPLYTEST edited');
  assert.equal(await answerText(lastAnswer(page)), 'The answer is 42.');
  await list.nth(1).locator('button.rename').click();
  const input = page.locator('#conv-list li input');
  await input.fill('Renamed chat');
  await input.press('Enter');
  assert.equal(await list.nth(1).locator('.title').textContent(), 'Renamed chat');
  // A third conversation, deleted again (confirm() is accepted).
  await page.click('#new-chat');
  await setSetting(page, 'set-system', 'You are terse.');
  assert.equal(await list.count(), 3);
  await list.first().locator('button.delete').click();
  assert.equal(await list.count(), 2);

  await page.reload();
  await page.locator('#model-info', { hasText: 'tokens of context' }).waitFor();
  assert.deepEqual(await page.locator('#conv-list li .title').allTextContents(), ['XSSTEST please', 'Renamed chat']);
  const current = await page.locator('#conv-list li.current .title').textContent();
  await page.locator('#conv-list li .title', { hasText: 'Renamed chat' }).click();
  assert.equal(await page.locator('#messages .msg').count(), 4);
  assert.equal(await lastAnswer(page).locator('.body strong').textContent(), '42');
  await page.locator('#conv-list li .title', { hasText: 'XSSTEST please' }).click();
  assert.equal(await page.locator('#messages h1').textContent(), 'Heading');
  assert.ok(current.length > 0);
  // Settings persist too.
  assert.equal(await page.inputValue('#set-max_tokens'), '40');
  await shot(page, '07-reloaded');
});

test('light and dark themes; readable on a phone-sized screen', async () => {
  const bg = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  assert.equal(await bg(), 'rgb(255, 255, 255)');
  await page.click('#toggle-theme');  // system -> light
  await page.click('#toggle-theme');  // light -> dark
  assert.equal(await page.textContent('#toggle-theme'), 'Theme: dark');
  assert.equal(await bg(), 'rgb(22, 24, 28)');
  await shot(page, '08-dark');
  await page.click('#toggle-theme');  // back to the system's
  assert.equal(await bg(), 'rgb(255, 255, 255)');

  const { c, p } = await newPage(srv.url, { viewport: { width: 390, height: 844 }, colorScheme: 'dark', isMobile: true, hasTouch: true });
  await p.locator('#model-info', { hasText: 'tokens of context' }).waitFor();
  assert.equal(await p.evaluate(() => getComputedStyle(document.body).backgroundColor), 'rgb(22, 24, 28)');
  await setSetting(p, 'set-thinking', 'high');
  await p.click('#toggle-settings');
  await sendAndWait(p, 'REPLYTEST from a phone');
  assert.ok(await p.evaluate(() => document.documentElement.scrollWidth) <= 390, 'no horizontal scrolling');
  const side = p.locator('#sidebar');
  assert.ok((await side.boundingBox()).x + (await side.boundingBox()).width <= 0, 'the sidebar is hidden on a phone');
  await shot(p, '09-phone-dark');
  await p.click('#toggle-sidebar');
  await p.waitForFunction(() => document.getElementById('sidebar').getBoundingClientRect().x >= 0);
  await shot(p, '10-phone-sidebar');
  await c.close();
});

test('the page loaded nothing from elsewhere and logged no errors', () => {
  // Only the remote Markdown image was asked for, and the CSP blocked each attempt.
  assert.deepEqual([...new Set(foreignRequests)], ['http://127.0.0.2:9/pixel.png csp']);
  // The expected console errors: the CSP refusing the remote image of the Markdown test, and
  // the 400 of the error test.
  const expected = [/127\.0\.0\.2:9\/pixel\.png/, /status of 400 \(Bad Request\)/];
  const others = consoleErrors.filter((e) => !expected.some((r) => r.test(e)));
  assert.deepEqual(others, []);
  assert.equal(consoleErrors.filter((e) => expected[1].test(e)).length, 1);
});

test('an unreachable server gives a clear message', async () => {
  await srv.stop();
  const a = await sendAndWait(page, 'Is anyone there?');
  assert.match(await a.locator('.error').textContent(), /^Cannot reach the server at http:\/\/127\.0\.0\.1:\d+/);
  await shot(page, '11-unreachable');
  await ctx.close();
});

test('--api-key: the page asks for the key and keeps it only in session storage', async () => {
  const s = await startServer(['--api-key', 'sekrit-key', '--debug-script', path.join(HERE, 'script.json')]);
  try {
    assert.equal((await request(s, 'GET', '/')).status, 200, 'the page itself needs no key');
    assert.equal((await request(s, 'GET', '/v1/models')).status, 401);
    const { c, p } = await newPage(s.url);
    await p.locator('#key-dialog[open]').waitFor();
    await p.fill('#key-input', 'wrong');
    await p.press('#key-input', 'Enter');
    await p.locator('#key-error', { hasText: 'not accepted' }).waitFor();
    await shot(p, '12-api-key');
    await p.fill('#key-input', 'sekrit-key');
    await p.press('#key-input', 'Enter');
    await p.locator('#model-info', { hasText: 'tokens of context' }).waitFor();
    assert.equal(await p.isVisible('#key-dialog'), false);
    const a = await sendAndWait(p, 'REPLYTEST with a key');
    assert.equal(await answerText(a), 'The answer is 42.');
    assert.equal(await p.evaluate(() => sessionStorage.getItem('ds4.webui.apikey')), 'sekrit-key');
    const local = await p.evaluate(() => JSON.stringify(Object.entries(localStorage)));
    assert.ok(!local.includes('sekrit'), 'the key must not be in local storage');
    await c.close();
  } finally {
    await s.stop();
  }
});

test('--no-webui: / is not served', async () => {
  const s = await startServer(['--no-webui']);
  try {
    assert.equal((await request(s, 'GET', '/')).status, 404);
    assert.equal((await request(s, 'GET', '/webui/app.js')).status, 404);
    assert.equal((await request(s, 'GET', '/health')).status, 200);
  } finally {
    await s.stop();
  }
});
