//! The ELBO of the augmented model (notes §6): the sum of the points' local bounds minus
//! sum_c KL(q(u^c) || p(u^c)). Not in the paper; a lower bound on log p(y), looser than other
//! methods' (the lambda-n mean-field gap alone is 0.2-0.5 nats a point), so compare methods on
//! error and NLL, never on it.
use super::global::local_step;
use super::local;
#[cfg(test)]
use super::local::Local;
use super::model::Sparse;
use super::Scmgpc;
use ndarray::{s, Array2};

/// sum_i bound_i at the marginals of `sparse` and given local parameters, minus the KL: the
/// ELBO of a CAVI sweep after its global step (tilts from the q before it).
#[cfg(test)]
pub(crate) fn with_locals(sparse: &Sparse, x: &Array2<f64>, y: &[usize], locals: &[Local]) -> f64 {
    let mg = sparse.marginals(x);
    let mut total = 0.0;
    for j in 0..x.nrows() {
        total += local::bound(mg.mean.row(j).as_slice().expect("row"), mg.var.row(j).as_slice().expect("row"), y[j], &locals[j]);
    }
    total - sparse.kl()
}

/// The full-data ELBO with every point's local parameters optimised for the current q (warm
/// started from `alpha`, which is not changed): a valid lower bound at any q, for checkpoints
/// and the evidence. With `poisson_rate: printed` the locals are the printed rule's, so the
/// number is the bound at what that rule gives, as the paper's code would have reached.
pub(crate) fn full(method: &Scmgpc, sparse: &Sparse, x: &Array2<f64>, y: &[usize], alpha: &[f64]) -> f64 {
    let mut alpha = alpha.to_vec();
    let mut total = 0.0;
    let step = super::model::BLOCK_ROWS;
    for start in (0..x.nrows()).step_by(step) {
        let end = (start + step).min(x.nrows());
        let xb = x.slice(s![start..end, ..]).to_owned();
        let (mg, locals) = local_step(method, sparse, &xb, &y[start..end], &mut alpha[start..end]);
        for (j, l) in locals.iter().enumerate() {
            total += local::bound(mg.mean.row(j).as_slice().expect("row"), mg.var.row(j).as_slice().expect("row"), y[start + j], l);
        }
    }
    total - sparse.kl()
}
