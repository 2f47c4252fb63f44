// Opens one page in headless Debian chromium with every request answered from local folders (no server),
// waits until the page sets window.testResult, and prints one JSON report {result, pageErrors, console}.
// Usage: node tests/browser/static_page.mjs CONFIG_JSON
//   CONFIG_JSON: {"routes": {"/prefix/": "/local/folder", ...}, "page": "/prefix/page.html", "timeout": ms,
//                 "screenshot": "/path.png" (optional)}
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
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium', headless: true, viewport: { width: 640, height: 480 },
  args: ['--use-angle=swiftshader', '--enable-unsafe-swiftshader', '--no-sandbox', '--disable-gpu',
    '--disable-background-networking', '--no-first-run', '--disable-quic', '--disable-component-update', '--disable-sync'],
});
try {
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
  const page = context.pages()[0] || await context.newPage();
  page.on('console', (m) => report.console.push(`${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => report.pageErrors.push(String(e)));
  await page.goto(ORIGIN + config.page);
  await page.waitForFunction(() => window.testResult !== undefined, null, { timeout: config.timeout || 30000 });
  report.result = await page.evaluate(() => window.testResult);
  if (config.screenshot) await page.screenshot({ path: config.screenshot });
} catch (err) {
  report.failure = String(err);
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
console.log(JSON.stringify(report));
