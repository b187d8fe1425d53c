// The home page (/): the live sessions (who made each, who is in it), refreshed in place (marked stale while ptyhub cannot be reached); starting, opening, embedding and ending sessions and the API tokens, for admins only; the recordings of ended ones.

import { api, replayPath, sessionPath } from './api.js';
import { openEmbed } from './embed.js';
import { themeName } from './prefs.js';
import { isAdmin, whoAmI } from './me.js';
import { EndedRecordings } from './recordings.js';
import { openShare } from './share.js';
import { applyPageScheme } from './theme.js';
import { openTokens } from './tokens.js';
import { afterColon, exitWords, formatAge, h, shortId, validateName } from './util.js';

const REFRESH_MS = 2000;
const CONFIRM_MS = 4000;
const LAST_ASSISTANT = 'ptyhub.lastAssistant';

const $ = (id) => document.getElementById(id);
const list = $('sessions');
const rows = new Map(); // session id → its <li>, kept across refreshes so focus and a pending "confirm" survive

// ---- Errors for the whole page (can't reach ptyhub, not authorised) -----------------------------

function pageError(text) {
  const el = $('page-error');
  el.textContent = text || '';
  el.hidden = !text;
}

// ---- The session list -------------------------------------------------------------------------

function stateOf(s) {
  if (s.alive) return { kind: 'running', text: 'running' };
  if (s.exitSignal) return { kind: 'exited', text: exitWords(s.exitCode, s.exitSignal), detail: s.exitSignal };
  if (s.exitCode === null || s.exitCode === undefined) return { kind: 'exited', text: 'ended' };
  return { kind: s.exitCode === 0 ? 'exited' : 'failed', text: exitWords(s.exitCode, null) };
}

function buildRow(s) {
  const end = h('button', { type: 'button', class: 'btn btn-quiet-danger end-btn admin-only' });
  const li = h(
    'li',
    { class: 'session', dataset: { id: s.id } },
    h(
      'div',
      { class: 'session-main' },
      h('a', { class: 'session-name', href: sessionPath(s.id) }, h('span', { class: 'name-text' }), h('span', { class: 'session-id muted' })),
      h(
        'div',
        { class: 'session-meta' },
        h('span', { class: 'chip session-assistant' }),
        h('span', { class: 'session-state' }, h('span', { class: 'dot', 'aria-hidden': 'true' }), h('span', { class: 'state-text' })),
        h('span', { class: 'session-by', hidden: true }),
        h('span', { class: 'session-viewers' }),
        h('span', { class: 'activity', title: 'Quiet', 'aria-label': 'Quiet' }),
        h('span', { class: 'session-size' }),
        h('span', { class: 'session-age' }),
        h('span', { class: 'chip chip-warn session-yolo', hidden: true }, 'YOLO'),
        h('span', { class: 'chip session-host', hidden: true }),
      ),
      h('div', { class: 'session-dir muted' }),
    ),
    h(
      'div',
      { class: 'session-actions' },
      h('a', { class: 'btn btn-primary open-btn', href: sessionPath(s.id) }, 'Open'),
      h('a', { class: 'btn replay-btn', href: replayPath(s.id), title: 'Play back what this session recorded' }, 'Replay'),
      h('button', { type: 'button', class: 'btn share-btn admin-only', onclick: () => openShare(s.id, li.querySelector('.session-name').classList.contains('unnamed') ? '' : li.querySelector('.name-text').textContent) }, 'Share'),
      h('button', { type: 'button', class: 'btn embed-btn admin-only', onclick: () => openEmbed(s.id, li.querySelector('.name-text').textContent) }, 'Embed'),
      end,
    ),
  );
  let confirmTimer = 0;
  end.addEventListener('click', async () => {
    if (!end.classList.contains('confirm')) {
      end.classList.add('confirm');
      end.textContent = 'Click again to end';
      confirmTimer = setTimeout(() => resetEnd(li), CONFIRM_MS);
      return;
    }
    clearTimeout(confirmTimer);
    end.disabled = true;
    end.textContent = 'Ending…';
    try {
      await api('DELETE', `/api/sessions/${encodeURIComponent(s.id)}`);
      li.classList.add('leaving');
    } catch (e) {
      pageError(`The session was not ended: ${afterColon(e.message)}`);
      end.disabled = false;
      resetEnd(li);
    }
    refresh();
  });
  return li;
}

function resetEnd(li) {
  const end = li.querySelector('.end-btn');
  end.classList.remove('confirm');
  end.textContent = li.dataset.alive === 'true' ? 'End' : 'Remove';
  end.title = li.dataset.alive === 'true' ? 'Stop its program and remove the session' : 'Remove this ended session from the list';
}

function updateRow(li, s) {
  const named = Boolean(s.name);
  li.querySelector('.name-text').textContent = named ? s.name : 'Unnamed session';
  li.querySelector('.session-name').classList.toggle('unnamed', !named);
  li.querySelector('.session-id').textContent = shortId(s.id);
  li.querySelector('.session-assistant').textContent = s.assistantName || s.assistant;
  const st = stateOf(s);
  li.querySelector('.session-state').dataset.state = st.kind;
  li.querySelector('.state-text').textContent = st.text;
  li.querySelector('.session-state').title = st.detail || '';
  const by = li.querySelector('.session-by');
  by.textContent = s.createdBy ? `by ${s.createdBy}` : '';
  by.hidden = !s.createdBy;
  const people = Array.isArray(s.people) ? s.people : [];
  const viewers = li.querySelector('.session-viewers');
  const count = s.viewers === 1 ? '1 viewer' : `${s.viewers} viewers`;
  viewers.textContent = people.length ? `${count}: ${people.join(', ')}` : count;
  viewers.title = viewers.textContent;
  // The dot lights while the program writes output (its byte count moved since the last look).
  const dot = li.querySelector('.activity');
  const before = Number(li.dataset.outputBytes);
  const active = s.alive && Number.isFinite(before) && typeof s.outputBytes === 'number' && s.outputBytes > before;
  li.dataset.outputBytes = String(s.outputBytes ?? '');
  dot.classList.toggle('active', active);
  dot.title = active ? 'Writing output now' : 'Quiet';
  dot.setAttribute('aria-label', dot.title);
  li.querySelector('.session-size').textContent = `${s.cols}×${s.rows}`;
  const age = li.querySelector('.session-age');
  age.textContent = `started ${formatAge(s.createdAt)}`;
  age.title = new Date(s.createdAt).toLocaleString();
  li.querySelector('.session-yolo').hidden = !s.yoloMode;
  // Which host runs it, once the list is more than this host's.
  const host = li.querySelector('.session-host');
  host.textContent = s.host ? `on ${s.host}` : '';
  host.hidden = !s.host || !manyHosts;
  const dir = li.querySelector('.session-dir');
  dir.textContent = s.workDir || '';
  dir.title = s.workDir || '';
  li.querySelector('.open-btn').setAttribute('aria-label', `Open ${named ? s.name : `session ${shortId(s.id)}`}`);
  li.querySelector('.share-btn').setAttribute('aria-label', `Share ${named ? s.name : `session ${shortId(s.id)}`}`);
  li.querySelector('.embed-btn').setAttribute('aria-label', `Embed ${named ? s.name : `session ${shortId(s.id)}`} in another page`);
  // A link to an ended session would lead nowhere.
  li.querySelector('.share-btn').hidden = !s.alive;
  li.querySelector('.embed-btn').hidden = !s.alive;
  const wasAlive = li.dataset.alive;
  li.dataset.alive = String(s.alive);
  const end = li.querySelector('.end-btn');
  end.setAttribute('aria-label', `${s.alive ? 'End' : 'Remove'} ${named ? s.name : `session ${shortId(s.id)}`}`);
  if (wasAlive !== li.dataset.alive && !end.classList.contains('confirm') && !end.disabled) resetEnd(li);
}

function render(sessions) {
  // Newest first: the session you just started is at the top.
  sessions.sort((a, b) => String(b.createdAt).localeCompare(String(a.createdAt)));
  const seen = new Set();
  let prev = null;
  for (const s of sessions) {
    seen.add(s.id);
    let li = rows.get(s.id);
    if (!li) {
      li = buildRow(s);
      rows.set(s.id, li);
    }
    updateRow(li, s);
    const want = prev ? prev.nextSibling : list.firstChild;
    if (want !== li) list.insertBefore(li, want);
    prev = li;
  }
  for (const [id, li] of rows) {
    if (!seen.has(id)) {
      li.remove();
      rows.delete(id);
    }
  }
  $('empty').hidden = sessions.length > 0;
  list.hidden = sessions.length === 0;
  $('session-count').textContent = sessions.length ? `(${sessions.length})` : '';
  ended.update(sessions.map((s) => s.id));
}

const ended = new EndedRecordings(document.querySelector('.home-main'));
const staleNote = h('p', { class: 'notice notice-warn stale-note', id: 'stale-note', role: 'status', hidden: true });
$('host-note').before(staleNote);
let lastSeen = null;

/** While ptyhub cannot be reached the list is as it last was: say so, and claim no session is running. */
function markStale(stale) {
  list.closest('.card').classList.toggle('stale', stale);
  staleNote.hidden = !stale;
  if (!stale) return;
  const when = lastSeen ? ` as it was at ${lastSeen.toLocaleTimeString()}` : '';
  staleNote.textContent = `ptyhub cannot be reached: these are the sessions${when}, and may have changed since. The list comes back by itself.`;
  for (const li of rows.values()) {
    if (li.dataset.alive !== 'true') continue;
    li.querySelector('.session-state').dataset.state = 'unknown';
    li.querySelector('.state-text').textContent = 'last seen running';
  }
}

let refreshing = null;
/** Whether the list holds more hosts than this one (`[cluster] peers`). */
let manyHosts = false;

/** Says which host's sessions these are, and which peers did not answer. */
function showHosts(data) {
  const hosts = Array.isArray(data.hosts) ? data.hosts : [];
  manyHosts = hosts.length > 1;
  const note = $('host-note');
  const reached = hosts.filter((x) => x.reachable).map((x) => x.host);
  note.textContent = manyHosts
    ? `Sessions of ${reached.length} of ${hosts.length} hosts (${reached.join(', ')}), listed by ${data.host}.`
    : `Sessions on this host, ${data.host}.`;
  note.hidden = !data.host;
  const problems = $('host-problems');
  const down = hosts.filter((x) => !x.reachable);
  problems.replaceChildren(...down.map((x) => h('li', { class: 'notice notice-error host-unreachable' }, `${x.url}: unreachable (${x.error || 'no answer'})`)));
  problems.hidden = down.length === 0;
}

/** Fetches the list (this host's and its peers') and updates the page; concurrent calls share one request. */
function refresh() {
  if (!refreshing) {
    refreshing = api('GET', '/api/sessions?all=1')
      .then((data) => {
        showHosts(data || {});
        render(Array.isArray(data?.sessions) ? data.sessions : []);
        lastSeen = new Date();
        markStale(false);
        pageError('');
      })
      .catch((e) => {
        pageError(e.status === 401 ? e.message : `${e.message} Retrying…`);
        if (e.status !== 401) markStale(true);
      })
      .finally(() => {
        refreshing = null;
      });
  }
  return refreshing;
}

// ---- New session --------------------------------------------------------------------------------

async function loadAssistants() {
  const select = $('assistant');
  let assistants;
  try {
    assistants = await api('GET', '/api/assistants');
  } catch (e) {
    select.replaceChildren(h('option', { value: '' }, 'Unavailable'));
    pageError(e.message);
    return;
  }
  let last = '';
  try {
    last = localStorage.getItem(LAST_ASSISTANT) || '';
  } catch {
    // Storage blocked: no preference.
  }
  const usable = assistants.filter((a) => a.available);
  const pick = usable.find((a) => a.key === last) || usable[0];
  select.replaceChildren(
    ...assistants.map((a) =>
      h(
        'option',
        { value: a.key, disabled: !a.available, selected: pick && a.key === pick.key, title: a.reason || undefined },
        a.available ? a.name : `${a.name} (not available)`,
      ),
    ),
  );
  // Which assistants cannot run here, and why, without a wall of text: the names, reasons on demand.
  const missing = assistants.filter((a) => !a.available);
  const note = $('assistant-note');
  note.hidden = missing.length === 0;
  note.replaceChildren(
    h(
      'details',
      {},
      h('summary', {}, `Not available on this machine: ${missing.map((a) => a.name).join(', ')}`),
      h('ul', {}, ...missing.map((a) => h('li', {}, h('strong', {}, a.name), `: ${a.reason || 'not installed'}`))),
    ),
  );
  if (!usable.length) {
    formError('No assistant can run on this machine. Install one of the programs above, or add an assistant to ptyhub\'s configuration.');
    $('new-submit').disabled = true;
  }
}

function formError(text) {
  const el = $('new-error');
  el.textContent = text || '';
  el.hidden = !text;
}

$('new-name').addEventListener('input', (e) => {
  const v = validateName(e.target.value);
  formError(v.ok ? '' : v.error);
  e.target.setAttribute('aria-invalid', String(!v.ok));
});

$('new-session').addEventListener('submit', async (e) => {
  e.preventDefault();
  const assistant = $('assistant').value;
  const name = validateName($('new-name').value);
  const cwd = $('new-cwd').value.trim();
  if (!assistant) {
    formError('Choose an assistant first.');
    $('assistant').focus();
    return;
  }
  if (!name.ok) {
    formError(name.error);
    $('new-name').focus();
    return;
  }
  formError('');
  const submit = $('new-submit');
  submit.disabled = true;
  submit.textContent = 'Starting…';
  try {
    const body = { assistant };
    if (name.name) body.name = name.name;
    if (cwd) body.cwd = cwd;
    // The page chooses the uuid and puts it in the query, where a load balancer in front of
    // several hosts routes on it: the session starts on the host its page will then reach.
    const id = newUuid();
    const session = await api('POST', `/api/sessions?uuid=${id}`, body);
    try {
      localStorage.setItem(LAST_ASSISTANT, assistant);
    } catch {
      // Not remembered; nothing else changes.
    }
    location.href = sessionPath(session.id);
  } catch (err) {
    formError(`The session was not started: ${afterColon(err.message)}`);
    submit.disabled = false;
    submit.textContent = 'Start session';
  }
});

/** A random (version 4) uuid; crypto.randomUUID exists only on secure origins, this everywhere. */
function newUuid() {
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const x = [...b].map((v) => v.toString(16).padStart(2, '0')).join('');
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
}

// ---- Who is here ---------------------------------------------------------------------------------

/** Says who this browser is, and offers the admins' controls (new session, share, embed, end, tokens) only to admins. */
async function showWho() {
  const me = await whoAmI();
  const admin = isAdmin(me);
  document.body.classList.toggle('not-admin', !admin);
  const who = $('whoami');
  who.textContent = me?.name ? `Signed in as ${me.name}` : '';
  who.hidden = !me?.name;
  $('tokens-open').hidden = !admin || !me;
}
$('tokens-open').addEventListener('click', () => openTokens());

// ---- Start --------------------------------------------------------------------------------------

applyPageScheme(themeName());
showWho();
loadAssistants();
refresh();
setInterval(() => {
  if (document.visibilityState === 'visible') refresh();
}, REFRESH_MS);
document.addEventListener('visibilitychange', () => {
  if (document.visibilityState === 'visible') refresh();
});
// The browser's back button can show this page from its cache: bring it up to date.
addEventListener('pageshow', (e) => {
  if (e.persisted) refresh();
});

/** For tests and the browser console. */
window.ptyhub = { refresh, whoAmI };
