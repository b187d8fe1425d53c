// Everything that draws into xterm, in stream order: snapshots (decompressed asynchronously), live output, resizes, acks.

import { SnapshotAssembler, gunzip, isSnapshotChunk } from './protocol.js';
import { deferred } from './util.js';

/** With `?flow=ack`, acknowledge after about this many bytes of live output have been drawn (docs/protocol.md §6). */
export const ACK_EVERY = 256 * 1024;

/**
 * Terminal output passes through one queue so that order is kept even though a snapshot is
 * decompressed asynchronously: output that arrives meanwhile waits behind it. Each connection
 * starts with a gate that holds everything until the session's size is known (the first
 * `status`), because a snapshot only reproduces the screen in a terminal of the session's size.
 */
export class OutputPipe {
  /**
   * @param {import('./vendor/xterm/xterm.mjs').Terminal} term
   * @param {object} on  ack(bytes): flow-control acknowledgement
   */
  constructor(term, on) {
    this.term = term;
    this.on = on;
    this.items = [];
    this.running = false;
    this.assembler = new SnapshotAssembler();
    this.snapshot = null; // deferred for the snapshot being assembled
    this.gate = null; // deferred opened by the first status of a connection
    this.epoch = 0; // bumps per connection, so a late write callback of an old one is not acked
    this.drawn = 0;
    this.acked = 0;
    this.snapshots = 0; // written so far (tests and diagnostics)
  }

  /** A new connection: drop half-assembled state of the last one and close the gate until its first status. */
  begin() {
    this.epoch++;
    this.assembler.reset();
    this.snapshot?.resolve(null);
    this.snapshot = null;
    this.gate?.resolve();
    this.gate = deferred();
    this.drawn = 0;
    this.acked = 0;
    this.push({ wait: this.gate.promise });
  }

  get gated() {
    return this.gate !== null;
  }

  /** The session's size is known: size the terminal to it and let the held output through. */
  openGate(cols, rows) {
    const gate = this.gate;
    if (!gate) return;
    this.gate = null;
    // Ahead of the gate there may still be output of an earlier connection in xterm's own write
    // buffer; the resize waits for it, then the gate opens.
    this.term.write('', () => {
      this.resizeNow(cols, rows);
      gate.resolve();
    });
  }

  binary(bytes) {
    if (isSnapshotChunk(bytes)) this.chunk(bytes);
    else this.push({ data: bytes });
  }

  /** A session size change from `status`, applied in order with the output around it. */
  resize(cols, rows) {
    this.push({ resize: [cols, rows] });
  }

  chunk(bytes) {
    if (bytes[1] === 0 || !this.snapshot) {
      this.snapshot?.resolve(null);
      this.snapshot = deferred();
      this.push({ wait: this.snapshot.promise, snapshot: true });
    }
    let gz;
    try {
      gz = this.assembler.add(bytes);
    } catch (e) {
      console.error('ptyhub: dropping a broken snapshot:', e.message);
      this.snapshot.resolve(null);
      this.snapshot = null;
      return;
    }
    if (!gz) return;
    const done = this.snapshot;
    this.snapshot = null;
    gunzip(gz).then(
      (ansi) => done.resolve(ansi),
      (e) => {
        console.error('ptyhub: cannot decompress the snapshot:', e);
        done.resolve(null);
      },
    );
  }

  push(item) {
    this.items.push(item);
    if (!this.running) this.run();
  }

  async run() {
    this.running = true;
    while (this.items.length) {
      const item = this.items.shift();
      if (item.wait) {
        const value = await item.wait;
        if (item.snapshot && value) {
          this.term.write(value);
          this.snapshots++;
        }
      } else if (item.resize) {
        const [cols, rows] = item.resize;
        // Wait until what came before is parsed, so the resize falls between the right bytes.
        await new Promise((r) => this.term.write('', r));
        this.resizeNow(cols, rows);
      } else {
        this.writeLive(item.data);
      }
    }
    this.running = false;
  }

  writeLive(bytes) {
    const epoch = this.epoch;
    const n = bytes.length;
    this.term.write(bytes, () => {
      if (epoch !== this.epoch) return;
      this.drawn += n;
      if (this.drawn - this.acked >= ACK_EVERY) {
        this.on.ack?.(this.drawn - this.acked);
        this.acked = this.drawn;
      }
    });
  }

  resizeNow(cols, rows) {
    if (cols > 0 && rows > 0 && (cols !== this.term.cols || rows !== this.term.rows)) this.term.resize(cols, rows);
  }
}
