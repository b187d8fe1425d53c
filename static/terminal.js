// The terminal page (/session/{uuid}): xterm.js wired to the session, with its status bar, chat, uploads, YOLO, exit and errors.

// vendor/ is cached for a day without revalidation: the version in each URL makes an upgraded
// ptyhub load the new library at once (keep them in step with vendor/README.md).
import { Terminal } from './vendor/xterm/xterm.mjs?v=6.0.0';
import { FitAddon } from './vendor/addon-fit/addon-fit.mjs?v=0.11.0';
import { WebLinksAddon } from './vendor/addon-web-links/addon-web-links.mjs?v=0.12.0';
import { Unicode11Addon } from './vendor/addon-unicode11/addon-unicode11.mjs?v=0.9.0';
import { WebglAddon } from './vendor/addon-webgl/addon-webgl.mjs?v=0.19.0';
import { UNAUTHORISED, foreignParams, homePath, withQuery } from './api.js';
import { ChatPanel } from './chat.js';
import { Connection } from './connection.js';
import { CLOSE, createFailedText, errorText } from './errors.js';
import { KeyBar } from './keybar.js';
import { OutputPipe } from './output.js';
import { binaryStringBytes, inputFrames, resizeFrame } from './protocol.js';
import { followTheme, terminalThemeOptions } from './theme.js';
import { notify } from './toast.js';
import { Uploader } from './upload.js';
import { debounce, describeExit, shortId, validateName } from './util.js';
import { trackViewport } from './viewport.js';

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
  restarting: false,
  sentSize: null,
};

for (const a of document.querySelectorAll('#home-link, #fatal-home, #exit-home')) a.href = homePath();

// ---- xterm.js ----------------------------------------------------------------------------------

const narrow = matchMedia('(max-width: 640px)');
const coarse = matchMedia('(pointer: coarse)');

const term = new Terminal({
  allowProposedApi: true, // the unicode11 addon registers through the proposed unicode API
  fontFamily: '"JetBrains Mono", "Cascadia Mono", "SF Mono", ui-monospace, Menlo, Consolas, "DejaVu Sans Mono", "Liberation Mono", monospace',
  fontSize: narrow.matches ? 13 : 14,
  cursorBlink: true,
  scrollback: 5000,
  macOptionIsMeta: true,
  rightClickSelectsWord: true,
  ...terminalThemeOptions(),
});
const fit = new FitAddon();
term.loadAddon(fit);
term.loadAddon(new WebLinksAddon());
term.loadAddon(new Unicode11Addon());
term.unicode.activeVersion = '11';
term.open($('terminal'));
try {
  // WebGL draws much faster than the DOM renderer; without a usable GPU context xterm keeps the DOM one.
  const webgl = new WebglAddon();
  webgl.onContextLoss(() => webgl.dispose());
  term.loadAddon(webgl);
} catch (e) {
  console.info('ptyhub: WebGL renderer unavailable, using the DOM renderer:', e.message || e);
}
followTheme((o) => {
  term.options.theme = o.theme;
  term.options.minimumContrastRatio = o.minimumContrastRatio;
});
trackViewport();

const keybar = new KeyBar($('keybar'), term);

/** Copies text, also where the async clipboard API is not offered (plain http on another host). */
function copyText(text) {
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

// Ctrl+C belongs to the program (interrupt), so copying is Ctrl+Shift+C, as in desktop terminals,
// and Ctrl+Shift+V pastes (left to the browser, whose paste event xterm turns into input).
term.attachCustomKeyEventHandler((e) => {
  if (e.type !== 'keydown' || !e.ctrlKey || !e.shiftKey || e.altKey || e.metaKey) return true;
  if (e.code === 'KeyC') {
    if (term.hasSelection()) copyText(term.getSelection()).catch(() => notify('error', 'The selection could not be copied.'));
    e.preventDefault();
    return false;
  }
  if (e.code === 'KeyV') return false;
  return true;
});

// ---- The connection ----------------------------------------------------------------------------

function wsURL() {
  const params = foreignParams(['assistant', 'name', 'cwd', 'flow']);
  for (const [k, v] of Object.entries(create)) if (v) params.set(k, v);
  params.set('flow', 'ack');
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  return withQuery(`${proto}//${location.host}/ws/${encodeURIComponent(uuid)}`, params);
}

const pipe = new OutputPipe(term, {
  ack: (bytes) => conn.sendJSON({ type: 'ack', bytes }),
  output: (bytes) => watchRestart(bytes),
});

const conn = new Connection(wsURL, {
  open: onOpen,
  binary: (bytes) => pipe.binary(bytes),
  message: onMessage,
  close: onClose,
  state: ({ state: s, retryAt }) => {
    state.conn = s;
    state.retryAt = retryAt;
    renderConn();
  },
});

function writable() {
  return conn.open && !state.exit && !state.status?.readOnly;
}

function sendInput(data) {
  for (const frame of inputFrames(data)) conn.send(frame);
}

term.onData((data) => {
  if (writable()) sendInput(keybar.apply(data));
});
term.onBinary((s) => {
  if (writable()) sendInput(binaryStringBytes(s));
});

function onOpen() {
  state.ready = false;
  state.sentSize = null;
  pipe.begin();
  chat.clear();
  // Our size goes out with the first status, which says whether we may send one (read-only links may not).
}

function onMessage(msg) {
  switch (msg?.type) {
    case 'status':
      onStatus(msg);
      break;
    case 'ready':
      onReady();
      break;
    case 'chat':
      chat.add(msg, { live: state.ready });
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
  renderConn();
}

function onStatus(s) {
  const prev = state.status;
  const first = pipe.gated;
  // The first status of a connection carries the size the snapshot was taken at.
  if (first) pipe.openGate(s.cols, s.rows);
  else pipe.resize(s.cols, s.rows);
  if (typeof s.restarting === 'boolean') setRestarting(s.restarting);
  else if (prev && prev.yoloMode !== s.yoloMode) setRestarting(true);
  state.status = s;
  term.options.disableStdin = Boolean(s.readOnly || state.exit);
  if (first) sendSize();
  renderStatus();
}

function onExit(msg) {
  state.exit = msg;
  term.options.disableStdin = true;
  setRestarting(false);
  showEndDialog();
  renderConn();
}

function onServerError(msg) {
  state.lastError = msg;
  if (msg.code === 'session_create_failed') return; // the close (4002) that follows says it
  if (msg.code === 'restart_in_progress') setRestarting(true);
  if (msg.code === 'yolo_unsupported' || msg.code === 'not_running') setRestarting(false);
  notify('error', errorText(msg.code, msg.message));
}

function onClose({ code, reason, opened }) {
  state.ready = false;
  state.closeReason = '';
  uploader.fail();
  if (code === CLOSE.ENDED) {
    state.ended = true;
    showEndDialog();
    return false;
  }
  if (code === CLOSE.CREATE_FAILED) {
    const message = state.lastError?.code === 'session_create_failed' ? state.lastError.message : reason;
    showFatal('This session cannot be opened', createFailedText(message));
    return false;
  }
  if (code === CLOSE.UNAUTHORISED) {
    // Also a revoked or expired share link, which the reason says.
    let text = UNAUTHORISED;
    if (/share link revoked/i.test(reason)) text = 'This share link was revoked. Ask whoever shared it for a new one.';
    else if (/share link expired/i.test(reason)) text = 'This share link has expired. Ask whoever shared it for a new one.';
    showFatal('Not authorised', text);
    return false;
  }
  if (state.exit) {
    // The program has ended: nothing new will come, so no reconnect.
    if (code === CLOSE.GOING_AWAY) notify('info', 'ptyhub was stopped, and with it this session.');
    return false;
  }
  if (code === CLOSE.TOO_BIG) {
    notify('error', 'The server closed the connection because a message was too big for it (a file over its upload limit?). Reconnecting.');
  }
  if (code === CLOSE.GOING_AWAY) state.closeReason = 'ptyhub stopped or restarted.';
  if (code === CLOSE.TRY_LATER) state.closeReason = 'This session has as many viewers as it allows.';
  // A refused upgrade (401, 403, 404...) reaches a browser as a bare 1006: ask the API why.
  if (!opened) probe();
  return true;
}

/** After a connection that never opened: stop retrying if the API says we never will get in. */
async function probe() {
  let res;
  try {
    res = await fetch(`/api/sessions/${encodeURIComponent(uuid)}`, { credentials: 'same-origin', cache: 'no-store' });
  } catch {
    return; // ptyhub is down: keep retrying
  }
  if (res.status === 401) showFatal('Not authorised', UNAUTHORISED);
  else if (res.status === 403) showFatal('No access', 'The link this page was opened with does not give access to this session.');
  else if (res.status === 404 && !create.assistant) showFatal('This session cannot be opened', createFailedText('no session with this id'));
  else return;
  conn.stop(true);
}

// ---- Size: ours, the session's, and the hint between them -------------------------------------

/** What would fill this window, in cells. */
function wantedSize() {
  const d = fit.proposeDimensions();
  if (!d || !Number.isFinite(d.cols) || !Number.isFinite(d.rows)) return null;
  return { cols: Math.min(1000, Math.max(1, d.cols)), rows: Math.min(500, Math.max(1, d.rows)) };
}

function sendSize() {
  const want = wantedSize();
  // Not before this connection's first status: until then we don't know whether we may.
  if (!want || !conn.open || pipe.gated || state.status?.readOnly) return;
  if (state.sentSize && state.sentSize.cols === want.cols && state.sentSize.rows === want.rows) return;
  if (conn.send(resizeFrame(want.rows, want.cols))) state.sentSize = want;
}

const onLayout = debounce(() => {
  // Until the session's size is known, fill the window so the page does not look empty.
  if (!state.status) {
    const want = wantedSize();
    if (want) pipe.resizeNow(want.cols, want.rows);
  }
  sendSize();
  renderSizeHint();
}, 80);
new ResizeObserver(onLayout).observe($('frame'));

function renderSizeHint() {
  const hint = $('size-hint');
  const s = state.status;
  const want = wantedSize();
  let text = '';
  if (s && want && state.ready) {
    if (s.readOnly && (want.cols < s.cols || want.rows < s.rows)) {
      text = `This window is smaller than the session (${s.cols}×${s.rows}), so part of it is cut off.`;
    } else if (s.viewers > 1 && (want.cols > s.cols || want.rows > s.rows)) {
      text = `The session is ${s.cols}×${s.rows} because another viewer's window is smaller.`;
    }
  }
  hint.textContent = text;
  hint.hidden = !text;
  $('frame').classList.toggle('outsized', Boolean(text));
}

// ---- Status bar ---------------------------------------------------------------------------------

function renderStatus() {
  const s = state.status;
  document.body.classList.toggle('no-session', state.fatal);
  $('assistant').textContent = s.assistant || '…';
  const named = Boolean(s.sessionName);
  const nameText = $('name').querySelector('.name-text');
  nameText.textContent = named ? s.sessionName : `Unnamed · ${s.uuidShort || shortId(uuid)}`;
  $('name').classList.toggle('unnamed', !named);
  $('name').disabled = Boolean(s.readOnly || state.ended);
  renderTitle();
  $('size').textContent = `${s.cols}×${s.rows}`;
  const viewers = $('viewers');
  viewers.querySelector('.count').textContent = String(s.viewers);
  viewers.title = s.viewers === 1 ? 'Only you are watching' : `${s.viewers} people are watching, you included`;
  $('readonly').hidden = !s.readOnly;
  $('upload').hidden = Boolean(s.readOnly);
  renderYolo();
  renderSizeHint();
}

/** The tab's title: the session's name, else what the program calls itself (OSC title), else the assistant. */
let programTitle = '';
function renderTitle() {
  const s = state.status;
  const title = s?.sessionName || programTitle || s?.assistant || 'Session';
  document.title = `${title} · ptyhub`;
}
term.onTitleChange((t) => {
  programTitle = t.trim().slice(0, 80);
  renderTitle();
});

function renderConn() {
  const el = $('conn');
  const text = el.querySelector('.conn-text');
  let kind;
  let label;
  let banner = '';
  if (state.fatal) {
    [kind, label] = ['error', 'Not connected'];
  } else if (state.ended || state.exit) {
    [kind, label] = ['ended', 'Ended'];
  } else if (state.conn === 'open' && state.ready) {
    [kind, label] = ['live', 'Live'];
  } else if (state.conn === 'open' || state.conn === 'connecting') {
    [kind, label] = ['connecting', state.everReady ? 'Reconnecting…' : 'Connecting…'];
    if (state.everReady) banner = 'Reconnecting…';
  } else if (state.conn === 'waiting') {
    const secs = Math.max(1, Math.ceil((state.retryAt - Date.now()) / 1000));
    [kind, label] = ['offline', `Retry in ${secs} s`];
    const why = state.closeReason || 'The connection to ptyhub was lost.';
    banner = `${why} Reconnecting in ${secs} s.`;
  } else {
    [kind, label] = ['offline', 'Disconnected'];
  }
  el.dataset.state = kind;
  text.textContent = label;
  el.title = label;
  // What is on screen may be out of date while we are not connected: say so by dimming it.
  document.body.classList.toggle('offline', state.everReady && kind !== 'live' && kind !== 'ended');
  const box = $('banner');
  box.hidden = !banner;
  // The sentence is announced once; the ticking count is only shown.
  const [sentence, count] = banner.split(/(?= Reconnecting in)/);
  const bannerText = box.querySelector('.banner-text');
  if (bannerText.textContent !== sentence) bannerText.textContent = sentence || '';
  box.querySelector('.banner-count').textContent = count || '';
  $('retry').hidden = state.conn !== 'waiting';
}
// The countdown in the bar and the banner.
setInterval(() => {
  if (state.conn === 'waiting') renderConn();
}, 1000);
$('retry').addEventListener('click', () => conn.retryNow());

// ---- Rename -------------------------------------------------------------------------------------

const renameForm = $('rename');
const renameInput = $('rename-input');
const renameError = $('rename-error');

function showRenameError(text) {
  renameError.textContent = text || '';
  renameError.hidden = !text;
  renameInput.setAttribute('aria-invalid', String(Boolean(text)));
}

function startRename() {
  if (!state.status || state.status.readOnly || state.ended || !conn.open) return;
  renameInput.value = state.status.sessionName || '';
  showRenameError('');
  $('name').hidden = true;
  renameForm.hidden = false;
  renameInput.focus();
  renameInput.select();
}

function endRename() {
  renameForm.hidden = true;
  $('name').hidden = false;
  showRenameError('');
}

$('name').addEventListener('click', startRename);
// Keep the focus in the input while Save is pressed, so its blur does not close the form first.
renameForm.querySelector('button').addEventListener('mousedown', (e) => e.preventDefault());
renameInput.addEventListener('input', () => {
  const v = validateName(renameInput.value);
  showRenameError(v.ok ? '' : v.error);
});
renameInput.addEventListener('keydown', (e) => {
  if (e.key === 'Escape') {
    e.preventDefault();
    endRename();
    term.focus();
  }
});
renameInput.addEventListener('blur', () => {
  // Clicking Save blurs the input first; let the submit run before the form goes away.
  setTimeout(() => {
    if (!renameForm.contains(document.activeElement)) endRename();
  }, 150);
});
renameForm.addEventListener('submit', (e) => {
  e.preventDefault();
  const v = validateName(renameInput.value);
  if (!v.ok) {
    showRenameError(v.error);
    renameInput.focus();
    return;
  }
  if (v.name !== (state.status?.sessionName || '') && !conn.sendJSON({ type: 'rename_session', name: v.name })) {
    showRenameError('Not connected: try again in a moment.');
    return;
  }
  endRename();
  term.focus();
});

// ---- YOLO ---------------------------------------------------------------------------------------

let restartTimer = 0;
let bannerSeen = false;
const latin1 = new TextDecoder('latin1');
const RESTART_BANNER = 'restarting agent...]';

function setRestarting(on) {
  clearTimeout(restartTimer);
  state.restarting = on;
  bannerSeen = false;
  // The daemon does not say when the new program is up; never show "restarting" forever.
  if (on) restartTimer = setTimeout(() => setRestarting(false), 20000);
  renderYolo();
}

/**
 * The restart is over when the new program draws something: output after the daemon's
 * "[Switching YOLO mode …, restarting agent...]" line.
 */
function watchRestart(bytes) {
  if (!state.restarting) return;
  const text = latin1.decode(bytes);
  const at = text.indexOf(RESTART_BANNER);
  if (at >= 0) {
    bannerSeen = true;
    if (text.slice(at + RESTART_BANNER.length).trim()) setRestarting(false);
  } else if (bannerSeen && text.trim()) {
    setRestarting(false);
  }
}

function renderYolo() {
  const b = $('yolo');
  const s = state.status;
  b.hidden = !s || !s.yoloSupported || Boolean(s.readOnly);
  if (!s) return;
  const on = Boolean(s.yoloMode);
  b.setAttribute('aria-pressed', String(on));
  b.classList.toggle('on', on);
  b.classList.toggle('busy', state.restarting);
  b.disabled = state.restarting || Boolean(state.exit);
  b.querySelector('.yolo-state').textContent = state.restarting ? 'restarting…' : on ? 'on' : 'off';
  b.title = state.restarting
    ? 'The assistant is restarting'
    : on
      ? 'YOLO mode is on: the assistant acts without asking. Click to turn it off (restarts the assistant).'
      : 'YOLO mode is off: the assistant asks before acting. Click to turn it on (restarts the assistant).';
}

$('yolo').addEventListener('click', () => {
  if (state.restarting) return;
  if (conn.sendJSON({ type: 'toggle_yolo' })) setRestarting(true);
  else notify('error', 'Not connected: YOLO mode was not changed.');
});

// ---- Chat, uploads, drag and drop ---------------------------------------------------------------

const chat = new ChatPanel({
  panel: $('chat'),
  toggle: $('chat-toggle'),
  send: (obj) => conn.sendJSON(obj),
  notify,
  onToggle: (open) => {
    if (!open && !state.fatal) term.focus();
  },
});

const uploader = new Uploader({ conn, term, notify, writable });

$('upload').addEventListener('click', () => $('file-input').click());
$('file-input').addEventListener('change', (e) => {
  uploader.add(e.target.files);
  e.target.value = '';
});

const hasFiles = (e) => Boolean(e.dataTransfer) && [...e.dataTransfer.types].includes('Files');
let dragDepth = 0;
addEventListener('dragenter', (e) => {
  if (!hasFiles(e)) return;
  e.preventDefault();
  dragDepth++;
  $('drop').hidden = false;
});
addEventListener('dragover', (e) => {
  if (!hasFiles(e)) return;
  e.preventDefault();
  e.dataTransfer.dropEffect = 'copy';
});
addEventListener('dragleave', (e) => {
  if (!hasFiles(e)) return;
  dragDepth = Math.max(0, dragDepth - 1);
  if (dragDepth === 0) $('drop').hidden = true;
});
addEventListener('drop', (e) => {
  if (!hasFiles(e)) return;
  e.preventDefault();
  dragDepth = 0;
  $('drop').hidden = true;
  uploader.add(e.dataTransfer.files);
});

// ---- Ending: the dialog, and the errors after which there is nothing to reconnect to -----------

const dialog = $('exit-dialog');

function showEndDialog() {
  const e = state.exit;
  document.body.classList.add('session-gone');
  if (state.ended) $('name').disabled = true;
  let text;
  if (state.ended) {
    text = e
      ? `This session was ended, and its program ${describeExit(e.exitCode, e.signal)}.`
      : 'This session was ended, from the session list or by another viewer.';
  } else {
    text = `The program ${describeExit(e.exitCode, e.signal)}. You can still read its output and chat here.`;
  }
  dialog.querySelector('.exit-text').textContent = text;
  $('exit-stay').textContent = state.ended ? 'Look at the output' : 'Stay here';
  if (!dialog.open) {
    dialog.showModal();
    $('exit-home').focus();
  }
  renderConn();
}

$('exit-stay').addEventListener('click', () => dialog.close());

function showFatal(title, text) {
  state.fatal = true;
  const box = $('fatal');
  box.querySelector('.fatal-title').textContent = title;
  box.querySelector('.fatal-text').textContent = text;
  box.hidden = false;
  document.body.classList.add('no-session');
  chat.setOpen(false);
  term.options.disableStdin = true;
  $('fatal-home').focus();
  renderConn();
}

// ---- Start --------------------------------------------------------------------------------------

// Before anything else, fill the window.
{
  const want = wantedSize();
  if (want) pipe.resizeNow(want.cols, want.rows);
}
renderConn();
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
  uuid,
  wantedSize,
  /** The active buffer as text: trailing spaces and trailing empty lines removed. */
  text() {
    const b = term.buffer.active;
    const lines = [];
    for (let i = 0; i < b.length; i++) lines.push(b.getLine(i)?.translateToString(true) ?? '');
    while (lines.length && lines[lines.length - 1] === '') lines.pop();
    return lines.join('\n');
  },
};
