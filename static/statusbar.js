// The status bar's facts about the session (assistant, name, size, viewers, read-only) and the tab's title.

import { shortId } from './util.js';

export class StatusBar {
  /**
   * @param {object} o
   * @param {HTMLElement} o.bar the page's <header>
   * @param {import('./vendor/xterm/xterm.mjs').Terminal} o.term whose program may set a title
   * @param {string} o.uuid the session's id, for the short id of an unnamed session
   * @param {{status: object|null, ended: boolean, fatal: boolean}} o.state the page's state
   */
  constructor({ bar, term, uuid, state }) {
    this.state = state;
    this.uuid = uuid;
    this.programTitle = '';
    const $ = (id) => bar.querySelector(`#${id}`);
    this.el = {
      assistant: $('assistant'),
      name: $('name'),
      size: $('size'),
      viewers: $('viewers'),
      readonly: $('readonly'),
      upload: $('upload'),
    };
    term.onTitleChange((t) => {
      this.programTitle = t.trim().slice(0, 80);
      this.renderTitle();
    });
  }

  /** Shows the last `status`. */
  render() {
    const s = this.state.status;
    const { el } = this;
    document.body.classList.toggle('no-session', this.state.fatal);
    el.assistant.textContent = s.assistant || '…';
    const named = Boolean(s.sessionName);
    el.name.querySelector('.name-text').textContent = named ? s.sessionName : `Unnamed · ${s.uuidShort || shortId(this.uuid)}`;
    el.name.classList.toggle('unnamed', !named);
    el.name.disabled = Boolean(s.readOnly || this.state.ended);
    this.renderTitle();
    el.size.textContent = `${s.cols}×${s.rows}`;
    el.viewers.querySelector('.count').textContent = String(s.viewers);
    el.viewers.title = s.viewers === 1 ? 'Only you are watching' : `${s.viewers} people are watching, you included`;
    el.readonly.hidden = !s.readOnly;
    el.upload.hidden = Boolean(s.readOnly);
  }

  /** The session was ended: it can no longer be renamed. */
  ended() {
    this.el.name.disabled = true;
  }

  /** The tab's title: the session's name, else what the program calls itself (OSC title), else the assistant. */
  renderTitle() {
    const s = this.state.status;
    const title = s?.sessionName || this.programTitle || s?.assistant || 'Session';
    document.title = `${title} · ptyhub`;
  }
}
