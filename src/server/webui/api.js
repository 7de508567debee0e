// The server's own OpenAI-compatible API, as the page uses it: /v1/models and streamed
// /v1/chat/completions. Failures become ApiError with a message for a person.

export class ApiError extends Error {
  // status: the HTTP status, 0 when the server could not be reached.
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

function headers(key) {
  const h = { 'Content-Type': 'application/json' };
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

async function send(path, init) {
  try {
    return await fetch(path, init);
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(`Cannot reach the server at ${location.origin} (${e.message}). Is ds4-server running?`, 0);
  }
}

// The message of an error response: the OpenAI shape {error: {message}}, else the status.
async function failure(res) {
  let text = '';
  try {
    text = await res.text();
    const j = JSON.parse(text);
    if (j && j.error && typeof j.error.message === 'string') text = j.error.message;
  } catch {
    // not JSON: keep the text
  }
  const what = res.status === 401 ? 'The API key was not accepted' : `The server answered ${res.status}`;
  return new ApiError(text ? `${what}: ${text}` : what, res.status);
}

// [{id, context_length, max_completion_tokens}]
export async function models(key) {
  const res = await send('/v1/models', { headers: headers(key) });
  if (!res.ok) throw await failure(res);
  const j = await res.json();
  return Array.isArray(j.data) ? j.data : [];
}

// Streams one chat completion. onChunk receives each parsed SSE data object (chunks, then the
// usage chunk). Resolves when the stream ends; rejects with ApiError (HTTP or in-band error)
// or with the AbortError of `signal`.
export async function streamChat(body, key, signal, onChunk) {
  const res = await send('/v1/chat/completions', {
    method: 'POST', headers: headers(key), body: JSON.stringify(body), signal,
  });
  if (!res.ok) throw await failure(res);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  for (;;) {
    let r;
    try {
      r = await reader.read();
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      throw new ApiError(`The connection to the server was lost (${e.message}).`, 0);
    }
    if (r.done) break;
    buf += decoder.decode(r.value, { stream: true }).replace(/\r\n/g, '\n');
    let end;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      const data = block.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
      if (!data) continue;  // comments (keepalives)
      if (data === '[DONE]') return;
      let j;
      try {
        j = JSON.parse(data);
      } catch {
        throw new ApiError(`The server sent something that is not JSON: ${data.slice(0, 200)}`, 200);
      }
      if (j.error) throw new ApiError(`The server reported an error: ${j.error.message || JSON.stringify(j.error)}`, 200);
      onChunk(j);
    }
  }
  throw new ApiError('The stream ended before the answer was complete.', 200);
}
