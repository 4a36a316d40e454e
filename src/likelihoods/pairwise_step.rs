//! EP moment matching for one pairwise factor of the arg-max likelihood (Kim & Ghahramani
//! 2006) under a FITC prior, as Villacampa-Calvo & Hernandez-Lobato (2017, eqs. 33-55) use it:
//!     phi_ik = Phi((m_y - m_k) / sqrt(s_y + s_k)),
//! with m_c = u_c^T fbar^c a one-dimensional projection of class c's inducing values and s_c
//! the FITC conditional variance of f_i^c. Under a Gaussian cavity each projection is
//! N(a_c, d_c), so the tilted normaliser is Z = Phi(alpha), alpha = (a_y - a_k) / sqrt(B),
//! B = s_y + d_y + s_k + d_k, and the new site on each side is one-dimensional (a precision
//! C1 and a natural mean C2 along u_c). The k-side natural mean carries a minus sign (the
//! paper prints a plus in eq. 53: a typo, see shared/notes/villacampa-calvo2017.md §2.4).
//!
//! beta = phi(alpha) / Phi(alpha) and gamma B = beta (beta + alpha) come from the stable
//! log Phi derivatives of `special`, so neither cancels in the lower tail.
use crate::special::log_normal_cdf_and_derivatives;
use ndarray::Array2;

/// One side of the factor as its cavity sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Side {
    /// a = u^T m\ , the cavity mean of the projection.
    pub mean: f64,
    /// d = u^T V\ u, the cavity variance of the projection (without the FITC variance).
    pub var: f64,
    /// s, the FITC conditional variance kappa - k^T K^{-1} k.
    pub fitc_var: f64,
}

/// The tilted distribution of one factor: its normaliser and what the site update and the
/// gradients need.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tilted {
    pub log_z: f64,
    /// alpha = (a_y - a_k) / sqrt(B).
    pub alpha: f64,
    /// B = s_y + d_y + s_k + d_k.
    pub total_var: f64,
    /// beta = phi(alpha) / Phi(alpha).
    pub beta: f64,
    /// gamma = beta (beta + alpha) / B, the tilted variance reduction of either projection
    /// per unit of its cavity variance squared.
    pub gamma: f64,
}

/// A new one-dimensional site: precision and natural mean along the side's projection.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Site1d {
    pub precision: f64,
    pub natural_mean: f64,
}

impl Tilted {
    /// The tilted moments of the factor with the y-side (the observed class) and the k-side.
    /// `None` when a variance is not positive (a failed cavity).
    pub fn new(y: Side, k: Side) -> Option<Tilted> {
        let total_var = y.var + y.fitc_var + k.var + k.fitc_var;
        if !(total_var > 0.0 && total_var.is_finite() && y.var >= 0.0 && k.var >= 0.0) {
            return None;
        }
        let alpha = (y.mean - k.mean) / total_var.sqrt();
        if !alpha.is_finite() {
            return None;
        }
        let (log_z, beta, w) = log_normal_cdf_and_derivatives(alpha);
        Some(Tilted { log_z, alpha, total_var, beta, gamma: w / total_var })
    }

    /// d log Z / d a_y (the k-side derivative is its negative).
    pub fn d_mean(&self) -> f64 {
        self.beta / self.total_var.sqrt()
    }

    /// d log Z / d b_c for b_c = s_c + d_c, the same on both sides.
    pub fn d_var(&self) -> f64 {
        -0.5 * self.beta * self.alpha / self.total_var
    }

    /// The site that makes cavity x site match the tilted moments along this side's projection
    /// (eqs. 48-53): sign +1 for the y-side, -1 for the k-side. The tilted projection has mean
    /// a + sign d beta / sqrt(B) and variance d - gamma d^2, so the site precision is
    /// gamma / (1 - gamma d) > 0 (gamma d < gamma B < 1 for every finite alpha).
    pub fn site(&self, side: Side, sign: f64) -> Site1d {
        let shrink = (1.0 - self.gamma * side.var).max(1e-12);
        let precision = self.gamma / shrink;
        Site1d { precision, natural_mean: sign * self.d_mean() / shrink + precision * side.mean }
    }
}

/// The site scalars (precision, natural mean) of the pairwise factors of n rows, [n, C] each:
/// for factor (i, k), column k holds its y-side site (on class y_i) and its k-side site (on
/// class k); column y_i is unused (zero).
#[derive(Clone, Debug)]
pub(crate) struct PairSites {
    pub c1y: Array2<f64>,
    pub c2y: Array2<f64>,
    pub c1k: Array2<f64>,
    pub c2k: Array2<f64>,
}

impl PairSites {
    pub fn zeros(n: usize, c: usize) -> PairSites {
        let z = Array2::zeros((n, c));
        PairSites { c1y: z.clone(), c2y: z.clone(), c1k: z.clone(), c2k: z }
    }

    /// (precision, natural mean) of row j's sites on class c: the sum of its C - 1 y-side
    /// sites if c is its class, its factor (j, c)'s k-side site otherwise.
    pub fn on_class(&self, j: usize, y: usize, c: usize) -> (f64, f64) {
        if c == y {
            (self.c1y.row(j).sum(), self.c2y.row(j).sum())
        } else {
            (self.c1k[(j, c)], self.c2k[(j, c)])
        }
    }

    /// Every site parameter in one vector (c1y, c2y, c1k, c2k, each row-major), for
    /// fixed-point accelerators.
    pub fn to_flat(&self) -> Vec<f64> {
        self.debug_assert_one_shape();
        [&self.c1y, &self.c2y, &self.c1k, &self.c2k].into_iter().flat_map(|a| a.iter().copied()).collect()
    }

    /// The inverse of `to_flat`: sites shaped as `self` holding `v`.
    pub fn shaped_from_flat(&self, v: &[f64]) -> PairSites {
        self.debug_assert_one_shape();
        let len = self.c1y.len();
        assert_eq!(v.len(), 4 * len, "PairSites::shaped_from_flat: wrong length");
        let part = |k: usize| Array2::from_shape_vec(self.c1y.raw_dim(), v[k * len..(k + 1) * len].to_vec()).expect("shape");
        PairSites { c1y: part(0), c2y: part(1), c1k: part(2), c2k: part(3) }
    }

    fn debug_assert_one_shape(&self) {
        let d = self.c1y.dim();
        debug_assert!(self.c2y.dim() == d && self.c1k.dim() == d && self.c2k.dim() == d, "PairSites: arrays of different shapes");
    }

    /// The largest absolute change of a site parameter from `other`.
    pub fn max_change(&self, other: &PairSites) -> f64 {
        debug_assert_eq!(self.c1y.dim(), other.c1y.dim(), "PairSites::max_change: different shapes");
        [(&self.c1y, &other.c1y), (&self.c2y, &other.c2y), (&self.c1k, &other.c1k), (&self.c2k, &other.c2k)]
            .iter()
            .flat_map(|(a, b)| a.iter().zip(b.iter()).map(|(x, y)| (x - y).abs()))
            .fold(0.0, f64::max)
    }

    /// self (1 - rho) + new rho, entry by entry (damping).
    pub fn damped(&self, new: &PairSites, rho: f64) -> PairSites {
        let mix = |a: &Array2<f64>, b: &Array2<f64>| a * (1.0 - rho) + b * rho;
        PairSites {
            c1y: mix(&self.c1y, &new.c1y),
            c2y: mix(&self.c2y, &new.c2y),
            c1k: mix(&self.c1k, &new.c1k),
            c2k: mix(&self.c2k, &new.c2k),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::special::{normal_cdf, normal_pdf};

    /// Moments of the tilted density N(z_y | a_y, d_y) N(z_k | a_k, d_k) Phi((z_y - z_k)/sqrt(s))
    /// by a dense 2-D trapezoid rule over +-12 sd: (Z, E z_y, E z_k, Var z_y, Var z_k).
    fn brute_force(y: Side, k: Side) -> [f64; 5] {
        let n = 1601;
        let (sy, sk) = (y.var.sqrt(), k.var.sqrt());
        let h = 24.0 / (n - 1) as f64;
        let mut m = [0.0; 6];
        for i in 0..n {
            let u = -12.0 + i as f64 * h;
            let zy = y.mean + sy * u;
            for j in 0..n {
                let v = -12.0 + j as f64 * h;
                let zk = k.mean + sk * v;
                let w = normal_pdf(u) * normal_pdf(v) * normal_cdf((zy - zk) / (y.fitc_var + k.fitc_var).sqrt()) * h * h;
                m[0] += w;
                m[1] += w * zy;
                m[2] += w * zk;
                m[3] += w * zy * zy;
                m[4] += w * zk * zk;
            }
        }
        let (ey, ek) = (m[1] / m[0], m[2] / m[0]);
        [m[0], ey, ek, m[3] / m[0] - ey * ey, m[4] / m[0] - ek * ek]
    }

    #[test]
    fn flat_sites_round_trip_in_any_memory_layout() {
        let mut s = PairSites::zeros(4, 3);
        for (k, a) in [&mut s.c1y, &mut s.c2y, &mut s.c1k, &mut s.c2k].into_iter().enumerate() {
            a.indexed_iter_mut().for_each(|((i, c), v)| *v = (100 * k + 10 * i + c) as f64);
        }
        let flat = s.to_flat();
        assert_eq!(flat.len(), 48);
        // Row-major within each array, the arrays in the order c1y, c2y, c1k, c2k.
        assert_eq!(flat[5], 12.0);
        assert_eq!(flat[12 + 7], 121.0);
        let back = s.shaped_from_flat(&flat);
        assert_eq!(back.max_change(&s), 0.0);
        assert_eq!(back.c2k, s.c2k);
        // A transposed (column-major) view of the same values flattens in its logical order.
        let mut t = s.clone();
        t.c1y = s.c1y.t().to_owned().reversed_axes();
        assert_eq!(t.to_flat(), flat);
    }

    #[test]
    fn normaliser_and_moments_match_two_dimensional_quadrature() {
        for (y, k) in [
            (Side { mean: 0.3, var: 0.8, fitc_var: 0.2 }, Side { mean: -0.4, var: 1.3, fitc_var: 0.5 }),
            (Side { mean: -2.0, var: 0.5, fitc_var: 0.1 }, Side { mean: 1.5, var: 0.7, fitc_var: 0.05 }),
            (Side { mean: 1.0, var: 2.0, fitc_var: 1.0 }, Side { mean: 0.0, var: 0.3, fitc_var: 0.0 }),
        ] {
            let t = Tilted::new(y, k).unwrap();
            let [z, ey, ek, vy, vk] = brute_force(y, k);
            assert!((t.log_z - z.ln()).abs() < 1e-8, "log Z {} vs {}", t.log_z, z.ln());
            // Tilted moments of each projection, from the site: cavity x site.
            for (side, sign, e, v) in [(y, 1.0, ey, vy), (k, -1.0, ek, vk)] {
                let s = t.site(side, sign);
                let prec = 1.0 / side.var + s.precision;
                let mean = (side.mean / side.var + s.natural_mean) / prec;
                assert!((mean - e).abs() < 1e-7, "tilted mean {mean} vs {e}");
                assert!((1.0 / prec - v).abs() < 1e-7, "tilted variance {} vs {v}", 1.0 / prec);
                assert!(s.precision > 0.0);
            }
        }
    }

    #[test]
    fn far_lower_tail_keeps_positive_sites_and_finite_log_z() {
        // alpha = -40: Phi underflows in double precision, log Phi and the site do not.
        let y = Side { mean: -40.0, var: 0.5, fitc_var: 0.25 };
        let k = Side { mean: 0.0, var: 0.25, fitc_var: 0.0 };
        let t = Tilted::new(y, k).unwrap();
        assert!((t.alpha + 40.0).abs() < 1e-12);
        // log Phi(-40) = -804.608 (asymptotic series: -x^2/2 - ln(-x sqrt(2 pi)) - 1/x^2 ...).
        let x: f64 = -40.0;
        let series = -0.5 * x * x - (-x * (2.0 * std::f64::consts::PI).sqrt()).ln()
            + (1.0 - 1.0 / (x * x) + 3.0 / x.powi(4) - 15.0 / x.powi(6)).ln();
        assert!((t.log_z - series).abs() < 1e-9, "{} vs {series}", t.log_z);
        for (side, sign) in [(y, 1.0), (k, -1.0)] {
            let s = t.site(side, sign);
            assert!(s.precision > 0.0 && s.precision.is_finite() && s.natural_mean.is_finite());
            // The tilted variance d - gamma d^2 stays positive.
            assert!(side.var - t.gamma * side.var * side.var > 0.0);
        }
    }

    #[test]
    fn gradients_match_finite_differences() {
        let y = Side { mean: 0.2, var: 0.6, fitc_var: 0.3 };
        let k = Side { mean: 0.9, var: 0.4, fitc_var: 0.1 };
        let t = Tilted::new(y, k).unwrap();
        let h = 1e-6;
        let lz = |y: Side, k: Side| Tilted::new(y, k).unwrap().log_z;
        let da = (lz(Side { mean: y.mean + h, ..y }, k) - lz(Side { mean: y.mean - h, ..y }, k)) / (2.0 * h);
        let dak = (lz(y, Side { mean: k.mean + h, ..k }) - lz(y, Side { mean: k.mean - h, ..k })) / (2.0 * h);
        let db = (lz(Side { fitc_var: y.fitc_var + h, ..y }, k) - lz(Side { fitc_var: y.fitc_var - h, ..y }, k)) / (2.0 * h);
        assert!((da - t.d_mean()).abs() < 1e-8);
        assert!((dak + t.d_mean()).abs() < 1e-8);
        assert!((db - t.d_var()).abs() < 1e-8);
    }
}
