//! `tessera bake … --status` and `--merge`: what a sharded bake's folder holds, and the
//! atlas merged from it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use tessera_core::bake::cache::BakeCache;
use tessera_core::bake::shard::MergeForm;

use crate::progress::Bar;
use crate::{BakeArgs, bake_key, check_output, record};

/// `tessera bake … --status [N]`: the state of each shard's part.
pub(crate) fn run_status(args: &BakeArgs, count: u32, expected: Option<&str>) -> Result<ExitCode> {
    use tessera_core::bake::shard::runs_text;
    use tessera_core::bake::shard_plan::PartState;
    let count = (count > 0).then_some(count);
    let status = tessera_core::bake::shard_plan::status(&args.output, count, expected, &[])
        .with_context(|| format!("listing the shard parts of {}", args.output.display()))?;
    let dir = tessera_core::bake::shard::shard_dir(&args.output);
    if let Some(first) = status.strays.first() {
        println!("  ignored  {} file(s) named like parts of no bake, e.g. {first}", status.strays.len());
    }
    let parts = &status.parts;
    if parts.is_empty() {
        println!("{}: no shard parts (give --status N to list the shards of an N-shard bake)", dir.display());
        return Ok(ExitCode::from(1));
    }
    // Runs of shards to rerun, by shard count.
    let mut rerun: std::collections::BTreeMap<u32, Vec<(u32, u32)>> = Default::default();
    for p in parts {
        let line = match &p.state {
            PartState::Done { tiles, bytes } => {
                format!("done     {tiles} tiles, {:.1} MiB", *bytes as f64 / (1 << 20) as f64)
            }
            PartState::Missing if p.last > p.shard.index => {
                format!("missing  ({} parts)", p.last - p.shard.index + 1)
            }
            PartState::Missing => "missing".to_string(),
            PartState::Stale { reason } => format!("stale    {reason}"),
            PartState::Damaged { reason } => format!("damaged  {reason}"),
        };
        // Parts of another shard count are in the way, not to be rerun.
        if !matches!(p.state, PartState::Done { .. }) && count.is_none_or(|c| p.shard.count == c) {
            rerun.entry(p.shard.count).or_default().push((p.shard.index, p.last));
        }
        let (i, n) = (p.shard.index, p.shard.count);
        let shard = if p.last > i { format!("{i}-{}/{n}", p.last) } else { format!("{i}/{n}") };
        println!("  {shard:>9}  {line}");
    }
    if rerun.is_empty() {
        let out = args.output.display();
        match tessera_core::bake::shard_plan::merged_from(&args.output, &status) {
            Some(MergeForm::Split) => {
                println!("all {} parts done and merged: {out} is a split atlas of them", parts.len())
            }
            Some(MergeForm::OneFile) => {
                println!("all {} parts done and merged into one file: {out}", parts.len())
            }
            _ => println!("all {} parts done: run the same command with --merge", parts.len()),
        }
        Ok(ExitCode::SUCCESS)
    } else {
        let runs: Vec<String> =
            rerun.iter().map(|(n, runs)| runs_text(runs, |i| format!("--shard {i}/{n}"))).collect();
        println!("to (re)run: {}", runs.join(", "));
        Ok(ExitCode::from(1))
    }
}

/// `tessera bake … --merge`: the atlas from its shard parts.
pub(crate) fn run_merge(args: &BakeArgs) -> Result<ExitCode> {
    let remote = tessera_core::format::atlas::is_remote_location(&args.output);
    if !remote {
        check_output(&args.output, args.inputs.iter().map(PathBuf::as_path))?;
    }
    if remote && let Some(scratch) = &args.scratch_dir {
        // Staging folders that killed shards left in the scratch folder given.
        tessera_core::bake::shard::sweep_stages(scratch);
    }
    let start = std::time::Instant::now();
    let form = if args.one_file { MergeForm::OneFile } else { MergeForm::Split };
    // A one-file merge copies tiles; a split merge only indexes the parts.
    let bar = if args.one_file { Bar::new("merge", 0) } else { Bar::parts("merge") };
    let report = tessera_core::bake::shard::merge_shards(&args.output, form, &bar)
        .with_context(|| format!("merging the shards of {}", args.output.display()))?;
    bar.clear();
    if !remote && (!args.inputs.is_empty() || !args.generate.is_empty()) {
        record(&BakeCache::new(&args.output), &bake_key(args));
    }
    let dir = tessera_core::bake::shard::shard_dir(&args.output);
    if args.one_file && !args.keep_shards {
        // Only what the bake wrote: a file the user put there stays.
        match tessera_core::bake::shard::remove_parts(&args.output, report.parts) {
            Ok(r) if !r.left.is_empty() => eprintln!(
                "tessera: removed the {} parts from {}, kept what the bake did not write: {}{}",
                r.removed,
                dir.display(),
                r.left.iter().take(8).cloned().collect::<Vec<_>>().join(", "),
                if r.left.len() > 8 { format!(" and {} more", r.left.len() - 8) } else { String::new() }
            ),
            Ok(_) => {}
            Err(e) => eprintln!("tessera: warning: {e}; delete the parts by hand"),
        }
    }

    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let moved = report.blob_bytes + report.record_bytes + report.file_bytes;
    if report.split {
        println!(
            "merged {} shard parts, {} tiles into split atlas {} ({:.1} KiB index over {:.1} MiB of data in {}) \
             in {:.2} s; moved {:.1} KiB ({:.3}% of the data)",
            report.parts,
            report.tiles,
            args.output.display(),
            report.file_bytes as f64 / 1024.0,
            mib(report.data_bytes),
            dir.display(),
            start.elapsed().as_secs_f64(),
            moved as f64 / 1024.0,
            100.0 * moved as f64 / report.data_bytes.max(1) as f64
        );
    } else {
        println!(
            "merged {} shard parts, {} tiles into {} ({:.1} MiB) in {:.2} s; moved {:.1} MiB",
            report.parts,
            report.tiles,
            args.output.display(),
            mib(report.file_bytes),
            start.elapsed().as_secs_f64(),
            mib(moved)
        );
    }
    Ok(ExitCode::SUCCESS)
}
