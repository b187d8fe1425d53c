// The session's state in the page's header: working, waiting, idle or exited, for how long, and
// why (from the `status` and `state` messages, docs/protocol.md section 2).

/** How long, as people say it: 5s, 3m, 2h, 1d. */
export function ago(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

export class StatePill {
  /** @param {HTMLElement} el the pill: `.state-text`, `.state-age` and `.state-reason` inside */
  constructor(el) {
    this.el = el;
    this.state = null;
    this.timer = 0;
    this.text = el.querySelector('.state-text');
    this.age = el.querySelector('.state-age');
    this.reason = el.querySelector('.state-reason');
  }

  /** A `status` or `state` message: its state fields, when it has them (an older server's has none). */
  update(msg) {
    if (!msg?.state) return;
    this.state = { state: msg.state, since: msg.stateSinceMs || Date.now(), reason: msg.reason || '' };
    this.render();
    // The time in state moves on while nothing is said: once a second is enough to read.
    if (!this.timer) this.timer = setInterval(() => this.renderAge(), 1000);
  }

  render() {
    const s = this.state;
    this.el.hidden = false;
    this.el.dataset.state = s.state;
    this.text.textContent = s.state;
    this.reason.textContent = s.reason;
    this.renderAge();
  }

  renderAge() {
    const s = this.state;
    if (!s || document.hidden) return;
    const age = ago(Date.now() - s.since);
    this.age.textContent = age;
    this.el.title = s.reason ? `${s.state} for ${age}: ${s.reason}` : `${s.state} for ${age}`;
  }
}
