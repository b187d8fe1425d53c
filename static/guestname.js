// The guest's name prompt: a share link's visitor is asked once (remembered in this browser) what to be called; others see it marked as a guest's. A card over the page, not a modal: the session stays usable while it is up.

import { h } from './util.js';

const NAME_MAX = 32;

/** Asks for a display name; resolves to it, or '' when the guest would rather not say. */
export function askGuestName() {
  return new Promise((resolve) => {
    const input = h('input', { type: 'text', id: 'guest-name-input', maxlength: String(NAME_MAX), autocomplete: 'nickname', spellcheck: 'false', placeholder: 'e.g. Sam' });
    const join = h('button', { type: 'submit', class: 'btn btn-primary', id: 'guest-name-ok' }, 'Join');
    const skip = h('button', { type: 'button', class: 'btn', id: 'guest-name-skip' }, 'Skip');
    const form = h(
      'form',
      { method: 'dialog', novalidate: true },
      h('label', { class: 'field' }, h('span', {}, 'Your name'), input),
      h('div', { class: 'dialog-actions' }, skip, join),
    );
    const d = h(
      'dialog',
      { class: 'dialog guest-name-card', id: 'guest-name', 'aria-labelledby': 'guest-name-title' },
      h('h2', { id: 'guest-name-title' }, 'What should the others call you?'),
      h('p', { class: 'muted' }, 'You came with a share link, so you are a guest here: your name is shown with a “guest” mark, in the list of people and beside your chat messages.'),
      form,
    );
    let answer = '';
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      answer = input.value.trim().slice(0, NAME_MAX);
      if (!answer) {
        input.focus();
        return;
      }
      d.close();
    });
    skip.addEventListener('click', () => d.close());
    d.addEventListener('close', () => {
      d.remove();
      resolve(answer);
    });
    document.body.append(d);
    d.show();
    input.focus();
  });
}
