// Sharing from the UI: a link made in the Share dialog opens the session in a browser that has no token; a watch-only link cannot type or resize; revoking closes it.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { WAIT, launchBrowser, newId, newPage, openSession, screenText, shot, startDaemon, typeInTerminal, waitForScreen } from './helpers.js';

describe('share links from the UI', () => {
  let daemon;
  let browser;

  before(async () => {
    daemon = await startDaemon();
    browser = await launchBrowser();
  });

  after(async () => {
    await browser?.close();
    await daemon?.stop();
  });

  it('a watch-only link opens in another browser, cannot type or shrink the session, and can be revoked', async () => {
    const id = newId();
    const owner = await newPage(browser, daemon.url);
    await openSession(owner, daemon.url, id, 'shell', { name: 'shared' });
    await waitForScreen(owner, /^\$ $/m);
    const size = await owner.evaluate(() => ({ cols: window.ptyhub.term.cols, rows: window.ptyhub.term.rows }));

    await owner.locator('#share').click();
    const dialog = owner.locator('#share-dialog');
    await dialog.waitFor({ state: 'visible', timeout: WAIT });
    await owner.locator('#share-dialog .share-none').waitFor({ state: 'visible', timeout: WAIT });
    await owner.locator('#share-expiry').selectOption('3600');
    await owner.locator('#share-make').click();
    await owner.waitForFunction(() => document.getElementById('share-link').value.includes('?token='), null, { timeout: WAIT });
    const link = await owner.locator('#share-link').inputValue();
    assert.match(link, new RegExp(`^${daemon.url}session/${id}\\?token=[0-9a-f]+$`));
    assert.ok(!link.includes('browser-test-token'), 'the link does not carry the daemon token');
    await owner.locator('#share-dialog .qr path').waitFor({ timeout: WAIT });
    await owner.locator('#share-dialog .share-item[data-role="viewer"]').waitFor({ timeout: WAIT });
    assert.match(await owner.locator('#share-dialog .share-item').textContent(), /Can watch.*expires in (1 h|59 min)/);
    await shot(owner, 'share-dialog');
    await owner.locator('#share-close').click();

    // A phone, in a browser that never saw the daemon token.
    const viewer = await newPage(browser, null, { viewport: { width: 375, height: 667 }, isMobile: true, hasTouch: true, deviceScaleFactor: 1 });
    await viewer.goto(link);
    assert.equal(new URL(viewer.url()).search, '', 'the token is swapped for a cookie');
    await viewer.waitForFunction(() => window.ptyhub?.state?.ready === true, null, { timeout: WAIT });
    await waitForScreen(viewer, /^\$ $/m);
    assert.equal(await viewer.locator('#readonly').isVisible(), true);
    assert.equal(await viewer.locator('#share').isHidden(), true);

    await typeInTerminal(viewer, 'echo typed-by-viewer\n');
    await typeInTerminal(owner, 'echo from-owner\n');
    await waitForScreen(viewer, /^from-owner$/m);
    assert.ok(!(await screenText(owner)).includes('typed-by-viewer'), 'the viewer typed nothing into the session');
    const after = await owner.evaluate(() => ({ cols: window.ptyhub.term.cols, rows: window.ptyhub.term.rows }));
    assert.deepEqual(after, size, 'the phone-sized viewer left the size alone');
    await shot(viewer, 'share-viewer-phone');

    // Revoking closes the viewer's page for good.
    await owner.locator('#share').click();
    await owner.locator('#share-dialog .share-item[data-role="viewer"]').waitFor({ timeout: WAIT });
    await owner.locator('#share-dialog .share-item button', { hasText: 'Revoke' }).click();
    await owner.locator('#share-dialog .share-none').waitFor({ state: 'visible', timeout: WAIT });
    await viewer.locator('#fatal').waitFor({ state: 'visible', timeout: WAIT });
    assert.match(await viewer.locator('#fatal').textContent(), /revoked/);
    await shot(viewer, 'share-revoked-phone');
    await owner.locator('#share-close').click();
    assert.deepEqual(owner.errors, []);
    assert.deepEqual(viewer.errors, []);
    await owner.context().close();
    await viewer.context().close();
  });

  it('each row of the home page has a Share button, and the dialog fits a phone at DPR 2', async () => {
    const id = newId();
    const p = await newPage(browser, daemon.url, { viewport: { width: 375, height: 667 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
    await openSession(p, daemon.url, id, 'shell', { name: 'from-home' });
    await p.goto(daemon.url);
    const row = p.locator(`.session[data-id="${id}"]`);
    await row.waitFor({ timeout: WAIT });
    await row.locator('.share-btn').tap();
    await p.locator('#share-dialog').waitFor({ state: 'visible', timeout: WAIT });
    assert.equal(await p.locator('#share-title').textContent(), 'Share “from-home”');
    await p.locator('#share-dialog input[value="writer"]').check();
    await p.locator('#share-make').tap();
    await p.locator('#share-dialog .share-item[data-role="writer"]').waitFor({ timeout: WAIT });
    const box = await p.evaluate(() => {
      const r = document.getElementById('share-dialog').getBoundingClientRect();
      return { left: r.left, right: r.right, scrollWidth: document.documentElement.scrollWidth };
    });
    assert.ok(box.left >= 0 && box.right <= 375, `the dialog fits the screen (${box.left}..${box.right})`);
    await shot(p, 'share-dialog-phone-dpr2');

    // The writer link types.
    const link = await p.locator('#share-link').inputValue();
    const writer = await newPage(browser, null);
    await writer.goto(link);
    await writer.waitForFunction(() => window.ptyhub?.state?.ready === true, null, { timeout: WAIT });
    assert.equal(await writer.locator('#readonly').isHidden(), true);
    await typeInTerminal(writer, 'echo typed-by-writer\n');
    await waitForScreen(writer, /^typed-by-writer$/m);
    // A writer link may not make links of its own: the dialog says so.
    await writer.locator('#share').click();
    await writer.locator('#share-dialog .form-error', { hasText: 'share link' }).waitFor({ timeout: WAIT });
    assert.equal(await writer.locator('#share-dialog .share-form').isHidden(), true);
    assert.deepEqual(p.errors, []);
    assert.deepEqual(writer.errors.filter((e) => !/403/.test(e)), []);
    await p.context().close();
    await writer.context().close();
  });
});
