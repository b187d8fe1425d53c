// The xterm.js terminal of the session page: its options, addons (fit, links, Unicode 11, WebGL, search), theme, and copy/paste keys.

// vendor/ is cached for a day without revalidation: the version in each URL makes an upgraded
// ptyhub load the new library at once (keep them in step with vendor/README.md).
import { Terminal } from './vendor/xterm/xterm.mjs?v=6.0.0';
import { FitAddon } from './vendor/addon-fit/addon-fit.mjs?v=0.11.0';
import { WebLinksAddon } from './vendor/addon-web-links/addon-web-links.mjs?v=0.12.0';
import { Unicode11Addon } from './vendor/addon-unicode11/addon-unicode11.mjs?v=0.9.0';
import { WebglAddon } from './vendor/addon-webgl/addon-webgl.mjs?v=0.19.0';
import { SearchAddon } from './vendor/addon-search/addon-search.mjs?v=0.16.0';
import { initialFontSize, themeName } from './prefs.js';
import { followTheme, terminalThemeOptions } from './theme.js';
import { copyText } from './util.js';

/**
 * Opens a terminal in `host` and returns it with its fit addon, which measures what fills the window.
 * @param {HTMLElement} host
 * @param {object} o
 * @param {(kind: string, text: string) => void} o.notify
 */
export function createTerminal(host, { notify }) {
  const term = new Terminal({
    allowProposedApi: true, // the unicode11 addon registers through the proposed unicode API
    fontFamily: '"JetBrains Mono", "Cascadia Mono", "SF Mono", ui-monospace, Menlo, Consolas, "DejaVu Sans Mono", "Liberation Mono", monospace',
    fontSize: initialFontSize(),
    cursorBlink: true,
    scrollback: 5000,
    macOptionIsMeta: true,
    rightClickSelectsWord: true,
    ...terminalThemeOptions(themeName()),
  });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.loadAddon(new WebLinksAddon());
  const search = new SearchAddon();
  term.loadAddon(search);
  term.loadAddon(new Unicode11Addon());
  term.unicode.activeVersion = '11';
  term.open(host);
  // `window.ptyhubRenderer = 'dom'` (set before the page's scripts run) keeps the DOM renderer:
  // headless Chromium's software GL composites the WebGL canvas at the wrong scale in
  // screenshots taken at a device pixel ratio other than 1, so tests look at those with it.
  if (window.ptyhubRenderer !== 'dom') {
    try {
      // WebGL draws much faster than the DOM renderer; without a usable GPU context xterm keeps the DOM one.
      const webgl = new WebglAddon();
      webgl.onContextLoss(() => webgl.dispose());
      term.loadAddon(webgl);
    } catch (e) {
      console.info('ptyhub: WebGL renderer unavailable, using the DOM renderer:', e.message || e);
    }
  }
  followTheme((o) => {
    term.options.theme = o.theme;
    term.options.minimumContrastRatio = o.minimumContrastRatio;
  }, themeName);

  // Ctrl+C belongs to the program (interrupt), so copying is Ctrl+Shift+C, as in desktop terminals,
  // and Ctrl+Shift+V pastes (left to the browser, whose paste event xterm turns into input).
  term.attachCustomKeyEventHandler((e) => {
    if (e.type !== 'keydown' || !e.ctrlKey || !e.shiftKey || e.altKey || e.metaKey) return true;
    if (e.code === 'KeyC') {
      if (term.hasSelection()) copyText(term.getSelection()).catch(() => notify('error', 'The selection could not be copied.'));
      e.preventDefault();
      return false;
    }
    if (e.code === 'KeyV') return false;
    return true;
  });

  return { term, fit, search };
}
