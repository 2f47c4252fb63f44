// Database browser (the Clips tab): the clips with their tags and lengths, where the playhead is
// ("locomotion_take1 +363 (mirrored)"), a strip of the clips used over the last 10 s, and playing a clip
// directly on the character (searches pause until it ends or "Resume search").

const $ = (id) => document.getElementById(id);

// "locomotion_take1.bvh (mirrored)", 363 -> "locomotion_take1 +363 (mirrored)": the file without its
// extension, the frame within the clip, then the mirrored mark last so it is never cut off.
export function clipLabel(name, clipFrame) {
  const mirrored = / \(mirrored\)$/.test(name);
  const base = name.replace(/ \(mirrored\)$/, '').replace(/\.bvh$/i, '');
  return `${base}${clipFrame == null ? '' : ` +${clipFrame}`}${mirrored ? ' (mirrored)' : ''}`;
}

// One stable colour per clip index (golden-angle hues), so a clip keeps its colour across the strip.
export function clipColor(index) {
  return `hsl(${(index * 137.508) % 360}, 55%, 58%)`;
}

export function initClips(ctx) {
  const db = { fps: 60, clips: [], starts: [] };
  let playing = null;         // clip index asked for with play_clip, until the search resumes
  let playingAfter = 0;       // frames up to this sequence number were sent before the jump

  function rangeOf(frame) {
    // Binary search in the clip starts (sorted).
    let lo = 0, hi = db.starts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (db.starts[mid] <= frame) lo = mid; else hi = mid - 1;
    }
    return lo;
  }

  async function load(session) {
    const res = await fetch(`/api/session/${session}/clips`);
    if (!res.ok) return;
    const body = await res.json();
    db.fps = body.fps; db.clips = body.clips; db.starts = body.clips.map((c) => c.start);
    ctx.state.clips = db.clips;
    $('c-count').textContent = `${db.clips.length} clips, ${(body.frames / body.fps).toFixed(0)} s`;
    const list = $('c-list');
    list.innerHTML = '';
    db.clips.forEach((c, i) => {
      const row = document.createElement('div');
      row.className = 'clip';
      row.dataset.clip = String(i);
      const tags = c.tags.filter((t) => t !== 'mirrored').join(' ');
      row.innerHTML = `<span class="swatch" style="background:${clipColor(i)}"></span>
        <span class="name"></span><span class="len">${(c.frames / db.fps).toFixed(1)} s</span>
        <button class="small" title="play this clip on the character">▶</button>
        <span class="tags"></span>`;
      row.querySelector('.name').textContent = clipLabel(c.name);
      row.querySelector('.name').title = c.name;
      row.querySelector('.tags').textContent = tags;
      // Annotation windows (docs/ANNOTATIONS.md): kind and seconds within the clip, under the tags.
      for (const w of c.annotations || []) {
        const span = document.createElement('span');
        span.className = `annotation ${w.kind}`;
        const cost = w.kind === 'cost_bias' ? ` ${w.cost > 0 ? '+' : ''}${w.cost}` : '';
        span.textContent = `${w.kind.replace('_', ' ')} ${(w.start / db.fps).toFixed(2)}-${(w.stop / db.fps).toFixed(2)} s${cost}`;
        row.appendChild(span);
      }
      row.querySelector('button').addEventListener('click', () => playClip(i));
      list.appendChild(row);
    });
  }

  function playClip(i) {
    if (ctx.state.mode !== 'live') ctx.setMode('live');
    ctx.send({ type: 'play_clip', clip: i, offset: 0 });
  }
  $('c-resume').addEventListener('click', () => ctx.send({ type: 'play_clip', clip: null }));

  ctx.on('hello', (msg) => { playing = null; load(msg.session); });
  ctx.on('play_clip', (msg) => {
    playing = msg.clip;
    const h = ctx.history();
    playingAfter = h.length ? h[h.length - 1].seq : 0;
    $('c-resume').disabled = playing == null;
  });

  function drawUsed(history, viewIndex) {
    const cv = $('c-used');
    const g = cv.getContext('2d');
    g.clearRect(0, 0, cv.width, cv.height);
    if (!history.length || !db.clips.length) return;
    const n = ctx.historyFrames;
    const w = cv.width / n, off = n - history.length;
    let prev = -1, runStart = 0;
    const label = (r, x0, x1) => {
      if (x1 - x0 < 60) return;
      g.fillStyle = '#111'; g.font = '18px system-ui, sans-serif';
      g.fillText(clipLabel(db.clips[r].name), x0 + 4, 24, x1 - x0 - 8);
    };
    for (let i = 0; i < history.length; i++) {
      const f = history[i].debug.frame;
      const r = f == null ? -1 : rangeOf(f);
      if (r >= 0) { g.fillStyle = clipColor(r); g.fillRect((off + i) * w, 0, Math.ceil(w) + 1, cv.height); }
      if (r !== prev) {
        if (prev >= 0) label(prev, (off + runStart) * w, (off + i) * w);
        prev = r; runStart = i;
        g.fillStyle = 'rgba(0,0,0,0.55)'; g.fillRect((off + i) * w, 0, 2, cv.height);
      }
    }
    if (prev >= 0) label(prev, (off + runStart) * w, cv.width);
    g.fillStyle = '#fff';
    g.fillRect((off + viewIndex) * w - 1, 0, 3, cv.height);
  }

  function update(frame, history, viewIndex) {
    const d = frame && frame.debug;
    if (!d || !db.clips.length || d.frame == null) return;
    const r = rangeOf(d.frame);
    const c = db.clips[r];
    const text = clipLabel(c.name, d.frame - c.start);
    ctx.state.playhead = text;
    $('c-playhead').textContent = `${text}  ·  ${playing != null ? 'playing this clip (search paused)' : 'chosen by the search'}`;
    if (playing != null && frame.seq > playingAfter && r !== playing) { playing = null; $('c-resume').disabled = true; }
    for (const row of document.querySelectorAll('#c-list .clip.current')) row.classList.remove('current');
    const row = document.querySelector(`#c-list .clip[data-clip="${r}"]`);
    if (row) row.classList.add('current');
    drawUsed(history, viewIndex);
  }

  return { update, rangeOf, clip: (i) => db.clips[i] };
}
