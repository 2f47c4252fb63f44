// A screenshot of crowd mode with the panels hidden (for the docs and for checking the skinned crowd by
// eye). Usage: node tests/browser/crowd_shot.mjs URL OUT.png [WIDTH HEIGHT]
import { runReport } from './chromium.mjs';

const [url, out, w = '1280', h = '720'] = process.argv.slice(2);
await runReport(url, { width: Number(w), height: Number(h) }, async (page, report) => {
  await page.waitForFunction(() => window.motionmatch && window.motionmatch.crowd
    && window.motionmatch.crowd.frames > 5, null, { timeout: 120000 });
  await page.addStyleTag({ content: '#hud, #tuning, #bar, .panel, footer { display: none !important; }' });
  await page.waitForTimeout(1500);
  await page.screenshot({ path: out });
  report.crowd = await page.evaluate(() => {
    const c = window.motionmatch.crowd;
    return { n: c.n, frames: c.frames, bytes: c.bytes, updateMs: c.updateMs, skinned: c.skinned, error: c.error };
  });
});
