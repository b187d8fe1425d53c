// The Share dialog of both pages: make a viewer or writer link (watch-only and 8 hours unless chosen otherwise), copy it, show it as a QR code (saying when its address is one only this computer reaches), list and revoke live links; what a share link's own visitor may do.

import { api } from './api.js';
import { afterColon, copyText, h } from './util.js';
import qrcode from './vendor/qrcode-generator/qrcode.mjs?v=2.0.4';

/** Expiry choices: seconds, or 0 for "until revoked or the session is removed". */
export const EXPIRIES = [
  [3600, '1 hour'],
  [8 * 3600, '8 hours'],
  [24 * 3600, '1 day'],
  [7 * 24 * 3600, '1 week'],
  [0, 'Never (until revoked)'],
];

/** What a new link allows unless the person chooses otherwise: watching, for a working day. */
export const DEFAULT_EXPIRY = 8 * 3600;

/** The expiry <select>, with DEFAULT_EXPIRY chosen. */
export function expirySelect(id) {
  return h('select', { id }, ...EXPIRIES.map(([s, label]) => h('option', { value: String(s), selected: s === DEFAULT_EXPIRY }, label)));
}

/** Whether `url`'s host is one only the computer it runs on can reach. */
export function isLoopback(url) {
  let host;
  try {
    host = new URL(url).hostname.toLowerCase();
  } catch {
    return false;
  }
  return host === 'localhost' || host.endsWith('.localhost') || /^127\./.test(host) || host === '[::1]' || host === '0.0.0.0' || host === '[::]';
}

/**
 * The warning for a link (or embedded page) whose address only this computer reaches: where to
 * look to make ptyhub reachable (the README's Deployment section); null for any other address.
 */
export function reachNote(url) {
  if (!isLoopback(url)) return null;
  const host = new URL(url).host;
  return h(
    'div',
    { class: 'notice notice-warn reach-note', role: 'note' },
    h('strong', {}, 'Only this computer can open it. '),
    `On a phone or another machine, ${host} is that device itself. To share beyond this computer, have ptyhub listen where others can reach it (`,
    h('code', {}, '--listen'),
    '), with TLS or behind a reverse proxy, and open this page there: see “Deployment” in ptyhub’s README.',
  );
}

const ROLE_WORDS = { viewer: 'Can watch', writer: 'Can type' };

/** An SVG QR code of `text`, drawn as one path (no innerHTML: the URL holds a token). */
export function qrSvg(text) {
  const qr = qrcode(0, 'M');
  qr.addData(text, 'Byte');
  qr.make();
  const n = qr.getModuleCount();
  const quiet = 4; // the quiet zone the QR standard asks for, in modules
  let d = '';
  for (let y = 0; y < n; y++) {
    for (let x = 0; x < n; x++) if (qr.isDark(y, x)) d += `M${x + quiet} ${y + quiet}h1v1h-1z`;
  }
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  const size = n + 2 * quiet;
  svg.setAttribute('viewBox', `0 0 ${size} ${size}`);
  svg.setAttribute('class', 'qr');
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', 'QR code of the link');
  svg.setAttribute('shape-rendering', 'crispEdges');
  const bg = document.createElementNS(ns, 'rect');
  bg.setAttribute('width', String(size));
  bg.setAttribute('height', String(size));
  bg.setAttribute('fill', '#fff');
  const path = document.createElementNS(ns, 'path');
  path.setAttribute('d', d);
  path.setAttribute('fill', '#000');
  svg.append(bg, path);
  return svg;
}

/** "expires in 3 h", "expires 12 Mar, 14:00", "no expiry". */
function expiryText(iso) {
  if (!iso) return 'no expiry';
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return '';
  const min = Math.round((t - Date.now()) / 60000);
  if (min <= 0) return 'expired';
  if (min < 60) return `expires in ${min} min`;
  if (min < 48 * 60) return `expires in ${Math.round(min / 60)} h`;
  return `expires ${new Date(t).toLocaleString(undefined, { day: 'numeric', month: 'short', hour: '2-digit', minute: '2-digit' })}`;
}

let dialog = null;
let current = null; // { id, title }

function build() {
  const role = h(
    'fieldset',
    { class: 'share-roles' },
    h('legend', {}, 'Whoever opens the link'),
    h('label', {}, h('input', { type: 'radio', name: 'share-role', value: 'viewer', checked: true }), ' ', h('strong', {}, 'can watch'), h('span', { class: 'muted' }, ' and chat, not type')),
    h('label', {}, h('input', { type: 'radio', name: 'share-role', value: 'writer' }), ' ', h('strong', {}, 'can type'), h('span', { class: 'muted' }, ' as you can')),
  );
  const expiry = expirySelect('share-expiry');
  const make = h('button', { type: 'submit', class: 'btn btn-primary', id: 'share-make' }, 'Create link');
  const form = h(
    'form',
    { class: 'share-form', novalidate: true },
    role,
    h('div', { class: 'share-make-row' }, h('label', { class: 'field share-expiry' }, h('span', {}, 'Link works for'), expiry), make),
  );
  const link = h('input', { type: 'text', id: 'share-link', readonly: true, 'aria-label': 'Share link', spellcheck: 'false' });
  const copy = h('button', { type: 'button', class: 'btn', id: 'share-copy' }, 'Copy');
  const made = h(
    'div',
    { class: 'share-made', hidden: true },
    h('p', { class: 'share-made-what' }),
    h('div', { class: 'share-reach' }),
    h('div', { class: 'share-link-row' }, link, copy),
    h('div', { class: 'share-qr' }),
  );
  const error = h('p', { class: 'form-error', role: 'alert', hidden: true });
  const list = h('ul', { class: 'share-list', 'aria-label': 'Live links' });
  const close = h('button', { type: 'button', class: 'btn', id: 'share-close' }, 'Close');
  const d = h(
    'dialog',
    { class: 'dialog dialog-share', id: 'share-dialog', 'aria-labelledby': 'share-title' },
    h('h2', { id: 'share-title' }, 'Share this session'),
    h('p', { class: 'share-lead' }, 'A link opens this session without your token, and only this session.'),
    h('div', { class: 'share-visitor', hidden: true }),
    form,
    error,
    made,
    h('h3', { class: 'share-list-title' }, 'Live links'),
    h('p', { class: 'share-none muted' }, 'None yet.'),
    list,
    h('div', { class: 'dialog-actions' }, close),
  );
  document.body.append(d);

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const chosen = form.querySelector('input[name="share-role"]:checked')?.value || 'viewer';
    const ttl = Number(expiry.value);
    const body = { role: chosen };
    if (ttl > 0) body.ttl = ttl;
    const { id } = current;
    make.disabled = true;
    showError('');
    try {
      const share = await api('POST', `/api/sessions/${encodeURIComponent(id)}/share`, body);
      if (current?.id !== id) return;
      const url = new URL(share.url, location.origin).href;
      link.value = url;
      made.querySelector('.share-made-what').textContent = `New link: ${ROLE_WORDS[share.role] || share.role}, ${expiryText(share.expiresAt)}. It is shown only now: copy it.`;
      made.querySelector('.share-reach').replaceChildren(...[reachNote(url)].filter(Boolean));
      made.querySelector('.share-qr').replaceChildren(qrSvg(url));
      made.hidden = false;
      copy.textContent = 'Copy';
      link.select();
      await refreshList();
    } catch (err) {
      showError(`No link was made: ${afterColon(err.message)}`);
    } finally {
      make.disabled = false;
    }
  });
  copy.addEventListener('click', async () => {
    try {
      await copyText(link.value);
      copy.textContent = 'Copied';
    } catch {
      link.select();
      copy.textContent = 'Select and copy it';
    }
  });
  close.addEventListener('click', () => d.close());
  d.addEventListener('close', () => current?.onClose?.());
  return d;
}

function showError(text) {
  const el = dialog.querySelector('.form-error');
  el.textContent = text;
  el.hidden = !text;
}

/** Lists the session's live links, each with a Revoke button. */
async function refreshList() {
  const { id } = current;
  const list = dialog.querySelector('.share-list');
  let shares;
  try {
    shares = await api('GET', `/api/sessions/${encodeURIComponent(id)}/share`);
  } catch (err) {
    if (err.status === 403) {
      showError('Only the owner of ptyhub (who has its token) can make and revoke links: this page was opened with a share link.');
      dialog.querySelector('.share-form').hidden = true;
    } else {
      showError(`The links could not be listed: ${afterColon(err.message)}`);
    }
    return;
  }
  if (current?.id !== id) return;
  shares = Array.isArray(shares) ? shares : [];
  shares.sort((a, b) => String(b.createdAt).localeCompare(String(a.createdAt)));
  dialog.querySelector('.share-none').hidden = shares.length > 0;
  list.replaceChildren(
    ...shares.map((s) => {
      const revoke = h('button', { type: 'button', class: 'btn btn-small btn-quiet-danger', 'aria-label': `Revoke the ${ROLE_WORDS[s.role]?.toLowerCase() || s.role} link made ${new Date(s.createdAt).toLocaleTimeString()}` }, 'Revoke');
      const li = h(
        'li',
        { class: 'share-item', dataset: { id: s.id, role: s.role } },
        h('span', { class: `chip share-role-${s.role}` }, ROLE_WORDS[s.role] || s.role),
        h('span', { class: 'share-when muted', title: new Date(s.createdAt).toLocaleString() }, `made ${new Date(s.createdAt).toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit' })}, ${expiryText(s.expiresAt)}`),
        revoke,
      );
      revoke.addEventListener('click', async () => {
        revoke.disabled = true;
        try {
          await api('DELETE', `/api/sessions/${encodeURIComponent(id)}/share/${encodeURIComponent(s.id)}`);
        } catch (err) {
          if (err.status !== 404) showError(`The link was not revoked: ${afterColon(err.message)}`);
        }
        await refreshList();
      });
      return li;
    }),
  );
}

/** What a share link's visitor may do, said in the dialog instead of the owner's controls. */
function visitorWords(link) {
  const can = link.role === 'writer' ? 'watch this session, type into it and chat' : 'watch this session and chat';
  return [
    h('p', {}, h('strong', {}, `The link you opened lets you ${can}. `), 'It reaches this session only, not ptyhub’s list of sessions.'),
    h(
      'p',
      { class: 'muted' },
      'Only ptyhub’s owner (who has its token) can make links: to bring someone else in, ask whoever sent you this link. ' +
        'This page’s address does not carry your access, so passing it on lets nobody in.',
    ),
  ];
}

/**
 * Opens the Share dialog for session `id`. `visitor`: the page was opened with this share link
 * ({role, record}), so the dialog says what it allows instead of offering to make links.
 * `onClose`: called when the dialog closes.
 */
export function openShare(id, title = '', { visitor = null, onClose = null } = {}) {
  if (!dialog) dialog = build();
  current = { id, title, onClose };
  dialog.querySelector('#share-title').textContent = visitor ? 'Sharing this session' : title ? `Share “${title}”` : 'Share this session';
  const owner = !visitor;
  const words = dialog.querySelector('.share-visitor');
  words.replaceChildren(...(visitor ? visitorWords(visitor) : []));
  words.hidden = owner;
  for (const sel of ['.share-lead', '.share-form', '.share-list-title', '.share-none', '.share-list']) dialog.querySelector(sel).hidden = !owner;
  // Each time: watch-only, for DEFAULT_EXPIRY, unless chosen otherwise now.
  dialog.querySelector('input[name="share-role"][value="viewer"]').checked = true;
  dialog.querySelector('#share-expiry').value = String(DEFAULT_EXPIRY);
  dialog.querySelector('.share-made').hidden = true;
  dialog.querySelector('#share-link').value = '';
  showError('');
  if (!dialog.open) dialog.showModal();
  if (owner) refreshList();
}
