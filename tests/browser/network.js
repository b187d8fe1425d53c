// What sits between a browser and ptyhub in the tests: a TCP proxy that can cut connections (as a
// reverse proxy timing out, or a network change, does), and a web site of another origin that
// serves a page (where an embedded terminal lives).

import { createServer as createHttpServer } from 'node:http';
import { connect, createServer } from 'node:net';

const REQUEST_LINE = /^(GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS) (\S+) HTTP\/1\.1\r\n/;

function listen(server) {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve(server.address().port));
  });
}

/**
 * A TCP proxy on 127.0.0.1 to the daemon at `target` (its URL). Pages opened through `url` talk
 * to ptyhub as if directly, with the proxy's origin. `requests` keeps every request head seen,
 * in order; `drop(pattern)` cuts every open connection whose latest request's path matches (a
 * stream or a WebSocket is the last request of its connection);
 * `refuse(true)` cuts new connections as soon as they arrive, until `refuse(false)`.
 */
export async function startProxy(target) {
  const { hostname, port } = new URL(target);
  const open = new Set();
  const requests = [];
  let refusing = false;
  const server = createServer((client) => {
    if (refusing) {
      client.destroy();
      return;
    }
    const upstream = connect(Number(port), hostname);
    const conn = { client, upstream, path: null };
    open.add(conn);
    client.on('data', (chunk) => {
      // Request heads start a chunk on this plain, one-request-at-a-time HTTP/1.1 traffic.
      const head = chunk.toString('latin1');
      const line = REQUEST_LINE.exec(head);
      if (line) {
        conn.path = line[2]; // the latest: a kept-alive connection serves one request after another
        requests.push(head.split('\r\n\r\n')[0]);
      }
    });
    client.pipe(upstream);
    upstream.pipe(client);
    const end = () => {
      open.delete(conn);
      client.destroy();
      upstream.destroy();
    };
    for (const s of [client, upstream]) {
      s.on('error', end);
      s.on('close', end);
    }
  });
  const proxyPort = await listen(server);
  return {
    url: `http://127.0.0.1:${proxyPort}/`,
    requests,
    /** Cuts the open connections whose latest request path matches `pattern`; resolves to how many. */
    drop(pattern) {
      let n = 0;
      for (const conn of [...open]) {
        if (conn.path !== null && pattern.test(conn.path)) {
          n += 1;
          conn.client.destroy();
          conn.upstream.destroy();
        }
      }
      return n;
    },
    refuse(on) {
      refusing = on;
    },
    close() {
      for (const conn of open) {
        conn.client.destroy();
        conn.upstream.destroy();
      }
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

/** Content types of what a test site serves, by file name ending. */
const TYPES = { html: 'text/html; charset=utf-8', js: 'text/javascript; charset=utf-8', mjs: 'text/javascript; charset=utf-8' };

/**
 * A web site on its own origin (127.0.0.1, another port) that serves `pages[path]` (text), typed
 * by the path's ending. Pages are added to `pages` at any time.
 */
export async function startSite(pages = {}) {
  const server = createHttpServer((req, res) => {
    const path = new URL(req.url, 'http://site').pathname;
    const body = pages[path];
    if (path === '/favicon.ico') {
      res.writeHead(204).end(); // what a browser asks every site for; none here
      return;
    }
    if (body === undefined) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
      return;
    }
    const type = TYPES[path.split('.').pop()] ?? 'text/plain';
    res.writeHead(200, { 'content-type': type, 'cache-control': 'no-store' }).end(body);
  });
  const port = await listen(server);
  return {
    origin: `http://127.0.0.1:${port}`,
    pages,
    close() {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
