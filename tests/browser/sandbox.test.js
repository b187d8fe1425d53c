// A client written to seed 000's protocol (sandbox-addon.js, its SandboxAddon as the seed
// describes it) against the raw dialect in Chromium: the same checks as every raw client.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { TOKEN, WAIT, newPage, shot } from './helpers.js';
import { createShell, exitsWithItsCode, hostPage, resizes, startRig, survivesADrop, typesAndSees } from './compat.js';

const here = new URL('.', import.meta.url).pathname;

/** The seed's own example, pointed at ptyhub: the sandbox id is the session's uuid. */
const SANDBOX_PAGE = (id) => `import { SandboxAddon } from './sandbox-addon.js';
window.states = [];
window.addon = new SandboxAddon({
  getWebSocketUrl: ({ sandboxId }) => BASE.replace(/^http/, 'ws') + 'ws/' + sandboxId + '/raw?token=${TOKEN}',
  onStateChange: (state, error) => window.states.push({ state, error: error ? error.message : null }),
});
window.term.loadAddon(window.addon);
window.addon.connect({ sandboxId: '${id}' });`;

describe('a seed-000 SandboxAddon on /ws/{id}/raw', () => {
  let rig;
  before(async () => {
    rig = await startRig();
  });

  after(() => rig?.stop());

  it('types, resizes, reconnects by itself after a dropped connection with one screen, and sees the exit code', async () => {
    const { daemon, browser, proxy, site } = rig;
    const { id } = await createShell(daemon);
    const page = await newPage(browser);
    await hostPage(page, site, proxy.url, 'sandbox', SANDBOX_PAGE(id), { 'sandbox-addon.js': `${here}sandbox-addon.js` });
    await page.waitForFunction(() => window.addon.state === 'connected', null, { timeout: WAIT });
    await typesAndSees(page);
    await resizes(page, daemon, id);

    const from = (await page.evaluate(() => window.states)).length;
    await survivesADrop(page, proxy, () =>
      page.waitForFunction(
        (from) => {
          const since = window.states.slice(from).map((s) => s.state);
          return since[0] === 'disconnected' && since.at(-1) === 'connected';
        },
        from,
        { timeout: WAIT },
      ),
    );
    await shot(page, 'sandbox-reconnected');

    await exitsWithItsCode(page, daemon, id, () => window.addon.exit?.code);
    assert.deepEqual(await page.evaluate(() => window.addon.exit), { type: 'exit', code: 7, signal: null });
    assert.deepEqual(page.errors, []);
  });
});
