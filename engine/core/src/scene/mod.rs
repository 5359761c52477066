//! Scenes without a GPU: the built-in meshes, cameras and camera paths, glTF material
//! scenes, their bake into a stacked atlas and the catalog of named scenes.

pub mod alpha_scene;
pub mod camera;
pub mod catalog;
pub mod material_scene;
mod mesh;
pub mod scene_bake;
pub mod terrain;

pub use mesh::*;
