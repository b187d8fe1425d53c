// The board on the home page: a live card per session (its screen in miniature, its state and for
// how long, why), waiting ones first, filtered by state, with quick replies for those who may type,
// over one WebSocket (GET /ws/board, docs/protocol.md section 11a); and being told: a browser
// notification when a session starts waiting or exits, the count of waiting sessions in the title
// and on the favicon, per-session mute.

import { at, foreignParams, sessionPath, withQuery } from './api.js';
import { ago } from './statepill.js';
import { h, shortId } from './util.js';

const MUTED = 'ptyhub.muted';
/** The session page writes here whenever someone types in it: no notification for that session. */
export const TYPING_IN = 'ptyhub.typingIn';
/** How long after the last keystroke a session still counts as the one you are typing in. */
const TYPING_MS = 30000;
/** Keys offered on a waiting card whose screen offered no choices. */
const FALLBACK = [
  { label: 'Enter', keys: '\r' },
  { label: 'Esc', keys: '\x1b' },
  { label: 'y', keys: 'y' },
  { label: 'n', keys: 'n' },
];
const RANK = { waiting: 0, idle: 1, working: 1, exited: 2 };

const $ = (id) => document.getElementById(id);

function readMuted() {
  try {
    return new Set(JSON.parse(localStorage.getItem(MUTED) || '[]'));
  } catch {
    return new Set();
  }
}

function typingIn() {
  try {
    const t = JSON.parse(localStorage.getItem(TYPING_IN) || 'null');
    return t && Date.now() - t.at < TYPING_MS ? t.id : null;
  } catch {
    return null;
  }
}

export class Board {
  /** @param {HTMLElement} root the board's section: #board, #board-filter, #board-notify, #board-count, #board-empty inside */
  constructor(root) {
    this.root = root;
    this.list = root.querySelector('#board');
    this.cards = new Map(); // id → card (as the daemon sent it, changes applied)
    this.els = new Map(); // id → <li>
    this.filter = 'all';
    this.muted = readMuted();
    this.notified = []; // every notification raised, for tests and the console
    this.visible = new Set();
    this.sentVisible = '';
    this.retry = 1000;
    this.title = document.title;
    this.icon = document.querySelector('link[rel="icon"]');
    this.iconHref = this.icon?.getAttribute('href');
    this.observer = new IntersectionObserver((entries) => this.onIntersect(entries));
    for (const b of root.querySelectorAll('#board-filter [data-filter]')) {
      b.addEventListener('click', () => this.setFilter(b.dataset.filter));
    }
    this.setupNotify(root.querySelector('#board-notify'));
    setInterval(() => this.tick(), 1000);
    this.connect();
  }

  // ---- the connection ---------------------------------------------------------------------------

  connect() {
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const ws = new WebSocket(`${proto}//${location.host}${withQuery(at('/ws/board'), foreignParams(['assistant', 'name', 'cwd']))}`);
    this.ws = ws;
    ws.onopen = () => {
      this.retry = 1000;
      this.sentVisible = '';
    };
    ws.onmessage = (e) => {
      let msg;
      try {
        msg = JSON.parse(e.data);
      } catch {
        return;
      }
      this.onMessage(msg);
    };
    ws.onclose = () => {
      this.ws = null;
      this.root.dataset.stale = 'true';
      setTimeout(() => this.connect(), this.retry);
      this.retry = Math.min(this.retry * 2, 10000);
    };
  }

  send(msg) {
    if (this.ws?.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(msg));
  }

  onMessage(msg) {
    if (msg.type === 'cards') {
      delete this.root.dataset.stale;
      const ids = new Set(msg.cards.map((c) => c.id));
      for (const id of [...this.cards.keys()]) if (!ids.has(id)) this.remove(id);
      for (const c of msg.cards) this.put(c, this.cards.get(c.id));
      this.render();
    } else if (msg.type === 'card') {
      const old = this.cards.get(msg.id);
      if (!old) {
        // A session that appeared while the board is open is told of as any other, even when
        // it is already waiting by its first card (an agent can ask before the board hears of
        // it). Only the list the board opens with tells of nothing.
        if (Array.isArray(msg.rows)) this.put(msg, { state: null });
      } else {
        const next = { ...old, ...msg, rows: old.rows };
        if (typeof msg.height === 'number') next.rows = next.rows.slice(0, msg.height).concat(Array(Math.max(0, msg.height - next.rows.length)).fill(''));
        if (msg.rows && !Array.isArray(msg.rows)) {
          next.rows = next.rows.slice();
          for (const [i, text] of Object.entries(msg.rows)) next.rows[Number(i)] = text;
        }
        delete next.type;
        delete next.height;
        this.put(next, old);
      }
      this.render();
    } else if (msg.type === 'gone') {
      this.remove(msg.id);
      this.render();
    } else if (msg.type === 'error') {
      const li = msg.id && this.els.get(msg.id);
      if (li) li.querySelector('.bcard-error').textContent = msg.message;
    }
  }

  // ---- cards ------------------------------------------------------------------------------------

  /** Takes `card` in, telling of its change from `old` (none for a card in the opening list). */
  put(card, old) {
    delete card.type;
    this.cards.set(card.id, card);
    let li = this.els.get(card.id);
    if (!li) {
      li = this.build(card);
      this.els.set(card.id, li);
      this.observer.observe(li);
    }
    this.fill(li, card);
    if (old) this.tell(card, old);
  }

  remove(id) {
    const li = this.els.get(id);
    if (li) {
      this.observer.unobserve(li);
      li.remove();
    }
    this.els.delete(id);
    this.cards.delete(id);
    this.visible.delete(id);
  }

  build(card) {
    const open = sessionPath(card.id);
    const line = h('input', { class: 'bcard-line', type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: 'Type a reply', 'aria-label': 'Reply' });
    const mute = h('button', { type: 'button', class: 'btn btn-small bcard-mute', 'aria-pressed': 'false' });
    mute.addEventListener('click', () => this.toggleMute(card.id));
    const form = h('form', { class: 'bcard-form' }, line, h('button', { type: 'submit', class: 'btn btn-small' }, 'Send'));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      if (!line.value) return;
      this.reply(card.id, `${line.value}\r`);
      line.value = '';
    });
    return h(
      'li',
      { class: 'bcard', dataset: { id: card.id } },
      h(
        'a',
        { class: 'bcard-open', href: open },
        h(
          'div',
          { class: 'bcard-head' },
          h('span', { class: 'bcard-name' }),
          h('span', { class: 'bcard-state' }, h('span', { class: 'dot', 'aria-hidden': 'true' }), h('span', { class: 'bcard-state-text' }), ' ', h('span', { class: 'bcard-age' })),
        ),
        h('pre', { class: 'bcard-screen', 'aria-hidden': 'true' }),
        h('p', { class: 'bcard-reason' }),
      ),
      h('div', { class: 'bcard-replies' }, h('div', { class: 'bcard-choices' }), form),
      h('div', { class: 'bcard-foot' }, h('span', { class: 'bcard-people muted' }), h('span', { class: 'bcard-error', role: 'status' }), mute),
    );
  }

  fill(li, c) {
    li.dataset.state = c.state;
    li.dataset.alive = String(c.alive);
    const name = c.name || `${c.assistantName || c.assistant} ${c.num ?? shortId(c.id)}`;
    li.querySelector('.bcard-name').textContent = name;
    li.querySelector('.bcard-open').setAttribute('aria-label', `Open ${name}: ${c.state}${c.reason ? `, ${c.reason}` : ''}`);
    li.querySelector('.bcard-state-text').textContent = c.state;
    li.querySelector('.bcard-reason').textContent = c.reason || '';
    let last = c.rows.length;
    while (last > 0 && !c.rows[last - 1]) last--;
    li.querySelector('.bcard-screen').textContent = c.rows.slice(0, last).join('\n');
    li.querySelector('.bcard-people').textContent = c.people?.length ? `with ${c.people.join(', ')}` : '';
    const replies = c.state === 'waiting' && c.mayType && c.alive;
    li.querySelector('.bcard-replies').hidden = !replies;
    if (replies) {
      const choices = c.choices?.length ? c.choices : FALLBACK;
      const box = li.querySelector('.bcard-choices');
      const want = JSON.stringify(choices);
      if (box.dataset.choices !== want) {
        box.dataset.choices = want;
        box.replaceChildren(
          ...choices.map((ch) => {
            const b = h('button', { type: 'button', class: 'btn btn-small bcard-choice', title: `Types ${JSON.stringify(ch.keys)}` }, ch.label);
            b.addEventListener('click', () => this.reply(c.id, ch.keys));
            return b;
          }),
        );
      }
    }
    if (c.state !== 'waiting') li.querySelector('.bcard-error').textContent = '';
    const muted = this.muted.has(c.id);
    const mute = li.querySelector('.bcard-mute');
    mute.setAttribute('aria-pressed', String(muted));
    mute.textContent = muted ? 'Muted' : 'Mute';
    mute.title = muted ? 'Notify me about this session again' : 'No notifications for this session';
    this.age(li, c);
  }

  age(li, c) {
    li.querySelector('.bcard-age').textContent = ago(Date.now() - c.since);
  }

  reply(id, keys) {
    this.send({ type: 'reply', id, keys });
  }

  /** Sorted and filtered into the list; the title and favicon updated. */
  render() {
    const all = [...this.cards.values()].sort((a, b) => RANK[a.state] - RANK[b.state] || a.since - b.since || (a.num ?? 999) - (b.num ?? 999));
    let prev = null;
    let shown = 0;
    for (const c of all) {
      const li = this.els.get(c.id);
      li.hidden = this.filter !== 'all' && c.state !== this.filter;
      if (!li.hidden) shown++;
      const want = prev ? prev.nextSibling : this.list.firstChild;
      if (want !== li) this.list.insertBefore(li, want);
      prev = li;
    }
    const waiting = all.filter((c) => c.state === 'waiting').length;
    this.root.querySelector('#board-count').textContent = all.length ? `(${all.length})` : '';
    for (const b of this.root.querySelectorAll('#board-filter [data-filter]')) {
      const n = b.dataset.filter === 'all' ? all.length : all.filter((c) => c.state === b.dataset.filter).length;
      b.querySelector('.n').textContent = String(n);
    }
    const empty = this.root.querySelector('#board-empty');
    empty.hidden = shown > 0;
    empty.textContent = all.length ? `No ${this.filter} sessions.` : 'No sessions yet: start one below.';
    this.badge(waiting);
  }

  setFilter(f) {
    this.filter = f;
    for (const b of this.root.querySelectorAll('#board-filter [data-filter]')) b.setAttribute('aria-pressed', String(b.dataset.filter === f));
    this.render();
  }

  tick() {
    if (document.hidden) return;
    for (const [id, c] of this.cards) {
      const li = this.els.get(id);
      if (li && !li.hidden) this.age(li, c);
    }
  }

  onIntersect(entries) {
    for (const e of entries) {
      const id = e.target.dataset.id;
      if (e.isIntersecting) this.visible.add(id);
      else this.visible.delete(id);
    }
    const ids = [...this.visible].sort();
    const key = ids.join(',');
    if (key !== this.sentVisible) {
      this.sentVisible = key;
      this.send({ type: 'visible', ids });
    }
  }

  // ---- being told -------------------------------------------------------------------------------

  /** The count of waiting sessions in the title and as a badge on the favicon. */
  badge(waiting) {
    document.title = waiting ? `(${waiting}) ${this.title}` : this.title;
    if (!this.icon) return;
    this.icon.dataset.badge = String(waiting);
    if (!waiting) {
      this.icon.setAttribute('href', this.iconHref);
      return;
    }
    const n = waiting > 9 ? '9+' : String(waiting);
    const svg = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="7" fill="#1f6feb"/><path d="M6 11l5 4-5 4" fill="none" stroke="#fff" stroke-width="2.4" stroke-linecap="round" stroke-linejoin="round"/><circle cx="22" cy="22" r="10" fill="#cf222e"/><text x="22" y="26.5" font-family="Arial,sans-serif" font-size="${n.length > 1 ? 10 : 13}" font-weight="700" fill="#fff" text-anchor="middle">${n}</text></svg>`;
    this.icon.setAttribute('href', `data:image/svg+xml,${encodeURIComponent(svg)}`);
  }

  setupNotify(button) {
    this.notifyButton = button;
    if (!('Notification' in window)) {
      button.hidden = true;
      return;
    }
    const show = () => {
      const p = Notification.permission;
      button.textContent = p === 'granted' ? 'Notifications on' : p === 'denied' ? 'Notifications blocked' : 'Notify me';
      button.disabled = p !== 'default';
      button.title = p === 'denied' ? 'Allow notifications for this site in the browser to be told' : 'Be told when a session needs you or ends';
    };
    show();
    // Asked only when the button is pressed, never on load.
    button.addEventListener('click', async () => {
      await Notification.requestPermission();
      show();
    });
  }

  /** A notification when `c` has just started waiting or exited, unless muted or being typed in. */
  tell(c, old) {
    const waiting = c.state === 'waiting' && old.state !== 'waiting';
    const exited = c.state === 'exited' && old.state !== 'exited';
    if (!waiting && !exited) return;
    if (this.muted.has(c.id) || typingIn() === c.id) return;
    if (!('Notification' in window) || Notification.permission !== 'granted') return;
    const name = c.name || `${c.assistantName || c.assistant} ${c.num ?? shortId(c.id)}`;
    const title = waiting ? `${name} needs you` : `${name} has ended`;
    this.notified.push({ id: c.id, state: c.state, title });
    try {
      const n = new Notification(title, { body: c.reason || '', tag: `ptyhub-${c.id}` });
      n.onclick = () => {
        window.focus();
        location.href = sessionPath(c.id);
      };
    } catch {
      // A browser that only notifies from a service worker (Android Chrome): the title and the
      // favicon still say it.
    }
  }

  toggleMute(id) {
    if (this.muted.has(id)) this.muted.delete(id);
    else this.muted.add(id);
    try {
      localStorage.setItem(MUTED, JSON.stringify([...this.muted]));
    } catch {
      // Not remembered past this page.
    }
    const li = this.els.get(id);
    if (li) this.fill(li, this.cards.get(id));
  }
}

const root = $('board-section');
if (root) window.ptyhubBoard = new Board(root);
