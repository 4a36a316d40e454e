//! The sum of kernels: K = sum_t K_t, parameters concatenated in term order and named
//! `<kind>.<name>` (`se.lengthscale`, `linear.variance`; a kind that occurs twice is numbered:
//! `se1.variance`, `se2.variance`).
use super::{InputGrads, Kernel};
use faer::Mat;
use ndarray::Array2;

#[derive(Clone, Debug)]
pub struct Sum {
    terms: Vec<Box<dyn Kernel>>,
}

impl Sum {
    pub fn new(terms: Vec<Box<dyn Kernel>>) -> Self {
        assert!(!terms.is_empty(), "a sum of no kernels");
        Sum { terms }
    }

    pub fn terms(&self) -> &[Box<dyn Kernel>] {
        &self.terms
    }

    /// The prefix of each term's parameter names.
    fn labels(&self) -> Vec<String> {
        let count = |kind: &str| self.terms.iter().filter(|t| t.kind() == kind).count();
        let mut seen = std::collections::BTreeMap::<&str, usize>::new();
        self.terms
            .iter()
            .map(|t| {
                let k = seen.entry(t.kind()).or_default();
                *k += 1;
                if count(t.kind()) > 1 {
                    format!("{}{}", t.kind(), k)
                } else {
                    t.kind().to_string()
                }
            })
            .collect()
    }

    fn add(&self, f: impl Fn(&dyn Kernel) -> Mat<f64>) -> Mat<f64> {
        let mut k = f(self.terms[0].as_ref());
        for t in &self.terms[1..] {
            k += f(t.as_ref());
        }
        k
    }
}

impl Kernel for Sum {
    fn kind(&self) -> &'static str {
        "sum"
    }
    fn log_params(&self) -> Vec<f64> {
        self.terms.iter().flat_map(|t| t.log_params()).collect()
    }
    fn with_log_params(&self, p: &[f64]) -> Box<dyn Kernel> {
        assert_eq!(p.len(), self.n_params(), "sum kernel parameter vector length");
        let mut at = 0;
        let terms = self
            .terms
            .iter()
            .map(|t| {
                let n = t.n_params();
                at += n;
                t.with_log_params(&p[at - n..at])
            })
            .collect();
        Box::new(Sum { terms })
    }
    fn free_mask(&self) -> Vec<bool> {
        self.terms.iter().flat_map(|t| t.free_mask()).collect()
    }
    fn param_names(&self) -> Vec<String> {
        self.terms
            .iter()
            .zip(self.labels())
            .flat_map(|(t, label)| t.param_names().into_iter().map(move |n| format!("{label}.{n}")))
            .collect()
    }
    fn cross(&self, x1: &Array2<f64>, x2: &Array2<f64>) -> Mat<f64> {
        self.add(|t| t.cross(x1, x2))
    }
    fn gram(&self, x: &Array2<f64>) -> Mat<f64> {
        self.add(|t| t.gram(x))
    }
    fn diag(&self, x: &Array2<f64>) -> Vec<f64> {
        let mut d = self.terms[0].diag(x);
        for t in &self.terms[1..] {
            for (a, b) in d.iter_mut().zip(t.diag(x)) {
                *a += b;
            }
        }
        d
    }
    fn gram_grads(&self, x: &Array2<f64>, _k: &Mat<f64>) -> Vec<Mat<f64>> {
        // Each term's gradient needs that term's own K.
        self.terms.iter().flat_map(|t| t.gram_grads(x, &t.gram(x))).collect()
    }
    fn clone_box(&self) -> Box<dyn Kernel> {
        Box::new(self.clone())
    }
    fn cross_many(&self, z: &Array2<f64>, x: &Array2<f64>) -> Mat<f64> {
        // A term with no cross-covariance (white noise) contributes exact zeros: they are
        // neither built nor added (adding +0 changes no value; it only turned a -0 entry into
        // +0). With the paper's SE + white per class this is one [M, N] matrix and pass fewer
        // per class and step.
        let mut nonzero = self.terms.iter().filter(|t| !t.cross_is_zero());
        let Some(first) = nonzero.next() else { return Mat::zeros(z.nrows(), x.nrows()) };
        let mut k = first.cross_many(z, x);
        for t in nonzero {
            k += t.cross_many(z, x);
        }
        k
    }
    fn gram_many(&self, z: &Array2<f64>) -> Mat<f64> {
        self.add(|t| t.gram_many(z))
    }
    fn cross_is_zero(&self) -> bool {
        self.terms.iter().all(|t| t.cross_is_zero())
    }
    fn cross_vjp(&self, z: &Array2<f64>, x: &Array2<f64>, k: &Mat<f64>, kbar: &Mat<f64>) -> InputGrads {
        // Each term's VJP needs that term's own K(Z, X). When all terms but one have a zero
        // cross-covariance (a kernel plus white noise, Villacampa-Calvo & Hernandez-Lobato's), the
        // sum's k is that term's K plus exact zeros, the same values, so it is not rebuilt (the
        // rebuild costs N M D multiply-adds and N M exps per class and gradient).
        let one_nonzero = self.terms.iter().filter(|t| !t.cross_is_zero()).count() == 1;
        self.concat(z, |t| {
            if one_nonzero || t.cross_is_zero() {
                t.cross_vjp(z, x, k, kbar)
            } else {
                t.cross_vjp(z, x, &t.cross_many(z, x), kbar)
            }
        })
    }
    fn gram_vjp(&self, z: &Array2<f64>, k: &Mat<f64>, kbar: &Mat<f64>) -> InputGrads {
        // As in `cross_vjp`: with one term that is not white noise, the sum's off-diagonal
        // entries are that term's bits, and where its diagonal is known in closed form (the
        // squared exponential's s2) its K(Z, Z) is taken from k instead of rebuilt (M^2 D
        // multiply-adds and M^2 exps per class and gradient).
        let one_nonzero = self.terms.iter().filter(|t| !t.cross_is_zero()).count() == 1;
        let terms: Vec<Mat<f64>> = self
            .terms
            .iter()
            .map(|t| {
                let reused = if one_nonzero && !t.cross_is_zero() { t.gram_many_from_off_diagonal(k) } else { None };
                reused.unwrap_or_else(|| t.gram_many(z))
            })
            .collect();
        self.gram_vjp_terms(z, &terms, kbar)
    }
    fn cross_many_terms(&self, z: &Array2<f64>, x: &Array2<f64>) -> Vec<Mat<f64>> {
        self.terms.iter().map(|t| t.cross_many(z, x)).collect()
    }
    fn cross_vjp_terms(&self, z: &Array2<f64>, x: &Array2<f64>, terms: &[Mat<f64>], kbar: &Mat<f64>) -> InputGrads {
        assert_eq!(terms.len(), self.terms.len(), "one matrix per term of the sum");
        let mut k = terms.iter();
        self.concat(z, |t| t.cross_vjp(z, x, k.next().expect("one matrix per term"), kbar))
    }
    fn gram_terms(&self, z: &Array2<f64>) -> Vec<Mat<f64>> {
        self.terms.iter().map(|t| t.gram_many(z)).collect()
    }
    fn gram_vjp_terms(&self, z: &Array2<f64>, terms: &[Mat<f64>], kbar: &Mat<f64>) -> InputGrads {
        assert_eq!(terms.len(), self.terms.len(), "one matrix per term of the sum");
        let mut k = terms.iter();
        self.concat(z, |t| t.gram_vjp(z, k.next().expect("one matrix per term"), kbar))
    }
    fn diag_vjp(&self, x: &Array2<f64>, dbar: &[f64]) -> Vec<f64> {
        self.terms.iter().flat_map(|t| t.diag_vjp(x, dbar)).collect()
    }
}

impl Sum {
    /// The terms' gradients: parameters concatenated, Z gradients added.
    fn concat(&self, z: &Array2<f64>, mut term: impl FnMut(&dyn Kernel) -> InputGrads) -> InputGrads {
        let mut out = InputGrads { params: Vec::with_capacity(self.n_params()), z: Array2::zeros(z.dim()) };
        for t in &self.terms {
            let g = term(t.as_ref());
            out.params.extend(g.params);
            out.z += &g.z;
        }
        out
    }
}
