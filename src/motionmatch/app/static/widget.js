// The notebook widgets' view (motionmatch/notebook.py, anywidget): a three.js scene like the app's with the
// skinned body (skinned.js), capsule lines as a debug toggle and the root's path on the ground.
// mode 'motion' plays the synced arrays in a loop; mode 'live' asks the kernel for poses of a character
// driven by the keyboard. three.js arrives as source text (model 'three') and is linked from blob URLs.
// Coordinates as in the app: metres, Y up, the camera starts looking along +Z.

const IMPORT = /(\bfrom\s*|\bimport\s*\(?\s*)(['"])([^'"]+)\2/g;

// A linker of ES modules given as {path: source}: link(path) rewrites every specifier ('three',
// 'three/addons/...', relative) to the blob URL of the module it names and returns path's blob URL; each
// module gets one URL, so every importer shares one three.js.
function linker(sources) {
  const urls = new Map(), busy = new Set();
  const resolve = (from, spec) => {
    if (spec === 'three') return 'build/three.module.js';
    if (spec.startsWith('three/addons/')) return `examples/jsm/${spec.slice(13)}`;
    if (!spec.startsWith('.')) return null;
    const parts = from.split('/').slice(0, -1);
    for (const p of spec.split('/')) {
      if (p === '..') parts.pop(); else if (p !== '.') parts.push(p);
    }
    return parts.join('/');
  };
  const link = (path) => {
    if (urls.has(path)) return urls.get(path);
    busy.add(path);    // a module naming itself (in a comment) keeps its specifier
    const text = sources[path].replace(IMPORT, (m, pre, q, spec) => {
      const dep = resolve(path, spec);
      return dep && dep in sources && !busy.has(dep) ? `${pre}${q}${link(dep)}${q}` : m;
    });
    busy.delete(path);
    const url = URL.createObjectURL(new Blob([text], { type: 'text/javascript' }));
    urls.set(path, url);
    return url;
  };
  return link;
}

const floats = (dv) => (dv && dv.byteLength ? new Float32Array(dv.buffer.slice(dv.byteOffset, dv.byteOffset + dv.byteLength)) : null);

async function render({ model, el }) {
  const sources = model.get('three');
  const link = linker(sources);
  const THREE = await import(link('build/three.module.js'));
  const { SkinnedBody } = await import(link('skinned.js'));
  const names = model.get('names'), parents = model.get('parents'), J = names.length;
  const status = { frames: 0, root: [0, 0, 0], mode: model.get('mode'), errors: [], body: null };
  (window.motionmatchWidgets = window.motionmatchWidgets || []).push(status);

  el.innerHTML = '';
  el.style.position = 'relative';
  const canvas = document.createElement('canvas');
  canvas.tabIndex = 0;
  canvas.style.cssText = `width:100%;height:${model.get('height')}px;display:block;outline:none`;
  const bar = document.createElement('div');
  bar.style.cssText = 'display:flex;gap:8px;align-items:center;font:12px sans-serif;padding:4px 0';
  el.append(canvas, bar);

  const renderer = new THREE.WebGLRenderer({ canvas, antialias: true, preserveDrawingBuffer: true });
  renderer.outputColorSpace = THREE.SRGBColorSpace;
  const scene = new THREE.Scene();
  scene.background = new THREE.Color(0x2a313b);
  scene.add(new THREE.HemisphereLight(0xcfe0ff, 0x3a3128, 1.4));
  const sun = new THREE.DirectionalLight(0xfff1dc, 2.2);
  sun.position.set(3, 7, -2.5);
  scene.add(sun);
  const grid = new THREE.GridHelper(40, 40, 0x6f7780, 0x4b535c);
  scene.add(grid);
  const camera = new THREE.PerspectiveCamera(45, 1, 0.05, 200);

  // Capsule view: a line per bone (the debug toggle; shown alone without a body).
  const lineGeom = new THREE.BufferGeometry();
  const bonePairs = parents.map((p, j) => [p, j]).filter(([p]) => p >= 0);
  lineGeom.setAttribute('position', new THREE.BufferAttribute(new Float32Array(bonePairs.length * 6), 3));
  const capsules = new THREE.Group();
  capsules.add(new THREE.LineSegments(lineGeom, new THREE.LineBasicMaterial({ color: 0xe9935e })));
  scene.add(capsules);
  const toggle = document.createElement('input');
  toggle.type = 'checkbox';
  const label = document.createElement('label');
  label.append(toggle, ' capsules');
  const body = new SkinnedBody(scene, capsules, toggle);
  status.body = body.status;
  const glb = model.get('glb');
  if (model.get('character') && glb && glb.byteLength) {
    const url = URL.createObjectURL(new Blob([glb], { type: 'model/gltf-binary' }));
    await body.load({ ...model.get('character'), url }, parents);
  }

  // The root's path on the ground (motion: the whole clip; live: the last 4 s).
  const trail = new THREE.Line(new THREE.BufferGeometry(), new THREE.LineBasicMaterial({ color: 0x5aa6f0 }));
  scene.add(trail);
  const hips = Math.max(0, names.findIndex((n) => /hips|pelvis/i.test(n)));
  const setTrail = (pts) => trail.geometry.setFromPoints(pts.map((p) => new THREE.Vector3(p[0], 0.01, p[2])));

  function pose(pos, rot) {
    const a = lineGeom.attributes.position.array;
    bonePairs.forEach(([p, j], i) => { a.set(pos.subarray(3 * p, 3 * p + 3), 6 * i); a.set(pos.subarray(3 * j, 3 * j + 3), 6 * i + 3); });
    lineGeom.attributes.position.needsUpdate = true;
    lineGeom.computeBoundingSphere();
    body.pose(pos, rot);
    status.root = Array.from(pos.subarray(3 * hips, 3 * hips + 3));
    status.frames += 1;
  }

  const follow = new THREE.Vector3();
  function draw() {
    follow.lerp(new THREE.Vector3(status.root[0], 0.9, status.root[2]), 0.1);
    camera.position.set(follow.x, follow.y + 0.8, follow.z - 4.2);
    camera.lookAt(follow);
    const w = canvas.clientWidth || 640, h = canvas.clientHeight || 420;
    if (canvas.width !== w || canvas.height !== h) { renderer.setSize(w, h, false); camera.aspect = w / h; camera.updateProjectionMatrix(); }
    renderer.render(scene, camera);
  }

  let stopped = false, last = performance.now(), clock = 0;
  const cleanups = [];
  if (model.get('mode') === 'motion') {
    const P = floats(model.get('positions')), R = floats(model.get('rotations'));
    const F = model.get('frames'), fps = model.get('fps');
    const pts = [];
    for (let f = 0; f < F; f += 4) pts.push([P[3 * (f * J + hips)], 0, P[3 * (f * J + hips) + 2]]);
    setTrail(pts);
    const play = document.createElement('button');
    const scrub = Object.assign(document.createElement('input'), { type: 'range', min: 0, max: F - 1, value: 0 });
    const sync = () => { play.textContent = model.get('playing') ? '❚❚' : '▶'; };
    play.onclick = () => { model.set('playing', !model.get('playing')); model.save_changes(); };
    scrub.oninput = () => { clock = Number(scrub.value) / fps; model.set('playing', false); model.save_changes(); };
    model.on('change:playing', sync);
    sync();
    bar.append(play, scrub, label);
    follow.set(P[3 * hips], 0.9, P[3 * hips + 2]);
    const loop = (now) => {
      if (stopped) return;
      if (model.get('playing')) clock += (now - last) / 1000;
      last = now;
      const f = Math.floor(clock * fps) % F;
      scrub.value = String(f);
      pose(P.subarray(3 * J * f, 3 * J * (f + 1)), R ? R.subarray(4 * J * f, 4 * J * (f + 1)) : null);
      draw();
      requestAnimationFrame(loop);
    };
    requestAnimationFrame(loop);
  } else {
    // Keys go to the view from the press on it (or its focus) until a press elsewhere or Escape. They are
    // taken on the window, before the page's own handlers: JupyterLab takes focus back from an output
    // after a click, and in command mode its shortcuts include A (insert a cell) and D D (delete it).
    const keys = new Set();
    const MOVE_KEYS = new Set(['KeyW', 'KeyA', 'KeyS', 'KeyD', 'KeyQ', 'ArrowUp', 'ArrowDown', 'ArrowLeft', 'ArrowRight',
      'ShiftLeft', 'ShiftRight']);
    let active = false;
    const activate = () => { active = true; };
    const release = () => { active = false; keys.clear(); };
    canvas.setAttribute('data-lm-suppress-shortcuts', 'true');
    canvas.addEventListener('focus', activate);
    canvas.addEventListener('pointerdown', () => { activate(); canvas.focus(); });
    const onPointer = (e) => { if (!el.contains(e.target)) release(); };
    const onDown = (e) => {
      if (!active) return;
      if (e.code === 'Escape') { release(); return; }
      if (!MOVE_KEYS.has(e.code)) return;
      keys.add(e.code);
      e.preventDefault();
      e.stopPropagation();
    };
    const onUp = (e) => { if (keys.delete(e.code)) { e.preventDefault(); e.stopPropagation(); } };
    window.addEventListener('pointerdown', onPointer, true);
    window.addEventListener('keydown', onDown, true);
    window.addEventListener('keyup', onUp, true);
    window.addEventListener('blur', release);
    cleanups.push(() => {
      window.removeEventListener('pointerdown', onPointer, true);
      window.removeEventListener('keydown', onDown, true);
      window.removeEventListener('keyup', onUp, true);
      window.removeEventListener('blur', release);
    });
    const hint = document.createElement('span');
    hint.textContent = 'click the view, then WASD / arrows move, Shift runs, Q strafes';
    bar.append(label, hint);
    const path = [];
    let pending = false, owed = 0;
    model.on('msg:custom', (msg, buffers) => {
      if (msg.type === 'error') { status.errors.push(msg.message); pending = false; return; }
      if (msg.type !== 'frame') return;
      pending = false;
      const pos = floats(buffers[0]), rot = floats(buffers[1]);
      pose(pos, rot);
      path.push(status.root);
      if (path.length > 240) path.shift();
      setTrail(path);
    });
    const axis = (a, b) => (keys.has(a) ? 1 : 0) - (keys.has(b) ? 1 : 0);
    const loop = (now) => {
      if (stopped) return;
      owed += (now - last) * 60 / 1000;
      last = now;
      if (!pending && owed >= 1) {
        // The camera looks along +Z, so screen right is world -X.
        const mx = axis('KeyD', 'KeyA') + axis('ArrowRight', 'ArrowLeft'), mz = axis('KeyW', 'KeyS') + axis('ArrowUp', 'ArrowDown');
        const len = Math.max(1, Math.hypot(mx, mz));
        const steps = Math.min(4, Math.floor(owed));
        owed = Math.min(owed - steps, 4);
        pending = true;
        model.send({ type: 'step', move: [-mx / len, mz / len], run: keys.has('ShiftLeft') || keys.has('ShiftRight'),
          strafe: keys.has('KeyQ'), steps });
      }
      draw();
      requestAnimationFrame(loop);
    };
    requestAnimationFrame(loop);
  }
  return () => { stopped = true; cleanups.forEach((f) => f()); renderer.dispose(); };
}

export default { render };
