//! Loads every dataset of `data/datasets.yaml` and checks it against the facts in
//! `data/SOURCES.md`. The expected numbers below were copied by hand from SOURCES.md (the
//! oracle), not produced by running the loader.

use std::path::PathBuf;

use mcgp::data::{DataError, Dataset, Registry};

fn registry() -> Registry {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data");
    Registry::load(&dir).unwrap_or_else(|e| panic!("{e}"))
}

/// What SOURCES.md says about one dataset.
struct Expected {
    name: &'static str,
    features: usize,
    class_names: &'static [&'static str],
    /// Per-class counts of the training file(s) (all rows if there are no test files).
    train_counts: &'static [usize],
    /// Per-class counts of the fixed test files, if the dataset has them.
    test_counts: Option<&'static [usize]>,
}

const DIGITS: &[&str] = &["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
const LETTERS: &[&str] =
    &["A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K", "L", "M", "N", "O", "P", "Q", "R", "S", "T", "U", "V", "W", "X", "Y", "Z"];

const EXPECTED: &[Expected] = &[
    Expected {
        name: "iris",
        features: 4,
        class_names: &["Iris-setosa", "Iris-versicolor", "Iris-virginica"],
        train_counts: &[50, 50, 50],
        test_counts: None,
    },
    Expected { name: "thyroid", features: 5, class_names: &["1", "2", "3"], train_counts: &[150, 35, 30], test_counts: None },
    Expected { name: "wine", features: 13, class_names: &["1", "2", "3"], train_counts: &[59, 71, 48], test_counts: None },
    Expected {
        name: "glass",
        features: 9,
        class_names: &["1", "2", "3", "5", "6", "7"],
        train_counts: &[70, 76, 17, 13, 9, 29],
        test_counts: None,
    },
    Expected {
        name: "vehicle",
        features: 18,
        class_names: &["bus", "opel", "saab", "van"],
        train_counts: &[218, 212, 217, 199],
        test_counts: None,
    },
    Expected {
        name: "satimage",
        features: 36,
        class_names: &["1", "2", "3", "4", "5", "7"],
        train_counts: &[1072, 479, 961, 415, 470, 1038],
        test_counts: Some(&[461, 224, 397, 211, 237, 470]),
    },
    Expected {
        name: "segment",
        features: 19,
        class_names: &["1", "2", "3", "4", "5", "6", "7"],
        train_counts: &[330, 330, 330, 330, 330, 330, 330],
        test_counts: None,
    },
    Expected { name: "waveform", features: 21, class_names: &["0", "1", "2"], train_counts: &[1657, 1647, 1696], test_counts: None },
    Expected {
        name: "vowel",
        features: 10,
        class_names: &["1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11"],
        train_counts: &[48; 11],
        test_counts: Some(&[42; 11]),
    },
    // The same files restricted to classes 1-6 (keep_classes): SOURCES.md's 48 and 42 per class.
    Expected {
        name: "vowel6",
        features: 10,
        class_names: &["1", "2", "3", "4", "5", "6"],
        train_counts: &[48; 6],
        test_counts: Some(&[42; 6]),
    },
    // mlbench's form of the same rows (SOURCES.md): 990 rows, 90 per class, speaker + 9 features.
    Expected {
        name: "vowel-mlbench",
        features: 10,
        class_names: &["1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11"],
        train_counts: &[90; 11],
        test_counts: None,
    },
    Expected {
        name: "vowel6-mlbench",
        features: 10,
        class_names: &["1", "2", "3", "4", "5", "6"],
        train_counts: &[90; 6],
        test_counts: None,
    },
    Expected { name: "svmguide2", features: 20, class_names: &["1", "2", "3"], train_counts: &[221, 117, 53], test_counts: None },
    Expected {
        name: "dna",
        features: 180,
        class_names: &["1", "2", "3"],
        train_counts: &[464, 485, 1051],
        test_counts: Some(&[303, 280, 603]),
    },
    Expected {
        name: "letter",
        features: 16,
        class_names: LETTERS,
        train_counts: &[
            789, 766, 736, 805, 768, 775, 773, 734, 755, 747, 739, 761, 792, 783, 753, 803, 783, 758, 748, 796, 813, 764, 752, 787, 786,
            734,
        ],
        test_counts: None,
    },
    Expected { name: "abe", features: 16, class_names: &["A", "B", "E"], train_counts: &[789, 766, 768], test_counts: None },
    Expected {
        name: "shuttle",
        features: 9,
        class_names: &["1", "2", "3", "4", "5", "6", "7"],
        train_counts: &[34108, 37, 132, 6748, 2458, 6, 11],
        test_counts: Some(&[11478, 13, 39, 2155, 809, 4, 2]),
    },
    Expected {
        name: "usps",
        features: 256,
        class_names: DIGITS,
        train_counts: &[1194, 1005, 731, 658, 652, 556, 664, 645, 542, 644],
        test_counts: Some(&[359, 264, 198, 166, 200, 160, 170, 147, 166, 177]),
    },
    Expected {
        name: "mnist",
        features: 784,
        class_names: DIGITS,
        train_counts: &[5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949],
        test_counts: Some(&[980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]),
    },
];

/// Total rows stated in SOURCES.md's summary table (train + test), a second check on the
/// per-class counts above.
const ROWS: &[(&str, usize)] = &[
    ("iris", 150),
    ("thyroid", 215),
    ("wine", 178),
    ("glass", 214),
    ("vehicle", 846),
    ("satimage", 4435 + 2000),
    ("segment", 2310),
    ("waveform", 5000),
    ("vowel", 528 + 462),
    ("vowel6", 6 * (48 + 42)),
    ("vowel-mlbench", 990),
    ("vowel6-mlbench", 540),
    ("svmguide2", 391),
    ("dna", 2000 + 1186),
    ("letter", 20000),
    ("abe", 2323),
    ("shuttle", 43500 + 14500),
    ("usps", 7291 + 2007),
    ("mnist", 60000 + 10000),
];

fn counts(d: &Dataset, rows: std::ops::Range<usize>) -> Vec<usize> {
    let mut c = vec![0; d.n_classes()];
    for i in rows {
        c[d.y[i]] += 1;
    }
    c
}

fn check(name: &str) -> Dataset {
    let e = EXPECTED.iter().find(|e| e.name == name).unwrap_or_else(|| panic!("no expectations for {name}"));
    let rows = ROWS.iter().find(|r| r.0 == name).map(|r| r.1).unwrap_or_else(|| panic!("no row count for {name}"));
    let d = registry().load_dataset(name).unwrap_or_else(|err| panic!("{err}"));

    assert_eq!(d.name, name);
    assert_eq!(d.n(), rows, "{name}: rows");
    assert_eq!(d.d(), e.features, "{name}: features");
    assert_eq!(d.feature_names.len(), e.features, "{name}: feature names");
    assert_eq!(d.y.len(), rows, "{name}: labels");
    assert_eq!(d.class_names, e.class_names, "{name}: class names");
    assert!(d.x.iter().all(|v| v.is_finite()), "{name}: non-finite value");

    let n_train: usize = e.train_counts.iter().sum();
    match e.test_counts {
        Some(test) => {
            assert_eq!(d.n_fixed_train, Some(n_train), "{name}: n_fixed_train");
            assert_eq!(counts(&d, 0..n_train), e.train_counts, "{name}: training class counts");
            assert_eq!(counts(&d, n_train..d.n()), test, "{name}: test class counts");
        }
        None => {
            assert_eq!(d.n_fixed_train, None, "{name}: n_fixed_train");
            assert_eq!(counts(&d, 0..d.n()), e.train_counts, "{name}: class counts");
        }
    }
    d
}

#[test]
fn every_registered_dataset_has_expectations() {
    let mut names: Vec<&str> = EXPECTED.iter().map(|e| e.name).collect();
    names.push("isolet");
    names.sort_unstable();
    // Synthetic entries have no files or SOURCES.md facts (tested in src/data/synthetic.rs).
    let reg = registry();
    let file_backed: Vec<String> =
        reg.names().into_iter().filter(|n| reg.spec(n).is_some_and(|s| s.format != mcgp::data::Format::Synthetic)).collect();
    assert_eq!(file_backed, names);
}

#[test]
fn iris() {
    let d = check("iris");
    // First row of the UCI file: 5.1,3.5,1.4,0.2,Iris-setosa
    assert_eq!(d.x.row(0).to_vec(), [5.1, 3.5, 1.4, 0.2]);
}

#[test]
fn thyroid() {
    check("thyroid");
}

#[test]
fn wine() {
    check("wine");
}

#[test]
fn glass() {
    let d = check("glass");
    // The Id column is dropped: the first feature is RI (1.52101), not Id (1).
    assert_eq!(d.x[[0, 0]], 1.52101);
}

#[test]
fn vehicle() {
    check("vehicle");
}

#[test]
fn satimage() {
    check("satimage");
}

#[test]
fn segment() {
    let d = check("segment");
    // Feature 3 (region-pixel-count) is constant 9.
    assert!(d.x.column(2).iter().all(|&v| v == 9.0));
}

#[test]
fn waveform() {
    check("waveform");
}

#[test]
fn vowel() {
    let d = check("vowel");
    // row.names dropped, y is the label: first row 1,1,-3.639,0.418,...
    assert_eq!(d.feature_names[0], "x.1");
    assert_eq!(d.x[[0, 0]], -3.639);
    // vowel6 keeps the rows of classes 1-6 in their order.
    let six = check("vowel6");
    let kept: Vec<usize> = (0..d.n()).filter(|&i| d.y[i] < 6).collect();
    assert_eq!(six.n(), kept.len());
    assert_eq!(six.x.row(7), d.x.row(kept[7]));
    assert_eq!(six.x.row(300), d.x.row(kept[300]));
}

/// SOURCES.md's account of mlbench's Vowel, row for row against the ESL files: the speaker
/// (row // 66: 8 training speakers, then 7 test speakers, 66 utterances each), then x.1 and
/// x.3..x.10 (x.2 missing), the same classes.
#[test]
fn vowel_mlbench_is_the_esl_rows_with_the_speaker_for_x2() {
    let esl = check("vowel");
    let ml = check("vowel-mlbench");
    assert_eq!(ml.feature_names[0], "speaker");
    for i in 0..esl.n() {
        assert_eq!(ml.x[[i, 0]], (i / 66) as f64, "row {i}: speaker");
        assert_eq!(ml.x[[i, 1]], esl.x[[i, 0]], "row {i}: x.1");
        for j in 2..10 {
            assert_eq!(ml.x[[i, j]], esl.x[[i, j]], "row {i}: x.{}", j + 1);
        }
        assert_eq!(ml.y[i], esl.y[i], "row {i}: class");
    }
    let six = check("vowel6-mlbench");
    let kept: Vec<usize> = (0..ml.n()).filter(|&i| ml.y[i] < 6).collect();
    assert_eq!(six.n(), kept.len());
    assert_eq!(six.x.row(500), ml.x.row(kept[500]));
}

#[test]
fn svmguide2() {
    let d = check("svmguide2");
    assert_eq!(d.x[[0, 0]], 0.0424107142857143);
}

#[test]
fn dna() {
    let d = check("dna");
    assert!(d.x.iter().all(|&v| v == 0.0 || v == 1.0), "dna features are binary");
}

#[test]
fn letter() {
    check("letter");
}

#[test]
fn abe() {
    check("abe");
}

#[test]
fn shuttle() {
    check("shuttle");
}

#[test]
fn usps() {
    let d = check("usps");
    assert!(d.x.iter().all(|&v| (-1.0..=1.0).contains(&v)), "usps pixels lie in [-1, 1]");
}

#[test]
fn mnist() {
    let d = check("mnist");
    assert!(d.x.iter().all(|&v| (0.0..=1.0).contains(&v)), "mnist pixels are scaled to [0, 1]");
}

#[test]
fn isolet_is_missing_with_a_clear_error() {
    let err = registry().load_dataset("isolet").expect_err("isolet is not shipped");
    assert!(matches!(err, DataError::MissingFile { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("isolet1+2+3+4.data: file not found"), "{msg}");
    assert!(msg.contains("SOURCES.md"), "{msg}");
    assert!(msg.contains("NOT SHIPPED"), "{msg}");
}

#[test]
fn unknown_dataset_suggests_a_name() {
    let msg = registry().load_dataset("mnsit").expect_err("typo").to_string();
    assert!(msg.contains("did you mean 'mnist'"), "{msg}");
}

/// A registry in a temporary folder with the given files.
fn temp_registry(registry: &str, files: &[(&str, &str)]) -> (tempfile::TempDir, Registry) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("datasets.yaml"), registry).unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let reg = Registry::load(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    (dir, reg)
}

#[test]
fn unusable_data_is_refused_naming_the_file_and_the_reason() {
    let (_d, reg) = temp_registry(
        "dup: { files: [dup.svm], format: libsvm, n_features: 3, description: d, citation: c }\n\
         nofeat: { files: [nofeat.csv], format: csv, label_column: -1, drop_columns: [0], description: d, citation: c }\n\
         oneclass: { files: [one.csv], format: csv, label_column: -1, description: d, citation: c }\n\
         onerow: { files: [row.csv], format: csv, label_column: -1, description: d, citation: c }\n\
         newlabel: { files: [tr.csv], test_files: [te.csv], format: csv, label_column: -1, description: d, citation: c }\n",
        &[
            ("dup.svm", "1 1:0.5 3:1\n2 1:0.5 1:2\n"),
            ("nofeat.csv", "1.0,a\n2.0,b\n"),
            ("one.csv", "1.0,a\n2.0,a\n"),
            ("row.csv", "1.0,a\n"),
            ("tr.csv", "1.0,a\n2.0,b\n3.0,a\n"),
            ("te.csv", "1.5,a\n2.5,c\n"),
        ],
    );
    let err = |name: &str| reg.load_dataset(name).map(|_| ()).unwrap_err().to_string();
    assert!(err("dup").contains("dup.svm:2: feature index 1 appears twice"), "{}", err("dup"));
    assert!(err("nofeat").contains("nofeat.csv") && err("nofeat").contains("no feature columns"), "{}", err("nofeat"));
    assert!(err("oneclass").contains("one.csv") && err("oneclass").contains("one class only"), "{}", err("oneclass"));
    assert!(err("onerow").contains("row.csv") && err("onerow").contains("1 row"), "{}", err("onerow"));
    // The new label loads (it is a class of the dataset), but a fixed split refuses it.
    let data = reg.load_dataset("newlabel").unwrap();
    let e = mcgp::data::make_splits(&mcgp::data::SplitProtocol::Fixed { repeats: 1 }, &data, 0, std::path::Path::new("."))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("'newlabel' (tr.csv, te.csv)") && e.contains("class 'c' occurs in the fixed test rows but in no training row"),
        "{e}"
    );
}

/// Input that loaded before as something else is refused, naming the file and what is wrong:
/// a quoted empty label (it became a class ""; a bare empty field is a missing label), a class of class_order that no row has (a one-class
/// data set listing two classes scored 0% error), a keep_classes entry no row has (a typo
/// dropped a class silently), and a test file whose header names the columns in another order
/// (they were matched by position, so the test columns came swapped).
#[test]
fn labels_classes_and_headers_that_disagree_with_the_rows_are_refused() {
    let (_d, reg) = temp_registry(
        "blank: { files: [blank.csv], format: csv, label_column: -1, description: d, citation: c }\n\
         quoted: { files: [quoted.csv], format: csv, label_column: -1, description: d, citation: c }\n\
         order: { files: [one.csv], format: csv, label_column: -1, class_order: [a, b, z], description: d, citation: c }\n\
         keep: { files: [two.csv], format: csv, label_column: -1, keep_classes: [a, bb], description: d, citation: c }\n\
         swapped: { files: [tr.csv], test_files: [te.csv], format: csv, header: true, label_column: -1, description: d, citation: c }\n\
         same: { files: [tr.csv], test_files: [tr2.csv], format: csv, header: true, label_column: -1, description: d, citation: c }\n",
        &[
            ("blank.csv", "1,2,a\n2,3,b\n3,4,\n4,5,a\n"),
            ("quoted.csv", "1,2,a\n2,3,\"\"\n3,4,b\n"),
            ("one.csv", "1.0,a\n2.0,b\n3.0,a\n"),
            ("two.csv", "1.0,a\n2.0,b\n3.0,a\n"),
            ("tr.csv", "p,q,y\n1,2,a\n2,3,b\n"),
            ("te.csv", "q,p,y\n2,1,a\n3,2,b\n"),
            ("tr2.csv", "p,q,y\n1,5,a\n2,6,b\n"),
        ],
    );
    let err = |name: &str| reg.load_dataset(name).map(|_| ()).unwrap_err().to_string();
    assert!(err("blank").contains("blank.csv:3") && err("blank").contains("missing label"), "{}", err("blank"));
    assert!(err("quoted").contains("quoted.csv:2") && err("quoted").contains("empty label"), "{}", err("quoted"));
    assert!(err("order").contains("class_order lists 'z'") && err("order").contains("one.csv"), "{}", err("order"));
    assert!(err("keep").contains("keep_classes lists 'bb'") && err("keep").contains("two.csv"), "{}", err("keep"));
    let e = err("swapped");
    assert!(e.contains("te.csv") && e.contains("[\"q\", \"p\"]") && e.contains("[\"p\", \"q\"]") && e.contains("tr.csv"), "{e}");
    // Headers that agree load, the test file's rows after the training file's.
    let data = reg.load_dataset("same").unwrap();
    assert_eq!(data.x.column(1).to_vec(), [2.0, 3.0, 5.0, 6.0]);
    assert_eq!(data.n_fixed_train, Some(2));
}

/// Provenance: every staged file a dataset reads has the sha256 that data/SOURCES.md records
/// for it (the cell keys hash the bytes, so an edited file recomputes its cells; this says
/// that the bytes are still the documented ones). Files not shipped are passed over.
#[test]
fn every_staged_file_has_the_sha256_sources_md_records() {
    use sha2::{Digest, Sha256};
    let reg = registry();
    let sources = std::fs::read_to_string(reg.data_dir().join("SOURCES.md")).unwrap();
    let mut checked = 0;
    for name in reg.names() {
        let spec = reg.spec(&name).unwrap();
        for file in spec.files.iter().chain(spec.test_files.iter().flatten()) {
            let path = reg.data_dir().join(file);
            let Ok(bytes) = std::fs::read(&path) else { continue };
            let hex: String = Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
            assert!(sources.contains(&hex), "{}: sha256 {hex} is not in data/SOURCES.md", path.display());
            checked += 1;
        }
    }
    assert!(checked >= 25, "only {checked} staged files found");
}
