//! Atomic file writes: every result, split and report file goes through `write_atomic`, so a
//! reader (or a run resumed after a kill) sees the old file or the new one, never half of one.
use std::io::Write;
use std::path::Path;

/// Write `bytes` to `path` via a temporary file in the same folder (created if missing),
/// flushed to disk and renamed over `path`. The file is world-readable (0644 on Unix).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    // Temporary files are created owner-only; results and reports are meant to be read. Set
    // before the sync, so that the mode is on disk with the contents.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file().set_permissions(std::fs::Permissions::from_mode(0o644))?;
    }
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    // The rename itself is durable only once the directory is: after a power loss the file
    // would otherwise be either whole or absent (a finished cell computed again), never torn.
    // Best effort: the new file is in place once renamed, so a failure here (a filesystem that
    // cannot sync a directory) must not report the write as failed and have it redone.
    #[cfg(unix)]
    let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    Ok(())
}

/// Remove the temporary files (`.tmp*`) that a process killed between creating and renaming
/// them left in `dir` and its subfolders. Call it only while no other process writes there
/// (a run holds its experiment's lock). Returns how many were removed.
pub fn remove_stale_temporaries(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let mut removed = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        let is_tmp = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(".tmp"));
        // The entry's own type: a symbolic link to a folder is not followed (it may lead out of
        // the results, or round in a cycle).
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            removed += remove_stale_temporaries(&path);
        } else if is_tmp && std::fs::remove_file(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_replaces_and_leaves_no_temporary_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/x.txt");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(dir.path().join("sub")).unwrap().count(), 1);
    }

    #[test]
    fn stale_temporaries_are_removed_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["a.json", "cells/.tmpAbC12", "cells/k.json", ".tmpX", "figures/f.svg"] {
            let p = dir.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, b"x").unwrap();
        }
        assert_eq!(remove_stale_temporaries(dir.path()), 2);
        assert!(
            dir.path().join("cells/k.json").exists() && dir.path().join("figures/f.svg").exists() && dir.path().join("a.json").exists()
        );
        assert!(!dir.path().join(".tmpX").exists() && !dir.path().join("cells/.tmpAbC12").exists());
    }

    #[cfg(unix)]
    #[test]
    fn a_linked_folder_is_not_entered() {
        let (outside, dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(outside.path().join(".tmpKeep"), b"x").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("linked")).unwrap();
        // A cycle as well: a link to the folder itself.
        std::os::unix::fs::symlink(dir.path(), dir.path().join("self")).unwrap();
        assert_eq!(remove_stale_temporaries(dir.path()), 0);
        assert!(outside.path().join(".tmpKeep").exists());
    }
}
