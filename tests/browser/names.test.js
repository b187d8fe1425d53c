// Names in the browser UI (issue 36): the owner shows by its user name in presence, a share link's guest is asked once for a display name and is marked as a guest (in presence, "is typing", chat, and the session list, which also says who created each session); admins get the API tokens dialog, others no admin controls. The last test needs the "tokens" branch's REST API (GET/POST /api/tokens, DELETE /api/tokens/{id}).

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { WAIT, launchBrowser, newId, newPage, openSession, rest, shot, startDaemon, typeInTerminal, waitForScreen } from './helpers.js';

/** A page with no token of its own that opens `url` (a share link, or a link with an API token). */
async function stranger(browser, url) {
  const context = await browser.newContext({ viewport: { width: 1200, height: 760 } });
  const page = await context.newPage();
  page.errors = [];
  page.on('pageerror', (e) => page.errors.push(String(e)));
  await page.goto(url);
  return page;
}

describe('names in the UI', () => {
  let daemon;
  let browser;
  let owner; // the daemon token's user name

  before(async () => {
    daemon = await startDaemon();
    browser = await launchBrowser();
    owner = (await rest(daemon, 'GET', 'api/me')).name;
    assert.ok(owner, 'the daemon token is a named user');
  });

  after(async () => {
    await browser?.close();
    await daemon?.stop();
  });

  it('presence shows the owner by name and a guest, asked once for a name, marked as a guest everywhere', async () => {
    const id = newId();
    const o = await newPage(browser, daemon.url);
    await openSession(o, daemon.url, id, 'shell');
    await waitForScreen(o, /^\$ $/m);
    // The owner is not asked for a chat name: it chats as itself.
    await o.click('#chat-toggle');
    await o.locator('.chat-who', { hasText: owner }).waitFor({ timeout: WAIT });
    assert.equal(await o.locator('.chat-name-row').isHidden(), true);
    await o.click('.chat-close');

    // A guest with a writer link is asked for a display name once.
    const share = await rest(daemon, 'POST', `api/sessions/${id}/share`, { role: 'writer' });
    const g = await stranger(browser, new URL(share.url, daemon.url).href);
    const prompt = g.locator('#guest-name');
    await prompt.waitFor({ state: 'visible', timeout: WAIT });
    await shot(g, 'guest-name-prompt');
    await g.locator('#guest-name-input').fill(owner); // it calls itself the owner...
    await g.locator('#guest-name-ok').click();
    await prompt.waitFor({ state: 'detached', timeout: WAIT });
    await g.waitForFunction(() => window.ptyhub?.state?.ready === true, null, { timeout: WAIT });

    // ...and is shown as a guest all the same.
    await o.locator('#viewers').click();
    const people = o.locator('#people .person');
    await o.locator('#people .person:not(.you) .guest-mark').waitFor({ timeout: WAIT });
    await o.locator('#people .person.you', { hasText: owner }).waitFor({ timeout: WAIT });
    assert.equal(await o.locator('#people .person.you .guest-mark').count(), 0, 'the owner is no guest');
    assert.equal(await people.count(), 2);
    // The guest's name comes in a later presence event than its joining (at most one each
    // half second): wait for it.
    await o.waitForFunction(
      () => window.ptyhub.presence.people.some((p) => p.guest && p.name !== null),
      null,
      { timeout: WAIT },
    );
    const listed = await o.evaluate(() => window.ptyhub.presence.people.map((p) => [p.user, p.guest, p.name]));
    assert.deepEqual(listed, [
      [owner, false, owner],
      [null, true, owner],
    ]);
    await shot(o, 'presence-owner-and-guest');
    await o.locator('#viewers').click();

    // The guest types: "OWNER (guest) is typing", never the owner's bare name.
    await typeInTerminal(g, 'echo from-the-guest');
    await o.locator('#typing', { hasText: `${owner} (guest) is typing` }).waitFor({ timeout: WAIT });
    await typeInTerminal(g, '\n');

    // The guest's chat is marked; the owner's is not.
    await g.click('#chat-toggle');
    assert.equal(await g.locator('.chat-who').textContent(), owner);
    await g.locator('.chat-text').fill('hello from the guest');
    await g.keyboard.press('Enter');
    await g.locator('.chat-msg.mine', { hasText: 'hello from the guest' }).waitFor({ timeout: WAIT });
    await o.click('#chat-toggle');
    const guestLine = o.locator('.chat-msg:not(.mine)', { hasText: 'hello from the guest' });
    await guestLine.waitFor({ timeout: WAIT });
    assert.equal(await guestLine.locator('.guest-mark').count(), 1);
    await o.locator('.chat-text').fill('hello from the owner');
    await o.keyboard.press('Enter');
    const ownerLine = o.locator('.chat-msg.mine', { hasText: 'hello from the owner' });
    await ownerLine.waitFor({ timeout: WAIT });
    assert.equal(await ownerLine.locator('.guest-mark').count(), 0);
    await shot(o, 'chat-owner-and-guest');

    // Asked once: a reload goes straight in.
    await g.reload();
    await g.waitForFunction(() => window.ptyhub?.state?.ready === true, null, { timeout: WAIT });
    await g.waitForFunction(() => window.ptyhub.presence.people.length === 2, null, { timeout: WAIT });
    assert.equal(await g.locator('#guest-name').count(), 0, 'not asked again');

    // The home page: who created the session, who is in it.
    const home = await newPage(browser, daemon.url);
    const row = home.locator(`.session[data-id="${id}"]`);
    await row.locator('.session-by', { hasText: `by ${owner}` }).waitFor({ timeout: WAIT });
    await row.locator('.session-viewers', { hasText: `${owner}, ${owner} (guest)` }).waitFor({ timeout: WAIT });
    // An admin has every control, and the tokens dialog's button.
    await home.locator('#whoami', { hasText: `Signed in as ${owner}` }).waitFor({ timeout: WAIT });
    assert.equal(await home.locator('#tokens-open').isVisible(), true);
    assert.equal(await home.locator('#new-card').isVisible(), true);
    assert.equal(await row.locator('.end-btn').isVisible(), true);
    await shot(home, 'home-created-by');
    for (const p of [o, g, home]) {
      assert.deepEqual(p.errors, []);
      await p.context().close();
    }
  });

  // The dialog on GET/POST /api/tokens and DELETE /api/tokens/{id} (docs/protocol.md 12b).
  it('the API tokens dialog lists, makes (shown once, copyable) and revokes tokens; a view-only token sees no admin controls', async () => {
    const home = await newPage(browser, daemon.url);
    await home.locator('#tokens-open').click();
    const dialog = home.locator('#tokens-dialog');
    await dialog.waitFor({ state: 'visible', timeout: WAIT });
    await home.locator('#token-name').fill('ci');
    await home.locator('input[name="token-scope"][value="view"]').uncheck();
    await home.locator('input[name="token-scope"][value="exec"]').check();
    await home.locator('#token-expiry').selectOption(String(30 * 24 * 3600));
    await home.locator('#token-make').click();
    await home.waitForFunction(() => document.getElementById('token-secret').value.length > 0, null, { timeout: WAIT });
    const secret = await home.locator('#token-secret').inputValue();
    assert.ok(!secret.includes('browser-test-token'), 'a token of its own');
    const item = home.locator('#tokens-dialog .token-item', { hasText: 'ci' });
    await item.waitFor({ timeout: WAIT });
    assert.match(await item.textContent(), /ci\s*exec/);
    assert.match(await item.textContent(), new RegExp(owner));
    assert.match(await item.textContent(), /never/, 'not used yet');
    await home.locator('#token-copy').click();
    await shot(home, 'tokens-dialog');
    const listed = await rest(daemon, 'GET', 'api/tokens');
    assert.deepEqual(
      listed.map((t) => [t.name, t.scopes]),
      [['ci', ['exec']]],
    );

    // A person with a view-only token: no admin controls.
    const viewer = await rest(daemon, 'POST', 'api/tokens', { name: 'watcher', scopes: ['view'] });
    const w = await stranger(browser, `${daemon.url}?token=${viewer.token}`);
    await w.locator('#whoami', { hasText: 'Signed in as' }).waitFor({ timeout: WAIT });
    assert.equal(await w.locator('#new-card').isVisible(), false);
    assert.equal(await w.locator('#tokens-open').isVisible(), false);
    await w.context().close();

    // Revoked: gone from the list.
    await item.locator('button', { hasText: 'Revoke' }).click();
    await item.waitFor({ state: 'detached', timeout: WAIT });
    assert.deepEqual(
      (await rest(daemon, 'GET', 'api/tokens')).map((t) => t.name),
      ['watcher'],
    );
    assert.deepEqual(home.errors, []);
    await home.context().close();
  });
});
