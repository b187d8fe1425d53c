// The home page's "Embed" dialog: a ready-to-paste page that shows one session with xterm.js and
// ptyhub's addon (addon/ptyhub.js), carrying a share link of its own, and the button that copies it.

import { api, basePath } from './api.js';
import { afterColon, copyText } from './util.js';

const $ = (id) => document.getElementById(id);
const dialog = $('embed-dialog');
const code = $('embed-code');
const role = $('embed-role');
const copy = $('embed-copy');

/** Share links already made in this page, by `id role`: reopening the dialog makes no new one. */
const tokens = new Map();
let current = null; // { id, title } of the session the dialog is for

/** HTML text for the snippet's <title>. */
function escapeHtml(s) {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/**
 * The page to paste: xterm.js and the addon load from this server (vendor/ and addon/ allow any
 * origin), the share link in `connect()` is the only credential it holds. The `?v=` is the
 * vendored xterm's version, as in termview.js (see vendor/README.md).
 */
export function snippet(origin, id, token, title) {
  return `<!doctype html>
<meta charset="utf-8">
<title>${escapeHtml(title)}</title>
<link rel="stylesheet" href="${origin}/vendor/xterm/xterm.css?v=6.0.0">
<div id="terminal" style="height: 90vh"></div>
<script type="module">
  import { Terminal } from '${origin}/vendor/xterm/xterm.mjs?v=6.0.0';
  import { PtyhubAddon } from '${origin}/addon/ptyhub.js';
  const term = new Terminal();
  const ptyhub = new PtyhubAddon();
  term.loadAddon(ptyhub);
  term.open(document.getElementById('terminal'));
  ptyhub.onStateChange((state, error) => (document.title = error ? \`\${state}: \${error.message}\` : state));
  ptyhub.connect('${origin}/session/${id}?token=${encodeURIComponent(token)}');
</script>
`;
}

/** Fills the dialog for the chosen role, making that role's share link the first time. */
async function fill() {
  const { id, title } = current;
  const key = `${id} ${role.value}`;
  copy.disabled = true;
  code.textContent = 'Making a share link…';
  try {
    if (!tokens.has(key)) tokens.set(key, (await api('POST', `/api/sessions/${encodeURIComponent(id)}/share`, { role: role.value })).token);
  } catch (e) {
    code.textContent = `No share link was made: ${afterColon(e.message)}`;
    return;
  }
  if (current?.id !== id || `${id} ${role.value}` !== key) return; // the dialog moved on meanwhile
  code.textContent = snippet(location.origin + basePath(), id, tokens.get(key), title);
  copy.disabled = false;
}

/** Opens the dialog for session `id`; `title` names the embedded page. */
export function openEmbed(id, title) {
  current = { id, title };
  copy.textContent = 'Copy';
  dialog.showModal();
  fill();
}

role.addEventListener('change', fill);
copy.addEventListener('click', async () => {
  try {
    await copyText(code.textContent);
    copy.textContent = 'Copied';
  } catch {
    copy.textContent = 'Select and copy it';
  }
});
$('embed-close').addEventListener('click', () => dialog.close());
