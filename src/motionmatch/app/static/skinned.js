// The character's skinned body: a glTF (the default body generated for the database skeleton, or the user's
// rigged humanoid from `motionmatch serve --character`) driven by the streamed local rotations.
//
// The server's table (hello.character, see body/rigged_model.py) says per model bone either
//   {source: j, offset: q}  world rotation = (world rotation of database joint j) * q, or
//   {local: q}              local rotation = q (bones the database has no joint for),
// and the hips are placed at root + scale * (database hips - root). Quaternions arrive as (w, x, y, z).
import * as THREE from 'three';
import { GLTFLoader } from 'three/addons/loaders/GLTFLoader.js';

const wxyz = (a, i = 0, out = new THREE.Quaternion()) => out.set(a[i + 1], a[i + 2], a[i + 3], a[i]);

export class SkinnedBody {
  // capsules: the debug capsule group; toggle: a checkbox that shows the capsules over the body.
  constructor(scene, capsules, toggle) {
    this.scene = scene;
    this.capsules = capsules;
    this.toggle = toggle;
    this.root = null;
    this.token = 0;
    this.status = { loaded: false, name: null, bones: 0, error: null, poses: 0, hips: null };
    if (toggle) toggle.addEventListener('change', () => this.updateVisibility());
  }

  updateVisibility() {
    if (this.root) this.root.visible = true;
    this.capsules.visible = !this.root || (this.toggle && this.toggle.checked);
  }

  dispose() {
    if (this.root) this.scene.remove(this.root);
    this.root = null;
    this.bones = [];
    this.status.loaded = false;
    this.updateVisibility();
  }

  // info: hello.character (or null for capsules only); parents: the database skeleton's parents.
  async load(info, parents) {
    const token = ++this.token;
    this.dispose();
    this.parents = parents;
    if (!info) return;
    try {
      const gltf = await new GLTFLoader().loadAsync(info.url);
      if (token !== this.token) return;    // a newer hello arrived meanwhile
      const root = gltf.scene;
      // GLTFLoader sanitizes node names ('mixamorig:Hips' -> 'mixamorigHips').
      const specs = new Map(Object.entries(info.bones).map(([n, s]) => [THREE.PropertyBinding.sanitizeNodeName(n), s]));
      const hipsName = THREE.PropertyBinding.sanitizeNodeName(info.hips);
      this.bones = [];
      const index = new Map();
      root.traverse((o) => {    // pre-order: parents before children
        o.castShadow = true;
        if (o.isSkinnedMesh) o.frustumCulled = false;    // its bounding box is the bind pose's
        const spec = specs.get(o.name);
        if (!spec) return;
        index.set(o, this.bones.length);
        this.bones.push({ node: o, spec, parent: -1, world: new THREE.Quaternion(),
          offset: spec.offset ? wxyz(spec.offset) : null, local: spec.local ? wxyz(spec.local) : null });
      });
      this.scene.add(root);
      root.updateMatrixWorld(true);
      for (const b of this.bones) {
        b.parent = index.has(b.node.parent) ? index.get(b.node.parent) : -1;
        // Fixed world rotation of a non-bone parent (e.g. an armature node).
        b.parentWorld = b.node.parent.getWorldQuaternion(new THREE.Quaternion());
      }
      this.hips = this.bones.find((b) => b.node.name === hipsName) || null;
      this.info = info;
      this.root = root;
      this.sourceWorld = [];
      Object.assign(this.status, { loaded: true, name: info.name, bones: this.bones.length, error: null });
      this.updateVisibility();
    } catch (err) {
      this.status.error = String(err);
      console.warn(`character body not loaded: ${err}`);
    }
  }

  // positions: world joint positions (J*3); rotations: local joint rotations (J*4, w x y z) or null.
  pose(positions, rotations) {
    if (!this.root || !rotations) return;
    const P = this.parents, J = P.length, W = this.sourceWorld;
    for (let j = 0; j < J; j++) {
      if (!W[j]) W[j] = new THREE.Quaternion();
      wxyz(rotations, 4 * j, W[j]);
      if (P[j] >= 0) W[j].premultiply(W[P[j]]);
    }
    const inv = new THREE.Quaternion();
    for (const b of this.bones) {
      const pw = b.parent >= 0 ? this.bones[b.parent].world : b.parentWorld;
      if (b.offset) b.world.copy(W[b.spec.source]).multiply(b.offset);
      else b.world.copy(pw).multiply(b.local);
      b.node.quaternion.copy(inv.copy(pw).invert().multiply(b.world));
    }
    if (this.hips) {
      const h = 3 * this.info.hips_source, s = this.info.scale;
      const target = new THREE.Vector3(
        positions[0] + s * (positions[h] - positions[0]),
        // ground: the model's soles on the floor where the database's feet are planted (live_retarget).
        positions[1] + s * (positions[h + 1] - positions[1]) + (this.info.ground || 0),
        positions[2] + s * (positions[h + 2] - positions[2]));
      const parent = this.hips.node.parent;
      parent.updateWorldMatrix(true, false);
      this.hips.node.position.copy(parent.worldToLocal(target.clone()));
      this.status.hips = target.toArray();
    }
    this.status.poses += 1;
  }
}
