// The /ws/{uuid} wire format of docs/protocol.md: binary frame encoders, the input first-byte rule, snapshot chunks.

export const FRAME_RESIZE = 0x00;
export const FRAME_UPLOAD = 0x01;
export const FRAME_SNAPSHOT = 0x02;

/** Terminal input is sent in frames of at most this many bytes, so a huge paste does not become one giant message. */
const INPUT_CHUNK = 64 * 1024;

const encoder = new TextEncoder();

/** `[0x00, rows_hi, rows_lo, cols_hi, cols_lo]` (section 2). */
export function resizeFrame(rows, cols) {
  return new Uint8Array([FRAME_RESIZE, (rows >> 8) & 0xff, rows & 0xff, (cols >> 8) & 0xff, cols & 0xff]);
}

/**
 * Terminal input (a string from xterm's onData, or bytes) as the frames to send.
 *
 * A frame of 3+ bytes starting with 0x00 or 0x01 would be read as a resize or an upload, so such a
 * leading byte goes alone (a 1-byte frame is always input) and the rest is checked again.
 */
export function inputFrames(data) {
  const bytes = typeof data === 'string' ? encoder.encode(data) : data;
  const frames = [];
  for (let start = 0; start < bytes.length; start += INPUT_CHUNK) {
    let rest = bytes.subarray(start, Math.min(bytes.length, start + INPUT_CHUNK));
    while (rest.length >= 3 && rest[0] <= FRAME_UPLOAD) {
      frames.push(rest.subarray(0, 1));
      rest = rest.subarray(1);
    }
    if (rest.length > 0) frames.push(rest);
  }
  return frames;
}

/** xterm's onBinary hands over a "binary string" (one char per byte), e.g. for X10 mouse reports. */
export function binaryStringBytes(s) {
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i) & 0xff;
  return out;
}

/** `[0x01, name_len_hi, name_len_lo, name…, data…]`; throws when the name cannot be framed. */
export function uploadFrame(name, data) {
  const nameBytes = encoder.encode(name);
  if (nameBytes.length === 0 || nameBytes.length > 0xffff) throw new Error('file name is empty or too long');
  const body = data instanceof Uint8Array ? data : new Uint8Array(data);
  const frame = new Uint8Array(3 + nameBytes.length + body.length);
  frame[0] = FRAME_UPLOAD;
  frame[1] = (nameBytes.length >> 8) & 0xff;
  frame[2] = nameBytes.length & 0xff;
  frame.set(nameBytes, 3);
  frame.set(body, 3 + nameBytes.length);
  return frame;
}

/** Server → client: `0x02` with 3+ bytes is a snapshot chunk; anything else is terminal output. */
export function isSnapshotChunk(bytes) {
  return bytes.length >= 3 && bytes[0] === FRAME_SNAPSHOT;
}

/**
 * Collects the chunks `[0x02, index, total, payload…]` of one snapshot.
 * `add` returns the whole gzip stream once the last chunk is in, else null; a chunk that does not
 * continue the sequence throws, and the caller starts over with the next index-0 chunk.
 */
export class SnapshotAssembler {
  constructor() {
    this.reset();
  }

  reset() {
    this.parts = [];
    this.total = 0;
  }

  get active() {
    return this.parts.length > 0;
  }

  add(chunk) {
    const index = chunk[1];
    const total = chunk[2];
    if (index === 0) this.reset();
    if (total === 0 || index !== this.parts.length || (this.total && total !== this.total)) {
      this.reset();
      throw new Error(`snapshot chunk ${index + 1}/${total} out of sequence`);
    }
    this.total = total;
    this.parts.push(chunk.subarray(3));
    if (this.parts.length < total) return null;
    const size = this.parts.reduce((n, p) => n + p.length, 0);
    const gz = new Uint8Array(size);
    let at = 0;
    for (const p of this.parts) {
      gz.set(p, at);
      at += p.length;
    }
    this.reset();
    return gz;
  }
}

/** Decompresses one gzip stream with the browser's own DecompressionStream. */
export async function gunzip(bytes) {
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}
