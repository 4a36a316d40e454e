//! Inducing inputs Z [M, d]: a parameter block that a sparse method owns and may learn.
//! Unlike kernel parameters they live in input space (no log transform) and are not reported
//! one by one; a method hands them to dependent cells as the named vector `inducing`.
use ndarray::Array2;

#[derive(Clone, Debug, PartialEq)]
pub struct InducingInputs {
    /// [M, d], one inducing input per row.
    pub z: Array2<f64>,
    /// Whether the method optimises Z (false: held at their initial values).
    pub learn: bool,
}

impl InducingInputs {
    pub fn new(z: Array2<f64>, learn: bool) -> Self {
        InducingInputs { z, learn }
    }

    pub fn len(&self) -> usize {
        self.z.nrows()
    }

    pub fn is_empty(&self) -> bool {
        self.z.nrows() == 0
    }

    /// Row-major flat copy, for an optimiser's parameter vector or a handoff.
    pub fn to_flat(&self) -> Vec<f64> {
        self.z.iter().copied().collect()
    }

    /// The block from a row-major flat vector of `len() * d` values.
    pub fn with_flat(&self, v: &[f64]) -> InducingInputs {
        let (m, d) = self.z.dim();
        assert_eq!(v.len(), m * d, "inducing inputs: flat length");
        InducingInputs { z: Array2::from_shape_vec((m, d), v.to_vec()).expect("shape checked"), learn: self.learn }
    }
}
