//! The prior covariance K = Kx (x) Kc and the state V of a choice of the per-datum W_i.
use super::*;

// ---------------------------------------------------------------------------------------
// The full variational state.

/// V through T (V = K - K T K): either the fixed-point form T = Z^T Z with Z = L_B^{-1} L_W^T
/// (kept factored: the sweeps need only the blocks of V, so Z is formed on demand) or a dense
/// T after a convex-mix line search, with P = L_K^T T L_K (the next mix's starting point, linear
/// in T, so a mix of two states mixes their P).
#[derive(Clone)]
pub(super) enum TRep {
    Fx { lb: Chol, lwt: Mat<f64> },
    Dense { t: Mat<f64>, p: Mat<f64> },
}

impl TRep {
    pub(super) fn dense(&self) -> Mat<f64> {
        match self {
            TRep::Fx { lb, lwt } => {
                let z = lb.solve_l(lwt.as_ref());
                z.transpose() * &z
            }
            TRep::Dense { t, .. } => t.clone(),
        }
    }

    /// (T, L_K^T T L_K) for the L_K factor `l`; from Z (2 r p^2 flops for r = rank W) rather
    /// than from a dense T (2 p^3).
    pub(super) fn with_sandwich(&self, l: MatRef<'_, f64>) -> (Mat<f64>, Mat<f64>) {
        match self {
            TRep::Fx { lb, lwt } => {
                let z = lb.solve_l(lwt.as_ref());
                let zl = &z * l;
                (z.transpose() * &z, zl.transpose() * &zl)
            }
            TRep::Dense { t, p } => (t.clone(), p.clone()),
        }
    }
}

/// A V candidate: T, the diagonal blocks V_i (in [`Prior::basis`]), log|K^{-1}V| and tr(T K).
#[derive(Clone)]
pub(super) struct VState {
    pub(super) t: TRep,
    pub(super) blocks: Vec<Mat<f64>>,
    pub(super) logdet_kinv_v: f64,
    pub(super) tr_tk: f64,
}

/// Everything fixed for one kernel: K = Kx (x) Kc (datum-major), y one-hot, sizes, and K^c's
/// eigendecomposition Kc = U diag(lam) U^T (U = I, not stored, for a diagonal K^c).
pub(super) struct Prior {
    pub n: usize,
    pub c: usize,
    pub k: Mat<f64>,
    pub kx: Mat<f64>,
    pub kc: Mat<f64>,
    pub y1: Vec<f64>,
    pub(super) kc_lam: Vec<f64>,
    pub(super) kc_u: Option<Mat<f64>>,
}

/// K^c's eigenvalues are floored at this fraction of the largest: below it they are rounding
/// noise of K^c's entries (eps |K^c| ~ 1e-15) and may come out zero or negative. A learned K^c
/// (M5) can approach singularity, the bound rising towards its limit at the boundary of the PSD
/// cone; with the floor the fits there stay defined and differ from that limit by O(1e-14).
pub(super) const KC_EIG_FLOOR: f64 = 1e-14;

impl Prior {
    pub fn new(kx: Mat<f64>, kc: Mat<f64>, y: &[usize]) -> Result<Prior, FitError> {
        let n = kx.nrows();
        let c = kc.nrows();
        let diagonal = (0..c).all(|i| (0..c).all(|j| i == j || kc[(i, j)] == 0.0));
        let (mut kc_lam, kc_u) = if diagonal {
            ((0..c).map(|i| kc[(i, i)]).collect::<Vec<_>>(), None)
        } else {
            let (lam, u) = eigh(&kc)?;
            (lam, Some(u))
        };
        let floor = KC_EIG_FLOOR * kc_lam.iter().copied().fold(0.0, f64::max);
        let kc = if kc_lam.iter().all(|&l| l >= floor) {
            kc
        } else {
            kc_lam.iter_mut().for_each(|l| *l = l.max(floor));
            match &kc_u {
                Some(u) => Mat::from_fn(c, c, |i, j| (0..c).map(|k| u[(i, k)] * kc_lam[k] * u[(j, k)]).sum()),
                None => Mat::from_fn(c, c, |i, j| if i == j { kc_lam[i] } else { 0.0 }),
            }
        };
        let k = kron(kx.as_ref(), kc.as_ref());
        let mut y1 = vec![0.0; n * c];
        for (i, &yi) in y.iter().enumerate() {
            y1[i * c + yi] = 1.0;
        }
        Ok(Prior { n, c, k, kx, kc, y1, kc_lam, kc_u })
    }

    /// The basis the per-datum matrices of a fit at this prior are held in.
    pub(super) fn basis(&self) -> Basis<'_> {
        Basis(self.kc_u.as_ref())
    }
}

/// V^fx = (K^{-1} + W)^{-1} via E.2.1: W = L_W L_W^T per block (eigenvalues > eps kept),
/// B = I + L_W^T K L_W, T = L_W B^{-1} L_W^T, V = K - K T K, log|K^{-1}V| = -log|B|.
/// W's blocks come, and V's blocks go, in K^c's eigenbasis ([`Prior::basis`]).
///
/// Why that basis: a learned K^c (model M5) can be nearly singular (smallest eigenvalue lam_min
/// down to 1e-11). Along its near-null direction V_i's variance is about lam_min Kx_ii and S_i,
/// optimised against V_i, about its inverse. Held in the class basis, V_i and S_i carry errors
/// of order eps |V_i| and eps |S_i|, so log|V_i| and tr(S_i V_i) in h were each off by about
/// eps cond(V_i) ~ 1e-6 nats per datum: every V proposal then differed from the current state
/// by ~1e-5 nats of noise, the small true gains near the optimum were rejected, and the sweeps
/// crawled (2-20 s per fit, > 1000 s per M5 learning run on glass). In K^c's eigenbasis the
/// near-null direction is a coordinate axis: K = Kx (x) diag(lam) scales its rows exactly, the
/// blocks come out accurate entry by entry, and Cholesky, being invariant to diagonal scaling,
/// keeps that accuracy.
pub(super) fn v_from_w(pr: &Prior, w: &[Mat<f64>]) -> Result<VState, FitError> {
    let (n, c) = (pr.n, pr.c);
    let nc = n * c;
    // Block columns of L_W: (datum, C x r_i factor F_i in K^c's eigenbasis).
    let fs: Vec<Mat<f64>> = w.iter().map(psd_factor).collect::<Result<_, _>>()?;
    // B = I + L_W^T (Kx (x) diag(lam)) L_W, and L_W^T in the class basis (T is kept there).
    let lam = Mat::from_fn(c, c, |p, q| if p == q { pr.kc_lam[p] } else { 0.0 });
    let (mut bm, offs) = kron_sandwich_lower(&pr.kx, lam.as_ref(), &fs);
    let r = offs[n];
    let mut lwt = Mat::<f64>::zeros(r, nc);
    for (i, f) in fs.iter().enumerate() {
        let f_class = match &pr.kc_u {
            Some(u) => u * f,
            None => f.clone(),
        };
        lwt.as_mut().submatrix_mut(offs[i], i * c, f.ncols(), c).copy_from(f_class.transpose());
        for k in offs[i]..offs[i + 1] {
            bm[(k, k)] += 1.0;
        }
    }
    let cols: Vec<(usize, Mat<f64>)> = fs.into_iter().enumerate().collect();
    let lb = Chol::factor_owned(bm, "B = I + L_W^T K L_W")?;
    let q_store = whitened_gram(pr, &lb, &cols, &offs);
    let q = faer::MatRef::from_column_major_slice(&q_store, r, nc);
    let blocks: Vec<Mat<f64>> = (0..n)
        .map(|i| {
            let qi = q.as_ref().subcols(i * c, c);
            let ki = Mat::from_fn(c, c, |p, qq| if p == qq { pr.kx[(i, i)] * pr.kc_lam[p] } else { 0.0 });
            sym(&(ki - qi.transpose() * qi))
        })
        .collect();
    // tr(T K) = tr(B^{-1} L_W^T K L_W) = tr(B^{-1} (B - I)) = r - tr(B^{-1}), where
    // tr(B^{-1}) = ||L_B^{-1}||_F^2 comes from q without a triangular inverse (r^3 / 3 flops):
    // q L_W = L_B^{-1} (B - I) = L_B^T - L_B^{-1}, so L_B^{-1} is 1 / L_kk on the diagonal and
    // -(q L_W) below it. Column block i of q L_W is q[:, datum i] F_i.
    let l = lb.l();
    let mut tr_binv: f64 = (0..r).map(|k| 1.0 / (l[(k, k)] * l[(k, k)])).sum();
    for ((i, f), &o) in cols.iter().zip(&offs) {
        let qf = q.as_ref().subcols(i * c, c) * f;
        for k in 0..f.ncols() {
            tr_binv += (o + k + 1..r).map(|j| qf[(j, k)] * qf[(j, k)]).sum::<f64>();
        }
    }
    let tr_tk = r as f64 - tr_binv;
    let logdet_kinv_v = -lb.log_det();
    Ok(VState { t: TRep::Fx { lb, lwt }, blocks, logdet_kinv_v, tr_tk })
}

/// The lower triangle of E^T (Kx (x) Kc) E for E = blockdiag(E_1, ..., E_n) (E_i: C x r_i): block
/// (i, j) is Kx_ij E_i^T Kc E_j, from one r x C x r product. Also the column offsets of the
/// blocks (n + 1 of them, the last r = sum r_i).
pub(super) fn kron_sandwich_lower(kx: &Mat<f64>, kc: MatRef<'_, f64>, es: &[Mat<f64>]) -> (Mat<f64>, Vec<usize>) {
    let c = kc.nrows();
    let mut offs = Vec::with_capacity(es.len() + 1);
    let mut datum_of = Vec::new();
    offs.push(0);
    for (i, e) in es.iter().enumerate() {
        datum_of.extend(std::iter::repeat_n(i, e.ncols()));
        offs.push(offs[i] + e.ncols());
    }
    let r = offs[es.len()];
    let mut e_all = Mat::<f64>::zeros(c, r);
    for (i, e) in es.iter().enumerate() {
        e_all.as_mut().subcols_mut(offs[i], e.ncols()).copy_from(e);
    }
    let kc_e = kc * &e_all;
    let mut out = Mat::<f64>::zeros(r, r);
    matmul(out.as_mut(), Accum::Replace, e_all.transpose(), kc_e.as_ref(), 1.0, Par::Seq);
    for col in 0..r {
        let j = datum_of[col];
        for row in col..r {
            out[(row, col)] *= kx[(datum_of[row], j)];
        }
    }
    (out, offs)
}

/// q = L_B^{-1} L_W^T K (r x nC, in K^c's eigenbasis, column-major), the factor of K T K = q^T q, by two
/// structured steps instead of one dense triangular solve (r^2 nC flops):
/// 1. Z = L_B^{-1} L_W^T. Datum i's columns of L_W^T are zero above its row offset o_i, and so
///    are Z's (forward substitution), so they need only the trailing triangle L_B[o_i.., o_i..]
///    (solved for a group of data at a time): about r^3 / 3 flops.
/// 2. q = Z (Kx (x) diag(lam)). Z stored column-major as r x nC is, read with rows (c, row), the
///    rC x n matrix whose product with Kx gives q in the same layout: about r C n^2 flops, as
///    the rows of datum i need only the columns of data 0..=i.
pub(super) fn whitened_gram(pr: &Prior, lb: &Chol, cols: &[(usize, Mat<f64>)], offs: &[usize]) -> Vec<f64> {
    const GROUP: usize = 16;
    let (n, c) = (pr.n, pr.c);
    let r = lb.dim();
    let mut z = vec![0.0; r * n * c];
    {
        let mut zm = faer::MatMut::from_column_major_slice_mut(&mut z, r, n * c);
        for ((i, f), &o) in cols.iter().zip(offs) {
            zm.as_mut().submatrix_mut(o, i * c, f.ncols(), c).copy_from(f.transpose());
        }
        for i0 in (0..n).step_by(GROUP) {
            let (o, width) = (offs[i0], (n - i0).min(GROUP) * c);
            if o < r {
                solve_lower_triangular_in_place(
                    lb.l().submatrix(o, o, r - o, r - o),
                    zm.as_mut().submatrix_mut(o, i0 * c, r - o, width),
                    Par::Seq,
                );
            }
        }
    }
    // Row k of Z (datum i's columns zero above o_i) is zero in the columns of the data after
    // the one k belongs to, so a block of rows, read as each class's r x n slice, needs only
    // the leading columns of Kx's rows: half the flops of the dense product.
    let zp = faer::MatRef::from_column_major_slice(&z, r * c, n);
    let mut q = vec![0.0; r * n * c];
    let mut qp = faer::MatMut::from_column_major_slice_mut(&mut q, r * c, n);
    for i0 in (0..n).step_by(GROUP) {
        let i1 = (i0 + GROUP).min(n);
        let (o0, o1) = (offs[i0], offs[i1]);
        for class in 0..c {
            let rows = class * r + o0;
            matmul(
                qp.as_mut().submatrix_mut(rows, 0, o1 - o0, n),
                Accum::Replace,
                zp.submatrix(rows, 0, o1 - o0, i1),
                pr.kx.as_ref().subrows(0, i1),
                1.0,
                Par::Seq,
            );
        }
    }
    for (col, qc) in q.chunks_exact_mut(r).enumerate() {
        let lam = pr.kc_lam[col % c];
        qc.iter_mut().for_each(|v| *v *= lam);
    }
    q
}
