//! The kernels a method receives: one shared by the C latent functions, or one per class.
//!
//! Parameters are concatenated in class order; names of per-class kernels carry the class
//! (`c1.variance`, `c2.lengthscale_3`, 1-based like the papers' class indices). A shared set
//! names its parameters as its kernel does, so shared squared-exponential entries report
//! `variance` and `lengthscale` as they always have.
use super::{name_matches, Kernel};

#[derive(Clone, Debug)]
pub struct KernelSet {
    kernels: Vec<Box<dyn Kernel>>,
    per_class: bool,
}

impl KernelSet {
    /// One kernel shared by every class.
    pub fn shared(kernel: Box<dyn Kernel>) -> Self {
        KernelSet { kernels: vec![kernel], per_class: false }
    }

    /// One squared-exponential kernel shared by every class.
    pub fn shared_se(kernel: &super::SqExp) -> Self {
        KernelSet::shared(Box::new(kernel.clone()))
    }

    /// One kernel per class, in class order.
    pub fn per_class(kernels: Vec<Box<dyn Kernel>>) -> Self {
        assert!(!kernels.is_empty(), "a per-class kernel set needs a kernel per class");
        KernelSet { kernels, per_class: true }
    }

    pub fn is_shared(&self) -> bool {
        !self.per_class
    }

    /// For a method that reads `class(c)` for every class: per-class kernels must be one per
    /// class (fewer would index past the end, more would be ignored).
    pub fn check_classes(&self, n_classes: usize, method: &str) -> Result<(), String> {
        if self.per_class && self.kernels.len() != n_classes {
            return Err(format!("{method}: {} per-class kernels for {n_classes} classes", self.kernels.len()));
        }
        Ok(())
    }

    /// The shared kernel, or None for per-class kernels.
    pub fn shared_kernel(&self) -> Option<&dyn Kernel> {
        (!self.per_class).then(|| self.kernels[0].as_ref())
    }

    /// The kernel of class `c` (the shared one for a shared set).
    pub fn class(&self, c: usize) -> &dyn Kernel {
        if self.per_class {
            self.kernels[c].as_ref()
        } else {
            self.kernels[0].as_ref()
        }
    }

    /// The distinct kernels: one for a shared set, C for a per-class one.
    pub fn kernels(&self) -> &[Box<dyn Kernel>] {
        &self.kernels
    }

    pub fn log_params(&self) -> Vec<f64> {
        self.kernels.iter().flat_map(|k| k.log_params()).collect()
    }

    pub fn n_params(&self) -> usize {
        self.kernels.iter().map(|k| k.n_params()).sum()
    }

    /// Where class c's kernel parameters start in `log_params` (0 for a shared kernel).
    pub fn offset_of_class(&self, c: usize) -> usize {
        if self.per_class {
            self.kernels[..c].iter().map(|k| k.n_params()).sum()
        } else {
            0
        }
    }

    /// Add `g`, a gradient with respect to class c's kernel parameters, into `out`, one with
    /// respect to all of `log_params` (a shared kernel collects every class's).
    pub fn add_class_gradient(&self, out: &mut [f64], c: usize, g: &[f64]) {
        let o = self.offset_of_class(c);
        out[o..o + g.len()].iter_mut().zip(g).for_each(|(a, b)| *a += b);
    }

    pub fn free_mask(&self) -> Vec<bool> {
        self.kernels.iter().flat_map(|k| k.free_mask()).collect()
    }

    pub fn param_names(&self) -> Vec<String> {
        if !self.per_class {
            return self.kernels[0].param_names();
        }
        self.kernels.iter().enumerate().flat_map(|(c, k)| k.param_names().into_iter().map(move |n| format!("c{}.{n}", c + 1))).collect()
    }

    /// (name, value in natural units) pairs.
    pub fn natural_params(&self) -> Vec<(String, f64)> {
        self.param_names().into_iter().zip(self.log_params().into_iter().map(f64::exp)).collect()
    }

    /// The same set with new log-parameters (layout of `log_params`).
    pub fn with_log_params(&self, p: &[f64]) -> KernelSet {
        assert_eq!(p.len(), self.n_params(), "kernel-set parameter vector length");
        let mut at = 0;
        let kernels = self
            .kernels
            .iter()
            .map(|k| {
                let n = k.n_params();
                at += n;
                k.with_log_params(&p[at - n..at])
            })
            .collect();
        KernelSet { kernels, per_class: self.per_class }
    }

    /// Take over another cell's log-parameters by name (`hyper: {from, keep}`): every parameter
    /// of this set gets the source's value of the same name, except those `keep` names, which
    /// stay as written. An error names a parameter the source does not have.
    pub fn take_over(&self, names: &[String], log_values: &[f64], keep: &[String]) -> Result<KernelSet, String> {
        assert_eq!(names.len(), log_values.len());
        let mut p = self.log_params();
        for (i, name) in self.param_names().iter().enumerate() {
            if keep.iter().any(|k| name_matches(k, name)) {
                continue;
            }
            let j = names
                .iter()
                .position(|n| n == name)
                .ok_or_else(|| format!("the source cell has no hyper-parameter \"{name}\" (it has: {})", names.join(", ")))?;
            p[i] = log_values[j];
        }
        Ok(self.with_log_params(&p))
    }

    /// The set with every parameter that `name` covers (see `name_matches`: `lengthscale` covers
    /// all ARD length-scales and every class's copy) set to `log_value`. An error when it covers none.
    pub fn with_named(&self, name: &str, log_value: f64) -> Result<KernelSet, String> {
        let names = self.param_names();
        let mut p = self.log_params();
        let mut hit = false;
        for (pi, n) in p.iter_mut().zip(&names) {
            if name_matches(name, n) {
                *pi = log_value;
                hit = true;
            }
        }
        if !hit {
            return Err(format!("\"{name}\" is not a parameter of this kernel (it has: {})", names.join(", ")));
        }
        Ok(self.with_log_params(&p))
    }

    /// Whether every name in `keep` names a parameter of this set.
    pub fn check_keep(&self, keep: &[String]) -> Result<(), String> {
        let names = self.param_names();
        for k in keep {
            if !names.iter().any(|n| name_matches(k, n)) {
                return Err(format!("hyper.keep: \"{k}\" is not a parameter of this kernel (it has: {})", names.join(", ")));
            }
        }
        Ok(())
    }
}
