//! The real CC0 dungeon level (castle-game-engine-doc, fetched by
//! `assets/fetch-data.sh --dungeon`) loads with every material, texture and the sun.

#![allow(clippy::unwrap_used)] // Test helpers fail loudly by design.

use std::collections::HashSet;
use std::path::PathBuf;

use tessera_core::scene::material_scene::{ImageRef, load_gltf, scene_images};

fn dungeon_gltf() -> PathBuf {
    let p = tessera_core::bake::source::data_dir().join("dungeon/level-dungeon.gltf");
    assert!(
        p.exists(),
        "{} is missing: run `assets/fetch-data.sh --dungeon` (scripts/test does) to fetch the CC0 \
         dungeon level",
        p.display()
    );
    p
}

#[test]
fn the_real_dungeon_loads_with_its_materials_textures_and_sun() {
    let scene = load_gltf(&dungeon_gltf()).unwrap();
    assert_eq!(scene.materials.len(), 12, "the level's 12 materials, no default one needed");
    assert!(scene.meshes.len() >= 20, "{} meshes", scene.meshes.len());
    let triangles: usize = scene.meshes.iter().map(|m| m.mesh.triangle_count()).sum();
    assert!(triangles > 1000, "{triangles} triangles");
    assert!(scene.meshes.iter().all(|m| m.material < scene.materials.len()));
    let images = scene_images(&scene);
    assert_eq!(images.len(), 22, "22 distinct PNGs");
    for image in &images {
        let ImageRef::File(p) = image else { panic!("{image} is embedded") };
        assert!(p.is_file(), "{} is missing", p.display());
    }
    let normals: HashSet<_> =
        scene.materials.iter().filter(|m| m.normal.is_some()).map(|m| &m.name).collect();
    assert_eq!(normals.len(), 11, "every textured material has a normal map: {normals:?}");
    let gate = scene.materials.iter().find(|m| m.name == "wooden-gate-2").unwrap();
    assert_eq!(gate.alpha_cutoff, Some(0.0));
    let sun = scene.sun_direction.expect("the level's directional light");
    assert!((sun.length() - 1.0).abs() < 1e-4 && sun.y < 0.0, "the sun shines downwards: {sun}");
    let size = scene.bounds_max - scene.bounds_min;
    assert!(size.min_element() > 1.0 && size.max_element() < 1000.0, "bounds {size}");
}
