// The terminal page (/session/{uuid}): wires xterm.js, the connection and the page's parts (status bar, rename, YOLO, chat, files, size, ending).

import { api, at, foreignParams, homePath, linkAccess, replayPath, withQuery } from './api.js';
import { ChatPanel } from './chat.js';
import { Connection } from './connection.js';
import { ConnStatus } from './connstatus.js';
import { StatePill } from './statepill.js';
import { acceptFiles } from './dropzone.js';
import { EndScreens } from './ending.js';
import { closeMeaning, errorText, refusalText } from './errors.js';
import { askGuestName } from './guestname.js';
import { KeyBar } from './keybar.js';
import { guestAsked, isAdmin, rememberGuestName, whoAmI } from './me.js';
import { OutputPipe } from './output.js';
import { Prefs, SearchBar, newOutputPill } from './prefs.js';
import { PresenceView, deviceKind } from './presence.js';
import { binaryStringBytes, inputFrames } from './protocol.js';
import { Rename } from './rename.js';
import { openShare } from './share.js';
import { SizePolicy } from './sizing.js';
import { StatusBar } from './statusbar.js';
import { createTerminal } from './termview.js';
import { notify } from './toast.js';
import { Uploader } from './upload.js';
import { trackViewport } from './viewport.js';
import { YoloButton } from './yolo.js';

const $ = (id) => document.getElementById(id);

// ---- The session this page is about ------------------------------------------------------------

const uuid = decodeURIComponent(location.pathname.split('/').filter(Boolean).pop() || '');
const query = new URLSearchParams(location.search);
/** assistant/name/cwd create the session on the first join; once it exists they are dropped. */
let create = { assistant: query.get('assistant'), name: query.get('name'), cwd: query.get('cwd') };

const state = {
  status: null, // last `status`
  ready: false, // this connection got `ready`
  everReady: false,
  exit: null, // the `exit` message, once the program has ended
  ended: false, // closed with 4003
  fatal: false, // nothing more to do here (4002, 1008)
  lastError: null,
  conn: 'connecting',
  retryAt: 0,
  closeReason: '',
  daemonAway: false, // ptyhub stopped or restarted (1001, 1012) since this page was last live
  daemonRestarting: false, // ...and said it is restarting (1012): it will be right back
  link: undefined, // how this page was opened: undefined until known, null with the daemon token, {role, record} with a share link
  me: undefined, // who this browser is (GET /api/me): undefined until known, null when it cannot be told
};

for (const a of document.querySelectorAll('#home-link, #fatal-home, #exit-home')) a.href = homePath();
$('replay-link').href = replayPath(uuid);

const coarse = matchMedia('(pointer: coarse)');
// The bundled font first (briefly: a slow network must not keep the terminal away), so that xterm
// measures its cells in the font it draws with.
await Promise.race([document.fonts.load('400 14px "JetBrains Mono"'), new Promise((r) => setTimeout(r, 1500))]).catch(() => {});
const { term, fit, search } = createTerminal($('terminal'), { notify });
trackViewport();
const keybar = new KeyBar($('keybar'), term);

// ---- The connection ----------------------------------------------------------------------------

function wsURL() {
  const params = foreignParams(['assistant', 'name', 'cwd', 'flow']);
  for (const [k, v] of Object.entries(create)) if (v) params.set(k, v);
  params.set('flow', 'ack');
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  return withQuery(`${proto}//${location.host}${at(`/ws/${encodeURIComponent(uuid)}`)}`, params);
}

const pipe = new OutputPipe(term, {
  ack: (bytes) => conn.sendJSON({ type: 'ack', bytes }),
});

const conn = new Connection(wsURL, {
  open: onOpen,
  binary: (bytes) => pipe.binary(bytes),
  message: onMessage,
  close: onClose,
  state: ({ state: s, retryAt }) => {
    state.conn = s;
    state.retryAt = retryAt;
    connStatus.render();
  },
});
const send = (obj) => conn.sendJSON(obj);

// ---- The page's parts --------------------------------------------------------------------------

const statusBar = new StatusBar({ bar: document.querySelector('header.bar'), term, uuid, state });
const connStatus = new ConnStatus({ indicator: $('conn'), banner: $('banner'), retry: $('retry'), retryNow: () => conn.retryNow(), state });
const presence = new PresenceView({ chip: $('viewers'), typing: $('typing'), parent: document.querySelector('.workspace') });
let prefs = null;
const size = new SizePolicy({
  fit,
  term,
  pipe,
  conn,
  state,
  frame: $('frame'),
  host: $('terminal'),
  hint: $('size-hint'),
  people: () => presence.people,
  onMode: (m) => prefs?.sizeMode(m),
});
prefs = new Prefs({
  term,
  button: $('prefs-toggle'),
  size,
  status: () => state.status,
  relayout: () => {
    if (!state.status) size.fill();
    size.send();
    size.renderHint();
  },
});
const searchBar = new SearchBar({ term, search, button: $('search-toggle'), parent: $('frame') });
newOutputPill(term, $('frame'));
const yolo = new YoloButton({ button: $('yolo'), state, send, notify });
const screens = new EndScreens({ dialog: $('exit-dialog'), fatal: $('fatal'), state });
new Rename({
  button: $('name'),
  form: $('rename'),
  allowed: () => Boolean(state.status && !state.status.readOnly && !state.ended && conn.open),
  current: () => state.status?.sessionName || '',
  send,
  done: () => term.focus(),
});
const chat = new ChatPanel({
  panel: $('chat'),
  toggle: $('chat-toggle'),
  send,
  notify,
  onToggle: (open) => {
    if (!open && !state.fatal) term.focus();
  },
});
$('share').addEventListener('click', () => openShare(uuid, state.status?.sessionName || '', { visitor: state.link, onClose: giveBackKeys }));
const uploader = new Uploader({ conn, term, notify, writable });
acceptFiles({ button: $('upload'), input: $('file-input'), overlay: $('drop'), add: (files, o) => uploader.add(files, o) });
$('exit-dialog').addEventListener('close', giveBackKeys);

/** The keyboard back to the terminal (after a popover or dialog closed), unless there is nothing to type into. */
function giveBackKeys() {
  if (!state.fatal) term.focus();
}

// Escape closes whatever is open over the terminal (panels, search, chat) and gives the keys back
// to it. With nothing open it is the program's, as always.
const popovers = [
  { open: () => !$('prefs').hidden, close: () => prefs.toggle(false) },
  { open: () => !$('people').hidden, close: () => presence.toggle(false) },
  { open: () => !$('search').hidden, close: () => searchBar.toggle(false) },
  { open: () => chat.isOpen, close: () => chat.setOpen(false) },
];
document.addEventListener(
  'keydown',
  (e) => {
    if (e.key !== 'Escape' || e.defaultPrevented || document.querySelector('dialog[open]')) return;
    const open = popovers.filter((p) => p.open());
    if (!open.length) return;
    e.preventDefault();
    e.stopPropagation();
    for (const p of open) p.close();
    giveBackKeys();
  },
  true,
);

// ---- Input -------------------------------------------------------------------------------------

function writable() {
  return conn.open && !state.exit && !state.status?.readOnly;
}

let typingNoted = 0;
function sendInput(data) {
  for (const frame of inputFrames(data)) conn.send(frame);
  // The board (board.js) raises no notification for the session you are typing in.
  const now = Date.now();
  if (now - typingNoted > 1000) {
    typingNoted = now;
    try {
      localStorage.setItem('ptyhub.typingIn', JSON.stringify({ id: uuid, at: now }));
    } catch {
      // Storage blocked: the board may notify about this session too.
    }
  }
}

term.onData((data) => {
  if (!writable()) return;
  sendInput(keybar.apply(data));
  size.typed();
});
term.onBinary((s) => {
  if (writable()) sendInput(binaryStringBytes(s));
});

// ---- What the server says ----------------------------------------------------------------------

function onOpen() {
  state.ready = false;
  size.reset();
  pipe.begin();
  chat.clear();
  // Our size goes out with the first status, which says whether we may send one (read-only links may not).
}

const statePill = new StatePill($('state'));

function onMessage(msg) {
  switch (msg?.type) {
    case 'status':
      onStatus(msg);
      statePill.update(msg);
      break;
    case 'state':
      statePill.update(msg);
      break;
    case 'ready':
      onReady();
      break;
    case 'chat':
      chat.add(msg, { live: state.ready });
      break;
    case 'presence':
      presence.update(msg);
      // Who else may type decides whether a following page sizes the session, and the size
      // hint names whose windows size it.
      size.send();
      size.renderHint();
      break;
    case 'file_upload':
      uploader.reply(msg);
      break;
    case 'exit':
      onExit(msg);
      break;
    case 'error':
      onServerError(msg);
      break;
    default:
      // A newer server may send more: ignore what we don't know.
      break;
  }
}

function onReady() {
  state.ready = true;
  // Who we are for the others' viewer lists: the chat name (once chosen) and the device kind.
  send({ type: 'presence', name: chat.name || null, device: deviceKind() });
  state.daemonAway = false;
  state.daemonRestarting = false;
  conn.healthy();
  if (!state.everReady) {
    state.everReady = true;
    if (!coarse.matches) term.focus();
  }
  // The session exists now. Reloading this page (or reconnecting after it was ended) must join,
  // never silently create a new session under the same id.
  create = {};
  const url = new URL(location.href);
  for (const k of ['assistant', 'name', 'cwd']) url.searchParams.delete(k);
  history.replaceState(history.state, '', url.pathname + url.search + url.hash);
  connStatus.render();
}

function onStatus(s) {
  const first = pipe.gated;
  // The first status of a connection carries the size the snapshot was taken at.
  if (first) pipe.openGate(s.cols, s.rows);
  else pipe.resize(s.cols, s.rows);
  state.status = s;
  yolo.status(s);
  $('restart-note').hidden = !s.restarting;
  term.options.disableStdin = Boolean(s.readOnly || state.exit);
  renderAccess();
  // Every status: who else is here decides whether a "don't size from me" page sizes it.
  size.send();
  statusBar.render();
  size.renderHint();
}

function onExit(msg) {
  state.exit = msg;
  term.options.disableStdin = true;
  yolo.exited();
  sessionGone();
}

/**
 * What this page offers for how it was opened and what the session is now: Share (not for a
 * watch-only link, nor once the session has ended: its links would lead nowhere), the key bar
 * (only where input is allowed), and for a share link's visitor no way to the pages the link
 * does not reach (the list of sessions; the replay, unless the link was made with `record`).
 */
function renderAccess() {
  const s = state.status;
  const over = Boolean(state.exit || state.ended || state.fatal);
  // A user without the admin scope cannot make links (a guest's dialog says what its link allows).
  const mayShare = !state.me || state.me.guest || isAdmin(state.me);
  $('share').hidden = !s || Boolean(s.readOnly) || over || !mayShare;
  document.body.classList.toggle('no-input', over || !s || Boolean(s.readOnly));
  if (state.link === undefined) return;
  const visitor = Boolean(state.link);
  document.body.classList.toggle('link-visitor', visitor);
  const home = $('home-link');
  if (visitor) {
    home.removeAttribute('href');
    home.title = 'ptyhub';
  }
  $('exit-home').hidden = visitor;
  $('fatal-home').hidden = visitor;
  $('replay-link').hidden = visitor && !state.link.record;
}

function onServerError(msg) {
  state.lastError = msg;
  if (msg.code === 'session_create_failed') return; // the close (4002) that follows says it
  yolo.error(msg.code);
  notify('error', errorText(msg.code, msg.message));
}

function onClose(info) {
  state.ready = false;
  presence.clear();
  uploader.fail();
  const m = closeMeaning(info, { exited: Boolean(state.exit), lastError: state.lastError, daemonAway: state.daemonAway });
  if (m.away) {
    state.daemonAway = true;
    state.daemonRestarting = Boolean(m.now);
  }
  state.closeReason = m.why || '';
  if (m.notice) notify(...m.notice);
  if (m.ended) {
    state.ended = true;
    sessionGone();
  }
  if (m.fatal) showFatal(...m.fatal, { gone: Boolean(m.gone) });
  // A refused upgrade (401, 403, 404...) reaches a browser as a bare 1006: ask the API why.
  if (m.retry && !info.opened) probe();
  if (m.retry && m.now) return 'now';
  return Boolean(m.retry);
}

/** After a connection that never opened: stop retrying if the API says we never will get in. */
async function probe() {
  let res;
  try {
    res = await fetch(at(`/api/sessions/${encodeURIComponent(uuid)}`), { credentials: 'same-origin', cache: 'no-store' });
  } catch {
    return; // ptyhub is down: keep retrying
  }
  const refused = refusalText(res.status, Boolean(create.assistant), state.daemonAway, Boolean(state.link));
  if (!refused) return;
  showFatal(...refused, { gone: res.status === 404 });
  conn.stop(true);
}

// ---- Ending ------------------------------------------------------------------------------------

/** The program exited or the session was ended: the output stays readable. */
function sessionGone() {
  screens.showEnd();
  if (state.ended) statusBar.ended();
  renderAccess();
  connStatus.render();
}

/**
 * Nothing more to do here: no reconnect. `gone`: the session no longer exists (removed, or it
 * did not survive a restart of ptyhub); a page that showed it keeps its last screen in view,
 * and offers its recording when there is one.
 */
function showFatal(title, text, { gone = false } = {}) {
  state.fatal = true;
  const keep = gone && state.everReady;
  screens.showFatal(title, keep ? `${text} Its last screen is still shown here.` : text, { keepScreen: keep });
  chat.setOpen(false);
  term.options.disableStdin = true;
  renderAccess();
  connStatus.render();
  if (gone && (!state.link || state.link.record)) offerRecording();
}

/** Shows the fatal box's "Replay its recording" once the recording is known to be there. */
async function offerRecording() {
  try {
    await api('GET', `/api/recordings/${encodeURIComponent(uuid)}`);
  } catch {
    return; // no recording (or recording is off): nothing to offer
  }
  const replay = $('fatal-replay');
  replay.href = replayPath(uuid);
  replay.hidden = false;
}

// ---- Start --------------------------------------------------------------------------------------

size.fill(); // before anything else, fill the window
connStatus.render();
linkAccess(uuid).then((link) => {
  state.link = link;
  renderAccess();
});
// A user chats under its verified name; a guest is asked once for the name the others see.
whoAmI().then(async (me) => {
  state.me = me;
  renderAccess();
  if (me?.name && !me.guest) {
    chat.setUser(me.name);
  } else if (me?.guest && !guestAsked()) {
    const name = await askGuestName();
    rememberGuestName(name);
    if (name) {
      chat.setGuestName(name);
      send({ type: 'presence', name });
    }
    giveBackKeys();
  }
});
if (!/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(uuid)) {
  showFatal('This is not a session address', 'Session addresses end in a UUID. Go back to the list and open a session from there.');
} else {
  conn.start();
}

/** Handles for tests and for poking around in the browser console. */
window.ptyhub = {
  term,
  conn,
  pipe,
  state,
  chat,
  yolo,
  uuid,
  size,
  prefs,
  presence,
  whoAmI,
  search,
  searchBar,
  keybar,
  wantedSize: () => size.wanted(),
  /** The active buffer as text: trailing spaces and trailing empty lines removed. */
  text() {
    const b = term.buffer.active;
    const lines = [];
    for (let i = 0; i < b.length; i++) lines.push(b.getLine(i)?.translateToString(true) ?? '');
    while (lines.length && lines[lines.length - 1] === '') lines.pop();
    return lines.join('\n');
  },
};
