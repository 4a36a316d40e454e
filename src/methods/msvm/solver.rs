//! The dual solver shared by the four machines: block coordinate ascent over each datum's Q - 1
//! dual variables (each block solved exactly, `block.rs`), in a shuffled order per sweep, with the
//! bias handled by the method of multipliers (Hestenes-Powell augmented Lagrangian) on the
//! equality constraints sum_i beta_i = 0 whose multiplier is the bias b.
//!
//! Why: a move of one datum's block cannot keep sum_i beta_i = 0, and SMO-style moves that do
//! (pairs or cycles of data across classes) need working sets of up to Q data. Hsu & Lin (2002)
//! and BSVM drop the constraints by adding |b|^2 / 2 to the primal, which changes the machine
//! (it is our penalised problem with b held at 0 and rho = 1). The augmented
//! Lagrangian keeps MSVMpack's machine exactly: it maximises
//!     D(alpha) - b . S(alpha) - (rho / 2) |S(alpha)|^2,   S = sum_i beta_i,
//! over alpha (the penalty is a constant rho added to the kernel, so blocks stay exact) and
//! updates b <- b + rho S, the multiplier step. We take that step after every sweep (an inexact
//! augmented Lagrangian, one sweep per round, as primal-dual splitting schemes do): on
//! glass-sized problems it needed far fewer sweeps than solving each round to tolerance. The run
//! stops on a certificate only: no block moved by more than `tol` in the sweep (margin units:
//! (K_ii + rho) |delta alpha|), the bias moved by at most `tol`, and the duality gap of the
//! fixed-bias problem, P(w(alpha), b) - (D(alpha) - b . S), is at most `tol` relative to P (it is
//! zero only at that problem's optimum, and with S = 0 that is the machine's optimum); or at
//! `max_sweeps` sweeps (or an iteration budget's, a sweep being the iteration).
//!
//! Below C = 1 the three tests use `tol` times C. Every alpha is O(C) (at most C; MSVM2's, which
//! have no upper bound, are held there by its slack term alpha^2 / (4C)), so the outputs
//! F = K beta and the part of the objectives that depends on the solution shrink with C, while
//! margin units (and P, which carries C times the loss of all-zero outputs) do not: with the
//! absolute tests LLW stopped after two sweeps at C = 0.01 with its outputs 80% off the optimum,
//! and WW, CS and MSVM2 a few per cent off at C = 0.001-0.01. At C >= 1 the outputs are of the
//! margin's size and the tests are the absolute ones. (The bias need not shrink: with
//! unbalanced or empty classes its differences stay of the margin's size, and at C far below
//! 1 / (K_ii sqrt(n)) reaching them takes many sweeps, each moving it by at most rho |S|.)
//! Left for the next change of msvm's numbers: the gap test's floor max(|P|, 1) makes it an
//! absolute tol C once P < 1 (C n times the loss of zero outputs below 1); on the specs' grids
//! (C >= 0.01, n >= 70 in a fold) P stays above about 0.7, so the floor loosens it at most 1.4x.
use super::formulation::Formulation;
use crate::linalg::axpy;
use crate::methods::{FitContext, FitError, StopReason};
use faer::Mat;
use rand::seq::SliceRandom;

/// A solution of the dual: alpha and beta [n][Q], the bias, and the kernel part of the outputs
/// F = K beta, [n][Q] (h_k(x_i) = F_ik + b_k).
#[derive(Clone, Debug)]
pub(crate) struct DualSolution {
    pub alpha: Vec<Vec<f64>>,
    pub beta: Vec<Vec<f64>>,
    pub bias: Vec<f64>,
    pub f: Vec<Vec<f64>>,
    pub sweeps: u64,
    pub stop: StopReason,
}

/// Solver settings.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SolverSettings {
    pub c: f64,
    pub tol: f64,
    pub max_sweeps: u64,
}

/// Solve the dual of `form` with Gram matrix `k` ([n, n]) and classes `y` in 0..q.
pub(crate) fn solve(
    form: Formulation,
    k: &Mat<f64>,
    y: &[usize],
    q: usize,
    s: SolverSettings,
    ctx: Option<&FitContext>,
) -> Result<DualSolution, FitError> {
    let n = y.len();
    assert_eq!((k.nrows(), k.ncols()), (n, n));
    // alpha and beta datum-major in one buffer each (alpha[i * q + c]), rows at the end.
    let mut alpha = vec![0.0; n * q];
    let mut beta = vec![0.0; n * q];
    // F class-major in one buffer (f[c * n + j] = F_jc): a block's update of F is then Q
    // contiguous axpys down column i of K, the bulk of a sweep, vectorised (rows as separate
    // vectors cost a pointer chase per datum).
    let mut f = vec![0.0; n * q];
    let mut bias = vec![0.0; q];
    let mut sum_beta = vec![0.0; q];
    // The penalty: the kernel's scale over sqrt(n). The penalty couples all n blocks (a
    // constant n rho on the all-ones direction) while the bias's curvature grows like n / K_ii:
    // K_ii / sqrt(n) sits between, and on glass-sized problems (n 128, Q 6, the paper's grid)
    // needed 5x fewer sweeps in all than K_ii (Hsu & Lin's constant) or K_ii / n.
    let rho = (0..n).map(|i| k[(i, i)]).sum::<f64>() / n.max(1) as f64;
    let rho = if rho > 0.0 { rho } else { 1.0 };
    let rho = rho / (n as f64).sqrt();
    let mut u = vec![0.0; q];
    let mut new_alpha = vec![0.0; q];
    let mut new_beta = vec![0.0; q];
    let mut delta = vec![0.0; q];
    let mut sweeps = 0u64;
    // Blocks in a fresh pseudo-random order each sweep: on glass-sized problems near the
    // paper's hard corner (C 100-1000, theta 5-15) it converged where data order did not, and
    // left gaps 10-100x smaller where neither did. The order is seeded by a constant, not the
    // cell's rng, so a fit is a function of its data and settings alone (select's refit is then
    // the direct fit at the chosen point).
    let mut order: Vec<usize> = (0..n).collect();
    let mut order_rng = <rand_pcg::Pcg64 as rand::SeedableRng>::seed_from_u64(0x005E_ED0F_B10C);
    // The tests' tolerance: `tol` in margin units at C >= 1, scaled with the outputs below.
    let tol = s.tol * s.c.min(1.0);
    let mut stop = StopReason::MaxIterations;
    while sweeps < s.max_sweeps {
        if let Some(ctx) = ctx {
            ctx.check_deadline()?;
        }
        // One sweep of block coordinate ascent on the augmented Lagrangian at the current bias.
        let mut moved = 0.0f64;
        order.shuffle(&mut order_rng);
        for &i in &order {
            let kii = k[(i, i)];
            let d = kii + rho;
            let (alpha_i, beta_i) = (&mut alpha[i * q..(i + 1) * q], &mut beta[i * q..(i + 1) * q]);
            for c in 0..q {
                u[c] = f[c * n + i] - kii * beta_i[c] + bias[c] + rho * (sum_beta[c] - beta_i[c]);
            }
            form.solve_datum(&u, d, y[i], s.c, &mut new_alpha);
            form.beta(&new_alpha, y[i], &mut new_beta);
            let mut change = 0.0f64;
            for c in 0..q {
                delta[c] = new_beta[c] - beta_i[c];
                change = change.max((new_alpha[c] - alpha_i[c]).abs());
            }
            moved = moved.max(d * change);
            if delta.iter().all(|v| *v == 0.0) {
                continue;
            }
            let k_col = k.col(i).try_as_col_major().expect("a Gram matrix is column-major").as_slice();
            for (f_c, &dc) in f.chunks_exact_mut(n).zip(&delta) {
                axpy(f_c, dc, k_col);
            }
            sum_beta.iter_mut().zip(&delta).for_each(|(sc, dc)| *sc += dc);
            alpha_i.copy_from_slice(&new_alpha);
            beta_i.copy_from_slice(&new_beta);
        }
        sweeps += 1;
        if let Some(reason) = ctx.and_then(|ctx| ctx.budget_stop(sweeps)) {
            stop = reason;
            break;
        }
        // The multiplier (bias) step after every sweep; centred, since only differences of b_k
        // matter (and LLW, MSVM2 require sum_k b_k = 0).
        let step = sum_beta.iter().fold(0.0f64, |m, v| m.max((rho * v).abs()));
        bias.iter_mut().zip(&sum_beta).for_each(|(b, sc)| *b += rho * sc);
        let mean = bias.iter().sum::<f64>() / q as f64;
        bias.iter_mut().for_each(|b| *b -= mean);
        if step <= tol && moved <= tol {
            // The certificate: at this bias, the primal at w(alpha) exceeds the dual with the
            // bias term by a gap that is zero only at the optimum of the fixed-bias problem.
            let obj = objectives_of(
                form,
                &alpha.chunks(q).collect::<Vec<_>>(),
                &beta.chunks(q).collect::<Vec<_>>(),
                &rows(&f, n, q),
                &bias,
                y,
                s.c,
            );
            let dual_b = obj.dual - bias.iter().zip(&sum_beta).map(|(b, sc)| b * sc).sum::<f64>();
            if obj.primal - dual_b <= tol * obj.primal.abs().max(1.0) {
                stop = StopReason::Converged;
                break;
            }
        }
    }
    let f = rows(&f, n, q);
    let (alpha, beta) = (alpha.chunks(q).map(<[f64]>::to_vec).collect(), beta.chunks(q).map(<[f64]>::to_vec).collect());
    Ok(DualSolution { alpha, beta, bias, f, sweeps, stop })
}

/// The rows F_i (length Q) of the class-major buffer f[c * n + i].
fn rows(f: &[f64], n: usize, q: usize) -> Vec<Vec<f64>> {
    (0..n).map(|i| (0..q).map(|c| f[c * n + i]).collect()).collect()
}

/// Objective values of a solution: the dual D(alpha), the primal P(w(alpha), b) with the
/// optimal slacks for those outputs, and the largest |sum_i beta_ik| (the equality constraints).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Objectives {
    pub dual: f64,
    pub primal: f64,
    pub infeasibility: f64,
}

pub(crate) fn objectives(form: Formulation, sol: &DualSolution, y: &[usize], c: f64) -> Objectives {
    objectives_of(form, &sol.alpha, &sol.beta, &sol.f, &sol.bias, y, c)
}

fn objectives_of<R: AsRef<[f64]>>(
    form: Formulation,
    alpha: &[R],
    beta: &[R],
    f: &[Vec<f64>],
    bias: &[f64],
    y: &[usize],
    c: f64,
) -> Objectives {
    let q = bias.len();
    let m = form.margin(q);
    // |w|^2 = sum_i beta_i . (K beta)_i.
    let w2: f64 = beta.iter().zip(f).map(|(b, f)| b.as_ref().iter().zip(f).map(|(x, y)| x * y).sum::<f64>()).sum();
    let linear: f64 = alpha.iter().flat_map(AsRef::as_ref).sum::<f64>() * m;
    let slack_q: f64 = alpha.iter().zip(y).map(|(a, &yi)| form.slack_quadratic(a.as_ref(), yi, c)).sum();
    let loss: f64 = f
        .iter()
        .zip(y)
        .map(|(fi, &yi)| {
            let h: Vec<f64> = fi.iter().zip(bias).map(|(f, b)| f + b).collect();
            form.loss(&h, yi)
        })
        .sum();
    let infeasibility = (0..q).map(|c| beta.iter().map(|b| b.as_ref()[c]).sum::<f64>().abs()).fold(0.0, f64::max);
    Objectives { dual: linear - 0.5 * w2 - slack_q, primal: 0.5 * w2 + c * loss, infeasibility }
}
