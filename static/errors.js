// Server `error` messages, WebSocket close codes and refused session addresses, put into words a person understands.

import { UNAUTHORISED, capitalise } from './api.js';

/** Close codes of docs/protocol.md section 8 that need more than a quiet reconnect. */
export const CLOSE = {
  NORMAL: 1000,
  GOING_AWAY: 1001,
  RESTARTING: 1012,
  UNAUTHORISED: 1008,
  TOO_BIG: 1009,
  TRY_LATER: 1013,
  CREATE_FAILED: 4002,
  ENDED: 4003,
};

/** The sentence shown for an `{"type":"error", code, message}` from the server. */
export function errorText(code, message) {
  const detail = sentence(message);
  switch (code) {
    case 'invalid_name':
      return `The session was not renamed: ${detail || 'that name is not allowed'}.`;
    case 'invalid_chat':
      return `Your chat message was not sent: ${detail || 'it is empty or too long'}.`;
    case 'yolo_unsupported':
      return `${capitalise(detail) || 'This assistant has no YOLO mode'}.`;
    case 'restart_in_progress':
      return 'The assistant is already restarting. Try again when it is back.';
    case 'read_only':
      return 'This is a read-only link: you can watch and chat, but not type or change the session.';
    case 'not_running':
      return 'The program has ended, so there is nothing to type into.';
    case 'bad_signal':
    case 'signal_failed':
      return `The signal was not sent: ${detail}.`;
    case 'session_create_failed':
      return `The session could not be started: ${detail}.`;
    case 'bad_message':
      return `The server did not understand a message from this page (${detail}). Reloading the page may help.`;
    case 'unauthorised':
    case 'unauthorized':
      return UNAUTHORISED;
    default:
      return detail ? `${capitalise(detail)}.` : 'Something went wrong on the server.';
  }
}

/**
 * What a refused connection (close 4002) means to the reader. The daemon's reason for a uuid it
 * does not know is the commonest case: the session was ended and then removed.
 */
export function createFailedText(message, daemonRestarted = false) {
  if (/no session with this id/i.test(message || '') && daemonRestarted) {
    return 'ptyhub was restarted, and this session did not survive it: its program ended when ptyhub stopped. Start a new one from the list.';
  }
  if (/this link's session has ended/i.test(message || '')) {
    return 'The session this link opened has ended and was removed. Ask whoever shared it if there is a new one.';
  }
  if (/no session with this id/i.test(message || '')) {
    return 'This session does not exist any more. It may have been ended, or removed some time after its program exited.';
  }
  return `The session could not be started: ${sentence(message) || 'the server gave no reason'}.`;
}

/**
 * What a closed connection means for the terminal page, from its close code and reason:
 * - `{ended: true}`: the session was ended (4003);
 * - `{fatal: [title, text]}`: there is nothing to reconnect to (`gone`: the session no longer exists);
 * - `{}`: the program has already exited, so nothing new would come: no reconnect;
 * - `{retry: true, why}`: reconnect; `why` (may be '') tells the reader what happened;
 *   `now`: at once, without backoff (ptyhub is restarting and will be right back).
 * `notice` ([kind, text]), when set, is worth a toast. `daemonAway`: this page saw ptyhub
 * stop or restart (close 1001 or 1012) since it was last live.
 */
export function closeMeaning({ code, reason }, { exited, lastError, daemonAway = false }) {
  if (code === CLOSE.ENDED) return { ended: true };
  if (code === CLOSE.CREATE_FAILED) {
    const message = lastError?.code === 'session_create_failed' ? lastError.message : reason;
    const gone = /no session with this id|session has ended/i.test(message || '');
    const title = daemonAway && gone ? 'ptyhub restarted' : 'This session cannot be opened';
    return { fatal: [title, createFailedText(message, daemonAway)], gone };
  }
  if (code === CLOSE.RESTARTING) return { retry: true, now: true, why: 'ptyhub is restarting…', away: true };
  // A link revoked after the program exited: nothing more would come through it anyway, so
  // the page shows the end (with the output), not a revocation. (A session that ends closes
  // its links' connections with 4003 itself.)
  if (code === CLOSE.UNAUTHORISED && exited && /share link revoked/i.test(reason)) return { ended: true };
  if (code === CLOSE.UNAUTHORISED) {
    // Also a revoked or expired share link, which the reason says.
    let text = UNAUTHORISED;
    if (/share link revoked/i.test(reason)) text = 'This share link was revoked. Ask whoever shared it for a new one.';
    else if (/share link expired/i.test(reason)) text = 'This share link has expired. Ask whoever shared it for a new one.';
    return { fatal: ['Not authorised', text] };
  }
  if (exited) {
    return code === CLOSE.GOING_AWAY ? { notice: ['info', 'ptyhub was stopped, and with it this session.'] } : {};
  }
  const out = { retry: true, why: '' };
  if (code === CLOSE.TOO_BIG) {
    out.notice = ['error', 'The server closed the connection because a message was too big for it (a file over its upload limit?). Reconnecting.'];
  }
  if (code === CLOSE.GOING_AWAY) {
    out.why = 'ptyhub stopped (or is restarting). Your session is waiting for it.';
    out.away = true;
  }
  // A refusal after ptyhub went away is ptyhub not being back yet: keep saying so.
  if (daemonAway && code === 1006) out.why = 'ptyhub stopped (or is restarting). Waiting for it to come back.';
  if (code === CLOSE.TRY_LATER) out.why = 'This session has as many viewers as it allows.';
  return out;
}

/**
 * Why the API refused this session's address (after a connection that never opened), as
 * [title, text]; null when retrying may still get in. `creating`: the page would create the
 * session; `visitor`: the page was opened with a share link.
 */
export function refusalText(httpStatus, creating, daemonAway = false, visitor = false) {
  if (httpStatus === 401 && visitor) {
    return ['This link no longer works', 'The share link this page was opened with has expired, was revoked, or ended with a restart of ptyhub. Ask whoever shared it for a new one.'];
  }
  if (httpStatus === 401) return ['Not authorised', daemonAway ? `${UNAUTHORISED} ptyhub restarted with a new token.` : UNAUTHORISED];
  if (httpStatus === 403) return ['No access', 'The link this page was opened with does not give access to this session.'];
  if (httpStatus === 404 && !creating) {
    return [daemonAway ? 'ptyhub restarted' : 'This session cannot be opened', createFailedText('no session with this id', daemonAway)];
  }
  return null;
}

/** A server message as the end of a sentence: without its own final full stop. */
function sentence(message) {
  return message ? String(message).trim().replace(/[.\s]+$/, '') : '';
}
