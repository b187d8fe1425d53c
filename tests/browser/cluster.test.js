// The home page of one of many hosts: it names its host, lists its peers' sessions with theirs, and shows a peer that does not answer.

import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { TOKEN, WAIT, launchBrowser, newId, newPage, shot, startDaemon } from './helpers.js';

/** A loopback port that accepts connections and never answers: a hung peer. */
function hungPeer() {
  return new Promise((resolve) => {
    const sockets = [];
    const server = createServer((s) => sockets.push(s));
    server.listen(0, '127.0.0.1', () => resolve({ url: `http://127.0.0.1:${server.address().port}`, close: () => { sockets.forEach((s) => s.destroy()); server.close(); } }));
  });
}

async function create(daemon, body) {
  const id = newId();
  const res = await fetch(new URL(`api/sessions?uuid=${id}`, daemon.url), {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  assert.equal(res.status, 201, await res.text());
  return id;
}

describe('home page of many hosts', () => {
  let alpha;
  let beta;
  let hung;
  let browser;

  before(async () => {
    hung = await hungPeer();
    beta = await startDaemon({ config: '\n[cluster]\nhost = "beta"\n' });
    alpha = await startDaemon({ config: `\n[cluster]\nhost = "alpha"\npeers = [${JSON.stringify(beta.url)}, ${JSON.stringify(hung.url)}]\n` });
    browser = await launchBrowser();
  });

  after(async () => {
    await browser?.close();
    await alpha?.stop();
    await beta?.stop();
    hung?.close();
  });

  it('names its host alone, and lists every host with peers', async () => {
    const own = await newPage(browser, beta.url);
    await own.locator('#host-note').waitFor({ state: 'visible', timeout: WAIT });
    assert.equal(await own.locator('#host-note').textContent(), 'Sessions on this host, beta.');
    assert.equal(await own.locator('#host-problems').isHidden(), true);

    const onAlpha = await create(alpha, { assistant: 'shell', name: 'on-alpha' });
    const onBeta = await create(beta, { assistant: 'shell', name: 'on-beta' });
    const page = await newPage(browser, alpha.url);
    const row = (id) => page.locator(`li.session[data-id="${id}"]`);
    await row(onBeta).waitFor({ state: 'visible', timeout: WAIT });
    await row(onAlpha).waitFor({ state: 'visible', timeout: WAIT });
    assert.equal(await row(onBeta).locator('.session-host').textContent(), 'on beta');
    assert.equal(await row(onAlpha).locator('.session-host').textContent(), 'on alpha');
    assert.equal(await page.locator('#host-note').textContent(), 'Sessions of 2 of 3 hosts (alpha, beta), listed by alpha.');
    const problem = page.locator('#host-problems li');
    await problem.waitFor({ state: 'visible', timeout: WAIT });
    assert.match(await problem.textContent(), new RegExp(`^${hung.url}: unreachable \\(no answer within 2s\\)$`));
    // Links stay relative: through a balancer they reach the session's own host.
    assert.equal(await row(onBeta).locator('.open-btn').getAttribute('href'), `/session/${onBeta}`);
    await shot(page, 'home-many-hosts');
    assert.deepEqual(page.errors, []);
  });
});
