// Size: what fills this window, sending it to the session, and the hint when the session's size differs.

import { resizeFrame } from './protocol.js';
import { debounce } from './util.js';

export class SizePolicy {
  /**
   * @param {object} o
   * @param {import('./vendor/addon-fit/addon-fit.mjs').FitAddon} o.fit
   * @param {import('./output.js').OutputPipe} o.pipe
   * @param {import('./connection.js').Connection} o.conn
   * @param {{status: object|null, ready: boolean}} o.state the page's state: the last `status`, whether live
   * @param {HTMLElement} o.frame the element around the terminal; its size is the window's
   * @param {HTMLElement} o.hint where the size hint is shown
   */
  constructor({ fit, pipe, conn, state, frame, hint }) {
    this.fit = fit;
    this.pipe = pipe;
    this.conn = conn;
    this.state = state;
    this.frame = frame;
    this.hint = hint;
    this.sent = null; // the size sent on this connection
    const onLayout = debounce(() => {
      // Until the session's size is known, fill the window so the page does not look empty.
      if (!this.state.status) this.fill();
      this.send();
      this.renderHint();
    }, 80);
    new ResizeObserver(onLayout).observe(frame);
  }

  /** What would fill this window, in cells. */
  wanted() {
    const d = this.fit.proposeDimensions();
    if (!d || !Number.isFinite(d.cols) || !Number.isFinite(d.rows)) return null;
    return { cols: Math.min(1000, Math.max(1, d.cols)), rows: Math.min(500, Math.max(1, d.rows)) };
  }

  /** Sizes the terminal to the window, before the session's size is known. */
  fill() {
    const want = this.wanted();
    if (want) this.pipe.resizeNow(want.cols, want.rows);
  }

  /** A new connection: nothing sent on it yet. */
  reset() {
    this.sent = null;
  }

  send() {
    const want = this.wanted();
    // Not before this connection's first status: until then we don't know whether we may.
    if (!want || !this.conn.open || this.pipe.gated || this.state.status?.readOnly) return;
    if (this.sent && this.sent.cols === want.cols && this.sent.rows === want.rows) return;
    if (this.conn.send(resizeFrame(want.rows, want.cols))) this.sent = want;
  }

  renderHint() {
    const s = this.state.status;
    const want = this.wanted();
    let text = '';
    if (s && want && this.state.ready) {
      if (s.readOnly && (want.cols < s.cols || want.rows < s.rows)) {
        text = `This window is smaller than the session (${s.cols}×${s.rows}), so part of it is cut off.`;
      } else if (s.viewers > 1 && (want.cols > s.cols || want.rows > s.rows)) {
        text = `The session is ${s.cols}×${s.rows} because another viewer's window is smaller.`;
      }
    }
    this.hint.textContent = text;
    this.hint.hidden = !text;
    this.frame.classList.toggle('outsized', Boolean(text));
  }
}
