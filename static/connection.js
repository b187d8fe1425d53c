// One session's WebSocket: connecting, reconnecting (every few seconds while the page is seen, backing off further while hidden), the heartbeat, and dispatch.

// Timings can be shortened by tests through `window.ptyhubTimings` before the page's scripts run.
const T = {
  firstRetryMs: 1000, // backoff starts here and doubles...
  visibleMaxRetryMs: 2500, // ...up to this while the page is visible, so it is live again within moments of ptyhub's return...
  maxRetryMs: 30000, // ...and up to this while it is hidden (coming back into view retries at once)
  pingEveryMs: 30000, // heartbeat period
  missedPongs: 2, // this many unanswered pings in a row: the connection is dead
  ...(window.ptyhubTimings || {}),
};

/**
 * States, reported through `onState({state, retryAt, attempt})`:
 * - `connecting`: a socket is opening;
 * - `open`: connected (the page decides when it is really "live", on `ready`);
 * - `waiting`: lost; the next attempt is at `retryAt` (ms since epoch);
 * - `stopped`: no more attempts (the session ended, or the page gave up).
 */
export class Connection {
  /**
   * @param {() => string} url builds the URL for each attempt (what to send may change after the first join)
   * @param {object} on handlers: open(), binary(Uint8Array), message(obj), state(s), and
   *   close({code, reason, opened}) → whether to try again: true, 'now' (without backoff) or false
   *   (`opened`: the socket got as far as open)
   */
  constructor(url, on) {
    this.url = url;
    this.on = on;
    this.ws = null;
    this.state = 'stopped';
    this.attempt = 0;
    this.retryTimer = 0;
    this.pingTimer = 0;
    this.unanswered = 0;
    this.retryAt = 0;
    addEventListener('online', () => this.retrySoon());
    document.addEventListener('visibilitychange', () => {
      if (document.visibilityState === 'visible') this.retrySoon();
    });
  }

  start() {
    this.stopped = false;
    this.connect();
  }

  /** Never reconnect again; close the socket if `close` is set. */
  stop(close = false) {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    this.stopHeartbeat();
    if (close && this.ws) this.drop(this.ws, 1000, 'page closed');
    this.setState('stopped');
  }

  /** The session answered (`ready`): the next loss starts the backoff from the beginning again. */
  healthy() {
    this.attempt = 0;
  }

  get open() {
    return this.ws !== null && this.ws.readyState === WebSocket.OPEN;
  }

  get bufferedAmount() {
    return this.ws ? this.ws.bufferedAmount : 0;
  }

  send(data) {
    if (!this.open) return false;
    this.ws.send(data);
    return true;
  }

  sendJSON(obj) {
    return this.send(JSON.stringify(obj));
  }

  /** Try at once instead of waiting out the backoff (the "Retry now" button, the network coming back). */
  retryNow() {
    if (this.stopped || this.state !== 'waiting') return;
    clearTimeout(this.retryTimer);
    this.connect();
  }

  retrySoon() {
    if (this.state === 'waiting') this.retryNow();
  }

  connect() {
    clearTimeout(this.retryTimer);
    this.setState('connecting');
    let ws;
    try {
      ws = new WebSocket(this.url());
    } catch (e) {
      console.error('ptyhub: cannot open WebSocket', e);
      this.lost({ code: 1006, reason: String(e), opened: false });
      return;
    }
    ws.binaryType = 'arraybuffer';
    this.ws = ws;
    let opened = false;
    ws.onopen = () => {
      opened = true;
      this.unanswered = 0;
      this.startHeartbeat();
      this.setState('open');
      this.on.open();
    };
    ws.onmessage = (ev) => {
      if (typeof ev.data === 'string') {
        let msg;
        try {
          msg = JSON.parse(ev.data);
        } catch {
          console.warn('ptyhub: ignoring a text frame that is not JSON', ev.data.slice(0, 200));
          return;
        }
        if (msg && msg.type === 'pong') {
          this.unanswered = 0;
          return;
        }
        this.on.message(msg);
      } else {
        this.on.binary(new Uint8Array(ev.data));
      }
    };
    ws.onclose = (ev) => {
      if (this.ws !== ws) return;
      this.lost({ code: ev.code, reason: ev.reason, opened });
    };
    // onerror is always followed by onclose, which carries the code: nothing to do here.
  }

  /** Forget `ws` (its late events are ignored) and close it without waiting for its handshake. */
  drop(ws, code, reason) {
    ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
    try {
      ws.close(code, reason);
    } catch {
      // Already closing.
    }
    if (this.ws === ws) this.ws = null;
  }

  lost(info) {
    this.ws = null;
    this.stopHeartbeat();
    const again = this.on.close(info);
    if (this.stopped || !again) {
      this.stop();
      return;
    }
    // 'now': the server said it is restarting (1012) and will be right back: no backoff.
    const max = document.visibilityState === 'visible' ? Math.min(T.visibleMaxRetryMs, T.maxRetryMs) : T.maxRetryMs;
    const delay = again === 'now' ? 0 : Math.min(max, T.firstRetryMs * 2 ** this.attempt);
    if (again !== 'now') this.attempt++;
    this.retryAt = Date.now() + delay;
    this.retryTimer = setTimeout(() => this.connect(), delay);
    this.setState('waiting');
  }

  startHeartbeat() {
    this.stopHeartbeat();
    this.pingTimer = setInterval(() => {
      if (this.unanswered >= T.missedPongs) {
        // The socket looks open but nothing comes back (a sleeping laptop, a dead NAT entry):
        // give up on it now rather than wait for TCP to notice.
        const ws = this.ws;
        if (ws) this.drop(ws, 4000, 'heartbeat lost');
        this.lost({ code: 4000, reason: 'no answer to the heartbeat', opened: true });
        return;
      }
      this.unanswered++;
      this.sendJSON({ type: 'ping', data: { ts: Date.now() } });
    }, T.pingEveryMs);
  }

  stopHeartbeat() {
    clearInterval(this.pingTimer);
    this.pingTimer = 0;
  }

  setState(state) {
    this.state = state;
    this.on.state({ state, retryAt: this.retryAt, attempt: this.attempt });
  }
}
