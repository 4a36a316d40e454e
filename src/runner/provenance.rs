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

/// Whether tracked files differ from HEAD.
pub fn git_dirty(root: &Path) -> bool {
    git(root, &["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty())
}
