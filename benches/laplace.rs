//! Speed of the multinomial-logit Laplace fit (issue 25): the data sets, settings and output of
//! `dense::run` (benches/dense/mod.rs).
//!
//! Flop model (multiply-adds x 2; n training rows, C classes, P kernel parameters): a Newton
//! step's curvature is C Cholesky factors of B_c (n^3/6 each) and their inverses (n^3/3), the
//! factor of M (n^3/6) and about 4C + 1 matrix-vector products; a gradient is 2.5 C n^3 (K E_c,
//! two triangular solves with M's factor, the symmetric products P_c^T P_c) and (4C + 2) n^2 a
//! parameter. Every evaluation computes the curvature once more at its mode.
//!
//! `cargo bench --bench laplace [data set ...]`. Where the time went: benches/PROFILE.md.
mod dense;

use mcgp::methods::Diagnostics;

fn flops(n: f64, c: f64, params: f64, diag: &Diagnostics) -> f64 {
    let number = |k: &str| diag.numbers.get(k).copied().unwrap_or(0.0);
    let curvature = (c / 2.0 + 1.0 / 6.0) * n.powi(3) + (4.0 * c + 1.0) * n * n;
    let gradient = 2.5 * c * n.powi(3) + params * (4.0 * c + 2.0) * n * n;
    // The final fit at the learned kernel (or the only one, fixed): its Newton steps and curvature.
    let last = (number("newton_iterations") + 1.0) * curvature;
    let (evaluations, steps) = (number("hyper_evaluations"), number("hyper_newton_steps"));
    2.0 * ((steps + evaluations) * curvature + evaluations * gradient + last)
}

fn work(diag: &Diagnostics) -> String {
    let number = |k: &str| diag.numbers.get(k).copied().unwrap_or(0.0);
    format!(
        "{} evaluations, {} Newton steps in the search, {} in the final fit",
        number("hyper_evaluations"),
        number("hyper_newton_steps"),
        number("newton_iterations")
    )
}

fn main() {
    dense::run(&dense::DenseBench {
        method: "laplace",
        reps: 5,
        flops,
        work,
        scaling_n: &[250, 500, 1000, 2000],
        scaling_c: (&[2, 4, 8, 16, 26], 1000),
        scaling_learned_n: &[250, 500, 1000],
    });
}
