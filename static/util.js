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

/** How a signal ends a program, in words ("ended by hang-up"); the signal's name is detail. */
const SIGNAL_WORDS = {
  SIGHUP: 'ended by hang-up',
  SIGINT: 'was interrupted',
  SIGQUIT: 'quit',
  SIGKILL: 'was killed',
  SIGTERM: 'was asked to stop, and did',
  SIGSEGV: 'crashed (segmentation fault)',
  SIGBUS: 'crashed (bus error)',
  SIGFPE: 'crashed (arithmetic error)',
  SIGILL: 'crashed (illegal instruction)',
  SIGABRT: 'aborted',
  SIGPIPE: 'ended by a broken pipe',
  SIGALRM: 'ended by a timer',
  SIGUSR1: 'ended by a user signal',
  SIGUSR2: 'ended by a user signal',
};

/** The short words for an exit: "exited normally", "exited with status 3", "ended by hang-up", "was killed". */
export function exitWords(code, signal) {
  if (signal) return SIGNAL_WORDS[signal] || `was stopped by a signal`;
  if (code === null || code === undefined) return 'has ended';
  if (code === 0) return 'exited normally';
  return `exited with status ${code}`;
}

/** The same with the signal's name as detail: "ended by hang-up (SIGHUP)". */
export function describeExit(code, signal) {
  const words = exitWords(code, signal);
  return signal ? `${words} (${signal})` : words;
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
