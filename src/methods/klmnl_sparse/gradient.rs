//! The gradient of the optimised sparse bound w.r.t. the kernel's log-parameters (App. C.4).
use super::*;

/// d log Z~_h* / d theta by the envelope theorem: the partial derivative at fixed (m, V, b, S),
/// the variational optimum. With alpha = K^{-1} m, beta = K^{-1} K_f (y - g-bar),
/// T = K^{-1} - K^{-1} V K^{-1}, A = K^{-1} K_f and N = A W_f A^T (W_fi = S_i - V_fi^{-1}):
///   d = tr(G_K dK) + tr(dK_f X) - 1/2 sum_i tr(W_fi dK_ff,ii),
///   G_K = 1/2 (alpha alpha^T - T) - sym(alpha beta^T) + 1/2 (-N + N V K^{-1} + K^{-1} V N),
///   X = (y - g-bar) alpha^T + W_f K_f^T T.
/// At the optimum beta = alpha and N = V^{-1} - K^{-1}, and G_K reduces to the paper's
/// -1/2 (alpha alpha^T - T + N) (App. C.4); the form above is the exact partial derivative at
/// any (m, V), so an imperfect convergence costs only the envelope error. In whitened
/// coordinates (u = L~^T (y - b), w = L~^T (y - g-bar), W^ = L~^T W_f L~): G_K = L_K^{-T} G^ L_K^{-1},
/// G^ = 1/2 (u u^T - I + R) - sym(u w^T) + 1/2 (-W^ + W^ R + R W^), and X = X^ L_K^{-1},
/// X^ = (y - g-bar) u^T + W_f L~ (I - R). `dkx` are dKx/d(log parameter) over the training
/// inputs; dK, dK_f, dK_ff follow from them through the separable form Kx (x) K^c, and the
/// noise sigma_eps^2 = noise_rel mean(diag Kx) mean(diag K^c) moves with the signal variance.
pub(super) fn hyper_gradient(pr: &SparsePrior, st: &SState, dkx: &[Mat<f64>]) -> Result<Vec<f64>, FitError> {
    let (n, c, s) = (pr.n(), pr.c(), pr.s);
    let nc = n * c;
    let base = &pr.base;
    let bt = bound(pr, st)?;
    let y1 = pr.y1();
    let ymb: Vec<f64> = y1.iter().zip(&st.b).map(|(y, b)| y - b).collect();
    let ymg: Vec<f64> = (0..nc).map(|k| y1[k] - bt.terms[k / c].gbar[k % c]).collect();
    let u = pr.lt_times(&ymb);
    let w = pr.lt_times(&ymg);
    // The raw W_fi: -W_fi / 2 is the exact partial derivative of h_i in V_fi.
    let wf: Vec<Mat<f64>> =
        (0..n).map(|i| Ok(sym(&(&st.s[i] - chol(&st.v.blocks[i], "V_fi")?.solve(eye(c).as_ref()))))).collect::<Result<_, FitError>>()?;
    let r = &st.v.r;
    let mut what = Mat::<f64>::zeros(s, s);
    for (i, wi) in wf.iter().enumerate() {
        let lb = pr.ltt_block(i);
        matmul(what.as_mut(), Accum::Add, (lb * wi).as_ref(), lb.transpose(), 1.0, Par::Seq);
    }
    let wr = &what * r;
    let ghat = Mat::from_fn(s, s, |a, b| {
        0.5 * (u[a] * u[b] - if a == b { 1.0 } else { 0.0 } + r[(a, b)]) - 0.5 * (u[a] * w[b] + w[a] * u[b])
            + 0.5 * (-what[(a, b)] + wr[(a, b)] + wr[(b, a)])
    });
    let a1 = pr.lk.solve_lt(ghat.as_ref());
    let gk = pr.lk.solve_lt(a1.transpose());
    // X^^T = u (y - g-bar)^T + (I - R) L~^T W_f (s x nC), then Y^T = L_K^{-T} X^^T.
    let imr_ltt = &pr.ltt - r * &pr.ltt;
    let mut xht = Mat::<f64>::zeros(s, nc);
    for i in 0..n {
        let blk = imr_ltt.as_ref().subcols(i * c, c) * &wf[i];
        for q in 0..c {
            for a in 0..s {
                xht[(a, i * c + q)] = u[a] * ymg[i * c + q] + blk[(a, q)];
            }
        }
    }
    let yt = pr.lk.solve_lt(xht.as_ref());
    let idx: Vec<usize> = pr.sites.iter().map(|&(i, k)| i * c + k).collect();
    let tr_gk: f64 = (0..s).map(|a| gk[(a, a)]).sum();
    let kc_mean = mean_diag(&base.kc);
    let tr_wkc: Vec<f64> = wf.iter().map(|wi| trace_prod(wi.as_ref(), base.kc.as_ref())).collect();
    let grads = dkx
        .iter()
        .map(|d| {
            let dk = |p: usize, q: usize| d[(p / c, q / c)] * base.kc[(p % c, q % c)];
            let mut g = 0.0;
            for a in 0..s {
                for b in 0..s {
                    g += gk[(a, b)] * dk(idx[a], idx[b]);
                }
                for q in 0..nc {
                    g += dk(idx[a], q) * yt[(a, q)];
                }
            }
            g += tr_gk * base.noise_rel * mean_diag(d) * kc_mean;
            g -= 0.5 * (0..n).map(|i| d[(i, i)] * tr_wkc[i]).sum::<f64>();
            g
        })
        .collect();
    Ok(grads)
}
