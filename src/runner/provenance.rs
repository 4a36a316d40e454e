//! Facts about the code and machine that produced a run.
use std::path::Path;
use std::process::Command;

/// `rustc --version` of the compiler that built this binary (captured by build.rs).
pub const RUSTC: &str = env!("MCGP_RUSTC_VERSION");

fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("-C").arg(root).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// HEAD's commit hash, or "unknown" outside a git checkout.
pub fn git_commit(root: &Path) -> String {
    git(root, &["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into())
}

/// Whether tracked files other than the outputs (`results/`, `reports/`) differ from HEAD: the
/// committed results of one experiment, rewritten by its run, do not make the code of the next
/// run in the same checkout "dirty".
pub fn git_dirty(root: &Path) -> bool {
    git(root, &["status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results", ":(exclude)reports"])
        .is_some_and(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewritten_outputs_do_not_make_the_code_dirty_but_a_changed_source_does() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let sh =
            |args: &[&str]| assert!(Command::new("git").arg("-C").arg(root).args(args).output().unwrap().status.success(), "git {args:?}");
        sh(&["init", "-q"]);
        std::fs::create_dir_all(root.join("results/x")).unwrap();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("results/x/summary.csv"), "a").unwrap();
        std::fs::write(root.join("src/lib.rs"), "a").unwrap();
        sh(&["add", "."]);
        sh(&["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c"]);
        assert!(!git_dirty(root));
        std::fs::write(root.join("results/x/summary.csv"), "b").unwrap();
        assert!(!git_dirty(root), "a rewritten result is output, not code");
        std::fs::write(root.join("src/lib.rs"), "b").unwrap();
        assert!(git_dirty(root));
    }
}
