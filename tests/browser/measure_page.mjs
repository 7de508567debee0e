// Measures the chat page on the demo server (docs/BENCHMARKS.md): the bytes of each file it
// loads, and in headless Chromium over loopback the time to DOMContentLoaded, to the load
// event, and until the page is usable (the model line filled from /v1/models). Fresh browser
// context (empty cache) per run; prints the median and range of RUNS runs.
//   DS4_SERVER_BIN=build/bin/ds4-server DS4_MODEL=models/ds4-demo.gguf \
//   DS4_WEBUI_MODULES=third_party/webui/node_modules node tests/browser/measure_page.mjs [RUNS]
import path from 'node:path';
import zlib from 'node:zlib';

import { request, startServer } from '../integration/server/lib.mjs';

const runs = Number(process.argv[2] || 20);
const { chromium } = await import(path.join(process.env.DS4_WEBUI_MODULES, 'playwright-core', 'index.mjs'));
const srv = await startServer();
const browser = await chromium.launch({
  executablePath: process.env.DS4_CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic'],
});
try {
  let total = 0, totalGz = 0;
  for (const f of ['/', '/webui/app.js', '/webui/app.css']) {
    const r = await request(srv, 'GET', f);
    const bytes = Buffer.byteLength(r.body), gz = zlib.gzipSync(r.body, { level: 9 }).length;
    total += bytes;
    totalGz += gz;
    console.log(`${f.padEnd(15)} ${String(bytes).padStart(7)} bytes (${gz} gzip -9)`);
  }
  console.log(`${'total'.padEnd(15)} ${String(total).padStart(7)} bytes (${totalGz} gzip -9)`);
  const t = { dcl: [], load: [], usable: [] };
  for (let i = 0; i < runs; i++) {
    const ctx = await browser.newContext();
    const page = await ctx.newPage();
    const t0 = Date.now();
    await page.goto(srv.url + '/');
    await page.locator('#model-info', { hasText: 'tokens of context' }).waitFor();
    const usable = Date.now() - t0;
    const nav = await page.evaluate(() => performance.getEntriesByType('navigation')[0].toJSON());
    if (i === 0) {
      const sent = await page.evaluate(() => performance.getEntriesByType('resource')
        .filter((e) => e.name.includes('/webui/')).map((e) => [e.name.replace(location.origin, ''), e.transferSize, e.decodedBodySize]));
      console.log(`transferred by Chromium (bytes on the wire incl. headers / decoded): / ${nav.transferSize} / ${nav.decodedBodySize}; ` +
        sent.map(([n, t, d]) => `${n} ${t} / ${d}`).join('; '));
    }
    t.dcl.push(nav.domContentLoadedEventEnd);
    t.load.push(nav.loadEventEnd);
    t.usable.push(usable);
    await ctx.close();
  }
  const stat = (a) => {
    const s = [...a].sort((x, y) => x - y);
    return `median ${s[s.length >> 1].toFixed(1)} ms (min ${s[0].toFixed(1)}, max ${s[s.length - 1].toFixed(1)})`;
  };
  console.log(`${runs} loads, fresh context each:`);
  console.log(`  DOMContentLoaded  ${stat(t.dcl)}`);
  console.log(`  load event        ${stat(t.load)}`);
  console.log(`  usable (model shown, from page.goto) ${stat(t.usable)}`);
} finally {
  await browser.close();
  await srv.stop();
}
