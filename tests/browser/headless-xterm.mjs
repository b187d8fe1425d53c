// xterm.js without a browser (@xterm/headless, the same release and Unicode 11 widths as the UI), driven over stdin for the Rust tests that hold the screen model to what a viewer shows.
//
// One JSON request a line on stdin, one JSON reply a line on stdout, in order:
//   {"op":"new","cols":80,"rows":24,"scrollback":5000}       -> {"id":1}
//   {"op":"write","id":1,"data":"<base64 bytes>"}             -> {}   (parsed before the reply)
//   {"op":"resize","id":1,"cols":60,"rows":24}                -> {}
//   {"op":"dump","id":1}                                      -> {"cols","rows","cursor":[x,y],"alt","lines":[...]}
//   {"op":"free","id":1}                                      -> {}
// A dump lists every line of the buffer (scrollback, then screen), each as {"wrapped", "cells"}, a
// cell as [chars, width, style] with style a short string of the attributes that differ from the
// default; `base` is the index of the screen's first line. Errors reply {"error": message}.
import { createInterface } from 'node:readline';
import xtermHeadless from '@xterm/headless';
import unicode11 from '@xterm/addon-unicode11';

const { Terminal } = xtermHeadless;
const { Unicode11Addon } = unicode11;

const terms = new Map();
let next = 1;

// xterm.js 6.0.0 writes past the start of its circular line list when a narrowing rewraps a
// line at the very top of a full buffer into more lines than fit (Buffer.ts, _reflowSmaller,
// `this.lines.set(i--, ...)` with i < 0): the line lands on whichever slot the list's rotation
// maps there, often the screen's last line. The model keeps its lines in order instead; a dump
// says `overran` once that happened to a terminal, so a comparison can tell the two apart.
let patched = false;
function watchOverruns(term) {
  const lines = term._core._bufferService.buffers.normal.lines;
  if (!patched) {
    const proto = Object.getPrototypeOf(lines);
    const set = proto.set;
    proto.set = function (index, value) {
      if (index < 0) this.ptyhubOverran = true;
      return set.call(this, index, value);
    };
    patched = true;
  }
}

function style(cell) {
  const parts = [];
  if (!cell.isFgDefault()) parts.push(`f${cell.isFgRGB() ? 'r' : 'p'}${cell.getFgColor()}`);
  if (!cell.isBgDefault()) parts.push(`b${cell.isBgRGB() ? 'r' : 'p'}${cell.getBgColor()}`);
  if (cell.isBold()) parts.push('B');
  if (cell.isDim()) parts.push('D');
  if (cell.isItalic()) parts.push('I');
  if (cell.isUnderline()) parts.push('U');
  if (cell.isInverse()) parts.push('R');
  return parts.join(' ');
}

function dump(term) {
  const buf = term.buffer.active;
  const lines = [];
  const cell = buf.getNullCell();
  for (let y = 0; y < buf.length; y++) {
    const line = buf.getLine(y);
    const cells = [];
    for (let x = 0; x < term.cols; x++) {
      if (!line.getCell(x, cell)) {
        cells.push(['', 1, '']);
        continue;
      }
      cells.push([cell.getChars(), cell.getWidth(), style(cell)]);
    }
    lines.push({ wrapped: line.isWrapped, cells });
  }
  return {
    cols: term.cols,
    rows: term.rows,
    base: buf.baseY,
    cursor: [buf.cursorX, buf.cursorY],
    alt: buf.type === 'alternate',
    overran: term._core._bufferService.buffers.normal.lines.ptyhubOverran === true,
    crashed: term.ptyhubCrashed ?? null,
    lines,
  };
}

async function handle(req) {
  switch (req.op) {
    case 'new': {
      const term = new Terminal({
        cols: req.cols,
        rows: req.rows,
        scrollback: req.scrollback ?? 5000,
        allowProposedApi: true,
      });
      term.loadAddon(new Unicode11Addon());
      watchOverruns(term);
      term.unicode.activeVersion = '11';
      const id = next++;
      terms.set(id, term);
      return { id };
    }
    case 'write': {
      const term = terms.get(req.id);
      // Synchronous, so that an exception xterm.js throws on its own state (6.0.0 can, after
      // some resizes: "Cannot set properties of undefined (setting 'isWrapped')") is caught
      // here and reported as `crashed` in the dump, rather than ending this process.
      try {
        term._core.writeSync(Buffer.from(req.data, 'base64'));
      } catch (e) {
        term.ptyhubCrashed = String(e && e.message ? e.message : e);
      }
      return {};
    }
    case 'resize':
      terms.get(req.id).resize(req.cols, req.rows);
      return {};
    case 'dump':
      return dump(terms.get(req.id));
    case 'free':
      terms.get(req.id)?.dispose();
      terms.delete(req.id);
      return {};
    default:
      throw new Error(`unknown op ${req.op}`);
  }
}

const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of rl) {
  if (!line.trim()) continue;
  let reply;
  try {
    reply = await handle(JSON.parse(line));
  } catch (e) {
    reply = { error: String(e && e.message ? e.message : e) };
  }
  process.stdout.write(`${JSON.stringify(reply)}\n`);
}
