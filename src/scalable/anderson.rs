//! Anderson acceleration of a fixed-point iteration x <- G(x) (Anderson 1965; "type II" in
//! Walker & Ni 2011, SIAM J. Numer. Anal. 49(4)): with residuals f = G(x) - x, the last `depth`
//! differences of iterates dx_j and of residuals df_j, and gamma minimising |f - sum_j gamma_j
//! df_j| in least squares, the next iterate is
//!     G(x) - sum_j gamma_j (dx_j + df_j).
//! On a linear map with unlimited depth this is GMRES on (I - A) x = b (Walker & Ni, Thm. 2.2),
//! so a slowly contracting iteration (a damped EP sweep halves its error at best) converges in
//! a few steps. It only proposes: the caller checks that the proposal is a valid state and
//! otherwise takes G(x) and calls `reset`.
//!
//! Written here: the crates that offer it (scirs2-integrate, conflux) bring a large dependency
//! tree or only the type-I variant, and the method is the small least-squares problem below,
//! solved by nalgebra's Cholesky (already a dependency) on the depth x depth normal equations.
use std::collections::VecDeque;

pub struct Anderson {
    depth: usize,
    dx: VecDeque<Vec<f64>>,
    df: VecDeque<Vec<f64>>,
    last: Option<(Vec<f64>, Vec<f64>)>,
}

impl Anderson {
    /// `depth` 0 proposes G(x) itself: the plain iteration.
    pub fn new(depth: usize) -> Anderson {
        Anderson { depth, dx: VecDeque::new(), df: VecDeque::new(), last: None }
    }

    /// Forget the history (after a rejected proposal, or when G changed).
    pub fn reset(&mut self) {
        self.dx.clear();
        self.df.clear();
        self.last = None;
    }

    /// The next iterate from the current one `x` and `g` = G(x); the second value says whether
    /// it was extrapolated (false: it is `g`).
    pub fn next(&mut self, x: &[f64], g: &[f64]) -> (Vec<f64>, bool) {
        assert_eq!(x.len(), g.len(), "Anderson: x and G(x) differ in length");
        if self.depth == 0 {
            return (g.to_vec(), false);
        }
        let f: Vec<f64> = g.iter().zip(x).map(|(g, x)| g - x).collect();
        if let Some((lx, lf)) = self.last.take() {
            self.dx.push_back(x.iter().zip(&lx).map(|(a, b)| a - b).collect());
            self.df.push_back(f.iter().zip(&lf).map(|(a, b)| a - b).collect());
            if self.dx.len() > self.depth {
                self.dx.pop_front();
                self.df.pop_front();
            }
        }
        let gamma = self.mixing(&f);
        self.last = Some((x.to_vec(), f));
        let Some(gamma) = gamma else { return (g.to_vec(), false) };
        let mut out = g.to_vec();
        for ((gj, dx), df) in gamma.iter().zip(&self.dx).zip(&self.df) {
            out.iter_mut().zip(dx.iter().zip(df)).for_each(|(o, (a, b))| *o -= gj * (a + b));
        }
        (out, true)
    }

    /// gamma = argmin |f - DF gamma| from the normal equations, with a ridge of 1e-12 of their
    /// largest diagonal entry against collinear history; `None` without history or when they
    /// cannot be solved (the history is then dropped).
    fn mixing(&mut self, f: &[f64]) -> Option<Vec<f64>> {
        let k = self.df.len();
        if k == 0 {
            return None;
        }
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        let mut a = nalgebra::DMatrix::<f64>::zeros(k, k);
        let mut b = nalgebra::DVector::<f64>::zeros(k);
        for i in 0..k {
            for j in 0..=i {
                let v = dot(&self.df[i], &self.df[j]);
                a[(i, j)] = v;
                a[(j, i)] = v;
            }
            b[i] = dot(&self.df[i], f);
        }
        let ridge = 1e-12 * (0..k).map(|i| a[(i, i)]).fold(0.0, f64::max);
        if !(ridge > 0.0 && ridge.is_finite()) {
            self.reset();
            return None;
        }
        for i in 0..k {
            a[(i, i)] += ridge;
        }
        match a.cholesky().map(|c| c.solve(&b)) {
            Some(gamma) if gamma.iter().all(|g| g.is_finite()) => Some(gamma.iter().copied().collect()),
            _ => {
                self.reset();
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_distr::{Distribution, StandardNormal};
    use rand_pcg::Pcg64;

    /// G(x) = A x + b with A = rho Q diag(s) Q^T (a slow contraction, spectral radius rho) and
    /// its fixed point x* = (I - A)^{-1} b, computed by Gaussian elimination.
    fn linear_problem(n: usize, rho: f64, seed: u64) -> (Vec<Vec<f64>>, Vec<f64>, Vec<f64>) {
        let mut rng = Pcg64::seed_from_u64(seed);
        let mut normal = || -> f64 { StandardNormal.sample(&mut rng) };
        let mut a = vec![vec![0.0; n]; n];
        // A symmetric matrix with eigenvalues rho * s_i, s_i in [-1, 1], through a random
        // orthogonal matrix (Gram-Schmidt on a random one).
        let mut q: Vec<Vec<f64>> = (0..n).map(|_| (0..n).map(|_| normal()).collect()).collect();
        for i in 0..n {
            for j in 0..i {
                let d: f64 = (0..n).map(|k| q[i][k] * q[j][k]).sum();
                for k in 0..n {
                    q[i][k] -= d * q[j][k];
                }
            }
            let norm = q[i].iter().map(|v| v * v).sum::<f64>().sqrt();
            q[i].iter_mut().for_each(|v| *v /= norm);
        }
        let s: Vec<f64> = (0..n).map(|i| if i == 0 { 1.0 } else { normal().tanh() }).collect();
        for i in 0..n {
            for j in 0..n {
                a[i][j] = rho * (0..n).map(|k| q[k][i] * s[k] * q[k][j]).sum::<f64>();
            }
        }
        let b: Vec<f64> = (0..n).map(|_| normal()).collect();
        // Solve (I - A) x = b.
        let mut m: Vec<Vec<f64>> =
            (0..n).map(|i| (0..n).map(|j| if i == j { 1.0 } else { 0.0 } - a[i][j]).chain([b[i]]).collect()).collect();
        for c in 0..n {
            let p = (c..n).max_by(|&i, &j| m[i][c].abs().total_cmp(&m[j][c].abs())).expect("rows");
            m.swap(c, p);
            for r in 0..n {
                if r != c {
                    let f = m[r][c] / m[c][c];
                    for k in c..=n {
                        m[r][k] -= f * m[c][k];
                    }
                }
            }
        }
        let x_star = (0..n).map(|i| m[i][n] / m[i][i]).collect();
        (a, b, x_star)
    }

    fn apply(a: &[Vec<f64>], b: &[f64], x: &[f64]) -> Vec<f64> {
        a.iter().zip(b).map(|(row, bi)| row.iter().zip(x).map(|(r, v)| r * v).sum::<f64>() + bi).collect()
    }

    fn dist(x: &[f64], y: &[f64]) -> f64 {
        x.iter().zip(y).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max)
    }

    #[test]
    fn full_depth_solves_a_linear_fixed_point_in_dimension_plus_one_steps() {
        // Walker & Ni's Theorem 2.2: type-II Anderson with unlimited depth is GMRES on
        // (I - A) x = b, exact after at most n + 1 steps; the plain iteration with spectral
        // radius 0.98 needs about 1,000 steps for the same accuracy.
        let n = 12;
        let (a, b, x_star) = linear_problem(n, 0.98, 7);
        let mut acc = Anderson::new(n + 1);
        let mut x = vec![0.0; n];
        for _ in 0..n + 2 {
            let g = apply(&a, &b, &x);
            x = acc.next(&x, &g).0;
        }
        assert!(dist(&x, &x_star) < 1e-8, "Anderson: {}", dist(&x, &x_star));
        let mut plain = vec![0.0; n];
        for _ in 0..n + 2 {
            plain = apply(&a, &b, &plain);
        }
        assert!(dist(&plain, &x_star) > 1e-3, "the plain iteration should still be far: {}", dist(&plain, &x_star));
    }

    #[test]
    fn short_depth_beats_the_plain_iteration_and_keeps_the_fixed_point() {
        let n = 40;
        let (a, b, x_star) = linear_problem(n, 0.95, 11);
        let steps_to = |depth: usize| {
            let mut acc = Anderson::new(depth);
            let mut x = vec![0.0; n];
            for k in 1..=5000 {
                let g = apply(&a, &b, &x);
                x = acc.next(&x, &g).0;
                if dist(&x, &x_star) < 1e-9 {
                    return k;
                }
            }
            usize::MAX
        };
        let (plain, aa) = (steps_to(0), steps_to(3));
        assert!(plain > 300 && plain < 5000, "plain: {plain} steps");
        assert!(aa * 2 < plain, "depth 3: {aa} steps against plain {plain}");
        // At the fixed point the residual is zero, so the proposal is the fixed point itself.
        let mut acc = Anderson::new(3);
        let _ = acc.next(&vec![0.0; n], &apply(&a, &b, &vec![0.0; n]));
        let (p, extrapolated) = acc.next(&x_star, &apply(&a, &b, &x_star));
        assert!(extrapolated);
        assert!(dist(&p, &x_star) < 1e-12);
    }

    #[test]
    fn depth_zero_and_a_reset_propose_g_itself() {
        let mut acc = Anderson::new(0);
        assert_eq!(acc.next(&[1.0, 2.0], &[3.0, 5.0]), (vec![3.0, 5.0], false));
        assert_eq!(acc.next(&[3.0, 5.0], &[4.0, 5.5]), (vec![4.0, 5.5], false));
        let mut acc = Anderson::new(2);
        let _ = acc.next(&[1.0, 2.0], &[3.0, 5.0]);
        acc.reset();
        assert_eq!(acc.next(&[3.0, 5.0], &[4.0, 5.5]), (vec![4.0, 5.5], false));
        // A repeated residual difference of zero (G(x) - x constant) cannot be mixed.
        let mut acc = Anderson::new(2);
        let _ = acc.next(&[0.0], &[1.0]);
        assert_eq!(acc.next(&[1.0], &[2.0]), (vec![2.0], false));
    }
}
