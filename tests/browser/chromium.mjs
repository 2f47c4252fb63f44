// Headless Debian chromium through playwright-core, as the browser tests drive it.
// PLAYWRIGHT_CORE: path of playwright-core's index.mjs when node_modules is not above this file;
// CHROMIUM: the browser (default /usr/bin/chromium).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const pw = process.env.PLAYWRIGHT_CORE;
const { chromium } = await import(pw ? pathToFileURL(pw).href : 'playwright-core');

// A browser context on a fresh profile folder (playwright passes it as --user-data-dir), WebGL through
// swiftshader; close() also removes the profile.
export async function launch(viewport) {
  const profile = mkdtempSync(join(tmpdir(), 'mm-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    viewport,
    args: ['--use-angle=swiftshader', '--enable-unsafe-swiftshader', '--no-sandbox', '--disable-gpu',
      '--disable-background-networking', '--no-first-run', '--disable-quic', '--disable-component-update',
      '--disable-sync'],
  });
  const page = context.pages()[0] || await context.newPage();
  return { context, page, close: async () => { await context.close(); rmSync(profile, { recursive: true, force: true }); } };
}

// The frame of a test script: opens `url`, collects page errors in report.pageErrors, runs
// body(page, report, mark) (mark(k) stores the seconds since the start in report.at[k]), records a
// failure in report.failure, closes the browser and prints the report as one JSON line.
export async function runReport(url, viewport, body) {
  const report = { pageErrors: [], at: {} };
  const t0 = Date.now();
  const mark = (k) => { report.at[k] = (Date.now() - t0) / 1000; };
  const { page, close } = await launch(viewport);
  try {
    page.on('pageerror', (e) => report.pageErrors.push(String(e)));
    await page.goto(url);
    mark('loaded');
    await body(page, report, mark);
  } catch (e) {
    report.failure = String(e && e.stack || e);
  } finally {
    await close();
  }
  console.log(JSON.stringify(report));
}
