// Files into a session at desktop and phone sizes: a short text is pasted as before; a longer text file asks whether to paste it or save it as a file; Shift saves it without asking; Cancel adds nothing.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { SIZES, WAIT, launchBrowser, newId, newPage, openSession, press, shot, startDaemon, typeInTerminal, waitForScreen } from './helpers.js';

/** A text file of `n` numbered lines: too long to be a snippet. */
const longText = (n, tag) => Array.from({ length: n }, (_, i) => `${tag} line ${i + 1}`).join('\n') + '\n';

/** Drops `text` as a file named `name` on the terminal, with Shift held or not. */
function drop(page, name, text, shiftKey) {
  return page.evaluate(
    ([n, t, shift]) => {
      const dt = new DataTransfer();
      dt.items.add(new File([t], n, { type: 'text/plain' }));
      document.getElementById('frame').dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true, shiftKey: shift }));
    },
    [name, text, shiftKey],
  );
}

describe('text files: pasted or saved, as the person chooses', () => {
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
    it(`a snippet is pasted, a longer text asks, Shift saves it as a file (${size})`, async () => {
      const p = await newPage(browser, daemon.url, options);
      await openSession(p, daemon.url, newId(), 'shell');
      await waitForScreen(p, /^\$ $/m);
      const workDir = await p.evaluate(() => window.ptyhub.state.status.workDir);
      const uploads = join(workDir, '.ptyhub', 'uploads');

      // A snippet: pasted at once, as before (bracketed paste: it waits at the prompt).
      await p.locator('#file-input').setInputFiles({ name: 'cmd.txt', mimeType: 'text/plain', buffer: Buffer.from(`echo snippet-${size}`) });
      await p.locator('.toast-ok', { hasText: 'Pasted cmd.txt' }).waitFor({ timeout: WAIT });
      assert.equal(await p.locator('#upload-ask').count(), 0, 'no question for a snippet');
      await typeInTerminal(p, '\n');
      await waitForScreen(p, new RegExp(`^snippet-${size}$`, 'm'));

      // A longer text file: the page asks. Saved as a file, it lands on disk and its path is typed in.
      const notes = longText(120, `notes-${size}`);
      await typeInTerminal(p, 'wc -l ');
      await p.locator('#file-input').setInputFiles({ name: `notes-${size}.md`, mimeType: 'text/markdown', buffer: Buffer.from(notes) });
      const ask = p.locator('#upload-ask');
      await ask.waitFor({ state: 'visible', timeout: WAIT });
      assert.match(await ask.textContent(), /text file of 120 lines.*Paste it into the terminal.*or save it/s);
      const box = await ask.evaluate((d) => d.getBoundingClientRect().toJSON());
      assert.ok(box.left >= 0 && box.right <= options.viewport.width && box.bottom <= options.viewport.height, `the question fits the screen (${JSON.stringify(box)})`);
      await shot(p, `upload-ask-${size}`);
      await press(p, '#upload-ask button[value="file"]');
      await p.locator('.toast-ok', { hasText: `Uploaded notes-${size}.md` }).waitFor({ timeout: WAIT });
      assert.equal(readFileSync(join(uploads, `notes-${size}.md`), 'utf8'), notes);
      await typeInTerminal(p, '\n');
      // (On a phone the line wraps: the count and the start of the path are enough.)
      await waitForScreen(p, /^120 \/tmp\//m);

      // Asked again, Paste: the text goes to the program as typed.
      await typeInTerminal(p, 'cat > pasted.txt\n');
      await waitForScreen(p, /^\$ cat > pasted\.txt$/m);
      const pasted = longText(40, `pasted-${size}`);
      await drop(p, 'pasted.txt', pasted, false);
      await ask.waitFor({ state: 'visible', timeout: WAIT });
      await press(p, '#upload-ask button[value="paste"]');
      await p.locator('.toast-ok', { hasText: 'Pasted pasted.txt' }).waitFor({ timeout: WAIT });
      await waitForScreen(p, new RegExp(`^pasted-${size} line 40$`, 'm'));
      await p.locator('.xterm-helper-textarea').focus();
      await p.keyboard.press('Control+D');
      await waitForScreen(p, /^\$ $/m);
      assert.equal(readFileSync(join(workDir, 'pasted.txt'), 'utf8'), pasted);

      // Shift held while dropping: saved as a file, no question.
      await drop(p, `shifted-${size}.txt`, longText(30, 'shifted'), true);
      await p.locator('.toast-ok', { hasText: `Uploaded shifted-${size}.txt` }).waitFor({ timeout: WAIT });
      assert.equal(await ask.count(), 0, 'Shift asks nothing');
      assert.equal(readFileSync(join(uploads, `shifted-${size}.txt`), 'utf8'), longText(30, 'shifted'));

      // Cancel (or Escape) adds nothing, and the keys go back to the terminal.
      await typeInTerminal(p, '\x15');
      await drop(p, 'not-this.txt', longText(50, 'no'), false);
      await ask.waitFor({ state: 'visible', timeout: WAIT });
      await p.keyboard.press('Escape');
      await p.locator('.toast-info', { hasText: 'not-this.txt was not added' }).waitFor({ timeout: WAIT });
      assert.equal(await p.evaluate(() => document.activeElement === window.ptyhub.term.textarea), true);
      assert.deepEqual(p.errors, []);
      await p.context().close();
    });
  }
});
