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
