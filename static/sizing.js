// Size: what fills this window, whether it sizes the session ("size to my window") or follows the others', taking control of the size, how a session bigger than the window is shown (fit down to readable text, or the chosen font size, panned), and the hint that says whose window sizes it.

import { deviceKind, personName } from './presence.js';
import { resizeFrame } from './protocol.js';
import { debounce, h } from './util.js';

const MODE_KEY = 'ptyhub.sizeMode';
const VIEW_KEY = 'ptyhub.viewMode';

/** Scaling to fit never takes the text below this many CSS pixels: past it, the view pans. */
export const MIN_TEXT_PX = 10;

/** After the reader pans, output leaves the view where it is for this long. */
const PAN_HOLD_MS = 4000;

function stored(key, allowed) {
  try {
    const v = localStorage.getItem(key);
    return allowed.includes(v) ? v : null;
  } catch {
    return null;
  }
}

function store(key, value) {
  try {
    localStorage.setItem(key, value);
  } catch {
    // Not remembered; this page still follows the choice.
  }
}

/** "Alice", "Alice and Bob", "Alice, Bob and Carol". */
function listWords(words) {
  if (words.length <= 1) return words.join('');
  return `${words.slice(0, -1).join(', ')} and ${words[words.length - 1]}`;
}

export class SizePolicy {
  /**
   * @param {object} o
   * @param {import('./vendor/addon-fit/addon-fit.mjs').FitAddon} o.fit
   * @param {import('./vendor/xterm/xterm.mjs').Terminal} o.term
   * @param {import('./output.js').OutputPipe} o.pipe
   * @param {import('./connection.js').Connection} o.conn
   * @param {{status: object|null, ready: boolean}} o.state the page's state: the last `status`, whether live
   * @param {HTMLElement} o.frame the element around the terminal; its size is the window's
   * @param {HTMLElement} o.host xterm's parent, the box the terminal is scaled to fit (and panned in)
   * @param {HTMLElement} o.hint where the size hint is shown
   * @param {() => object[]} o.people who is here (the last `presence`'s viewers)
   * @param {(mode: string) => void} [o.onMode] told when the mode or the view changes
   */
  constructor({ fit, term, pipe, conn, state, frame, host, hint, people, onMode }) {
    this.fit = fit;
    this.term = term;
    this.pipe = pipe;
    this.conn = conn;
    this.state = state;
    this.frame = frame;
    this.host = host;
    this.hint = hint;
    this.people = people;
    this.onMode = onMode || (() => {});
    this.sent = null; // the size this connection counts with, null when it does not count
    // Phones follow by default, held either way: one small screen should not shrink
    // everyone's terminal unless its person asks.
    this.device = deviceKind();
    this.mode = stored(MODE_KEY, ['mine', 'follow']) || (this.device === 'phone' ? 'follow' : 'mine');
    this.view = stored(VIEW_KEY, ['fit', 'pan']) || 'fit';
    this.scale = 1;
    this.pannedAt = 0;
    this.dismissed = ''; // the hint the reader closed: hidden until it says something else
    const onLayout = debounce(() => {
      // Until the session's size is known, fill the window so the page does not look empty.
      if (!this.state.status) this.fill();
      this.send();
      this.renderHint();
    }, 80);
    new ResizeObserver(onLayout).observe(frame);
    term.onResize(() => this.renderHint());
    // Output keeps the cursor in view while the reader is not looking elsewhere.
    let queued = false;
    term.onWriteParsed(() => {
      if (queued || !this.panning()) return;
      queued = true;
      requestAnimationFrame(() => {
        queued = false;
        if (Date.now() - this.pannedAt > PAN_HOLD_MS) this.revealCursor();
      });
    });
    this.panByHand();
  }

  /**
   * Panning the box by touch and by sideways wheels. xterm takes the touch and wheel events on
   * the terminal for its own scrollback, so the box takes those that pan it first (capture
   * phase): a drag across, or along while the box has room that way; the rest stay xterm's.
   */
  panByHand() {
    const box = this.host;
    let from = null; // {x, y, left, top, mine}
    box.addEventListener(
      'touchstart',
      (e) => {
        const t = e.touches[0];
        from = this.panning() && e.touches.length === 1 ? { x: t.clientX, y: t.clientY, left: box.scrollLeft, top: box.scrollTop, mine: null } : null;
      },
      { capture: true, passive: true },
    );
    box.addEventListener(
      'touchmove',
      (e) => {
        if (!from || e.touches.length !== 1) return;
        const t = e.touches[0];
        const dx = from.x - t.clientX;
        const dy = from.y - t.clientY;
        if (from.mine === null) {
          if (Math.abs(dx) < 6 && Math.abs(dy) < 6) return;
          const across = Math.abs(dx) > Math.abs(dy);
          const room = across ? box.scrollWidth > box.clientWidth : (dy > 0 ? box.scrollTop + box.clientHeight < box.scrollHeight - 1 : box.scrollTop > 0);
          from.mine = room;
        }
        if (!from.mine) return;
        e.preventDefault();
        e.stopPropagation();
        box.scrollLeft = from.left + dx;
        box.scrollTop = from.top + dy;
        this.pannedAt = Date.now();
      },
      { capture: true, passive: false },
    );
    box.addEventListener(
      'wheel',
      (e) => {
        if (!this.panning()) return;
        const dx = e.shiftKey && !e.deltaX ? e.deltaY : e.deltaX;
        if (!dx || Math.abs(dx) < Math.abs(e.shiftKey ? 0 : e.deltaY)) return;
        e.preventDefault();
        e.stopPropagation();
        box.scrollLeft += dx;
        this.pannedAt = Date.now();
      },
      { capture: true, passive: false },
    );
  }

  /** What would fill this window, in cells. */
  wanted() {
    const d = this.fit.proposeDimensions();
    if (!d || !Number.isFinite(d.cols) || !Number.isFinite(d.rows)) return null;
    return { cols: Math.min(1000, Math.max(1, d.cols)), rows: Math.min(500, Math.max(1, d.rows)) };
  }

  /** The others here who may type (from `presence`; before it, the status's count). */
  otherWriters() {
    const people = this.people();
    if (people.length) return people.filter((p) => !p.you && p.role === 'writer').length;
    return Math.max(0, (this.state.status?.viewers || 1) - 1);
  }

  /**
   * Whether this page sizes the session: a writer in "size to my window" mode, or a writer
   * that follows but is the only one here who may type (then there is nobody to follow).
   */
  sizing() {
    const s = this.state.status;
    if (!s || s.readOnly) return false;
    return this.mode === 'mine' || this.otherWriters() === 0;
  }

  /** Sizes the terminal to the window, before the session's size is known. */
  fill() {
    const want = this.wanted();
    if (want) this.pipe.resizeNow(want.cols, want.rows);
  }

  /** A new connection: nothing sent on it yet (and a new connection counts for nothing until it sends). */
  reset() {
    this.sent = null;
  }

  send() {
    const want = this.wanted();
    // Not before this connection's first status: until then we don't know whether we may.
    if (!want || !this.conn.open || this.pipe.gated || this.state.status?.readOnly) return;
    if (!this.sizing()) {
      // Counted until now: say we no longer do. A connection that never sent a size never counted.
      if (this.sent && this.conn.sendJSON({ type: 'resize', follow: true })) this.sent = null;
      return;
    }
    if (this.sent && this.sent.cols === want.cols && this.sent.rows === want.rows) return;
    if (this.conn.send(resizeFrame(want.rows, want.cols))) this.sent = want;
  }

  /** "Size the session to my window" ('mine') or "follow the others" ('follow'); remembered. */
  setMode(mode) {
    if (mode !== 'mine' && mode !== 'follow') return;
    this.mode = mode;
    store(MODE_KEY, mode);
    // Asked for: count this window again even if someone's "take control" dropped it.
    if (mode === 'mine') this.sent = null;
    this.send();
    this.renderHint();
    this.onMode(mode);
  }

  /** How a session bigger than this window is shown: 'fit' (down to readable text) or 'pan' (the chosen font size); remembered. */
  setView(view) {
    if (view !== 'fit' && view !== 'pan') return;
    this.view = view;
    store(VIEW_KEY, view);
    this.renderHint();
    this.revealCursor();
    this.onMode(this.mode);
  }

  /** "Take control of the size": the session gets this window's size; the others follow it. */
  takeControl() {
    const want = this.wanted();
    if (!want || this.state.status?.readOnly) return;
    this.mode = 'mine';
    store(MODE_KEY, 'mine');
    if (this.conn.sendJSON({ type: 'resize', cols: want.cols, rows: want.rows, control: true })) this.sent = want;
    this.onMode('mine');
  }

  /** Whether the terminal is bigger than its box at its scale (the reader pans to see the rest). */
  panning() {
    return this.frame.classList.contains('panned');
  }

  /**
   * Scales the terminal down when the session is larger than this window, so that more of it
   * shows, but never below MIN_TEXT_PX text (or not at all in the 'pan' view): what is left
   * over is reached by panning the box.
   */
  applyScale() {
    const el = this.term.element;
    if (!el) return 1;
    el.style.transform = '';
    const w = el.offsetWidth;
    const hgt = el.offsetHeight;
    const availW = this.host.clientWidth;
    const availH = this.host.clientHeight;
    let s = 1;
    if (w > 0 && hgt > 0 && availW > 0 && availH > 0) {
      const fits = Math.min(1, availW / w, availH / hgt);
      const floor = Math.min(1, MIN_TEXT_PX / (this.term.options.fontSize || 14));
      s = this.view === 'pan' ? 1 : Math.max(fits, floor);
    }
    // Under 1 % is rounding: leave the terminal crisp.
    if (s > 0.99) s = 1;
    this.scale = s;
    el.style.transform = s < 1 ? `scale(${s})` : '';
    el.style.transformOrigin = '0 0';
    this.frame.classList.toggle('scaled', s < 1);
    const panned = w * s > availW + 1 || hgt * s > availH + 1;
    const was = this.panning();
    this.frame.classList.toggle('panned', panned);
    if (panned && !was) this.revealCursor();
    if (!panned && was) this.host.scrollTo(0, 0); // nothing to pan over: no offset left behind
    return s;
  }

  /** Pans the box so that the cursor (where typing and output happen) is in view. */
  revealCursor() {
    if (!this.panning() || !this.term.element) return;
    const screen = this.term.element.querySelector('.xterm-screen');
    if (!screen) return;
    const cellW = (screen.offsetWidth / this.term.cols) * this.scale;
    const cellH = (screen.offsetHeight / this.term.rows) * this.scale;
    const b = this.term.buffer.active;
    const x = b.cursorX * cellW;
    const y = b.cursorY * cellH;
    const box = this.host;
    const margin = 2 * cellW;
    if (x < box.scrollLeft + margin || x + cellW > box.scrollLeft + box.clientWidth - margin) {
      box.scrollLeft = Math.max(0, x - box.clientWidth / 2);
    }
    if (y < box.scrollTop || y + cellH > box.scrollTop + box.clientHeight) {
      box.scrollTop = Math.max(0, y + cellH - box.clientHeight + cellH);
    }
  }

  /** The person typed: show where it goes. */
  typed() {
    this.pannedAt = 0;
    this.revealCursor();
  }

  /**
   * Whose windows size the session, in words for this reader: "Alice’s window",
   * "your window", "your and Bob’s windows"; '' when nobody's does.
   */
  holders() {
    const ids = Array.isArray(this.state.status?.sizedBy) ? this.state.status.sizedBy : [];
    const people = this.people();
    const who = ids.map((id) => people.find((p) => p.id === id) || { id, name: null });
    const others = who.filter((p) => !p.you);
    const names = others.map((p) => `${personName(p)}’s`);
    if (who.some((p) => p.you)) names.unshift('your');
    if (!names.length) return { text: '', others: 0, mine: false };
    const many = names.length > 1;
    return { text: `${listWords(names)} window${many ? 's' : ''}`, others: others.length, mine: who.length > others.length };
  }

  renderHint() {
    const s = this.state.status;
    const want = this.wanted();
    const scale = this.applyScale();
    let text = '';
    let action = null;
    if (s && want && this.state.ready) {
      const bigger = want.cols < s.cols || want.rows < s.rows;
      const smaller = want.cols > s.cols || want.rows > s.rows;
      const size = `${s.cols}×${s.rows}`;
      const held = this.holders();
      const by = held.text ? `sized by ${held.text}` : 'which nobody’s window sizes now';
      const seen = !bigger ? '' : this.panning() ? (scale < 1 ? ' Scaled down as far as stays readable; drag to see the rest.' : ' Drag to see the rest.') : ' Scaled to fit.';
      const here = this.device === 'phone' ? 'this phone' : this.device === 'tablet' ? 'this tablet' : 'this window';
      if (s.readOnly) {
        if (bigger || (smaller && held.text)) text = `The session is ${size}, ${by}.${seen}`;
      } else if (!this.sizing()) {
        if (bigger || smaller) {
          text = `The session is ${size}, ${by}; ${here} follows it.${seen}`;
          action = ['Size it to my window', () => this.setMode('mine')];
        }
      } else if (bigger) {
        // This page sizes it, yet it is bigger: someone's "take control" dropped this window's size.
        text = `The session is ${size}, ${by}: ${here}’s size does not count until you size it again.${seen}`;
        action = ['Size it to my window', () => this.setMode('mine')];
      } else if (smaller && held.others > 0) {
        text = `The session is ${size}, ${by}: it is smaller than ${here}.`;
        action = ['Take control of the size', () => this.takeControl()];
      }
    }
    const children = [h('span', { class: 'size-hint-text' }, text)];
    if (action) children.push(h('button', { type: 'button', class: 'link-btn size-hint-action', onclick: action[1] }, action[0]));
    const close = () => {
      this.dismissed = text;
      this.hint.hidden = true;
    };
    children.push(h('button', { type: 'button', class: 'size-hint-close', 'aria-label': 'Hide this note', title: 'Hide this note', onclick: close }, '×'));
    this.hint.replaceChildren(...children);
    if (text !== this.dismissed) this.dismissed = '';
    this.hint.hidden = !text || text === this.dismissed;
    this.hint.dataset.scale = String(Math.round(scale * 100));
    this.frame.classList.toggle('outsized', Boolean(s) && this.state.ready && !this.panning() && scale === 1 && Boolean(want) && (want.cols > s.cols || want.rows > s.rows));
  }
}
