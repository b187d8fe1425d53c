// The home page's "Embed" dialog: a ready-to-paste page that shows one session with xterm.js and
// ptyhub's addon (addon/ptyhub.js), carrying a share link of its own that is made only when the
// person has chosen what it allows and for how long (watch-only and 8 hours unless changed) and
// pressed the button; and the button that copies it.

import { api, basePath } from './api.js';
import { DEFAULT_EXPIRY, expirySelect, reachNote } from './share.js';
import { afterColon, copyText, h } from './util.js';

let dialog = null;
let current = null; // { id, title } of the session the dialog is for
/** The snippet made last in this page for each session (by id): reopening shows it, making nothing. */
const made = new Map(); // id → { role, ttl, text }

/** HTML text for the snippet's <title>. */
function escapeHtml(s) {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/**
 * The page to paste: xterm.js and the addon load from this server (vendor/ and addon/ allow any
 * origin), the share link in `connect()` is the only credential it holds. The `?v=` is the
 * vendored xterm's version, as in termview.js (see vendor/README.md).
 */
export function snippet(origin, id, token, title) {
  return `<!doctype html>
<meta charset="utf-8">
<title>${escapeHtml(title)}</title>
<link rel="stylesheet" href="${origin}/vendor/xterm/xterm.css?v=6.0.0">
<div id="terminal" style="height: 90vh"></div>
<script type="module">
  import { Terminal } from '${origin}/vendor/xterm/xterm.mjs?v=6.0.0';
  import { PtyhubAddon } from '${origin}/addon/ptyhub.js';
  const term = new Terminal();
  const ptyhub = new PtyhubAddon();
  term.loadAddon(ptyhub);
  term.open(document.getElementById('terminal'));
  ptyhub.onStateChange((state, error) => (document.title = error ? \`\${state}: \${error.message}\` : state));
  ptyhub.connect('${origin}/session/${id}?token=${encodeURIComponent(token)}');
</script>
`;
}

function build() {
  const role = h(
    'select',
    { id: 'embed-role' },
    h('option', { value: 'viewer', selected: true }, 'can only watch'),
    h('option', { value: 'writer' }, 'can type'),
  );
  const expiry = expirySelect('embed-expiry');
  const make = h('button', { type: 'submit', class: 'btn btn-primary', id: 'embed-make' }, 'Make the snippet');
  const code = h('code', { id: 'embed-code' });
  const copy = h('button', { type: 'button', class: 'btn btn-primary', id: 'embed-copy', disabled: true }, 'Copy');
  const close = h('button', { type: 'button', class: 'btn', id: 'embed-close' }, 'Close');
  const form = h(
    'form',
    { class: 'embed-form', novalidate: true },
    h('label', { class: 'field embed-role' }, h('span', {}, 'Whoever opens it'), role),
    h('label', { class: 'field' }, h('span', {}, 'Its link works for'), expiry),
    h('div', { class: 'field field-action' }, make),
  );
  const d = h(
    'dialog',
    { class: 'dialog dialog-wide', id: 'embed-dialog', 'aria-labelledby': 'embed-title' },
    h('h2', { id: 'embed-title' }, 'Embed this session'),
    h(
      'p',
      {},
      'A page to paste anywhere: it shows the session live, with xterm.js and ptyhub’s addon. It carries a share link of its own, made when you press the button. Serve it from this server’s origin, or add the page’s origin to ',
      h('code', {}, '[auth] allowed_origins'),
      '.',
    ),
    form,
    h('p', { class: 'form-error', role: 'alert', hidden: true }),
    h('div', { class: 'embed-reach' }),
    h('pre', { class: 'snippet', hidden: true }, code),
    h('div', { class: 'dialog-actions' }, close, copy),
  );
  document.body.append(d);

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const { id, title } = current;
    const chosen = { role: role.value, ttl: Number(expiry.value) };
    const body = { role: chosen.role };
    if (chosen.ttl > 0) body.ttl = chosen.ttl;
    make.disabled = true;
    showError('');
    try {
      const share = await api('POST', `/api/sessions/${encodeURIComponent(id)}/share`, body);
      made.set(id, { ...chosen, text: snippet(location.origin + basePath(), id, share.token, title) });
      if (current?.id === id) show();
    } catch (err) {
      showError(`No share link was made: ${afterColon(err.message)}`);
    } finally {
      make.disabled = false;
    }
  });
  // Another choice than the snippet's: it no longer says what will be made.
  for (const el of [role, expiry]) el.addEventListener('change', () => show());
  copy.addEventListener('click', async () => {
    try {
      await copyText(code.textContent);
      copy.textContent = 'Copied';
    } catch {
      copy.textContent = 'Select and copy it';
    }
  });
  close.addEventListener('click', () => d.close());
  return d;
}

function showError(text) {
  const el = dialog.querySelector('.form-error');
  el.textContent = text;
  el.hidden = !text;
}

/** Shows the snippet made for the current session, if it matches what the form says now. */
function show() {
  const snip = made.get(current.id);
  const role = dialog.querySelector('#embed-role').value;
  const ttl = Number(dialog.querySelector('#embed-expiry').value);
  const shown = Boolean(snip && snip.role === role && snip.ttl === ttl);
  dialog.querySelector('#embed-code').textContent = shown ? snip.text : '';
  dialog.querySelector('.snippet').hidden = !shown;
  dialog.querySelector('.embed-reach').replaceChildren(...(shown ? [reachNote(location.href)].filter(Boolean) : []));
  const copy = dialog.querySelector('#embed-copy');
  copy.disabled = !shown;
  copy.textContent = 'Copy';
  dialog.querySelector('#embed-make').textContent = snip && !shown ? 'Make another snippet' : 'Make the snippet';
}

/** Opens the dialog for session `id`; `title` names the embedded page. Nothing is made until asked. */
export function openEmbed(id, title) {
  if (!dialog) dialog = build();
  current = { id, title };
  const snip = made.get(id);
  dialog.querySelector('#embed-role').value = snip?.role || 'viewer';
  dialog.querySelector('#embed-expiry').value = String(snip ? snip.ttl : DEFAULT_EXPIRY);
  showError('');
  show();
  dialog.showModal();
}
