// The terminal's colour themes: light and dark following the system's colour scheme as it changes, a few fixed ones to choose, and the page's scheme that goes with the chosen one.

// Palettes in the spirit of GitHub's terminal themes: every ANSI colour stays readable on its own
// background, which matters most for the light theme (programs often assume white-on-black).
const LIGHT = {
  background: '#ffffff',
  foreground: '#1f2328',
  cursor: '#1f2328',
  cursorAccent: '#ffffff',
  selectionBackground: '#0969da40',
  selectionInactiveBackground: '#0969da26',
  scrollbarSliderBackground: '#1f232833',
  scrollbarSliderHoverBackground: '#1f232855',
  scrollbarSliderActiveBackground: '#1f232877',
  black: '#24292f',
  red: '#cf222e',
  green: '#116329',
  yellow: '#7d4e00',
  blue: '#0969da',
  magenta: '#8250df',
  cyan: '#1b7c83',
  white: '#6e7781',
  brightBlack: '#57606a',
  brightRed: '#a40e26',
  brightGreen: '#1a7f37',
  brightYellow: '#633c01',
  brightBlue: '#218bff',
  brightMagenta: '#a475f9',
  brightCyan: '#3192aa',
  brightWhite: '#8c959f',
};

const DARK = {
  background: '#0d1117',
  foreground: '#e6edf3',
  cursor: '#e6edf3',
  cursorAccent: '#0d1117',
  selectionBackground: '#388bfd55',
  selectionInactiveBackground: '#388bfd33',
  scrollbarSliderBackground: '#e6edf333',
  scrollbarSliderHoverBackground: '#e6edf355',
  scrollbarSliderActiveBackground: '#e6edf377',
  black: '#484f58',
  red: '#ff7b72',
  green: '#3fb950',
  yellow: '#d29922',
  blue: '#58a6ff',
  magenta: '#bc8cff',
  cyan: '#39c5cf',
  white: '#b1bac4',
  brightBlack: '#6e7681',
  brightRed: '#ffa198',
  brightGreen: '#56d364',
  brightYellow: '#e3b341',
  brightBlue: '#79c0ff',
  brightMagenta: '#d2a8ff',
  brightCyan: '#56d4dd',
  brightWhite: '#ffffff',
};

/** Solarized dark (Ethan Schoonover's palette). */
const SOLARIZED_DARK = {
  background: '#002b36',
  foreground: '#93a1a1',
  cursor: '#93a1a1',
  cursorAccent: '#002b36',
  selectionBackground: '#268bd255',
  selectionInactiveBackground: '#268bd233',
  black: '#073642',
  red: '#dc322f',
  green: '#859900',
  yellow: '#b58900',
  blue: '#268bd2',
  magenta: '#d33682',
  cyan: '#2aa198',
  white: '#eee8d5',
  brightBlack: '#586e75',
  brightRed: '#cb4b16',
  brightGreen: '#93a1a1',
  brightYellow: '#839496',
  brightBlue: '#839496',
  brightMagenta: '#6c71c4',
  brightCyan: '#93a1a1',
  brightWhite: '#fdf6e3',
};

/** Solarized light. */
const SOLARIZED_LIGHT = {
  ...SOLARIZED_DARK,
  background: '#fdf6e3',
  foreground: '#586e75',
  cursor: '#586e75',
  cursorAccent: '#fdf6e3',
  black: '#073642',
  white: '#eee8d5',
};

/** White on black with the brightest colours, for low vision and bright rooms. */
const HIGH_CONTRAST = {
  background: '#000000',
  foreground: '#ffffff',
  cursor: '#ffff00',
  cursorAccent: '#000000',
  selectionBackground: '#ffff0066',
  selectionInactiveBackground: '#ffff0040',
  black: '#000000',
  red: '#ff5555',
  green: '#55ff55',
  yellow: '#ffff55',
  blue: '#7799ff',
  magenta: '#ff55ff',
  cyan: '#55ffff',
  white: '#e0e0e0',
  brightBlack: '#a0a0a0',
  brightRed: '#ff8080',
  brightGreen: '#80ff80',
  brightYellow: '#ffff80',
  brightBlue: '#a0b8ff',
  brightMagenta: '#ff80ff',
  brightCyan: '#80ffff',
  brightWhite: '#ffffff',
};

/** The terminal themes a person can choose, by the key kept in their preferences. */
export const THEMES = {
  system: { label: 'Follow the system', theme: null },
  light: { label: 'Light', theme: LIGHT, contrast: 4.5 },
  dark: { label: 'Dark', theme: DARK, contrast: 3 },
  'solarized-dark': { label: 'Solarized dark', theme: SOLARIZED_DARK, contrast: 3 },
  'solarized-light': { label: 'Solarized light', theme: SOLARIZED_LIGHT, contrast: 4.5 },
  'high-contrast': { label: 'High contrast', theme: HIGH_CONTRAST, contrast: 7 },
};

const query = window.matchMedia('(prefers-color-scheme: dark)');

export function isDark() {
  return query.matches;
}

/**
 * Options for xterm for theme `name` (the system's light or dark one for "system"). The minimum
 * contrast ratio makes xterm lighten or darken a colour a program chose when it would be
 * unreadable on this background.
 */
export function terminalThemeOptions(name = 'system') {
  const chosen = THEMES[name];
  if (chosen?.theme) return { theme: chosen.theme, minimumContrastRatio: chosen.contrast };
  return isDark() ? { theme: DARK, minimumContrastRatio: 3 } : { theme: LIGHT, minimumContrastRatio: 4.5 };
}

/** Calls `apply(options)` now and whenever the system switches between light and dark; `name()` is the chosen theme. */
export function followTheme(apply, name = () => 'system') {
  apply(terminalThemeOptions(name()));
  query.addEventListener('change', () => apply(terminalThemeOptions(name())));
}

/** Whether a colour (#rrggbb) is dark: its luma under the middle. */
function isDarkColour(hex) {
  const n = parseInt(String(hex).slice(1, 7), 16);
  if (!Number.isFinite(n)) return false;
  return 0.299 * (n >> 16) + 0.587 * ((n >> 8) & 0xff) + 0.114 * (n & 0xff) < 128;
}

/** The page's colour scheme for terminal theme `name`: 'dark' or 'light', or null to follow the system ("system"). */
export function pageScheme(name) {
  const theme = THEMES[name]?.theme;
  if (!theme) return null;
  return isDarkColour(theme.background) ? 'dark' : 'light';
}

/**
 * Puts the whole page (bars, panels, dialogs, native controls) in the scheme of terminal theme
 * `name`, through `data-scheme` on <html> (app.css); "system" leaves it to the system's.
 */
export function applyPageScheme(name) {
  const scheme = pageScheme(name);
  const root = document.documentElement;
  if (scheme) root.dataset.scheme = scheme;
  else delete root.dataset.scheme;
}
