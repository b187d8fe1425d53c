// The YOLO button: shows the mode, sends `toggle_yolo`, and says "restarting…" while the server's `status` says `restarting`.

export class YoloButton {
  /**
   * @param {object} o
   * @param {HTMLButtonElement} o.button
   * @param {{status: object|null, exit: object|null}} o.state the page's state: the last `status`, the `exit` once ended
   * @param {(obj: object) => boolean} o.send sends a JSON message; false when not connected
   * @param {(kind: string, text: string) => void} o.notify
   */
  constructor({ button, state, send, notify }) {
    this.button = button;
    this.state = state;
    /**
     * A restart is under way. The server's `status` is the authority: it is sent with
     * `restarting: true` when a restart starts and `restarting: false` once the new program is up.
     * The page only runs ahead of it between a click (or a "restart in progress" refusal) and the
     * status or error that follows.
     */
    this.restarting = false;
    button.addEventListener('click', () => {
      if (this.restarting) return;
      if (send({ type: 'toggle_yolo' })) this.setRestarting(true);
      else notify('error', 'Not connected: YOLO mode was not changed.');
    });
  }

  /** A `status` from the server. */
  status(s) {
    this.setRestarting(s.restarting === true);
  }

  /** An `error` from the server. */
  error(code) {
    if (code === 'restart_in_progress') this.setRestarting(true);
    if (code === 'yolo_unsupported' || code === 'not_running') this.setRestarting(false);
  }

  /** The program has ended: no restart is coming. */
  exited() {
    this.setRestarting(false);
  }

  setRestarting(on) {
    this.restarting = on;
    this.render();
  }

  render() {
    const b = this.button;
    const s = this.state.status;
    b.hidden = !s || !s.yoloSupported || Boolean(s.readOnly);
    if (!s) return;
    const on = Boolean(s.yoloMode);
    const restarting = this.restarting;
    b.setAttribute('aria-pressed', String(on));
    b.classList.toggle('on', on);
    b.classList.toggle('busy', restarting);
    b.disabled = restarting || Boolean(this.state.exit);
    b.querySelector('.yolo-state').textContent = restarting ? 'restarting…' : on ? 'on' : 'off';
    b.title = restarting
      ? 'The assistant is restarting'
      : on
        ? 'YOLO mode is on: the assistant acts without asking. Click to turn it off (restarts the assistant).'
        : 'YOLO mode is off: the assistant asks before acting. Click to turn it on (restarts the assistant).';
  }
}
