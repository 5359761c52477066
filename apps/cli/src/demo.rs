//! `tessera demo`: the README's main job. Bakes the built-in labelled texture once
//! into a cache folder, verifies it, and writes a report.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use tessera_core::atlas::{Atlas, ColorSpace, Wrap};
use tessera_core::bake::{BakeInput, BakeOptions, bake};
use tessera_core::source::Generated;

/// Arguments of `tessera demo`.
#[derive(clap::Args)]
pub(crate) struct DemoArgs {
    /// Where the report goes.
    #[arg(long, default_value = "out/demo")]
    out: PathBuf,
    /// Size of the built-in texture.
    #[arg(long, default_value = "8192x4096", value_parser = crate::parse_size)]
    size: (u32, u32),
    /// Bake again even when a cached atlas exists.
    #[arg(long)]
    rebake: bool,
}

/// Folder for cached bakes: `$TESSERA_CACHE`, else `$XDG_CACHE_HOME/tessera`, else `~/.cache/tessera`.
pub(crate) fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TESSERA_CACHE") {
        return d.into();
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("tessera");
    }
    std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(std::env::temp_dir).join(".cache/tessera")
}

/// Runs `tessera demo`.
pub(crate) fn run(args: &DemoArgs) -> Result<ExitCode> {
    let (w, h) = args.size;
    let cache = cache_dir();
    std::fs::create_dir_all(&cache).with_context(|| format!("creating cache folder {}", cache.display()))?;
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let atlas_path = cache.join(format!("demo-{w}x{h}.tsa"));
    let cached = !args.rebake && Atlas::open(&atlas_path).is_ok();
    if !cached {
        println!("baking the built-in {w}x{h} labelled texture into {}", atlas_path.display());
        let input = BakeInput {
            name: "demo".into(),
            source: Box::new(Generated::new(w, h)),
            wrap: Wrap::Clamp,
            color: ColorSpace::Srgb,
        };
        let pb = crate::progress_bar(0);
        bake(vec![input], &atlas_path, &BakeOptions::default(), &pb)?;
        pb.finish_and_clear();
    } else {
        println!("using cached atlas {}", atlas_path.display());
    }
    let atlas = Atlas::open(&atlas_path)?;
    let pb = crate::progress_bar(atlas.tile_count());
    pb.set_message("verifying");
    let bad = atlas.verify(&pb);
    pb.finish_and_clear();
    let summary = atlas.summary();
    print!("{}", crate::inspect::table(&summary));
    let report = args.out.join("report.json");
    let json = serde_json::json!({ "atlas": summary, "bad_tiles": bad.len(), "cached": cached });
    std::fs::write(&report, serde_json::to_string_pretty(&json)?)
        .with_context(|| format!("writing {}", report.display()))?;
    println!(
        "verified {} tiles ({} bad); report written to {}",
        atlas.tile_count(),
        bad.len(),
        report.display()
    );
    Ok(if bad.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
