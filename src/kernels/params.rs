//! The kernel as written in a spec (natural units), and its checked, built form.
//!
//! ```yaml
//! kernel: { ard: true, lengthscale: 2.0, variance: 4.0, learn_variance: true }   # squared-exponential
//! kernel: { type: linear, variance: 0.5 }
//! kernel: { type: white, variance: 1.0e-3, learn_variance: false }
//! kernel: { type: sum, terms: [ { lengthscale: 1.5 }, { type: linear } ] }
//! kernel: { lengthscale: 1.0, per_class: true }    # one independent copy per class
//! ```
use super::{Kernel, KernelSet, Linear, SqExp, Sum, White};
use serde::{Deserialize, Serialize};

/// Which covariance function an entry's `kernel:` describes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelKind {
    /// Squared-exponential (isotropic or ARD): `ard`, `lengthscale`, `variance`.
    #[default]
    Se,
    /// Linear k(x, x') = variance x . x': `variance`.
    Linear,
    /// White noise k(x, x') = variance [x is x'] on K(X, X) only: `variance`.
    White,
    /// The sum of `terms`.
    Sum,
}

impl KernelKind {
    fn is_se(&self) -> bool {
        *self == KernelKind::Se
    }
}

/// The kernel as written in a spec (natural units). `lengthscale` is one number
/// (isotropic, or the starting value of every ARD length-scale) or one per feature.
/// Fields at their defaults are left out of the serialised form, so cell keys of
/// squared-exponential entries written before the other kinds existed are unchanged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelParams {
    #[serde(default, rename = "type", skip_serializing_if = "KernelKind::is_se")]
    pub kind: KernelKind,
    /// One length-scale per input dimension (ARD) instead of one shared.
    #[serde(default)]
    pub ard: bool,
    #[serde(default = "one_lengthscale")]
    pub lengthscale: LengthScale,
    #[serde(default = "one")]
    pub variance: f64,
    /// Whether hyper-parameter learning adapts the variance (false: "unit variance" kernels).
    #[serde(default = "yes")]
    pub learn_variance: bool,
    /// The summands of `type: sum`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub terms: Vec<KernelParams>,
    /// One independent copy of this kernel per class (learned separately) instead of one
    /// shared by the C latent functions.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub per_class: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum LengthScale {
    One(f64),
    PerFeature(Vec<f64>),
}

fn one() -> f64 {
    1.0
}
fn yes() -> bool {
    true
}
fn one_lengthscale() -> LengthScale {
    LengthScale::One(1.0)
}

impl Default for KernelParams {
    fn default() -> Self {
        KernelParams {
            kind: KernelKind::Se,
            ard: false,
            lengthscale: one_lengthscale(),
            variance: 1.0,
            learn_variance: true,
            terms: Vec::new(),
            per_class: false,
        }
    }
}

impl KernelParams {
    /// Check the values; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        self.validate_at("kernel")
    }

    fn validate_at(&self, at: &str) -> Result<(), String> {
        if !(self.variance.is_finite() && self.variance > 0.0) {
            return Err(format!("{at}.variance must be a positive number, got {}", self.variance));
        }
        if self.kind != KernelKind::Se && (self.ard || self.lengthscale != one_lengthscale()) {
            return Err(format!("{at}: a {:?} kernel has no length-scales (kernel.ard / kernel.lengthscale apply to type se)", self.kind)
                .to_lowercase());
        }
        if self.kind == KernelKind::Sum {
            // Sum::new takes the terms only: a variance here would be dropped, and a grid over
            // it would list settings that all compute the same cell.
            if self.variance != 1.0 || !self.learn_variance {
                return Err(format!("{at}: a sum kernel has no variance of its own (set variance / learn_variance on its terms)"));
            }
            if self.terms.len() < 2 {
                return Err(format!("{at}.terms: a sum needs at least two terms, got {}", self.terms.len()));
            }
        } else if !self.terms.is_empty() {
            return Err(format!("{at}.terms is only for type: sum"));
        }
        for (i, t) in self.terms.iter().enumerate() {
            if t.per_class {
                return Err(format!("{at}.terms[{i}].per_class: set per_class on the whole kernel, not on a term"));
            }
            t.validate_at(&format!("{at}.terms[{i}]"))?;
        }
        let ls: Vec<f64> = match &self.lengthscale {
            LengthScale::One(l) => vec![*l],
            LengthScale::PerFeature(v) => {
                if !self.ard {
                    return Err(format!("{at}.lengthscale is a list but {at}.ard is false"));
                }
                if v.is_empty() {
                    return Err(format!("{at}.lengthscale is an empty list"));
                }
                v.clone()
            }
        };
        if let Some(l) = ls.iter().find(|l| !(l.is_finite() && **l > 0.0)) {
            return Err(format!("{at}.lengthscale must be positive, got {l}"));
        }
        Ok(())
    }

    /// The squared-exponential kernel for `d`-dimensional inputs (an error for other kinds).
    pub fn build(&self, d: usize) -> Result<SqExp, String> {
        self.validate()?;
        if self.kind != KernelKind::Se {
            return Err(format!("kernel: expected a squared-exponential kernel, got type {:?}", self.kind).to_lowercase());
        }
        self.sqexp(d)
    }

    fn sqexp(&self, d: usize) -> Result<SqExp, String> {
        let log_lengthscales = match (&self.lengthscale, self.ard) {
            (LengthScale::One(l), false) => vec![l.ln()],
            (LengthScale::One(l), true) => vec![l.ln(); d],
            (LengthScale::PerFeature(v), _) if v.len() == d => v.iter().map(|l| l.ln()).collect(),
            (LengthScale::PerFeature(v), _) => {
                return Err(format!("kernel.lengthscale has {} entries but the data have {d} features", v.len()))
            }
        };
        Ok(SqExp { log_variance: self.variance.ln(), log_lengthscales, learn_variance: self.learn_variance })
    }

    /// The kernel of any kind for `d`-dimensional inputs.
    pub fn kernel(&self, d: usize) -> Result<Box<dyn Kernel>, String> {
        self.validate()?;
        self.kernel_unchecked(d)
    }

    fn kernel_unchecked(&self, d: usize) -> Result<Box<dyn Kernel>, String> {
        Ok(match self.kind {
            KernelKind::Se => Box::new(self.sqexp(d)?),
            KernelKind::Linear => Box::new(Linear { log_variance: self.variance.ln(), learn_variance: self.learn_variance }),
            KernelKind::White => Box::new(White { log_variance: self.variance.ln(), learn_variance: self.learn_variance }),
            KernelKind::Sum => Box::new(Sum::new(self.terms.iter().map(|t| t.kernel_unchecked(d)).collect::<Result<_, _>>()?)),
        })
    }

    /// The kernels of a problem with `d` features and `n_classes` classes: one shared, or one
    /// copy per class (`per_class`).
    pub fn kernel_set(&self, d: usize, n_classes: usize) -> Result<KernelSet, String> {
        let k = self.kernel(d)?;
        Ok(if self.per_class { KernelSet::per_class(vec![k; n_classes]) } else { KernelSet::shared(k) })
    }
}
