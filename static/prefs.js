// The terminal page's preferences, kept in localStorage: font size (Ctrl +/−/0 and a control), theme (the terminal's and the page's), how this window sizes the session and shows a bigger one; plus scrollback search and the "↓ New output" pill.

import { THEMES, applyPageScheme, terminalThemeOptions } from './theme.js';
import { h } from './util.js';

const KEY = 'ptyhub.prefs';
export const FONT_MIN = 8;
export const FONT_MAX = 32;

/** The stored preferences ({fontSize?, theme?}), or {} when none or unreadable. */
export function loadPrefs() {
  try {
    const p = JSON.parse(localStorage.getItem(KEY) || '{}');
    return p && typeof p === 'object' ? p : {};
  } catch {
    return {};
  }
}

function savePrefs(p) {
  try {
    localStorage.setItem(KEY, JSON.stringify(p));
  } catch {
    // Storage blocked: the choice holds for this page only.
  }
}

/** The font size to start with: the stored one, else 13 on narrow screens and 14 elsewhere. */
export function initialFontSize() {
  const n = Number(loadPrefs().fontSize);
  if (Number.isInteger(n) && n >= FONT_MIN && n <= FONT_MAX) return n;
  return matchMedia('(max-width: 640px)').matches ? 13 : 14;
}

/** The chosen theme's key ("system" unless one was chosen). */
export function themeName() {
  const t = loadPrefs().theme;
  return typeof t === 'string' && THEMES[t] ? t : 'system';
}

export class Prefs {
  /**
   * @param {object} o
   * @param {import('./vendor/xterm/xterm.mjs').Terminal} o.term
   * @param {HTMLButtonElement} o.button the bar button that opens the panel
   * @param {import('./sizing.js').SizePolicy} o.size
   * @param {() => object|null} o.status the last `status`
   * @param {() => void} o.relayout after the font size changed: measure and send the size again
   */
  constructor({ term, button, size, status, relayout }) {
    this.term = term;
    this.size = size;
    this.status = status;
    this.relayout = relayout;
    this.button = button;
    this.panel = this.build();
    button.addEventListener('click', () => this.toggle());
    document.addEventListener('keydown', (e) => this.onKey(e), true);
    document.addEventListener('pointerdown', (e) => {
      if (!this.panel.hidden && !this.panel.contains(e.target) && !button.contains(e.target)) this.toggle(false);
    });
    this.applyTheme();
    this.render();
  }

  build() {
    const font = h('output', { class: 'prefs-font-size', id: 'font-size', 'aria-live': 'polite' });
    const theme = h('select', { id: 'theme-select' }, ...Object.entries(THEMES).map(([k, t]) => h('option', { value: k }, t.label)));
    theme.addEventListener('change', () => {
      savePrefs({ ...loadPrefs(), theme: theme.value });
      this.applyTheme();
    });
    const mode = h(
      'fieldset',
      { class: 'prefs-size' },
      h('legend', {}, 'The session’s size'),
      h('label', {}, h('input', { type: 'radio', name: 'size-mode', value: 'mine' }), ' Size it to my window'),
      h('label', {}, h('input', { type: 'radio', name: 'size-mode', value: 'follow' }), ' Follow the others’ windows (mine sizes it only while nobody else here can type)'),
    );
    mode.addEventListener('change', (e) => this.size.setMode(e.target.value));
    const view = h(
      'fieldset',
      { class: 'prefs-view' },
      h('legend', {}, 'A session bigger than this window'),
      h('label', {}, h('input', { type: 'radio', name: 'view-mode', value: 'fit' }), ' Shrink it to fit, not below readable text; drag for the rest'),
      h('label', {}, h('input', { type: 'radio', name: 'view-mode', value: 'pan' }), ' Keep my font size; drag to see the rest'),
    );
    view.addEventListener('change', (e) => this.size.setView(e.target.value));
    const panel = h(
      'div',
      { class: 'prefs', id: 'prefs', hidden: true, role: 'dialog', 'aria-label': 'Terminal preferences' },
      h(
        'div',
        { class: 'prefs-row' },
        h('span', { class: 'prefs-label' }, 'Font size'),
        h('button', { type: 'button', class: 'btn btn-small', id: 'font-smaller', 'aria-label': 'Smaller text (Ctrl −)', title: 'Smaller (Ctrl −)', onclick: () => this.fontSize(-1) }, '−'),
        font,
        h('button', { type: 'button', class: 'btn btn-small', id: 'font-bigger', 'aria-label': 'Bigger text (Ctrl +)', title: 'Bigger (Ctrl +)', onclick: () => this.fontSize(1) }, '+'),
      ),
      h('label', { class: 'prefs-row' }, h('span', { class: 'prefs-label' }, 'Theme'), theme),
      mode,
      view,
    );
    document.querySelector('.workspace').append(panel);
    return panel;
  }

  toggle(open = this.panel.hidden) {
    this.panel.hidden = !open;
    this.button.setAttribute('aria-expanded', String(open));
    if (open) this.render();
  }

  /** Ctrl/Cmd with + − 0 changes the terminal's font size rather than the page's zoom. */
  onKey(e) {
    if (!(e.ctrlKey || e.metaKey) || e.altKey || e.shiftKey) return;
    const step = { '=': 1, '+': 1, '-': -1, _: -1, '0': 0 }[e.key];
    if (step === undefined) return;
    e.preventDefault();
    e.stopPropagation();
    this.fontSize(step);
  }

  /** +1, −1, or 0 for the default. */
  fontSize(step) {
    const prefs = loadPrefs();
    let n = this.term.options.fontSize;
    if (step === 0) {
      delete prefs.fontSize;
      savePrefs(prefs);
      n = initialFontSize();
    } else {
      n = Math.min(FONT_MAX, Math.max(FONT_MIN, n + step));
      savePrefs({ ...prefs, fontSize: n });
    }
    if (n !== this.term.options.fontSize) {
      this.term.options.fontSize = n;
      this.relayout();
    }
    this.render();
  }

  applyTheme() {
    const o = terminalThemeOptions(themeName());
    this.term.options.theme = o.theme;
    this.term.options.minimumContrastRatio = o.minimumContrastRatio;
    // The frame around the terminal takes its background, so the margins match.
    if (themeName() === 'system') document.documentElement.style.removeProperty('--term-bg');
    else document.documentElement.style.setProperty('--term-bg', o.theme.background);
    document.body.dataset.theme = themeName();
    // The bars, panels and dialogs go with it: a dark terminal in a dark page.
    applyPageScheme(themeName());
    this.render();
  }

  /** The size mode or view changed elsewhere (the hint's buttons). */
  sizeMode() {
    this.render();
  }

  render() {
    const p = this.panel;
    p.querySelector('#font-size').textContent = `${this.term.options.fontSize}px`;
    p.querySelector('#theme-select').value = themeName();
    const readOnly = Boolean(this.status()?.readOnly);
    p.querySelector('.prefs-size').hidden = readOnly;
    for (const r of p.querySelectorAll('input[name="size-mode"]')) r.checked = r.value === this.size.mode;
    for (const r of p.querySelectorAll('input[name="view-mode"]')) r.checked = r.value === this.size.view;
  }
}

/** The "↓ New output" pill: shown when output arrives while the reader is scrolled up; a click goes back to the live bottom. */
export function newOutputPill(term, parent) {
  const pill = h('button', { type: 'button', class: 'new-output', id: 'new-output', hidden: true }, '↓ New output');
  parent.append(pill);
  const atBottom = () => term.buffer.active.viewportY >= term.buffer.active.baseY;
  pill.addEventListener('click', () => {
    term.scrollToBottom();
    pill.hidden = true;
    term.focus();
  });
  term.onScroll(() => {
    if (atBottom()) pill.hidden = true;
  });
  term.onWriteParsed(() => {
    if (!atBottom()) pill.hidden = false;
  });
  return pill;
}

/** The scrollback search bar (Ctrl+Shift+F, or the bar's button): next, previous, close (Esc). */
export class SearchBar {
  /**
   * @param {object} o
   * @param {import('./vendor/xterm/xterm.mjs').Terminal} o.term
   * @param {import('./vendor/addon-search/addon-search.mjs').SearchAddon} o.search
   * @param {HTMLButtonElement} o.button
   * @param {HTMLElement} o.parent
   */
  constructor({ term, search, button, parent }) {
    this.term = term;
    this.search = search;
    this.button = button;
    this.input = h('input', { type: 'search', id: 'search-input', placeholder: 'Search the scrollback', 'aria-label': 'Search the scrollback', spellcheck: 'false', autocomplete: 'off' });
    this.count = h('span', { class: 'search-count muted', 'aria-live': 'polite' });
    const prev = h('button', { type: 'button', class: 'btn btn-small', 'aria-label': 'Previous match', title: 'Previous (Shift+Enter)', onclick: () => this.find(false) }, '↑');
    const next = h('button', { type: 'button', class: 'btn btn-small', 'aria-label': 'Next match', title: 'Next (Enter)', onclick: () => this.find(true) }, '↓');
    const close = h('button', { type: 'button', class: 'icon-btn search-close', 'aria-label': 'Close search', title: 'Close (Esc)', onclick: () => this.toggle(false) }, '×');
    this.bar = h('div', { class: 'search', id: 'search', hidden: true, role: 'search' }, this.input, this.count, prev, next, close);
    parent.append(this.bar);
    search.onDidChangeResults(({ resultIndex, resultCount }) => {
      this.count.textContent = !this.input.value ? '' : resultCount === 0 ? 'No match' : `${resultIndex + 1} of ${resultCount}`;
    });
    this.input.addEventListener('input', () => this.find(true, true));
    this.input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') {
        e.preventDefault();
        this.find(!e.shiftKey);
      } else if (e.key === 'Escape') {
        e.preventDefault();
        this.toggle(false);
      }
    });
    button.addEventListener('click', () => this.toggle());
    document.addEventListener(
      'keydown',
      (e) => {
        if ((e.ctrlKey || e.metaKey) && e.shiftKey && e.code === 'KeyF') {
          e.preventDefault();
          e.stopPropagation();
          this.toggle(true);
        }
      },
      true,
    );
  }

  /** The decorations xterm draws for every match and the current one. */
  options() {
    const bg = parseInt(String(this.term.options.theme?.background || '#000000').slice(1, 7), 16) || 0;
    const dark = 0.299 * (bg >> 16) + 0.587 * ((bg >> 8) & 0xff) + 0.114 * (bg & 0xff) < 128;
    return {
      decorations: {
        matchBackground: dark ? '#6e5600' : '#fff3a8',
        matchOverviewRuler: '#d4a72c',
        activeMatchBackground: dark ? '#b86200' : '#ffb35c',
        activeMatchColorOverviewRuler: '#ff8c00',
      },
    };
  }

  /** Finds the next (or previous) match; `incremental` keeps the current one while typing. Returns whether one was found. */
  find(forward = true, incremental = false) {
    const q = this.input.value;
    if (!q) {
      this.search.clearDecorations();
      this.count.textContent = '';
      return false;
    }
    const o = { ...this.options(), incremental };
    return forward ? this.search.findNext(q, o) : this.search.findPrevious(q, o);
  }

  toggle(open = this.bar.hidden) {
    this.bar.hidden = !open;
    this.button.setAttribute('aria-expanded', String(open));
    if (open) {
      this.input.focus();
      this.input.select();
    } else {
      this.search.clearDecorations();
      this.term.focus();
    }
  }
}
