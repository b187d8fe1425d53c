// The terminal page in a real browser: shared typing, snapshots and reconnects, chat, rename, upload, YOLO, exit, errors, themes.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  WAIT,
  launchBrowser,
  newId,
  newPage,
  openSession,
  ownerName,
  screenText,
  settled,
  shot,
  startDaemon,
  typeInTerminal,
  waitForScreen,
} from './helpers.js';

const COLOURS =
  "printf '\\e[31mred \\e[32mgreen \\e[33myellow \\e[34mblue \\e[35mmagenta \\e[36mcyan \\e[1;37mbold\\e[0m \\e[2mdim\\e[0m \\e[7minverse\\e[0m\\n'; ls --color=always -F /usr\n";

describe('terminal page', () => {
  let daemon;
  let browser;
  const pages = [];

  before(async () => {
    daemon = await startDaemon();
    browser = await launchBrowser();
  });

  after(async () => {
    await browser?.close();
    await daemon?.stop();
  });

  async function page(options) {
    const p = await newPage(browser, daemon.url, options);
    pages.push(p);
    return p;
  }

  /** How many lines of the page's buffer are exactly `line`. */
  async function countLines(p, line) {
    const text = await screenText(p);
    return text.split('\n').filter((l) => l === line).length;
  }

  describe('one shell session seen by several pages', () => {
    const id = newId();
    let a;
    let b;

    it('keys typed in one page appear in both terminals', async () => {
      a = await page();
      await openSession(a, daemon.url, id, 'shell');
      // The create parameter is dropped from the address once the session exists.
      assert.equal(new URL(a.url()).search, '');
      await waitForScreen(a, /^\$ $/m);
      b = await page();
      await openSession(b, daemon.url, id);
      await typeInTerminal(b, 'echo typed-in-b-$((40+2))\n');
      await waitForScreen(b, /^typed-in-b-42$/m);
      await waitForScreen(a, /^typed-in-b-42$/m);
      await typeInTerminal(a, 'echo typed-in-a\n');
      await waitForScreen(b, /^typed-in-a$/m);
      for (const p of [a, b]) {
        await p.waitForFunction(() => document.querySelector('#viewers .count').textContent === '2', null, { timeout: WAIT });
        assert.equal(await p.locator('#conn').getAttribute('data-state'), 'live');
      }
      await typeInTerminal(a, COLOURS);
      await waitForScreen(a, /src\/$/m);
      await shot(a, 'desktop-light', { readme: true });
    });

    it('a page opened later shows the existing screen once, and so does a reconnect', async () => {
      await typeInTerminal(a, 'for i in $(seq 1 60); do echo row-$i; done\n');
      await waitForScreen(a, /^row-60$/m);
      const c = await page();
      await openSession(c, daemon.url, id);
      await waitForScreen(c, /^row-60$/m);
      for (const n of [1, 30, 60]) assert.equal(await countLines(c, `row-${n}`), 1, `row-${n} once in the late joiner`);
      assert.equal(await countLines(c, 'typed-in-b-42'), 1);
      // Same size, same content: the late joiner's screen is the first page's screen.
      const [ta, tc] = [await screenText(a), await screenText(c)];
      assert.ok(ta.endsWith(tc.slice(-500)), 'late joiner ends like the first page');

      // Drop the connection: the page reconnects by itself and the snapshot restores the screen.
      const before = await c.evaluate(() => window.ptyhub.pipe.snapshots);
      await c.evaluate(() => window.ptyhub.conn.ws.close());
      await c.waitForFunction((n) => window.ptyhub.pipe.snapshots > n && window.ptyhub.state.ready, before, { timeout: WAIT });
      await waitForScreen(c, /^row-60$/m);
      for (const n of [1, 60]) assert.equal(await countLines(c, `row-${n}`), 1, `row-${n} once after reconnecting`);
      await typeInTerminal(c, 'echo after-reconnect\n');
      await waitForScreen(a, /^after-reconnect$/m);
      await c.close();
    });

    it('chat between the pages: history, unread count, names kept', async () => {
      // Both pages hold the daemon token: both are its owner, who chats under its user name.
      const owner = await ownerName(daemon);
      await a.click('#chat-toggle');
      await a.locator('.chat-text').fill('hello from A');
      await a.keyboard.press('Enter');
      await a.locator('.chat-msg.mine', { hasText: 'hello from A' }).waitFor({ timeout: WAIT });
      // B has the panel closed: a badge counts the message.
      await b.locator('#chat-toggle .badge', { hasText: '1' }).waitFor({ timeout: WAIT });
      await b.click('#chat-toggle');
      await b.locator('.chat-msg', { hasText: 'hello from A' }).waitFor({ timeout: WAIT });
      assert.equal(await b.locator('#chat-toggle .badge').isHidden(), true);
      await b.locator('.chat-text').fill('hi Alice, Bob here');
      await b.click('.chat-form button[type=submit]');
      // The same user on both pages: B's line is A's own too.
      await a.locator('.chat-msg.mine', { hasText: 'hi Alice, Bob here' }).waitFor({ timeout: WAIT });
      await b.click('.chat-close');
      await settled(a);
      await shot(a, 'chat-open');
      // A's chat panel sits beside its terminal, which is sized to what stays visible: the
      // session takes that size, and B is told whose window it is.
      const visible = await a.evaluate(() => window.ptyhub.wantedSize());
      await b.waitForFunction((c) => window.ptyhub.term.cols === c, visible.cols, { timeout: WAIT });
      // (B's window holds the rows it shares with A's: both are named.)
      await b.locator('#size-hint', { hasText: `sized by your and ${owner}’s windows: it is smaller than this window` }).waitFor({ timeout: WAIT });
      // The name is asked once: after a reload it is remembered, and the history comes back.
      await a.reload();
      await a.waitForFunction(() => window.ptyhub?.state?.ready, null, { timeout: WAIT });
      await a.click('#chat-toggle');
      await a.locator('.chat-msg', { hasText: 'hi Alice, Bob here' }).waitFor({ timeout: WAIT });
      assert.equal(await a.locator('.chat-who').textContent(), owner);
      assert.equal(await a.locator('.chat-name-row').isHidden(), true);
      await a.click('.chat-close');
      await settled(a);
      await b.locator('#size-hint').waitFor({ state: 'hidden', timeout: WAIT });
    });

    it('rename from one page shows in the other; a bad name is explained', async () => {
      await a.click('#name');
      await a.locator('#rename-input').fill('bad/name!');
      await a.locator('#rename-error').waitFor({ state: 'visible', timeout: WAIT });
      assert.match(await a.locator('#rename-error').textContent(), /letters, digits, spaces/);
      await shot(a, 'rename-error');
      await a.locator('#rename-input').fill('build-box 2');
      await a.keyboard.press('Enter');
      for (const p of [a, b]) {
        await p.locator('#name .name-text', { hasText: 'build-box 2' }).waitFor({ timeout: WAIT });
        await p.waitForFunction(() => document.title.startsWith('build-box 2'), null, { timeout: WAIT });
      }
    });

    it('upload through the file picker lands on disk and its path is typed in; text is pasted', async () => {
      const bytes = Buffer.from([0x00, 0x01, 0x02, 0xff, 0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x10]);
      await typeInTerminal(a, 'echo uploaded: ');
      await a.locator('#file-input').setInputFiles({ name: 'blob data.bin', mimeType: 'application/octet-stream', buffer: bytes });
      await a.locator('.toast-ok', { hasText: 'Uploaded blob data.bin' }).waitFor({ timeout: WAIT });
      const workDir = await a.evaluate(() => window.ptyhub.state.status.workDir);
      const path = join(workDir, '.ptyhub', 'uploads', 'blob data.bin');
      assert.deepEqual(readFileSync(path), bytes);
      await waitForScreen(b, '.ptyhub/uploads/blob data.bin');
      await typeInTerminal(a, '\n');
      await waitForScreen(a, /^uploaded: \/.*\/\.ptyhub\/uploads\/blob data\.bin$/m);

      // Dropped files go the same way; the drop zone shows while a file is dragged over the page.
      await a.evaluate(() => {
        const dt = new DataTransfer();
        dt.items.add(new File([new Uint8Array([0, 1, 2, 3, 0])], 'dropped.bin'));
        window.ptyhubDrag = dt;
        document.getElementById('frame').dispatchEvent(new DragEvent('dragenter', { dataTransfer: dt, bubbles: true, cancelable: true }));
      });
      await a.locator('#drop').waitFor({ state: 'visible', timeout: WAIT });
      await shot(a, 'drop-zone');
      await a.evaluate(() =>
        document.getElementById('frame').dispatchEvent(new DragEvent('drop', { dataTransfer: window.ptyhubDrag, bubbles: true, cancelable: true })),
      );
      await a.locator('#drop').waitFor({ state: 'hidden', timeout: WAIT });
      await a.locator('.toast-ok', { hasText: 'Uploaded dropped.bin' }).waitFor({ timeout: WAIT });
      assert.deepEqual([...readFileSync(join(workDir, '.ptyhub', 'uploads', 'dropped.bin'))], [0, 1, 2, 3, 0]);
      // A large one, with a progress bar while it goes.
      const big = Buffer.alloc(3 * 1024 * 1024, 7);
      await a.locator('#file-input').setInputFiles({ name: 'big.bin', mimeType: 'application/octet-stream', buffer: big });
      await a.locator('.toast-ok', { hasText: 'Uploaded big.bin (3.0 MiB)' }).waitFor({ timeout: WAIT });
      assert.equal(readFileSync(join(workDir, '.ptyhub', 'uploads', 'big.bin')).length, big.length);
      // A name the server refuses: the reason is shown.
      await a.evaluate(() => {
        const dt = new DataTransfer();
        dt.items.add(new File([new Uint8Array([0, 9])], '..'));
        document.getElementById('frame').dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
      });
      await a.locator('.toast-error', { hasText: '.. was not added:' }).waitFor({ timeout: WAIT });
      await typeInTerminal(a, '\x15'); // ^U: clear the paths typed in at the prompt

      // A text file is pasted (bash asked for bracketed paste, so its newline does not run it).
      await a.locator('#file-input').setInputFiles({ name: 'cmd.txt', mimeType: 'text/plain', buffer: Buffer.from('echo pasted-$((1+1))') });
      await a.locator('.toast-ok', { hasText: 'Pasted cmd.txt' }).waitFor({ timeout: WAIT });
      await waitForScreen(a, /^\$ echo pasted-\$\(\(1\+1\)\)$/m);
      await typeInTerminal(a, '\n');
      await waitForScreen(b, /^pasted-2$/m);
    });

    it('input that starts with 0x00 or 0x01 is never mistaken for a resize or an upload', async () => {
      const frames = await a.evaluate(async () => {
        const { inputFrames } = await import('/protocol.js');
        const show = (bytes) => inputFrames(new Uint8Array(bytes)).map((f) => [...f]);
        return [show([0, 1, 0, 65, 66]), show([1, 0]), show([65, 0, 1]), show([1, 1, 1])];
      });
      assert.deepEqual(frames, [[[0], [1], [0], [65, 66]], [[1, 0]], [[65, 0, 1]], [[1], [1, 1]]]);
      // And through the terminal: NUL (Ctrl+Space / Ctrl+@) then text reaches the shell intact.
      await typeInTerminal(a, 'echo zero-ok');
      await a.evaluate(() => window.ptyhub.term.input('\x00\x00xy', true)); // readline: NUL sets the mark, then xy
      await typeInTerminal(a, '\n');
      await waitForScreen(a, /^zero-okxy$/m);
    });

    it('the YOLO button is absent for an assistant without YOLO mode', async () => {
      assert.equal(await a.locator('#yolo').isHidden(), true);
    });

    it("the program's exit shows a dialog with its code, and the page stops reconnecting", async () => {
      await typeInTerminal(b, 'exit 3\n');
      for (const p of [a, b]) {
        await p.locator('#exit-dialog[open]').waitFor({ timeout: WAIT });
        assert.match(await p.locator('#exit-dialog .exit-text').textContent(), /exited with status 3/);
        assert.equal(await p.locator('#conn').getAttribute('data-state'), 'ended');
      }
      await shot(a, 'exit-dialog');
      await a.click('#exit-stay');
      assert.equal(await a.locator('#exit-dialog').isVisible(), false);
      // Closing the socket now does not bring a reconnect: the program has ended.
      await a.evaluate(() => window.ptyhub.conn.ws?.close());
      await a.waitForFunction(() => window.ptyhub.conn.state === 'stopped', null, { timeout: WAIT });
      assert.equal(await a.locator('#banner').isHidden(), true);
      await b.locator('#exit-home').click();
      await b.waitForURL(`${daemon.url}`, { timeout: WAIT });
    });

    it('the pages raised no script errors', () => {
      for (const p of [a, b]) assert.deepEqual(p.errors, []);
    });
  });

  it('a flood of output ends on the exact screen: streamed and acknowledged while the page keeps up, by screen once it falls far behind', async () => {
    const p = await page();
    await openSession(p, daemon.url, newId(), 'shell');
    await waitForScreen(p, /^\$ $/m);
    const snapshots = await p.evaluate(() => window.ptyhub.pipe.snapshots);
    // First about 420 KB in pieces 20 ms apart, which the page keeps up with and draws as the
    // stream, acknowledging every 256 KiB (flow=ack); then about 3 MiB at PTY speed, far faster
    // than xterm.js draws it: a page that falls more than max(256 KiB, a screen) behind is sent
    // the screen instead of the backlog (issue 21), at most 20 times a second. (With the flood
    // alone, a page resynced within its first 256 KiB acknowledged nothing: 2 runs in 6.)
    await typeInTerminal(p, 'for i in $(seq 1 30); do seq 1 3000; sleep 0.02; done; seq 1 400000; echo flood-done\n');
    await waitForScreen(p, /^399999\n400000\nflood-done$/m, 90000);
    const acked = await p.evaluate(() => window.ptyhub.pipe.acked);
    assert.ok(acked > 0, `acknowledged ${acked} bytes`);
    const resyncs = (await p.evaluate(() => window.ptyhub.pipe.snapshots)) - snapshots;
    assert.ok(resyncs <= 40, `resynced ${resyncs} times: screens, not a snapshot per chunk`);
    // Typing right after: the page is live again.
    await typeInTerminal(p, 'echo after-$((6*7))\n');
    await waitForScreen(p, /^after-42$/m);
    await p.close();
  });

  it('the YOLO button restarts the agent; every page shows "restarting…" exactly while the status says so', async () => {
    const id = newId();
    const p = await page();
    await openSession(p, daemon.url, id, 'agent');
    await waitForScreen(p, /^agent-start$/m);
    // A second viewer, who never clicks: only the server's status messages can tell it about the restart.
    const q = await page();
    await openSession(q, daemon.url, id);
    for (const x of [p, q]) {
      await x.locator('#yolo').waitFor({ state: 'visible', timeout: WAIT });
      assert.equal(await x.locator('#yolo').getAttribute('aria-pressed'), 'false');
    }
    await settled(p);
    await settled(q);
    // On q, every change of the button's label, with the `restarting` of the last status q got.
    await q.evaluate(() => {
      const log = (window.yoloLog = []);
      let restarting = null;
      const on = window.ptyhub.conn.on;
      const message = on.message;
      on.message = (msg) => {
        if (msg?.type === 'status') restarting = msg.restarting;
        message(msg);
      };
      const label = document.querySelector('#yolo .yolo-state');
      const record = () => log.push({ text: label.textContent, restarting });
      new MutationObserver(record).observe(label, { childList: true, characterData: true, subtree: true });
    });
    const yoloState = (x, text) =>
      x.waitForFunction(
        (t) => {
          const b = document.getElementById('yolo');
          const busy = t === 'restarting…';
          return b.querySelector('.yolo-state').textContent === t && b.classList.contains('busy') === busy && b.disabled === busy;
        },
        text,
        { timeout: WAIT },
      );

    await p.locator('#yolo').click();
    await waitForScreen(p, /Switching YOLO mode ON/);
    // The old agent takes a second to stop: meanwhile both pages say it is restarting.
    await yoloState(p, 'restarting…');
    await yoloState(q, 'restarting…');
    assert.equal(await q.evaluate(() => window.ptyhub.state.status.restarting), true);
    await shot(q, 'yolo-restarting');
    await waitForScreen(q, /^agent-yolo$/m);
    for (const x of [p, q]) {
      await yoloState(x, 'on');
      assert.equal(await x.locator('#yolo').getAttribute('aria-pressed'), 'true');
    }
    assert.equal(await q.evaluate(() => window.ptyhub.state.status.restarting), false);
    await shot(p, 'yolo-on');
    const log = await q.evaluate(() => window.yoloLog);
    for (const entry of log) assert.equal(entry.text === 'restarting…', entry.restarting === true, JSON.stringify(log));
    const labels = log.map((e) => e.text).filter((t, i, all) => i === 0 || all[i - 1] !== t);
    while (labels[0] === 'off') labels.shift(); // statuses before the click
    assert.deepEqual(labels, ['restarting…', 'on']);

    await p.locator('#yolo').click();
    await yoloState(q, 'restarting…');
    await waitForScreen(p, /^agent-resume$/m);
    for (const x of [p, q]) {
      await yoloState(x, 'off');
      assert.equal(await x.locator('#yolo').getAttribute('aria-pressed'), 'false');
    }
    assert.deepEqual(p.errors, []);
    assert.deepEqual(q.errors, []);
  });

  it('a read-only share link watches and chats but cannot type; revoking it is explained', async () => {
    const owner = await page();
    const id = newId();
    await openSession(owner, daemon.url, id, 'shell');
    await typeInTerminal(owner, 'echo owner-here\n');
    await waitForScreen(owner, /^owner-here$/m);
    const share = await owner.evaluate(async (sid) => {
      const r = await fetch(`/api/sessions/${sid}/share`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ role: 'viewer' }) });
      return r.json();
    }, id);
    // A stranger's browser: no daemon token, only the share link.
    const viewer = await newPage(browser, null);
    pages.push(viewer);
    await viewer.goto(`${daemon.url}${share.url.replace(/^\//, '')}`);
    await viewer.waitForFunction(() => window.ptyhub?.state?.ready, null, { timeout: WAIT });
    assert.equal(new URL(viewer.url()).search, '', 'the token went into a cookie');
    await waitForScreen(viewer, /^owner-here$/m);
    await viewer.locator('#readonly').waitFor({ state: 'visible', timeout: WAIT });
    assert.equal(await viewer.locator('#upload').isHidden(), true);
    assert.equal(await viewer.locator('#name').isDisabled(), true);
    await typeInTerminal(viewer, 'echo viewer-typed\n');
    await typeInTerminal(owner, 'echo marker\n');
    await waitForScreen(viewer, /^marker$/m);
    assert.doesNotMatch(await screenText(owner), /viewer-typed/);
    await viewer.click('#chat-toggle');
    await viewer.locator('.chat-name').fill('Watcher');
    await viewer.locator('.chat-text').fill('just watching');
    await viewer.keyboard.press('Enter');
    await owner.locator('#chat-toggle .badge', { hasText: '1' }).waitFor({ timeout: WAIT });
    assert.equal(await viewer.locator('.toast-error').count(), 0, 'no error for the read-only viewer');
    // The chat sits beside the terminal: a viewer cannot resize the session, so the whole
    // screen is scaled into what stays visible rather than hidden under the panel.
    await viewer.locator('#size-hint', { hasText: 'Scaled to fit' }).waitFor({ timeout: WAIT });
    const edges = await viewer.evaluate(() => ({
      screen: window.ptyhub.term.element.querySelector('.xterm-screen').getBoundingClientRect().right,
      chat: document.getElementById('chat').getBoundingClientRect().left,
    }));
    assert.ok(edges.screen <= edges.chat + 0.5, `nothing under the chat panel (${edges.screen} ≤ ${edges.chat})`);
    await viewer.click('.chat-close');
    await viewer.locator('#size-hint').waitFor({ state: 'hidden', timeout: WAIT });
    await shot(viewer, 'read-only-viewer');

    await owner.evaluate(([sid, share]) => fetch(`/api/sessions/${sid}/share/${share}`, { method: 'DELETE' }), [id, share.id]);
    await viewer.locator('#fatal', { hasText: 'This share link was revoked' }).waitFor({ timeout: WAIT });
    assert.deepEqual(viewer.errors, []);
  });

  it('a session that does not exist is explained in words, not JSON', async () => {
    const p = await page();
    await p.goto(`${daemon.url}session/${newId()}`);
    await p.locator('#fatal').waitFor({ state: 'visible', timeout: WAIT });
    assert.match(await p.locator('#fatal').textContent(), /does not exist any more/);
    assert.equal(await p.locator('#conn').getAttribute('data-state'), 'error');
    assert.doesNotMatch(await p.locator('body').innerText(), /[{}]/);
    await shot(p, 'error-no-session');

    await p.goto(`${daemon.url}session/${newId()}?assistant=missing`);
    await p.locator('#fatal').waitFor({ state: 'visible', timeout: WAIT });
    assert.match(await p.locator('#fatal .fatal-text').textContent(), /could not be started: .*not found/);
    assert.doesNotMatch(await p.locator('body').innerText(), /[{}]/);
    await shot(p, 'error-create-failed');
  });

  it('dark theme follows the system', async () => {
    const p = await page({ colorScheme: 'dark' });
    await openSession(p, daemon.url, newId(), 'shell', { name: 'dark-demo' });
    await waitForScreen(p, /^\$ $/m);
    await typeInTerminal(p, COLOURS);
    await waitForScreen(p, /src\/$/m);
    const colours = await p.evaluate(() => ({
      page: getComputedStyle(document.querySelector('.bar')).backgroundColor,
      theme: window.ptyhub.term.options.theme.background,
    }));
    assert.equal(colours.theme, '#0d1117');
    assert.equal(colours.page, 'rgb(21, 27, 35)');
    await p.click('#chat-toggle');
    await settled(p);
    await shot(p, 'desktop-dark');
    await p.emulateMedia({ colorScheme: 'light' });
    await p.waitForFunction(() => window.ptyhub.term.options.theme.background === '#ffffff', null, { timeout: WAIT });
    assert.deepEqual(p.errors, []);
  });
});
