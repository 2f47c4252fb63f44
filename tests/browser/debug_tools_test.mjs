// Drives the debugging tools of the motionmatch page in headless Debian chromium at 1280x720 and prints one
// JSON report; tests/app/test_app_debug_tools.py makes the assertions.
// Usage: node tests/browser/debug_tools_test.mjs URL OUT_DIR
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { launch } from './chromium.mjs';

const [url, outDir = tmpdir()] = process.argv.slice(2);
const report = { console: [], pageErrors: [] };
const browser = await launch({ width: 1280, height: 720 });
try {
  const page = browser.page;
  page.on('console', (m) => { if (m.type() === 'error') report.console.push(m.text()); });
  page.on('pageerror', (e) => report.pageErrors.push(String(e)));
  await page.goto(url);
  await page.waitForFunction(() => window.motionmatch && window.motionmatch.framesReceived > 30 && window.motionmatch.clips,
    null, { timeout: 20000 });
  const mm = (fn) => page.evaluate(fn);
  // DOM clicks without playwright's actionability waits (software rendering makes each of those slow).
  const click = (sel) => page.evaluate((q) => document.querySelector(q).click(), sel);
  const choose = (sel, value) => page.evaluate(([q, v]) => {
    const el = document.querySelector(q);
    el.value = v;
    el.dispatchEvent(new Event('change'));
  }, [sel, value]);
  const t0 = Date.now();
  report.times = {};
  const lap = (name) => { report.times[name] = Date.now() - t0; };

  // Layout at 1280x720: the Defaults button inside the window, no label cut off.
  lap('layout');
  report.layout = await mm(() => {
    const r = document.getElementById('t-defaults').getBoundingClientRect();
    const cut = [];
    const hud = document.getElementById('hud');
    const box = hud.getBoundingClientRect();
    for (const el of document.querySelectorAll('#tuning .row label, #costs .bar span:first-child, #stats dd, #hud .toggles label')) {
      const panel = el.closest('.panel').getBoundingClientRect();
      if (el.offsetParent && (el.scrollWidth > el.clientWidth + 1 || el.getBoundingClientRect().right > panel.right)) {
        cut.push(el.textContent);
      }
    }
    // Every toggle of the Status tab (overlays, ghosts) in sight without scrolling the panel.
    const toggles = [...document.querySelectorAll('#tab-status .toggles input')].map((el) => {
      const b = el.getBoundingClientRect();
      return { id: el.id || el.dataset.overlay, top: b.top, bottom: b.bottom };
    });
    return { defaults: [r.left, r.top, r.right, r.bottom], width: innerWidth, height: innerHeight, cut, toggles,
      hud: { bottom: box.bottom, scroll: hud.scrollHeight, client: hud.clientHeight },
      placeholder: document.getElementById('t-tags').placeholder, tags: window.motionmatch.tags };
  });
  await page.screenshot({ path: join(outDir, 'layout.png') });

  // A forced jump: walk, then turn and run; pause and pick the last jump on the search ticks.
  await page.keyboard.down('KeyW');
  await page.waitForTimeout(1200);
  await page.keyboard.down('KeyD'); await page.keyboard.down('ShiftLeft');
  await page.keyboard.up('KeyW');
  await page.waitForTimeout(900);
  await page.keyboard.up('KeyD'); await page.keyboard.up('ShiftLeft');
  await page.keyboard.press('KeyP');
  await page.waitForTimeout(300);
  const tick = await mm(() => {
    // The frame of the last search that jumped, and where its tick is drawn.
    const s = window.motionmatch;
    const h = s.debugHistory();
    let j = -1;
    for (let i = h.length - 1; i > 0 && j < 0; i--) {
      const a = h[i].search, b = h[i - 1].search;
      if (a && a.jumped && (!b || b.t !== a.t)) j = i;
    }
    const r = document.getElementById('ticks').getBoundingClientRect();
    return { j, t: j >= 0 ? h[j].search.t : null, x: r.left + ((600 - h.length + j + 0.5) / 600) * r.width,
      y: r.top + r.height / 2, frames: h.length };
  });
  lap('tick');
  report.tick = tick;
  if (tick.j >= 0) {
    await page.mouse.click(tick.x, tick.y);
    await page.waitForFunction((t) => window.motionmatch.inspector && window.motionmatch.inspector.record.t === t,
      tick.t, { timeout: 10000 }).catch(() => {});
  }
  report.inspector = await mm(() => {
    const s = window.motionmatch;
    const hud = document.getElementById('hud');
    const plot = document.getElementById('i-qvm').getBoundingClientRect();
    return { tab: s.tab, mode: s.mode, ...(s.inspector || {}), rows: document.querySelectorAll('#i-table tbody tr').length,
      head: document.getElementById('i-head').textContent,
      costCells: [...document.querySelectorAll('#i-table td.num')].map((td) => [td.textContent, td.scrollWidth, td.clientWidth]),
      hud: { scroll: hud.scrollHeight, client: hud.clientHeight, bottom: hud.getBoundingClientRect().bottom },
      plotBox: [plot.left, plot.top, plot.right, plot.bottom] };
  });
  await page.screenshot({ path: join(outDir, 'inspector.png') });
  // Pausing keeps the history still: frames in flight are not added.
  lap('pause');
  report.pause = await mm(async () => {
    const s = window.motionmatch;
    const n0 = s.debugHistory().length;
    await new Promise((r) => setTimeout(r, 600));
    return { before: n0, after: s.debugHistory().length, mode: s.mode };
  });
  await click('#b-live');

  // Database browser: play clip 1 from its start.
  await click('#tabs button[data-tab="clips"]');
  await click('#c-list .clip[data-clip="1"] button');
  await page.waitForTimeout(1000);
  // The panels refresh with the page's frames: a loaded machine draws few a second.
  await page.waitForFunction(() => {
    const s = window.motionmatch, c = s.clips[1];
    return s.playhead && s.playhead.startsWith(`${c.name.replace('.bvh', '').replace(' (mirrored)', '')} +`)
      && s.playhead.endsWith('(mirrored)') === c.tags.includes('mirrored');
  }, null, { timeout: 10000 }).catch(() => {});
  lap('clips');
  report.clips = await mm(() => ({ playhead: window.motionmatch.playhead, clip1: window.motionmatch.clips[1],
    resume: !document.getElementById('c-resume').disabled, rows: document.querySelectorAll('#c-list .clip').length,
    frame: window.motionmatch.lastDebug.frame, clipFrame: window.motionmatch.lastDebug.clip_frame }));
  await click('#c-resume');

  // Ghosts on, then off.
  await click('#tabs button[data-tab="status"]');
  await click('#g-raw'); await click('#g-touch');
  await page.waitForTimeout(600);
  report.ghostsOn = await mm(() => ({ shown: window.motionmatch.ghosts, sent: !!window.motionmatch.lastDebug.ghosts,
    joints: window.motionmatch.lastDebug.ghosts ? window.motionmatch.lastDebug.ghosts.raw.length : 0 }));
  await click('#g-raw'); await click('#g-touch');
  await page.waitForTimeout(600);
  lap('ghostsOff');
  report.ghostsOff = await mm(() => ({ shown: window.motionmatch.ghosts, sent: !!window.motionmatch.lastDebug.ghosts }));

  // Graphs.
  await click('#tabs button[data-tab="graphs"]');
  await page.waitForTimeout(400);
  lap('graphs');
  report.graphs = await mm(() => {
    const c = document.getElementById('gr');
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let ink = 0;
    for (let i = 3; i < d.length; i += 4) if (d[i] > 0) ink++;
    return { ...window.motionmatch.graphs, ink: ink / (c.width * c.height) };
  });

  // Terrain: steps; walking forward climbs them.
  await click('#tabs button[data-tab="status"]');
  await choose('#t-terrain', 'steps');
  await page.waitForFunction(() => window.motionmatch.terrain && window.motionmatch.terrain.name === 'steps', null,
    { timeout: 10000 }).catch(() => {});
  const hips0 = (await mm(() => window.motionmatch.hipsPosition))[1];
  // Walk until the hips have climbed (or 20 s): a loaded machine streams fewer frames per second.
  await page.keyboard.down('KeyW');
  await page.waitForFunction((h0) => window.motionmatch.hipsPosition[1] > h0 + 0.35, hips0,
    { timeout: 20000, polling: 100 }).catch(() => {});
  await page.keyboard.up('KeyW');
  lap('terrain');
  report.terrain = await mm(() => {
    const s = window.motionmatch;
    // The drawn surface along the walk (x = 0.3, z every 5 cm) and where the overlays meet the ground.
    const profile = [];
    for (let z = -2; z <= 8; z += 0.05) profile.push([0.3, s.drawnGroundAt(0.3, z), z]);
    return { ...s.terrain, hips: s.hipsPosition, root: s.rootPosition, overlays: s.overlayGround(), profile,
      extent: s.groundExtent() };
  });
  report.terrain.hips0 = hips0;
  await page.screenshot({ path: join(outDir, 'terrain.png') });
  // Back on flat ground: the ground plane reaches far around the character too.
  await choose('#t-terrain', 'flat');
  await page.waitForFunction(() => window.motionmatch.terrain && window.motionmatch.terrain.name === 'flat', null,
    { timeout: 10000 }).catch(() => {});
  await page.waitForTimeout(300);
  report.flat = await mm(() => ({ root: window.motionmatch.rootPosition, extent: window.motionmatch.groundExtent(),
    overlays: window.motionmatch.overlayGround() }));

  // A bad tag filter typed and entered: one error, its caret line kept.
  const errors0 = await mm(() => window.motionmatch.errors.length);
  await page.evaluate(() => {
    const el = document.getElementById('t-tags');
    el.focus();
    el.value = 'walk | (';
    el.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', bubbles: true }));
    el.dispatchEvent(new Event('change'));      // what the blur after Enter fires
  });
  await page.waitForTimeout(800);
  report.tagError = await mm(() => ({ errors: window.motionmatch.errors.slice(-2),
    toasts: [...document.querySelectorAll('.toast.error')].map((t) => ({ text: t.textContent, pre: t.classList.contains('pre') })) }));
  report.tagError.count = (await mm(() => window.motionmatch.errors.length)) - errors0;
  // A database set from the panel, switched at the next search: the server answers with the set and the
  // settings it made, and the panel's tag filter shows the set's tags.
  const setTag = await mm(() => window.motionmatch.tags.find((t) => t !== 'mirrored') || window.motionmatch.tags[0]);
  await page.fill('#t-set', setTag);
  await page.uncheck('#t-set-now');
  await page.click('#t-set-use');
  await page.waitForFunction((t) => window.motionmatch.set && window.motionmatch.settings.tag_filter === t, setTag,
    { timeout: 20000 }).catch(() => {});
  report.set = { tag: setTag, ...(await mm(() => ({ set: window.motionmatch.set,
    filter: window.motionmatch.settings.tag_filter, shown: document.getElementById('t-tags').value }))) };
  // Without ?quality=low, software rendering's low frame rate switches to low quality by itself.
  lap('quality');
  await page.goto(url.replace(/[?&]quality=low/, ''));
  await page.waitForFunction(() => window.motionmatch && window.motionmatch.quality.startsWith('low'), null,
    { timeout: 15000 }).catch(() => {});
  report.quality = await mm(() => ({ quality: window.motionmatch.quality, fps: window.motionmatch.fps,
    hud: document.getElementById('h-quality').textContent }));
  lap('end');
} catch (e) {
  report.failure = String(e && e.stack || e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(report));
