// Search inspector (the Search tab): for the search behind the frame on screen (live or rewound), the top
// candidates with their total cost and cost per channel, the cost of continuing the playing clip, the tag
// filter and bias that applied and whether it jumped; query vs match drawn in the character's frame for
// every channel of the schema. Every frame carries its last search record (debug.search: the normalized
// query and the playing frame); the server ranks the candidates for a record on request, so a search from
// the rewind history can be inspected as well as the live one. Search ticks above the timeline jump to one.
import { clipColor, clipLabel } from './dbbrowser.js';

const $ = (id) => document.getElementById(id);
const CHANNEL_COLORS = ['#5aa6f0', '#f0a24a', '#5ccf8a', '#ef6b6b', '#c38cf0', '#f0d060', '#60d0d0', '#d07aa0',
  '#a0b060', '#8090f0'];

export function initInspector(ctx) {
  let shownKey = null;       // the search record on screen
  let inFlight = null;       // {key, record} awaiting its reply
  let last = null;           // the last reply and its record
  let selected = 0;          // candidate row drawn against the query

  const keyOf = (s) => (s ? `${s.t}|${s.current}|${s.frame}` : null);

  function request(rec) {
    const key = keyOf(rec);
    if (!rec || inFlight || key === shownKey) return;
    inFlight = { key, rec };
    ctx.send({ type: 'inspect', query: rec.query, current: rec.current, bias: rec.bias, tag_filter: rec.tag_filter, k: 8 });
  }

  ctx.on('inspect', (msg) => {
    if (!inFlight) return;
    shownKey = inFlight.key;
    last = { msg, rec: inFlight.rec };
    inFlight = null;
    selected = 0;
    render();
  });
  ctx.on('error', () => { inFlight = null; });
  ctx.on('hello', () => { shownKey = null; inFlight = null; last = null; });

  function render() {
    const { msg, rec } = last;
    ctx.state.inspector = { candidates: msg.candidates, continue: msg.continue, best: msg.best, jumped: rec.jumped,
      record: rec };
    const t = ctx.state.time;
    $('i-head').innerHTML = '';
    const head = [
      `<b>${rec.jumped ? 'jumped' : 'kept playing'}</b> at t = ${rec.t.toFixed(2)} s`,
      `tag filter: <code>${rec.tag_filter ? escapeHtml(rec.tag_filter) : 'none'}</code> · bias ${rec.bias.toFixed(2)}`,
      msg.continue ? `continue cost ${msg.continue.cost.toFixed(3)}${msg.continue.searchable ? '' : ' (not searchable)'}`
        + ` vs best ${msg.candidates.length ? msg.candidates[0].cost.toFixed(3) : '–'}` : 'nothing playing to continue',
    ];
    $('i-head').innerHTML = head.join('<br>');
    $('i-head').title = `search ${Math.max(0, t - rec.t).toFixed(2)} s before the frame on screen`;
    const channels = ctx.state.channels;
    const rows = msg.candidates.map((c, i) => ({ ...c, rank: String(i + 1) }));
    if (msg.continue) rows.push({ ...msg.continue, rank: '→' });
    const max = Math.max(1e-6, ...rows.map((r) => r.cost));
    const body = $('i-table').querySelector('tbody');
    body.innerHTML = '';
    rows.forEach((r, i) => {
      const tr = document.createElement('tr');
      if (r.frame === msg.best) tr.classList.add('best');
      if (r.rank === '→') { tr.classList.add('continue'); tr.title = 'continuing the playing clip'; }
      if (i === selected) tr.classList.add('selected');
      const clip = ctx.clips.clip(r.clip);
      const label = clip ? clipLabel(clip.name, r.clip_frame) : String(r.frame);
      tr.innerHTML = `<td>${r.rank}</td><td class="clipcell"><span class="swatch" style="background:${clipColor(r.clip)}"></span></td>`
        + `<td class="num">${r.cost.toFixed(3)}</td><td><div class="stack"></div></td>`;
      tr.querySelector('.clipcell').append(label);
      tr.querySelector('.clipcell').title = `database frame ${r.frame}`;
      const stack = tr.querySelector('.stack');
      channels.forEach((name, k) => {
        const v = r.channels[name] || 0;
        const seg = document.createElement('span');
        seg.style.width = `${(100 * v) / max}%`;
        seg.style.background = CHANNEL_COLORS[k % CHANNEL_COLORS.length];
        seg.title = `${name}: ${v.toFixed(3)}`;
        stack.appendChild(seg);
      });
      tr.addEventListener('click', () => { selected = i; render(); });
      body.appendChild(tr);
    });
    $('i-legend').innerHTML = channels.map((n, k) =>
      `<span><i style="background:${CHANNEL_COLORS[k % CHANNEL_COLORS.length]}"></i>${n.replaceAll('_', ' ')}</span>`).join('');
    drawQueryVsMatch(msg, rows[selected]);
  }

  // Top view in the character's frame: forward up, the character's left (+x) on the left, as seen from
  // behind. Positions are points, velocities arrows from their joint's position (0.15 s of motion),
  // trajectory positions points joined from the root, directions short arrows at those points.
  function drawQueryVsMatch(msg, row) {
    const cv = $('i-qvm');
    const g = cv.getContext('2d');
    g.clearRect(0, 0, cv.width, cv.height);
    if (!row || !row.raw) return;
    // Fit both vectors' trajectory points (a run's 1 s ahead is ~4 m; feet are within 0.5 m).
    let ext = 1.0;
    const schema = msg.schema;
    for (const vals of [row.raw, msg.query_raw]) {
      let i = 0;
      for (const ch of schema) {
        const n = ch.kind.startsWith('trajectory') ? 2 * ch.offsets.length : 3;
        if (ch.kind === 'trajectory_position') for (let k = 0; k < n; k++) ext = Math.max(ext, Math.abs(vals[i + k]));
        i += n;
      }
    }
    const s = Math.min(cv.width, cv.height) / (2.3 * ext);
    const cx = cv.width / 2, cy = cv.height / 2;
    const P = (x, z) => [cx - x * s, cy - z * s];
    g.strokeStyle = 'rgba(255,255,255,0.08)'; g.lineWidth = 1;
    const grid = ext > 3 ? 1 : 0.5;      // grid lines every 0.5 or 1 m
    for (let m = -Math.ceil(ext * 1.2); m <= Math.ceil(ext * 1.2); m += grid) {
      g.beginPath(); g.moveTo(...P(m, -2 * ext)); g.lineTo(...P(m, 2 * ext)); g.stroke();
      g.beginPath(); g.moveTo(...P(-2 * ext, m)); g.lineTo(...P(2 * ext, m)); g.stroke();
    }
    g.fillStyle = 'rgba(255,255,255,0.5)';
    g.beginPath(); g.arc(...P(0, 0), 5, 0, 2 * Math.PI); g.fill();
    const drawn = [];
    const draw = (vals, color, dashed) => {
      let i = 0;
      const posOf = {};
      const trajPts = {};
      for (const ch of schema) {
        const n = ch.kind.startsWith('trajectory') ? 2 * ch.offsets.length : 3;
        const v = vals.slice(i, i + n);
        i += n;
        if (ch.kind === 'position') posOf[ch.joint] = v;
        if (ch.kind === 'trajectory_position') ch.offsets.forEach((o, k) => { trajPts[o] = [v[2 * k], v[2 * k + 1]]; });
      }
      i = 0;
      g.strokeStyle = g.fillStyle = color; g.lineWidth = 2;
      g.setLineDash(dashed ? [5, 4] : []);
      for (const ch of schema) {
        const n = ch.kind.startsWith('trajectory') ? 2 * ch.offsets.length : 3;
        const v = vals.slice(i, i + n);
        i += n;
        if (ch.kind === 'position') {
          g.beginPath(); g.arc(...P(v[0], v[2]), 6, 0, 2 * Math.PI); g.fill();
        } else if (ch.kind === 'velocity') {
          const o = posOf[ch.joint] || [0, 0, 0];
          arrow(g, P(o[0], o[2]), P(o[0] + 0.15 * v[0], o[2] + 0.15 * v[2]));
        } else if (ch.kind === 'trajectory_position') {
          g.beginPath(); g.moveTo(...P(0, 0));
          for (let k = 0; k < ch.offsets.length; k++) g.lineTo(...P(v[2 * k], v[2 * k + 1]));
          g.stroke();
          for (let k = 0; k < ch.offsets.length; k++) { g.beginPath(); g.arc(...P(v[2 * k], v[2 * k + 1]), 4, 0, 2 * Math.PI); g.fill(); }
        } else if (ch.kind === 'trajectory_direction') {
          ch.offsets.forEach((o, k) => {
            const at = trajPts[o] || [0, 0];
            arrow(g, P(at[0], at[1]), P(at[0] + 0.35 * v[2 * k], at[1] + 0.35 * v[2 * k + 1]));
          });
        }
      }
      g.setLineDash([]);
      drawn.push(color);
    };
    draw(row.raw, '#ef6b6b', true);
    draw(msg.query_raw, '#5ccf8a', false);
    g.fillStyle = 'rgba(255,255,255,0.6)'; g.font = '20px system-ui, sans-serif';
    g.fillText(`forward (grid ${grid} m)`, cx + 8, 22);
    g.fillText('left', 8, cy - 8);
    g.fillText('right', cv.width - 52, cy - 8);
    const clip = ctx.clips.clip(row.clip);
    $('i-qvm-ch').textContent = `match: ${clip ? clipLabel(clip.name, row.clip_frame) : row.frame} · ${schema.length} channels: `
      + schema.map((c) => `${c.name} (${c.kind.replace('trajectory_', 'traj. ')})`).join(', ');
  }

  // The search ticks over the timeline: one mark per search in the history (taller and orange for jumps);
  // a click shows that search's frame paused.
  const ticks = $('ticks');
  ticks.addEventListener('click', (e) => {
    const history = ctx.history();
    if (!history.length) return;
    const rect = ticks.getBoundingClientRect();
    const off = ctx.historyFrames - history.length;
    const i = Math.round(((e.clientX - rect.left) / rect.width) * ctx.historyFrames) - off;
    // The nearest frame that searched.
    let best = -1;
    for (let d = 0; d < 30 && best < 0; d++) {
      for (const j of [i - d, i + d]) if (j >= 0 && j < history.length && searchedAt(history, j)) { best = j; break; }
    }
    if (best < 0) return;
    if (ctx.state.mode === 'live') ctx.setMode('rewind');
    ctx.show(best);
    ctx.openTab('search');
  });

  function searchedAt(history, j) {
    const s = history[j].debug.search;
    return s && (j === 0 || keyOf(history[j - 1].debug.search) !== keyOf(s));
  }

  function drawTicks(history) {
    const w = ticks.clientWidth;
    if (ticks.width !== w) ticks.width = w;
    const g = ticks.getContext('2d');
    g.clearRect(0, 0, ticks.width, ticks.height);
    const off = ctx.historyFrames - history.length;
    const dx = ticks.width / ctx.historyFrames;
    for (let j = 0; j < history.length; j++) {
      if (!searchedAt(history, j)) continue;
      const jumped = history[j].debug.search.jumped;
      g.fillStyle = jumped ? '#f0a24a' : 'rgba(255,255,255,0.35)';
      const h = jumped ? ticks.height : ticks.height * 0.45;
      g.fillRect(Math.floor((off + j) * dx), ticks.height - h, Math.max(1, Math.ceil(dx)), h);
    }
  }

  function update(frame, history, tabShown) {
    drawTicks(history);
    if (!tabShown || !frame) return;
    request(frame.debug.search);
    if (!frame.debug.search) $('i-head').textContent = 'no search yet';
  }

  return { update };
}

function arrow(g, a, b) {
  g.beginPath(); g.moveTo(...a); g.lineTo(...b); g.stroke();
  const ang = Math.atan2(b[1] - a[1], b[0] - a[0]);
  g.beginPath();
  g.moveTo(...b);
  g.lineTo(b[0] - 10 * Math.cos(ang - 0.4), b[1] - 10 * Math.sin(ang - 0.4));
  g.lineTo(b[0] - 10 * Math.cos(ang + 0.4), b[1] - 10 * Math.sin(ang + 0.4));
  g.closePath(); g.fill();
}

function escapeHtml(s) {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
}
