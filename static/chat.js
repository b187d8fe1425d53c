// The chat panel: collapsible, history on join, unread count; a user chats under its verified name, a guest under the display name it chose once (remembered), marked as a guest.

import { h } from './util.js';

const NAME_KEY = 'ptyhub.chatName';
const NAME_MAX = 32;
const TEXT_MAX = 2000;

function storedName() {
  try {
    return localStorage.getItem(NAME_KEY) || '';
  } catch {
    return ''; // storage blocked: ask each time the page loads
  }
}

function storeName(name) {
  try {
    localStorage.setItem(NAME_KEY, name);
  } catch {
    // Kept for this page only.
  }
}

export class ChatPanel {
  /**
   * @param {object} o
   * @param {HTMLElement} o.panel the <aside>
   * @param {HTMLButtonElement} o.toggle the status-bar button that opens and closes it
   * @param {(obj: object) => boolean} o.send sends a JSON message; false when not connected
   * @param {(kind: string, text: string) => void} o.notify
   * @param {(open: boolean) => void} o.onToggle
   */
  constructor({ panel, toggle, send, notify, onToggle }) {
    this.panel = panel;
    this.toggleButton = toggle;
    this.send = send;
    this.notify = notify;
    this.onToggle = onToggle;
    this.unread = 0;
    this.name = storedName();
    this.user = null; // a signed-in user's verified name: its lines carry it whatever it types
    this.sent = []; // texts this page sent, not yet back: the same user in another tab still counts as unread
    this.renameButton = panel.querySelector('.chat-rename');
    this.list = panel.querySelector('.chat-messages');
    this.empty = panel.querySelector('.chat-empty');
    this.form = panel.querySelector('.chat-form');
    this.nameRow = panel.querySelector('.chat-name-row');
    this.nameInput = panel.querySelector('.chat-name');
    this.textInput = panel.querySelector('.chat-text');
    this.who = panel.querySelector('.chat-who');
    this.badge = toggle.querySelector('.badge');
    this.nameInput.maxLength = NAME_MAX;
    this.textInput.maxLength = TEXT_MAX;

    toggle.addEventListener('click', () => this.setOpen(!this.isOpen));
    panel.querySelector('.chat-close').addEventListener('click', () => this.setOpen(false));
    panel.querySelector('.chat-rename').addEventListener('click', () => this.askName(true));
    panel.addEventListener('keydown', (e) => {
      if (e.key === 'Escape') {
        e.preventDefault();
        this.setOpen(false);
      }
    });
    this.form.addEventListener('submit', (e) => {
      e.preventDefault();
      this.submit();
    });
    this.showName();
  }

  get isOpen() {
    return !this.panel.hidden;
  }

  setOpen(open) {
    this.panel.hidden = !open;
    this.toggleButton.setAttribute('aria-expanded', String(open));
    if (open) {
      this.unread = 0;
      this.showUnread();
      this.scrollToEnd();
      (this.name ? this.textInput : this.nameInput).focus();
    }
    this.onToggle?.(open);
  }

  /** This browser is the user `name`: ptyhub names its lines so, so there is no name to choose. */
  setUser(name) {
    this.user = name;
    this.name = name;
    this.renameButton.hidden = true;
    this.showName();
  }

  /** A guest chose `name` (in the join prompt). */
  setGuestName(name) {
    if (!name || this.user) return;
    this.name = name.slice(0, NAME_MAX);
    storeName(this.name);
    this.showName();
  }

  /** A new connection: the server sends the history again, so start from an empty list. */
  clear() {
    this.list.replaceChildren();
    this.empty.hidden = false;
  }

  /**
   * One `chat` message. History (sent before `ready`) is shown but not counted as unread, and
   * neither is your own message coming back.
   */
  add(msg, { live }) {
    const guest = msg.guest === true;
    const mine = this.user ? !guest && msg.userName === this.user : this.name !== '' && msg.userName === this.name;
    const time = new Date(msg.timestamp);
    const stamp = Number.isNaN(time.getTime()) ? '' : time.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
    // Sent from this page (not only under this name: the same person may have another tab open).
    const sentAt = mine && live ? this.sent.indexOf(msg.text) : -1;
    if (sentAt >= 0) this.sent.splice(sentAt, 1);
    const own = sentAt >= 0;
    const atEnd = this.list.scrollHeight - this.list.scrollTop - this.list.clientHeight < 40;
    this.list.append(
      h(
        'li',
        { class: mine ? 'chat-msg mine' : 'chat-msg' },
        h(
          'div',
          { class: 'chat-meta' },
          h('span', { class: 'chat-from' }, msg.userName),
          guest ? h('span', { class: 'chip guest-mark', title: 'Came with a share link: the name is only what they call themselves' }, 'guest') : null,
          h('time', { datetime: msg.timestamp || '' }, stamp),
        ),
        h('p', { class: 'chat-body' }, msg.text),
      ),
    );
    this.empty.hidden = true;
    if (atEnd || own) this.scrollToEnd();
    if (live && !own) {
      if (!this.isOpen || document.visibilityState !== 'visible') {
        this.unread++;
        this.showUnread();
      }
      if (!this.isOpen) this.notify('chat', `${msg.userName}${guest ? ' (guest)' : ''}: ${msg.text}`);
    }
  }

  submit() {
    if (!this.name || !this.nameRow.hidden) {
      const name = this.nameInput.value.trim();
      if (!name) {
        this.nameInput.focus();
        this.notify('error', 'Choose the name others will see next to your messages.');
        return;
      }
      this.name = name.slice(0, NAME_MAX);
      storeName(this.name);
      this.showName();
    }
    const text = this.textInput.value.trim();
    if (!text) {
      this.textInput.focus();
      return;
    }
    if (!this.send({ type: 'chat', userName: this.name, text })) {
      this.notify('error', 'Not connected: your message was not sent. It is still in the box.');
      return;
    }
    this.sent.push(text);
    if (this.sent.length > 20) this.sent.shift();
    this.textInput.value = '';
    this.textInput.focus();
  }

  askName(focus) {
    this.nameRow.hidden = false;
    this.who.parentElement.hidden = true;
    this.nameInput.value = this.name;
    if (focus) this.nameInput.focus();
  }

  showName() {
    if (!this.name) {
      this.askName(false);
      return;
    }
    this.nameRow.hidden = true;
    this.who.textContent = this.name;
    this.who.parentElement.hidden = false;
  }

  showUnread() {
    this.badge.textContent = this.unread > 99 ? '99+' : String(this.unread);
    this.badge.hidden = this.unread === 0;
    this.toggleButton.setAttribute('aria-label', this.unread ? `Chat, ${this.unread} unread` : 'Chat');
  }

  scrollToEnd() {
    this.list.scrollTop = this.list.scrollHeight;
  }
}
