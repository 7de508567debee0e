// Real coding-agent CLIs (pinned in third_party/agents/{core,extra}) against ds4-server on the
// chat demo model (models/ds4-demo-chat.gguf: the demo model taught to answer in the V4 chat
// format and to end its turns). DS4_CLIENT names the one to run (ctest: one test per client).
//
// Scripted run: the demo model cannot plan, so --debug-script forces the model's first reply to
// be a call of the client's own file-writing tool; the client must run it (the file appears
// with the content), send the tool result back (the second rule matches on the result's text),
// print the scripted final answer, and exit 0. The follow-up request must reuse the cached
// prefix (the server's /metrics).
// Unscripted run: free sampling, the clients' own output limits (none forced); the model must end
// its reply by itself: the client exits 0 with a non-empty final answer, and the tokens generated
// during the run stay below the smallest output limit in play (so no reply was cut).
//
// run_isolated.sh runs this file in a network namespace with loopback only, so a client that
// needs anything beyond our server fails here.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { metrics, startServer } from './lib.mjs';

const CLIENT = process.env.DS4_CLIENT;
const AGENTS = process.env.DS4_AGENTS_DIR;  // third_party/agents
if (!CLIENT || !AGENTS) throw new Error('set DS4_CLIENT and DS4_AGENTS_DIR');
const MODEL = 'deepseek-v4-flash';
const CONTENT = 'hello from ds4\n';
const ANSWER = 'DONE: the file is written.';
const SYSTEM = 'You are a coding agent. Use the tools to do what the user asks.';

const binOf = (group, name) => path.join(AGENTS, group, 'node_modules', '.bin', name);

// One entry per client: where it lives, how it is configured (files under `dir`, environment),
// its command line, the name and parameters of its write tool, a string of its tool result,
// and how to find the final answer in its output.
const clients = {
  claude: {
    bin: binOf('core', 'claude'),
    setup(dir, url) {
      return {
        HOME: dir,
        ANTHROPIC_BASE_URL: url,
        ANTHROPIC_API_KEY: 'sk-local',
        ANTHROPIC_MODEL: MODEL,
        ANTHROPIC_SMALL_FAST_MODEL: MODEL,
        ANTHROPIC_DEFAULT_HAIKU_MODEL: MODEL,
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
        DISABLE_AUTOUPDATER: '1',
        DISABLE_TELEMETRY: '1',
        DISABLE_ERROR_REPORTING: '1',
        API_TIMEOUT_MS: '600000',
      };
    },
    // --system-prompt and --tools keep the prompt small (the default one is ~22k tokens, about
    // 6.5 minutes of prefill for the demo model on 2 cores; docs/CLIENTS.md).
    args: (prompt, scripted) => ['-p', prompt, '--output-format', 'json', '--permission-mode', 'acceptEdits',
      '--system-prompt', SYSTEM, '--tools', scripted ? 'Write' : ''],
    outputLimit: 32000,  // its max_tokens
    tool: (file) => ({ name: 'Write', params: { file_path: file, content: CONTENT } }),
    resultText: 'File created successfully',
    answer: (stdout) => JSON.parse(stdout).result,
  },
  pi: {
    bin: binOf('core', 'pi'),
    setup(dir, url) {
      const agentDir = path.join(dir, 'pi-agent');
      fs.mkdirSync(agentDir, { recursive: true });
      fs.writeFileSync(path.join(agentDir, 'models.json'), JSON.stringify({
        providers: {
          ds4: {
            baseUrl: `${url}/v1`, api: 'openai-completions', apiKey: 'local',
            // contextWindow: pi compacts the conversation (an extra, long request) once the prompt
            // comes within 16k tokens of it.
            models: [{ id: MODEL, name: 'DeepSeek V4 Flash (ds4)', reasoning: true, contextWindow: 65536, maxTokens: 8192 }],
          },
        },
      }));
      return { HOME: dir, PI_CODING_AGENT_DIR: agentDir, PI_OFFLINE: '1', PI_SKIP_VERSION_CHECK: '1', PI_TELEMETRY: '0' };
    },
    args: (prompt, scripted) => ['--provider', 'ds4', '--model', MODEL, '--no-session', '--no-context-files',
      '--no-extensions', '--no-skills', '--no-prompt-templates', '--system-prompt', SYSTEM,
      ...(scripted ? ['--tools', 'write'] : ['--no-tools']), '-p', prompt],
    outputLimit: 8192,  // maxTokens above
    tool: (file) => ({ name: 'write', params: { path: file, content: CONTENT } }),
    resultText: 'Successfully wrote',
    answer: (stdout) => stdout,
  },
  codex: {
    bin: binOf('extra', 'codex'),
    setup(dir, url) {
      const home = path.join(dir, 'codex');
      fs.mkdirSync(home, { recursive: true });
      // danger-full-access: the sandbox (bubblewrap) is not what is tested here, and the run is
      // confined to a temporary folder and a loopback-only network.
      fs.writeFileSync(path.join(home, 'config.toml'), [
        `model = "${MODEL}"`, 'model_provider = "ds4"', 'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"', 'check_for_update_on_startup = false', '',
        '[model_providers.ds4]', 'name = "ds4"', `base_url = "${url}/v1"`, 'wire_api = "responses"',
        'env_key = "DS4_API_KEY"', ''].join('\n'));
      return { HOME: dir, CODEX_HOME: home, DS4_API_KEY: 'local' };
    },
    args: (prompt) => ['exec', '--skip-git-repo-check', prompt],
    outputLimit: 65536 - 16384,  // none sent: ds4-server's limit, the context (-c) less its ~12k-token prompt
    tool: () => ({ name: 'exec_command', params: { cmd: `printf '${CONTENT.replace('\n', '\\n')}' > hello.txt && echo WROTE-OK` } }),
    resultText: 'WROTE-OK',
    answer: (stdout) => stdout,
  },
  opencode: {
    bin: binOf('extra', 'opencode'),
    setup(dir, url) {
      const config = path.join(dir, 'opencode.json');
      fs.writeFileSync(config, JSON.stringify({
        $schema: 'https://opencode.ai/config.json',
        model: `ds4/${MODEL}`, small_model: `ds4/${MODEL}`, autoupdate: false, share: 'disabled',
        provider: {
          ds4: {
            npm: '@ai-sdk/openai-compatible', name: 'ds4', options: { baseURL: `${url}/v1`, apiKey: 'local' },
            models: { [MODEL]: { name: 'DeepSeek V4 Flash (ds4)', limit: { context: 65536, output: 8192 } } },
          },
        },
      }));
      return { HOME: dir, XDG_CONFIG_HOME: path.join(dir, 'xdg-config'), XDG_DATA_HOME: path.join(dir, 'xdg-data'),
        XDG_CACHE_HOME: path.join(dir, 'xdg-cache'), XDG_STATE_HOME: path.join(dir, 'xdg-state'),
        OPENCODE_CONFIG: config, OPENCODE_DISABLE_AUTOUPDATE: '1', OPENCODE_DISABLE_MODELS_FETCH: '1',
        OPENCODE_DISABLE_LSP_DOWNLOAD: '1', OPENCODE_DISABLE_DEFAULT_PLUGINS: '1' };
    },
    args: (prompt) => ['run', prompt],
    outputLimit: 8192,  // limit.output above
    tool: (file) => ({ name: 'write', params: { content: CONTENT, filePath: file } }),
    resultText: '<tool_result>',
    answer: (stdout) => stdout,
  },
};

const client = clients[CLIENT];
if (!client) throw new Error(`DS4_CLIENT=${CLIENT}: not one of ${Object.keys(clients).join(', ')}`);

// DSML text of one tool call, as the model would write it.
function dsmlCall({ name, params }) {
  const ps = Object.entries(params).map(([k, v]) => `<｜DSML｜parameter name="${k}" string="true">${v}</｜DSML｜parameter>`);
  return `\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="${name}">\n${ps.join('\n')}\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>`;
}

function run(bin, args, env, cwd, timeoutMs) {
  return new Promise((resolve) => {
    const p = spawn(bin, args, { cwd, env: { PATH: process.env.PATH, TERM: 'dumb', NO_COLOR: '1', ...env },
      stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '', stderr = '';
    p.stdout.on('data', (d) => { stdout += d; });
    p.stderr.on('data', (d) => { stderr += d; });
    const t = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.on('exit', (code, signal) => { clearTimeout(t); resolve({ code, signal, stdout, stderr }); });
  });
}

let srv, dir, work;
before(async () => {
  assert.ok(fs.existsSync(client.bin), `${client.bin} is missing: run scripts/setup.sh (make test-clients for codex and opencode)`);
  dir = fs.mkdtempSync(path.join(os.tmpdir(), `ds4-${CLIENT}-`));
  work = path.join(dir, 'work');
  fs.mkdirSync(work);
  const file = path.join(work, 'hello.txt');
  const script = path.join(dir, 'script.json');
  fs.writeFileSync(script, JSON.stringify({
    rules: [
      // with_tools: a client's side requests (titles, summaries) quote the prompt but offer no tools.
      { when: 'CLIENTTEST', with_tools: true, reasoning: 'The user wants a file.', text: `I will write it.${dsmlCall(client.tool(file))}` },
      { when: client.resultText, with_tools: true, reasoning: 'The tool ran.', text: ANSWER },
    ],
  }));
  srv = await startServer(['--debug-script', script], { ctx: 65536 });
});
after(async () => {
  if (srv) assert.equal(await srv.stop(), 0);
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

test(`${CLIENT}: scripted tool call round trip`, async () => {
  const env = client.setup(dir, srv.url);
  const m0 = await metrics(srv);
  const r = await run(client.bin, client.args('CLIENTTEST: write hello.txt', true), env, work, 540000);
  const m1 = await metrics(srv);
  const detail = `exit ${r.code} ${r.signal ?? ''}\nstdout:\n${r.stdout.slice(-3000)}\nstderr:\n${r.stderr.slice(-3000)}\nserver:\n${srv.stderr().slice(-2000)}`;
  assert.equal(r.code, 0, detail);
  assert.equal(fs.readFileSync(path.join(work, 'hello.txt'), 'utf8'), CONTENT, detail);
  assert.ok(client.answer(r.stdout).includes(ANSWER), detail);
  const requests = Object.entries(m1).filter(([k]) => k.startsWith('ds4_requests_total'))
    .reduce((n, [k, v]) => n + v - (m0[k] ?? 0), 0);
  assert.ok(requests >= 2, `requests: ${requests}`);
  // The follow-up (tool result) request reused the prefix: at most the new turn was prefilled.
  const prompt = m1.ds4_prompt_tokens_total - m0.ds4_prompt_tokens_total;
  const cached = m1.ds4_prompt_cached_tokens_total - m0.ds4_prompt_cached_tokens_total;
  process.stdout.write(`# ${CLIENT}: ${requests} requests, ${prompt} prompt tokens, ${cached} cached\n`);
  assert.ok(cached > 0.3 * prompt, `cached ${cached} of ${prompt}`);
});

test(`${CLIENT}: unscripted run ends cleanly`, async () => {
  const env = client.setup(dir, srv.url);
  const m0 = await metrics(srv);
  const t0 = Date.now();
  const r = await run(client.bin, client.args('Tell me about the sea.', false), env, work, 540000);
  const m1 = await metrics(srv);
  const detail = `exit ${r.code} ${r.signal ?? ''}\nstdout:\n${r.stdout.slice(-3000)}\nstderr:\n${r.stderr.slice(-3000)}`;
  assert.equal(r.signal, null, detail);
  assert.equal(r.code, 0, detail);
  const answer = client.answer(r.stdout).trim();
  assert.ok(answer.length > 0, detail);
  const requests = Object.entries(m1).filter(([k]) => k.startsWith('ds4_requests_total') && k.includes('/v1/'))
    .reduce((n, [k, v]) => n + v - (m0[k] ?? 0), 0);
  const generated = m1.ds4_generated_tokens_total - m0.ds4_generated_tokens_total;
  process.stdout.write(`# ${CLIENT} unscripted: ${requests} requests, ${generated} tokens generated, ` +
    `${((Date.now() - t0) / 1000).toFixed(1)} s; answer: ${JSON.stringify(answer.slice(0, 200))}\n`);
  // Fewer tokens in all than the smallest limit: no reply of the run can have been cut at it.
  assert.ok(generated > 0 && generated < client.outputLimit, `generated ${generated}, limit ${client.outputLimit}`);
  assert.ok(srv.alive());
});
