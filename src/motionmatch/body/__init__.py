"""The character's body: meshes, rigged models and the glTF export."""
