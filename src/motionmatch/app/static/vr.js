// VR mode (motionmatch serve --vr-model VR.npz): a tracker stream drives the character, see
// src/motionmatch/app/vr.py. Draws the three devices (HMD box, two controllers), the HMD's floor target
// with the root clamp radius and the ground-truth skeleton as a ghost (when the trackers came from mocap);
// a control picks a held-out clip or uploads a tracker file; where WebXR offers immersive-vr, "Enter VR"
// streams the headset and controllers to the server (one `trackers` message per XR frame, the tracker
// file's frame format) and shows the avatar around the user.
//
// Coordinates as the server's: metres, Y up, quaternions sent as [w, x, y, z]; device frames +Z forward.
// WebXR's viewer and grip spaces look along -Z: their rotations are turned half a turn about their Y.
import * as THREE from 'three';

const mm = window.motionmatch;            // app.js's state: scene, renderer, send, onShow, ...
const vr = { enabled: false, frames: 0, stream: -1, source: null, live: false, frame: 0, devicesVisible: false,
  ghostVisible: false, ghostJoints: 0, xr: false, sent: 0, headErrors: [], handErrors: [] };
mm.vr = vr;

const COLORS = { hmd: 0xf2f2f2, left: 0x6ea7e0, right: 0xe9935e, ghost: 0x9cff7a, target: 0xf0d04a };
const XR_SEND_MIN_MS = 1000 / 80;         // the server resamples to 60 fps; its limit is 120 messages/s
const HALF_TURN_Y = new THREE.Quaternion(0, 1, 0, 0);
const HMD_HEAD_OFFSET = new THREE.Vector3(0, 0.10, 0.10);   // head joint -> HMD in the HMD frame (trackers.py)

let info = null, ghostParents = null, ghostPairs = [], ghost = null, target = null, devices = [];
let headJoint = -1, handJoints = [-1, -1];

function deviceMesh(color, size) {
  const g = new THREE.Group();
  const mat = new THREE.MeshStandardMaterial({ color, roughness: 0.4, emissive: color, emissiveIntensity: 0.25 });
  const box = new THREE.Mesh(new THREE.BoxGeometry(...size), mat);
  // A dark plate on the device's front (+Z) shows where it points.
  const front = new THREE.Mesh(new THREE.BoxGeometry(size[0] * 0.8, size[1] * 0.6, 0.01),
    new THREE.MeshStandardMaterial({ color: 0x20242a }));
  front.position.z = size[2] / 2 + 0.005;
  g.add(box, front);
  g.visible = false;
  mm.scene.add(g);
  return g;
}

function build() {
  devices = [deviceMesh(COLORS.hmd, [0.19, 0.11, 0.12]), deviceMesh(COLORS.left, [0.05, 0.05, 0.14]),
    deviceMesh(COLORS.right, [0.05, 0.05, 0.14])];
  ghost = new THREE.LineSegments(new THREE.BufferGeometry(),
    new THREE.LineBasicMaterial({ color: COLORS.ghost, depthTest: false, transparent: true, opacity: 0.85 }));
  ghost.renderOrder = 5;
  ghost.frustumCulled = false;
  ghost.visible = false;
  target = new THREE.Mesh(new THREE.RingGeometry(0.96, 1, 48),
    new THREE.MeshBasicMaterial({ color: COLORS.target, transparent: true, opacity: 0.7, side: THREE.DoubleSide }));
  target.rotation.x = -Math.PI / 2;
  target.visible = false;
  mm.scene.add(ghost, target);
}

async function fetchStatus() {
  if (!mm.session) return;
  const r = await fetch(`/api/session/${mm.session}/vr`);
  if (r.ok) applyStatus(await r.json());
}

function applyStatus(st) {
  vr.stream = st.stream;
  vr.source = st.source;
  vr.live = st.live;
  ghostParents = st.ghost_parents;
  ghostPairs = [];
  if (ghostParents) ghostParents.forEach((p, j) => { if (p >= 0) ghostPairs.push([j, p]); });
  ghost.geometry.setAttribute('position', new THREE.BufferAttribute(new Float32Array(Math.max(1, ghostPairs.length) * 6), 3));
  // The select shows the clip playing: gamepad, a held-out clip, or "other" (a file, live poses).
  const sel = document.getElementById('vr-clip');
  if (sel) {
    const i = st.live ? -1 : info.clips.indexOf(st.source);
    sel.value = st.source === null ? '' : (i >= 0 ? String(i) : 'other');
  }
  status();
}

function status() {
  const el = document.getElementById('vr-status');
  if (!el) return;
  const h = vr.height;      // database switching by HMD height: the filter in use while the HMD is low
  const low = h && h.tag_filter && h.database === 0 ? ` · low HMD: ${h.tag_filter}` : '';
  el.textContent = (vr.live ? 'live trackers' : (vr.source ? `replay: ${vr.source}` : 'gamepad')) + low;
}

const q = new THREE.Quaternion(), v = new THREE.Vector3();
// Called by app.js whenever it shows a frame (live or rewound), so the devices and the ghost are drawn
// with the avatar of the same frame.
function update(f) {
  const d = f.debug.vr;
  if (!d) {
    for (const m of devices) m.visible = false;
    ghost.visible = target.visible = vr.devicesVisible = vr.ghostVisible = false;
    return;
  }
  if (d.stream !== vr.stream) { vr.stream = d.stream; fetchStatus(); }
  if (!d.devices) return;
  vr.frames += 1;
  vr.frame = d.frame;
  if ((d.height && d.height.database) !== (vr.height && vr.height.database)) { vr.height = d.height; status(); }
  d.devices.forEach((p, i) => {
    devices[i].position.set(p[0], p[1], p[2]);
    devices[i].quaternion.set(p[4], p[5], p[6], p[3]);
    devices[i].visible = true;
  });
  vr.devicesVisible = true;
  vr.devices = d.devices;
  target.position.set(d.target[0], 0.004, d.target[2]);
  target.scale.setScalar(d.alpha);
  target.visible = true;
  const g = d.ghost;
  ghost.visible = !!(g && ghostPairs.length && g.length === 3 * ghostParents.length);
  vr.ghostVisible = ghost.visible;
  vr.ghostJoints = g ? g.length / 3 : 0;
  if (ghost.visible) {
    const arr = ghost.geometry.attributes.position.array;
    ghostPairs.forEach(([j, p], i) => arr.set([g[3 * j], g[3 * j + 1], g[3 * j + 2], g[3 * p], g[3 * p + 1], g[3 * p + 2]], 6 * i));
    ghost.geometry.attributes.position.needsUpdate = true;
  }
  measure(d, f.positions);
}

// The drawn avatar against the devices: its head joint against the HMD's head point, its hands against
// the controllers (metres; the last 600 frames, for tests and the console).
function measure(d, pos) {
  if (headJoint < 0) {
    headJoint = mm.names.findIndex((n) => /head/i.test(n) && !/end|top/i.test(n));
    handJoints = ['left', 'right'].map((s) => mm.names.findIndex((n) => new RegExp(`${s}.*hand|${s}.*wrist`, 'i').test(n)));
  }
  const h = d.devices[0];
  q.set(h[4], h[5], h[6], h[3]);
  v.copy(HMD_HEAD_OFFSET).applyQuaternion(q);
  const at = (j) => [pos[3 * j], pos[3 * j + 1], pos[3 * j + 2]];
  const dist = (a, b) => Math.hypot(a[0] - b[0], a[1] - b[1], a[2] - b[2]);
  if (headJoint >= 0) vr.headErrors.push(dist(at(headJoint), [h[0] - v.x, h[1] - v.y, h[2] - v.z]));
  if (handJoints[0] >= 0 && handJoints[1] >= 0) {
    vr.handErrors.push(handJoints.map((j, i) => dist(at(j), d.devices[i + 1])));
  }
  for (const a of [vr.headErrors, vr.handErrors]) if (a.length > 600) a.shift();
}

// ------------------------------------------------------------------------------------------------
// Live device poses: the WebXR loop, and tests, send them through here.
const pose = (p, r) => ({ position: p.map((x) => Math.round(x * 1e5) / 1e5), rotation: r.map((x) => Math.round(x * 1e6) / 1e6) });

// t: seconds (increasing); hmd/left/right: {position: [x, y, z], rotation: [w, x, y, z]} or null (lost).
vr.sendPoses = (t, hmd, left, right) => {
  mm.send({ type: 'trackers', t, hmd, left, right });
  vr.sent += 1;
};

function xrPose(transform) {
  q.set(transform.orientation.x, transform.orientation.y, transform.orientation.z, transform.orientation.w).multiply(HALF_TURN_Y);
  const p = transform.position;
  return pose([p.x, p.y, p.z], [q.w, q.x, q.y, q.z]);
}

let xrSession = null, lastXrSend = 0, seen = { left: false, right: false };
function onXrFrame(time, frame) {
  const r = mm.renderer;
  const ref = r.xr.getReferenceSpace();
  if (frame && ref && time - lastXrSend >= XR_SEND_MIN_MS) {
    const viewer = frame.getViewerPose(ref);
    const hands = { left: null, right: null };
    for (const src of frame.session.inputSources) {
      if (!src.gripSpace || !(src.handedness in hands)) continue;
      const gp = frame.getPose(src.gripSpace, ref);
      if (gp) { hands[src.handedness] = xrPose(gp.transform); seen[src.handedness] = true; }
    }
    // The server holds a lost device's last pose, but needs one first.
    if (viewer && seen.left && seen.right) {
      lastXrSend = time;
      vr.sendPoses(time / 1000, xrPose(viewer.transform), hands.left, hands.right);
    }
  }
  r.render(mm.scene, xrCamera);
}
const xrCamera = new THREE.PerspectiveCamera(70, 1, 0.05, 200);

async function enterVr() {
  const r = mm.renderer;
  if (xrSession) { await xrSession.end(); return; }
  const session = await navigator.xr.requestSession('immersive-vr', { optionalFeatures: ['local-floor'] });
  r.xr.enabled = true;
  r.xr.setReferenceSpaceType('local-floor');
  await r.xr.setSession(session);
  xrSession = session;
  seen = { left: false, right: false };
  document.getElementById('vr-enter').textContent = 'Exit VR';
  r.setAnimationLoop(onXrFrame);
  session.addEventListener('end', () => {
    r.setAnimationLoop(null);
    r.xr.enabled = false;
    xrSession = null;
    document.getElementById('vr-enter').textContent = 'Enter VR';
  });
}

// ------------------------------------------------------------------------------------------------
// Controls: held-out clip, tracker file upload, Enter VR.
async function post(url, body) {
  const res = await fetch(url, { method: 'POST', body });
  const msg = await res.json().catch(() => ({ message: res.statusText }));
  if (!res.ok) { mm.errors.push(msg.message); throw new Error(msg.message); }
  applyStatus(msg);
}

function controls() {
  const box = document.createElement('span');
  box.className = 'pill';
  box.style.pointerEvents = 'auto';
  box.style.display = 'flex';
  box.style.gap = '6px';
  box.style.alignItems = 'center';
  const options = info.clips.map((c, i) => `<option value="${i}">${c.replace(/[<&]/g, '')}</option>`).join('');
  box.innerHTML = `<span title="VR replay: ${info.model}, root clamp ${info.alpha} m">VR</span>
    <span id="vr-status" style="max-width: 220px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap">–</span>
    <select id="vr-clip" style="max-width: 170px" title="replay a held-out clip (with ground truth)"><option value="">gamepad</option>
      <option value="other" disabled>other stream</option>${options}</select>
    <label class="button small" title="replay a tracker file (JSON, CSV or BVH)">trackers…<input id="vr-file" type="file" accept=".json,.csv,.bvh" hidden></label>
    <button id="vr-enter" class="small" hidden title="stream your headset and controllers (WebXR)">Enter VR</button>`;
  document.getElementById('title').appendChild(box);
  const toastError = (e) => mm.toast(`VR: ${e.message}`, 'error');
  box.querySelector('#vr-clip').addEventListener('change', (e) => {
    const v = e.target.value;
    post(v === '' ? `/api/session/${mm.session}/vr/stop` : `/api/session/${mm.session}/vr/clip/${v}`).catch(toastError);
  });
  box.querySelector('#vr-file').addEventListener('change', async (e) => {
    const file = e.target.files[0];
    e.target.value = '';
    if (file) post(`/api/session/${mm.session}/vr/trackers?name=${encodeURIComponent(file.name)}`, await file.arrayBuffer()).catch(toastError);
  });
  const enter = box.querySelector('#vr-enter');
  enter.addEventListener('click', () => enterVr().catch(toastError));
  if (navigator.xr && navigator.xr.isSessionSupported) {
    navigator.xr.isSessionSupported('immersive-vr').then((ok) => { vr.xr = ok; enter.hidden = !ok; }).catch(() => {});
  }
}

async function init() {
  const r = await fetch('/api/vr');
  if (!r.ok) return;
  info = await r.json();
  if (!info.enabled) return;
  vr.enabled = true;
  vr.clips = info.clips;
  build();
  controls();
  mm.onShow.push(update);
}
init();
