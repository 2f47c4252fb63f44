// Drives the motionmatch page in headless Debian chromium (playwright-core) and prints one JSON report.
// Usage: node tests/browser/app_test.mjs URL OUT_DIR [--shots-only]
// The pytest side (tests/app/test_app.py) makes the assertions; this script only acts and measures.
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { launch } from './chromium.mjs';

const [url, outDir = tmpdir(), mode = ''] = process.argv.slice(2);
const report = { console: [], pageErrors: [] };
const browser = await launch({ width: 1280, height: 760 });
try {
  const page = browser.page;
  page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') report.console.push(m.text()); });
  page.on('pageerror', (e) => report.pageErrors.push(String(e)));
  await page.goto(url);
  await page.waitForFunction(() => window.motionmatch && window.motionmatch.connected && window.motionmatch.framesReceived > 30,
    null, { timeout: 20000 });
  const mm = () => page.evaluate(() => {
    const s = window.motionmatch;
    return { connected: s.connected, frames: s.framesReceived, root: s.rootPosition, yaw: s.facingYaw,
      hips: s.hipsPosition, time: s.time, session: s.session, errors: [...s.errors], warnings: [...s.warnings],
      names: s.names.length, fps: s.fps, bytes: s.bytesReceived };
  });
  await page.waitForTimeout(500);   // let the camera settle behind the character
  report.start = await mm();
  await page.screenshot({ path: join(outDir, 'start.png') });
  if (mode === '--shots-only') {
    await page.keyboard.down('KeyW'); await page.keyboard.down('ShiftLeft');
    await page.waitForTimeout(2500);
    await page.screenshot({ path: join(outDir, 'running.png') });
    await page.keyboard.up('ShiftLeft'); await page.keyboard.up('KeyW');
    await page.keyboard.press('KeyH');
    await page.screenshot({ path: join(outDir, 'help.png') });
  } else {
    // Hold W for 2 s: the character should walk forward (+z, the camera looks along +z at first).
    await page.keyboard.down('KeyW');
    await page.waitForTimeout(2000);
    await page.keyboard.up('KeyW');
    report.afterForward = await mm();
    await page.screenshot({ path: join(outDir, 'forward.png') });
    // Hold D: the character should turn towards the camera's right.
    await page.keyboard.down('KeyD');
    await page.waitForTimeout(1500);
    await page.keyboard.up('KeyD');
    report.afterTurn = await mm();
    // Malformed messages from inside the page: each must get an error reply, the stream must go on.
    const before = (await mm()).frames;
    await page.evaluate(() => {
      const s = window.motionmatch;
      s.sendRaw('{not json');
      s.sendRaw(JSON.stringify({ type: 'input', move: [5, 0] }));
      s.sendRaw(JSON.stringify({ type: 'input', move: [0, 1], extra: 1 }));
      s.sendRaw(new Uint8Array([1, 2, 3]));
      s.sendRaw(JSON.stringify({ type: 'settings', halflife: 'fast' }));
      s.sendRaw('x'.repeat(5000));
    });
    await page.waitForTimeout(700);
    report.afterMalformed = await mm();
    report.framesDuringMalformed = report.afterMalformed.frames - before;
    // Pixel variance of the rendered canvas (not blank).
    report.canvas = await page.evaluate(() => {
      const c = document.getElementById('view');
      const g = document.createElement('canvas');
      g.width = 160; g.height = 96;
      const ctx = g.getContext('2d');
      ctx.drawImage(c, 0, 0, g.width, g.height);
      const d = ctx.getImageData(0, 0, g.width, g.height).data;
      let sum = 0, sum2 = 0, n = 0;
      for (let i = 0; i < d.length; i += 4) { const v = (d[i] + d[i + 1] + d[i + 2]) / 3; sum += v; sum2 += v * v; n++; }
      const mean = sum / n;
      return { mean, variance: sum2 / n - mean * mean };
    });
    // Rewind: pause via the timeline and scrub back; the shown time must go back.
    const liveTime = (await mm()).time;
    await page.evaluate(() => {
      const s = document.getElementById('scrub');
      s.value = String(Math.max(0, Number(s.max) - 120));
      s.dispatchEvent(new Event('input'));
    });
    await page.waitForTimeout(300);
    report.rewind = { liveTime, shownTime: (await mm()).time, mode: await page.evaluate(() => window.motionmatch.mode) };
    await page.screenshot({ path: join(outDir, 'rewind.png') });
    await page.click('#b-live');
    await page.waitForTimeout(300);
    report.resumed = await mm();
  }
} catch (e) {
  report.failure = String(e && e.stack || e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(report));
