// Terrain in the live app: the procedural heightfields the library supports (slope, steps, noise) or a
// grey-scale PNG heightmap; the server sets it on this tab's character and sends the heights to draw.
//
// The drawn surface is the runtime's (world/terrain.py): bilinear between the samples, the edge values
// extended beyond the grid. heightAt(x, z) evaluates that surface for the debug overlays; the mesh keeps
// only the sample rows and columns the bilinear surface bends at (so steps are flat treads and one-cell
// risers, a slope a single quad) and a skirt out to FAR_M, so the world does not end with the grid.

const $ = (id) => document.getElementById(id);
const FAR_M = 1e5;             // the skirt's reach beyond the grid: further than anyone walks
const FLAT_TOL_M = 5e-4;       // a row or column within this of the line between its kept neighbours is dropped
const MAX_RUN = 64;            // bounds the cost of that test on large flat stretches

export function initTerrain(ctx) {
  const { THREE, scene } = ctx;
  let mesh = null;
  let grid = null;             // {heights, rows, cols, x0, z0, cell} of the surface in use (null: flat at 0)

  async function fetchHeights() {
    if (!ctx.state.session) return;
    const res = await fetch(`/api/session/${ctx.state.session}/terrain`);
    if (!res.ok) return;
    build(await res.json());
  }

  // Ground height (m) at world x, z: the runtime's bilinear interpolation with clamping (height_at).
  function heightAt(x, z) {
    if (!grid) return 0;
    const { heights: h, rows, cols, x0, z0, cell } = grid;
    const u = Math.min(Math.max((x - x0) / cell, 0), cols - 1);
    const v = Math.min(Math.max((z - z0) / cell, 0), rows - 1);
    const j = Math.min(Math.floor(u), cols - 2), i = Math.min(Math.floor(v), rows - 2);
    const fu = u - j, fv = v - i;
    const a = i * cols + j;
    const top = h[a] * (1 - fu) + h[a + 1] * fu;
    const bot = h[a + cols] * (1 - fu) + h[a + cols + 1] * fu;
    return top * (1 - fv) + bot * fv;
  }

  // Indices of the samples along one axis the surface bends at: a line k is dropped when every sample on it
  // lies on the straight line between the kept lines around it (then the bilinear surface is unchanged).
  function keptLines(n, m, at) {
    const kept = [0];
    let a = 0;
    while (a < n - 1) {
      let b = a + 1;
      while (b + 1 < n && b + 1 - a <= MAX_RUN && straight(a, b + 1, m, at)) b += 1;
      kept.push(b);
      a = b;
    }
    return kept;
  }
  function straight(a, b, m, at) {
    for (let k = a + 1; k < b; k++) {
      const t = (k - a) / (b - a);
      for (let l = 0; l < m; l++) if (Math.abs(at(k, l) - (at(a, l) * (1 - t) + at(b, l) * t)) > FLAT_TOL_M) return false;
    }
    return true;
  }

  function build(t) {
    if (mesh) { scene.remove(mesh); mesh.geometry.dispose(); mesh = null; }
    ctx.ground.visible = !t.heights;
    grid = null;
    ctx.state.terrain = { name: t.name, samples: t.heights ? t.heights.length : 0 };
    if (!t.heights) return;
    const [rows, cols] = t.shape;
    grid = { heights: Float64Array.from(t.heights), rows, cols, x0: t.origin[0], z0: t.origin[1], cell: t.cell };
    const h = grid.heights;
    const keptRows = keptLines(rows, cols, (r, c) => h[r * cols + c]);
    const keptCols = keptLines(cols, rows, (c, r) => h[r * cols + c]);
    // The skirt: one more line at each side FAR_M away with the edge's heights (the runtime's clamping).
    const rIdx = [0, ...keptRows, rows - 1], cIdx = [0, ...keptCols, cols - 1];
    const zs = keptRows.map((r) => grid.z0 + r * t.cell), xs = keptCols.map((c) => grid.x0 + c * t.cell);
    zs.unshift(zs[0] - FAR_M); zs.push(zs[zs.length - 1] + FAR_M);
    xs.unshift(xs[0] - FAR_M); xs.push(xs[xs.length - 1] + FAR_M);
    const R = zs.length, C = xs.length;
    const pos = new Float32Array(R * C * 3), uv = new Float32Array(R * C * 2);
    for (let r = 0; r < R; r++) {
      for (let c = 0; c < C; c++) {
        const i = r * C + c;
        pos.set([xs[c], h[rIdx[r] * cols + cIdx[c]], zs[r]], 3 * i);
        uv.set([xs[c] / 2, zs[r] / 2], 2 * i);
      }
    }
    const index = [];
    for (let r = 0; r < R - 1; r++) {
      for (let c = 0; c < C - 1; c++) {
        const a = r * C + c, b = a + 1, d = a + C, e = d + 1;
        index.push(a, d, b, b, d, e);
      }
    }
    const geom = new THREE.BufferGeometry();
    geom.setAttribute('position', new THREE.BufferAttribute(pos, 3));
    geom.setAttribute('uv', new THREE.BufferAttribute(uv, 2));
    geom.setIndex(index);
    geom.computeVertexNormals();
    const tex = ctx.ground.material.map.clone();
    tex.repeat.set(1, 1);
    tex.needsUpdate = true;
    // Flat shading: a tread (one long quad) stays evenly lit up to its riser instead of shading across the edge.
    mesh = new THREE.Mesh(geom, new THREE.MeshStandardMaterial({
      map: tex, roughness: 0.95, metalness: 0, side: THREE.DoubleSide, flatShading: true }));
    mesh.receiveShadow = true;
    scene.add(mesh);
    ctx.state.terrain.vertices = R * C;
  }

  // The height of the drawn surface at x, z (a ray straight down; null off the mesh): the tests compare it
  // with the runtime's heights.
  const ray = new THREE.Raycaster();
  function drawnHeight(x, z) {
    const m = mesh || ctx.ground;
    ray.set(new THREE.Vector3(x, 1e4, z), new THREE.Vector3(0, -1, 0));
    const hit = ray.intersectObject(m, false)[0];
    return hit ? hit.point.y : null;
  }

  // The world x, z box the drawn ground covers (tests: it must reach far beyond the character).
  function extent() {
    const m = mesh || ctx.ground;
    m.updateMatrixWorld();
    const box = new THREE.Box3().setFromObject(m);
    return [box.min.x, box.max.x, box.min.z, box.max.z];
  }

  $('t-terrain').addEventListener('change', (e) => {
    const v = e.target.value;
    if (v === 'png') { $('f-terrain').click(); return; }
    ctx.send({ type: 'terrain', kind: v });
  });
  $('f-terrain').addEventListener('change', async (e) => {
    const file = e.target.files[0];
    e.target.value = '';
    if (!file || !ctx.state.session) return;
    const res = await fetch(`/api/session/${ctx.state.session}/terrain?name=${encodeURIComponent(file.name)}&scale=1&cell=0.1`,
      { method: 'POST', headers: { 'Content-Type': 'image/png' }, body: file });
    const body = await res.json().catch(() => ({ message: res.statusText }));
    if (!res.ok) { ctx.toast(body.message || res.statusText, 'error'); return; }
    ctx.emit(body);
  });
  ctx.on('terrain', (msg) => {
    const sel = $('t-terrain');
    sel.value = ['flat', 'slope', 'steps', 'noise'].includes(msg.name) ? msg.name : 'png';
    fetchHeights();
  });
  ctx.on('hello', () => { $('t-terrain').value = 'flat'; build({ name: 'flat', heights: null }); drawObstacles([]); });

  // A playing scenario's obstacles (world/obstacles.py: circles {center, radius} and boxes {min, max}, metres
  // on the x, z ground) stand on the ground as grey pillars and blocks while it plays; the character
  // steers around them on the server.
  const OBSTACLE_HEIGHT_M = 1.0;
  let obstacles = null;
  function drawObstacles(list) {
    if (obstacles) {
      scene.remove(obstacles);
      obstacles.traverse((o) => { if (o.geometry) o.geometry.dispose(); });
      obstacles = null;
    }
    ctx.state.obstacles = [];
    if (!list.length) return;
    obstacles = new THREE.Group();
    const mat = new THREE.MeshStandardMaterial({ color: 0x8a8f98, roughness: 0.8, metalness: 0,
      transparent: true, opacity: 0.85 });
    for (const o of list) {
      let mesh, x, z;
      if (o.radius !== undefined) {
        [x, z] = o.center;
        mesh = new THREE.Mesh(new THREE.CylinderGeometry(o.radius, o.radius, OBSTACLE_HEIGHT_M, 32), mat);
      } else {
        x = 0.5 * (o.min[0] + o.max[0]); z = 0.5 * (o.min[1] + o.max[1]);
        mesh = new THREE.Mesh(new THREE.BoxGeometry(o.max[0] - o.min[0], OBSTACLE_HEIGHT_M, o.max[1] - o.min[1]), mat);
      }
      mesh.position.set(x, heightAt(x, z) + 0.5 * OBSTACLE_HEIGHT_M, z);
      mesh.castShadow = true;
      mesh.receiveShadow = true;
      obstacles.add(mesh);
      ctx.state.obstacles.push({ ...o, drawnAt: [x, mesh.position.y, z] });
    }
    scene.add(obstacles);
  }
  ctx.on('scenario', (msg) => drawObstacles(msg.state === 'playing' ? msg.obstacles || [] : []));
  return { heightAt, drawnHeight, extent };
}
