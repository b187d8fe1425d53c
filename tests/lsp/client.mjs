// An LSP client over ptyhub's language server bridge, built the way monaco-languageclient
// talks to it (vscode-ws-jsonrpc's socket over a WebSocket, vscode-jsonrpc's connection):
// initialize, open a file with an error, wait for its diagnostics, ask a hover and a
// completion, then end as asked. Driven by tests/lsp.rs; prints one JSON line of results.
//
//   node client.mjs '{"url": "ws://…/ws/1/lsp/python", "root": "/dir", "file": "main.py",
//     "languageId": "python", "hover": [line, character], "completion": [line, character],
//     "end": "close" | "exit"}'
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import WebSocket from 'ws';
import { toSocket, WebSocketMessageReader, WebSocketMessageWriter } from 'vscode-ws-jsonrpc';
import { createMessageConnection } from 'vscode-jsonrpc';

const spec = JSON.parse(process.argv[2]);
const rootUri = pathToFileURL(spec.root).href;
const filePath = join(spec.root, spec.file);
const uri = pathToFileURL(filePath).href;
const text = readFileSync(filePath, 'utf8');
const limit = (ms, what, p) =>
  Promise.race([p, new Promise((_, no) => setTimeout(() => no(new Error(`timed out: ${what}`)), ms))]);

const ws = new WebSocket(spec.url);
const closed = new Promise((resolve) =>
  ws.addEventListener('close', (e) => resolve({ code: e.code, reason: e.reason })));
await limit(30000, 'open', new Promise((resolve, reject) => {
  ws.addEventListener('open', resolve);
  ws.addEventListener('error', (e) => reject(new Error(`socket: ${e.message}`)));
}));
const socket = toSocket(ws);
const conn = createMessageConnection(new WebSocketMessageReader(socket), new WebSocketMessageWriter(socket));

let diagnosed;
const diagnostics = new Promise((resolve) => { diagnosed = resolve; });
conn.onNotification('textDocument/publishDiagnostics', (p) => {
  if (p.uri === uri && p.diagnostics.length > 0) diagnosed(p.diagnostics);
});
// What servers ask of a client: settings (none), registrations and progress (accepted).
conn.onRequest('workspace/configuration', (p) => p.items.map(() => null));
conn.onRequest((method) => {
  if (method === 'workspace/workspaceFolders') return [{ uri: rootUri, name: 'root' }];
  return null;
});
conn.onNotification(() => {});
conn.listen();

const started = Date.now();
const init = await limit(60000, 'initialize', conn.sendRequest('initialize', {
  processId: process.pid,
  rootUri,
  workspaceFolders: [{ uri: rootUri, name: 'root' }],
  capabilities: {
    workspace: { configuration: true, workspaceFolders: true },
    window: { workDoneProgress: true },
    textDocument: {
      synchronization: { dynamicRegistration: false },
      publishDiagnostics: {},
      hover: { contentFormat: ['plaintext', 'markdown'] },
      completion: { completionItem: { snippetSupport: false } },
    },
  },
}));
await conn.sendNotification('initialized', {});
await conn.sendNotification('textDocument/didOpen', {
  textDocument: { uri, languageId: spec.languageId, version: 1, text },
});
const diags = await limit(60000, 'diagnostics', diagnostics);
const position = ([line, character]) => ({ textDocument: { uri }, position: { line, character } });
const hover = await limit(60000, 'hover', conn.sendRequest('textDocument/hover', position(spec.hover)));
const completion = await limit(60000, 'completion',
  conn.sendRequest('textDocument/completion', position(spec.completion)));
const items = Array.isArray(completion) ? completion : (completion?.items ?? []);
const contents = hover?.contents;
const hoverText = typeof contents === 'string' ? contents
  : Array.isArray(contents) ? contents.map((c) => c.value ?? c).join('\n')
    : contents?.value ?? '';

const result = {
  server: init.serverInfo?.name ?? null,
  diagnostics: diags.map((d) => d.message),
  hover: hoverText,
  completion: items.map((i) => i.label),
  ms: Date.now() - started,
};
if (spec.end === 'exit') {
  await limit(30000, 'shutdown', conn.sendRequest('shutdown'));
  await conn.sendNotification('exit');
  result.close = await limit(30000, 'close', closed);
} else {
  ws.close();
  await limit(30000, 'close', closed);
}
console.log(JSON.stringify(result));
process.exit(0);
