// Short notices at the edge of the screen (uploads, chat, errors), read out by screen readers.

import { h } from './util.js';

const LIFETIME = { ok: 4000, chat: 5000, info: 4000, error: 8000, progress: 0 };
const MAX_SHOWN = 4;

let region = null;

function host() {
  if (!region) {
    region = h('div', { class: 'toasts', role: 'status', 'aria-live': 'polite' });
    document.body.append(region);
  }
  return region;
}

/**
 * Shows `text`; kind is ok | info | chat | error | progress. Errors stay longer and can be
 * dismissed; `sticky` ones stay until closed. Returns {update(text, {progress}), close()}.
 */
export function notify(kind, text, { sticky = false, progress } = {}) {
  const body = h('span', { class: 'toast-text' }, text);
  const bar = progress === undefined ? null : h('progress', { max: '1', value: String(progress) });
  const close = h('button', { type: 'button', class: 'toast-close', 'aria-label': 'Dismiss', title: 'Dismiss' }, '×');
  const el = h('div', { class: `toast toast-${kind}`, role: kind === 'error' ? 'alert' : undefined }, body, bar, close);
  const parent = host();
  parent.append(el);
  while (parent.children.length > MAX_SHOWN) parent.firstElementChild.remove();
  let timer = 0;
  const handle = {
    update(t, o = {}) {
      body.textContent = t;
      if (bar && o.progress !== undefined) bar.value = o.progress;
    },
    close() {
      clearTimeout(timer);
      el.remove();
    },
  };
  close.addEventListener('click', handle.close);
  const life = LIFETIME[kind] ?? 4000;
  if (!sticky && life) timer = setTimeout(handle.close, life);
  return handle;
}
