// Ghost skeletons drawn over the character: the raw animation pose (the database frame before
// inertialization) and the pose before touch-ups (before foot locking, leg IK and warping), so the effect
// of each stage shows. The server sends them only while a ghost is switched on.

const $ = (id) => document.getElementById(id);

export function initGhosts(ctx) {
  const { THREE, scene } = ctx;
  const kinds = {
    raw: { box: $('g-raw'), color: 0x4fd6ff },
    before_touchups: { box: $('g-touch'), color: 0xff5fd2 },
  };
  let pairs = [];          // [joint, parent] bone list
  for (const k of Object.values(kinds)) {
    const geom = new THREE.BufferGeometry();
    k.line = new THREE.LineSegments(geom, new THREE.LineBasicMaterial({ color: k.color, depthTest: false, transparent: true, opacity: 0.9 }));
    k.line.renderOrder = 5;
    k.line.visible = false;
    k.line.frustumCulled = false;
    scene.add(k.line);
    k.box.addEventListener('change', sync);
  }

  function sync() {
    const on = Object.values(kinds).some((k) => k.box.checked);
    ctx.send({ type: 'debug', ghosts: on });
    for (const k of Object.values(kinds)) if (!k.box.checked) k.line.visible = false;
  }

  ctx.on('hello', (msg) => {
    pairs = [];
    msg.parents.forEach((p, j) => { if (p > 0 && !/^(joint_)?root$/i.test(msg.names[p])) pairs.push([j, p]); });
    for (const k of Object.values(kinds)) {
      k.line.geometry.setAttribute('position', new THREE.BufferAttribute(new Float32Array(pairs.length * 6), 3));
    }
    if (Object.values(kinds).some((k) => k.box.checked)) sync();
  });

  function update(frame) {
    const gh = frame && frame.debug.ghosts;
    const shown = {};
    for (const [name, k] of Object.entries(kinds)) {
      const pos = gh && gh[name];
      k.line.visible = !!(k.box.checked && pos);
      shown[name] = k.line.visible;
      if (!k.line.visible) continue;
      const arr = k.line.geometry.attributes.position.array;
      pairs.forEach(([j, p], i) => {
        arr.set([pos[3 * j], pos[3 * j + 1], pos[3 * j + 2], pos[3 * p], pos[3 * p + 1], pos[3 * p + 2]], 6 * i);
      });
      k.line.geometry.attributes.position.needsUpdate = true;
    }
    ctx.state.ghosts = shown;
  }

  return { update };
}
