// The key bar for touch screens: Esc, Tab, sticky Ctrl and Alt, arrows, and the symbols soft keyboards hide.

import { h } from './util.js';

const KEYS = [
  { label: 'Esc', send: '\x1b', title: 'Escape' },
  { label: 'Tab', send: '\t', title: 'Tab' },
  { label: 'Ctrl', mod: 'ctrl', title: 'Control: applies to the next key' },
  { label: 'Alt', mod: 'alt', title: 'Alt: applies to the next key' },
  { label: '←', arrow: 'D', title: 'Left' },
  { label: '↑', arrow: 'A', title: 'Up' },
  { label: '↓', arrow: 'B', title: 'Down' },
  { label: '→', arrow: 'C', title: 'Right' },
  { label: '|', send: '|', title: 'Pipe' },
  { label: '~', send: '~', title: 'Tilde' },
  { label: '/', send: '/', title: 'Slash' },
];

/** What Ctrl makes of one character, as a terminal keyboard sends it. */
function ctrlChar(c) {
  if (/^[a-z]$/i.test(c)) return String.fromCharCode(c.toUpperCase().charCodeAt(0) & 0x1f);
  const table = { '@': 0, ' ': 0, 2: 0, '[': 27, 3: 27, '\\': 28, 4: 28, ']': 29, 5: 29, '^': 30, 6: 30, _: 31, '-': 31, 7: 31, '?': 127, 8: 127 };
  return c in table ? String.fromCharCode(table[c]) : c;
}

const ARROW = /^\x1b[[O]([ABCD])$/;

export class KeyBar {
  /**
   * @param {HTMLElement} bar the <nav> to fill
   * @param {import('./vendor/xterm/xterm.mjs').Terminal} term
   */
  constructor(bar, term) {
    this.term = term;
    this.mods = { ctrl: false, alt: false };
    this.buttons = {};
    let hadFocus = false;
    for (const key of KEYS) {
      const b = h('button', {
        type: 'button',
        class: /^[A-Za-z]{2,}$/.test(key.label) ? 'key word' : 'key',
        title: key.title,
        'aria-label': key.title,
        'aria-pressed': key.mod ? 'false' : undefined,
        tabindex: '-1',
        dataset: { key: key.label },
      }, key.label);
      // Keep the focus (and with it the soft keyboard) in the terminal: a button must not take it.
      b.addEventListener('pointerdown', () => {
        hadFocus = document.activeElement === term.textarea;
      });
      b.addEventListener('mousedown', (e) => e.preventDefault());
      b.addEventListener('click', () => {
        this.press(key);
        if (hadFocus) term.focus();
      });
      if (key.mod) this.buttons[key.mod] = b;
      bar.append(b);
    }
  }

  press(key) {
    if (key.mod) {
      this.mods[key.mod] = !this.mods[key.mod];
      this.showMods();
      return;
    }
    let data = key.send;
    if (key.arrow) data = (this.term.modes.applicationCursorKeysMode ? '\x1bO' : '\x1b[') + key.arrow;
    // Through xterm as if typed: it scrolls to the bottom, and onData (with the modifiers) sends it.
    this.term.input(data, true);
  }

  /**
   * Applies an armed Ctrl/Alt to what the user typed next (soft keyboard or key bar), then
   * disarms them; called by the page on every onData before sending.
   */
  apply(data) {
    const { ctrl, alt } = this.mods;
    if (!ctrl && !alt) return data;
    let out = data;
    const arrow = ARROW.exec(data);
    if (arrow) {
      const m = 1 + (alt ? 2 : 0) + (ctrl ? 4 : 0);
      out = `\x1b[1;${m}${arrow[1]}`;
    } else if ([...data].length === 1) {
      if (ctrl) out = ctrlChar(data);
      if (alt) out = `\x1b${out}`;
    } else {
      return data; // a paste or a multi-key sequence: the modifiers wait for a single key
    }
    this.mods = { ctrl: false, alt: false };
    this.showMods();
    return out;
  }

  showMods() {
    for (const [mod, b] of Object.entries(this.buttons)) {
      b.setAttribute('aria-pressed', String(this.mods[mod]));
      b.classList.toggle('armed', this.mods[mod]);
    }
  }
}
