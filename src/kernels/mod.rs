//! Covariance functions behind one trait.
//!
//! A [`Kernel`] evaluates K(X, X), K(X1, X2) and diag K(X, X), and the gradient of K(X, X)
//! with respect to each of its log-parameters. Parameters live in log space (learning is
//! unconstrained there) and carry names (`variance`, `lengthscale_3`, `se.variance`) by which
//! reports list them and dependent cells take them over (`hyper: {from, keep}`).
//!
//! Kernels: squared-exponential (isotropic or ARD), linear, white noise, and sums of these.
//! A [`KernelSet`] is what a method receives: one kernel shared by the C latent functions, or
//! one per class. [`InducingInputs`] is a parameter block a sparse method may own and learn.
mod inducing;
mod linear;
mod params;
mod set;
mod sqexp;
pub mod sqexp_phi;
mod sum;
mod white;

pub use inducing::InducingInputs;
pub use linear::Linear;
pub use params::{KernelKind, KernelParams, LengthScale};
pub use set::KernelSet;
pub use sqexp::SqExp;
pub use sum::Sum;
pub use white::White;

#[cfg(test)]
mod vjp_tests;

use faer::Mat;
use ndarray::Array2;

/// A covariance function with log-space parameters.
pub trait Kernel: Send + Sync + std::fmt::Debug {
    /// Short type name: `se`, `linear`, `white`, `sum` (prefixes parameter names inside a sum).
    fn kind(&self) -> &'static str;

    /// All log-parameters, in the kernel's own order.
    fn log_params(&self) -> Vec<f64>;

    /// The same kernel with new log-parameters (same layout as `log_params`).
    fn with_log_params(&self, p: &[f64]) -> Box<dyn Kernel>;

    /// Which log-parameters hyper-parameter learning may change.
    fn free_mask(&self) -> Vec<bool>;

    /// Names of the parameters, in `log_params` order.
    fn param_names(&self) -> Vec<String>;

    /// K(X1, X2), [n1, n2].
    fn cross(&self, x1: &Array2<f64>, x2: &Array2<f64>) -> Mat<f64>;

    /// K(X, X), [n, n], exactly symmetric. Differs from `cross(x, x)` for kernels with a
    /// white-noise term (noise sits on the diagonal of K(X, X) only).
    fn gram(&self, x: &Array2<f64>) -> Mat<f64>;

    /// k(x, x) for each row of `x`.
    fn diag(&self, x: &Array2<f64>) -> Vec<f64>;

    /// dK/d(log-parameter j) for every parameter, in `log_params` order, given K = gram(x).
    fn gram_grads(&self, x: &Array2<f64>, k: &Mat<f64>) -> Vec<Mat<f64>>;

    fn clone_box(&self) -> Box<dyn Kernel>;

    /// K(Z, X) for a few inducing inputs Z against many rows X: the sparse methods' hot path.
    /// By default `cross`; the squared exponential uses one matrix product instead of a loop
    /// over the D inputs per pair (equal to `cross` to rounding, not to the last bit).
    fn cross_many(&self, z: &Array2<f64>, x: &Array2<f64>) -> Mat<f64> {
        self.cross(z, x)
    }

    /// K(Z, Z) the way `cross_many` computes K(Z, X) (exactly symmetric, white noise on the
    /// diagonal): by default `gram`.
    fn gram_many(&self, z: &Array2<f64>) -> Mat<f64> {
        self.gram(z)
    }

    /// True when K(X1, X2) between two different point sets is identically zero (white noise,
    /// which sits on the diagonal of K(X, X) only).
    fn cross_is_zero(&self) -> bool {
        false
    }

    /// Reverse-mode gradient of sum_ij kbar_ij K(Z, X)_ij with respect to the log-parameters
    /// (in `log_params` order) and to Z, given k = `cross_many(z, x)`.
    fn cross_vjp(&self, z: &Array2<f64>, x: &Array2<f64>, k: &Mat<f64>, kbar: &Mat<f64>) -> InputGrads;

    /// Reverse-mode gradient of sum_ij kbar_ij K(Z, Z)_ij (kbar symmetric) with respect to the
    /// log-parameters and to Z, given k = `gram_many(z)`.
    fn gram_vjp(&self, z: &Array2<f64>, k: &Mat<f64>, kbar: &Mat<f64>) -> InputGrads;

    /// This kernel's own `gram_many(z)`, bit for bit, from `k`, a matrix with the same
    /// off-diagonal entries (this kernel plus white noise, whose off-diagonal zeros add
    /// nothing), when the diagonal is known without a product; `None` if it is not.
    fn gram_many_from_off_diagonal(&self, _k: &Mat<f64>) -> Option<Mat<f64>> {
        None
    }

    /// Gradient of sum_i dbar_i k(x_i, x_i) with respect to the log-parameters.
    fn diag_vjp(&self, x: &Array2<f64>, dbar: &[f64]) -> Vec<f64>;

    /// `cross_many(z, x)` kept as the matrices `cross_vjp_terms` takes: a sum's terms each
    /// (a term's VJP needs that term's own K, which `cross_vjp` would rebuild from the inputs),
    /// one matrix otherwise. `sum_terms` adds them up to `cross_many`'s bits.
    fn cross_many_terms(&self, z: &Array2<f64>, x: &Array2<f64>) -> Vec<Mat<f64>> {
        vec![self.cross_many(z, x)]
    }

    /// `cross_vjp` given `cross_many_terms(z, x)`: nothing is recomputed.
    fn cross_vjp_terms(&self, z: &Array2<f64>, x: &Array2<f64>, terms: &[Mat<f64>], kbar: &Mat<f64>) -> InputGrads {
        self.cross_vjp(z, x, &terms[0], kbar)
    }

    /// K(Z, Z) kept as the matrices `gram_vjp_terms` takes: `gram(z)`, or a sum's terms each
    /// as `Sum::gram_vjp` builds them.
    fn gram_terms(&self, z: &Array2<f64>) -> Vec<Mat<f64>> {
        vec![self.gram(z)]
    }

    /// `gram_vjp` given `gram_terms(z)`: nothing is recomputed.
    fn gram_vjp_terms(&self, z: &Array2<f64>, terms: &[Mat<f64>], kbar: &Mat<f64>) -> InputGrads {
        self.gram_vjp(z, &terms[0], kbar)
    }

    /// The squared-exponential kernel itself, for methods whose mathematics is specific to it
    /// (Girolami & Rogers' VB samples the RBF precisions).
    fn as_sqexp(&self) -> Option<&SqExp> {
        None
    }

    fn n_params(&self) -> usize {
        self.log_params().len()
    }

    /// (name, value in natural units) pairs.
    fn natural_params(&self) -> Vec<(String, f64)> {
        self.param_names().into_iter().zip(self.log_params().into_iter().map(f64::exp)).collect()
    }
}

/// Gradients of a scalar through a kernel matrix: w.r.t. the log-parameters (`log_params`
/// order) and w.r.t. the first input set Z, [M, d].
#[derive(Clone, Debug, PartialEq)]
pub struct InputGrads {
    pub params: Vec<f64>,
    pub z: Array2<f64>,
}

impl InputGrads {
    pub fn zeros(n_params: usize, z_shape: (usize, usize)) -> Self {
        InputGrads { params: vec![0.0; n_params], z: Array2::zeros(z_shape) }
    }

    /// Add another gradient of the same layout.
    pub fn add(&mut self, other: &InputGrads) {
        self.params.iter_mut().zip(&other.params).for_each(|(a, b)| *a += b);
        self.z += &other.z;
    }
}

/// A row-major ndarray matrix as a faer view (no copy).
pub(crate) fn view(x: &Array2<f64>) -> faer::MatRef<'_, f64> {
    let (n, d) = x.dim();
    faer::MatRef::from_row_major_slice(x.as_slice().expect("inputs in standard (row-major) layout"), n, d)
}

/// sum_ij a_ij b_ij of two matrices of one shape.
fn frobenius_dot(a: &Mat<f64>, b: &Mat<f64>) -> f64 {
    assert_eq!((a.nrows(), a.ncols()), (b.nrows(), b.ncols()));
    let mut s = 0.0;
    for j in 0..a.ncols() {
        for i in 0..a.nrows() {
            s += a[(i, j)] * b[(i, j)];
        }
    }
    s
}

impl Clone for Box<dyn Kernel> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
}

/// Whether `name` is `keep` itself or one of its per-dimension parameters: `lengthscale` covers
/// `lengthscale_1 .. lengthscale_d`, `se.lengthscale` covers `se.lengthscale_2`. A name without a
/// class prefix covers every class of a per-class set (`variance` covers `c2.variance`).
pub fn name_matches(keep: &str, name: &str) -> bool {
    let same = |n: &str| {
        n == keep
            || n.strip_prefix(keep)
                .and_then(|r| r.strip_prefix('_'))
                .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
    };
    same(name) || (class_suffix(keep).is_none() && class_suffix(name).is_some_and(same))
}

/// Whether a parameter name (`lengthscale`, `lengthscale_3`, `c2.se.lengthscale_1`) is a
/// squared-exponential length-scale.
pub fn is_lengthscale(name: &str) -> bool {
    name.rsplit('.').next().is_some_and(|last| last.starts_with("lengthscale"))
}

/// `c2.variance` -> `variance`: the part after a per-class prefix.
fn class_suffix(name: &str) -> Option<&str> {
    let (head, rest) = name.split_once('.')?;
    let digits = head.strip_prefix('c')?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then_some(rest)
}

/// The sum of kernel matrices kept term by term (`cross_many_terms`), added in term order as
/// `Sum` adds its terms, so the same bits as `cross_many`.
pub fn sum_terms(terms: &[Mat<f64>]) -> Mat<f64> {
    let mut k = terms[0].clone();
    for t in &terms[1..] {
        k += t;
    }
    k
}

/// Symmetrise a square matrix from its lower triangle (K(X, X) must be exactly symmetric).
fn symmetrise_from_lower(k: &mut Mat<f64>) {
    for i in 0..k.nrows() {
        for j in 0..i {
            k[(j, i)] = k[(i, j)];
        }
    }
}

#[cfg(test)]
mod tests;
