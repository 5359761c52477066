//! What the viewer was asked to open: an atlas, an image, a glTF scene, a named scene
//! from the catalog or, with no argument, the built-in texture.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use tessera::core::Atlas;
use tessera::core::scene::catalog::SCENES;

/// One thing the viewer can open, decided from the command line or a dropped file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Input {
    /// No argument: the built-in 8192×4096 labelled texture.
    Builtin,
    /// A Tessera atlas, opened as it is on the built-in meshes.
    Atlas(PathBuf),
    /// An image file, baked into the cache folder on first open.
    Image(PathBuf),
    /// A glTF 2.0 scene (`.gltf` or `.glb`), baked into the cache folder on first open
    /// and drawn lit with its materials.
    Gltf(PathBuf),
    /// A scene of [`SCENES`] by name, prepared from the data folder.
    Named(String),
}

impl Input {
    /// Classifies `arg`: an existing file is a glTF scene by its extension, an atlas when
    /// it opens as one (or is named `.tsa`), else an image; a path that does not exist is
    /// a named scene when [`SCENES`] lists it. Cheap: at most an atlas header is read.
    pub(crate) fn classify(arg: Option<&Path>) -> Result<Self> {
        let Some(arg) = arg else { return Ok(Self::Builtin) };
        if tessera::core::format::atlas::is_remote_location(arg) {
            // s3:// or http(s)://: opened (and any error reported) when the view starts.
            return Ok(Self::Atlas(arg.to_path_buf()));
        }
        let meta = match std::fs::metadata(arg) {
            Ok(meta) => meta,
            Err(e) => {
                if let Some(name) = arg.to_str().filter(|n| SCENES.iter().any(|s| s.0 == *n)) {
                    return Ok(Self::Named(name.to_owned()));
                }
                return Err(e).with_context(|| {
                    format!(
                        "opening {}: it is neither a file nor a scene name ({})",
                        arg.display(),
                        scene_names()
                    )
                });
            }
        };
        anyhow::ensure!(meta.is_file(), "{} is not a file", arg.display());
        let ext = arg.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
        if ext == "gltf" || ext == "glb" {
            return Ok(Self::Gltf(arg.to_path_buf()));
        }
        match Atlas::open(arg) {
            Ok(_) => Ok(Self::Atlas(arg.to_path_buf())),
            Err(e) if ext == "tsa" => Err(e).with_context(|| format!("opening atlas {}", arg.display())),
            Err(_) => Ok(Self::Image(arg.to_path_buf())),
        }
    }

    /// How the input is named to the user (window title, progress, messages): the scene
    /// name, or the file name.
    pub(crate) fn display_name(&self) -> String {
        let file = |p: &Path| {
            p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned())
        };
        match self {
            Self::Builtin => "the built-in 8192x4096 labelled texture".into(),
            // A URL's query (a presigned URL's credentials) is never shown.
            Self::Atlas(p) | Self::Image(p) | Self::Gltf(p) => {
                file(&tessera::core::format::atlas::display_location(p))
            }
            Self::Named(name) => name.clone(),
        }
    }
}

/// The names of the catalog's scenes, for messages.
pub(crate) fn scene_names() -> String {
    SCENES.iter().map(|s| s.0).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera::core::bake::source::Generated;
    use tessera::core::bake::{BakeInput, BakeOptions, bake};
    use tessera::core::format::atlas::{ColorSpace, Wrap};

    #[test]
    fn inputs_are_classified_by_existence_extension_and_content() {
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path();
        assert_eq!(Input::classify(None).expect("no argument"), Input::Builtin);

        let atlas = d.join("small.tsa");
        let input = BakeInput {
            name: "demo".into(),
            source: Box::new(Generated::new(256, 128)),
            wrap: Wrap::Clamp,
            color: ColorSpace::Srgb,
            codec: None,
            regions: Vec::new(),
        };
        bake(vec![input], &atlas, &BakeOptions::default(), &tessera::core::NoProgress).expect("bake");
        assert_eq!(Input::classify(Some(&atlas)).expect("atlas"), Input::Atlas(atlas.clone()));
        // An atlas under another extension is still an atlas.
        let renamed = d.join("small.bin");
        std::fs::copy(&atlas, &renamed).expect("copy");
        assert_eq!(Input::classify(Some(&renamed)).expect("atlas"), Input::Atlas(renamed));

        let image = d.join("photo.jpg");
        std::fs::write(&image, b"decoded later, on the bake thread").expect("write");
        assert_eq!(Input::classify(Some(&image)).expect("image"), Input::Image(image.clone()));

        for name in ["level.gltf", "LEVEL.GLB"] {
            let gltf = d.join(name);
            std::fs::write(&gltf, b"{}").expect("write");
            assert_eq!(Input::classify(Some(&gltf)).expect("gltf"), Input::Gltf(gltf.clone()));
        }

        for (name, _) in SCENES {
            let got = Input::classify(Some(Path::new(name))).expect("scene name");
            assert_eq!(got, Input::Named((*name).to_owned()));
            assert_eq!(got.display_name(), *name);
        }

        let bad_atlas = d.join("broken.tsa");
        std::fs::write(&bad_atlas, b"not an atlas at all, but long enough to hold a header? no")
            .expect("write");
        let e = format!("{:#}", Input::classify(Some(&bad_atlas)).expect_err("broken atlas"));
        assert!(e.contains("broken.tsa"), "{e}");

        // A tiled TIFF is streamed without a bake (a COG); one in strips is baked first.
        let png = d.join("gradient.png");
        image::RgbaImage::from_fn(300, 200, |x, y| image::Rgba([x as u8, y as u8, 128, 255]))
            .save(&png)
            .expect("png");
        let gdal = |args: &[&str], to: &Path| {
            let out = std::process::Command::new("gdal_translate")
                .args(["-q"])
                .args(args)
                .arg(&png)
                .arg(to)
                .output()
                .expect("gdal_translate runs (apt-get install gdal-bin)");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        };
        let (tiled, strips) = (d.join("tiled.tif"), d.join("strips.tif"));
        gdal(&["-co", "TILED=YES"], &tiled);
        gdal(&[], &strips);
        assert_eq!(Input::classify(Some(&tiled)).expect("COG"), Input::Atlas(tiled));
        assert_eq!(Input::classify(Some(&strips)).expect("TIFF"), Input::Image(strips));

        let e = format!("{:#}", Input::classify(Some(Path::new("no-such-scene"))).expect_err("unknown"));
        assert!(e.contains("no-such-scene") && e.contains("dungeon"), "{e}");
        let e = format!("{:#}", Input::classify(Some(d)).expect_err("a folder"));
        assert!(e.contains("is not a file"), "{e}");
    }
}
