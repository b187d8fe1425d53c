// Files into the session: short texts pasted into the terminal, longer text files pasted or saved as the person chooses, others uploaded one at a time with progress.

import { uploadFrame } from './protocol.js';
import { afterColon, formatBytes, h } from './util.js';

/** Text files up to this size may be pasted; larger ones are uploaded like any other file. */
const PASTE_MAX = 256 * 1024;
/** A text this short (characters and lines) is a snippet: pasted without asking. */
const SNIPPET_CHARS = 2048;
const SNIPPET_LINES = 20;
/** Uploads at least this big get a progress bar. */
const PROGRESS_MIN = 512 * 1024;
/** How long the server may take to answer an upload once it has all the bytes. */
const REPLY_TIMEOUT_MS = 120000;

const TEXT_TYPES = /^(text\/|application\/(json|xml|javascript|x-sh|x-shellscript|toml|x-toml|yaml|x-yaml|sql|x-httpd-php|ld\+json))/;
const TEXT_EXTENSIONS = new Set(
  ('txt md markdown rst json jsonl js mjs cjs ts tsx jsx py rb rs go java kt c h cc cpp hpp cs swift php pl lua sh bash zsh fish ' +
    'toml yaml yml ini cfg conf env csv tsv log sql html htm css scss xml svg diff patch gitignore dockerfile makefile')
    .split(' '),
);

function looksLikeText(file) {
  if (file.size > PASTE_MAX) return false;
  if (TEXT_TYPES.test(file.type)) return true;
  const base = file.name.toLowerCase();
  const ext = base.includes('.') ? base.slice(base.lastIndexOf('.') + 1) : base;
  return !file.type && TEXT_EXTENSIONS.has(ext);
}

/** How many lines `text` has (a last line without its newline counts too). */
function lineCount(text) {
  const breaks = text.split('\n').length - 1;
  return text.endsWith('\n') || text === '' ? breaks : breaks + 1;
}

/** Whether `text` is short enough to paste without asking. */
export function isSnippet(text) {
  return text.length <= SNIPPET_CHARS && lineCount(text) <= SNIPPET_LINES;
}

/** The file's text if it is valid UTF-8 without NUL bytes, else null. */
async function readText(file) {
  const bytes = new Uint8Array(await file.arrayBuffer());
  if (bytes.includes(0)) return null;
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    return null;
  }
}

export class Uploader {
  /**
   * @param {object} o
   * @param {import('./connection.js').Connection} o.conn
   * @param {import('./vendor/xterm/xterm.mjs').Terminal} o.term
   * @param {(kind: string, text: string, opts?: object) => object} o.notify shows a toast; returns a handle with update()/close()
   * @param {() => boolean} o.writable whether this page may change the session now
   */
  constructor({ conn, term, notify, writable }) {
    this.conn = conn;
    this.term = term;
    this.notify = notify;
    this.writable = writable;
    this.queue = [];
    this.busy = false;
    this.waiting = null; // {resolve} for the file_upload reply of the upload in flight
  }

  /**
   * Queue files (from the picker or a drop); they are handled one at a time in order.
   * `asFile`: save text files as files too (Shift held while dropping or choosing).
   */
  add(files, { asFile = false } = {}) {
    const list = [...files];
    if (!list.length) return;
    if (!this.writable()) {
      this.notify('error', 'Files cannot be added: this page is not connected to a running session you can type into.');
      return;
    }
    this.queue.push(...list.map((file) => ({ file, asFile })));
    if (!this.busy) this.drain();
  }

  async drain() {
    this.busy = true;
    while (this.queue.length) {
      const { file, asFile } = this.queue.shift();
      try {
        await this.one(file, asFile);
      } catch (e) {
        this.notify('error', `${file.name} was not added: ${afterColon(e.message)}.`.replace(/\.\.$/, '.'));
      }
    }
    this.busy = false;
  }

  async one(file, asFile) {
    if (!this.conn.open) throw new Error('not connected to ptyhub');
    if (!asFile && looksLikeText(file)) {
      const text = await readText(file);
      if (text !== null) {
        const how = isSnippet(text) ? 'paste' : await this.ask(file, text);
        if (how === 'cancel') {
          this.notify('info', `${file.name} was not added.`);
          return;
        }
        if (how === 'paste') {
          if (!this.conn.open) throw new Error('not connected to ptyhub');
          // xterm's paste() converts newlines to CR and adds the bracketed-paste markers when the
          // program has asked for them, exactly as a paste from the clipboard.
          this.term.paste(text);
          this.notify('ok', `Pasted ${file.name} (${formatBytes(file.size)}) into the terminal.`);
          return;
        }
      }
    }
    await this.upload(file);
  }

  /** Asks what to do with a text file longer than a snippet: 'paste', 'file' or 'cancel'. */
  ask(file, text) {
    const lines = lineCount(text);
    const paste = h('button', { type: 'submit', class: 'btn', value: 'paste' }, 'Paste it into the terminal');
    const save = h('button', { type: 'submit', class: 'btn btn-primary', value: 'file' }, 'Save it as a file');
    const cancel = h('button', { type: 'submit', class: 'btn', value: 'cancel' }, 'Cancel');
    const dialog = h(
      'dialog',
      { class: 'dialog dialog-upload', id: 'upload-ask', 'aria-labelledby': 'upload-ask-title' },
      h(
        'form',
        { method: 'dialog' },
        h('h2', { id: 'upload-ask-title' }, `Add ${file.name}`),
        h(
          'p',
          {},
          `It is a text file of ${lines} line${lines === 1 ? '' : 's'} (${formatBytes(file.size)}). Paste it into the terminal, as if typed, or save it in the session's directory and type its path?`,
        ),
        // Touch screens have no Shift to hold.
        matchMedia('(pointer: coarse)').matches ? null : h('p', { class: 'muted' }, 'Hold Shift while dropping a file to save it without asking.'),
        h('div', { class: 'dialog-actions' }, cancel, paste, save),
      ),
    );
    document.body.append(dialog);
    return new Promise((resolve) => {
      dialog.addEventListener('close', () => {
        dialog.remove();
        this.term.focus();
        resolve(['paste', 'file'].includes(dialog.returnValue) ? dialog.returnValue : 'cancel');
      });
      dialog.showModal();
      save.focus();
    });
  }

  async upload(file) {
    const data = new Uint8Array(await file.arrayBuffer());
    const frame = uploadFrame(file.name, data);
    const progress =
      file.size >= PROGRESS_MIN ? this.notify('progress', `Uploading ${file.name}…`, { sticky: true, progress: 0 }) : null;
    const reply = new Promise((resolve, reject) => {
      this.waiting = { resolve, reject };
    });
    const timer = setTimeout(() => this.fail(new Error('the server did not confirm it in time')), REPLY_TIMEOUT_MS);
    if (!this.conn.send(frame)) {
      clearTimeout(timer);
      progress?.close();
      this.waiting = null;
      throw new Error('not connected to ptyhub');
    }
    // The browser gives no events for a send in progress; how much is still buffered tells.
    if (progress) {
      const tick = () => {
        if (!this.waiting) return;
        const left = this.conn.bufferedAmount;
        const sent = Math.max(0, frame.length - left);
        progress.update(
          left > 0
            ? `Uploading ${file.name}: ${formatBytes(sent)} of ${formatBytes(frame.length)}`
            : `Saving ${file.name}…`,
          { progress: sent / frame.length },
        );
        if (left > 0) setTimeout(tick, 150);
      };
      tick();
    }
    try {
      const msg = await reply;
      if (msg.success) {
        this.notify('ok', `Uploaded ${msg.filename || file.name} (${formatBytes(file.size)}). Its path was typed into the terminal.`);
      } else {
        throw new Error(msg.error || 'the server refused it');
      }
    } finally {
      clearTimeout(timer);
      progress?.close();
      this.waiting = null;
    }
  }

  /** The server's `file_upload` reply. */
  reply(msg) {
    if (this.waiting) this.waiting.resolve(msg);
    else if (!msg.success) this.notify('error', `Upload failed: ${msg.error || 'the server refused it'}.`);
  }

  /** The connection went away: an upload in flight will get no reply. */
  fail(err = new Error('the connection was lost before the server confirmed it')) {
    if (this.waiting) this.waiting.reject(err);
  }
}
