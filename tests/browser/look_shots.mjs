// Screenshots of the default character for docs/look.md (not a test): press W, strafe right (Q + D),
// walk backward (Q + S), walk up the `slope` terrain (W) and standing, at 1280x720.
// usage: node tests/browser/look_shots.mjs URL OUT_DIR [PREFIX]
import { launch } from './chromium.mjs';

const [url, out, prefix = 'after', only = ''] = process.argv.slice(2);   // only: 'slope' for that shot alone
const wait = (ms) => new Promise((r) => setTimeout(r, ms));
const { page, close } = await launch({ width: 1280, height: 720 });
const hold = async (keys, ms) => {
  for (const k of keys) await page.keyboard.down(k);
  await wait(ms);
};
const release = async (keys) => { for (const k of keys) await page.keyboard.up(k); };
try {
  await page.goto(url);
  await page.waitForFunction(() => document.querySelector('canvas') !== null, null, { timeout: 120000 });
  await wait(8000);                     // the stream starts and the character settles
  await page.mouse.click(640, 400);     // keyboard focus on the view
  await wait(4000);
  if (!only) await page.screenshot({ path: `${out}/${prefix}-idle.png` });
  for (const [name, keys] of only ? [] : [['walk', ['KeyW']], ['strafe', ['KeyQ', 'KeyD']], ['backward', ['KeyQ', 'KeyS']]]) {
    await hold(keys, 3000);
    await page.screenshot({ path: `${out}/${prefix}-${name}.png` });
    await release(keys);
    await wait(2500);
  }
  await page.selectOption('#t-terrain', 'slope');
  // The terrain reaches the server and the page fetches and draws it (seconds on a loaded machine).
  await page.waitForFunction(() => document.querySelector('#t-terrain').value === 'slope', null, { timeout: 60000 });
  await wait(15000);
  await page.mouse.click(640, 300);
  await hold(['KeyW'], 6000);
  await page.screenshot({ path: `${out}/${prefix}-slope.png` });
  await release(['KeyW']);
} finally {
  await close();
}
