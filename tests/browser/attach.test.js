// xterm.js's own AttachAddon (@xterm/addon-attach from npm, pinned) against the raw dialect in
// Chromium: typing, a resize, a dropped connection re-attached with one screen, and the exit.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { TOKEN, WAIT, newPage, shot } from './helpers.js';
import { ATTACH_ADDON, bufferText, createShell, exitsWithItsCode, hostPage, resizes, startRig, survivesADrop, typesAndSees } from './compat.js';

/**
 * What a page using AttachAddon writes itself: the socket URL, resizes (AttachAddon sends none),
 * and a re-attach when the socket closes, on a terminal reset once everything drawn so far is
 * drawn (the replay restores the screen). It watches the JSON text frames for `ready` and `exit`.
 */
const ATTACH_PAGE = (id) => `import { AttachAddon } from './addon-attach.mjs';
const term = window.term;
window.opens = 0;
window.messages = [];
function attach() {
  const url = BASE.replace(/^http/, 'ws') + 'ws/${id}/raw?token=${TOKEN}&cols=' + term.cols + '&rows=' + term.rows;
  const ws = new WebSocket(url);
  ws.addEventListener('open', () => {
    window.opens += 1;
    term.loadAddon(new AttachAddon(ws));
  });
  ws.addEventListener('message', (e) => {
    if (typeof e.data === 'string') window.messages.push(JSON.parse(e.data));
  });
  ws.addEventListener('close', () => term.write('', () => { term.reset(); setTimeout(attach, 200); }));
  window.ws = ws;
}
term.onResize(({ cols, rows }) => window.ws.send(JSON.stringify({ type: 'resize', cols, rows })));
attach();`;

describe('@xterm/addon-attach on /ws/{id}/raw', () => {
  let rig;
  before(async () => {
    rig = await startRig();
  });

  after(() => rig?.stop());

  it('types, resizes, re-attaches after a dropped connection with one screen, and sees the exit code', async () => {
    const { daemon, browser, proxy, site } = rig;
    const { id } = await createShell(daemon);
    const page = await newPage(browser);
    await hostPage(page, site, proxy.url, 'attach', ATTACH_PAGE(id), { 'addon-attach.mjs': ATTACH_ADDON });
    await page.waitForFunction(() => window.messages.some((m) => m.type === 'ready'), null, { timeout: WAIT });
    await typesAndSees(page);
    // AttachAddon writes every text frame into the terminal: `ready` shows up as text.
    const before = await bufferText(page);
    assert.equal(before.split('{"type":"ready"}').length - 1, 1, before);
    await resizes(page, daemon, id);

    const after = await survivesADrop(page, proxy, () =>
      page.waitForFunction(() => window.opens === 2 && window.messages.filter((m) => m.type === 'ready').length === 2, null, { timeout: WAIT }),
    );
    // The old `ready` text went with the reset; only the new connection's is on screen.
    assert.equal(after.split('{"type":"ready"}').length - 1, 1, after);
    await shot(page, 'attach-reattached');

    await exitsWithItsCode(page, daemon, id, () => window.messages.find((m) => m.type === 'exit')?.code);
    assert.deepEqual(await page.evaluate(() => window.messages.find((m) => m.type === 'exit')), { type: 'exit', code: 7, signal: null });
    assert.match(await bufferText(page), /\{"type":"exit","code":7,"signal":null\}/);
    assert.deepEqual(page.errors, []);
  });
});
