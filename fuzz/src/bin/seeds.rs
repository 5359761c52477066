//! Writes the seed corpora of the fuzz targets: `seeds DIR [TARGET...]` writes
//! `DIR/TARGET/*` for the named targets (all when none are named).

use std::path::PathBuf;
use std::process::ExitCode;

use tessera_core::fuzz::{Target, seeds};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next().map(PathBuf::from) else {
        eprintln!("usage: seeds DIR [TARGET...]  (targets: atlas basis gltf camera image)");
        return ExitCode::FAILURE;
    };
    let names: Vec<String> = args.collect();
    let mut targets = Vec::new();
    for name in &names {
        match Target::from_name(name) {
            Some(t) => targets.push(t),
            None => {
                eprintln!("seeds: unknown target '{name}' (targets: atlas basis gltf camera image)");
                return ExitCode::FAILURE;
            }
        }
    }
    if targets.is_empty() {
        targets = Target::ALL.to_vec();
    }
    for target in targets {
        let out = dir.join(target.name());
        match seeds::write_seeds(target, &out) {
            Ok(n) => println!("{}: {n} seeds in {}", target.name(), out.display()),
            Err(e) => {
                eprintln!("seeds: {}: {e}", out.display());
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
