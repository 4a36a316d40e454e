//! Per-column standardisation fitted on training rows only, so no test-set statistics leak into
//! the model.

use ndarray::{Array2, Axis};

/// `(x - mean) / scale` per column.
///
/// `scale` is the **population** standard deviation (divide by n, not n - 1) of the training
/// column. A constant training column gets `mean` = its value and `scale` = 1, so it maps to
/// exactly 0 (never NaN); segment's region-pixel-count column is such a case.
#[derive(Clone, Debug, PartialEq)]
pub struct Standardizer {
    pub mean: Vec<f64>,
    pub scale: Vec<f64>,
}

impl Standardizer {
    /// Column means and population standard deviations of `x` ([n, d]). With no rows, every
    /// column gets mean 0 and scale 1 (the identity).
    pub fn fit(x: &Array2<f64>) -> Self {
        let n = x.nrows() as f64;
        let mut mean = Vec::with_capacity(x.ncols());
        let mut scale = Vec::with_capacity(x.ncols());
        for col in x.axis_iter(Axis(1)) {
            let (lo, hi) = col.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v)));
            // Test constancy on the values, not on sd == 0: the mean of n copies of 0.1 need not
            // be exactly 0.1, which would leave tiny nonzero outputs.
            if x.nrows() == 0 || lo == hi {
                mean.push(if x.nrows() == 0 { 0.0 } else { lo });
                scale.push(1.0);
                continue;
            }
            let mut m = col.sum() / n;
            let mut sd = (col.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / n).sqrt();
            if !(m.is_finite() && sd.is_finite()) {
                // Finite values near f64::MAX overflow the sums: the same statistics in units of
                // the largest magnitude (only here, so ordinary columns keep their bits).
                let big = lo.abs().max(hi.abs());
                m = big * (col.iter().map(|v| v / big).sum::<f64>() / n);
                sd = big * (col.iter().map(|v| (v - m) / big).map(|d| d * d).sum::<f64>() / n).sqrt();
            }
            mean.push(m);
            scale.push(if sd > 0.0 && sd.is_finite() { sd } else { 1.0 });
        }
        Standardizer { mean, scale }
    }

    /// Applies the fitted statistics to `x`, which must have the fitted number of columns.
    pub fn transform(&self, x: &Array2<f64>) -> Array2<f64> {
        assert_eq!(x.ncols(), self.mean.len(), "Standardizer fitted on {} columns applied to {} columns", self.mean.len(), x.ncols());
        let mut out = x.clone();
        for (j, mut col) in out.axis_iter_mut(Axis(1)).enumerate() {
            let (m, s) = (self.mean[j], self.scale[j]);
            col.mapv_inplace(|v| (v - m) / s);
        }
        out
    }

    /// Back to the data's own units: x * scale + mean, column by column.
    pub fn inverse_transform(&self, x: &Array2<f64>) -> Array2<f64> {
        assert_eq!(x.ncols(), self.mean.len(), "Standardizer fitted on {} columns applied to {} columns", self.mean.len(), x.ncols());
        let mut out = x.clone();
        for (j, mut col) in out.axis_iter_mut(Axis(1)).enumerate() {
            let (m, s) = (self.mean[j], self.scale[j]);
            col.mapv_inplace(|v| v * s + m);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn inverse_transform_undoes_transform() {
        let x = array![[1.0, 10.0], [2.0, 30.0], [4.0, 20.0]];
        let s = Standardizer::fit(&x);
        let back = s.inverse_transform(&s.transform(&x));
        assert!(back.iter().zip(x.iter()).all(|(a, b)| (a - b).abs() < 1e-12), "{back}");
    }

    #[test]
    fn training_columns_get_mean_zero_sd_one() {
        let x = array![[1.0, 10.0, 0.1], [2.0, 20.0, 0.1], [3.0, 30.0, 0.1], [6.0, -5.0, 0.1]];
        let s = Standardizer::fit(&x);
        let z = s.transform(&x);
        for j in 0..2 {
            let col = z.column(j);
            let mean = col.sum() / 4.0;
            let var = col.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / 4.0;
            assert!(mean.abs() < 1e-12, "column {j} mean {mean}");
            assert!((var - 1.0).abs() < 1e-12, "column {j} var {var}");
        }
        // Population sd: column 0 has mean 3, squared deviations 4+1+0+9 = 14, /4.
        assert!((s.scale[0] - (14.0f64 / 4.0).sqrt()).abs() < 1e-12);
    }

    #[test]
    fn constant_column_maps_to_zero() {
        let x = array![[0.1, 1.0], [0.1, 2.0], [0.1, 3.0]];
        let s = Standardizer::fit(&x);
        assert_eq!(s.scale[0], 1.0);
        let z = s.transform(&array![[0.1, 2.0], [1.1, 2.0]]);
        assert_eq!(z[[0, 0]], 0.0);
        assert!((z[[1, 0]] - 1.0).abs() < 1e-12); // unseen values shift by the mean only
        assert!(z.iter().all(|v| v.is_finite()));
    }

    #[test]
    fn empty_fit_is_identity() {
        let s = Standardizer::fit(&Array2::zeros((0, 2)));
        assert_eq!(s.mean, [0.0, 0.0]);
        assert_eq!(s.scale, [1.0, 1.0]);
    }

    /// Finite values near f64::MAX overflow the plain sums (the mean came out inf, and every
    /// standardised value -inf or NaN): the scaled sums give the column's statistics.
    #[test]
    fn columns_near_the_largest_double_standardise_finitely() {
        let x = array![[1e308], [1e308], [1.0], [2.0]];
        let s = Standardizer::fit(&x);
        assert!((s.mean[0] - 5e307).abs() <= 1e292, "{}", s.mean[0]);
        assert!((s.scale[0] - 5e307).abs() <= 1e292, "{}", s.scale[0]);
        let z = s.transform(&x);
        assert!(z.iter().all(|v| v.is_finite()), "{z:?}");
        assert!((z[[0, 0]] - 1.0).abs() < 1e-12 && (z[[2, 0]] + 1.0).abs() < 1e-12, "{z:?}");
    }
}
