// The home page's "Recordings of ended sessions": the recordings on disk whose session is no longer in the list (ended and removed, or gone with a restart of ptyhub), each with Replay and Download.

import { api, at, replayPath, withQuery, foreignParams } from './api.js';
import { formatAge, formatBytes, h, shortId } from './util.js';

/** The list of recordings is read again at least this often, and whenever the session list changes. */
const EVERY_MS = 30000;

/** "12 s", "3 min", "1 h 5 min". */
function duration(seconds) {
  const s = Math.max(0, Math.round(Number(seconds) || 0));
  if (s < 60) return `${s} s`;
  const m = Math.round(s / 60);
  if (m < 60) return `${m} min`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

export class EndedRecordings {
  /** @param {HTMLElement} parent where the section goes (after what is there) */
  constructor(parent) {
    this.count = h('span', { class: 'count muted' });
    this.list = h('ul', { class: 'recordings', id: 'ended-recordings-list', 'aria-label': 'Recordings of ended sessions' });
    this.details = h(
      'details',
      { class: 'ended-recordings-details' },
      h('summary', {}, h('h2', { id: 'ended-recordings-title' }, 'Recordings of ended sessions ', this.count)),
      h('p', { class: 'muted' }, 'What sessions that are no longer listed printed, to play back or download.'),
      this.list,
    );
    this.section = h('section', { class: 'card ended-recordings', id: 'ended-recordings', 'aria-labelledby': 'ended-recordings-title', hidden: true }, this.details);
    parent.append(this.section);
    this.listed = '';
    this.readAt = 0;
  }

  /** The session list now holds `ids`: read the recordings again if it changed, or if it is time. */
  update(ids) {
    const listed = [...ids].sort().join(' ');
    if (listed === this.listed && Date.now() - this.readAt < EVERY_MS) return;
    this.listed = listed;
    this.readAt = Date.now();
    this.read(new Set(ids));
  }

  async read(live) {
    let all;
    try {
      all = await api('GET', '/api/recordings');
    } catch {
      return; // the page's own error says why ptyhub cannot be reached
    }
    const ended = (Array.isArray(all) ? all : []).filter((r) => !live.has(r.id));
    ended.sort((a, b) => String(b.started).localeCompare(String(a.started)));
    this.count.textContent = `(${ended.length})`;
    this.list.replaceChildren(
      ...ended.map((r) => {
        const name = r.name || `Unnamed · ${shortId(r.id)}`;
        return h(
          'li',
          { class: 'recording', dataset: { id: r.id } },
          h(
            'div',
            { class: 'recording-main' },
            h('span', { class: 'recording-name' }, name),
            h(
              'span',
              { class: 'recording-meta muted' },
              [r.assistant, `started ${formatAge(r.started)}`, duration(r.duration), formatBytes(Number(r.bytes) || 0)].filter(Boolean).join(' · '),
            ),
          ),
          h(
            'div',
            { class: 'recording-actions' },
            h('a', { class: 'btn btn-small replay-btn', href: replayPath(r.id), 'aria-label': `Replay ${name}` }, 'Replay'),
            h('a', { class: 'btn btn-small', href: withQuery(at(`/api/sessions/${encodeURIComponent(r.id)}/recording`), foreignParams(['assistant', 'name', 'cwd'])), download: '', 'aria-label': `Download the recording of ${name}` }, 'Download'),
          ),
        );
      }),
    );
    this.section.hidden = ended.length === 0;
  }
}
