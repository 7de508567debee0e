// ds4-server's chat page: conversations (local storage), streaming answers with a stop button,
// thinking shown apart from the answer, regenerate and edit-and-resend, sampling settings, and
// the per-answer stats the server reports.
import { models, streamChat } from './api.js';
import * as store from './store.js';
import { copyText, renderMarkdown } from './markdown.js';

const $ = (id) => document.getElementById(id);

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function button(label, onClick, cls) {
  const b = el('button', cls, label);
  b.type = 'button';
  b.addEventListener('click', onClick);
  return b;
}

let state = store.loadConversations();
let settings = store.loadSettings();
let serverModels = [];
let gen = null;  // the answer being generated: {conv, msg, controller}
let editing = -1;  // index of the user message being edited in the current conversation
let renaming = null;  // id of the conversation whose title is being edited
let updateQueued = false;
const thinkingOpen = new WeakMap();  // answer -> the reader's choice for its thinking block

const current = () => state.conversations.find((c) => c.id === state.current) || null;

function save() {
  if (!store.saveConversations(state)) showBanner('Could not save the conversations in local storage (is it full?).');
}

function showBanner(text, retry) {
  const b = $('banner');
  b.replaceChildren(el('span', '', text));
  if (retry) b.append(' ', button('Retry', retry));
  b.hidden = false;
}

function hideBanner() {
  $('banner').hidden = true;
}

// ---- conversations ----

function newConversation() {
  const prev = current();
  const c = { id: store.newId(), title: 'New chat', system: prev ? prev.system || '' : '', messages: [], updated: Date.now() };
  state.conversations.unshift(c);
  state.current = c.id;
  editing = -1;
  save();
  return c;
}

function selectConversation(id) {
  if (state.current === id) return;
  state.current = id;
  editing = -1;
  save();
  closeSidebar();
  render();
}

function deleteConversation(c) {
  if (!confirm(`Delete the conversation "${c.title}"?`)) return;
  if (gen && gen.conv === c) gen.controller.abort();
  state.conversations = state.conversations.filter((x) => x !== c);
  if (state.current === c.id) state.current = state.conversations.length ? state.conversations[0].id : null;
  save();
  render();
}

function renderList() {
  const ul = $('conv-list');
  ul.replaceChildren();
  for (const c of state.conversations) {
    const li = el('li', c.id === state.current ? 'current' : '');
    li.dataset.id = c.id;
    if (renaming === c.id) {
      const input = el('input');
      input.value = c.title;
      input.setAttribute('aria-label', 'Conversation title');
      let done = false;
      const finish = (keep) => {
        if (done) return;
        done = true;
        if (keep && input.value.trim()) c.title = input.value.trim();
        renaming = null;
        save();
        renderList();
      };
      input.addEventListener('keydown', (e) => {
        if (e.key === 'Enter') { e.preventDefault(); finish(true); }
        if (e.key === 'Escape') { e.preventDefault(); finish(false); }
      });
      input.addEventListener('blur', () => finish(true));
      li.append(input);
      ul.append(li);
      setTimeout(() => { input.focus(); input.select(); });
      continue;
    }
    // The title is a button, so the list works from the keyboard too.
    const title = button(c.title, () => selectConversation(c.id), 'title');
    title.title = c.title;
    if (c.id === state.current) title.setAttribute('aria-current', 'true');
    li.append(title);
    li.append(button('Rename', () => { renaming = c.id; renderList(); }, 'rename'));
    li.append(button('Delete', () => deleteConversation(c), 'delete'));
    ul.append(li);
  }
}

// ---- messages ----

function formatStats(m) {
  const s = m.stats;
  if (!s) return m.stopped ? 'stopped' : '';
  const parts = [`prompt ${s.prompt_tokens} tokens (${s.cached_tokens} cached)`];
  if (s.prompt_per_second > 0) parts.push(`prefill ${s.prompt_per_second.toFixed(1)} t/s`);
  parts.push(`${s.completion_tokens} tokens${s.reasoning_tokens ? ` (${s.reasoning_tokens} thinking)` : ''}`);
  if (s.predicted_per_second > 0) parts.push(`${s.predicted_per_second.toFixed(1)} t/s`);
  if (s.finish) parts.push(s.finish === 'length' ? 'token limit' : s.finish);
  return parts.join(' · ');
}

function userEl(c, m, i) {
  const d = el('div', 'msg user');
  d.dataset.index = i;
  d.append(el('div', 'role', 'You'));
  if (editing === i) {
    const ta = el('textarea', 'edit');
    ta.value = m.content;
    ta.setAttribute('aria-label', 'Edit message');
    const resend = () => {
      const text = ta.value.trim();
      if (!text || gen) return;
      editing = -1;
      c.messages = c.messages.slice(0, i);
      c.messages.push({ role: 'user', content: text });
      generate(c);
    };
    ta.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); resend(); }
      if (e.key === 'Escape') { e.preventDefault(); editing = -1; render(); }
    });
    const actions = el('div', 'actions');
    actions.append(button('Send', resend, 'primary resend'), button('Cancel', () => { editing = -1; render(); }, 'cancel'));
    d.append(ta, actions);
    setTimeout(() => ta.focus());
    return d;
  }
  d.append(el('div', 'body', m.content));
  const actions = el('div', 'actions');
  const edit = button('Edit', () => { editing = i; render(); }, 'edit');
  edit.disabled = !!gen;
  actions.append(edit);
  d.append(actions);
  return d;
}

function assistantEl(c, m, i) {
  const d = el('div', 'msg assistant');
  d.dataset.index = i;
  const streaming = gen && gen.msg === m;
  d.append(el('div', 'role', 'Assistant'));
  if (m.reasoning) {
    // Open while the thinking streams, closed once the answer begins, unless the reader chose.
    const det = el('details', 'thinking');
    det.open = thinkingOpen.has(m) ? thinkingOpen.get(m) : !!streaming && !m.content;
    const summary = el('summary', '', streaming && !m.content ? 'Thinking…' : 'Thinking');
    summary.addEventListener('click', () => thinkingOpen.set(m, !det.open));
    det.append(summary, el('div', 'reasoning', m.reasoning));
    d.append(det);
  }
  const body = el('div', 'body markdown');
  renderMarkdown(body, m.content);
  if (streaming) body.classList.add('cursor');
  d.append(body);
  if (m.error) d.append(el('div', 'error', m.error));
  const stats = formatStats(m);
  if (stats) d.append(el('div', 'stats', stats));
  if (!streaming) {
    const actions = el('div', 'actions');
    if (m.content) {
      actions.append(button('Copy', (e) => {
        const b = e.currentTarget;
        copyText(m.content).then((ok) => { b.textContent = ok ? 'Copied' : 'Copy failed'; setTimeout(() => { b.textContent = 'Copy'; }, 1500); });
      }, 'copy-answer'));
    }
    if (i === c.messages.length - 1 && !gen) actions.append(button('Regenerate', () => regenerate(c), 'regenerate'));
    d.append(actions);
  }
  return d;
}

function messageEl(c, m, i) {
  return m.role === 'user' ? userEl(c, m, i) : assistantEl(c, m, i);
}

function nearBottom(box) {
  return box.scrollHeight - box.scrollTop - box.clientHeight < 80;
}

function renderMessages() {
  const box = $('messages');
  const c = current();
  const top = box.scrollTop;
  box.replaceChildren();
  if (!c || !c.messages.length) {
    box.append(el('div', 'empty', 'Send a message to start.'));
    return;
  }
  c.messages.forEach((m, i) => box.append(messageEl(c, m, i)));
  // Editing an earlier message keeps the view where it was (focus brings the editor into view).
  box.scrollTop = editing >= 0 ? top : box.scrollHeight;
}

// Re-renders only the answer being streamed, at most once a frame.
function scheduleUpdate() {
  if (updateQueued) return;
  updateQueued = true;
  requestAnimationFrame(() => {
    updateQueued = false;
    if (!gen || gen.conv !== current()) return;
    const box = $('messages');
    const i = gen.conv.messages.indexOf(gen.msg);
    const old = box.querySelector(`.msg[data-index="${i}"]`);
    if (!old) return;
    const stick = nearBottom(box);
    old.replaceWith(messageEl(gen.conv, gen.msg, i));
    if (stick) box.scrollTop = box.scrollHeight;
  });
}

// ---- settings ----

const NUMBERS = ['temperature', 'top_p', 'min_p', 'max_tokens'];

function renderSettings() {
  const c = current();
  $('set-system').value = c ? c.system || '' : '';
  $('set-thinking').value = settings.thinking;
  for (const k of NUMBERS) $(`set-${k}`).value = settings[k];
  const sel = $('set-model');
  sel.replaceChildren(...serverModels.map((m) => { const o = el('option', '', m.id); o.value = m.id; return o; }));
  sel.value = chosenModel();
}

function chosenModel() {
  if (serverModels.some((m) => m.id === settings.model)) return settings.model;
  return serverModels.length ? serverModels[serverModels.length - 1].id : 'deepseek-v4-flash';
}

function bindSettings() {
  $('set-system').addEventListener('input', (e) => {
    const c = current() || newConversation();
    c.system = e.target.value;
    save();
    renderList();
  });
  $('set-thinking').addEventListener('change', (e) => { settings.thinking = e.target.value; store.saveSettings(settings); });
  $('set-model').addEventListener('change', (e) => { settings.model = e.target.value; store.saveSettings(settings); showModelInfo(); });
  for (const k of NUMBERS) {
    $(`set-${k}`).addEventListener('change', (e) => {
      const v = e.target.value.trim();
      settings[k] = v === '' ? (k === 'max_tokens' ? '' : store.DEFAULT_SETTINGS[k]) : Number(v);
      store.saveSettings(settings);
    });
  }
}

function showModelInfo() {
  const m = serverModels.find((x) => x.id === chosenModel());
  $('model-info').textContent = m ? `${m.id} · ${m.context_length} tokens of context` : 'no model';
}

// ---- generation ----

function requestBody(c) {
  const messages = [];
  if (c.system && c.system.trim()) messages.push({ role: 'system', content: c.system });
  for (const m of c.messages) {
    if (m === (gen && gen.msg)) continue;
    if (m.role === 'assistant' && !m.content) continue;  // failed or stopped before any text
    messages.push({ role: m.role, content: m.content });
  }
  const body = {
    model: chosenModel(), messages, stream: true, stream_options: { include_usage: true },
  };
  for (const k of ['temperature', 'top_p', 'min_p']) {
    if (typeof settings[k] === 'number' && Number.isFinite(settings[k])) body[k] = settings[k];
  }
  if (typeof settings.max_tokens === 'number' && settings.max_tokens > 0) body.max_tokens = Math.floor(settings.max_tokens);
  if (settings.thinking === 'off') {
    body.thinking = { type: 'disabled' };
  } else {
    body.thinking = { type: 'enabled' };
    body.reasoning_effort = settings.thinking === 'max' ? 'max' : 'high';
  }
  return body;
}

function setBusy(busy) {
  $('send').disabled = busy;
  $('stop').hidden = !busy;
}

async function generate(c) {
  const msg = { role: 'assistant', content: '', reasoning: '' };
  c.messages.push(msg);
  c.updated = Date.now();
  const controller = new AbortController();
  gen = { conv: c, msg, controller };
  const body = requestBody(c);
  setBusy(true);
  render();
  try {
    await streamChat(body, store.apiKey(), controller.signal, (j) => {
      const ch = j.choices && j.choices[0];
      if (ch && ch.delta) {
        if (typeof ch.delta.reasoning_content === 'string') msg.reasoning += ch.delta.reasoning_content;
        if (typeof ch.delta.content === 'string') msg.content += ch.delta.content;
      }
      if (ch && ch.finish_reason) msg.finish = ch.finish_reason;
      if (j.usage) {
        const u = j.usage, t = j.timings || {};
        msg.stats = {
          prompt_tokens: u.prompt_tokens,
          cached_tokens: (u.prompt_tokens_details && u.prompt_tokens_details.cached_tokens) || 0,
          completion_tokens: u.completion_tokens,
          reasoning_tokens: (u.completion_tokens_details && u.completion_tokens_details.reasoning_tokens) || 0,
          prompt_per_second: t.prompt_per_second || 0,
          predicted_per_second: t.predicted_per_second || 0,
          finish: msg.finish,
        };
      }
      scheduleUpdate();
    });
  } catch (e) {
    if (e.name === 'AbortError') {
      msg.stopped = true;
    } else {
      msg.error = e.message;
      if (e.status === 401) askKey('The key was not accepted; enter it again.');
    }
  }
  gen = null;
  setBusy(false);
  save();
  render();
}

function send() {
  const input = $('input');
  const text = input.value.trim();
  if (!text || gen) return;
  const c = current() || newConversation();
  c.messages.push({ role: 'user', content: text });
  if (c.title === 'New chat') c.title = text.split('\n')[0].slice(0, 48);
  input.value = '';
  editing = -1;
  generate(c);
}

function regenerate(c) {
  if (gen) return;
  if (c.messages.length && c.messages[c.messages.length - 1].role === 'assistant') c.messages.pop();
  generate(c);
}

function stop() {
  if (gen) gen.controller.abort();
}

// ---- connection, key, theme, layout ----

function askKey(message) {
  const dlg = $('key-dialog');
  $('key-error').hidden = !message;
  $('key-error').textContent = message || '';
  $('key-input').value = '';
  if (!dlg.open) dlg.showModal();
}

async function connect() {
  try {
    serverModels = await models(store.apiKey());
    hideBanner();
    if ($('key-dialog').open) $('key-dialog').close();
    showModelInfo();
    renderSettings();
  } catch (e) {
    $('model-info').textContent = 'not connected';
    if (e.status === 401) {
      askKey(store.apiKey() ? 'The key was not accepted.' : '');
    } else {
      showBanner(e.message, connect);
    }
  }
}

const THEMES = ['', 'light', 'dark'];

function applyTheme() {
  if (settings.theme) document.documentElement.dataset.theme = settings.theme;
  else delete document.documentElement.dataset.theme;
  $('toggle-theme').textContent = `Theme: ${settings.theme || 'system'}`;
}

function closeSidebar() {
  $('app').classList.remove('sidebar-open');
}

function render() {
  renderList();
  renderMessages();
  renderSettings();
}

function init() {
  applyTheme();
  bindSettings();
  $('composer').addEventListener('submit', (e) => { e.preventDefault(); send(); });
  $('input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
  });
  document.addEventListener('keydown', (e) => { if (e.key === 'Escape' && gen) stop(); });
  $('stop').addEventListener('click', stop);
  $('new-chat').addEventListener('click', () => { if (current() && !current().messages.length) return; newConversation(); closeSidebar(); render(); $('input').focus(); });
  $('toggle-settings').addEventListener('click', (e) => {
    const s = $('settings');
    s.hidden = !s.hidden;
    e.currentTarget.setAttribute('aria-expanded', String(!s.hidden));
  });
  $('toggle-theme').addEventListener('click', () => {
    settings.theme = THEMES[(THEMES.indexOf(settings.theme) + 1) % THEMES.length];
    store.saveSettings(settings);
    applyTheme();
  });
  $('toggle-sidebar').addEventListener('click', () => $('app').classList.toggle('sidebar-open'));
  $('scrim').addEventListener('click', closeSidebar);
  $('key-dialog').addEventListener('cancel', () => showBanner('This server needs an API key.', () => askKey('')));
  $('key-form').addEventListener('submit', () => {
    store.setApiKey($('key-input').value.trim());
    connect();
  });
  if (!current() && state.conversations.length) state.current = state.conversations[0].id;
  render();
  $('input').focus();
  connect();
}

init();
