// Crowd mode in headless Debian chromium (playwright-core): prints one JSON report.
// Usage: node tests/browser/crowd_test.mjs URL
// The pytest side (tests/app/test_app_crowd.py) makes the assertions; this script only acts and measures.
import { runReport } from './chromium.mjs';

const [url] = process.argv.slice(2);
await runReport(url, { width: 640, height: 400 }, async (page, report, mark) => {
  await page.waitForFunction(() => window.motionmatch && window.motionmatch.connected
    && window.motionmatch.framesReceived > 30 && window.motionmatch.crowd && window.motionmatch.crowd.frames > 10,
  null, { timeout: 30000 });
  const sample = () => page.evaluate(() => {
    const s = window.motionmatch, c = s.crowd;
    return { root: s.rootPosition, n: c.n, frames: c.frames, seq: c.seq, bytes: c.bytes,
      roots: c.roots ? Array.from(c.roots) : null, updateMs: c.updateMs, toggle: !!document.getElementById('crowd-toggle'),
      skinned: c.skinned, meshes: c.meshes ? c.meshes.length : 0, error: c.error };
  });
  // Draw calls (renderer.info) and script time of the page's render, averaged over 20 animation frames,
  // and the draw calls of the same frame rendered again without the crowd meshes.
  const renderCost = () => page.evaluate(() => new Promise((resolve) => {
    const s = window.motionmatch, r = s.renderer, orig = r.render;
    let n = 0, ms = 0;
    r.render = function (...args) {
      const t0 = performance.now();
      orig.apply(this, args);
      ms += performance.now() - t0;
      n += 1;
      if (n < 20) return;
      r.render = orig;
      const calls = r.info.render.calls, triangles = r.info.render.triangles;
      const shown = s.crowd.meshes.map((m) => m.visible);
      s.crowd.meshes.forEach((m) => { m.visible = false; });
      orig.apply(this, args);
      const without = r.info.render.calls;
      s.crowd.meshes.forEach((m, i) => { m.visible = shown[i]; });
      resolve({ calls, callsWithoutCrowd: without, triangles, renderMs: ms / n });
    };
  }));
  mark('streaming');
  report.start = await sample();
  await page.waitForTimeout(1000);
  report.later = await sample();
  report.on = await renderCost();
  if (process.env.CROWD_SCREENSHOT) await page.screenshot({ path: process.env.CROWD_SCREENSHOT });
  // The user's character still answers its keys among the crowd.
  await page.keyboard.down('KeyW');
  await page.waitForTimeout(2000);
  await page.keyboard.up('KeyW');
  report.afterForward = await sample();
  mark('walked');
  await page.evaluate(() => document.getElementById('crowd-toggle').click());
  await page.waitForTimeout(300);
  report.off = { ...await renderCost(), enabled: await page.evaluate(() => window.motionmatch.crowd.enabled) };
  mark('done');
});
