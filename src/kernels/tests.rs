//! Kernel tests: closed forms, naive reference loops and central differences.
use super::*;
use ndarray::array;

fn naive_sqexp(s2: f64, ls: &[f64], a: &[f64], b: &[f64]) -> f64 {
    let mut r = 0.0;
    for k in 0..a.len() {
        let l = if ls.len() == 1 { ls[0] } else { ls[k] };
        r += (a[k] - b[k]).powi(2) / (l * l);
    }
    s2 * (-0.5 * r).exp()
}

#[test]
fn gram_matches_naive_formula() {
    let x = array![[0.0, 1.0], [0.5, -0.3], [2.0, 0.1]];
    let kern = KernelParams {
        ard: true,
        lengthscale: LengthScale::PerFeature(vec![0.7, 1.9]),
        variance: 2.5,
        learn_variance: true,
        ..Default::default()
    }
    .build(2)
    .unwrap();
    let k = kern.gram(&x);
    for i in 0..3 {
        for j in 0..3 {
            let want = naive_sqexp(2.5, &[0.7, 1.9], x.row(i).as_slice().unwrap(), x.row(j).as_slice().unwrap());
            assert!((k[(i, j)] - want).abs() < 1e-14);
        }
    }
}

#[test]
fn gradients_match_central_differences() {
    let x = array![[0.0, 1.0, 0.2], [0.5, -0.3, 1.1], [2.0, 0.1, -0.4], [-1.0, 0.4, 0.0]];
    for ard in [false, true] {
        let kern = KernelParams { ard, lengthscale: LengthScale::One(1.3), variance: 0.8, learn_variance: true, ..Default::default() }
            .build(3)
            .unwrap();
        let p0 = kern.log_params();
        let k = kern.gram(&x);
        let grads = kern.gram_grads(&x, &k);
        assert_eq!(grads.len(), kern.n_params());
        for j in 0..p0.len() {
            let h = 1e-6;
            let mut pp = p0.clone();
            pp[j] += h;
            let mut pm = p0.clone();
            pm[j] -= h;
            let fd = (&kern.with_log_params(&pp).gram(&x) - &kern.with_log_params(&pm).gram(&x)) * faer::Scale(1.0 / (2.0 * h));
            assert!((&fd - &grads[j]).norm_max() < 1e-8, "ard={ard} param {j}");
        }
    }
}

#[test]
fn bad_kernel_params_are_named() {
    let p = KernelParams { variance: -1.0, ..Default::default() };
    assert!(p.validate().unwrap_err().contains("kernel.variance"));
    let p = KernelParams { ard: true, lengthscale: LengthScale::PerFeature(vec![1.0, 2.0]), ..Default::default() };
    assert!(p.build(3).unwrap_err().contains("3 features"));
}

/// Central-difference check of `gram_grads` for any kernel.
fn assert_grads_match_differences(kern: &dyn Kernel, x: &Array2<f64>, what: &str) {
    let p0 = kern.log_params();
    let k = kern.gram(x);
    let grads = kern.gram_grads(x, &k);
    assert_eq!(grads.len(), kern.n_params(), "{what}");
    assert_eq!(kern.param_names().len(), kern.n_params(), "{what}");
    for j in 0..p0.len() {
        let h = 1e-6;
        let mut pp = p0.clone();
        pp[j] += h;
        let mut pm = p0.clone();
        pm[j] -= h;
        let fd = (&kern.with_log_params(&pp).gram(x) - &kern.with_log_params(&pm).gram(x)) * faer::Scale(1.0 / (2.0 * h));
        assert!((&fd - &grads[j]).norm_max() < 1e-7 * (1.0 + grads[j].norm_max()), "{what} param {j}");
    }
}

fn inputs() -> Array2<f64> {
    array![[0.0, 1.0, 0.2], [0.5, -0.3, 1.1], [2.0, 0.1, -0.4], [-1.0, 0.4, 0.0]]
}

fn parse(yaml: &str) -> KernelParams {
    serde_norway::from_str(yaml).expect("kernel yaml")
}

#[test]
fn linear_and_white_kernels_match_their_closed_forms() {
    let x = inputs();
    let lin = parse("{ type: linear, variance: 0.5 }").kernel(3).unwrap();
    let white = parse("{ type: white, variance: 0.01 }").kernel(3).unwrap();
    let (k, w) = (lin.gram(&x), white.gram(&x));
    for i in 0..4 {
        for j in 0..4 {
            let dot: f64 = (0..3).map(|d| x[(i, d)] * x[(j, d)]).sum();
            assert!((k[(i, j)] - 0.5 * dot).abs() < 1e-15);
            assert!((w[(i, j)] - if i == j { 0.01 } else { 0.0 }).abs() < 1e-17);
        }
        assert!((lin.diag(&x)[i] - k[(i, i)]).abs() < 1e-15);
    }
    // White noise sits on K(X, X) only: a cross-covariance between two sets has none of it.
    assert_eq!(white.cross(&x, &x).norm_max(), 0.0);
    assert!(white.diag(&x).iter().all(|v| (v - 0.01).abs() < 1e-17));
}

#[test]
fn a_sum_adds_its_terms_and_concatenates_named_parameters() {
    let x = inputs();
    let p = parse("{ type: sum, terms: [ { ard: true, lengthscale: 1.3, variance: 0.8 }, { type: linear, variance: 0.5 }, { type: white, variance: 0.1 } ] }");
    let s = p.kernel(3).unwrap();
    let parts = [p.terms[0].kernel(3).unwrap(), p.terms[1].kernel(3).unwrap(), p.terms[2].kernel(3).unwrap()];
    let want = &(&parts[0].gram(&x) + &parts[1].gram(&x)) + &parts[2].gram(&x);
    assert!((&s.gram(&x) - &want).norm_max() < 1e-15);
    let want_cross = &parts[0].cross(&x, &x) + &parts[1].cross(&x, &x);
    assert!((&s.cross(&x, &x) - &want_cross).norm_max() < 1e-15);
    assert_eq!(
        s.param_names(),
        ["se.variance", "se.lengthscale_1", "se.lengthscale_2", "se.lengthscale_3", "linear.variance", "white.variance"]
    );
    let two_se = parse("{ type: sum, terms: [ { lengthscale: 1.0 }, { lengthscale: 3.0 } ] }").kernel(3).unwrap();
    assert_eq!(two_se.param_names(), ["se1.variance", "se1.lengthscale", "se2.variance", "se2.lengthscale"]);
}

#[test]
fn every_kernel_kind_has_gradients_matching_central_differences() {
    let x = inputs();
    for yaml in [
        "{ type: linear, variance: 0.7 }",
        "{ type: white, variance: 0.2 }",
        "{ type: sum, terms: [ { ard: true, lengthscale: 1.3, variance: 0.8 }, { type: linear, variance: 0.5 }, { type: white, variance: 0.1 } ] }",
    ] {
        assert_grads_match_differences(parse(yaml).kernel(3).unwrap().as_ref(), &x, yaml);
    }
}

#[test]
fn per_class_sets_name_parameters_by_class_and_take_over_by_name() {
    let shared = parse("{ ard: true, lengthscale: 2.0, variance: 3.0 }").kernel_set(2, 3).unwrap();
    assert!(shared.is_shared());
    assert_eq!(shared.param_names(), ["variance", "lengthscale_1", "lengthscale_2"]);
    let per = parse("{ lengthscale: 2.0, variance: 3.0, per_class: true }").kernel_set(2, 3).unwrap();
    assert!(!per.is_shared() && per.shared_kernel().is_none());
    assert_eq!(per.param_names(), ["c1.variance", "c1.lengthscale", "c2.variance", "c2.lengthscale", "c3.variance", "c3.lengthscale"]);
    let learned: Vec<f64> = (0..6).map(|i| i as f64 * 0.1).collect();
    let names = per.param_names();
    // keep: [variance] keeps every class's variance ...
    let got = per.take_over(&names, &learned, &["variance".into()]).unwrap();
    assert_eq!(got.log_params(), [3.0f64.ln(), learned[1], 3.0f64.ln(), learned[3], 3.0f64.ln(), learned[5]]);
    assert!(per.check_keep(&["bias".into()]).unwrap_err().contains("\"bias\""));
    // ... keep: [c2.variance] keeps exactly that one.
    let got = per.take_over(&names, &learned, &["c2.variance".into()]).unwrap();
    let want = [learned[0], learned[1], 3.0f64.ln(), learned[3], learned[4], learned[5]];
    assert_eq!(got.log_params(), want);
    // By name, not position: a shared ARD set takes `lengthscale_2` from wherever it sits.
    let src_names: Vec<String> = ["lengthscale_2", "variance", "lengthscale_1"].iter().map(|s| s.to_string()).collect();
    let got = shared.take_over(&src_names, &[0.2, 0.5, 0.1], &["lengthscale".into()]).unwrap();
    assert_eq!(got.log_params(), vec![0.5, 2.0f64.ln(), 2.0f64.ln()]);
    let got = shared.take_over(&src_names, &[0.2, 0.5, 0.1], &[]).unwrap();
    assert_eq!(got.log_params(), vec![0.5, 0.1, 0.2]);
    assert!(shared.take_over(&src_names[..2], &[0.2, 0.5], &[]).unwrap_err().contains("lengthscale_1"));
}

#[test]
fn keep_names_cover_per_dimension_parameters_only() {
    assert!(name_matches("lengthscale", "lengthscale"));
    assert!(name_matches("lengthscale", "lengthscale_12"));
    assert!(!name_matches("lengthscale", "lengthscale_"));
    assert!(!name_matches("lengthscale", "lengthscales"));
    assert!(name_matches("variance", "c1.variance"));
    assert!(name_matches("c1.variance", "c1.variance"));
    assert!(!name_matches("c1.variance", "c2.variance"));
    assert!(!name_matches("variance", "se.variance"));
}

#[test]
fn kernel_kinds_are_checked_with_the_field_named() {
    assert!(parse("{ type: linear, lengthscale: 2.0 }").validate().unwrap_err().contains("length-scales"));
    assert!(parse("{ type: sum, terms: [ { lengthscale: 1.0 } ] }").validate().unwrap_err().contains("kernel.terms"));
    assert!(parse("{ type: sum, terms: [ { lengthscale: 1.0 }, { variance: -2.0 } ] }")
        .validate()
        .unwrap_err()
        .contains("kernel.terms[1].variance"));
    assert!(parse("{ ard: true, lengthscale: [] }").validate().unwrap_err().contains("empty"));
    assert!(parse("{ type: white }").build(2).unwrap_err().contains("squared-exponential"));
    // A squared-exponential entry serialises as before the other kinds existed (cell keys).
    let json = serde_json::to_string(&parse("{ lengthscale: 2.0 }")).unwrap();
    assert_eq!(json, r#"{"ard":false,"lengthscale":2.0,"variance":1.0,"learn_variance":true}"#);
}
