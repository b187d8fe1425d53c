// Keeps the page inside the visual viewport, so an on-screen keyboard never covers the terminal.

/**
 * Sets `--app-height` and `--app-top` on <html> from the visual viewport, which shrinks when a soft
 * keyboard opens (iOS Safari does not resize the layout viewport; Chrome on Android does with
 * `interactive-widget=resizes-content`, and then both agree). Pages size their body with them.
 */
export function trackViewport() {
  const vv = window.visualViewport;
  const root = document.documentElement;
  const apply = () => {
    const height = vv ? vv.height : window.innerHeight;
    root.style.setProperty('--app-height', `${Math.round(height)}px`);
    root.style.setProperty('--app-top', `${Math.round(vv ? vv.offsetTop : 0)}px`);
  };
  vv?.addEventListener('resize', apply);
  vv?.addEventListener('scroll', apply);
  addEventListener('resize', apply);
  apply();
}
