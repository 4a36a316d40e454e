//! The fitted machine: h_k(x) = sum_i beta_ik K(x_i, x) + b_k over the support vectors, and the
//! predicted class argmax_k h_k(x) (MSVMpack's decision rule for all four machines).
use super::formulation::Formulation;
use crate::kernels::{Kernel, KernelSet};
use crate::linalg::argmax;
use crate::methods::{Diagnostics, Evidence, FitError, Fitted, Prediction};
use ndarray::Array2;
use rand_pcg::Pcg64;
use std::collections::BTreeMap;

pub struct MsvmModel {
    pub(crate) formulation: Formulation,
    pub(crate) kernel: Box<dyn Kernel>,
    /// Training rows with a nonzero beta_i (the support vectors), [n_sv, d].
    pub(crate) x_sv: Array2<f64>,
    /// beta_i of those rows, [n_sv][Q].
    pub(crate) beta_sv: Vec<Vec<f64>>,
    pub(crate) bias: Vec<f64>,
    pub(crate) n_sv: usize,
    pub(crate) diagnostics: Diagnostics,
}

impl MsvmModel {
    /// h_k(x) for each row of `x`, [m, Q].
    pub fn decision_values(&self, x: &Array2<f64>) -> Array2<f64> {
        let q = self.bias.len();
        let mut h = Array2::from_shape_fn((x.nrows(), q), |(_, c)| self.bias[c]);
        if self.x_sv.nrows() > 0 {
            let kx = self.kernel.cross(&self.x_sv, x);
            for (i, b) in self.beta_sv.iter().enumerate() {
                for j in 0..x.nrows() {
                    let kij = kx[(i, j)];
                    for c in 0..q {
                        h[(j, c)] += b[c] * kij;
                    }
                }
            }
        }
        h
    }

    pub fn formulation(&self) -> Formulation {
        self.formulation
    }
}

impl Fitted for MsvmModel {
    fn predict(&self, x: &Array2<f64>, _rng: &mut Pcg64) -> Result<Prediction, FitError> {
        let h = self.decision_values(x);
        if h.iter().any(|v| !v.is_finite()) {
            return Err(FitError::Numerical("msvm: a decision value is not finite".into()));
        }
        let labels: Vec<usize> = h.rows().into_iter().map(|r| argmax(r.as_slice().expect("row-major"))).collect();
        Ok(Prediction::labels_only(&labels, self.bias.len()))
    }

    fn evidence(&self) -> Option<Evidence> {
        None
    }

    fn kernels(&self) -> KernelSet {
        KernelSet::shared(self.kernel.clone_box())
    }

    fn diagnostics(&self) -> Diagnostics {
        self.diagnostics.clone()
    }

    /// `n_sv`: training data with any nonzero dual variable.
    fn extra_metrics(&self) -> BTreeMap<String, f64> {
        BTreeMap::from([("n_sv".to_string(), self.n_sv as f64)])
    }
}
