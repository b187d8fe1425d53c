// Small helpers both pages share: element building, formatting of sizes, ages and exits, name validation, copying.

/** `h('button', {class: 'x', onclick}, 'text', child)`: attributes starting with "on" become listeners. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function formatBytes(n) {
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB'];
  let v = n;
  let u = -1;
  do {
    v /= 1024;
    u++;
  } while (v >= 1024 && u < units.length - 1);
  return `${v < 10 ? v.toFixed(1) : Math.round(v)} ${units[u]}`;
}

/** "just now", "5 min", "3 h", "2 days", from an RFC 3339 time. */
export function formatAge(iso, now = Date.now()) {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return '';
  const s = Math.max(0, Math.round((now - t) / 1000));
  if (s < 45) return 'just now';
  const m = Math.round(s / 60);
  if (m < 60) return `${m} min ago`;
  const hr = Math.round(m / 60);
  if (hr < 24) return `${hr} h ago`;
  const d = Math.round(hr / 24);
  return `${d} day${d === 1 ? '' : 's'} ago`;
}

/** Words for how a program ended: "exited with code 0", "was stopped by SIGKILL (code 137)". */
export function describeExit(code, signal) {
  if (signal) return `was stopped by ${signal}${code !== null && code !== undefined ? ` (code ${code})` : ''}`;
  if (code === null || code === undefined) return 'has ended';
  return `exited with code ${code}`;
}

export const NAME_MAX = 32;
const NAME_CHARS = /^[A-Za-z0-9 _-]*$/;

/** Session names as the server checks them: trimmed, 0–32 of `[A-Za-z0-9 _-]` (empty clears the name). */
export function validateName(raw) {
  const name = String(raw ?? '').trim();
  if ([...name].length > NAME_MAX) return { ok: false, name, error: `Names are at most ${NAME_MAX} characters long.` };
  if (!NAME_CHARS.test(name)) {
    return { ok: false, name, error: 'Names may only use letters, digits, spaces, "-" and "_".' };
  }
  return { ok: true, name };
}

export function debounce(fn, ms) {
  let timer = 0;
  const wrapped = (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
  wrapped.cancel = () => clearTimeout(timer);
  return wrapped;
}

/** A promise with its resolve function outside. */
export function deferred() {
  let resolve;
  const promise = new Promise((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** The first 5 characters of a uuid, as the server's `uuidShort`. */
export function shortId(id) {
  return String(id || '').slice(0, 5);
}

/** A message for after a colon: "Working directory x…" → "working directory x…" (acronyms kept). */
export function afterColon(message) {
  const m = String(message || '');
  return /^[A-Z][a-z]/.test(m) ? m[0].toLowerCase() + m.slice(1) : m;
}

/** Copies text, also where the async clipboard API is not offered (plain http on another host). */
export function copyText(text) {
  if (navigator.clipboard?.writeText) return navigator.clipboard.writeText(text);
  const area = document.createElement('textarea');
  area.value = text;
  area.style.position = 'fixed';
  area.style.opacity = '0';
  document.body.append(area);
  area.select();
  document.execCommand('copy');
  area.remove();
  return Promise.resolve();
}
