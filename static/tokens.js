// The dashboard's "API tokens" dialog (admins only): the tokens with their scopes and dates, making one (name, scopes, expiry; the token shown once, with a copy button) and revoking one. REST: GET/POST /api/tokens, DELETE /api/tokens/{id}.

import { api } from './api.js';
import { afterColon, copyText, h } from './util.js';

/** The scopes a token may have, and what each lets its holder do. */
const SCOPES = [
  ['view', 'watch sessions'],
  ['write', 'type, resize, chat, upload'],
  ['exec', 'run commands and language servers'],
  ['admin', 'create and end sessions, share, manage tokens (implies all)'],
];

/** Expiry choices, seconds; 0: never. */
const EXPIRIES = [
  [24 * 3600, '1 day'],
  [7 * 24 * 3600, '7 days'],
  [30 * 24 * 3600, '30 days'],
  [90 * 24 * 3600, '90 days'],
  [365 * 24 * 3600, '1 year'],
  [0, 'Never (until revoked)'],
];
const DEFAULT_EXPIRY = 30 * 24 * 3600;

let dialog = null;

/** A date for people, or `never` / `—`. */
function when(iso, none) {
  if (!iso) return none;
  const t = Date.parse(iso);
  return Number.isNaN(t) ? String(iso) : new Date(t).toLocaleString(undefined, { year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' });
}

function build() {
  const name = h('input', { type: 'text', id: 'token-name', maxlength: '64', autocomplete: 'off', spellcheck: 'false', placeholder: 'e.g. ci' });
  const scopes = h(
    'fieldset',
    { class: 'token-scopes' },
    h('legend', {}, 'It may'),
    ...SCOPES.map(([s, words]) => h('label', {}, h('input', { type: 'checkbox', name: 'token-scope', value: s, checked: s === 'view' }), ' ', h('strong', {}, s), h('span', { class: 'muted' }, `: ${words}`))),
  );
  const expiry = h('select', { id: 'token-expiry' }, ...EXPIRIES.map(([s, label]) => h('option', { value: String(s), selected: s === DEFAULT_EXPIRY }, label)));
  const make = h('button', { type: 'submit', class: 'btn btn-primary', id: 'token-make' }, 'Create token');
  const form = h(
    'form',
    { class: 'token-form', novalidate: true },
    h('label', { class: 'field' }, h('span', {}, 'Name'), name),
    scopes,
    h('div', { class: 'share-make-row' }, h('label', { class: 'field' }, h('span', {}, 'Expires after'), expiry), make),
  );
  const secret = h('input', { type: 'text', id: 'token-secret', readonly: true, 'aria-label': 'The new token', spellcheck: 'false' });
  const copy = h('button', { type: 'button', class: 'btn', id: 'token-copy' }, 'Copy');
  const made = h('div', { class: 'token-made', hidden: true }, h('p', { class: 'token-made-what' }), h('div', { class: 'share-link-row' }, secret, copy));
  const error = h('p', { class: 'form-error', role: 'alert', hidden: true });
  const table = h(
    'table',
    { class: 'token-table' },
    h('thead', {}, h('tr', {}, ...['Name', 'Scopes', 'Created', 'By', 'Last used', 'Expires', ''].map((t) => h('th', { scope: 'col' }, t)))),
    h('tbody', {}),
  );
  const close = h('button', { type: 'button', class: 'btn', id: 'tokens-close' }, 'Close');
  const d = h(
    'dialog',
    { class: 'dialog dialog-wide dialog-tokens', id: 'tokens-dialog', 'aria-labelledby': 'tokens-title' },
    h('h2', { id: 'tokens-title' }, 'API tokens'),
    h('p', { class: 'muted' }, 'A token lets a script or a person in with only the scopes it is given. It is shown once, when made; ptyhub keeps only its hash. Revoking one ends its connections at once.'),
    form,
    error,
    made,
    h('h3', {}, 'Tokens'),
    h('p', { class: 'tokens-none muted' }, 'None yet.'),
    table,
    h('div', { class: 'dialog-actions' }, close),
  );
  document.body.append(d);

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const chosen = [...form.querySelectorAll('input[name="token-scope"]:checked')].map((x) => x.value);
    const label = name.value.trim();
    if (!label) {
      showError('Give the token a name, to know it by in this list.');
      name.focus();
      return;
    }
    if (!chosen.length) {
      showError('Choose at least one scope.');
      return;
    }
    const body = { name: label, scopes: chosen };
    const ttl = Number(expiry.value);
    if (ttl > 0) body.expiresIn = ttl;
    make.disabled = true;
    showError('');
    try {
      const t = await api('POST', '/api/tokens', body);
      secret.value = t.token;
      made.querySelector('.token-made-what').textContent = `New token “${t.name}” (${(t.scopes || []).join(', ')}). It is shown only now: copy it.`;
      made.hidden = false;
      copy.textContent = 'Copy';
      secret.select();
      name.value = '';
      await refreshList();
    } catch (err) {
      showError(`No token was made: ${afterColon(err.message)}`);
    } finally {
      make.disabled = false;
    }
  });
  copy.addEventListener('click', async () => {
    try {
      await copyText(secret.value);
      copy.textContent = 'Copied';
    } catch {
      secret.select();
      copy.textContent = 'Select and copy it';
    }
  });
  close.addEventListener('click', () => d.close());
  // The secret is not kept on the page once the dialog is closed.
  d.addEventListener('close', () => {
    secret.value = '';
    made.hidden = true;
  });
  return d;
}

function showError(text) {
  const el = dialog.querySelector('.form-error');
  el.textContent = text;
  el.hidden = !text;
}

/** Lists the tokens, each with a Revoke button. */
async function refreshList() {
  let tokens;
  try {
    tokens = await api('GET', '/api/tokens');
  } catch (err) {
    showError(`The tokens could not be listed: ${afterColon(err.message)}`);
    return;
  }
  tokens = Array.isArray(tokens) ? tokens : [];
  tokens.sort((a, b) => String(b.createdAt).localeCompare(String(a.createdAt)));
  dialog.querySelector('.tokens-none').hidden = tokens.length > 0;
  dialog.querySelector('.token-table').hidden = tokens.length === 0;
  dialog.querySelector('.token-table tbody').replaceChildren(
    ...tokens.map((t) => {
      const revoke = h('button', { type: 'button', class: 'btn btn-small btn-quiet-danger', 'aria-label': `Revoke ${t.name}` }, 'Revoke');
      revoke.addEventListener('click', async () => {
        revoke.disabled = true;
        try {
          await api('DELETE', `/api/tokens/${encodeURIComponent(t.id)}`);
        } catch (err) {
          if (err.status !== 404) showError(`The token was not revoked: ${afterColon(err.message)}`);
        }
        await refreshList();
      });
      return h(
        'tr',
        { class: 'token-item', dataset: { id: String(t.id) } },
        h('td', { class: 'token-name' }, t.name),
        h('td', { class: 'token-scopes-cell' }, ...(t.scopes || []).map((s) => h('span', { class: 'chip' }, s))),
        h('td', {}, when(t.createdAt, '—')),
        h('td', {}, t.createdBy || '—'),
        h('td', {}, when(t.lastUsedAt, 'never')),
        h('td', {}, when(t.expiresAt, 'never')),
        h('td', {}, revoke),
      );
    }),
  );
}

/** Opens the dialog. */
export function openTokens() {
  if (!dialog) dialog = build();
  dialog.querySelector('.token-made').hidden = true;
  dialog.querySelector('#token-secret').value = '';
  dialog.querySelector('#token-expiry').value = String(DEFAULT_EXPIRY);
  showError('');
  if (!dialog.open) dialog.showModal();
  refreshList();
}
