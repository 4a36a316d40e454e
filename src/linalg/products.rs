//! Dense matrix products: general and lower-triangle-only, with the scalable methods'
//! parallelism.
use faer::{Mat, MatMut, MatRef, Par};

/// out (+)= A^T A, lower triangle only (one pass of a symmetric rank-k product: half the
/// multiply-adds of a general product); the upper triangle of `out` is left untouched.
pub fn add_gram_lower(out: MatMut<'_, f64>, a: MatRef<'_, f64>, alpha: f64) {
    use faer::linalg::matmul::triangular::{matmul, BlockStructure};
    matmul(
        out,
        BlockStructure::TriangularLower,
        faer::Accum::Add,
        a.transpose(),
        BlockStructure::Rectangular,
        a,
        BlockStructure::Rectangular,
        alpha,
        Par::Seq,
    );
}

/// The lower triangle of A B (a square product known to be symmetric), the upper left zero:
/// half the multiply-adds of [`matmul_par`], with its parallelism.
pub fn matmul_lower_par(a: MatRef<'_, f64>, b: MatRef<'_, f64>) -> Mat<f64> {
    use faer::linalg::matmul::triangular::{matmul, BlockStructure};
    let mut out = Mat::zeros(a.nrows(), b.ncols());
    matmul(
        out.as_mut(),
        BlockStructure::TriangularLower,
        faer::Accum::Replace,
        a,
        BlockStructure::Rectangular,
        b,
        BlockStructure::Rectangular,
        1.0,
        gemm_par(),
    );
    out
}

/// Copy the lower triangle of a square matrix onto its upper triangle.
pub fn symmetrize_from_lower(m: &mut Mat<f64>) {
    for j in 0..m.ncols() {
        for i in 0..j {
            m[(i, j)] = m[(j, i)];
        }
    }
}

/// A B with the large-product parallelism ([`gemm_par`]).
pub fn matmul_par(a: MatRef<'_, f64>, b: MatRef<'_, f64>) -> Mat<f64> {
    let mut out = Mat::zeros(a.nrows(), b.ncols());
    faer::linalg::matmul::matmul(out.as_mut(), faer::Accum::Replace, a, b, 1.0, gemm_par());
    out
}

/// Parallelism for the large matrix products of the scalable methods: every thread of the
/// current rayon pool (the runner's), so a cell running alone uses the whole machine.
/// faer splits the output, not the inner sum, so results do not depend on the thread count
/// (checked by the conformance test on 1 and 2 threads).
pub fn gemm_par() -> Par {
    match rayon::current_num_threads() {
        0 | 1 => Par::Seq,
        n => Par::rayon(n),
    }
}

/// prior_j - (V^T V)_jj for every column j of V, floored at 0: the predictive variances of a
/// GP conditioned through a Cholesky factor, V = L^{-1} k* (round-off can take them just below
/// zero next to a training point). Each column's squares are summed in order.
pub fn reduced_variances(prior: &[f64], v: MatRef<'_, f64>) -> Vec<f64> {
    assert_eq!(prior.len(), v.ncols(), "one prior variance a column");
    (0..v.ncols())
        .map(|j| {
            let col = v.col(j).try_as_col_major().expect("a solve's output is column-major").as_slice();
            (prior[j] - col.iter().map(|x| x * x).sum::<f64>()).max(0.0)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use faer::Mat;
    use rand::{RngExt, SeedableRng};

    #[test]
    fn matmul_lower_par_is_the_products_lower_triangle_with_the_same_bits_on_any_thread_count() {
        // Against the product summed by hand, at sizes on both sides of faer's blocking; the
        // bits may not depend on the thread count (results must not depend on the machine).
        let mut rng = rand_pcg::Pcg64::seed_from_u64(5);
        for (m, k) in [(1, 1), (5, 3), (70, 129), (257, 1287)] {
            let a = Mat::from_fn(m, k, |_, _| rng.random_range(-1.0..1.0));
            let b = Mat::from_fn(k, m, |_, _| rng.random_range(-1.0..1.0));
            let seq = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap().install(|| matmul_lower_par(a.as_ref(), b.as_ref()));
            for j in 0..m {
                for i in 0..m {
                    if i >= j {
                        let want: f64 = (0..k).map(|l| a[(i, l)] * b[(l, j)]).sum();
                        assert!((seq[(i, j)] - want).abs() < 1e-12 * k as f64, "{m}x{k}: lower ({i},{j})");
                    } else {
                        assert_eq!(seq[(i, j)], 0.0, "{m}x{k}: upper ({i},{j}) was written");
                    }
                }
            }
            for threads in [2, 3] {
                let par = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap()
                    .install(|| matmul_lower_par(a.as_ref(), b.as_ref()));
                for j in 0..m {
                    for i in 0..m {
                        assert_eq!(par[(i, j)].to_bits(), seq[(i, j)].to_bits(), "{m}x{k} on {threads} threads: ({i},{j})");
                    }
                }
            }
        }
    }

    /// matmul_par and the triangular solves at the scalable methods' sizes, above faer's
    /// thread cut-off (products over 32,768 multiply-adds, solves over 64 right-hand sides),
    /// give the same bits on 1, 2 and 3 threads.
    #[test]
    fn products_and_solves_at_working_sizes_have_the_same_bits_on_any_thread_count() {
        let mut rng = rand_pcg::Pcg64::seed_from_u64(9);
        for (m, n) in [(20, 300), (130, 300), (257, 1287)] {
            let a = Mat::from_fn(m, n, |_, _| rng.random_range(-1.0..1.0));
            let b = Mat::from_fn(n, m, |_, _| rng.random_range(-1.0..1.0));
            let spd = &a * a.transpose() + Mat::<f64>::identity(m, m) * faer::Scale(n as f64);
            let chol = crate::linalg::Chol::factor(spd.as_ref(), "test").unwrap();
            let on = |threads: usize| {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                pool.install(|| (matmul_par(a.as_ref(), b.as_ref()), chol.solve_l_par(a.as_ref()), chol.solve_lt_par(a.as_ref())))
            };
            let bits = |x: &Mat<f64>| (0..x.ncols()).flat_map(|j| (0..x.nrows()).map(move |i| x[(i, j)].to_bits())).collect::<Vec<u64>>();
            let one = on(1);
            for threads in [2, 3] {
                let many = on(threads);
                assert!(bits(&one.0) == bits(&many.0), "{m}x{n} product on {threads} threads");
                assert!(bits(&one.1) == bits(&many.1), "{m}x{n} L^-1 solve on {threads} threads");
                assert!(bits(&one.2) == bits(&many.2), "{m}x{n} L^-T solve on {threads} threads");
            }
        }
    }
}
