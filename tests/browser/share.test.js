// Sharing from the UI: a link made in the Share dialog opens the session in a browser that has no token; a watch-only link cannot type or resize; revoking closes it. Links are made only when asked (watch-only, 8 hours, unless chosen); a loopback link says who cannot open it; a link's visitor is sent only where the link reaches.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import {
  SIZES,
  WAIT,
  launchBrowser,
  newId,
  newPage,
  openSession,
  press,
  rest,
  screenText,
  shot,
  startDaemon,
  typeInTerminal,
  waitForScreen,
} from './helpers.js';

const HOURS_8 = 8 * 3600 * 1000;

/** The session's live links, as the API lists them. */
const links = (daemon, id) => rest(daemon, 'GET', `api/sessions/${id}/share`);

/** The addresses of the links a person can see and follow on the page. */
const visibleLinks = (page) =>
  page.evaluate(() =>
    [...document.querySelectorAll('a[href]')].filter((a) => a.getClientRects().length > 0 && getComputedStyle(a).visibility !== 'hidden').map((a) => a.href),
  );

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
    // The daemon listens on 127.0.0.1: the dialog says a phone cannot open that, and still shows the QR code.
    const note = owner.locator('#share-dialog .reach-note');
    await note.waitFor({ state: 'visible', timeout: WAIT });
    assert.match(await note.textContent(), /Only this computer can open it\. On a phone or another machine, 127\.0\.0\.1:\d+ is that device itself.*--listen.*TLS.*reverse proxy.*Deployment/);
    assert.equal(await owner.locator('#share-dialog .qr').isVisible(), true);
    await shot(owner, 'share-dialog', { readme: true });
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
    // A writer link may not make links of its own: the dialog says what the link allows instead.
    await writer.waitForFunction(() => window.ptyhub.state.link?.role === 'writer', null, { timeout: WAIT });
    await writer.locator('#share').click();
    await writer.locator('#share-dialog .share-visitor', { hasText: 'lets you watch this session, type into it and chat' }).waitFor({ timeout: WAIT });
    assert.equal(await writer.locator('#share-dialog .share-form').isHidden(), true);
    assert.equal(await writer.locator('#share-dialog .share-none').isHidden(), true, 'no "None yet"');
    assert.deepEqual(p.errors, []);
    assert.deepEqual(writer.errors, []);
    await p.context().close();
    await writer.context().close();
  });
});

describe('links only when asked, and where they work', () => {
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

  for (const [size, options] of Object.entries(SIZES)) {
    it(`Embed and Share make nothing until asked; watch-only for 8 hours unless chosen, "never" a choice (${size})`, async () => {
      const { id } = await rest(daemon, 'POST', 'api/sessions', { assistant: 'shell', name: `embed-${size}` });
      const home = await newPage(browser, daemon.url, options);
      await home.locator(`.session[data-id="${id}"] .embed-btn`).waitFor({ timeout: WAIT });
      await press(home, `.session[data-id="${id}"] .embed-btn`);
      await home.locator('#embed-dialog[open]').waitFor({ timeout: WAIT });
      // Opening it made no link, and the form says what one would allow.
      assert.deepEqual(await links(daemon, id), []);
      assert.equal(await home.locator('#embed-role').inputValue(), 'viewer');
      assert.equal(await home.locator('#embed-expiry').inputValue(), String(8 * 3600));
      assert.equal(await home.locator('#embed-dialog .snippet').isHidden(), true);
      assert.equal(await home.locator('#embed-copy').isDisabled(), true);
      const box = await home.evaluate(() => document.getElementById('embed-dialog').getBoundingClientRect().toJSON());
      assert.ok(box.left >= 0 && box.right <= options.viewport.width, `the dialog fits (${box.left}..${box.right})`);
      await shot(home, `embed-asks-${size}`);
      await press(home, '#embed-make');
      await home.waitForFunction(() => /\?token=/.test(document.getElementById('embed-code').textContent), null, { timeout: WAIT });
      let made = await links(daemon, id);
      assert.equal(made.length, 1);
      assert.equal(made[0].role, 'viewer');
      const ttl = Date.parse(made[0].expiresAt) - Date.parse(made[0].createdAt);
      assert.ok(Math.abs(ttl - HOURS_8) <= 2000, `expires in 8 hours (${ttl} ms)`);
      // Pasted into a page served from 127.0.0.1, it works on this computer only: said so.
      await home.locator('#embed-dialog .reach-note').waitFor({ timeout: WAIT });
      await shot(home, `embed-made-${size}`);
      // Closed and opened again: the same snippet, no second link.
      await press(home, '#embed-close');
      await press(home, `.session[data-id="${id}"] .embed-btn`);
      await home.locator('#embed-dialog .snippet').waitFor({ state: 'visible', timeout: WAIT });
      assert.equal((await links(daemon, id)).length, 1);
      // "Never" is a choice of its own, and a changed choice makes nothing until asked again.
      await home.locator('#embed-expiry').selectOption('0');
      assert.equal(await home.locator('#embed-dialog .snippet').isHidden(), true);
      assert.equal((await links(daemon, id)).length, 1);
      await press(home, '#embed-make');
      await home.locator('#embed-dialog .snippet').waitFor({ state: 'visible', timeout: WAIT });
      made = await links(daemon, id);
      assert.equal(made.length, 2);
      assert.equal(made.filter((l) => l.expiresAt === null).length, 1);
      await press(home, '#embed-close');

      // The Share dialog, from the row: it lists what there is and makes nothing on opening.
      await press(home, `.session[data-id="${id}"] .share-btn`);
      await home.locator('#share-dialog .share-item').first().waitFor({ timeout: WAIT });
      assert.equal(await home.locator('#share-dialog input[value="viewer"]').isChecked(), true);
      assert.equal(await home.locator('#share-expiry').inputValue(), String(8 * 3600));
      assert.match(await home.locator('#share-expiry option[value="0"]').textContent(), /Never/);
      assert.equal((await links(daemon, id)).length, 2);
      await shot(home, `share-asks-${size}`);
      await press(home, '#share-make');
      await home.locator('#share-dialog .qr').waitFor({ timeout: WAIT });
      await home.locator('#share-dialog .reach-note').waitFor({ timeout: WAIT });
      made = await links(daemon, id);
      assert.equal(made.length, 3);
      assert.equal(made.filter((l) => l.role === 'viewer' && l.expiresAt !== null).length, 2, 'the new link is watch-only and expires');
      await shot(home, `share-loopback-${size}`);
      assert.deepEqual(home.errors, []);
      await home.context().close();
    });
  }

  it('a link to a host others can reach has no warning', async () => {
    // The same dialog seen through a name that is not loopback (the page, not the daemon, decides).
    const p = await newPage(browser, daemon.url);
    await p.goto(daemon.url);
    const notes = await p.evaluate(async () => {
      const { reachNote } = await import('./share.js');
      return ['http://127.0.0.1:1977/session/x', 'http://localhost:1977/', 'http://[::1]:1977/', 'https://dev.example.com/session/x', 'http://192.168.1.20:1977/'].map((u) => Boolean(reachNote(u)));
    });
    assert.deepEqual(notes, [true, true, true, false, false]);
    await p.context().close();
  });

  for (const [size, options] of Object.entries(SIZES)) {
    it(`a share link's visitor meets no page the link does not reach; Share says what it allows; keys only where typing is allowed (${size})`, async () => {
      const { id } = await rest(daemon, 'POST', 'api/sessions', { assistant: 'shell', name: `visit-${size}` });
      const writerLink = new URL((await rest(daemon, 'POST', `api/sessions/${id}/share`, { role: 'writer', ttl: 3600 })).url, daemon.url).href;
      const viewerLink = new URL((await rest(daemon, 'POST', `api/sessions/${id}/share`, { role: 'viewer', ttl: 3600 })).url, daemon.url).href;
      const recordLink = new URL((await rest(daemon, 'POST', `api/sessions/${id}/share`, { role: 'viewer', ttl: 3600, record: true })).url, daemon.url).href;
      const phone = size !== 'desktop';
      const root = new URL(daemon.url).href;
      const atRoot = (hrefs) => hrefs.filter((u) => new URL(u).pathname === new URL(root).pathname);

      // A writer link: types, the key bar is there on a phone, Share explains, nothing leads to the list.
      const writer = await newPage(browser, null, options);
      await writer.goto(writerLink);
      await writer.waitForFunction(() => window.ptyhub?.state?.ready && window.ptyhub.state.link?.role === 'writer', null, { timeout: WAIT });
      await waitForScreen(writer, /^\$ $/m);
      assert.equal(await writer.locator('#home-link').getAttribute('href'), null);
      assert.equal(await writer.locator('#home-link .icon').isHidden(), true, 'no back arrow that leads nowhere');
      assert.equal(await writer.locator('#replay-link').isHidden(), true, 'no replay without record');
      assert.deepEqual(atRoot(await visibleLinks(writer)), []);
      assert.equal(await writer.locator('#keybar').isVisible(), phone);
      await typeInTerminal(writer, `echo visitor-${size}\n`);
      await waitForScreen(writer, new RegExp(`^visitor-${size}$`, 'm'));
      await press(writer, '#share');
      await writer.locator('#share-dialog .share-visitor').waitFor({ timeout: WAIT });
      assert.match(await writer.locator('#share-dialog .share-visitor').textContent(), /lets you watch this session, type into it and chat.*Only ptyhub’s owner.*can make links/s);
      await shot(writer, `visitor-writer-share-${size}`);
      await writer.keyboard.press('Escape');
      await writer.locator('#share-dialog').waitFor({ state: 'hidden', timeout: WAIT });

      // A watch-only link: no keys, no Share; the record link's visitor may replay, and its back goes to the session.
      const viewer = await newPage(browser, null, options);
      await viewer.goto(viewerLink);
      await viewer.waitForFunction(() => window.ptyhub?.state?.ready && window.ptyhub.state.link?.role === 'viewer', null, { timeout: WAIT });
      await waitForScreen(viewer, new RegExp(`^visitor-${size}$`, 'm'));
      assert.equal(await viewer.locator('#keybar').isVisible(), false, 'no key bar where input is not allowed');
      assert.equal(await viewer.locator('#share').isHidden(), true);
      assert.deepEqual(atRoot(await visibleLinks(viewer)), []);
      await shot(viewer, `visitor-viewer-${size}`);
      const recorder = await newPage(browser, null, options);
      await recorder.goto(recordLink);
      await recorder.waitForFunction(() => window.ptyhub?.state?.ready && window.ptyhub.state.link?.record === true, null, { timeout: WAIT });
      await recorder.locator('#replay-link').waitFor({ state: 'visible', timeout: WAIT });
      const replay = await recorder.locator('#replay-link').getAttribute('href');
      await recorder.goto(new URL(replay, daemon.url).href);
      await recorder.waitForFunction(() => document.getElementById('home-link').href.includes('/session/'), null, { timeout: WAIT });
      assert.equal(await recorder.evaluate(() => getComputedStyle(document.querySelector('.bar')).display), 'flex', 'the replay page is styled');
      assert.deepEqual(atRoot(await visibleLinks(recorder)), []);
      await recorder.locator('#home-link').click();
      await recorder.waitForFunction(() => window.ptyhub?.state?.ready, null, { timeout: WAIT });

      // The session ends: the ended dialog offers the output, not a list the link cannot open.
      await rest(daemon, 'DELETE', `api/sessions/${id}`);
      await writer.locator('#exit-dialog[open]').waitFor({ timeout: WAIT });
      assert.equal(await writer.locator('#exit-home').isHidden(), true);
      assert.deepEqual(atRoot(await visibleLinks(writer)), []);
      assert.equal(await writer.locator('#keybar').isVisible(), false, 'no key bar once the session has ended');
      await shot(writer, `visitor-ended-${size}`);
      await press(writer, '#exit-stay');
      assert.equal(await writer.locator('#share').isHidden(), true, 'no Share for an ended session');
      for (const p of [writer, viewer, recorder]) {
        assert.deepEqual(p.errors.filter((e) => !/WebSocket|ERR_|net::/.test(e)), []);
        await p.context().close();
      }
    });
  }
});
