// Opens one page in headless Debian chromium, optionally holds a key, and prints one JSON report
// {result, pageErrors, console}; the pytest side makes the assertions.
// Usage: node tests/browser/page_probe.mjs CONFIG_JSON, with CONFIG_JSON keys:
//   url: a page on a running server, or page + routes: {"/prefix/": "/local/folder"} to answer every request
//        from local folders (no server; the page's origin is http://page.test);
//   waitFor: JS expression to wait for (default: window.testResult !== undefined);
//   hold: {key, ms} (optional); result: JS expression reported (default: window.testResult);
//   timeout: ms; screenshot: path (optional).
import { readFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, extname, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const pw = process.env.PLAYWRIGHT_CORE;
const { chromium } = await import(pw ? pathToFileURL(pw).href : 'playwright-core');
const config = JSON.parse(process.argv[2]);
const ORIGIN = 'http://page.test';
const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.mjs': 'text/javascript', '.json': 'application/json',
  '.glb': 'model/gltf-binary', '.css': 'text/css', '.png': 'image/png' };
const profile = mkdtempSync(join(tmpdir(), 'mm-chromium-'));
const report = { console: [], pageErrors: [] };
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium', headless: true, viewport: { width: 800, height: 600 },
  args: ['--use-angle=swiftshader', '--enable-unsafe-swiftshader', '--no-sandbox', '--disable-gpu',
    '--disable-background-networking', '--no-first-run', '--disable-quic', '--disable-component-update', '--disable-sync'],
});
try {
  if (config.routes) {
    await context.route('**/*', async (route) => {
      const url = new URL(route.request().url());
      if (url.origin !== ORIGIN) return route.abort();
      for (const [prefix, dir] of Object.entries(config.routes)) {
        if (!url.pathname.startsWith(prefix)) continue;
        const root = resolve(dir);
        const file = resolve(root, decodeURIComponent(url.pathname.slice(prefix.length)));
        if (!file.startsWith(root)) return route.fulfill({ status: 403, body: 'outside' });
        try {
          return route.fulfill({ status: 200, body: readFileSync(file),
            headers: { 'Content-Type': TYPES[extname(file)] || 'application/octet-stream' } });
        } catch { return route.fulfill({ status: 404, body: 'not found' }); }
      }
      return route.fulfill({ status: 404, body: 'no route' });
    });
  }
  const page = context.pages()[0] || await context.newPage();
  page.on('console', (m) => report.console.push(`${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => report.pageErrors.push(String(e)));
  await page.goto(config.url || ORIGIN + config.page);
  const timeout = config.timeout || 30000;
  await page.waitForFunction(config.waitFor || 'window.testResult !== undefined', null, { timeout });
  const result = config.result || 'window.testResult';
  if (config.hold) {
    report.before = await page.evaluate(result);
    await page.keyboard.down(config.hold.key);
    await page.waitForTimeout(config.hold.ms);
    await page.keyboard.up(config.hold.key);
  }
  report.result = await page.evaluate(result);
  if (config.screenshot) await page.screenshot({ path: config.screenshot });
} catch (err) {
  report.failure = String(err);
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
console.log(JSON.stringify(report));
