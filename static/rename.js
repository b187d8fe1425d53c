// Renaming the session from the status bar: the name button opens a small form, checked as you type, sent as `rename_session`.

import { validateName } from './util.js';

export class Rename {
  /**
   * @param {object} o
   * @param {HTMLButtonElement} o.button the session's name in the bar, which opens the form
   * @param {HTMLFormElement} o.form the form, with its input, Save button and error line
   * @param {() => boolean} o.allowed whether this page may rename the session now
   * @param {() => string} o.current the session's name now ('' when unnamed)
   * @param {(obj: object) => boolean} o.send sends a JSON message; false when not connected
   * @param {() => void} o.done gives the focus back (to the terminal) after a save or Escape
   */
  constructor({ button, form, allowed, current, send, done }) {
    this.button = button;
    this.form = form;
    this.input = form.querySelector('input');
    this.error = form.querySelector('.rename-error');
    this.allowed = allowed;
    this.current = current;
    this.send = send;
    this.done = done;

    button.addEventListener('click', () => this.start());
    // Keep the focus in the input while Save is pressed, so its blur does not close the form first.
    form.querySelector('button').addEventListener('mousedown', (e) => e.preventDefault());
    this.input.addEventListener('input', () => {
      const v = validateName(this.input.value);
      this.showError(v.ok ? '' : v.error);
    });
    this.input.addEventListener('keydown', (e) => {
      if (e.key === 'Escape') {
        e.preventDefault();
        this.end();
        this.done();
      }
    });
    this.input.addEventListener('blur', () => {
      // Clicking Save blurs the input first; let the submit run before the form goes away.
      setTimeout(() => {
        if (!form.contains(document.activeElement)) this.end();
      }, 150);
    });
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      this.submit();
    });
  }

  showError(text) {
    this.error.textContent = text || '';
    this.error.hidden = !text;
    this.input.setAttribute('aria-invalid', String(Boolean(text)));
  }

  start() {
    if (!this.allowed()) return;
    this.input.value = this.current();
    this.showError('');
    this.button.hidden = true;
    this.form.hidden = false;
    this.input.focus();
    this.input.select();
  }

  end() {
    this.form.hidden = true;
    this.button.hidden = false;
    this.showError('');
  }

  submit() {
    const v = validateName(this.input.value);
    if (!v.ok) {
      this.showError(v.error);
      this.input.focus();
      return;
    }
    if (v.name !== this.current() && !this.send({ type: 'rename_session', name: v.name })) {
      this.showError('Not connected: try again in a moment.');
      return;
    }
    this.end();
    this.done();
  }
}
