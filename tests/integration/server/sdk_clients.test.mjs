// Real SDK clients (openai, @anthropic-ai/sdk from third_party/npm) against ds4-server on the
// demo model. Every call must parse without client-side errors; tool-call paths are driven by
// the --debug-script test hook (script.json) because the tiny model never writes DSML itself.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { HERE, importSdk, metrics, startServer } from './lib.mjs';

let srv, OpenAI, Anthropic, oa, an;
const MODEL = 'deepseek-v4-flash';
const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather forecast for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] },
  },
};

before(async () => {
  srv = await startServer(['--debug-script', path.join(HERE, 'script.json')]);
  OpenAI = await importSdk('openai');
  Anthropic = await importSdk('@anthropic-ai/sdk');
  oa = new OpenAI({ apiKey: 'unused', baseURL: `${srv.url}/v1`, maxRetries: 0 });
  an = new Anthropic({ apiKey: 'unused', baseURL: srv.url, maxRetries: 0 });
});
after(async () => { assert.equal(await srv.stop(), 0); });

test('openai chat, non-streamed, usage with cached tokens', async () => {
  const r = await oa.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'And God said' }], max_tokens: 6, thinking: { type: 'disabled' },
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(r.choices[0].message.content.length > 0);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 6);
  assert.ok(r.usage.prompt_tokens > 3);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
});

test('openai chat, streamed with include_usage; reasoning streams as reasoning_content', async () => {
  const stream = await oa.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'In the beginning' }], max_tokens: 10, stream: true,
    stream_options: { include_usage: true },
  });
  let reasoning = '', usage = null, finish = null, chunks = 0;
  for await (const c of stream) {
    chunks++;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      if (ch.delta.reasoning_content) reasoning += ch.delta.reasoning_content;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  assert.ok(chunks >= 3);
  assert.ok(reasoning.length > 0, 'thinking is on by default: the text is reasoning');
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 10);
  assert.equal(usage.completion_tokens_details.reasoning_tokens, 10);
});

test('openai chat stream helper: tool call header then argument deltas', async () => {
  const runner = oa.chat.completions.stream({
    model: MODEL, messages: [{ role: 'user', content: 'TOOLTEST: weather in Paris?' }], tools: [weatherTool], max_tokens: 200,
  });
  const argDeltas = [];
  let reasoning = '';
  runner.on('tool_calls.function.arguments.delta', (e) => argDeltas.push(e.arguments_delta));
  // The helper keeps only the last value of fields it does not know, so collect reasoning here.
  runner.on('chunk', (c) => { reasoning += c.choices[0]?.delta?.reasoning_content ?? ''; });
  const final = await runner.finalChatCompletion();
  const msg = final.choices[0].message;
  assert.equal(final.choices[0].finish_reason, 'tool_calls');
  assert.equal(msg.tool_calls.length, 1);
  assert.equal(msg.tool_calls[0].function.name, 'get_weather');
  assert.match(msg.tool_calls[0].id, /^call_[A-Za-z0-9]{24}$/);
  assert.deepEqual(JSON.parse(msg.tool_calls[0].function.arguments), { city: 'Paris', days: 3 });
  assert.ok(argDeltas.length >= 2, `arguments arrive in pieces (${argDeltas.length})`);
  assert.equal(msg.content, 'Let me check.');
  assert.equal(reasoning, 'The user wants the weather.');
});

test('openai chat non-streamed: two tool calls, then the tool results continue the cached turn', async () => {
  const r = await oa.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'TOOLTEST: weather in Paris?' }], tools: [weatherTool], max_tokens: 200,
  });
  const tc = r.choices[0].message.tool_calls;
  assert.equal(tc.length, 1);
  const p1 = r.usage.prompt_tokens, c1 = r.usage.completion_tokens;
  // Send the call back with its arguments re-serialized in another key order: only exact
  // replay of the sampled block keeps the prompt identical to the live tokens.
  const args = JSON.parse(tc[0].function.arguments);
  const reordered = JSON.stringify({ days: args.days, city: args.city });
  const r2 = await oa.chat.completions.create({
    model: MODEL, tools: [weatherTool], max_tokens: 200,
    messages: [
      { role: 'user', content: 'TOOLTEST: weather in Paris?' },
      { role: 'assistant', content: r.choices[0].message.content, reasoning_content: r.choices[0].message.reasoning_content,
        tool_calls: [{ ...tc[0], function: { name: tc[0].function.name, arguments: reordered } }] },
      { role: 'tool', tool_call_id: tc[0].id, content: 'sunny in Paris' },
    ],
  });
  assert.equal(r2.choices[0].message.content, 'It is sunny in Paris for 3 days.');
  assert.equal(r2.choices[0].finish_reason, 'stop');
  // Everything up to the last sampled token is reused (that token was never evaluated).
  assert.ok(r2.usage.prompt_tokens_details.cached_tokens >= p1 + c1 - 1,
    `cached ${r2.usage.prompt_tokens_details.cached_tokens} < ${p1} + ${c1} - 1`);
});

test('openai chat: logprobs and top_logprobs', async () => {
  const r = await oa.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Blessed are' }], max_tokens: 5, logprobs: true, top_logprobs: 3,
    reasoning_effort: 'none', temperature: 0,
  });
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, 5);
  for (const e of lp) {
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, 3);
    // Greedy: the chosen token is the most probable one.
    assert.equal(e.logprob, e.top_logprobs[0].logprob);
  }
  assert.equal(lp.map((e) => e.token).join(''), r.choices[0].message.content);
});

test('openai responses: non-streamed and streamed text', async () => {
  const r = await oa.responses.create({ model: MODEL, input: 'And the earth was', max_output_tokens: 6, reasoning: { effort: 'none' } });
  assert.equal(r.object, 'response');
  assert.equal(r.status, 'incomplete');
  assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.ok(r.output_text.length > 0);
  assert.equal(r.usage.output_tokens, 6);
  assert.equal(typeof r.usage.input_tokens_details.cached_tokens, 'number');

  const s = oa.responses.stream({ model: MODEL, input: 'REPLYTEST', instructions: 'Be brief.', max_output_tokens: 100 });
  const types = [];
  s.on('event', (e) => types.push(e.type));
  const final = await s.finalResponse();
  assert.equal(final.status, 'completed');
  assert.equal(final.output_text, 'The answer is 42. STOP here.');
  assert.equal(final.output[0].type, 'reasoning');
  assert.equal(final.output[0].content[0].text, 'Thinking about it.');
  assert.equal(types[0], 'response.created');
  assert.equal(types.at(-1), 'response.completed');
  assert.ok(types.includes('response.output_text.delta'));
  assert.ok(types.includes('response.reasoning_text.delta'));
});

test('openai responses: function call events and call continuation', async () => {
  const tools = [{ type: 'function', name: 'get_weather', parameters: weatherTool.function.parameters }];
  const s = oa.responses.stream({ model: MODEL, input: 'TOOLTEST please', tools, max_output_tokens: 200 });
  const types = [];
  s.on('event', (e) => types.push(e.type));
  const final = await s.finalResponse();
  const call = final.output.find((o) => o.type === 'function_call');
  assert.ok(call, JSON.stringify(final.output));
  assert.equal(call.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.arguments), { city: 'Paris', days: 3 });
  assert.ok(types.includes('response.function_call_arguments.delta'));
  assert.ok(types.includes('response.function_call_arguments.done'));
  const r2 = await oa.responses.create({
    model: MODEL, tools, max_output_tokens: 200,
    input: [
      { role: 'user', content: 'TOOLTEST please' },
      ...final.output.filter((o) => o.type !== 'function_call').map((o) => o),
      { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments },
      { type: 'function_call_output', call_id: call.call_id, output: 'sunny in Paris' },
    ],
  });
  assert.equal(r2.output_text, 'It is sunny in Paris for 3 days.');
  assert.ok(r2.usage.input_tokens_details.cached_tokens >= final.usage.input_tokens + final.usage.output_tokens - 1);
});

test('openai completions: raw prompt, streamed and not', async () => {
  const r = await oa.completions.create({ model: MODEL, prompt: 'And Moses said unto', max_tokens: 5, logprobs: 2 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.choices[0].logprobs.tokens.length, 5);
  assert.equal(r.choices[0].logprobs.tokens.join(''), r.choices[0].text);
  const s = await oa.completions.create({ model: MODEL, prompt: 'And Moses said unto', max_tokens: 5, stream: true,
    stream_options: { include_usage: true } });
  let text = '', usage;
  for await (const c of s) {
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) text += ch.text;
  }
  assert.ok(text.length > 0);
  assert.equal(usage.completion_tokens, 5);
  // The same prompt again: everything but the last prompt token is cached.
  assert.ok(usage.prompt_tokens_details.cached_tokens >= usage.prompt_tokens - 1);
});

test('anthropic messages: non-streamed and streamed', async () => {
  const m = await an.messages.create({
    model: MODEL, max_tokens: 6, system: 'You are terse.', messages: [{ role: 'user', content: 'Hear, O Israel' }],
    thinking: { type: 'disabled' },
  });
  assert.equal(m.type, 'message');
  assert.equal(m.stop_reason, 'max_tokens');
  assert.equal(m.content[0].type, 'text');
  assert.ok(m.content[0].text.length > 0);
  assert.equal(m.usage.output_tokens, 6);
  assert.equal(typeof m.usage.cache_read_input_tokens, 'number');

  // Anthropic's API thinks only when asked (thinking.type enabled or adaptive); so does ours.
  const s = an.messages.stream({ model: MODEL, max_tokens: 100, messages: [{ role: 'user', content: 'REPLYTEST' }],
    stop_sequences: ['STOP'], thinking: { type: 'adaptive' } });
  const kinds = [];
  let startUsage;
  s.on('streamEvent', (e) => {
    kinds.push(e.type);
    if (e.type === 'message_start') startUsage = structuredClone(e.message.usage);
  });
  const fm = await s.finalMessage();
  assert.deepEqual(fm.content.map((b) => b.type), ['thinking', 'text']);
  assert.equal(fm.content[0].thinking, 'Thinking about it.');
  assert.equal(fm.content[1].text, 'The answer is 42. ');
  assert.equal(fm.stop_reason, 'stop_sequence');
  assert.equal(fm.stop_sequence, 'STOP');
  assert.equal(kinds[0], 'message_start');
  assert.equal(kinds.at(-1), 'message_stop');
  // message_start already carries the prompt's size; message_delta splits it into cached and not.
  assert.equal(startUsage.input_tokens, fm.usage.input_tokens + fm.usage.cache_read_input_tokens);
  assert.ok(startUsage.input_tokens > 3);

  // Said nothing about thinking: no thinking block, the scripted text is all answer.
  const plain = await an.messages.create({ model: MODEL, max_tokens: 100, messages: [{ role: 'user', content: 'REPLYTEST' }] });
  assert.deepEqual(plain.content.map((b) => b.type), ['text']);
  assert.equal(plain.content[0].text, 'Thinking about it.</think>The answer is 42. STOP here.');
});

test('anthropic messages: streamed tool_use, then tool_result continues from the cache', async () => {
  const tools = [{ name: 'get_weather', description: 'forecast', input_schema: weatherTool.function.parameters }];
  const thinking = { type: 'enabled', budget_tokens: 1024 };
  const s = an.messages.stream({ model: MODEL, max_tokens: 200, tools, thinking, messages: [{ role: 'user', content: 'TOOLTEST now' }] });
  const fm = await s.finalMessage();
  assert.equal(fm.stop_reason, 'tool_use');
  const tu = fm.content.find((b) => b.type === 'tool_use');
  assert.equal(tu.name, 'get_weather');
  assert.match(tu.id, /^toolu_/);
  assert.deepEqual(tu.input, { city: 'Paris', days: 3 });
  const before = await metrics(srv);
  const m2 = await an.messages.create({
    model: MODEL, max_tokens: 200, tools, thinking,
    messages: [
      { role: 'user', content: 'TOOLTEST now' },
      { role: 'assistant', content: fm.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: tu.id, content: 'sunny in Paris' }] },
    ],
  });
  const after = await metrics(srv);
  assert.equal(m2.content.at(-1).text, 'It is sunny in Paris for 3 days.');
  const prompt = m2.usage.input_tokens + m2.usage.cache_read_input_tokens;
  assert.ok(m2.usage.cache_read_input_tokens >= fm.usage.input_tokens + fm.usage.cache_read_input_tokens + fm.usage.output_tokens - 1);
  // Only the uncached suffix was prefilled.
  assert.equal(after.ds4_prompt_prefilled_tokens_total - before.ds4_prompt_prefilled_tokens_total, prompt - m2.usage.cache_read_input_tokens);
});
