// The end of a session on the page: the dialog when its program exits or it is ended, and the screen after which there is nothing to reconnect to.

import { describeExit } from './util.js';

export class EndScreens {
  /**
   * @param {object} o
   * @param {HTMLDialogElement} o.dialog the "session ended" dialog
   * @param {HTMLElement} o.fatal the box over the terminal for errors that end the page
   * @param {{exit: object|null, ended: boolean}} o.state the page's state: the `exit` message, whether ended (close 4003)
   */
  constructor({ dialog, fatal, state }) {
    this.dialog = dialog;
    this.fatal = fatal;
    this.state = state;
    this.stay = dialog.querySelector('#exit-stay');
    this.home = dialog.querySelector('#exit-home');
    this.stay.addEventListener('click', () => dialog.close());
  }

  /** The program exited, or the session was ended (or both): say how, once, in the dialog. */
  showEnd() {
    const { exit: e, ended } = this.state;
    document.body.classList.add('session-gone');
    let text;
    if (ended) {
      text = e
        ? `This session was ended, and its program ${describeExit(e.exitCode, e.signal)}.`
        : 'This session was ended, from the session list or by another viewer.';
    } else {
      text = `The program ${describeExit(e.exitCode, e.signal)}. You can still read its output and chat here.`;
    }
    this.dialog.querySelector('.exit-text').textContent = text;
    this.stay.textContent = ended ? 'Look at the output' : 'Stay here';
    if (!this.dialog.open) {
      this.dialog.showModal();
      this.home.focus();
    }
  }

  /**
   * Nothing more to do on this page: `title` and `text` say why. `keepScreen`: the session's
   * last screen stays in view under a card (a session that is gone, but was shown here);
   * otherwise the box covers the terminal.
   */
  showFatal(title, text, { keepScreen = false } = {}) {
    const box = this.fatal;
    box.querySelector('.fatal-title').textContent = title;
    box.querySelector('.fatal-text').textContent = text;
    box.classList.toggle('fatal-over', keepScreen);
    box.hidden = false;
    if (this.dialog.open) this.dialog.close();
    document.body.classList.add(keepScreen ? 'session-gone' : 'no-session');
    const first = [...box.querySelectorAll('a, button')].find((el) => !el.hidden);
    first?.focus();
  }
}
