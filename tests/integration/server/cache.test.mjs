// Prefix reuse: a growing conversation prefills only its new suffix, and exact DSML replay
// is what keeps a tool-call turn cached (control: --disable-exact-dsml-tool-replay).
import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';

import { HERE, metrics, request, startServer } from './lib.mjs';

const chat = (srv, messages, extra = {}) =>
  request(srv, 'POST', '/v1/chat/completions', { model: 'deepseek-v4-flash', messages, max_tokens: 12, ...extra });

test('growing conversation: second request reuses the first prompt and prefills only the suffix', async () => {
  const srv = await startServer();
  try {
    const sys = { role: 'system', content: 'Thou art a scribe of the old book.' };
    const u1 = { role: 'user', content: 'And God said, Let there be light.' };
    const r1 = await chat(srv, [sys, u1], { thinking: { type: 'disabled' } });
    assert.equal(r1.status, 200, r1.body);
    const p1 = r1.json.usage.prompt_tokens;
    const m0 = await metrics(srv);
    const msgs = [sys, u1, { role: 'assistant', content: r1.json.choices[0].message.content },
      { role: 'user', content: 'And the evening and the morning were the first day.' }];
    const r2 = await chat(srv, msgs, { thinking: { type: 'disabled' } });
    assert.equal(r2.status, 200, r2.body);
    const m1 = await metrics(srv);
    const u = r2.json.usage;
    // The live session holds prompt 1 and the reply; re-tokenizing the reply may differ only
    // in its last few tokens.
    assert.ok(u.prompt_tokens_details.cached_tokens >= p1 - 2, `cached ${u.prompt_tokens_details.cached_tokens} vs first prompt ${p1}`);
    assert.ok(u.prompt_tokens_details.cached_tokens >= p1 + r1.json.usage.completion_tokens - 4);
    const prefilled = m1.ds4_prompt_prefilled_tokens_total - m0.ds4_prompt_prefilled_tokens_total;
    assert.equal(prefilled, u.prompt_tokens - u.prompt_tokens_details.cached_tokens);
    assert.ok(prefilled < u.prompt_tokens / 2, `prefilled ${prefilled} of ${u.prompt_tokens}`);
    assert.equal(m1.ds4_prompt_cached_tokens_total - m0.ds4_prompt_cached_tokens_total, u.prompt_tokens_details.cached_tokens);

    // Same request again: the whole prompt but its last token (whose logits must be
    // recomputed after the rewind) is cached, and greedy output is identical.
    const g1 = await chat(srv, msgs, { temperature: 0, thinking: { type: 'disabled' } });
    const g2 = await chat(srv, msgs, { temperature: 0, thinking: { type: 'disabled' } });
    assert.equal(g2.json.choices[0].message.content, g1.json.choices[0].message.content);
    assert.ok(g2.json.usage.prompt_tokens_details.cached_tokens >= g2.json.usage.prompt_tokens - 1);
  } finally {
    assert.equal(await srv.stop(), 0);
  }
});

async function toolRoundTrip(extraArgs) {
  const srv = await startServer(['--debug-script', path.join(HERE, 'script.json'), ...extraArgs]);
  try {
    const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: {} } } }];
    const user = { role: 'user', content: 'TOOLTEST: weather?' };
    const r1 = await chat(srv, [user], { tools, max_tokens: 200 });
    assert.equal(r1.status, 200, r1.body);
    const m = r1.json.choices[0].message;
    const tc = m.tool_calls[0];
    // Key order changed: canonical re-rendering would put "days" first.
    const args = JSON.parse(tc.function.arguments);
    const back = { ...tc, function: { name: tc.function.name, arguments: JSON.stringify({ days: args.days, city: args.city }) } };
    const r2 = await chat(srv, [user, { role: 'assistant', content: m.content, reasoning_content: m.reasoning_content, tool_calls: [back] },
      { role: 'tool', tool_call_id: tc.id, content: 'sunny in Paris' }], { tools, max_tokens: 200 });
    assert.equal(r2.status, 200, r2.body);
    assert.equal(r2.json.choices[0].message.content, 'It is sunny in Paris for 3 days.');
    return { p1: r1.json.usage.prompt_tokens, c1: r1.json.usage.completion_tokens, cached2: r2.json.usage.prompt_tokens_details.cached_tokens };
  } finally {
    assert.equal(await srv.stop(), 0);
  }
}

test('tool-call turn: exact replay keeps the sampled block cached; canonical rendering does not', async () => {
  const exact = await toolRoundTrip([]);
  assert.ok(exact.cached2 >= exact.p1 + exact.c1 - 1, JSON.stringify(exact));
  const canonical = await toolRoundTrip(['--disable-exact-dsml-tool-replay']);
  assert.ok(canonical.cached2 < canonical.p1 + canonical.c1 - 1, JSON.stringify(canonical));
  assert.ok(canonical.cached2 >= canonical.p1, 'the prompt itself is still reused');
});

// opencode's pattern (docs/CLIENTS.md): a short title request without tools comes between the
// turns of the main conversation. With one live session it replaces the main prefix, so the
// next main turn prefills from scratch. Several live sessions (issue 15, disk KV) fix it; this
// case is theirs to turn from todo into a passing test.
test('title request between two turns of the main conversation: the main prefix stays cached',
  { todo: 'issue 15: several live sessions (today the title request replaces the live session)' }, async () => {
    const srv = await startServer();
    try {
      const prompt = 'And the LORD spake unto Moses, saying';
      const title = (p) => chat(srv, [
        { role: 'system', content: 'You are a title generator. You output ONLY a thread title.' },
        { role: 'user', content: 'Generate a title for this conversation:' }, { role: 'user', content: `"${p}"` }],
      { max_tokens: 8, thinking: { type: 'disabled' } });
      const sys = { role: 'system', content: 'Thou art a scribe of the old book. '.repeat(20) };
      assert.equal((await title(prompt)).status, 200);
      const m1 = await chat(srv, [sys, { role: 'user', content: prompt }], { thinking: { type: 'disabled' } });
      assert.equal(m1.status, 200, m1.body);
      assert.equal((await title(prompt)).status, 200);
      const m2 = await chat(srv, [sys, { role: 'user', content: prompt },
        { role: 'assistant', content: m1.json.choices[0].message.content }, { role: 'user', content: 'Speak on.' }],
      { thinking: { type: 'disabled' } });
      assert.equal(m2.status, 200, m2.body);
      assert.ok(m2.json.usage.prompt_tokens_details.cached_tokens >= m1.json.usage.prompt_tokens - 2,
        `cached ${m2.json.usage.prompt_tokens_details.cached_tokens} of the first turn's ${m1.json.usage.prompt_tokens}`);
    } finally {
      assert.equal(await srv.stop(), 0);
    }
  });
