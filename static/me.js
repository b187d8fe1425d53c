// Who this browser is to ptyhub (GET /api/me): a user's verified name and scopes, or a share link's guest; and, for a guest, the display name it picked once.

import { api } from './api.js';

const GUEST_NAME_KEY = 'ptyhub.chatName';
const GUEST_ASKED_KEY = 'ptyhub.guestNameAsked';

let asked = null;

/** `{name, scopes, guest, credential}`, or null when it cannot be told (an older ptyhub, no connection): asked once per page. */
export function whoAmI() {
  if (!asked) asked = api('GET', '/api/me').catch(() => null);
  return asked;
}

/** Whether `me` may administer: create and end sessions, share them, manage tokens. Unknown: as before, everything is offered (the server still refuses what it must). */
export function isAdmin(me) {
  return !me || (Array.isArray(me.scopes) && me.scopes.includes('admin'));
}

/** A guest's chosen display name ('' before it chose one). */
export function guestName() {
  try {
    return localStorage.getItem(GUEST_NAME_KEY) || '';
  } catch {
    return '';
  }
}

/** Whether this browser's guest was asked for a display name already (it may have declined). */
export function guestAsked() {
  try {
    return localStorage.getItem(GUEST_ASKED_KEY) === '1' || guestName() !== '';
  } catch {
    return false;
  }
}

/** Remembers the guest's display name ('' declines) and that it was asked. */
export function rememberGuestName(name) {
  try {
    localStorage.setItem(GUEST_ASKED_KEY, '1');
    if (name) localStorage.setItem(GUEST_NAME_KEY, name);
  } catch {
    // Kept for this page only.
  }
}
