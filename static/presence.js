// Who is here: the `presence` message as the viewer list (users by name, guests marked as guests, roles, devices) behind the bar's viewer count, and "Alice is typing" in the bar.

import { h } from './util.js';

/**
 * How long "… is typing" stays after the presence that said so; ptyhub says it again every 2 s
 * while the person keeps typing (docs/protocol.md section 2), so it stays up meanwhile.
 */
const TYPING_SHOWN_MS = 3500;

/** This device's kind, as the presence message names it: by the screen's shorter side, so a phone held either way is a phone. */
export function deviceKind() {
  if (!matchMedia('(pointer: coarse)').matches) return 'desktop';
  return Math.min(screen.width, screen.height) < 600 ? 'phone' : 'tablet';
}

/** Whether `p` came with a share link (an older ptyhub says nothing: a viewer as before). */
function isGuest(p) {
  return p.guest === true;
}

/** A person's name as the list shows it beside a guest mark: a user's name, a guest's chosen one, else "guest N" ("viewer N" from an older ptyhub). */
function shownName(p) {
  if (p.user) return p.user;
  return p.name || (isGuest(p) ? `guest ${p.id}` : `viewer ${p.id}`);
}

/** A person's name as others read it in a sentence: "alice", "Bob (guest)", "guest 2". A guest never reads as a user, whatever it calls itself. */
export function personName(p) {
  return isGuest(p) && p.name ? `${p.name} (guest)` : shownName(p);
}

const DEVICE_WORDS = { desktop: 'computer', tablet: 'tablet', phone: 'phone' };

export class PresenceView {
  /**
   * @param {object} o
   * @param {HTMLElement} o.chip the bar's viewer count (a click opens the list)
   * @param {HTMLElement} o.typing where "Alice is typing" goes
   * @param {HTMLElement} o.parent where the list pops up
   */
  constructor({ chip, typing, parent }) {
    this.chip = chip;
    this.typingEl = typing;
    this.people = [];
    this.total = 0;
    this.typist = null; // { id, until }
    this.timer = 0;
    this.list = h('ul', { class: 'people-list' });
    this.panel = h('div', { class: 'people', id: 'people', hidden: true, role: 'dialog', 'aria-label': 'People here' }, h('h2', {}, 'Here now'), this.list);
    parent.append(this.panel);
    chip.setAttribute('role', 'button');
    chip.tabIndex = 0;
    chip.setAttribute('aria-controls', 'people');
    chip.setAttribute('aria-expanded', 'false');
    const toggle = () => this.toggle();
    chip.addEventListener('click', toggle);
    chip.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' || e.key === ' ') {
        e.preventDefault();
        toggle();
      }
    });
    document.addEventListener('pointerdown', (e) => {
      if (!this.panel.hidden && !this.panel.contains(e.target) && !chip.contains(e.target)) this.toggle(false);
    });
  }

  toggle(open = this.panel.hidden) {
    this.panel.hidden = !open;
    this.chip.setAttribute('aria-expanded', String(open));
  }

  /** A `presence` message. */
  update(msg) {
    this.people = Array.isArray(msg.viewers) ? msg.viewers : [];
    // A crowd is listed in part; `total` counts everyone.
    this.total = Number.isInteger(msg.total) ? msg.total : this.people.length;
    const typist = msg.typing === null || msg.typing === undefined ? null : this.people.find((p) => p.id === msg.typing);
    if (typist && !typist.you) {
      this.typist = { id: typist.id, until: Date.now() + TYPING_SHOWN_MS };
      clearTimeout(this.timer);
      this.timer = setTimeout(() => {
        this.typist = null;
        this.render();
      }, TYPING_SHOWN_MS);
    } else if (this.typist && !this.people.some((p) => p.id === this.typist.id)) {
      this.typist = null;
    }
    this.render();
  }

  /** The connection is gone: nobody is known to be here. */
  clear() {
    this.people = [];
    this.total = 0;
    this.typist = null;
    this.render();
  }

  render() {
    const typist = this.typist && this.people.find((p) => p.id === this.typist.id);
    this.typingEl.textContent = typist ? `${personName(typist)} is typing…` : '';
    this.typingEl.hidden = !typist;
    this.list.replaceChildren(
      ...this.people.map((p) =>
        h(
          'li',
          { class: `person${p.you ? ' you' : ''}${typist && typist.id === p.id ? ' typing' : ''}`, dataset: { id: String(p.id) } },
          h(
            'span',
            { class: 'person-name' },
            shownName(p),
            isGuest(p) ? h('span', { class: 'chip guest-mark', title: 'Came with a share link: the name is only what they call themselves' }, 'guest') : null,
            p.you ? h('span', { class: 'muted' }, ' (you)') : null,
          ),
          h('span', { class: 'person-meta muted' }, [p.role === 'writer' ? 'can type' : 'watching', DEVICE_WORDS[p.device]].filter(Boolean).join(' · ')),
          typist && typist.id === p.id ? h('span', { class: 'person-typing', title: 'Typing' }, '⌨') : null,
        ),
      ),
      ...(this.total > this.people.length ? [h('li', { class: 'person muted' }, `and ${this.total - this.people.length} more`)] : []),
    );
    const names = this.people.map((p) => personName(p) + (p.you ? ' (you)' : ''));
    if (names.length) this.chip.title = `Here: ${names.join(', ')}`;
  }
}
