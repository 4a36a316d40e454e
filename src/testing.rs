//! Helpers shared by the unit tests.

/// Central differences of `f` at `x`, one coordinate at a time, step 1e-6.
pub fn central_differences(x: &[f64], f: impl Fn(&[f64]) -> f64) -> Vec<f64> {
    let h = 1e-6;
    (0..x.len())
        .map(|i| {
            let (mut a, mut b) = (x.to_vec(), x.to_vec());
            a[i] += h;
            b[i] -= h;
            (f(&a) - f(&b)) / (2.0 * h)
        })
        .collect()
}

/// Each analytic gradient entry within `rel` (relative, plus the same absolute) of its
/// finite difference; the message names the entry.
pub fn assert_gradient_close(what: &str, got: &[f64], want: &[f64], rel: f64) {
    assert_eq!(got.len(), want.len(), "{what}: gradient lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() < rel * (1.0 + w.abs()), "{what}[{i}]: analytic {g} vs finite difference {w}");
    }
}

/// Villacampa-Calvo & Hernandez-Lobato (2017)'s kernel for `c` classes on `d` inputs: one
/// squared-exponential ARD (length-scales 1.2, amplitude 1.5) plus white noise per class.
pub fn se_ard_plus_white(d: usize, c: usize, noise: f64) -> crate::kernels::KernelSet {
    use crate::kernels::{KernelKind, KernelParams, LengthScale};
    let se = KernelParams { ard: true, lengthscale: LengthScale::One(1.2), variance: 1.5, ..Default::default() };
    let white = KernelParams { kind: KernelKind::White, variance: noise, ..Default::default() };
    KernelParams { kind: KernelKind::Sum, terms: vec![se, white], per_class: true, ..Default::default() }.kernel_set(d, c).expect("kernel")
}

/// A finished cell record of `method` on `dataset` at `split` and grid `setting`, with no
/// metrics, hyper-parameters or trace: the tests add what they need.
pub fn cell_record(dataset: &str, method: &str, split: usize, setting: &str) -> crate::results::CellRecord {
    crate::results::CellRecord {
        key: format!("{dataset}-{method}-{split}-{setting}"),
        experiment: "x".into(),
        dataset: dataset.into(),
        split,
        method: method.into(),
        method_kind: method.into(),
        setting: setting.into(),
        status: crate::results::Status::Ok,
        error: None,
        seed: 0,
        metrics: Default::default(),
        evidence_kind: None,
        hyperparameters: Default::default(),
        diagnostics: Default::default(),
        trace: Vec::new(),
        handoff: Default::default(),
        wall_seconds: 0.0,
        cpu_seconds: 0.0,
        commit: None,
        machine: None,
        numerics: None,
        data_hash: None,
        timed_out: false,
        source_failed: false,
        decision_grid: None,
    }
}
