// The REST client of /api, the URL rules both pages share (query parameters we don't know are kept), and how a page was opened (token or share link).

export const UNAUTHORISED = 'Not authorised: open the link with the token that ptyhub printed.';

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/**
 * The path the UI is served under: '' at the root, '/ptyhub' behind a proxy's prefix. Taken from
 * the page's <base>, which the daemon writes ([server] base_path), so the same files work both ways.
 */
export function basePath() {
  return new URL('.', document.baseURI).pathname.replace(/\/$/, '');
}

/** An absolute path of the daemon's ('/api/sessions', '/session/ID') as this page must ask for it. */
export function at(path) {
  return basePath() + path;
}

/** Calls the API; resolves to the JSON body (null for 204), rejects with an ApiError whose message is for people. */
export async function api(method, path, body) {
  let res;
  try {
    res = await fetch(at(path), {
      method,
      credentials: 'same-origin',
      cache: 'no-store',
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch {
    throw new ApiError(0, 'Cannot reach ptyhub. Is it still running?');
  }
  if (res.status === 204) return null;
  let data = null;
  try {
    data = await res.json();
  } catch {
    // A proxy's HTML error page, say: fall back to the status line below.
  }
  if (res.status === 401) throw new ApiError(401, UNAUTHORISED);
  if (!res.ok) {
    const why = data && typeof data.error === 'string' ? data.error : `${res.status} ${res.statusText}`.trim();
    throw new ApiError(res.status, capitalise(why));
  }
  return data;
}

export function capitalise(s) {
  return s ? s[0].toUpperCase() + s.slice(1) : s;
}

/**
 * The page's query parameters minus the ones this UI reads itself, so that links between pages and
 * the WebSocket URL carry anything else along (a future `?token=`, a proxy's parameters).
 */
export function foreignParams(understood = []) {
  const params = new URLSearchParams(location.search);
  for (const key of understood) params.delete(key);
  return params;
}

/** `path` with `params` (URLSearchParams or a plain object; empty values left out) as its query. */
export function withQuery(path, params) {
  const p = new URLSearchParams(params instanceof URLSearchParams ? params : undefined);
  if (!(params instanceof URLSearchParams)) {
    for (const [k, v] of Object.entries(params || {})) if (v !== undefined && v !== null && v !== '') p.set(k, v);
  }
  const q = p.toString();
  return q ? `${path}?${q}` : path;
}

/** The page of one session, keeping foreign query parameters; `create` adds assistant/name/cwd. */
export function sessionPath(id, create = {}) {
  const params = foreignParams(['assistant', 'name', 'cwd']);
  for (const [k, v] of Object.entries(create)) if (v) params.set(k, v);
  return withQuery(at(`/session/${encodeURIComponent(id)}`), params);
}

/** The replay page of one session's recording, keeping foreign query parameters. */
export function replayPath(id) {
  return withQuery(at(`/replay/${encodeURIComponent(id)}`), foreignParams(['assistant', 'name', 'cwd']));
}

/** The session list, keeping foreign query parameters. */
export function homePath() {
  return withQuery(at('/'), foreignParams(['assistant', 'name', 'cwd']));
}

/**
 * How this browser reaches session `id`: null with the daemon token, `{role, record}` with a
 * share link (`role` 'viewer' or 'writer'; `record`: it may replay the recording). Read from
 * the session page's `X-Ptyhub-Link` header (docs/protocol.md section 16); null when it cannot
 * be asked.
 */
export async function linkAccess(id) {
  let res;
  try {
    res = await fetch(at(`/session/${encodeURIComponent(id)}`), { method: 'HEAD', credentials: 'same-origin', cache: 'no-store' });
  } catch {
    return null;
  }
  const value = res.ok ? res.headers.get('x-ptyhub-link') : null;
  if (!value) return null;
  const [role, ...flags] = value.split(';').map((x) => x.trim());
  return { role, record: flags.includes('record') };
}
