// A session's log as server-sent events in Chromium's own EventSource (docs/protocol.md section 14,
// issue #15): the stream is closed under it twice, by the network and then by ptyhub itself, and
// the browser resumes with Last-Event-ID each time: no line lost, none twice.

import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { TOKEN, WAIT, eventually, newPage } from './helpers.js';
import { listed, startRig } from './compat.js';

describe('log stream resume in the browser', () => {
  let rig;
  before(async () => {
    rig = await startRig();
  });

  after(() => rig?.stop());

  it('EventSource resumes after the connection is cut and after ptyhub closes the stream, with every line once', async () => {
    const { daemon, browser, proxy } = rig;
    // Fifty lines now; fifty more once the flag file exists; then the program exits.
    const flag = join(daemon.dir, `go-${Date.now()}`);
    const script = `for i in $(seq 1 50); do echo line-$i; done; while [ ! -e ${flag} ]; do sleep 0.05; done; for i in $(seq 51 100); do echo line-$i; done`;
    const res = await fetch(new URL('api/sessions', daemon.url), {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ cmd: ['bash', '-c', script] }),
    });
    assert.equal(res.status, 201);
    const { id } = await res.json();

    // A page of the proxy's origin (ptyhub's health check: any same-origin page will do).
    const page = await newPage(browser);
    await page.route('**/favicon.ico', (route) => route.fulfill({ status: 204 })); // ptyhub has favicon.svg only
    await page.goto(`${proxy.url}healthz`);
    await page.evaluate(
      ([id, token]) => {
        window.got = []; // every event: { type, id, data }
        window.opens = 0;
        const es = new EventSource(`/api/sessions/${id}/log?follow=1&tail=1000&token=${token}`);
        es.onopen = () => (window.opens += 1);
        const keep = (e) => window.got.push({ type: e.type, id: e.lastEventId, data: e.data });
        for (const type of ['message', 'exit', 'reset']) es.addEventListener(type, keep);
        window.es = es;
      },
      [id, TOKEN],
    );
    const lines = () => page.evaluate(() => window.got.filter((e) => e.type === 'message'));
    await page.waitForFunction(() => window.got.some((e) => e.data === 'line-50'), null, { timeout: WAIT, polling: 50 });
    const beforeCut = await lines();
    const lastSeen = beforeCut.at(-1);
    assert.equal(lastSeen.data, 'line-50');

    // 1. The connection is cut (a proxy's timeout, a network change) and stays down while the
    //    program writes its last fifty lines and exits: they can only come from the resume.
    proxy.refuse(true);
    assert.equal(proxy.drop(/^\/api\/sessions\/[^/]+\/log/), 1);
    writeFileSync(flag, '');
    await eventually(async () => (await listed(daemon, id)).alive === false, { what: 'the program to exit' });
    assert.equal(await page.evaluate(() => window.opens), 1);
    proxy.refuse(false);
    // 2. ptyhub ends the stream itself after `exit`; the browser, which knows nothing of `exit`,
    //    comes back once more and is told `exit` again, with no line again.
    await page.waitForFunction(() => window.got.filter((e) => e.type === 'exit').length >= 2, null, { timeout: WAIT, polling: 100 });
    await page.evaluate(() => window.es.close());

    const got = await page.evaluate(() => window.got);
    assert.deepEqual(got.filter((e) => e.type === 'reset'), [], 'no id was lost from the window');
    const numbered = got.filter((e) => /^line-\d+$/.test(e.data)).map((e) => e.data);
    assert.deepEqual(numbered, Array.from({ length: 100 }, (_, i) => `line-${i + 1}`), 'every line once, in order');
    const ids = (await lines()).map((e) => Number(e.id));
    assert.ok(ids.every((v, i) => i === 0 || v > ids[i - 1]), `ids only grow: ${ids}`);
    const exits = got.filter((e) => e.type === 'exit').map((e) => JSON.parse(e.data));
    assert.deepEqual(exits.slice(0, 2), [
      { exit_code: 0, signal: null },
      { exit_code: 0, signal: null },
    ]);
    assert.ok((await page.evaluate(() => window.opens)) >= 3, 'the stream was opened three times');

    // What the browser sent: the first request had no Last-Event-ID; the one after the cut named
    // line-50's id, the one after ptyhub's close named the last line's.
    const asks = proxy.requests.filter((r) => /^GET \/api\/sessions\/[^/]+\/log/.test(r));
    const lastEventId = (r) => /\r\nlast-event-id: *(\S+)/i.exec(r)?.[1] ?? null;
    assert.equal(lastEventId(asks[0]), null);
    assert.equal(lastEventId(asks[1]), lastSeen.id);
    assert.equal(lastEventId(asks[2]), (await lines()).at(-1).id);
    assert.deepEqual(page.errors.filter((e) => !/net::ERR_/.test(e)), []);
  });
});
