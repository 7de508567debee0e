// ds4-server on a qwen35moe model (tests/unit/model/make_qwen_model.cpp: random weights, a
// byte vocabulary with the ChatML control tokens): the server picks ChatML and Qwen's
// <tool_call> syntax from general.architecture. The script (qwen_script.json) forces what the
// random model "generates", so reasoning, content and tool calls go through the real
// tokenizer, evaluation and ChatML parser; plain sampling checks prefix reuse.
import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';

import { HERE, metrics, request, startServer } from './lib.mjs';

const WEATHER = { type: 'function', function: { name: 'get_weather', parameters: { type: 'object',
  properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] } } };
const chat = (srv, messages, extra = {}) =>
  request(srv, 'POST', '/v1/chat/completions', { model: 'qwen-chatml-test', messages, max_tokens: 200, ...extra });

test('reasoning and content are split at </think>', async () => {
  const srv = await startServer(['--debug-script', path.join(HERE, 'qwen_script.json')]);
  try {
    const r = await chat(srv, [{ role: 'user', content: 'REPLYTEST please' }]);
    assert.equal(r.status, 200, r.body);
    const m = r.json.choices[0].message;
    assert.equal(m.content, 'The answer is 42.');
    assert.equal(m.reasoning_content, 'Thinking about it.\n');
    assert.equal(r.json.choices[0].finish_reason, 'stop');
  } finally {
    await srv.stop();
  }
});

test('a <tool_call> block becomes an OpenAI tool call, and its result continues the turn', async () => {
  const srv = await startServer(['--debug-script', path.join(HERE, 'qwen_script.json')]);
  try {
    const u = { role: 'user', content: 'TOOLTEST: weather in Paris for 3 days?' };
    const r = await chat(srv, [u], { tools: [WEATHER] });
    assert.equal(r.status, 200, r.body);
    const c = r.json.choices[0];
    assert.equal(c.finish_reason, 'tool_calls');
    assert.equal(c.message.content, 'Let me check.');
    assert.equal(c.message.tool_calls.length, 1);
    const call = c.message.tool_calls[0];
    assert.equal(call.function.name, 'get_weather');
    assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris', days: 3 });
    const p1 = r.json.usage.prompt_tokens;

    // Streaming gives the same call.
    const s = await request(srv, 'POST', '/v1/chat/completions',
      { model: 'qwen-chatml-test', messages: [u], tools: [WEATHER], max_tokens: 200, stream: true });
    assert.equal(s.status, 200);
    let args = '', name = '';
    for (const line of s.body.split('\n')) {
      if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
      const d = JSON.parse(line.slice(6)).choices?.[0]?.delta;
      for (const tc of d?.tool_calls ?? []) {
        if (tc.function?.name) name = tc.function.name;
        if (tc.function?.arguments) args += tc.function.arguments;
      }
    }
    assert.equal(name, 'get_weather');
    assert.deepEqual(JSON.parse(args), { city: 'Paris', days: 3 });

    // The tool result: the replayed turn (its exact sampled block) keeps the prompt cached.
    const m0 = await metrics(srv);
    const r2 = await chat(srv, [u, c.message, { role: 'tool', tool_call_id: call.id, content: 'sunny in Paris' }],
      { tools: [WEATHER] });
    assert.equal(r2.status, 200, r2.body);
    assert.equal(r2.json.choices[0].message.content, 'It is sunny in Paris for 3 days.');
    const m1 = await metrics(srv);
    const cached = r2.json.usage.prompt_tokens_details.cached_tokens;
    assert.ok(cached >= p1, `cached ${cached}, first prompt ${p1}`);
    assert.equal(m1.ds4_prompt_prefilled_tokens_total - m0.ds4_prompt_prefilled_tokens_total,
      r2.json.usage.prompt_tokens - cached);
  } finally {
    await srv.stop();
  }
});

test('a growing conversation prefills only its new suffix; greedy output repeats exactly', async () => {
  const srv = await startServer();
  try {
    const u1 = { role: 'user', content: 'Tell me something about the sea and the sky. '.repeat(8) };
    const r1 = await chat(srv, [u1], { max_tokens: 8, temperature: 0, chat_template_kwargs: { enable_thinking: false } });
    assert.equal(r1.status, 200, r1.body);
    const p1 = r1.json.usage.prompt_tokens;
    const msgs = [u1, { role: 'assistant', content: r1.json.choices[0].message.content ?? '' },
      { role: 'user', content: 'And then?' }];
    const r2 = await chat(srv, msgs, { max_tokens: 8, temperature: 0 });
    assert.equal(r2.status, 200, r2.body);
    const cached = r2.json.usage.prompt_tokens_details.cached_tokens;
    // ChatML drops an earlier turn's <think> block, so the first prompt's last tokens
    // ("<think>\n\n</think>\n\n" or "<think>\n") are re-rendered differently: reuse stops there.
    assert.ok(cached >= p1 - 6, `cached ${cached} of first prompt ${p1}`);
    assert.ok(r2.json.usage.prompt_tokens - cached < r2.json.usage.prompt_tokens / 2);
    const g1 = await chat(srv, msgs, { max_tokens: 8, temperature: 0 });
    const g2 = await chat(srv, msgs, { max_tokens: 8, temperature: 0 });
    assert.equal(g2.json.choices[0].message.content, g1.json.choices[0].message.content);
    assert.equal(g2.json.choices[0].message.reasoning_content, g1.json.choices[0].message.reasoning_content);
    assert.ok(g2.json.usage.prompt_tokens_details.cached_tokens >= g2.json.usage.prompt_tokens - 1);
  } finally {
    await srv.stop();
  }
});

test('rewind through the server is exact: logprobs after a rewind equal a fresh evaluation bit for bit', async () => {
  // Two prompts that share a long prefix and then differ, so the second request rewinds the
  // live session (its DeltaNet state comes from a checkpoint plus re-evaluation) instead of
  // starting over. Its greedy tokens' logprobs (the chosen token and the top 5, from the whole
  // softmax) must equal those of a fresh server that evaluates the second prompt from nothing.
  const base = 'Tell me something about the sea and the sky. '.repeat(10);
  const first = [{ role: 'user', content: `${base}First, the mountains of the north.` }];
  const second = [{ role: 'user', content: `${base}Then, the rivers of the south.` }];
  const opts = { max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 5,
    chat_template_kwargs: { enable_thinking: false } };
  const a = await startServer();
  let rewound;
  try {
    const r1 = await chat(a, first, opts);
    assert.equal(r1.status, 200, r1.body);
    rewound = await chat(a, second, opts);
    assert.equal(rewound.status, 200, rewound.body);
    const cached = rewound.json.usage.prompt_tokens_details.cached_tokens;
    assert.ok(cached > 0 && cached < rewound.json.usage.prompt_tokens,
      `expected a partial reuse (a rewind), got ${cached} of ${rewound.json.usage.prompt_tokens}`);
  } finally {
    await a.stop();
  }
  const b = await startServer();
  try {
    const fresh = await chat(b, second, opts);
    assert.equal(fresh.status, 200, fresh.body);
    assert.equal(fresh.json.usage.prompt_tokens_details.cached_tokens ?? 0, 0);
    const lp = (r) => r.json.choices[0].logprobs.content;
    assert.ok(lp(fresh).length > 0);
    assert.deepEqual(lp(rewound), lp(fresh));
  } finally {
    await b.stop();
  }
});
