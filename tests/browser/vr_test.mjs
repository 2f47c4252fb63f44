// VR mode in headless Debian chromium (playwright-core): prints one JSON report.
// Usage: node tests/browser/vr_test.mjs URL OUT_DIR   (OUT_DIR/frames.json: device poses at 60 fps,
// [[hmd, left, right], ...] each {position, rotation}, streamed as a headset would).
// The pytest side (tests/app/test_app_vr.py) makes the assertions; this script only acts and measures.
// WebXR itself needs a headset: the tracker-stream path it feeds (vr.sendPoses) is what runs here.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { runReport } from './chromium.mjs';

const [url, outDir] = process.argv.slice(2);
const frames = JSON.parse(readFileSync(join(outDir, 'frames.json'), 'utf8'));
await runReport(url, { width: 640, height: 400 }, async (page, report, mark) => {
  const sample = () => page.evaluate(() => {
    const s = window.motionmatch, v = s.vr;
    return { connected: s.connected, frames: s.framesReceived, enabled: v.enabled, source: v.source, live: v.live,
      vrFrames: v.frames, devicesVisible: v.devicesVisible, ghostVisible: v.ghostVisible, ghostJoints: v.ghostJoints,
      devices: v.devices || null, controls: !!document.getElementById('vr-clip'), xr: v.xr,
      enterShown: !!document.getElementById('vr-enter') && !document.getElementById('vr-enter').hidden,
      errors: s.errors.slice() };
  });
  // The replay the server starts with: devices drawn, no ghost (a tracker file has no ground truth).
  await page.waitForFunction(() => window.motionmatch && window.motionmatch.connected && window.motionmatch.vr
    && window.motionmatch.vr.frames > 20 && window.motionmatch.vr.source, null, { timeout: 30000 });
  report.replay = await sample();
  mark('replay');
  // A held-out clip from the control: ground truth, so the ghost shows.
  await page.selectOption('#vr-clip', '0');
  await page.waitForFunction(() => window.motionmatch.vr.ghostVisible, null, { timeout: 30000 });
  await page.waitForTimeout(300);
  report.clip = await sample();
  mark('clip');
  // Live poses, as the WebXR loop sends them: 72 messages a second at the headset's times, then a
  // malformed one; the errors the avatar shows are measured over the last two seconds.
  await page.evaluate((fr) => new Promise((resolve) => {
    const v = window.motionmatch.vr, start = performance.now();
    const timer = setInterval(() => {
      const t = (performance.now() - start) / 1000, f = Math.floor(t * 60);
      if (f >= fr.length) { clearInterval(timer); resolve(); return; }
      if (f >= 60 && !v.cleared) { v.cleared = true; v.headErrors.length = v.handErrors.length = 0; }
      const [hmd, left, right] = fr[f];
      v.sendPoses(100 + t, hmd, left, right);
      if (f >= 30 && !v.badSent) {
        v.badSent = true;
        window.motionmatch.send({ type: 'trackers', t: 1e9, hmd: { position: [0, 1], rotation: [1, 0, 0, 0] }, left: null, right: null });
      }
    }, 1000 / 72);
  }), frames);
  mark('streamed');
  report.live = await sample();
  report.live.sent = await page.evaluate(() => window.motionmatch.vr.sent);
  report.live.headErrors = await page.evaluate(() => window.motionmatch.vr.headErrors.slice(-120));
  report.live.handErrors = await page.evaluate(() => window.motionmatch.vr.handErrors.slice(-120));
  await page.waitForTimeout(500);
  report.after = await sample();
  mark('done');
});
