// The connection indicator in the status bar, and the banner over the terminal while reconnecting, with its countdown and "Retry now".

export class ConnStatus {
  /**
   * @param {object} o
   * @param {HTMLElement} o.indicator the bar's connection chip
   * @param {HTMLElement} o.banner the banner over the terminal
   * @param {HTMLButtonElement} o.retry its "Retry now" button
   * @param {() => void} o.retryNow
   * @param {object} o.state the page's state: conn, retryAt, ready, everReady, exit, ended, fatal, closeReason
   */
  constructor({ indicator, banner, retry, retryNow, state }) {
    this.indicator = indicator;
    this.banner = banner;
    this.retry = retry;
    this.state = state;
    retry.addEventListener('click', () => retryNow());
    // The countdown in the bar and the banner.
    setInterval(() => {
      if (this.state.conn === 'waiting') this.render();
    }, 1000);
  }

  render() {
    const { state } = this;
    const el = this.indicator;
    const text = el.querySelector('.conn-text');
    let kind;
    let label;
    let banner = '';
    if (state.fatal) {
      [kind, label] = ['error', 'Not connected'];
    } else if (state.ended || state.exit) {
      [kind, label] = ['ended', 'Ended'];
    } else if (state.conn === 'open' && state.ready) {
      [kind, label] = ['live', 'Live'];
    } else if (state.conn === 'open' || state.conn === 'connecting') {
      [kind, label] = ['connecting', state.everReady ? 'Reconnecting…' : 'Connecting…'];
      if (state.everReady) banner = state.daemonRestarting ? 'ptyhub is restarting…' : 'Reconnecting…';
      if (state.daemonRestarting) label = 'Restarting…';
    } else if (state.conn === 'waiting') {
      const secs = Math.max(1, Math.ceil((state.retryAt - Date.now()) / 1000));
      [kind, label] = ['offline', `Retry in ${secs} s`];
      const why = state.closeReason || 'The connection to ptyhub was lost.';
      banner = `${why} Reconnecting in ${secs} s.`;
    } else {
      [kind, label] = ['offline', 'Disconnected'];
    }
    el.dataset.state = kind;
    text.textContent = label;
    el.title = label;
    // What is on screen may be out of date while we are not connected: say so by dimming it.
    document.body.classList.toggle('offline', state.everReady && kind !== 'live' && kind !== 'ended');
    const box = this.banner;
    box.hidden = !banner;
    // The sentence is announced once; the ticking count is only shown.
    const [sentence, count] = banner.split(/(?= Reconnecting in)/);
    const bannerText = box.querySelector('.banner-text');
    if (bannerText.textContent !== sentence) bannerText.textContent = sentence || '';
    box.querySelector('.banner-count').textContent = count || '';
    this.retry.hidden = state.conn !== 'waiting';
  }
}
