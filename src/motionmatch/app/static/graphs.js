// Graphs of the last 10 s (the Graphs tab), drawn from the frame history: speed asked vs delivered, total
// cost of each search, search and frame time, knee angle vs the main actor's (metrics.json posture),
// transitions and style switches (metrics.json style), and foot contacts / locks.

const $ = (id) => document.getElementById(id);

export function initGraphs(ctx) {
  const plots = [
    { title: 'speed (m/s):', series: [
      { name: 'asked', color: '#5ccf8a', get: (d) => d.speed && d.speed.asked },
      { name: 'delivered', color: '#f0a24a', get: (d) => d.speed && d.speed.delivered }] },
    { title: 'search cost:', series: [{ name: 'total', color: '#5aa6f0', get: (d) => d.search && d.search.cost }] },
    { title: 'time (µs):', series: [
      { name: 'last search', color: '#ef6b6b', get: (d) => d.search_us || null },
      { name: 'frame', color: '#c38cf0', get: (d) => d.frame_us }] },
    // From 90 deg: the gap between a bent and the actor's gait is what shows.
    { title: 'knee (deg):', low: 90, series: [
      { name: 'now', color: '#5ccf8a', get: (d) => d.posture && d.posture.knee_deg },
      { name: "actor's (moving)", color: '#e8edf2', get: (d) => d.posture && d.posture.knee_source_deg }] },
    { title: 'transitions · style switches (red)', events: true },
    { title: 'feet: contact (light) · locked (dark); left · right', feet: true },
  ];

  function draw(history, viewIndex) {
    const cv = $('gr');
    const g = cv.getContext('2d');
    g.clearRect(0, 0, cv.width, cv.height);
    const n = ctx.historyFrames;
    const off = n - history.length;
    const W = cv.width, H = cv.height;
    const gap = 10, titleH = 24;
    const heights = plots.map((p) => (p.events ? 40 : p.feet ? 70 : 1));
    const fixed = heights.filter((h) => h > 1).reduce((a, b) => a + b, 0);
    const free = (H - fixed - plots.length * (gap + titleH)) / heights.filter((h) => h === 1).length;
    let y = 0;
    const drawnSeries = {};
    plots.forEach((p, pi) => {
      const h = heights[pi] === 1 ? free : heights[pi];
      g.fillStyle = '#8d98a6'; g.font = '18px system-ui, sans-serif';
      g.fillText(p.title, 4, y + 18);
      let tx = 10 + g.measureText(p.title).width;
      for (const s of p.series || []) {
        g.fillStyle = s.color; g.fillText(s.name, tx, y + 18);
        tx += 12 + g.measureText(s.name).width;
      }
      const top = y + titleH;
      g.fillStyle = 'rgba(255,255,255,0.05)'; g.fillRect(0, top, W, h);
      const X = (i) => ((off + i) / n) * W;
      if (p.series) {
        const low = p.low || 0;
        let max = low + 1e-6;
        for (const s of p.series) for (const f of history) { const v = s.get(f.debug); if (v != null && v > max) max = v; }
        const label = `${low ? `${low}-` : 'max '}${max >= 100 ? max.toFixed(0) : max.toFixed(2)}`;
        g.fillStyle = '#8d98a6'; g.fillText(label, W - 8 - g.measureText(label).width, y + 18);
        for (const s of p.series) {
          g.strokeStyle = s.color; g.lineWidth = 2; g.beginPath();
          let pen = false, count = 0;
          history.forEach((f, i) => {
            const v = s.get(f.debug);
            if (v == null) { pen = false; return; }
            const py = top + h - (Math.max(v - low, 0) / (max - low)) * (h - 4);
            if (pen) g.lineTo(X(i), py); else g.moveTo(X(i), py);
            pen = true; count++;
          });
          g.stroke();
          drawnSeries[`${pi}:${s.color}`] = count;
        }
      } else if (p.events) {
        let count = 0, switches = 0;
        const styles = (d) => (d.clip_styles ? d.clip_styles.join(',') : null);
        history.forEach((f, i) => {
          const t = f.debug.last_transition;
          const prev = i > 0 ? history[i - 1].debug.last_transition : null;
          if (t && (!prev || prev.time !== t.time)) { g.fillStyle = '#f0a24a'; g.fillRect(X(i) - 1, top, 3, h); count++; }
          const s = styles(f.debug), before = i > 0 ? styles(history[i - 1].debug) : s;
          if (s != null && before != null && s !== before) { g.fillStyle = '#ef6b6b'; g.fillRect(X(i) - 1, top + h / 2, 3, h / 2); switches++; }
        });
        drawnSeries.transitions = count;
        drawnSeries.style_switches = switches;
      } else if (p.feet) {
        const lane = h / 2;
        ['left', 'right'].forEach((side, k) => {
          history.forEach((f, i) => {
            const foot = f.debug.feet && f.debug.feet[side];
            if (!foot) return;
            if (foot.contact) { g.fillStyle = k ? 'rgba(233,147,94,0.45)' : 'rgba(110,167,224,0.45)'; g.fillRect(X(i), top + k * lane + 2, W / n + 1, lane - 4); }
            if (foot.locked) { g.fillStyle = k ? '#e9935e' : '#6ea7e0'; g.fillRect(X(i), top + k * lane + lane / 3, W / n + 1, lane / 3); }
          });
        });
      }
      y = top + h + gap;
    });
    g.fillStyle = 'rgba(255,255,255,0.8)';
    g.fillRect(((off + viewIndex) / n) * W - 1, 0, 2, H);
    ctx.state.graphs = { frames: history.length, series: drawnSeries };
  }

  return { update: (frame, history, viewIndex, shown) => { if (shown) draw(history, viewIndex); } };
}
