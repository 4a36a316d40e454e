//! Virtual informative vectors (Seeger, Lawrence & Herbrich §5, §6.5; notes §6): invariances
//! encoded by augmenting only the active points with transformed copies. After a fit, each
//! active image's four one-pixel translations (up, down, left, right; the vacated border row or
//! column set to the background value) join the training set with their source's label, and
//! the active set is selected again on the augmented set at the hyper-parameters already
//! learned (no relearning). Inactive points are typically far from the decision boundary, so
//! the classifier is already invariant there; the active ones are where the copies matter.
use serde::{Deserialize, Serialize};

/// The `virtual_vectors` setting.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VirtualVectors {
    /// Image height and width in pixels; each input row is one image, row-major (USPS: 16 x 16).
    pub image: [usize; 2],
    /// The value shifted in at the border: the background (-1 for USPS's [-1, 1] pixels).
    pub background: f64,
    /// The active set size of the reselection on the augmented set (the paper's 1000).
    pub active_size: usize,
}

impl VirtualVectors {
    pub fn check(&self) -> Result<(), String> {
        if self.image.contains(&0) {
            return Err(format!("settings.virtual_vectors.image must be [height, width] of at least 1 pixel each, got {:?}", self.image));
        }
        if !self.background.is_finite() {
            return Err(format!("settings.virtual_vectors.background must be finite, got {}", self.background));
        }
        if self.active_size == 0 {
            return Err("settings.virtual_vectors.active_size must be at least 1".into());
        }
        Ok(())
    }

    /// The four one-pixel translations of a row-major `image` of this shape: content moved up,
    /// down, left and right by one pixel, the vacated row or column set to the background.
    pub fn translations(&self, image: &[f64]) -> [Vec<f64>; 4] {
        let [h, w] = self.image;
        assert_eq!(image.len(), h * w, "an image of {h} x {w} pixels");
        // new(r, c) = old(r + dr, c + dc) where that pixel exists, else the background.
        let moved = |dr: isize, dc: isize| -> Vec<f64> {
            (0..h * w)
                .map(|p| {
                    let (r, c) = ((p / w) as isize + dr, (p % w) as isize + dc);
                    if (0..h as isize).contains(&r) && (0..w as isize).contains(&c) {
                        image[r as usize * w + c as usize]
                    } else {
                        self.background
                    }
                })
                .collect()
        };
        [moved(1, 0), moved(-1, 0), moved(0, 1), moved(0, -1)]
    }
}

/// The training set augmented by the translations of the rows `active`: the original rows,
/// then four rows per active point in the order of `active`, each with its source's target.
pub fn augment(
    settings: &VirtualVectors,
    x: &ndarray::Array2<f64>,
    targets: &[f64],
    active: &[usize],
) -> Result<(ndarray::Array2<f64>, Vec<f64>), String> {
    let [h, w] = settings.image;
    if h * w != x.ncols() {
        return Err(format!("settings.virtual_vectors.image: {h} x {w} = {} pixels, but the inputs have {} features", h * w, x.ncols()));
    }
    let mut rows: Vec<f64> = x.iter().copied().collect();
    let mut t = targets.to_vec();
    for &i in active {
        let image: Vec<f64> = x.row(i).to_vec();
        for shifted in settings.translations(&image) {
            rows.extend(shifted);
            t.push(targets[i]);
        }
    }
    let n = t.len();
    Ok((ndarray::Array2::from_shape_vec((n, x.ncols()), rows).expect("n rows of the input width"), t))
}
