// A scenario with obstacles in headless Debian chromium (playwright-core): prints one JSON report.
// Usage: node tests/browser/obstacles_test.mjs URL OUT_DIR
// Uploads a scenario through the page's own file input, lets it play, screenshots the obstacles the
// terrain panel draws and reads back what it drew. The pytest side (tests/app/test_app.py) asserts.
import { join } from 'node:path';
import { runReport } from './chromium.mjs';

const [url, outDir] = process.argv.slice(2);
const scenario = {
  duration: 20.0,
  inputs: [{ t: 0.0, move: [0, 1] }],
  obstacles: [{ center: [0.0, 3.0], radius: 0.6 }, { min: [1.5, 4.0], max: [2.5, 6.0] }],
};
await runReport(url, { width: 960, height: 600 }, async (page, report, mark) => {
  await page.waitForFunction(() => window.motionmatch && window.motionmatch.connected
    && window.motionmatch.framesReceived > 30, null, { timeout: 30000 });
  await page.setInputFiles('#f-scenario', { name: 'pillar.json', mimeType: 'application/json',
    buffer: Buffer.from(JSON.stringify(scenario)) });
  await page.waitForFunction(() => (window.motionmatch.obstacles || []).length === 2, null, { timeout: 60000 });
  mark('drawn');
  report.drawn = await page.evaluate(() => window.motionmatch.obstacles);
  await page.waitForTimeout(300);
  await page.screenshot({ path: join(outDir, 'obstacles.png') });    // the pillar ahead of the character
  // Walking +z at the pillar (centre z 3): every root the page shows until it is past it (z > 4), or 60 s.
  report.path = await page.evaluate(() => new Promise((resolve) => {
    const path = [];
    const t0 = performance.now();
    const timer = setInterval(() => {
      const [x, , z] = window.motionmatch.rootPosition;
      path.push([x, z]);
      if (z > 4.0 || performance.now() - t0 > 60000) { clearInterval(timer); resolve(path); }
    }, 50);
  }));
  mark('past');
  await page.evaluate(() => document.getElementById('b-scen-stop').click());
  await page.waitForFunction(() => (window.motionmatch.obstacles || []).length === 0, null, { timeout: 60000 });
  report.cleared = true;
});
