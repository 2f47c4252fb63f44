// Crowd mode (motionmatch serve --crowd N): draws every agent the server streams on /ws/crowd.
//
// All agents share two InstancedMeshes (bones as cylinders, heads as spheres), so the crowd costs two draw
// calls whatever its size. Frame format (little endian), see src/motionmatch/app/crowd_mode.py:
//   uint32 seq | float32 time | uint16 n | uint16 J | float32 roots[n*3] | int16 offsets_mm[n*J*3]
import * as THREE from 'three';

const HEADER_BYTES = 12;
const mm = window.motionmatch;            // app.js's state: scene, renderer, ...
const crowd = { enabled: false, n: 0, frames: 0, bytes: 0, seq: 0, time: 0, roots: null, updateMs: 0, drawCalls: 0 };
mm.crowd = crowd;

let info = null, ws = null, bonesMesh = null, headsMesh = null, bonePairs = [], headJoint = -1;
const m4 = new THREE.Matrix4(), q = new THREE.Quaternion(), s3 = new THREE.Vector3(), a = new THREE.Vector3();
const b = new THREE.Vector3(), d = new THREE.Vector3(), UP = new THREE.Vector3(0, 1, 0);

function drawable(names) {
  // As app.js: neither the simulation bone nor a ground-level root is part of the body.
  return names.map((n, j) => !(j === 0 && /simulation/i.test(n)) && !/^(joint_)?root$/i.test(n));
}

function build() {
  const draw = drawable(info.names);
  bonePairs = [];
  info.parents.forEach((p, j) => { if (p >= 0 && draw[p] && draw[j]) bonePairs.push([p, j]); });
  headJoint = info.names.findIndex((n) => /head/i.test(n));
  const n = info.n;
  const bodyMat = new THREE.MeshStandardMaterial({ roughness: 0.6 });
  bonesMesh = new THREE.InstancedMesh(new THREE.CylinderGeometry(1, 1, 1, 8, 1, false), bodyMat, n * bonePairs.length);
  headsMesh = new THREE.InstancedMesh(new THREE.SphereGeometry(1, 12, 8), bodyMat, n);
  const color = new THREE.Color();
  for (let i = 0; i < n; i++) {
    color.setHSL((i * 0.618) % 1, 0.45, 0.55);
    for (let k = 0; k < bonePairs.length; k++) bonesMesh.setColorAt(i * bonePairs.length + k, color);
    headsMesh.setColorAt(i, color);
  }
  crowd.meshes = [bonesMesh, headsMesh];
  for (const m of crowd.meshes) {
    m.frustumCulled = false;          // instances spread over the whole area: one bounding box is meaningless
    m.instanceMatrix.setUsage(THREE.DynamicDrawUsage);
    m.visible = false;
    mm.scene.add(m);
  }
}

function onFrame(buf) {
  const t0 = performance.now();
  const view = new DataView(buf);
  const n = view.getUint16(8, true), J = view.getUint16(10, true);
  if (n !== info.n || J !== info.names.length) return;
  crowd.seq = view.getUint32(0, true);
  crowd.time = view.getFloat32(4, true);
  const roots = new Float32Array(buf, HEADER_BYTES, n * 3);
  const off = new Int16Array(buf, HEADER_BYTES + n * 12, n * J * 3);
  const B = bonePairs.length;
  for (let i = 0; i < n; i++) {
    const rx = roots[3 * i], ry = roots[3 * i + 1], rz = roots[3 * i + 2], o = i * J * 3;
    for (let k = 0; k < B; k++) {
      const [p, j] = bonePairs[k];
      a.set(rx + off[o + 3 * p] * 1e-3, ry + off[o + 3 * p + 1] * 1e-3, rz + off[o + 3 * p + 2] * 1e-3);
      b.set(rx + off[o + 3 * j] * 1e-3, ry + off[o + 3 * j + 1] * 1e-3, rz + off[o + 3 * j + 2] * 1e-3);
      d.subVectors(b, a);
      const len = d.length();
      q.setFromUnitVectors(UP, len > 1e-6 ? d.multiplyScalar(1 / len) : UP);
      m4.compose(a.add(b).multiplyScalar(0.5), q, s3.set(0.045, len, 0.045));
      bonesMesh.setMatrixAt(i * B + k, m4);
    }
    if (headJoint >= 0) {
      const h = o + 3 * headJoint;
      m4.makeScale(0.1, 0.12, 0.1).setPosition(rx + off[h] * 1e-3, ry + off[h + 1] * 1e-3 + 0.08, rz + off[h + 2] * 1e-3);
      headsMesh.setMatrixAt(i, m4);
    }
  }
  bonesMesh.instanceMatrix.needsUpdate = true;
  headsMesh.instanceMatrix.needsUpdate = true;
  crowd.roots = roots;
  crowd.frames += 1;
  crowd.bytes += buf.byteLength;
  // Script time spent on the crowd per received frame (ms), smoothed.
  const ms = performance.now() - t0;
  crowd.updateMs = crowd.frames === 1 ? ms : 0.95 * crowd.updateMs + 0.05 * ms;
}

function setEnabled(on) {
  crowd.enabled = on;
  bonesMesh.visible = headsMesh.visible = on;
  if (on && !ws) {
    ws = new WebSocket(`${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/ws/crowd`);
    ws.binaryType = 'arraybuffer';
    ws.onmessage = (ev) => { if (typeof ev.data !== 'string') onFrame(ev.data); };
    ws.onclose = () => { ws = null; if (crowd.enabled) setTimeout(() => crowd.enabled && setEnabled(true), 1500); };
  } else if (!on && ws) {
    const old = ws;
    ws = null;
    old.close();
  }
}
crowd.setEnabled = (on) => setEnabled(Boolean(on));

async function init() {
  const r = await fetch('/api/crowd');
  if (!r.ok) return;
  info = await r.json();
  if (!info.n) return;                   // the server runs without --crowd
  crowd.n = info.n;
  build();
  const label = document.createElement('label');
  label.className = 'pill';
  label.style.pointerEvents = 'auto';     // .pill lets clicks through to the canvas; this one is a control
  label.title = `${info.n} agents stepped by the server; drawn in two draw calls`;
  label.innerHTML = `<input type="checkbox" id="crowd-toggle" checked> crowd (${info.n})`;
  document.getElementById('title').appendChild(label);
  label.querySelector('input').addEventListener('change', (e) => setEnabled(e.target.checked));
  setEnabled(true);
}
init();
