// Crowd mode (motionmatch serve --crowd N): every agent the server streams on /ws/crowd, drawn as the
// app's skinned body with instanced skinning: one InstancedMesh per body mesh shares the body's geometry,
// and its vertex shader skins each instance with that agent's bone matrices, read from a float texture
// (a row per agent, four texels per bone). The whole crowd costs one draw call per body mesh.
//
// Frame format (little endian), see src/motionmatch/app/crowd/stream.py:
//   uint32 seq | float32 time | uint16 n | uint16 J | float32 roots[n*3] | uint32 rotations[n*J] | int16 hips_mm[n*3]
// rotations are smallest-three codes of the joints' local rotations. After drawing a frame the page
// sends "ready": frames come at the page's own rate, never faster than it draws them.
// Poses follow skinned.js (the user's body): bones with a source take that joint's world rotation times
// their offset, bones with a fixed local rotation keep it, the hips go to root + scale * (hips - root).
import * as THREE from 'three';
import { GLTFLoader } from 'three/addons/loaders/GLTFLoader.js';

const HEADER_BYTES = 12;
const SCALE = 511.5 * Math.SQRT2;
const mm = window.motionmatch;            // app.js's state: scene, renderer, ...
const crowd = { enabled: false, n: 0, frames: 0, bytes: 0, seq: 0, time: 0, roots: null, updateMs: 0,
  skinned: false, meshes: [], error: null };
mm.crowd = crowd;

let info = null, ws = null, rig = null, pending = null, drawing = false;
const qa = new THREE.Quaternion(), qb = new THREE.Quaternion(), qInv = new THREE.Quaternion();
const va = new THREE.Vector3(), m4 = new THREE.Matrix4(), m4b = new THREE.Matrix4();

// Smallest three -> (x, y, z, w) into out[o..o+3] (three.js order).
function decodeQuat(code, out, o) {
  const big = code >>> 30;
  const a = (((code >>> 20) & 1023) - 511.5) / SCALE;
  const b = (((code >>> 10) & 1023) - 511.5) / SCALE;
  const c = ((code & 1023) - 511.5) / SCALE;
  const d = Math.sqrt(Math.max(0, 1 - a * a - b * b - c * c));
  // wxyz with the largest component `big` dropped, then to xyzw.
  const wxyz = big === 0 ? [d, a, b, c] : big === 1 ? [a, d, b, c] : big === 2 ? [a, b, d, c] : [a, b, c, d];
  out[o] = wxyz[1]; out[o + 1] = wxyz[2]; out[o + 2] = wxyz[3]; out[o + 3] = wxyz[0];
}

// The body's node tree and skinned meshes, ready for per-agent posing.
function buildRig(gltf, table) {
  const root = gltf.scene;
  root.updateMatrixWorld(true);
  const specs = new Map(Object.entries(table.bones).map(([n, s]) => [THREE.PropertyBinding.sanitizeNodeName(n), s]));
  const hipsName = THREE.PropertyBinding.sanitizeNodeName(table.hips);
  const nodes = [], index = new Map(), skinned = [];
  root.traverse((o) => {           // pre-order: parents before children
    index.set(o, nodes.length);
    const spec = specs.get(o.name) || null;
    nodes.push({ parent: o === root ? -1 : index.get(o.parent), pos: o.position.clone(), quat: o.quaternion.clone(),
      scale: o.scale.clone(), source: spec && spec.offset ? spec.source : -1,
      offset: spec && spec.offset ? new THREE.Quaternion(spec.offset[1], spec.offset[2], spec.offset[3], spec.offset[0]) : null,
      local: spec && spec.local ? new THREE.Quaternion(spec.local[1], spec.local[2], spec.local[3], spec.local[0]) : null,
      hips: o.name === hipsName });
    if (o.isSkinnedMesh) skinned.push(o);
  });
  // Root's parent transform (the scene graph above the body is the identity).
  const world = nodes.map(() => new THREE.Matrix4());
  const worldQ = nodes.map(() => new THREE.Quaternion());
  const meshes = skinned.map((mesh) => ({
    mesh, bones: mesh.skeleton.bones.map((b) => index.get(b)),
    // boneInverse * bindMatrix: the mesh stays where it was bound, so its world and bindMatrixInverse cancel.
    inv: mesh.skeleton.boneInverses.map((bi) => bi.clone().multiply(mesh.bindMatrix)),
  }));
  return { nodes, world, worldQ, meshes, scale: table.scale, hipsSource: table.hips_source };
}

// A material that skins each instance with its row of the bone texture.
function crowdMaterial(base, texture) {
  const mat = base.clone();
  mat.onBeforeCompile = (shader) => {
    shader.uniforms.crowdBones = { value: texture };
    shader.vertexShader = shader.vertexShader
      .replace('#include <common>', `#include <common>
uniform highp sampler2D crowdBones;
attribute vec4 skinIndex;
attribute vec4 skinWeight;
mat4 crowdBone(float i) {
  int x = int(i) * 4;
  return mat4(texelFetch(crowdBones, ivec2(x, gl_InstanceID), 0), texelFetch(crowdBones, ivec2(x + 1, gl_InstanceID), 0),
              texelFetch(crowdBones, ivec2(x + 2, gl_InstanceID), 0), texelFetch(crowdBones, ivec2(x + 3, gl_InstanceID), 0));
}`)
      .replace('#include <beginnormal_vertex>', `mat4 crowdSkin = skinWeight.x * crowdBone(skinIndex.x) + skinWeight.y * crowdBone(skinIndex.y)
  + skinWeight.z * crowdBone(skinIndex.z) + skinWeight.w * crowdBone(skinIndex.w);
vec3 objectNormal = mat3(crowdSkin) * normal;`)
      .replace('#include <begin_vertex>', 'vec3 transformed = (crowdSkin * vec4(position, 1.0)).xyz;');
  };
  mat.customProgramCacheKey = () => 'motionmatch-crowd-skinned';
  return mat;
}

function build(gltf) {
  const n = info.n;
  rig = buildRig(gltf, info.character);
  const color = new THREE.Color();
  for (const m of rig.meshes) {
    const B = m.bones.length;
    m.data = new Float32Array(4 * B * n * 4);
    m.texture = new THREE.DataTexture(m.data, 4 * B, n, THREE.RGBAFormat, THREE.FloatType);
    m.texture.needsUpdate = true;
    const mats = Array.isArray(m.mesh.material) ? m.mesh.material.map((x) => crowdMaterial(x, m.texture))
      : crowdMaterial(m.mesh.material, m.texture);
    const inst = new THREE.InstancedMesh(m.mesh.geometry, mats, n);
    for (let i = 0; i < n; i++) {
      inst.setMatrixAt(i, m4.identity());
      inst.setColorAt(i, color.setHSL((i * 0.618) % 1, 0.35, 0.72));
    }
    inst.frustumCulled = false;         // instances spread over the whole area: one bounding box is meaningless
    inst.visible = false;
    m.instanced = inst;
    mm.scene.add(inst);
  }
  crowd.meshes = rig.meshes.map((m) => m.instanced);
  crowd.skinned = true;
}

// Agent i's bone matrices into every skinned mesh's texture row.
function poseAgent(i, roots, codes, hipsMm, J, W) {
  const { nodes, world, worldQ } = rig;
  const P = info.parents;
  for (let j = 0; j < J; j++) {            // database joints' world rotations (xyzw, chained)
    decodeQuat(codes[i * J + j], W, 4 * j);
    if (P[j] >= 0) {
      qa.fromArray(W, 4 * P[j]);
      qb.fromArray(W, 4 * j);
      qa.multiply(qb).toArray(W, 4 * j);
    }
  }
  const rx = roots[3 * i], ry = roots[3 * i + 1], rz = roots[3 * i + 2], s = rig.scale;
  for (let k = 0; k < nodes.length; k++) {
    const nd = nodes[k], pw = nd.parent >= 0 ? worldQ[nd.parent] : qInv.identity();
    if (nd.source >= 0) worldQ[k].fromArray(W, 4 * nd.source).multiply(nd.offset);
    else worldQ[k].copy(pw).multiply(nd.local || nd.quat);
    qa.copy(pw).invert().multiply(worldQ[k]);                       // local rotation
    if (nd.hips) {
      va.set(rx + s * hipsMm[3 * i] * 1e-3, ry + s * hipsMm[3 * i + 1] * 1e-3, rz + s * hipsMm[3 * i + 2] * 1e-3);
      if (nd.parent >= 0) va.applyMatrix4(m4b.copy(world[nd.parent]).invert());
    } else va.copy(nd.pos);
    m4.compose(va, qa, nd.scale);
    if (nd.parent >= 0) world[k].multiplyMatrices(world[nd.parent], m4);
    else world[k].copy(m4);
  }
  for (const m of rig.meshes) {
    const B = m.bones.length, row = i * B * 16;
    for (let b = 0; b < B; b++) {
      m4.multiplyMatrices(world[m.bones[b]], m.inv[b]);
      m.data.set(m4.elements, row + 16 * b);
    }
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
  const codes = new Uint32Array(buf, HEADER_BYTES + 12 * n, n * J);
  const hips = new Int16Array(buf, HEADER_BYTES + 12 * n + 4 * n * J, n * 3);
  if (rig) {
    const W = new Float32Array(4 * J);
    for (let i = 0; i < n; i++) poseAgent(i, roots, codes, hips, J, W);
    for (const m of rig.meshes) m.texture.needsUpdate = true;
  }
  crowd.roots = roots;
  crowd.frames += 1;
  crowd.bytes += buf.byteLength;
  // Script time spent on the crowd per drawn frame (ms), smoothed.
  const ms = performance.now() - t0;
  crowd.updateMs = crowd.frames === 1 ? ms : 0.95 * crowd.updateMs + 0.05 * ms;
}

// The latest frame is posed at the next animation frame, then the next one is asked for.
function drawPending() {
  drawing = false;
  if (!pending || !ws) return;
  const buf = pending;
  pending = null;
  onFrame(buf);
  if (ws.readyState === WebSocket.OPEN) ws.send('ready');
}

function setEnabled(on) {
  crowd.enabled = on;
  for (const m of crowd.meshes) m.visible = on;
  if (on && !ws) {
    ws = new WebSocket(`${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/ws/crowd`);
    ws.binaryType = 'arraybuffer';
    ws.onopen = () => ws.send('ready');
    ws.onmessage = (ev) => {
      if (typeof ev.data === 'string') return;
      pending = ev.data;
      if (!drawing) { drawing = true; requestAnimationFrame(drawPending); }
    };
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
  if (info.character) {
    try {
      build(await new GLTFLoader().loadAsync(info.character.url));
    } catch (err) {
      crowd.error = String(err);
      console.warn(`crowd body not loaded: ${err}`);
    }
  } else {
    crowd.error = 'no character body (the server drew capsules): the crowd is not drawn';
  }
  const label = document.createElement('label');
  label.className = 'pill';
  label.style.pointerEvents = 'auto';     // .pill lets clicks through to the canvas; this one is a control
  label.title = `${info.n} agents stepped by the server; drawn in ${crowd.meshes.length} draw call(s)`;
  label.innerHTML = `<input type="checkbox" id="crowd-toggle" checked> crowd (${info.n})`;
  document.getElementById('title').appendChild(label);
  label.querySelector('input').addEventListener('change', (e) => setEnabled(e.target.checked));
  setEnabled(true);
}
init();
