// The ptyhub addon for xterm.js: connects a Terminal to a live ptyhub session over the raw
// terminal dialect (`GET /ws/{id}/raw`, docs/protocol.md section 10) and keeps it connected.
//
//   import { Terminal } from 'https://HOST/vendor/xterm/xterm.mjs?v=6.0.0';
//   import { PtyhubAddon } from 'https://HOST/addon/ptyhub.js';
//   const term = new Terminal();
//   const ptyhub = new PtyhubAddon();
//   term.loadAddon(ptyhub);
//   term.open(document.getElementById('terminal'));
//   ptyhub.onStateChange((state, error) => console.log(state, error?.message));
//   ptyhub.connect('https://HOST/session/UUID?token=SHARE-TOKEN');
//
// new PtyhubAddon(options), every option optional:
//   token        sent as `?token=` (else a target URL's own `token`, else the page's cookie)
//   base         the server a bare id is on, e.g. 'https://HOST/' (default: this page's origin)
//   reconnect    true: retry a lost connection with exponential backoff and jitter
//   minDelayMs   500: the first retry's delay; it doubles per failed attempt...
//   maxDelayMs   30000: ...up to this; a connection that reaches `ready` starts over
//   pingEveryMs  20000: a ping this often; a connection that misses two pongs is dropped
//
// connect(target): joins a session, never creates one. `target` is a session page URL
//   (`http(s)://HOST/session/ID`, so a share link works as it is), a raw socket URL
//   (`ws(s)://HOST/ws/ID/raw`, its query kept), or a session id (uuid or number) resolved
//   against `base`. A new target replaces the current one.
// disconnect(): closes the connection; no retry follows.
// onStateChange(cb) → { dispose }: cb(state, error, detail) on every change, where state is
//   'connecting'   the first attempt of connect()
//   'open'         the screen is restored (`ready`) and live
//   'reconnecting' the connection was lost; detail = { attempt, delayMs } until the next try
//   'exited'       the program ended: exitCode (status, or 128 + signal) and exitSignal are set;
//                  the screen stays, nothing is retried after this
//   'closed'       disconnect(), or the session ended (close 4003), does not exist (4004), could
//                  not be created (4002), or the token was refused (1008): error says which
// Read-only: state, exitCode, exitSignal.
//
// On every (re)connection the terminal is reset before the server's replay is written: the
// replay alone restores the screen, scrollback and modes, so nothing appears twice. Keys go
// out as binary frames (UTF-8), so typed or pasted text that happens to look like a control
// message (`{"type":"resize",…}`) is never mistaken for one. Resizes are forwarded, and the
// current size is sent with each connection.

/** Close codes after which retrying cannot help (docs/protocol.md section 8). */
const FINAL_CLOSES = {
  1008: 'not authorised (wrong, revoked or expired token)',
  4002: 'the session could not be created',
  4003: 'the session was ended',
  4004: 'no such session',
};

/** xterm's full reset (RIS), written in order with the output so no older write lands after it. */
const RESET = '\x1bc';

const encoder = new TextEncoder();

export class PtyhubAddon {
  constructor(options = {}) {
    this._opts = { reconnect: true, minDelayMs: 500, maxDelayMs: 30000, pingEveryMs: 20000, ...options };
    this._listeners = new Set();
    this._term = null;
    this._subs = [];
    this._target = null;
    this._ws = null;
    this._retryTimer = 0;
    this._pingTimer = 0;
    this._attempt = 0;
    this.state = 'closed';
    this.exitCode = null;
    this.exitSignal = null;
  }

  /** Called by `terminal.loadAddon(this)`. */
  activate(terminal) {
    this._term = terminal;
    const send = (bytes) => {
      if (this._ws?.readyState === WebSocket.OPEN) this._ws.send(bytes);
    };
    this._subs = [
      terminal.onData((text) => send(encoder.encode(text))),
      // onBinary carries bytes as a string of code points 0–255 (mouse reports in X10 mode).
      terminal.onBinary((s) => send(Uint8Array.from(s, (c) => c.charCodeAt(0) & 0xff))),
      terminal.onResize(({ cols, rows }) => send(JSON.stringify({ type: 'resize', cols, rows }))),
    ];
  }

  /** Called when the terminal is disposed or the addon is: closes the connection. */
  dispose() {
    this.disconnect();
    for (const s of this._subs) s.dispose();
    this._subs = [];
    this._listeners.clear();
    this._term = null;
  }

  onStateChange(cb) {
    this._listeners.add(cb);
    return { dispose: () => this._listeners.delete(cb) };
  }

  connect(target) {
    if (!this._term) throw new Error('load the addon into a Terminal (terminal.loadAddon) before connect()');
    this._stop();
    this._target = target;
    this._attempt = 0;
    this.exitCode = null;
    this.exitSignal = null;
    this._set('connecting');
    this._open();
  }

  disconnect() {
    const was = this.state;
    this._stop();
    if (was !== 'closed') this._set('closed');
  }

  // ---- internals ----------------------------------------------------------------------------

  _set(state, error, detail) {
    this.state = state;
    for (const cb of [...this._listeners]) cb(state, error, detail);
  }

  /** Ends the current socket and timers; the socket's own close handler then does nothing. */
  _stop() {
    clearTimeout(this._retryTimer);
    clearInterval(this._pingTimer);
    const ws = this._ws;
    this._ws = null;
    if (ws && ws.readyState <= WebSocket.OPEN) ws.close(1000);
  }

  _open() {
    let ws;
    const asked = { cols: this._term.cols, rows: this._term.rows }; // the size the URL carries
    try {
      ws = new WebSocket(socketUrl(this._target, this._opts, asked));
    } catch (e) {
      this._set('closed', e);
      return;
    }
    ws.binaryType = 'arraybuffer';
    this._ws = ws;
    let serverError = null;
    let awaitingPong = false;
    ws.onopen = () => {
      if (this._ws !== ws) return;
      this._term.write(RESET);
      // A resize while the socket was opening was not sent: send the size now.
      const { cols, rows } = this._term;
      if (cols !== asked.cols || rows !== asked.rows) ws.send(JSON.stringify({ type: 'resize', cols, rows }));
      this._pingTimer = setInterval(() => {
        // Two intervals without a pong: the connection is dead even if the socket says open,
        // and its close handshake would never finish. Let it go and start over now.
        if (awaitingPong) {
          ws.close();
          this._lost(ws, 1006, null);
          return;
        }
        ws.send(JSON.stringify({ type: 'ping' }));
        awaitingPong = true;
      }, this._opts.pingEveryMs);
    };
    ws.onmessage = (e) => {
      if (this._ws !== ws) return;
      awaitingPong = false;
      if (typeof e.data !== 'string') {
        this._term.write(new Uint8Array(e.data));
        return;
      }
      let msg;
      try {
        msg = JSON.parse(e.data);
      } catch {
        return; // The dialect sends only JSON as text; anything else is not ours to draw.
      }
      if (msg.type === 'ready') {
        this._attempt = 0;
        this._set('open');
      } else if (msg.type === 'exit') {
        this.exitCode = msg.code ?? null;
        this.exitSignal = msg.signal ?? null;
        this._set('exited');
      } else if (msg.type === 'error') {
        serverError = msg.message || msg.code || 'error';
      }
    };
    ws.onclose = (e) => this._lost(ws, e.code, serverError);
  }

  /** The socket `ws` is gone (closed with `code`): retry, or stop for good when that cannot help. */
  _lost(ws, code, serverError) {
    if (this._ws !== ws) return; // disconnect(), a newer connect() or the ping timer let it go
    this._ws = null;
    clearInterval(this._pingTimer);
    const final = FINAL_CLOSES[code];
    if (final) {
      this._set('closed', new Error(serverError ? `${final}: ${serverError}` : final));
    } else if (this.state === 'exited') {
      this._set('closed');
    } else if (!this._opts.reconnect) {
      this._set('closed', new Error(`connection closed (code ${code})`));
    } else {
      // Exponential backoff with "equal jitter": half the delay fixed, half random, so many
      // clients dropped at once (a daemon restart) do not all come back at the same moment.
      // 1012: ptyhub is replacing itself in place (a live upgrade) and is back within
      // moments, its connections waiting in the listener's backlog: no delay, none counted.
      const cap = Math.min(this._opts.maxDelayMs, this._opts.minDelayMs * 2 ** this._attempt);
      const delayMs = code === 1012 ? 0 : Math.round(cap / 2 + (Math.random() * cap) / 2);
      if (code !== 1012) this._attempt += 1;
      this._set('reconnecting', new Error(`connection lost (code ${code})`), { attempt: this._attempt, delayMs });
      this._retryTimer = setTimeout(() => this._open(), delayMs);
    }
  }
}

/** The raw socket URL for `target` (see connect), with this terminal's size and the token. */
export function socketUrl(target, { token, base }, { cols, rows }) {
  const origin = base ?? `${globalThis.location?.origin}/`;
  let url;
  if (typeof target === 'number' || /^(\d+|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/i.test(target)) {
    url = new URL(`ws/${target}/raw`, origin); // relative: a base of https://HOST/prefix/ keeps its prefix
    url.searchParams.set('create', '0');
  } else {
    url = new URL(target, origin);
    const page = /^(.*)\/session\/([^/]+)\/?$/.exec(url.pathname);
    if (page) {
      // Keep a reverse proxy's path prefix: /prefix/session/ID → /prefix/ws/ID/raw.
      url.pathname = `${page[1]}/ws/${page[2]}/raw`;
      url.searchParams.set('create', '0');
    } else if (!/\/ws\/[^/]+\/raw\/?$/.test(url.pathname)) {
      throw new Error(`not a ptyhub session URL: ${target}`);
    }
  }
  url.protocol = url.protocol.replace(/^http/, 'ws');
  if (token) url.searchParams.set('token', token);
  url.searchParams.set('cols', String(cols));
  url.searchParams.set('rows', String(rows));
  return url.href;
}
