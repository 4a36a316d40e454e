//! Speed of the dense KL-MNL fit (Chai 2012; issue 25): the data sets, settings and output of
//! `dense::run` (benches/dense/mod.rs).
//!
//! Flop model (multiply-adds x 2; n rows, C classes, p = n C latents, r = n (C - 1) the rank of
//! W and of the softmax curvature): a sweep is one joint Newton step on b (the factor of
//! I + E^T (K + S^-1) E, r^3 / 6, and its Kronecker-structured sandwich, r^2 C) and one V fixed
//! point (B = I + L_W^T K L_W: sandwich r^2 C, factor r^3 / 6, the structured solve for Z about
//! r^3 / 6, q = Z K r p n); an evaluation adds the dense T = Z^T Z (r p^2) with Z = L_B^-1 L_W^T
//! (r^2 p / 2) for the envelope gradient. Rejected V proposals and the S-steps' C x C work are
//! not counted.
//!
//! `cargo bench --bench klmnl [data set ...]`. Where the time went: benches/PROFILE.md.
mod dense;

use mcgp::methods::Diagnostics;

fn flops(n: f64, c: f64, _params: f64, diag: &Diagnostics) -> f64 {
    let number = |k: &str| diag.numbers.get(k).copied().unwrap_or(0.0);
    let (p, r) = (n * c, n * (c - 1.0));
    let sweep = 0.5 * r.powi(3) + 2.0 * r * r * c + r * p * n;
    let evaluation = r * p * p + 0.5 * r * r * p;
    let (evaluations, sweeps) = (number("hyper_evaluations"), number("hyper_sweeps") + number("sweeps"));
    2.0 * (sweeps * sweep + evaluations * evaluation)
}

fn work(diag: &Diagnostics) -> String {
    let number = |k: &str| diag.numbers.get(k).copied().unwrap_or(0.0);
    format!(
        "{} evaluations, {} sweeps in the search, {} in the final fit",
        number("hyper_evaluations"),
        number("hyper_sweeps"),
        number("sweeps")
    )
}

fn main() {
    dense::run(&dense::DenseBench {
        method: "klmnl",
        reps: 1,
        flops,
        work,
        scaling_n: &[125, 250, 500],
        scaling_c: (&[2, 4, 8], 250),
        scaling_learned_n: &[125, 250],
    });
}
