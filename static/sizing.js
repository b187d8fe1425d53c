// Size: what fills this window, whether it sizes the session ("size to my window") or only follows it ("don't size from me", scaled to fit), taking control of the size, and the hint when sizes differ.

import { resizeFrame } from './protocol.js';
import { debounce, h } from './util.js';

const MODE_KEY = 'ptyhub.sizeMode';

/** The stored choice, if the person made one: 'mine' or 'follow'. */
function storedMode() {
  try {
    const m = localStorage.getItem(MODE_KEY);
    return m === 'mine' || m === 'follow' ? m : null;
  } catch {
    return null;
  }
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
   * @param {HTMLElement} o.host xterm's parent, the box the terminal is scaled to fit
   * @param {HTMLElement} o.hint where the size hint is shown
   * @param {(mode: string) => void} [o.onMode] told when the mode changes
   */
  constructor({ fit, term, pipe, conn, state, frame, host, hint, onMode }) {
    this.fit = fit;
    this.term = term;
    this.pipe = pipe;
    this.conn = conn;
    this.state = state;
    this.frame = frame;
    this.host = host;
    this.hint = hint;
    this.onMode = onMode || (() => {});
    this.sent = null; // the size this connection counts with, null when it does not count
    // Phones follow by default: one small screen should not shrink everyone's terminal.
    const phone = matchMedia('(pointer: coarse)').matches && matchMedia('(max-width: 760px)').matches;
    this.mode = storedMode() || (phone ? 'follow' : 'mine');
    this.scale = 1;
    const onLayout = debounce(() => {
      // Until the session's size is known, fill the window so the page does not look empty.
      if (!this.state.status) this.fill();
      this.send();
      this.renderHint();
    }, 80);
    new ResizeObserver(onLayout).observe(frame);
    term.onResize(() => this.renderHint());
  }

  /** What would fill this window, in cells. */
  wanted() {
    const d = this.fit.proposeDimensions();
    if (!d || !Number.isFinite(d.cols) || !Number.isFinite(d.rows)) return null;
    return { cols: Math.min(1000, Math.max(1, d.cols)), rows: Math.min(500, Math.max(1, d.rows)) };
  }

  /**
   * Whether this page sizes the session: a writer in "size to my window" mode, or any writer
   * alone in it (not sizing only matters when others watch too).
   */
  sizing() {
    const s = this.state.status;
    if (s?.readOnly) return false;
    return this.mode === 'mine' || (s !== null && s.viewers <= 1);
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

  /** "Size the session to my window" ('mine') or "don't size from me" ('follow'); remembered. */
  setMode(mode) {
    if (mode !== 'mine' && mode !== 'follow') return;
    this.mode = mode;
    try {
      localStorage.setItem(MODE_KEY, mode);
    } catch {
      // Not remembered; this page still follows the choice.
    }
    this.send();
    this.renderHint();
    this.onMode(mode);
  }

  /** "Take control of the size": the session gets this window's size; the others follow it. */
  takeControl() {
    const want = this.wanted();
    if (!want || this.state.status?.readOnly) return;
    this.mode = 'mine';
    try {
      localStorage.setItem(MODE_KEY, 'mine');
    } catch {
      // As above.
    }
    if (this.conn.sendJSON({ type: 'resize', cols: want.cols, rows: want.rows, control: true })) this.sent = want;
    this.onMode('mine');
  }

  /**
   * Scales the terminal down when the session is larger than this window (a follower, or after
   * someone else took control), so the whole screen shows instead of its top-left corner.
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
    if (w > 0 && hgt > 0 && availW > 0 && availH > 0) s = Math.min(1, availW / w, availH / hgt);
    // Under 1 % is rounding: leave the terminal crisp.
    if (s > 0.99) s = 1;
    this.scale = s;
    el.style.transform = s < 1 ? `scale(${s})` : '';
    el.style.transformOrigin = '0 0';
    this.frame.classList.toggle('scaled', s < 1);
    return s;
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
      if (s.readOnly) {
        if (bigger) text = `Scaled to fit: the session is ${s.cols}×${s.rows}.`;
      } else if (!this.sizing()) {
        if (bigger) text = `Scaled to fit: the session is ${s.cols}×${s.rows}, and this window does not size it.`;
        else if (smaller) text = `The session is ${s.cols}×${s.rows}; this window does not size it.`;
        if (text) action = ['Size it to my window', () => this.setMode('mine')];
      } else if (bigger) {
        text = `Someone took control of the size (${s.cols}×${s.rows}): scaled to fit.`;
        action = ['Size it to my window', () => this.takeControl()];
      } else if (s.viewers > 1 && smaller) {
        text = `The session is ${s.cols}×${s.rows} because another viewer's window is smaller.`;
        action = ['Take control of the size', () => this.takeControl()];
      }
    }
    const children = [h('span', { class: 'size-hint-text' }, text)];
    if (action) children.push(h('button', { type: 'button', class: 'link-btn size-hint-action', onclick: action[1] }, action[0]));
    this.hint.replaceChildren(...children);
    this.hint.hidden = !text;
    this.hint.dataset.scale = String(Math.round(scale * 100));
    this.frame.classList.toggle('outsized', Boolean(text) && scale === 1);
  }
}
