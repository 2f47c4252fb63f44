// Terrain in the live app: the procedural heightfields the library supports (slope, steps, noise) or a
// grey-scale PNG heightmap; the server sets it on this tab's character and sends the heights to draw.

const $ = (id) => document.getElementById(id);

export function initTerrain(ctx) {
  const { THREE, scene } = ctx;
  let mesh = null;

  async function fetchHeights() {
    if (!ctx.state.session) return;
    const res = await fetch(`/api/session/${ctx.state.session}/terrain`);
    if (!res.ok) return;
    build(await res.json());
  }

  function build(t) {
    if (mesh) { scene.remove(mesh); mesh.geometry.dispose(); mesh = null; }
    ctx.ground.visible = !t.heights;
    ctx.state.terrain = { name: t.name, samples: t.heights ? t.heights.length : 0 };
    if (!t.heights) return;
    const [rows, cols] = t.shape;
    // Rows run along +z, columns along +x; the plane is built in x/z directly.
    const geom = new THREE.BufferGeometry();
    const pos = new Float32Array(rows * cols * 3), uv = new Float32Array(rows * cols * 2);
    for (let r = 0; r < rows; r++) {
      for (let c = 0; c < cols; c++) {
        const i = r * cols + c;
        const x = t.origin[0] + c * t.cell, z = t.origin[1] + r * t.cell;
        pos.set([x, t.heights[i], z], 3 * i);
        uv.set([x / 2, z / 2], 2 * i);
      }
    }
    const index = [];
    for (let r = 0; r < rows - 1; r++) {
      for (let c = 0; c < cols - 1; c++) {
        const a = r * cols + c, b = a + 1, d = a + cols, e = d + 1;
        index.push(a, d, b, b, d, e);
      }
    }
    geom.setAttribute('position', new THREE.BufferAttribute(pos, 3));
    geom.setAttribute('uv', new THREE.BufferAttribute(uv, 2));
    geom.setIndex(index);
    geom.computeVertexNormals();
    const tex = ctx.ground.material.map.clone();
    tex.repeat.set(1, 1);
    tex.needsUpdate = true;
    mesh = new THREE.Mesh(geom, new THREE.MeshStandardMaterial({ map: tex, roughness: 0.95, metalness: 0, side: THREE.DoubleSide }));
    mesh.receiveShadow = true;
    scene.add(mesh);
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
  ctx.on('hello', () => { $('t-terrain').value = 'flat'; build({ name: 'flat', heights: null }); });
}
