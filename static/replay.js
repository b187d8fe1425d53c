// The replay page (/replay/{uuid}): fetches the session's .cast once and plays it in asciinema-player, with speed buttons, a marker list and copying of the screen's text.

import { UNAUTHORISED, api, at, capitalise, homePath, linkAccess, sessionPath } from './api.js';
import { themeName } from './prefs.js';
import { applyPageScheme } from './theme.js';
import { copyText, formatBytes, h, shortId } from './util.js';

/** Gaps longer than this (seconds) are played as this long: a night of nothing is two seconds. */
const IDLE_LIMIT = 2;

const $ = (id) => document.getElementById(id);
const uuid = decodeURIComponent(location.pathname.split('/').filter(Boolean).pop() || '');
const castURL = at(`/api/sessions/${encodeURIComponent(uuid)}/recording`);

/** The player now; replaced (at the same time) when the speed changes. */
let player = null;
let speed = 1;
/** Whether the player is playing (from its events): a new speed keeps it so. */
let playing = false;
/** The .cast, fetched once, as a blob: URL: a new player for a new speed reads it from memory. */
let castBlob = '';

$('home-link').href = homePath();
$('download').href = castURL;
applyPageScheme(themeName());
// A share link (made with `record`) does not reach the list of sessions: back goes to its session.
linkAccess(uuid).then((link) => {
  if (!link) return;
  const home = $('home-link');
  home.href = sessionPath(uuid);
  home.title = 'Back to the session';
});

function fail(text) {
  const el = $('replay-error');
  el.textContent = text;
  el.hidden = false;
}

/** The recording's markers, each at its time on the player's timeline (idle gaps capped as the player caps them). */
function markersOf(text) {
  const markers = [];
  let last = 0;
  let played = 0;
  // Line by line without splitting: a recording may be tens of MiB. The first line is the header.
  for (let at = text.indexOf('\n') + 1; at > 0 && at < text.length; ) {
    const end = text.indexOf('\n', at);
    const line = text.slice(at, end < 0 ? text.length : end);
    at = end < 0 ? text.length : end + 1;
    if (!line.startsWith('[')) continue;
    const t = parseFloat(line.slice(1));
    if (!Number.isFinite(t)) continue;
    played += Math.min(Math.max(t - last, 0), IDLE_LIMIT);
    last = t;
    if (!line.includes(', "m", ')) continue;
    try {
      const ev = JSON.parse(line);
      if (ev[1] === 'm') markers.push({ time: played, label: String(ev[2]) });
    } catch {
      // Not an event the player can read either: it says so.
    }
  }
  return markers;
}

function clock(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  const hh = Math.floor(s / 3600);
  const mm = String(Math.floor((s % 3600) / 60)).padStart(hh ? 2 : 1, '0');
  const ss = String(s % 60).padStart(2, '0');
  return hh ? `${hh}:${mm}:${ss}` : `${mm}:${ss}`;
}

function showMarkers(markers) {
  const list = $('markers');
  list.replaceChildren(
    ...markers.map((m, i) =>
      h(
        'li',
        {},
        h(
          'button',
          { type: 'button', class: 'replay-marker', dataset: { index: i }, onclick: () => player?.seek({ marker: i }) },
          h('span', { class: 'replay-marker-time muted' }, clock(m.time)),
          h('span', { class: 'replay-marker-label' }, m.label),
        ),
      ),
    ),
  );
  $('markers-box').hidden = markers.length === 0;
}

/** Narrow windows (phones): the player takes the page's width and is as tall as that makes it. */
const narrow = matchMedia('(max-width: 640px)');

/**
 * The player's box on a wide window: the page's width and what the window leaves below the bar
 * (the player fits itself into the box, keeping its shape). On a narrow one the player sets its height.
 */
function sizeBox() {
  const el = $('player');
  if (narrow.matches) {
    el.style.height = '';
    return;
  }
  // Room under the box's place on the page (not where it is scrolled to), minus the speed row.
  const room = window.innerHeight - (el.getBoundingClientRect().top + window.scrollY) - 64;
  el.style.height = `${Math.round(Math.max(240, room))}px`;
}

/** A player over the fetched text at `speed`, showing `at` (seconds), playing if `play`. */
async function mount(at = 0, play = false) {
  const el = $('player');
  if (player) {
    player.dispose();
    // What dispose() leaves behind goes too: the container holds one player.
    el.replaceChildren();
  }
  const next = window.AsciinemaPlayer.create({ url: castBlob }, el, {
    speed,
    idleTimeLimit: IDLE_LIMIT,
    fit: narrow.matches ? 'width' : 'both',
    preload: true,
    controls: true,
    terminalFontFamily: getComputedStyle(document.documentElement).getPropertyValue('--mono').trim() || undefined,
  });
  player = next;
  playing = false;
  for (const [ev, now] of [['play', true], ['playing', true], ['pause', false], ['ended', false]]) {
    next.addEventListener(ev, () => {
      if (player === next) playing = now;
    });
  }
  window.ptyhubReplay = next; // for tests and the console
  if (at > 0) await next.seek(at);
  if (play) await next.play();
}

async function setSpeed(value) {
  if (!player || value === speed) return;
  const at = player.getCurrentTime() || 0;
  // The player takes its speed at creation: a new one continues where this one was.
  const wasPlaying = playing;
  speed = value;
  for (const b of document.querySelectorAll('[data-speed]')) b.setAttribute('aria-pressed', String(Number(b.dataset.speed) === value));
  await mount(at, wasPlaying);
}

/** The screen's text as it is now, one line per row, trailing blanks dropped. */
function screenText() {
  const lines = [...document.querySelectorAll('#player .ap-term-text .ap-line')].map((l) => l.textContent.replace(/\s+$/, ''));
  while (lines.length && !lines[lines.length - 1]) lines.pop();
  return lines.join('\n');
}

async function load() {
  let info = null;
  try {
    info = await api('GET', `/api/recordings/${encodeURIComponent(uuid)}`);
  } catch (e) {
    fail(e.status === 404 ? 'There is no recording of this session: it may have been deleted, or recording was off.' : e.message);
    return;
  }
  const name = info.name || shortId(uuid);
  document.title = `Replay: ${name} · ptyhub`;
  $('title').textContent = name;
  const parts = [info.assistant, `${clock(info.duration)} long`, formatBytes(info.bytes)];
  if (!info.ended) parts.push('still running: this is what was recorded until now');
  $('meta').textContent = parts.filter(Boolean).join(' · ');
  if (!info.ended) {
    const live = $('live-link');
    live.href = sessionPath(uuid);
    live.hidden = false;
  }
  let res;
  try {
    res = await fetch(castURL, { credentials: 'same-origin', cache: 'no-store' });
  } catch {
    fail('Cannot reach ptyhub. Is it still running?');
    return;
  }
  if (!res.ok) {
    if (res.status === 401) return fail(UNAUTHORISED);
    const body = await res.json().catch(() => null);
    return fail(capitalise(body?.error || `${res.status} ${res.statusText}`));
  }
  const text = await res.text();
  // A running recording may be read in the middle of a write: whole lines only.
  const cast = text.slice(0, text.lastIndexOf('\n') + 1);
  sizeBox();
  castBlob = URL.createObjectURL(new Blob([cast], { type: 'text/plain' }));
  showMarkers(markersOf(cast));
  await mount();
  $('controls').hidden = false;
}

addEventListener('resize', () => {
  if (castBlob) sizeBox();
});
for (const b of document.querySelectorAll('[data-speed]')) b.addEventListener('click', () => setSpeed(Number(b.dataset.speed)));
$('copy').addEventListener('click', async () => {
  const btn = $('copy');
  try {
    await copyText(screenText());
    btn.textContent = 'Copied';
  } catch {
    btn.textContent = 'Copy failed';
  }
  setTimeout(() => (btn.textContent = 'Copy text'), 1500);
});

load().catch((e) => fail(`The recording could not be played: ${e.message}`));
