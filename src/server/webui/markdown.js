// Markdown for model output, which is untrusted: markdown-it with html: false never passes raw
// HTML through (a <script> in an answer is shown as text), and its link check refuses
// javascript:, vbscript:, file: and non-image data: URLs. Links open in a new tab without an
// opener or referrer; the page's Content-Security-Policy blocks images from other origins.
import MarkdownIt from 'markdown-it';

const md = new MarkdownIt({ html: false, linkify: false, breaks: false, typographer: false });

const defaultLink = md.renderer.rules.link_open || ((tokens, idx, options, env, self) => self.renderToken(tokens, idx, options));
md.renderer.rules.link_open = (tokens, idx, options, env, self) => {
  tokens[idx].attrSet('target', '_blank');
  tokens[idx].attrSet('rel', 'noopener noreferrer');
  return defaultLink(tokens, idx, options, env, self);
};

export async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    // No clipboard permission (or not a secure context): copy through a selection.
    const ta = document.createElement('textarea');
    ta.value = text;
    document.body.append(ta);
    ta.select();
    const ok = document.execCommand('copy');
    ta.remove();
    return ok;
  }
}

// Renders `text` into `el`, with a copy button on each code block.
export function renderMarkdown(el, text) {
  el.innerHTML = md.render(text);
  for (const pre of el.querySelectorAll('pre')) {
    const wrap = document.createElement('div');
    wrap.className = 'code';
    pre.replaceWith(wrap);
    wrap.append(pre);
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'copy';
    b.textContent = 'Copy';
    b.addEventListener('click', async () => {
      const ok = await copyText(pre.textContent);
      b.textContent = ok ? 'Copied' : 'Copy failed';
      setTimeout(() => { b.textContent = 'Copy'; }, 1500);
    });
    wrap.append(b);
  }
}
