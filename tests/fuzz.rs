//! Seeded, bounded fuzzing of `mcgp check` through the binary: mutated specs and corrupted
//! data files. Every input must end in under `LIMIT` with exit status 0 (accepted) or 2
//! (rejected), never a panic, and a rejection must name the file (and, for a spec, the line).
//! `MCGP_FUZZ_SPECS` / `MCGP_FUZZ_DATA` set the number of inputs (defaults 300 and 120).
use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(30);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A line on stderr that the test harness does not capture, so CI's log shows the counts.
fn report(line: &str) {
    use std::io::Write;
    writeln!(std::io::stderr(), "{line}").ok();
}

fn count(var: &str, default: usize) -> usize {
    std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// `mcgp check spec --data data`: (exit code, stderr, elapsed), killed past `LIMIT`.
fn check(spec: &Path, data: &Path) -> (Option<i32>, String, Duration) {
    let t0 = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcgp"))
        .arg("check")
        .arg(spec)
        .arg("--data")
        .arg(data)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mcgp starts");
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        if t0.elapsed() > LIMIT {
            child.kill().ok();
            panic!("{}: no answer within {LIMIT:?} (a hang)", spec.display());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = child.wait_with_output().expect("output");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned(), t0.elapsed())
}

const VALUES: &[&str] = &[
    "",
    "\"\"",
    ".inf",
    "-.inf",
    ".nan",
    "-1",
    "0",
    "1e400",
    "[]",
    "{}",
    "~",
    "[[[",
    "}",
    "- a",
    "true",
    "\"\\u0000\"",
    "99999999999999999999",
    "{ protocol: kfold, k: 0 }",
    "{ from: nowhere }",
    "[iris, iris]",
    "laplace",
    "{ type: sum, terms: [] }",
    "{ per_class: true }",
];

/// One to three random edits of the text.
fn mutate(text: &str, rng: &mut Pcg64) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    for _ in 0..rng.random_range(1..=3) {
        if lines.is_empty() {
            break;
        }
        let i = rng.random_range(0..lines.len());
        match rng.random_range(0..8) {
            0 => {
                lines.remove(i);
            }
            1 => lines.insert(i, lines[i].clone()),
            2 => {
                // A value replaced.
                if let Some(p) = lines[i].find(": ") {
                    let v = VALUES[rng.random_range(0..VALUES.len())];
                    lines[i] = format!("{}: {v}", &lines[i][..p]);
                }
            }
            3 => lines[i] = format!("  {}", lines[i]),
            4 => lines[i] = lines[i].trim_start().to_string(),
            5 => {
                let j = rng.random_range(0..lines.len());
                lines.swap(i, j);
            }
            6 => {
                // Bytes inserted at a character boundary.
                let mut chars: Vec<char> = lines[i].chars().collect();
                let at = rng.random_range(0..=chars.len());
                let junk = ['\t', '\'', '"', ':', '#', '{', '[', '&', '*', '!', '%', '\u{7f}', 'é', '\u{0}'];
                chars.insert(at, junk[rng.random_range(0..junk.len())]);
                lines[i] = chars.into_iter().collect();
            }
            _ => {
                // Cut short.
                lines.truncate(i);
            }
        }
    }
    lines.join("\n") + "\n"
}

#[test]
fn mutated_specs_are_accepted_or_rejected_cleanly() {
    let seeds: Vec<String> = [
        "experiments/quickstart.yaml",
        "experiments/ci/chai2012-table4.yaml",
        "experiments/ci/gr2006-fig6.yaml",
        "experiments/ci/gr2006-table1.yaml",
    ]
    .iter()
    .map(|p| std::fs::read_to_string(root().join(p)).unwrap())
    .collect();
    let dir = std::env::temp_dir().join(format!("mcgp-fuzz-specs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = Pcg64::seed_from_u64(20261124);
    let n = count("MCGP_FUZZ_SPECS", 300);
    let (mut accepted, mut rejected, mut slowest) = (0, 0, Duration::ZERO);
    for k in 0..n {
        let text = mutate(&seeds[k % seeds.len()], &mut rng);
        let spec = dir.join(format!("m{k}.yaml"));
        std::fs::write(&spec, &text).unwrap();
        let (code, stderr, took) = check(&spec, &root().join("data"));
        slowest = slowest.max(took);
        assert!(!stderr.contains("panicked"), "{} panicked:\n{stderr}\n--- spec ---\n{text}", spec.display());
        match code {
            Some(0) => accepted += 1,
            Some(2) => {
                rejected += 1;
                // file:line:column: for anything in the spec; data errors name their file too.
                let named = stderr.contains(&format!("{}:", spec.display())) || stderr.contains("data/");
                assert!(named, "{}: the error names no file and line:\n{stderr}\n--- spec ---\n{text}", spec.display());
            }
            other => panic!("{}: exit status {other:?}:\n{stderr}\n--- spec ---\n{text}", spec.display()),
        }
    }
    report(&format!(
        "spec fuzz: {n} mutated specs tried, {accepted} accepted, {rejected} rejected cleanly, 0 panics, 0 hangs, slowest {slowest:?}"
    ));
    std::fs::remove_dir_all(&dir).ok();
}

/// A data folder with one CSV, one whitespace and one LIBSVM dataset, and a spec using all three.
fn data_folder(dir: &Path) -> PathBuf {
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::copy(root().join("data/iris.data"), data.join("iris.data")).unwrap();
    let ws: String = (0..60).map(|i| format!("{} {} {}\n", i as f64 * 0.1, (i * 7 % 11) as f64, ["a", "b", "c"][i % 3])).collect();
    std::fs::write(data.join("ws.dat"), ws).unwrap();
    let svm: String = (0..60).map(|i| format!("{} 1:{} 3:{}\n", i % 3 + 1, i as f64 * 0.5, (i % 5) as f64)).collect();
    std::fs::write(data.join("small.svm"), svm).unwrap();
    std::fs::write(
        data.join("datasets.yaml"),
        "iris: { files: [iris.data], format: csv, header: false, label_column: -1, description: d, citation: c }\n\
         ws: { files: [ws.dat], format: whitespace, label_column: -1, description: d, citation: c }\n\
         svm: { files: [small.svm], format: libsvm, n_features: 3, description: d, citation: c }\n",
    )
    .unwrap();
    data
}

#[test]
fn corrupted_data_files_are_accepted_or_rejected_cleanly() {
    let dir = std::env::temp_dir().join(format!("mcgp-fuzz-data-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let data = data_folder(&dir);
    let spec = dir.join("spec.yaml");
    std::fs::write(
        &spec,
        "name: fuzz\ndatasets: [iris, ws, svm]\nsplits: { protocol: random, train_fraction: 0.6, repeats: 2 }\nmethods:\n  - { name: lap, method: laplace }\n",
    )
    .unwrap();
    let (code, stderr, _) = check(&spec, &data);
    assert_eq!(code, Some(0), "the clean data pass: {stderr}");
    let files = ["iris.data", "ws.dat", "small.svm"];
    let originals: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(data.join(f)).unwrap()).collect();
    let mut rng = Pcg64::seed_from_u64(7);
    let n = count("MCGP_FUZZ_DATA", 120);
    let (mut accepted, mut rejected) = (0, 0);
    for k in 0..n {
        let f = k % files.len();
        let mut bytes = originals[f].clone();
        for _ in 0..rng.random_range(1..=3) {
            let at = rng.random_range(0..bytes.len().max(1));
            match rng.random_range(0..5) {
                0 => bytes.truncate(at),
                1 => bytes.insert(at.min(bytes.len()), [b',', b' ', b'\n', b':', 0xff, 0x00, b'x', b'-'][rng.random_range(0..8)]),
                2 => {
                    if at < bytes.len() {
                        bytes.remove(at);
                    }
                }
                3 => {
                    // Binary garbage.
                    let junk: Vec<u8> = (0..rng.random_range(1..64)).map(|_| rng.random()).collect();
                    bytes.splice(at.min(bytes.len())..at.min(bytes.len()), junk);
                }
                _ => bytes.extend_from_slice(b"\n1 1:2 1:3\n"),
            }
        }
        std::fs::write(data.join(files[f]), &bytes).unwrap();
        let (code, stderr, _) = check(&spec, &data);
        assert!(!stderr.contains("panicked"), "{} corrupted ({k}) panicked:\n{stderr}", files[f]);
        match code {
            Some(0) => accepted += 1,
            Some(2) => {
                rejected += 1;
                assert!(
                    stderr.contains(files[f]) || stderr.contains("spec.yaml"),
                    "{} corrupted ({k}): the error names no file:\n{stderr}",
                    files[f]
                );
            }
            other => panic!("{} corrupted ({k}): exit status {other:?}:\n{stderr}", files[f]),
        }
        std::fs::write(data.join(files[f]), &originals[f]).unwrap();
    }
    report(&format!("data fuzz: {n} corrupted data files tried, {accepted} accepted, {rejected} rejected cleanly, 0 panics, 0 hangs"));
    std::fs::remove_dir_all(&dir).ok();
}
