// The board on the home page in a real browser, at desktop and phone sizes: cards update live, a
// waiting card sorts first, a quick reply reaches the agent and its card turns working, a
// notification when a session starts waiting (not for the session being typed in), the count in
// the title and the badge on the favicon, per-session mute.

import assert from 'node:assert/strict';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { WAIT, eventually, launchBrowser, newId, newPage, openSession, shot, startDaemon, typeInTerminal } from './helpers.js';

const PROMPT = join(dirname(fileURLToPath(import.meta.url)), '..', 'agents', 'permission-prompt');

describe('board', () => {
  let daemon;
  let browser;

  before(async () => {
    daemon = await startDaemon({
      config: `
[attention]
quiet = "1s"

[assistants.claude]
name = "Claude"
command = [${JSON.stringify(PROMPT)}]
state_hooks = "none"
`,
    });
    browser = await launchBrowser();
  });

  after(async () => {
    await browser?.close();
    await daemon?.stop();
  });

  /** Starts a session from the page (with the uuid given, if any); its id. */
  const create = (page, body, id = newId()) =>
    page.evaluate(
      async ({ body, id }) => {
        const r = await fetch(`/api/sessions?uuid=${id}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
        return (await r.json()).id;
      },
      { body, id },
    );
  const card = (page, id) => page.locator(`.bcard[data-id="${id}"]`);
  const stateOf = (page, id) => card(page, id).getAttribute('data-state');
  const firstCard = (page) => page.evaluate(() => document.querySelector('#board .bcard:not([hidden])')?.dataset.id);

  async function board(options) {
    const page = await newPage(browser, daemon.url, options);
    await page.context().grantPermissions(['notifications'], { origin: new URL(daemon.url).origin });
    await page.waitForFunction(() => window.ptyhubBoard, null, { timeout: WAIT });
    if (options.isMobile) await page.locator('#board-notify').tap();
    return page;
  }

  it('shows live cards, waiting first, with quick replies, a notification and a badge (desktop)', async () => {
    const page = await board({ viewport: { width: 1200, height: 800 } });
    const shell = await create(page, { assistant: 'shell', name: 'calm-shell' });
    await card(page, shell).waitFor({ timeout: WAIT });
    await eventually(async () => {
      assert.equal(await stateOf(page, shell), 'idle');
      return true;
    }, { what: 'the shell card idle' });
    assert.match(await card(page, shell).locator('.bcard-name').textContent(), /calm-shell/);
    // Permission is asked from the button, never on load (the test's browser grants it).
    assert.equal(await page.locator('#board-notify').textContent(), 'Notify me');
    await page.locator('#board-notify').click();
    await eventually(async () => (await page.locator('#board-notify').textContent()) === 'Notifications on', { what: 'notifications on' });
    // The time in state ticks.
    const age = await card(page, shell).locator('.bcard-age').textContent();
    await eventually(async () => {
      assert.notEqual(await card(page, shell).locator('.bcard-age').textContent(), age);
      return true;
    }, { what: 'the age ticking' });

    // Cards update live: typed in the session's own page, seen in the board's miniature.
    const term = await newPage(browser, daemon.url);
    await openSession(term, daemon.url, shell, 'shell');
    await typeInTerminal(term, 'echo live-$((6*7))\n');
    await eventually(async () => {
      assert.match(await card(page, shell).locator('.bcard-screen').textContent(), /live-42/);
      return true;
    }, {
      what: 'the output on the card',
    });
    await term.close();

    // An agent starts waiting: its card sorts first, the title and favicon count it, a
    // notification is raised.
    const agent = await create(page, { assistant: 'claude', name: 'agent' });
    await eventually(async () => {
      assert.equal(await stateOf(page, agent), 'waiting');
      return true;
    }, { what: 'the agent card waiting' });
    assert.equal(await firstCard(page), agent);
    assert.match(await page.title(), /^\(1\) /);
    assert.equal(await page.locator('link[rel="icon"]').getAttribute('data-badge'), '1');
    assert.match(await page.locator('link[rel="icon"]').getAttribute('href'), /^data:image\/svg\+xml,/);
    const notified = await page.evaluate(() => window.ptyhubBoard.notified);
    assert.ok(notified.some((n) => n.id === agent && n.state === 'waiting'), JSON.stringify(notified));
    assert.match(await card(page, agent).locator('.bcard-reason').textContent(), /Do you want to proceed\?/);
    await eventually(async () => {
      assert.match(await card(page, agent).locator('.bcard-screen').textContent(), /Do you want to proceed\?/);
      return true;
    }, {
      what: 'the prompt on the card',
    });
    await shot(page, 'board-desktop', { readme: true });
    await page.locator('#board-filter [data-filter="waiting"]').click();
    assert.equal(await card(page, shell).isHidden(), true);
    await page.locator('#board-filter [data-filter="all"]').click();

    // The quick reply reaches the agent: it answers, and its card turns working.
    await card(page, agent).locator('.bcard-choice', { hasText: /^Yes$/ }).click();
    await eventually(async () => {
      assert.notEqual(await stateOf(page, agent), 'waiting');
      return true;
    }, { what: 'the agent card no longer waiting' });
    await eventually(async () => {
      assert.match(await card(page, agent).locator('.bcard-screen').textContent(), /answer 1/);
      return true;
    }, {
      what: 'the answer on the card',
    });
    await eventually(async () => {
      assert.equal(await page.title(), 'ptyhub');
      return true;
    }, { what: 'the title without a count' });
    assert.equal(await page.locator('link[rel="icon"]').getAttribute('data-badge'), '0');
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });

  it('works on a phone, without notifying for the session being typed in, and mutes', async () => {
    const page = await board({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
    // This person types in the session that is about to ask (the session page says so).
    const typed = newId();
    await page.evaluate((id) => localStorage.setItem('ptyhub.typingIn', JSON.stringify({ id, at: Date.now() })), typed);
    await create(page, { assistant: 'claude', name: 'typed-in' }, typed);
    await eventually(async () => {
      assert.equal(await stateOf(page, typed), 'waiting');
      return true;
    }, { what: 'the typed-in card waiting' });
    const other = await create(page, { assistant: 'claude', name: 'on-phone' });
    await eventually(async () => {
      assert.equal(await stateOf(page, other), 'waiting');
      return true;
    }, { what: 'the other card waiting' });
    const notified = await page.evaluate(() => window.ptyhubBoard.notified.map((n) => n.id));
    assert.ok(notified.includes(other), JSON.stringify(notified));
    assert.ok(!notified.includes(typed), 'no notification for the session being typed in');
    assert.match(await page.title(), /^\(2\) /);
    // One column: the card is as wide as the screen allows, its reply buttons big enough for a thumb.
    const box = await card(page, other).boundingBox();
    assert.ok(box.width > 300 && box.width <= 390, JSON.stringify(box));
    const button = await card(page, other).locator('.bcard-choice').first().boundingBox();
    assert.ok(button.height >= 36, JSON.stringify(button));
    for (const id of [typed, other]) {
      await eventually(async () => /proceed\?/.test(await card(page, id).locator('.bcard-screen').textContent()), { what: 'the prompt on a phone card' });
    }
    await shot(page, 'board-phone', { readme: true });

    // Mute is remembered.
    await card(page, other).locator('.bcard-mute').tap();
    assert.equal(await card(page, other).locator('.bcard-mute').getAttribute('aria-pressed'), 'true');
    await page.reload();
    await card(page, other).waitFor({ timeout: WAIT });
    assert.equal(await card(page, other).locator('.bcard-mute').getAttribute('aria-pressed'), 'true');

    // A typed reply on the phone.
    await card(page, typed).locator('.bcard-line').fill('2');
    await card(page, typed).locator('.bcard-form button[type=submit]').tap();
    await eventually(async () => {
      assert.notEqual(await stateOf(page, typed), 'waiting');
      return true;
    }, { what: 'the typed-in card answered' });
    // Tapping a card opens its session.
    await card(page, other).locator('.bcard-open').tap();
    await page.waitForURL(new RegExp(`/session/${other}$`), { timeout: WAIT });
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });
});
