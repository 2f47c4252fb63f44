// motionmatch browser app: draws the character the server simulates, sends input, shows debug overlays.
//
// Coordinates: the server's world is right-handed like three.js (metres, Y up, yaw 0 faces +Z, positive yaw
// turns +Z toward +X), so positions are drawn as they come. A camera looking along +Z sees +X on the left of
// the screen: input is made camera-relative here and sent as a world-plane (x, z) vector.
import * as THREE from 'three';
import { clipLabel, initClips } from './dbbrowser.js';
import { initGhosts } from './ghosts.js';
import { initGraphs } from './graphs.js';
import { initInspector } from './inspector.js';
import { initTerrain } from './terrain.js';
import { SkinnedBody } from './skinned.js';

const HISTORY_FRAMES = 600;          // 10 s at 60 Hz kept for rewind
const SEND_MIN_MS = 1000 / 60;       // input messages: at most 60/s ...
const KEEPALIVE_MS = 250;            // ... and at least 4/s
const HEADER_BYTES = 12;             // uint32 seq, float32 time, uint32 json length

// ------------------------------------------------------------------------------------------------
// State exposed for tests and the console.
const state = {
  connected: false,
  session: null,
  framesReceived: 0,
  bytesReceived: 0,
  rootPosition: [0, 0, 0],     // simulation object, data coordinates
  hipsPosition: [0, 0, 0],
  facingYaw: 0,                // radians, atan2(x, z) of the simulation direction
  time: 0,
  mode: 'live',
  paused: false,
  fps: 0,
  names: [],
  parents: [],
  channels: [],
  tags: [],
  settings: {},
  errors: [],
  warnings: [],
  lastDebug: null,
  lastInput: null,
  recordFrames: 0,
  scenario: null,
  set: null,                   // the last database set switched to ({name, interrupt})
  send: (obj) => send(obj),
  toast: (text, kind) => toast(text, kind),
  onShow: [],                  // fn(frame) called whenever a frame {positions, debug, ...} is shown
  sendRaw: (data) => { if (ws && ws.readyState === 1) ws.send(data); },
  debugHistory: () => history.map((f) => f.debug),
};
window.motionmatch = state;

const $ = (id) => document.getElementById(id);

// ------------------------------------------------------------------------------------------------
// Scene
// ?quality=low: no antialiasing, small shadow map (software GL in headless tests renders ~10x faster).
// Without it, a frame rate below AUTO_LOW_FPS over the first seconds switches to the same settings live
// (what software rendering needs); the HUD says which.
const LOW = new URLSearchParams(location.search).get('quality') === 'low';
const AUTO_LOW_FPS = 30;
state.quality = LOW ? 'low (?quality=low)' : 'high';
const canvas = $('view');
const renderer = new THREE.WebGLRenderer({ canvas, antialias: !LOW, preserveDrawingBuffer: true });
renderer.setPixelRatio(LOW ? 0.5 : Math.min(window.devicePixelRatio, 2));
renderer.shadowMap.enabled = !LOW;     // software GL: the shadow pass costs as much as the scene
renderer.shadowMap.type = THREE.PCFShadowMap;
renderer.outputColorSpace = THREE.SRGBColorSpace;
renderer.toneMapping = THREE.ACESFilmicToneMapping;

const scene = new THREE.Scene();
const skyColor = new THREE.Color(0x2a313b);
scene.background = skyColor;
scene.fog = new THREE.Fog(skyColor, 18, 45);

const camera = new THREE.PerspectiveCamera(45, 1, 0.05, 200);

// A warm ground bounce light bright enough that the underside of arms, chin and crotch is not black.
scene.add(new THREE.HemisphereLight(0xcfe0ff, 0x5a4d40, 1.3));
const sun = new THREE.DirectionalLight(0xfff1dc, 2.4);
sun.castShadow = true;
sun.shadow.mapSize.set(LOW ? 512 : 2048, LOW ? 512 : 2048);
sun.shadow.camera.left = -4; sun.shadow.camera.right = 4;
sun.shadow.camera.top = 4; sun.shadow.camera.bottom = -4;
sun.shadow.camera.near = 0.5; sun.shadow.camera.far = 20;
sun.shadow.bias = -0.0005;
sun.shadow.normalBias = 0.02;
scene.add(sun, sun.target);
const SUN_OFFSET = new THREE.Vector3(3, 7, -2.5);

function groundTexture() {
  // A 1 m checker tile with a thin border: reads as a grid and gives motion a clear sense of speed.
  const c = document.createElement('canvas');
  c.width = c.height = 256;
  const g = c.getContext('2d');
  g.fillStyle = '#8b939c'; g.fillRect(0, 0, 256, 256);
  g.fillStyle = '#848c95'; g.fillRect(0, 0, 128, 128); g.fillRect(128, 128, 128, 128);
  g.strokeStyle = '#6f7780'; g.lineWidth = 3; g.strokeRect(0, 0, 256, 256);
  const t = new THREE.CanvasTexture(c);
  t.wrapS = t.wrapT = THREE.RepeatWrapping;
  t.repeat.set(100, 100);   // 200 m plane, 2 m tile with 1 m checks
  t.anisotropy = 8;
  t.colorSpace = THREE.SRGBColorSpace;
  return t;
}
const ground = new THREE.Mesh(new THREE.PlaneGeometry(200, 200),
  new THREE.MeshStandardMaterial({ map: groundTexture(), roughness: 0.95, metalness: 0 }));
ground.rotation.x = -Math.PI / 2;
ground.receiveShadow = true;
scene.add(ground);
const origin = new THREE.Mesh(new THREE.RingGeometry(0.18, 0.22, 40), new THREE.MeshBasicMaterial({ color: 0x5aa6f0 }));
origin.rotation.x = -Math.PI / 2; origin.position.y = 0.002;
scene.add(origin);

const toThree = (p, out = new THREE.Vector3()) => out.set(p[0], p[1], p[2]);
Object.assign(state, { scene, renderer });   // for crowd.js (crowd mode) and tests

// ------------------------------------------------------------------------------------------------
// Character: a cylinder per bone and a sphere per joint read as capsules; left side blue, right orange.
const skin = {
  body: new THREE.MeshStandardMaterial({ color: 0xe3ddd0, roughness: 0.55 }),
  left: new THREE.MeshStandardMaterial({ color: 0x6ea7e0, roughness: 0.5 }),
  right: new THREE.MeshStandardMaterial({ color: 0xe9935e, roughness: 0.5 }),
};
const unitCylinder = new THREE.CylinderGeometry(1, 1, 1, 18, 1, true);
const unitSphere = new THREE.SphereGeometry(1, 20, 14);
const character = new THREE.Group();
scene.add(character);
const body = new SkinnedBody(scene, character, $('capsules'));
state.body = body.status;
let bones = [];      // {j, p, mesh}
let joints = [];     // {j, mesh}
let head = null;     // {j, parent, mesh}
let drawable = [];   // joint -> drawn?

function side(name) {
  if (/left|_l$|^l_|\.l$/i.test(name)) return 'left';
  if (/right|_r$|^r_|\.r$/i.test(name)) return 'right';
  return 'body';
}

function radius(name) {
  const n = name.toLowerCase();
  if (/hips|pelvis/.test(n)) return 0.11;
  if (/spine|chest/.test(n)) return 0.105;
  if (/neck/.test(n)) return 0.05;
  if (/shoulder|clavicle/.test(n)) return 0.05;
  if (/upperleg|upleg|thigh/.test(n)) return 0.075;
  if (/lowerleg|leg|shin|calf|knee/.test(n)) return 0.055;
  if (/toe/.test(n)) return 0.035;
  if (/foot|ankle/.test(n)) return 0.045;
  if (/upperarm|arm$|^arm/.test(n) && !/fore|lower/.test(n)) return 0.05;
  if (/forearm|lowerarm|elbow/.test(n)) return 0.04;
  if (/hand|wrist/.test(n)) return 0.035;
  return 0.045;
}

function buildCharacter(names, parents) {
  character.clear();
  bones = []; joints = []; head = null;
  // The simulation bone (and a ground-level root such as Bandai's joint_Root) is not part of the body.
  drawable = names.map((n, j) => !(j === 0 && /simulation/i.test(n)) && !/^(joint_)?root$/i.test(n));
  for (let j = 0; j < names.length; j++) {
    if (!drawable[j]) continue;
    const r = radius(names[j]);
    const mat = skin[side(names[j])];
    const p = parents[j];
    if (p >= 0 && drawable[p]) {
      // The bone between j and its parent takes the thinner of the two ends' radii for limbs.
      const br = Math.min(r, radius(names[p])) * 0.92;
      const mesh = new THREE.Mesh(unitCylinder, side(names[j]) === 'body' ? skin.body : mat);
      mesh.castShadow = true;
      mesh.userData.r = br;
      character.add(mesh);
      bones.push({ j, p, mesh });
    }
    const jm = new THREE.Mesh(unitSphere, mat);
    jm.scale.setScalar(r * 0.92);
    jm.castShadow = true;
    character.add(jm);
    joints.push({ j, mesh: jm });
    if (/head/i.test(names[j])) {
      const hm = new THREE.Mesh(unitSphere, skin.body);
      hm.scale.set(0.1, 0.12, 0.11);
      hm.castShadow = true;
      character.add(hm);
      head = { j, parent: p, mesh: hm };
    }
  }
}

const tmpA = new THREE.Vector3(), tmpB = new THREE.Vector3(), tmpD = new THREE.Vector3();
const UP = new THREE.Vector3(0, 1, 0);
const jointPos = [];

function poseCharacter(positions) {
  const J = positions.length / 3;
  for (let j = 0; j < J; j++) {
    if (!jointPos[j]) jointPos[j] = new THREE.Vector3();
    jointPos[j].set(positions[3 * j], positions[3 * j + 1], positions[3 * j + 2]);
  }
  for (const b of bones) {
    tmpA.copy(jointPos[b.p]); tmpB.copy(jointPos[b.j]);
    tmpD.subVectors(tmpB, tmpA);
    const len = tmpD.length();
    b.mesh.visible = len > 1e-4;
    if (!b.mesh.visible) continue;
    b.mesh.position.addVectors(tmpA, tmpB).multiplyScalar(0.5);
    b.mesh.quaternion.setFromUnitVectors(UP, tmpD.multiplyScalar(1 / len));
    b.mesh.scale.set(b.mesh.userData.r, len, b.mesh.userData.r);
  }
  for (const jm of joints) jm.mesh.position.copy(jointPos[jm.j]);
  if (head) {
    // The head joint sits at the skull base: put the skull a little further along the neck.
    tmpD.set(0, 1, 0);
    if (head.parent >= 0) tmpD.subVectors(jointPos[head.j], jointPos[head.parent]).normalize();
    head.mesh.position.copy(jointPos[head.j]).addScaledVector(tmpD, 0.09);
    head.mesh.quaternion.setFromUnitVectors(UP, tmpD);
  }
}

// ------------------------------------------------------------------------------------------------
// Debug overlays (all in data coordinates converted with toThree).
const overlays = {};
const overlayOn = {};
function overlayGroup(name) {
  const g = new THREE.Group();
  scene.add(g);
  overlays[name] = g;
  return g;
}

// Overlays lie on the ground the runtime uses (terrain.heightAt), lifted a little against z-fighting.
const LIFT = { trajectory: 0.02, disc: 0.01, arrow: 0.03, contact: 0.006, lock: 0.007, pulse: 0.012 };
const groundAt = (x, z) => terrain.heightAt(x, z);
function onGround(v, lift) { return v.setY(groundAt(v.x, v.z) + lift); }

function trajectoryMarker(color) {
  const group = new THREE.Group();
  const mat = new THREE.MeshBasicMaterial({ color, depthTest: false, transparent: true, opacity: 0.95 });
  const points = [];
  for (let i = 0; i < 8; i++) {
    const m = new THREE.Mesh(new THREE.SphereGeometry(0.035, 12, 8), mat);
    m.renderOrder = 2;
    group.add(m); points.push(m);
  }
  const lineGeom = new THREE.BufferGeometry();
  lineGeom.setAttribute('position', new THREE.BufferAttribute(new Float32Array(9 * 3), 3));
  const line = new THREE.Line(lineGeom, new THREE.LineBasicMaterial({ color, depthTest: false, transparent: true }));
  line.renderOrder = 2;
  group.add(line);
  return {
    group,
    // World [x, y - lift, z] of the shown points and line vertices (tests compare them with the terrain).
    grounded() {
      const arr = lineGeom.attributes.position.array;
      const out = [];
      for (let i = 0; i < lineGeom.drawRange.count && 3 * i < arr.length; i++) out.push([arr[3 * i], arr[3 * i + 1] - LIFT.trajectory, arr[3 * i + 2]]);
      for (const p of points) if (p.visible) out.push([p.position.x, p.position.y - LIFT.trajectory, p.position.z]);
      return out;
    },
    set(start, pts) {
      const arr = lineGeom.attributes.position.array;
      onGround(toThree(start, tmpA), LIFT.trajectory); arr.set([tmpA.x, tmpA.y, tmpA.z], 0);
      const n = Math.min(pts.length, points.length);
      for (let i = 0; i < points.length; i++) {
        points[i].visible = i < n;
        if (i < n) {
          const p = onGround(toThree(pts[i], points[i].position), LIFT.trajectory);
          arr.set([p.x, p.y, p.z], 3 * (i + 1));
        }
      }
      lineGeom.setDrawRange(0, n + 1);
      lineGeom.attributes.position.needsUpdate = true;
    },
  };
}

const simGroup = overlayGroup('sim');
const simDisc = new THREE.Mesh(new THREE.RingGeometry(0.22, 0.27, 40),
  new THREE.MeshBasicMaterial({ color: 0x5ccf8a, depthTest: false, transparent: true }));
simDisc.rotation.x = -Math.PI / 2; simDisc.renderOrder = 2;
const simArrow = new THREE.ArrowHelper(new THREE.Vector3(0, 0, 1), new THREE.Vector3(), 0.55, 0x5ccf8a, 0.14, 0.09);
simArrow.renderOrder = 2;
const desired = trajectoryMarker(0x5ccf8a);
simGroup.add(simDisc, simArrow, desired.group);

const matchedGroup = overlayGroup('matched');
const matched = trajectoryMarker(0xef6b6b);
matchedGroup.add(matched.group);

const feetGroup = overlayGroup('feet');
const contactsGroup = overlayGroup('contacts');
const feet = {};
for (const sideName of ['left', 'right']) {
  const dot = new THREE.Mesh(new THREE.SphereGeometry(0.03, 12, 8), new THREE.MeshBasicMaterial({ color: 0xffffff, depthTest: false }));
  dot.renderOrder = 3;
  const vel = new THREE.ArrowHelper(new THREE.Vector3(1, 0, 0), new THREE.Vector3(), 0.2, 0xf0d060, 0.05, 0.035);
  feetGroup.add(dot, vel);
  const ring = new THREE.Mesh(new THREE.RingGeometry(0.07, 0.1, 28),
    new THREE.MeshBasicMaterial({ color: 0x5ccf8a, depthTest: false, transparent: true, opacity: 0.9 }));
  ring.rotation.x = -Math.PI / 2; ring.renderOrder = 2;
  const lock = new THREE.Mesh(new THREE.RingGeometry(0.11, 0.13, 4, 1),
    new THREE.MeshBasicMaterial({ color: 0xf0a24a, depthTest: false, transparent: true }));
  lock.rotation.x = -Math.PI / 2; lock.renderOrder = 2;
  contactsGroup.add(ring, lock);
  feet[sideName] = { dot, vel, ring, lock };
}

// Where the overlays meet the ground: {name: [[x, y - lift, z], ...]} of those shown.
state.overlayGround = () => {
  const at = (m, lift) => (m.visible ? [[m.position.x, m.position.y - lift, m.position.z]] : []);
  return { disc: at(simDisc, LIFT.disc), arrow: at(simArrow, LIFT.arrow), desired: desired.grounded(),
    matched: matched.grounded(), contacts: [...at(feet.left.ring, LIFT.contact), ...at(feet.right.ring, LIFT.contact)],
    locks: [...at(feet.left.lock, LIFT.lock), ...at(feet.right.lock, LIFT.lock)] };
};

const transitionGroup = overlayGroup('transition');
const pulse = new THREE.Mesh(new THREE.RingGeometry(0.3, 0.34, 48),
  new THREE.MeshBasicMaterial({ color: 0xf0a24a, depthTest: false, transparent: true }));
pulse.rotation.x = -Math.PI / 2; pulse.renderOrder = 2;
transitionGroup.add(pulse);
let lastTransitionKey = null, pulseStart = -1e9;

const jointsGroup = overlayGroup('joints');
let jointDots = [];
function buildJointDots(J) {
  jointsGroup.clear();
  jointDots = [];
  const mat = new THREE.MeshBasicMaterial({ color: 0xffe27a, depthTest: false });
  for (let j = 0; j < J; j++) {
    const m = new THREE.Mesh(new THREE.SphereGeometry(0.018, 8, 6), mat);
    m.renderOrder = 4;
    jointsGroup.add(m); jointDots.push(m);
  }
}

function updateOverlays(positions, dbg, simTime) {
  if (!dbg) return;
  origin.position.y = groundAt(0, 0) + 0.002;
  const sp = dbg.sim_position || [0, 0, 0];
  onGround(toThree(sp, simDisc.position), LIFT.disc);
  const sd = dbg.sim_direction || [0, 0, 1];
  onGround(simArrow.position.copy(simDisc.position), LIFT.arrow);
  simArrow.setDirection(toThree(sd, tmpA).setY(0).normalize());
  if (dbg.desired_trajectory) desired.set(sp, dbg.desired_trajectory);
  if (dbg.matched_trajectory) matched.set(sp, dbg.matched_trajectory);
  for (const sideName of ['left', 'right']) {
    const f = dbg.feet && dbg.feet[sideName];
    const o = feet[sideName];
    if (!f) { o.dot.visible = o.vel.visible = o.ring.visible = o.lock.visible = false; continue; }
    toThree(f.position, o.dot.position);
    o.dot.visible = true;
    const v = toThree(f.velocity, tmpA);
    const speed = v.length();
    o.vel.visible = speed > 0.05;
    if (o.vel.visible) {
      o.vel.position.copy(o.dot.position);
      o.vel.setDirection(v.normalize());
      o.vel.setLength(Math.min(1.5, speed * 0.15) + 0.06, 0.05, 0.035);
    }
    o.ring.visible = !!f.contact;
    onGround(o.ring.position.copy(o.dot.position), LIFT.contact);
    o.lock.visible = !!f.locked;
    onGround(o.lock.position.copy(o.dot.position), LIFT.lock);
  }
  const lt = dbg.last_transition;
  const key = lt ? `${lt.time}:${lt.from}:${lt.to}` : null;
  if (key && key !== lastTransitionKey) { lastTransitionKey = key; pulseStart = simTime; }
  const age = simTime - pulseStart;
  pulse.visible = age >= 0 && age < 0.5;
  if (pulse.visible) {
    onGround(pulse.position.copy(simDisc.position), LIFT.pulse);
    pulse.scale.setScalar(1 + age * 2);
    pulse.material.opacity = 1 - age / 0.5;
  }
  if (overlayOn.joints) {
    const J = positions.length / 3;
    if (jointDots.length !== J) buildJointDots(J);
    for (let j = 0; j < J; j++) jointDots[j].position.set(positions[3 * j], positions[3 * j + 1], positions[3 * j + 2]);
  }
}

for (const box of document.querySelectorAll('[data-overlay]')) {
  const apply = () => { overlayOn[box.dataset.overlay] = box.checked; overlays[box.dataset.overlay].visible = box.checked; };
  box.addEventListener('change', apply);
  apply();
}

// ------------------------------------------------------------------------------------------------
// Camera: orbits the character (drag), zooms (wheel), follows smoothly. yaw: the camera's ground forward is
// (sin yaw, cos yaw), as for the character; 0 looks along +Z.
const cam = { yaw: 0, pitch: 0.42, distance: 4.6, target: new THREE.Vector3(0, 1, 0), initialized: false };
let dragging = null;
canvas.addEventListener('pointerdown', (e) => { dragging = { x: e.clientX, y: e.clientY }; canvas.setPointerCapture(e.pointerId); });
canvas.addEventListener('pointerup', (e) => { dragging = null; canvas.releasePointerCapture(e.pointerId); });
canvas.addEventListener('pointermove', (e) => {
  if (!dragging) return;
  cam.yaw -= (e.clientX - dragging.x) * 0.006;
  cam.pitch = THREE.MathUtils.clamp(cam.pitch + (e.clientY - dragging.y) * 0.004, -0.1, 1.35);
  dragging = { x: e.clientX, y: e.clientY };
});
canvas.addEventListener('wheel', (e) => {
  cam.distance = THREE.MathUtils.clamp(cam.distance * Math.exp(e.deltaY * 0.001), 1.2, 25);
  e.preventDefault();
}, { passive: false });

function updateCamera(dt, followData) {
  // Zoomed in, aim lower (toward the knees) so the feet stay in view above the bottom bar; from 4 m out
  // the hips are the aim.
  const near = THREE.MathUtils.clamp((cam.distance - 1.2) / 2.8, 0, 1);
  // On terrain the body rides above the simulation (which stays at y = 0): follow the ground under it.
  const goal = toThree(followData, tmpB);
  goal.setY(groundAt(goal.x, goal.z) + THREE.MathUtils.lerp(0.5, 0.95, near));
  if (!cam.initialized) { cam.target.copy(goal); cam.initialized = true; }
  cam.target.lerp(goal, 1 - Math.exp(-dt * 8));
  const back = cam.distance * Math.cos(cam.pitch);
  camera.position.set(cam.target.x - back * Math.sin(cam.yaw), cam.target.y + cam.distance * Math.sin(cam.pitch),
    cam.target.z - back * Math.cos(cam.yaw));
  camera.lookAt(cam.target);
  sun.position.copy(cam.target).add(SUN_OFFSET);
  // The flat ground (200 m) moves with the camera by whole 2 m texture tiles: it never ends.
  ground.position.set(Math.round(cam.target.x / 2) * 2, 0, Math.round(cam.target.z / 2) * 2);
  sun.target.position.copy(cam.target);
}

// ------------------------------------------------------------------------------------------------
// Input: keyboard and Gamepad API -> camera-relative world-plane input.
const keys = new Set();
const MOVE_KEYS = { KeyW: [0, 1], ArrowUp: [0, 1], KeyS: [0, -1], ArrowDown: [0, -1],
  KeyA: [-1, 0], ArrowLeft: [-1, 0], KeyD: [1, 0], ArrowRight: [1, 0] };
const ACTION_KEYS = { Digit1: 'bow', Digit2: 'byebye', Digit3: 'guide', Digit4: 'punch', Digit5: 'kick' };
function typingTarget(e) { return e.target instanceof HTMLInputElement && e.target.type === 'text'; }
window.addEventListener('keydown', (e) => {
  if (typingTarget(e)) return;
  if (e.code in MOVE_KEYS || e.code === 'Space') e.preventDefault();
  if (!e.repeat) {
    if (e.code === 'KeyH') toggleHelp();
    if (e.code === 'KeyR') resetCharacter();
    if (e.code === 'KeyP') togglePause();
    if (e.code === 'Comma') stepHistory(-1);
    if (e.code === 'Period') stepHistory(1);
    // Action keys (databases with time_to_event channels, e.g. `motionmatch build --default actions`).
    if (e.code in ACTION_KEYS) send({ type: 'action', event: ACTION_KEYS[e.code], event_in: 0.8 });
  }
  keys.add(e.code);
  pumpInput();
});
window.addEventListener('keyup', (e) => { keys.delete(e.code); pumpInput(); });
window.addEventListener('blur', () => { keys.clear(); pumpInput(); });

function gamepadState() {
  const pads = navigator.getGamepads ? navigator.getGamepads() : [];
  for (const pad of pads) {
    if (!pad || !pad.connected) continue;
    const dz = (v) => (Math.abs(v) < 0.15 ? 0 : (v - Math.sign(v) * 0.15) / 0.85);
    const b = (i) => (pad.buttons[i] ? pad.buttons[i].value > 0.4 || pad.buttons[i].pressed : false);
    return { move: [dz(pad.axes[0] || 0), -dz(pad.axes[1] || 0)], look: [dz(pad.axes[2] || 0), -dz(pad.axes[3] || 0)],
      strafe: b(6) || b(4), run: b(7) || b(10) };
  }
  return null;
}

function currentInput() {
  let mx = 0, mz = 0;
  for (const code of keys) if (MOVE_KEYS[code]) { mx += MOVE_KEYS[code][0]; mz += MOVE_KEYS[code][1]; }
  let run = keys.has('ShiftLeft') || keys.has('ShiftRight');
  let strafe = keys.has('KeyQ') || keys.has('Space');
  const pad = gamepadState();
  if (pad) {
    if (Math.hypot(...pad.move) > Math.hypot(mx, mz)) [mx, mz] = pad.move;
    run = run || pad.run; strafe = strafe || pad.strafe;
  }
  const len = Math.hypot(mx, mz);
  if (len > 1) { mx /= len; mz /= len; }
  // Camera-relative to world plane: forward = (sin yaw, cos yaw); screen right = forward x up = (-cos, sin).
  const s = Math.sin(cam.yaw), c = Math.cos(cam.yaw);
  const q = (v) => Math.round(THREE.MathUtils.clamp(v, -1, 1) * 1000) / 1000;
  const move = [q(-mx * c + mz * s), q(mx * s + mz * c)];
  return { type: 'input', move, look: strafe ? [q(s), q(c)] : null, run, strafe };
}

let lastSent = '', lastSentAt = 0;
function pumpInput(force = false) {
  if (!ws || ws.readyState !== 1 || state.mode !== 'live') return;
  const msg = currentInput();
  const text = JSON.stringify(msg);
  const now = performance.now();
  if ((text !== lastSent && now - lastSentAt >= SEND_MIN_MS) || now - lastSentAt >= KEEPALIVE_MS || force) {
    ws.send(text);
    lastSent = text; lastSentAt = now;
    state.lastInput = msg;
  }
}
setInterval(() => pumpInput(), KEEPALIVE_MS / 2);

// ------------------------------------------------------------------------------------------------
// Connection
let ws = null;
let history = [];           // {seq, time, positions, debug}
let viewIndex = -1;         // index into history while rewinding
let settingsTimer = null;

function send(obj) { if (ws && ws.readyState === 1) ws.send(JSON.stringify(obj)); }

function connect() {
  const url = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/ws`;
  ws = new WebSocket(url);
  ws.binaryType = 'arraybuffer';
  ws.onopen = () => { setConn(true); };
  ws.onclose = (ev) => {
    setConn(false);
    state.session = null;
    // 1013: the server is full (its message said so); ask again later rather than hammer it.
    if (ev.code === 1013) $('conn').textContent = 'server full';
    setTimeout(connect, ev.code === 1013 ? 10000 : 1500);
  };
  ws.onmessage = (ev) => {
    state.bytesReceived += ev.data.byteLength || ev.data.length || 0;
    if (typeof ev.data === 'string') onText(JSON.parse(ev.data));
    else onFrame(ev.data);
  };
}

function setConn(on) {
  state.connected = on;
  $('conn').textContent = on ? 'connected' : 'disconnected';
  $('conn').className = `pill ${on ? 'on' : 'off'}`;
}

const decoder = new TextDecoder();
function onFrame(buf) {
  const view = new DataView(buf);
  const seq = view.getUint32(0, true);
  const time = view.getFloat32(4, true);
  const jsonLen = view.getUint32(8, true);
  const J = state.names.length;
  const positions = new Float32Array(buf, HEADER_BYTES, J * 3);
  const debug = JSON.parse(decoder.decode(new Uint8Array(buf, HEADER_BYTES + J * 12, jsonLen)));
  const rotAt = HEADER_BYTES + J * 12 + jsonLen;   // local rotations follow the JSON (copied: unaligned)
  const rotations = buf.byteLength >= rotAt + J * 16 ? new Float32Array(buf.slice(rotAt, rotAt + J * 16)) : null;
  // Frames already in flight when the page paused belong after the frame the pause showed: keeping
  // them would make the first rewind step jump.
  if (state.mode !== 'live') return;
  history.push({ seq, time, positions, debug, rotations });
  if (history.length > HISTORY_FRAMES) history.shift();
  state.framesReceived += 1;
  if (state.mode === 'live') show(history.length - 1);
}

function show(index) {
  const f = history[index];
  if (!f) return;
  viewIndex = index;
  poseCharacter(f.positions);
  body.pose(f.positions, f.rotations);
  for (const fn of state.onShow) fn(f);   // drawings of other modules (vr.js) in step with the character
  const d = f.debug;
  state.lastDebug = d;
  state.time = f.time;
  if (d.sim_position) state.rootPosition = d.sim_position;
  if (d.sim_direction) state.facingYaw = Math.atan2(d.sim_direction[0], d.sim_direction[2]);
  const hips = state.names.findIndex((n) => /hips|pelvis/i.test(n));
  if (hips >= 0) state.hipsPosition = Array.from(f.positions.slice(3 * hips, 3 * hips + 3));
  updateOverlays(f.positions, d, f.time);
  const scrub = $('scrub');
  scrub.max = String(Math.max(0, history.length - 1));
  if (state.mode === 'live') scrub.value = scrub.max;
  $('scrub-label').textContent = state.mode === 'live' ? 'live'
    : `${(f.time - history[history.length - 1].time).toFixed(2)} s`;
  state.recordFrames = d.recording || 0;
}

function onText(msg) {
  onMessage(msg);
  for (const fn of handlers[msg.type] || []) fn(msg);
}

function onMessage(msg) {
  switch (msg.type) {
    case 'hello':
      state.session = msg.session;
      state.names = msg.names; state.parents = msg.parents;
      state.channels = msg.channels; state.tags = msg.tags;
      history = [];
      // The database's own tags as the example, so the hint is always a valid expression here.
      $('t-tags').placeholder = msg.tags.length
        ? `e.g. ${msg.tags.filter((t) => t !== 'mirrored').slice(0, 2).join(' | ') || msg.tags[0]}${msg.tags.includes('mirrored') ? ' & !mirrored' : ''}`
        : 'no tags in this database';
      buildCharacter(msg.names, msg.parents);
      body.load(msg.character, msg.parents);
      settingsSchema.then(() => {
        buildTuning(msg);
        $('row-mode').style.display = msg.lmm ? '' : 'none';   // the classic/learned switch needs a model (serve --lmm)
        applySettingsToUi(msg.settings);
      });
      $('b-download').href = `/api/session/${msg.session}/record.bvh`;
      $('b-replay').href = `/api/session/${msg.session}/record.replay.json`;
      $('b-settings').href = `/api/session/${msg.session}/settings.toml`;
      setMode('live');
      pumpInput(true);
      break;
    case 'settings':
      settingsSchema.then(() => applySettingsToUi(msg.settings));
      break;
    case 'error':
      state.errors.push(msg.message);
      if (state.errors.length > 50) state.errors.shift();
      toast(msg.message, 'error');
      if (msg.message && msg.message.includes('tag')) $('t-tags').classList.add('invalid');
      break;
    case 'warning':
      state.warnings.push(msg.message);
      toast(msg.message);
      break;
    case 'record':
      state.recordFrames = msg.frames;
      $('b-record').classList.toggle('active', msg.recording);
      $('b-record').textContent = msg.recording ? '■ Stop' : '● Record';
      $('b-download').classList.toggle('disabled', !msg.frames);
      $('b-replay').classList.toggle('disabled', !msg.frames);
      if (msg.warning) toast(msg.warning);
      break;
    case 'scenario':
      state.scenario = msg.state === 'playing' ? msg : null;
      $('b-scen-stop').hidden = msg.state !== 'playing';
      toast(`scenario ${msg.name || ''} ${msg.state}`);
      break;
    case 'search_set':
      state.set = msg;
      toast(`database set ${msg.name}${msg.interrupt ? '' : ' from the next search'}`);
      break;
    case 'pause':
      state.paused = msg.paused;
      break;
    case 'reset':
      history = [];
      break;
    case 'pong':
      state.pingMs = performance.now() - msg.t;
      break;
  }
}

// ------------------------------------------------------------------------------------------------
// Rewind / timeline
function setMode(mode) {
  state.mode = mode;
  $('mode').textContent = mode === 'live' ? 'live' : 'paused · rewind';
  $('mode').className = `pill ${mode === 'live' ? '' : 'rewind'}`;
  $('b-live').textContent = mode === 'live' ? '❚❚' : '▶';
  send({ type: 'pause', paused: mode !== 'live' });
  if (mode === 'live') { keys.clear(); pumpInput(true); }
}
function togglePause() {
  if (state.mode === 'live') { setMode('rewind'); show(history.length - 1); }
  else setMode('live');
}
function stepHistory(d) {
  if (state.mode === 'live') return;
  const i = THREE.MathUtils.clamp(viewIndex + d, 0, history.length - 1);
  $('scrub').value = String(i);
  show(i);
}
$('b-live').addEventListener('click', togglePause);
$('scrub').addEventListener('input', (e) => {
  if (state.mode === 'live') setMode('rewind');
  show(Number(e.target.value));
});

// ------------------------------------------------------------------------------------------------
// Tuning panel
function fmt(v) { return typeof v === 'number' ? (Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(2)) : String(v); }

// The settings rows of the tuning panel come from the settings schema (the same table the server checks
// messages and settings files with): every setting with an app control, its bounds, step and doc.
const settingsSchema = fetch('/api/settings/schema').then((r) => r.json()).then((schema) => {
  state.schema = schema;
  for (const table of ['character', 'warp', 'controller']) {
    for (const row of Object.values(schema[table] || {})) {
      if (row.app && row.app.kind !== 'text') addSettingControl(row);
    }
  }
});

function addSettingControl(row) {
  const { field, kind, section, label } = row.app;
  const box = document.querySelector(`[data-section="${CSS.escape(section)}"]`);
  let el;
  if (kind === 'checkbox') {
    let toggles = box.querySelector('.toggles');
    if (!toggles) { toggles = document.createElement('div'); toggles.className = 'toggles'; box.appendChild(toggles); }
    const l = document.createElement('label');
    el = document.createElement('input'); el.type = 'checkbox';
    l.append(el, ` ${label}`);
    l.title = row.doc;
    toggles.appendChild(l);
  } else {
    const div = document.createElement('div');
    div.className = 'row'; div.id = `row-${field}`; div.title = row.doc;
    const l = document.createElement('label'); l.htmlFor = `t-${field}`; l.textContent = label;
    if (kind === 'select') {
      el = document.createElement('select');
      for (const c of row.choices) { const o = document.createElement('option'); o.value = c; o.textContent = c; el.appendChild(o); }
      div.append(l, el);
    } else {
      el = document.createElement('input'); el.type = 'range';
      el.min = row.min; el.max = row.max; el.step = row.app.step || (row.max - row.min) / 100;
      div.append(l, el, document.createElement('output'));
    }
    el.id = `t-${field}`;
    box.insertBefore(div, box.querySelector('.toggles'));
  }
  el.dataset.setting = field;
  el.addEventListener(el.type === 'range' ? 'input' : 'change', () => {
    const v = el.type === 'checkbox' ? el.checked : el.type === 'range' ? Number(el.value) : el.value;
    const out = el.parentElement.querySelector('output');
    if (out) out.textContent = fmt(v);
    queueSettings({ [field]: v });
  });
}

function buildTuning(hello) {
  const box = $('weights');
  box.innerHTML = '';
  for (const name of hello.channels) {
    const w = state.schema.weights[name] || state.schema.weights['*'];
    const row = document.createElement('div');
    row.className = 'row';
    row.innerHTML = `<label title="${name}">${name.replaceAll('_', ' ')}</label>
      <input type="range" min="${w.min}" max="${w.max}" step="0.05" data-weight="${name}"><output></output>`;
    box.appendChild(row);
    const input = row.querySelector('input');
    input.addEventListener('input', () => {
      row.querySelector('output').textContent = fmt(Number(input.value));
      queueSettings({ weights: { [name]: Number(input.value) } });
    });
  }
  const list = $('tag-list');
  list.innerHTML = '';
  const chips = $('tag-chips');
  chips.innerHTML = '';
  for (const t of hello.tags) {
    const o = document.createElement('option'); o.value = t; list.appendChild(o);
    const b = document.createElement('button'); b.textContent = t;
    b.addEventListener('click', () => { $('t-tags').value = t; sendTagFilter(); });
    chips.appendChild(b);
  }
  if (hello.tags.length) {
    const b = document.createElement('button'); b.textContent = 'any';
    b.addEventListener('click', () => { $('t-tags').value = ''; sendTagFilter(); });
    chips.appendChild(b);
  }
  state.defaults = hello.settings;
}

let pendingSettings = {};
let lastTagFilter = null;     // the tag filter last sent or applied
function queueSettings(part) {
  for (const [k, v] of Object.entries(part)) {
    if (k === 'weights') pendingSettings.weights = { ...(pendingSettings.weights || {}), ...v };
    else pendingSettings[k] = v;
  }
  // Sliders fire continuously: coalesce into at most ~20 messages a second.
  if (!settingsTimer) settingsTimer = setTimeout(() => {
    settingsTimer = null;
    send({ type: 'settings', ...pendingSettings });
    pendingSettings = {};
  }, 50);
}

function applySettingsToUi(s) {
  state.settings = s;
  for (const [name, w] of Object.entries(s.weights || {})) {
    const input = document.querySelector(`[data-weight="${CSS.escape(name)}"]`);
    if (input && document.activeElement !== input) { input.value = w; input.nextElementSibling.textContent = fmt(w); }
  }
  for (const el of document.querySelectorAll('[data-setting]')) {
    const k = el.dataset.setting;
    if (!(k in s) || document.activeElement === el) continue;
    if (el.type === 'checkbox') el.checked = !!s[k];
    else el.value = s[k];
    const out = el.parentElement.querySelector('output');
    if (out) out.textContent = fmt(s[k]);
  }
  if (document.activeElement !== $('t-tags')) $('t-tags').value = s.tag_filter || '';
  lastTagFilter = s.tag_filter ?? null;
  $('t-tags').classList.remove('invalid');
}

function sendTagFilter() {
  const v = $('t-tags').value.trim() || null;
  // Enter sends, then the blur fires 'change' with the same text: send (and get any error) once.
  if (v === lastTagFilter) return;
  lastTagFilter = v;
  $('t-tags').classList.remove('invalid');
  send({ type: 'settings', tag_filter: v });
}
// A database set (docs/ANNOTATIONS.md): the clips of a tag expression, now or from the next search. The
// server answers with the set and the settings it made (tag filter, weights), which the panel shows.
function useSet() {
  const tags = $('t-set').value.trim() || null;
  send({ type: 'search_set', name: tags || 'all', tags, interrupt: $('t-set-now').checked });
}
$('t-set-use').addEventListener('click', useSet);
$('t-set').addEventListener('keydown', (e) => { if (e.key === 'Enter') useSet(); });
$('t-tags').addEventListener('change', sendTagFilter);
$('t-tags').addEventListener('keydown', (e) => { if (e.key === 'Enter') { sendTagFilter(); e.target.blur(); } });
$('t-defaults').addEventListener('click', () => { if (state.defaults) send({ type: 'settings', ...state.defaults }); });
$('tune-toggle').addEventListener('click', () => {
  $('tuning').classList.toggle('collapsed');
  $('tune-toggle').textContent = $('tuning').classList.contains('collapsed') ? '+' : '–';
});

// ------------------------------------------------------------------------------------------------
// Record, scenario, reset, help, toasts
$('b-record').addEventListener('click', () => {
  send({ type: 'record', action: $('b-record').classList.contains('active') ? 'stop' : 'start' });
});
$('f-scenario').addEventListener('change', async (e) => {
  const file = e.target.files[0];
  e.target.value = '';
  if (!file || !state.session) return;
  try {
    const res = await fetch(`/api/session/${state.session}/scenario?name=${encodeURIComponent(file.name)}`,
      { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: await file.text() });
    const body = await res.json().catch(() => ({ message: res.statusText }));
    if (!res.ok) throw new Error(body.message || res.statusText);
    if (state.mode !== 'live') setMode('live');
    onText(body);
  } catch (err) { toast(`scenario: ${err.message}`, 'error'); }
});
$('b-scen-stop').addEventListener('click', () => send({ type: 'scenario_stop' }));
function resetCharacter() { send({ type: 'reset' }); cam.initialized = false; if (state.mode !== 'live') setMode('live'); }
$('b-reset').addEventListener('click', resetCharacter);
function toggleHelp() { $('help').classList.toggle('shown'); }
$('b-help').addEventListener('click', toggleHelp);
$('help').addEventListener('click', toggleHelp);

function toast(text, kind = '') {
  const el = document.createElement('div');
  el.className = `toast ${kind}`;
  // Multi-line messages (a tag expression with a caret under the error) keep their lines and columns.
  if (text.includes('\n')) el.classList.add('pre');
  el.textContent = text;
  const box = $('toasts');
  box.appendChild(el);
  while (box.children.length > 4) box.firstChild.remove();
  const ms = text.includes('\n') ? 7000 : 3500;
  setTimeout(() => el.classList.add('fade'), ms);
  setTimeout(() => el.remove(), ms + 500);
}

// ------------------------------------------------------------------------------------------------
// Debugging panels (their own modules) and the tabs of the left panel
const handlers = {};
const ctx = {
  THREE, scene, state, send, toast, ground, setMode, show, openTab,
  historyFrames: HISTORY_FRAMES,
  history: () => history,
  on: (type, fn) => { (handlers[type] = handlers[type] || []).push(fn); },
  emit: (msg) => onText(msg),
};
state.tab = 'status';
function openTab(name) {
  state.tab = name;
  for (const b of document.querySelectorAll('#tabs button')) b.classList.toggle('active', b.dataset.tab === name);
  for (const t of document.querySelectorAll('#hud .tab')) t.classList.toggle('shown', t.id === `tab-${name}`);
  $('hud').classList.toggle('wide', name !== 'status');
}
for (const b of document.querySelectorAll('#tabs button')) b.addEventListener('click', () => openTab(b.dataset.tab));
const clips = initClips(ctx);
ctx.clips = clips;
const inspector = initInspector(ctx);
const graphs = initGraphs(ctx);
const ghosts = initGhosts(ctx);
const terrain = initTerrain(ctx);
state.groundExtent = () => terrain.extent();
state.drawnGroundAt = (x, z) => terrain.drawnHeight(x, z);

// ------------------------------------------------------------------------------------------------
// HUD and main loop
let hudAt = 0, fpsFrames = 0, fpsAt = performance.now(), bwBytes = 0, bwAt = performance.now(), bwRate = 0;
const costBars = {};

function updateHud(now) {
  const d = state.lastDebug;
  $('h-fps').textContent = state.fps.toFixed(0);
  if (!d) return;
  const us = (v) => (v == null ? '–' : v >= 1000 ? `${(v / 1000).toFixed(2)} ms` : `${v.toFixed(0)} µs`);
  $('h-search').textContent = us(d.search_us);
  $('h-frame').textContent = us(d.frame_us);
  $('h-step').textContent = us(d.server_step_us);
  $('h-clip').textContent = d.clip == null ? '–' : clipLabel(d.clip, d.clip_frame);
  $('h-clip').title = d.clip ?? '';
  $('h-quality').textContent = state.quality;
  $('h-index').textContent = d.frame ?? '–';
  $('h-style').textContent = d.style || (d.tags && d.tags.length ? d.tags.join(', ') : '–');
  const f = history[viewIndex], p = viewIndex > 0 ? history[viewIndex - 1] : null;
  if (f && p && f.time > p.time && d.sim_position && p.debug.sim_position) {
    const v = Math.hypot(d.sim_position[0] - p.debug.sim_position[0], d.sim_position[2] - p.debug.sim_position[2]) / (f.time - p.time);
    $('h-speed').textContent = `${v.toFixed(2)} m/s`;
  }
  const lt = d.last_transition;
  $('h-trans').textContent = lt ? `${lt.from} → ${lt.to} · ${Math.max(0, state.time - lt.time).toFixed(1)} s` : 'none yet';
  if (now - bwAt > 1000) { bwRate = (state.bytesReceived - bwBytes) / ((now - bwAt) / 1000); bwBytes = state.bytesReceived; bwAt = now; }
  $('h-bw').textContent = `${(bwRate / 1000).toFixed(1)} kB/s`;
  state.bandwidth = bwRate;
  const costs = d.channel_costs || {};
  const max = Math.max(1e-6, ...Object.values(costs));
  for (const [name, v] of Object.entries(costs)) {
    if (!costBars[name]) {
      const row = document.createElement('div');
      row.className = 'bar';
      row.innerHTML = `<span title="${name}">${name.replaceAll('_', ' ')}</span><div class="track"><div class="fill"></div></div><span class="val"></span>`;
      $('costs').appendChild(row);
      costBars[name] = row;
    }
    costBars[name].querySelector('.fill').style.width = `${(100 * v) / max}%`;
    costBars[name].querySelector('.val').textContent = v.toFixed(2);
  }
}

function updatePanels() {
  const f = history[viewIndex];
  const tab = state.tab;
  clips.update(f, history, viewIndex);
  inspector.update(f, history, tab === 'search');
  graphs.update(f, history, viewIndex, tab === 'graphs');
}

function checkQuality(now) {
  // After 3 s of frames, decide once: too slow -> the ?quality=low settings, live.
  if (LOW || state.quality !== 'high' || now - qualityFrom < 3000 || !state.framesReceived) return;
  if (state.fps >= AUTO_LOW_FPS) { qualityFrom = Infinity; return; }
  renderer.setPixelRatio(0.5);
  renderer.shadowMap.enabled = false;
  sun.shadow.mapSize.set(512, 512);
  if (sun.shadow.map) { sun.shadow.map.dispose(); sun.shadow.map = null; }
  resize();
  state.quality = `low (auto: ${state.fps.toFixed(0)} fps)`;
  $('h-quality').textContent = state.quality;
  toast(`rendering at ${state.fps.toFixed(0)} fps: switched to low quality (add ?quality=low to start there)`);
}
let qualityFrom = performance.now();

function resize() {
  const w = window.innerWidth, h = window.innerHeight;
  renderer.setSize(w, h, false);
  camera.aspect = w / h;
  // Centre the view in the space above the timeline bar rather than the whole window.
  const bar = $('timeline').offsetHeight + 24;
  camera.setViewOffset(w, h, 0, bar / 2, w, h);
  camera.updateProjectionMatrix();
}
window.addEventListener('resize', resize);
resize();

let last = performance.now();
function frame(now) {
  const dt = Math.min(0.1, (now - last) / 1000);
  last = now;
  fpsFrames += 1;
  if (now - fpsAt > 500) { state.fps = (fpsFrames * 1000) / (now - fpsAt); fpsFrames = 0; fpsAt = now; }
  const pad = gamepadState();
  if (pad) {
    cam.yaw -= pad.look[0] * dt * 2.5;
    cam.pitch = THREE.MathUtils.clamp(cam.pitch - pad.look[1] * dt * 1.5, -0.1, 1.35);
    pumpInput();
  }
  const f = history[viewIndex];
  updateCamera(dt, f && f.debug.sim_position ? f.debug.sim_position : [0, 0, 0]);
  renderer.render(scene, camera);
  if (now - hudAt > 100) { hudAt = now; updateHud(now); updatePanels(); checkQuality(now); }
  ghosts.update(f);
  requestAnimationFrame(frame);
}
requestAnimationFrame(frame);
setInterval(() => send({ type: 'ping', t: performance.now() }), 2000);
connect();
