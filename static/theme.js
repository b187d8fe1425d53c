// The terminal's light and dark colour themes, following the system's colour scheme as it changes.

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

const query = window.matchMedia('(prefers-color-scheme: dark)');

export function isDark() {
  return query.matches;
}

/**
 * Options for xterm for the current scheme. The minimum contrast ratio makes xterm lighten or
 * darken a colour a program chose when it would be unreadable on this background.
 */
export function terminalThemeOptions() {
  return isDark() ? { theme: DARK, minimumContrastRatio: 3 } : { theme: LIGHT, minimumContrastRatio: 4.5 };
}

/** Calls `apply(options)` now and whenever the system switches between light and dark. */
export function followTheme(apply) {
  apply(terminalThemeOptions());
  query.addEventListener('change', () => apply(terminalThemeOptions()));
}
