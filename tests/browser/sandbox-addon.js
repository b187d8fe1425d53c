// A SandboxAddon written from seed 000's description alone (a sandbox terminal API's xterm.js
// addon): what a client built for that API does when pointed at ptyhub's raw dialect. Served to
// test pages; nothing of ptyhub's own client code is used.
//
// From the seed: options getWebSocketUrl({ sandboxId, sessionId, origin }), reconnect (default
// true, exponential backoff), onStateChange(state, error) with 'disconnected' | 'connecting' |
// 'connected'; connect({ sandboxId, sessionId }) (the same target again is a no-op, a new one
// replaces it), disconnect(); properties state, sandboxId, sessionId. The wire: binaryType
// arraybuffer; buffered output replayed as binary frames, possibly before `ready`; keystrokes as
// UTF-8 binary frames; `{"type":"resize","cols","rows"}` text frames; `ready`, `exit`
// (code, signal) and `error` (message) from the server. "Reconnecting to the same session
// replays buffered output so the terminal appears unchanged": the terminal is reset first.

const RETRY_FIRST_MS = 1000;
const RETRY_MAX_MS = 30000;

export class SandboxAddon {
  constructor({ getWebSocketUrl, reconnect = true, onStateChange } = {}) {
    this._getUrl = getWebSocketUrl;
    this._reconnect = reconnect;
    this._onStateChange = onStateChange;
    this.state = 'disconnected';
    this.sandboxId = undefined;
    this.sessionId = undefined;
    /** The last `exit` status message, and every status message, for whoever embeds this. */
    this.exit = null;
    this.messages = [];
    this._retries = 0;
  }

  activate(terminal) {
    this._terminal = terminal;
    const encoder = new TextEncoder();
    this._disposables = [
      terminal.onData((data) => this._send(encoder.encode(data))),
      terminal.onResize(({ cols, rows }) => this._send(JSON.stringify({ type: 'resize', cols, rows }))),
    ];
  }

  dispose() {
    this.disconnect();
    for (const d of this._disposables ?? []) d.dispose();
  }

  connect({ sandboxId, sessionId }) {
    if (sandboxId === this.sandboxId && sessionId === this.sessionId && this.state !== 'disconnected') return;
    this.disconnect();
    this.sandboxId = sandboxId;
    this.sessionId = sessionId;
    this._wanted = true;
    this._open();
  }

  disconnect() {
    this._wanted = false;
    clearTimeout(this._timer);
    if (this._ws) {
      const ws = this._ws;
      this._ws = null;
      ws.close();
    }
    this._setState('disconnected');
  }

  _setState(state, error) {
    if (state === this.state && !error) return;
    this.state = state;
    this._onStateChange?.(state, error);
  }

  _send(data) {
    if (this._ws?.readyState === WebSocket.OPEN) this._ws.send(data);
  }

  _open() {
    const origin = location.origin.replace(/^http/, 'ws');
    const ws = new WebSocket(this._getUrl({ sandboxId: this.sandboxId, sessionId: this.sessionId, origin }));
    ws.binaryType = 'arraybuffer';
    this._ws = ws;
    this._setState('connecting');
    let fresh = true;
    ws.onopen = () => {
      // The server starts the PTY at its own default size: tell it ours.
      this._send(JSON.stringify({ type: 'resize', cols: this._terminal.cols, rows: this._terminal.rows }));
    };
    ws.onmessage = (event) => {
      if (ws !== this._ws) return;
      if (fresh) {
        // The replay (or `ready`) is the first thing a connection sends: draw it on a clean terminal.
        fresh = false;
        this._terminal.reset();
      }
      if (event.data instanceof ArrayBuffer) {
        this._terminal.write(new Uint8Array(event.data));
        return;
      }
      const msg = JSON.parse(event.data);
      this.messages.push(msg);
      if (msg.type === 'ready') {
        this._retries = 0;
        this._setState('connected');
      } else if (msg.type === 'exit') {
        this.exit = msg;
      } else if (msg.type === 'error') {
        this._lastError = new Error(msg.message);
      }
    };
    ws.onclose = () => {
      if (ws !== this._ws) return;
      this._ws = null;
      this._setState('disconnected', this._lastError);
      if (!this._wanted || !this._reconnect) return;
      const delay = Math.min(RETRY_MAX_MS, RETRY_FIRST_MS * 2 ** this._retries);
      this._retries += 1;
      this._timer = setTimeout(() => this._open(), delay);
    };
  }
}
