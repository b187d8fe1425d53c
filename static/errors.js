// Server `error` messages and WebSocket close codes, put into words a person understands.

import { UNAUTHORISED, capitalise } from './api.js';

/** Close codes of PROTOCOL.md section 8 that need more than a quiet reconnect. */
export const CLOSE = {
  NORMAL: 1000,
  GOING_AWAY: 1001,
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
export function createFailedText(message) {
  if (/no session with this id/i.test(message || '')) {
    return 'This session does not exist any more. It may have been ended, or removed some time after its program exited.';
  }
  return `The session could not be started: ${sentence(message) || 'the server gave no reason'}.`;
}

/** A server message as the end of a sentence: without its own final full stop. */
function sentence(message) {
  return message ? String(message).trim().replace(/[.\s]+$/, '') : '';
}
