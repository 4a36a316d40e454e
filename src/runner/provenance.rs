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

/// The machine this process computes on, stored with every cell so that its times can be read:
/// the CPU (brand; on x86 also the vendor's family and model numbers, which tell
/// microarchitectures apart where a virtual machine's brand string does not, and the widest
/// vector instructions the process may use) and the logical CPUs available to the process.
/// E.g. "AMD EPYC (AuthenticAMD family 25 model 17, AVX-512), 2 CPUs".
pub fn machine() -> &'static str {
    static MACHINE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    MACHINE.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        format!("{}, {cpus} CPU{}", cpu(), if cpus == 1 { "" } else { "s" })
    })
}

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
fn cpu() -> String {
    let id = raw_cpuid::CpuId::new();
    let vendor = id.get_vendor_info().map_or_else(|| "unknown vendor".to_string(), |v| v.as_str().to_string());
    let brand = id.get_processor_brand_string().map(|b| b.as_str().trim().to_string()).filter(|b| !b.is_empty());
    let family = id.get_feature_info().map_or_else(String::new, |f| format!(" family {} model {}", f.family_id(), f.model_id()));
    let simd = if std::arch::is_x86_feature_detected!("avx512f") {
        "AVX-512"
    } else if std::arch::is_x86_feature_detected!("avx2") {
        "AVX2"
    } else {
        "no AVX2"
    };
    format!("{} ({vendor}{family}, {simd})", brand.as_deref().unwrap_or(std::env::consts::ARCH))
}

#[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
fn cpu() -> String {
    std::env::consts::ARCH.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_names_the_cpu_and_the_cpus_available() {
        let m = machine();
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        assert!(m.ends_with(&format!(", {cpus} CPU{}", if cpus == 1 { "" } else { "s" })), "{m}");
        #[cfg(target_arch = "x86_64")]
        {
            // Family and model as /proc/cpuinfo reports them (the kernel decodes CPUID the same way).
            if let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") {
                let field = |name: &str| {
                    info.lines()
                        .find(|l| l.split(':').next().is_some_and(|k| k.trim() == name))
                        .and_then(|l| l.split(':').nth(1))
                        .map(|v| v.trim().to_string())
                };
                if let (Some(family), Some(model)) = (field("cpu family"), field("model")) {
                    assert!(
                        m.contains(&format!(" family {family} model {model},")),
                        "{m} against /proc/cpuinfo's family {family} model {model}"
                    );
                }
            }
            assert!(m.contains("AVX"), "{m}");
        }
    }

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
