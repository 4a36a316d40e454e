//! The multivariate-t proposal centred at the KL-MNL mean: its draws (batched, regenerable
//! per sample) and the pass that forms the log-weights.
use super::*;

/// What the sampler needs, fixed for a fit: the KL-MNL model and the Kronecker factors.
#[derive(Clone)]
pub(super) struct Sampler {
    pub(super) lik: LikEval,
    pub(super) n: usize,
    pub(super) c: usize,
    pub(super) y: Vec<usize>,
    /// m* datum-major and a = L_K^{-1} m*.
    pub(super) m: Vec<f64>,
    pub(super) a: Vec<f64>,
    pub(super) lx: Chol,
    pub(super) lc: Mat<f64>,
    /// Posterior scale only: L_V and R = L_K^{-1} L_V (dense, p x p).
    pub(super) post: Option<(Mat<f64>, Mat<f64>)>,
    /// Rows of L_K's factor in visiting order: of L_x (n x n) for the prior scale, of L_V
    /// (nC x nC, datum-major) for the posterior one.
    pub(super) l_visit: Mat<f64>,
    /// The order in which the data are visited: worst fitted at the proposal centre first.
    /// Every log-likelihood term is <= 0, so the partial sums fall fastest this way and a
    /// negligible sample is recognised after fewer terms; which samples are negligible, and
    /// every kept weight, are the same in any order up to the rounding of L z (tested).
    pub(super) order: Vec<usize>,
    /// constant part of log w.
    pub(super) log_const: f64,
    pub(super) df: f64,
    pub(super) n_samples: usize,
    pub(super) batch: usize,
    pub(super) negligible: f64,
}

impl Sampler {
    /// One batch of proposal draws f = m + s L z: the scales s (all drawn first), z as an
    /// n x (B C) matrix in the Y layout (column b*C + c, sample b's C columns drawn in turn),
    /// |z_b|^2, and the generator's state before each sample's z, from which [`Self::redraw`]
    /// regenerates a sample alone.
    pub(super) fn draw_batch(&self, rng: &mut Pcg64, chi: &ChiSquared<f64>, bsz: usize) -> Draws {
        let (n, c) = (self.n, self.c);
        let scales: Vec<f64> = (0..bsz).map(|_| (self.df / rng.sample(chi)).sqrt()).collect();
        let mut z = Mat::<f64>::zeros(n, bsz * c);
        let mut starts = Vec::with_capacity(bsz);
        for b in 0..bsz {
            starts.push(rng.clone());
            self.fill_z(rng, &mut z, b);
        }
        let znorm2 = (0..bsz).map(|b| (0..n).map(|i| (0..c).map(|q| z[(i, b * c + q)].powi(2)).sum::<f64>()).sum()).collect();
        Draws { scales, z, znorm2, starts }
    }

    /// Sample b's C columns of z, column by column.
    pub(super) fn fill_z(&self, rng: &mut Pcg64, z: &mut Mat<f64>, b: usize) {
        for q in 0..self.c {
            for i in 0..self.n {
                z[(i, b * self.c + q)] = rng.sample(StandardNormal);
            }
        }
    }

    /// The z of the given samples (generator states from [`Self::draw_batch`]), bit for bit, in
    /// the Y layout.
    pub(super) fn redraw(&self, starts: &[&Pcg64]) -> Mat<f64> {
        let mut z = Mat::<f64>::zeros(self.n, starts.len() * self.c);
        for (k, st) in starts.iter().enumerate() {
            self.fill_z(&mut (*st).clone(), &mut z, k);
        }
        z
    }

    /// u = L_K^{-1} (f - m) / s for draws z (Y layout, k samples): z itself for the prior
    /// scale, R z for the posterior one.
    pub(super) fn whiten<'z>(&self, z: &'z Mat<f64>) -> Cow<'z, Mat<f64>> {
        match &self.post {
            None => Cow::Borrowed(z),
            Some((_, r)) => {
                let (n, c) = (self.n, self.c);
                let k = z.ncols() / c;
                let ud = r * &self.datum_major(z);
                Cow::Owned(Mat::from_fn(n, k * c, |i, col| ud[(i * c + col % c, col / c)]))
            }
        }
    }

    /// Set the visiting order of the data, and with it the rows of L_K's factor in that order.
    pub(super) fn set_order(&mut self, order: Vec<usize>) {
        let c = self.c;
        self.l_visit = match &self.post {
            None => Mat::from_fn(self.n, self.n, |g, j| self.lx.l()[(order[g], j)]),
            Some((lv, _)) => Mat::from_fn(self.n * c, self.n * c, |g, j| lv[(order[g / c] * c + g % c, j)]),
        };
        self.order = order;
    }

    /// z (Y layout) as the nC x k matrix of the samples' datum-major vectors.
    pub(super) fn datum_major(&self, z: &Mat<f64>) -> Mat<f64> {
        let c = self.c;
        Mat::from_fn(self.n * c, z.ncols() / c, |k, b| z[(k / c, b * c + k % c)])
    }

    /// Rows of (f - m) / s = L z for the data `order[start..start + len]`, for draws z (Y
    /// layout, k samples): len x (k C).
    pub(super) fn f_rows(&self, start: usize, len: usize, z: &Mat<f64>) -> Mat<f64> {
        let c = self.c;
        let k = z.ncols() / c;
        match &self.post {
            None => self.right_lc(&(self.l_visit.as_ref().subrows(start, len) * z), k),
            Some(_) => {
                let fd = self.l_visit.as_ref().subrows(start * c, len * c) * &self.datum_major(z);
                Mat::from_fn(len, k * c, |g, col| fd[(g * c + col % c, col / c)])
            }
        }
    }

    /// X L_c^T per sample block of C columns.
    pub(super) fn right_lc(&self, x: &Mat<f64>, bsz: usize) -> Mat<f64> {
        let c = self.c;
        let identity = (0..c).all(|i| (0..c).all(|j| (self.lc[(i, j)] - if i == j { 1.0 } else { 0.0 }).abs() == 0.0));
        if identity {
            return x.clone();
        }
        Mat::from_fn(x.nrows(), bsz * c, |i, col| {
            let (b, q) = (col / c, col % c);
            (0..=q).map(|k| self.lc[(q, k)] * x[(i, b * c + k)]).sum()
        })
    }

    /// log N(f; 0, K) - log t(f; m, Sigma_P) for sample b of a batch: the weight without the likelihood.
    pub(super) fn log_prior_over_proposal(&self, s: f64, u: &Mat<f64>, znorm2: f64, b: usize) -> f64 {
        let (n, c) = (self.n, self.c);
        let p = (n * c) as f64;
        let (mut au, mut uu) = (0.0, 0.0);
        for i in 0..n {
            for q in 0..c {
                let uv = u[(i, b * c + q)];
                au += self.a[i * c + q] * uv;
                uu += uv * uv;
            }
        }
        let aa: f64 = self.a.iter().map(|v| v * v).sum();
        let quad = aa + 2.0 * s * au + s * s * uu;
        let delta = s * s * znorm2;
        -0.5 * quad + 0.5 * (self.df + p) * (delta / self.df).ln_1p() + self.log_const
    }

    /// Every sample's log w split into log N(f; 0, K) - log t(f; m, Sigma_P) and the n terms
    /// log p(y_i | f_i) (datum order), or None for a sample certainly below `floor` (each
    /// term is <= 0, so a partial sum bounds the final value from above). f is formed lazily:
    /// data are visited in `order`, a group at a time, and only the samples still above the
    /// floor get the group's rows of L z (on Table 3's glass cells, about half the product of
    /// the full L z is saved). The probit's u-draws of
    /// datum i come from stream `sample * n + i` of `useed` (`first` is the batch's first sample
    /// index): a sample's draws for the data it is skipped before are never made, and the
    /// visiting order changes no draw.
    pub(super) fn batch_terms(&self, d: &Draws, first: usize, useed: u64, floor: f64) -> Vec<Option<SampleTerms>> {
        let (n, c) = (self.n, self.c);
        let bsz = d.scales.len();
        let u = self.whiten(&d.z);
        let mut out: Vec<Option<SampleTerms>> = (0..bsz)
            .map(|b| Some(SampleTerms { prior: self.log_prior_over_proposal(d.scales[b], &u, d.znorm2[b], b), lik: vec![0.0; n] }))
            .collect();
        let mut partial: Vec<f64> = out.iter().map(|t| t.as_ref().map_or(0.0, |t| t.prior)).collect();
        let r = self.lik.draws_per_datum();
        // The samples still above the floor, and their column blocks in z_alive (which keeps
        // some dropped samples' columns until a quarter of its columns are such).
        let mut alive: Vec<usize> = (0..bsz).collect();
        let mut cols: Vec<usize> = (0..bsz).collect();
        let mut z_alive = Cow::Borrowed(&d.z);
        let mut rows = vec![0.0; LOGIT_GROUP * c];
        for (gi, group) in self.order.chunks(LOGIT_GROUP).enumerate() {
            if alive.is_empty() {
                break;
            }
            let fz = self.f_rows(gi * LOGIT_GROUP, group.len(), &z_alive);
            let mut dropped = false;
            for (&k, &b) in cols.iter().zip(&alive) {
                let s = d.scales[b];
                let terms = &mut out[b].as_mut().expect("alive samples have terms").lik;
                let mut below = false;
                if self.lik.lik == Lik::Logit {
                    // One vectorised exp for the group's softmax terms.
                    let e = &mut rows[..group.len() * c];
                    for g in 0..group.len() {
                        for q in 0..c {
                            e[g * c + q] = self.m[group[g] * c + q] + s * fz[(g, k * c + q)];
                        }
                    }
                    let f_max = exp_shifted_rows(e, c);
                    for (g, &i) in group.iter().enumerate() {
                        let f_y = self.m[i * c + self.y[i]] + s * fz[(g, k * c + self.y[i])];
                        terms[i] = f_y - (f_max[g] + e[g * c..(g + 1) * c].iter().sum::<f64>().ln());
                        partial[b] += terms[i];
                        if partial[b] < floor - SKIP_MARGIN {
                            below = true;
                            break;
                        }
                    }
                } else {
                    // The u-sample probit a few data at a time (one vectorised Phi call for all
                    // their r (C - 1) arguments); the checks after each datum as above.
                    let sub_len = if r > 0 { PROBIT_SUBGROUP } else { 1 };
                    'sub: for (sg, sub) in group.chunks(sub_len).enumerate() {
                        let f_sub = &mut rows[..sub.len() * c];
                        for (d, g) in (sg * sub_len..).take(sub.len()).enumerate() {
                            for q in 0..c {
                                f_sub[d * c + q] = self.m[group[g] * c + q] + s * fz[(g, k * c + q)];
                            }
                        }
                        let ys: Vec<usize> = sub.iter().map(|&i| self.y[i]).collect();
                        let mut vals = [0.0; PROBIT_SUBGROUP];
                        if r > 0 {
                            let mut rngs: Vec<Pcg64> = sub.iter().map(|&i| sample_rng(useed, (first + b) * n + i)).collect();
                            self.lik.probit_log_probs(f_sub, &ys, &mut rngs, &mut vals[..sub.len()]);
                        } else {
                            vals[0] = self.lik.exact_log_prob(f_sub, ys[0]);
                        }
                        for (d, &i) in sub.iter().enumerate() {
                            terms[i] = vals[d];
                            partial[b] += terms[i];
                            if partial[b] < floor - SKIP_MARGIN {
                                below = true;
                                break 'sub;
                            }
                        }
                    }
                }
                if below {
                    out[b] = None;
                    dropped = true;
                }
            }
            if dropped {
                let keep: Vec<usize> = (0..alive.len()).filter(|&k| out[alive[k]].is_some()).collect();
                alive = keep.iter().map(|&k| alive[k]).collect();
                cols = keep.iter().map(|&k| cols[k]).collect();
                if 4 * alive.len() < 3 * (z_alive.ncols() / c) {
                    z_alive = Cow::Owned(Mat::from_fn(n, alive.len() * c, |i, col| z_alive[(i, cols[col / c] * c + col % c)]));
                    cols = (0..alive.len()).collect();
                }
            }
        }
        out
    }

    /// log w from a sample's terms, or -inf if it is certainly below `floor`: the partial sums
    /// are checked in `order`, as [`Self::batch_terms`] does (which can only stop sooner at a
    /// higher floor), then summed and checked in datum order, so whether a sample is kept, and
    /// its weight, do not depend on `order`.
    pub(super) fn log_weight(&self, t: &SampleTerms, floor: f64) -> f64 {
        // Stop only when clearly below: the datum-order total differs from a partial sum by
        // rounding and by the terms not yet added (<= 0, or a rounding hair above 0 for the
        // quadrature probit), both far below the margin.
        let mut partial = t.prior;
        for &i in &self.order {
            partial += t.lik[i];
            if partial < floor - SKIP_MARGIN {
                return f64::NEG_INFINITY;
            }
        }
        let mut lw = t.prior;
        for &term in &t.lik {
            lw += term;
            if lw < floor {
                return f64::NEG_INFINITY;
            }
        }
        lw
    }
}

/// One batch of proposal draws ([`Sampler::draw_batch`]).
pub(super) struct Draws {
    pub(super) scales: Vec<f64>,
    pub(super) z: Mat<f64>,
    pub(super) znorm2: Vec<f64>,
    pub(super) starts: Vec<Pcg64>,
}

/// A sample's log-weight in parts ([`Sampler::batch_terms`]).
pub(super) struct SampleTerms {
    pub(super) prior: f64,
    pub(super) lik: Vec<f64>,
}
