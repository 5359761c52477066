//! Removing what a sharded bake wrote, and only that: its parts once merged into one
//! file, the temporary files of its killed shards, and the local staging folders of
//! shards that baked into object storage.

use super::*;

/// Name prefix of the local staging folder of a shard baking into object storage,
/// `tessera-shard-{pid}-{I}-of-{N}.tmp`, in the scratch folder (else the system's
/// temporary folder). It holds the part while it is encoded (spool included), then
/// uploaded.
pub const STAGE_PREFIX: &str = "tessera-shard-";

/// Makes the staging folder of `shard` in `root`: listed for the signal handler
/// ([`crate::temp_files::remove_all`]) and deleted with its contents when dropped. The
/// staging folders that killed shards left in `root` (their process gone, whatever atlas
/// they baked) are deleted first.
#[cfg(feature = "remote")]
pub(crate) fn stage_folder(root: &Path, shard: Shard) -> Result<TempPath, ShardError> {
    sweep_stages(root);
    let name = temp_name(STAGE_PREFIX, &format!("-{}-of-{}", shard.index, shard.count));
    let stage = TempPath::new_folder(root.join(name));
    std::fs::create_dir_all(stage.path())
        .map_err(|source| ShardError::Io { path: stage.path().to_path_buf(), source })?;
    Ok(stage)
}

/// Deletes the staging folders ([`STAGE_PREFIX`]) in `root` of shards whose process is
/// gone (killed before they could clean up); returns how many. A shard baking into
/// object storage does this first, and so does a merge there (in the system's temporary
/// folder).
pub fn sweep_stages(root: &Path) -> usize {
    crate::temp_files::sweep_folders(root, STAGE_PREFIX)
}

/// What [`remove_parts`] did in `OUT.shards/`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartsRemoved {
    /// Files deleted: the parts, and temporary files of the bake's killed shards.
    pub removed: usize,
    /// Names left in the folder (sorted): files the bake did not write, parts of another
    /// shard count, a live shard's temporary file, or what could not be deleted.
    pub left: Vec<String>,
    /// Whether the folder itself was removed (nothing was left in it).
    pub folder_removed: bool,
}

/// After a merge into one file of a bake of `count` shards: deletes from `OUT.shards/`
/// the files that bake wrote there (its parts `I-of-N.part`, and the temporary files
/// `.I-of-N.{pid}….tmp` of its shards whose process is gone), then the folder if that
/// emptied it. Anything else stays and is listed: a file the user put there is never
/// deleted.
pub fn remove_parts(out: &Path, count: u32) -> Result<PartsRemoved, ShardError> {
    let dir = shard_dir(out);
    let io = |source| ShardError::Io { path: dir.clone(), source };
    let mut done = PartsRemoved::default();
    for entry in std::fs::read_dir(&dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let ours = Shard::from_part_name(&name).is_some_and(|s| s.count == count)
            || own_temp_file(&name, count, &path);
        // Never a folder, whatever its name; a link is deleted, not what it points to.
        let file = entry.file_type().is_ok_and(|t| !t.is_dir());
        if ours && file && std::fs::remove_file(&path).is_ok() {
            done.removed += 1;
        } else {
            done.left.push(name);
        }
    }
    done.left.sort_unstable();
    done.folder_removed = done.left.is_empty() && std::fs::remove_dir(&dir).is_ok();
    Ok(done)
}

/// Whether `name` (at `path`) is a temporary file a shard of a `count`-shard bake wrote
/// (`.I-of-N.{pid}[-spool].tmp`, [`ShardWriter`]) and left when killed.
fn own_temp_file(name: &str, count: u32, path: &Path) -> bool {
    let Some((shard, _)) = name.strip_prefix('.').and_then(|rest| rest.split_once('.')) else {
        return false;
    };
    Shard::from_part_name(&format!("{shard}.part")).is_some_and(|s| s.count == count)
        && crate::temp_files::left_by_gone_process(name, &format!(".{shard}."), path).is_some()
}
