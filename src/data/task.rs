//! Tasks: a problem made from a dataset's rows. `one_vs_rest: c` is class c against all the
//! others (Seeger, Lawrence & Herbrich's binary USPS and MNIST tasks): every binary-capable
//! method then runs on a multi-class dataset. A spec names such a problem in
//! `derived_datasets` (see `spec::DerivedDataset`).
use super::loaders::normalize_label;
use super::Dataset;
use serde::{Deserialize, Serialize};

/// The problem made of a dataset, as a spec writes it (`{ one_vs_rest: 2 }`). One kind of task
/// so far; another would be a further (optional) field, exactly one of them given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Task {
    /// Class c (a label as the data write it, normalised like the class names: `2`, `"2"` and
    /// `2.0` are one class) against the rest: class index 1 is c (y = +1 of a binary method),
    /// class 0 every other row.
    pub one_vs_rest: ClassLabel,
}

/// A class label written as a number or a string in YAML, kept as its normalised text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "LabelRepr", into = "String")]
pub struct ClassLabel(pub String);

#[derive(Deserialize)]
#[serde(untagged)]
enum LabelRepr {
    Int(i64),
    Float(f64),
    Text(String),
}

impl From<LabelRepr> for ClassLabel {
    fn from(r: LabelRepr) -> Self {
        ClassLabel(normalize_label(&match r {
            LabelRepr::Int(i) => i.to_string(),
            LabelRepr::Float(f) => f.to_string(),
            LabelRepr::Text(t) => t,
        }))
    }
}

impl From<ClassLabel> for String {
    fn from(c: ClassLabel) -> String {
        c.0
    }
}

impl Task {
    /// The task's problem on `data`'s rows (same rows, order and fixed train/test split). The
    /// error says which class is missing and which the data have.
    pub fn apply(&self, data: &Dataset) -> Result<Dataset, String> {
        let c = &self.one_vs_rest.0;
        let Some(k) = data.class_names.iter().position(|n| n == c) else {
            return Err(format!("class \"{c}\" is not a class of {} (its classes: {})", data.name, data.class_names.join(", ")));
        };
        let y: Vec<usize> = data.y.iter().map(|&y| usize::from(y == k)).collect();
        let positives = y.iter().filter(|&&v| v == 1).count();
        if positives == 0 || positives == y.len() {
            let which = if positives == 0 {
                format!("no row of {} is class \"{c}\"", data.name)
            } else {
                format!("every row of {} is class \"{c}\"", data.name)
            };
            return Err(format!("{c} against the rest needs rows of both: {which}"));
        }
        Ok(Dataset { y, class_names: vec![format!("not {c}"), c.clone()], ..data.clone() })
    }

    /// The field of the spec that names the task's class.
    pub fn field(&self) -> &'static str {
        "one_vs_rest"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    fn digits() -> Dataset {
        Dataset {
            name: "d".into(),
            x: array![[0.0], [1.0], [2.0], [3.0], [4.0]],
            y: vec![0, 2, 1, 2, 0],
            class_names: vec!["0".into(), "1".into(), "7".into()],
            feature_names: vec!["x1".into()],
            source: vec![],
            n_fixed_train: Some(3),
        }
    }

    #[test]
    fn one_vs_rest_makes_class_c_the_positive_class_of_the_same_rows() {
        for yaml in ["{ one_vs_rest: 7 }", "{ one_vs_rest: \"7\" }", "{ one_vs_rest: 7.0 }"] {
            let task: Task = serde_norway::from_str(yaml).unwrap();
            let b = task.apply(&digits()).unwrap();
            assert_eq!(b.y, [0, 1, 0, 1, 0], "{yaml}");
            assert_eq!(b.class_names, ["not 7", "7"]);
            assert_eq!((b.x.clone(), b.n_fixed_train), (digits().x, Some(3)));
        }
        let task: Task = serde_norway::from_str("{ one_vs_rest: 0 }").unwrap();
        assert_eq!(task.apply(&digits()).unwrap().y, [1, 0, 0, 0, 1]);
        let err = serde_norway::from_str::<Task>("{ one_vs_rest: 3 }").unwrap().apply(&digits()).unwrap_err();
        assert_eq!(err, "class \"3\" is not a class of d (its classes: 0, 1, 7)");
        assert!(serde_norway::from_str::<Task>("{ one_vs_all: 3 }").is_err());
        // Serialised as the normalised text (what the data hash covers).
        assert_eq!(
            serde_json::to_string(&serde_norway::from_str::<Task>("{ one_vs_rest: 7.0 }").unwrap()).unwrap(),
            r#"{"one_vs_rest":"7"}"#
        );
    }

    /// A one-vs-rest task needs rows of class c and of the rest: a class listed but absent (or
    /// the only one present) would make every label one value and score 0% error.
    #[test]
    fn one_vs_rest_of_an_absent_or_only_class_is_refused() {
        let mut d = digits();
        d.class_names.push("9".into());
        let task: Task = serde_norway::from_str("{ one_vs_rest: 9 }").unwrap();
        let e = task.apply(&d).unwrap_err();
        assert!(e.contains("9 against the rest needs rows of both: no row of d is class \"9\""), "{e}");
        d.y = vec![3; 5];
        let e = task.apply(&d).unwrap_err();
        assert!(e.contains("every row of d is class \"9\""), "{e}");
    }
}
