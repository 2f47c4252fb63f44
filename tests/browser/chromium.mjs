// Headless Debian chromium for the browser tests, driven by playwright-core.
// PLAYWRIGHT_CORE: path of playwright-core's index.mjs when node_modules is not above this file;
// CHROMIUM: the browser (default /usr/bin/chromium). Software WebGL (swiftshader), a fresh profile per run.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const pw = process.env.PLAYWRIGHT_CORE;
const { chromium } = await import(pw ? pathToFileURL(pw).href : 'playwright-core');

// Returns {context, close}; close() also removes the profile folder.
export async function launchChromium(viewport) {
  const profile = mkdtempSync(join(tmpdir(), 'mm-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    viewport,
    args: ['--use-angle=swiftshader', '--enable-unsafe-swiftshader', '--no-sandbox', '--disable-gpu',
      '--disable-background-networking', '--no-first-run', '--disable-quic', '--disable-component-update',
      '--disable-sync'],
  });
  const close = async () => { await context.close(); rmSync(profile, { recursive: true, force: true }); };
  return { context, close };
}
