// Opens a notebook in a running JupyterLab (started with --LabApp.expose_app_in_browser=True) in headless
// Debian chromium, runs all its cells from the front end, waits for the motionmatch widgets to render
// (static/widget.js pushes a status per view to window.motionmatchWidgets), measures their frames over
// two seconds, holds W on the live view until it walks, and prints one JSON report; the pytest side makes the assertions.
// Usage: node tests/browser/jupyterlab_test.mjs CONFIG_JSON with keys url (the notebook's /lab/tree/...
// URL with its token), widgets (how many views to wait for), timeout (ms), screenshot (path).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const pw = process.env.PLAYWRIGHT_CORE;
const { chromium } = await import(pw ? pathToFileURL(pw).href : 'playwright-core');
const config = JSON.parse(process.argv[2]);
const profile = mkdtempSync(join(tmpdir(), 'mm-chromium-'));
const report = { console: [], pageErrors: [] };
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium', headless: true, viewport: { width: 1100, height: 900 },
  args: ['--use-angle=swiftshader', '--enable-unsafe-swiftshader', '--no-sandbox', '--disable-gpu',
    '--disable-background-networking', '--no-first-run', '--disable-quic', '--disable-component-update', '--disable-sync'],
});
const status = () => (window.motionmatchWidgets || []).map((s) => ({ frames: s.frames, root: s.root, mode: s.mode,
  errors: s.errors, loaded: !!(s.body && s.body.loaded) }));
try {
  const page = context.pages()[0] || await context.newPage();
  page.on('console', (m) => report.console.push(`${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => report.pageErrors.push(String(e)));
  const timeout = config.timeout || 600000;
  await page.goto(config.url);
  await page.waitForFunction(() => window.jupyterapp && document.querySelector('.jp-Notebook .jp-Cell'), null, { timeout });
  // The kernel must be up before "run all" (a cell run against a starting kernel waits, but say when it is not).
  await page.waitForFunction(() => {
    const w = window.jupyterapp.shell.currentWidget;
    return w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel
      && w.sessionContext.session.kernel.connectionStatus === 'connected';
  }, null, { timeout });
  report.started = Date.now();
  await page.evaluate(() => window.jupyterapp.commands.execute('notebook:run-all-cells'));
  await page.waitForFunction((n) => (window.motionmatchWidgets || []).length >= n
    && window.motionmatchWidgets.every((s) => s.frames > 0), config.widgets || 1, { timeout, polling: 500 });
  report.rendered_s = (Date.now() - report.started) / 1000;
  report.first = await page.evaluate(status);
  await page.waitForTimeout(2000);
  report.second = await page.evaluate(status);
  // The live view: focus its canvas (the second widget's), hold W: the character walks.
  const canvases = page.locator('.jp-OutputArea-output canvas');
  report.canvases = await canvases.count();
  if (report.canvases >= 2) {
    await canvases.nth(1).scrollIntoViewIfNeeded();
    await canvases.nth(1).click();
    report.beforeWalk = await page.evaluate(status);
    // Held until the live view has walked 0.6 m forward (at most 30 s), not for a fixed time: the kernel
    // steps the character on wall-clock ticks, and beside other work (pytest -n 2) 3 s walked 0.44 m once.
    const live = report.beforeWalk.findIndex((s) => s.mode === 'live');
    const z0 = live >= 0 ? report.beforeWalk[live].root[2] : 0;
    await page.keyboard.down('KeyW');
    const held = Date.now();
    await page.waitForFunction(({ i, z }) => i >= 0 && window.motionmatchWidgets[i].root[2] - z > 0.6,
      { i: live, z: z0 }, { timeout: 30000, polling: 200 }).catch(() => {});
    await page.keyboard.up('KeyW');
    report.walk_s = (Date.now() - held) / 1000;
    report.afterWalk = await page.evaluate(status);
  }
  report.cellErrors = await page.evaluate(() => Array.from(document.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"], .jp-RenderedText[data-mime-type="application/vnd.jupyter.error"]')).map((e) => e.textContent.slice(0, 500)));
  if (config.screenshot) await page.screenshot({ path: config.screenshot });
} catch (err) {
  report.failure = String(err);
  try {
    const page = context.pages()[0];
    report.partial = await page.evaluate(status);
    if (config.screenshot) await page.screenshot({ path: config.screenshot });
  } catch { /* the report says what failed */ }
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
console.log(JSON.stringify(report));
