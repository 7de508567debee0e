// Conversations and settings in the browser's local storage; the API key only in the tab's
// session storage.
const CONV_KEY = 'ds4.webui.conversations';
const SETTINGS_KEY = 'ds4.webui.settings';
const KEY_KEY = 'ds4.webui.apikey';

export const DEFAULT_SETTINGS = {
  model: '', thinking: 'high', temperature: 1.0, top_p: 1.0, min_p: 0, max_tokens: '', theme: '',
};

function read(key, fallback) {
  try {
    const v = JSON.parse(localStorage.getItem(key));
    return v === null ? fallback : v;
  } catch {
    return fallback;
  }
}

function write(key, value) {
  try {
    localStorage.setItem(key, JSON.stringify(value));
    return true;
  } catch {
    return false;  // quota exceeded or storage disabled: the page keeps working in memory
  }
}

export function newId() {
  return Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
}

// {conversations: [{id, title, system, messages: [{role, content, reasoning, stats, error}],
//   updated}], current}
export function loadConversations() {
  const s = read(CONV_KEY, null);
  if (s && Array.isArray(s.conversations)) {
    s.conversations = s.conversations.filter((c) => c && typeof c.id === 'string' && Array.isArray(c.messages));
    return s;
  }
  return { conversations: [], current: null };
}

export function saveConversations(state) {
  return write(CONV_KEY, state);
}

export function loadSettings() {
  return { ...DEFAULT_SETTINGS, ...read(SETTINGS_KEY, {}) };
}

export function saveSettings(s) {
  write(SETTINGS_KEY, s);
}

export function apiKey() {
  try {
    return sessionStorage.getItem(KEY_KEY) || '';
  } catch {
    return '';
  }
}

export function setApiKey(k) {
  try {
    if (k) sessionStorage.setItem(KEY_KEY, k);
    else sessionStorage.removeItem(KEY_KEY);
  } catch {
    // no session storage: the key lives until the page is closed
  }
}
