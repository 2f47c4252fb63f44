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
  let wanted = null;         // the record the page shows now: asked for once the reply in flight is in
  let last = null;           // the last reply and its record
  let selected = 0;          // candidate row drawn against the query

  const keyOf = (s) => (s ? `${s.t}|${s.current}|${s.frame}` : null);

  function request(rec) {
    wanted = rec;
    const key = keyOf(rec);
    if (!rec || inFlight || key === shownKey) return;
    inFlight = { key, rec };
    ctx.send({ type: 'inspect', query: rec.query, current: rec.current, bias: rec.bias, tag_filter: rec.tag_filter, k: 8 });
  }

  ctx.on('inspect', (msg) => {
    if (!inFlight) return;
    const done = inFlight;
    inFlight = null;
    // A record picked while this reply was on its way (a tick clicked, a rewind step) wins: a paused page
    // sends no further frames to ask for it again.
    if (wanted && keyOf(wanted) !== done.key) { request(wanted); return; }
    shownKey = done.key;
    last = { msg, rec: done.rec };
    selected = 0;
    render();
  });
  ctx.on('error', () => { inFlight = null; });
  ctx.on('hello', () => { shownKey = null; inFlight = null; last = null; wanted = null; });

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
      tr.querySelector('.clipcell').title = `${label} · database frame ${r.frame}`;
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
  // trajectory positions points joined from the root, directions short arrows at those points. The view
  // fits everything both vectors draw below a strip that holds the labels, so nothing runs into them.
  function drawQueryVsMatch(msg, row) {
    const cv = $('i-qvm');
    const g = cv.getContext('2d');
    g.clearRect(0, 0, cv.width, cv.height);
    if (!row || !row.raw) return;
    const schema = msg.schema;
    const xs = [0], zs = [0];
    for (const vals of [row.raw, msg.query_raw]) {
      for (const p of plotShapes(schema, vals)) {
        for (const [x, z] of p.line || p.arrow || [p.dot]) { xs.push(x); zs.push(z); }
      }
    }
    const STRIP = 30, PAD = 14;           // canvas pixels: label strip, margin around the drawing
    const area = { x0: PAD, y0: STRIP + PAD, x1: cv.width - PAD, y1: cv.height - PAD };
    // At least 1.5 m across, so a standing pose is not blown up.
    let [xmin, xmax, zmin, zmax] = [Math.min(...xs), Math.max(...xs), Math.min(...zs), Math.max(...zs)];
    const grow = (lo, hi) => { const e = Math.max(0, 1.5 - (hi - lo)) / 2; return [lo - e, hi + e]; };
    [xmin, xmax] = grow(xmin, xmax); [zmin, zmax] = grow(zmin, zmax);
    const s = Math.min((area.x1 - area.x0) / (xmax - xmin), (area.y1 - area.y0) / (zmax - zmin));
    const cx = (area.x0 + area.x1) / 2, cy = (area.y0 + area.y1) / 2;
    const xc = (xmin + xmax) / 2, zc = (zmin + zmax) / 2;
    const P = (x, z) => [cx - (x - xc) * s, cy - (z - zc) * s];
    const grid = Math.max(xmax - xmin, zmax - zmin) > 6 ? 1 : 0.5;      // grid lines every 0.5 or 1 m
    g.save();
    g.beginPath(); g.rect(0, STRIP, cv.width, cv.height - STRIP); g.clip();
    g.strokeStyle = 'rgba(255,255,255,0.08)'; g.lineWidth = 1;
    const [wx0, wx1] = [xc - cv.width / (2 * s), xc + cv.width / (2 * s)];
    const [wz0, wz1] = [zc - cv.height / (2 * s), zc + cv.height / (2 * s)];
    for (let m = Math.floor(wx0 / grid) * grid; m <= wx1; m += grid) {
      g.beginPath(); g.moveTo(...P(m, wz0)); g.lineTo(...P(m, wz1)); g.stroke();
    }
    for (let m = Math.floor(wz0 / grid) * grid; m <= wz1; m += grid) {
      g.beginPath(); g.moveTo(...P(wx0, m)); g.lineTo(...P(wx1, m)); g.stroke();
    }
    g.restore();
    g.fillStyle = 'rgba(255,255,255,0.5)';
    g.beginPath(); g.arc(...P(0, 0), 5, 0, 2 * Math.PI); g.fill();
    const draw = (vals, color, dashed) => {
      g.strokeStyle = g.fillStyle = color; g.lineWidth = 2;
      g.setLineDash(dashed ? [5, 4] : []);
      for (const p of plotShapes(schema, vals)) {
        if (p.dot) { g.beginPath(); g.arc(...P(...p.dot), p.r, 0, 2 * Math.PI); g.fill(); }
        if (p.arrow) arrow(g, P(...p.arrow[0]), P(...p.arrow[1]));
        if (p.line) { g.beginPath(); g.moveTo(...P(0, 0)); for (const q of p.line) g.lineTo(...P(...q)); g.stroke(); }
      }
      g.setLineDash([]);
    };
    draw(row.raw, '#ef6b6b', true);
    draw(msg.query_raw, '#5ccf8a', false);
    g.fillStyle = 'rgba(255,255,255,0.6)'; g.font = '20px system-ui, sans-serif';
    g.textBaseline = 'middle';
    g.fillText(`↑ forward · grid ${grid} m`, PAD, STRIP / 2);
    const lr = '← left · right →';
    g.fillText(lr, cv.width - PAD - g.measureText(lr).width, STRIP / 2);
    g.strokeStyle = 'rgba(255,255,255,0.12)';
    g.beginPath(); g.moveTo(0, STRIP + 0.5); g.lineTo(cv.width, STRIP + 0.5); g.stroke();
    // For the tests: the drawn points' box (canvas pixels) against the label strip.
    const px = xs.map((x, i) => P(x, zs[i]));
    ctx.state.inspector.plot = { strip: STRIP, width: cv.width, height: cv.height,
      ink: [Math.min(...px.map((p) => p[0])), Math.min(...px.map((p) => p[1])),
        Math.max(...px.map((p) => p[0])), Math.max(...px.map((p) => p[1]))] };
    const clip = ctx.clips.clip(row.clip);
    $('i-qvm-ch').textContent = `match: ${clip ? clipLabel(clip.name, row.clip_frame) : row.frame}`;
    $('i-qvm-ch').title = `${schema.length} channels: `
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

// What the query-vs-match view draws for one feature vector (raw units, character frame, (x, z) in metres):
// {dot, r} joint positions (r: pixels) and trajectory points, {arrow: [from, to]} velocities (0.15 s of
// motion from their joint) and trajectory directions, {line} the trajectory from the root. Lines come
// before the points drawn on them.
function plotShapes(schema, vals) {
  const posOf = {}, trajPts = {}, per = [];
  let i = 0;
  for (const ch of schema) {
    const n = ch.kind.startsWith('trajectory') ? 2 * ch.offsets.length : 3;
    per.push(vals.slice(i, i + n));
    i += n;
  }
  schema.forEach((ch, c) => {
    const v = per[c];
    if (ch.kind === 'position') posOf[ch.joint] = v;
    if (ch.kind === 'trajectory_position') ch.offsets.forEach((o, k) => { trajPts[o] = [v[2 * k], v[2 * k + 1]]; });
  });
  const out = [];
  schema.forEach((ch, c) => {
    const v = per[c];
    if (ch.kind === 'position') out.push({ dot: [v[0], v[2]], r: 6 });
    else if (ch.kind === 'velocity') {
      const o = posOf[ch.joint] || [0, 0, 0];
      out.push({ arrow: [[o[0], o[2]], [o[0] + 0.15 * v[0], o[2] + 0.15 * v[2]]] });
    } else if (ch.kind === 'trajectory_position') {
      const pts = ch.offsets.map((o, k) => [v[2 * k], v[2 * k + 1]]);
      out.push({ line: pts }, ...pts.map((q) => ({ dot: q, r: 4 })));
    } else if (ch.kind === 'trajectory_direction') {
      ch.offsets.forEach((o, k) => {
        const at = trajPts[o] || [0, 0];
        out.push({ arrow: [at, [at[0] + 0.35 * v[2 * k], at[1] + 0.35 * v[2 * k + 1]]] });
      });
    }
  });
  return out;
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
