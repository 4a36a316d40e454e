//! The four machines in Guermeur's generic model (MSVMpack's conventions, Lauer & Guermeur
//! 2011): Q classes, h_k(x) = <w_k, phi(x)> + b_k, and for each datum i and class k != y_i one
//! margin constraint with slack xi_ik.
//!
//! | | constraint (k != y_i) | penalty | extra |
//! |---|---|---|---|
//! | WW | h_{y_i}(x_i) - h_k(x_i) >= 1 - xi_ik, xi >= 0 | C sum xi_ik | |
//! | CS | h_{y_i}(x_i) - h_k(x_i) >= 1 - xi_i, xi >= 0 (one slack per datum) | C sum xi_i | |
//! | LLW | -h_k(x_i) >= 1/(Q-1) - xi_ik, xi >= 0 | C sum xi_ik | sum_k h_k = 0 |
//! | MSVM2 | -h_k(x_i) >= 1/(Q-1) - xi_ik | C xi^T M xi | sum_k h_k = 0 |
//!
//! M (Guermeur & Monfrini 2011) is block diagonal over the data, each x block
//! I + c_M 1 1^T with c_M = (sqrt(Q) - 1)/(Q - 1), the square root of I + 1 1^T; the slacks of
//! MSVM2 carry no sign constraint (the quadratic loss).
//!
//! Dual variables alpha_ik >= 0 (k != y_i; alpha_{i,y_i} = 0). In every case w_k =
//! sum_i beta_ik phi(x_i) with beta_i a linear map of alpha_i:
//!   WW, CS:     beta_ik = delta_{k,y_i} sum_l alpha_il - alpha_ik;
//!   LLW, MSVM2: beta_ik = -(alpha_ik - (1/Q) sum_l alpha_il)  (the sum-to-zero constraint's multiplier
//!               removes the mean over classes, so sum_k w_k = 0).
//! The bias b_k is the multiplier of the Q equality constraints sum_i beta_i = 0 (rank Q - 1, since
//! sum_k beta_ik = 0 for every datum). The dual is
//!   max  m sum alpha - 1/2 sum_ij K_ij beta_i . beta_j  [- 1/(4C) sum_i alpha_i^T M_i^{-1} alpha_i]
//! with m = 1 (WW, CS) or 1/(Q-1) (LLW, MSVM2), subject to sum_i beta_i = 0 and per datum
//! 0 <= alpha_ik <= C (WW, LLW), alpha_ik >= 0 with sum_k alpha_ik <= C (CS), alpha_ik >= 0 (MSVM2).
use super::block::{solve_block, with_scratch, BlockBounds};
use serde::{Deserialize, Serialize};

/// Which machine (`formulation:` in the settings).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Formulation {
    /// Weston & Watkins (1999) / Vapnik (1998).
    #[default]
    Ww,
    /// Crammer & Singer (2001), with MSVMpack's bias.
    Cs,
    /// Lee, Lin & Wahba (2004).
    Llw,
    /// Guermeur & Monfrini (2011), the quadratic-loss M-SVM.
    Msvm2,
}

impl Formulation {
    pub fn name(&self) -> &'static str {
        match self {
            Formulation::Ww => "ww",
            Formulation::Cs => "cs",
            Formulation::Llw => "llw",
            Formulation::Msvm2 => "msvm2",
        }
    }

    /// Whether beta_i removes the class mean (LLW, MSVM2) rather than moving mass onto y_i (WW, CS).
    fn centred(&self) -> bool {
        matches!(self, Formulation::Llw | Formulation::Msvm2)
    }

    /// The margin m of the dual's linear term.
    pub fn margin(&self, q: usize) -> f64 {
        if self.centred() {
            1.0 / (q as f64 - 1.0)
        } else {
            1.0
        }
    }

    /// c_M of MSVM2's M = I + c_M 1 1^T per datum (Q - 1 slacks).
    pub fn c_m(q: usize) -> f64 {
        let q = q as f64;
        (q.sqrt() - 1.0) / (q - 1.0)
    }

    /// beta_i (length Q) from alpha_i (length Q, alpha_{y} = 0).
    pub fn beta(&self, alpha: &[f64], y: usize, out: &mut [f64]) {
        let s: f64 = alpha.iter().sum();
        if self.centred() {
            let mean = s / alpha.len() as f64;
            out.iter_mut().zip(alpha).for_each(|(o, a)| *o = mean - a);
        } else {
            out.iter_mut().zip(alpha).for_each(|(o, a)| *o = -a);
            out[y] += s;
        }
    }

    /// The per-datum part of the dual's quadratic term that does not go through the kernel:
    /// 1/(4C) alpha_i^T M^{-1} alpha_i for MSVM2 (M^{-1} = I - (c_M / sqrt Q) 1 1^T), else 0.
    pub fn slack_quadratic(&self, alpha: &[f64], y: usize, c: f64) -> f64 {
        if *self != Formulation::Msvm2 {
            return 0.0;
        }
        let q = alpha.len();
        let (sq, s) = alpha.iter().enumerate().filter(|(k, _)| *k != y).fold((0.0, 0.0), |(sq, s), (_, a)| (sq + a * a, s + a));
        (sq - Self::c_m(q) / (q as f64).sqrt() * s * s) / (4.0 * c)
    }

    /// Maximise the dual over datum i's variables with everything else fixed, where the dual
    /// restricted to them is m 1 . alpha_i - u . beta_i - (d / 2) |beta_i|^2 [- MSVM2's slack term]:
    /// u gathers the other data's kernel terms, the bias and the augmented-Lagrangian penalty,
    /// d = K_ii (+ the penalty's rho). Writes alpha_i (length Q, alpha_{y} = 0).
    pub fn solve_datum(&self, u: &[f64], d: f64, y: usize, c: f64, alpha: &mut [f64]) {
        let q = u.len();
        let m = self.margin(q);
        // u . beta_i and |beta_i|^2 as functions of the Q - 1 free alpha_ik give the linear term
        // g and the Hessian a I + b 1 1^T of the block (derivation in the module comment):
        //   WW, CS:     u . beta = sum_k (u_y - u_k) alpha_k,  |beta|^2 = |alpha|^2 + (sum alpha)^2;
        //   LLW, MSVM2: u . beta = sum_k (mean(u) - u_k) alpha_k, |beta|^2 = |alpha|^2 - (sum alpha)^2 / Q.
        let shift = if self.centred() { u.iter().sum::<f64>() / q as f64 } else { u[y] };
        let (mut a, mut b) = if self.centred() { (d, -d / q as f64) } else { (d, d) };
        let bounds = match self {
            Formulation::Ww | Formulation::Llw => BlockBounds { lo: 0.0, hi: c, cap: None },
            Formulation::Cs => BlockBounds { lo: 0.0, hi: f64::INFINITY, cap: Some(c) },
            Formulation::Msvm2 => {
                a += 1.0 / (2.0 * c);
                b -= Self::c_m(q) / (q as f64).sqrt() / (2.0 * c);
                BlockBounds { lo: 0.0, hi: f64::INFINITY, cap: None }
            }
        };
        with_scratch(2 * (q - 1), |scratch| {
            let (g, x) = scratch.split_at_mut(q - 1);
            for (gk, k) in g.iter_mut().zip((0..q).filter(|&k| k != y)) {
                *gk = m - (shift - u[k]);
            }
            // Every formulation's block has lower bounds 0 (and a cap that 0 satisfies), so x = 0
            // is its minimiser exactly when no coordinate's gradient -g_k points inward (g <= 0),
            // the KKT conditions at 0. Most data end as non-support vectors with such blocks: the
            // test costs Q operations where the piecewise-linear root costs O(Q^2).
            if g.iter().all(|&gk| gk <= 0.0) {
                alpha.iter_mut().for_each(|ak| *ak = 0.0);
                return;
            }
            solve_block(a, b, g, bounds, x);
            let mut it = x.iter().copied();
            for (k, ak) in alpha.iter_mut().enumerate() {
                *ak = if k == y { 0.0 } else { it.next().expect("Q - 1 values") };
            }
        })
    }

    /// The primal loss of datum i, given its outputs h_i (length Q): sum_k xi_ik (WW, LLW),
    /// xi_i (CS), or min xi^T M xi over the feasible slacks (MSVM2, a block problem itself).
    pub fn loss(&self, h: &[f64], y: usize) -> f64 {
        let q = h.len();
        let others = (0..q).filter(move |&k| k != y);
        match self {
            Formulation::Ww => others.map(|k| (1.0 - h[y] + h[k]).max(0.0)).sum(),
            Formulation::Cs => others.map(|k| 1.0 - h[y] + h[k]).fold(0.0, f64::max),
            Formulation::Llw => others.map(|k| (h[k] + self.margin(q)).max(0.0)).sum(),
            Formulation::Msvm2 => {
                // xi >= r with r_k = h_k + 1/(Q-1); xi = r + z, z >= 0: minimise
                // 1/2 z^T (2M) z + (2 M r) . z (+ r^T M r), again a block of the form a I + b J.
                let r: Vec<f64> = others.map(|k| h[k] + self.margin(q)).collect();
                let cm = Self::c_m(q);
                let mr = |v: &[f64]| -> Vec<f64> {
                    let s: f64 = v.iter().sum();
                    v.iter().map(|x| x + cm * s).collect()
                };
                let g: Vec<f64> = mr(&r).iter().map(|v| -2.0 * v).collect();
                let mut z = vec![0.0; g.len()];
                solve_block(2.0, 2.0 * cm, &g, BlockBounds { lo: 0.0, hi: f64::INFINITY, cap: None }, &mut z);
                let xi: Vec<f64> = r.iter().zip(&z).map(|(r, z)| r + z).collect();
                xi.iter().zip(mr(&xi)).map(|(x, m)| x * m).sum()
            }
        }
    }
}
