//! An exponential moving average of an optimiser's iterates, debiased as Adam's moments are:
//! Polyak-Ruppert averaging with a forgetting factor. Near an optimum a stochastic optimiser's
//! iterates wander by about its step noise; predicting at their average removes most of that
//! wander without slowing the optimiser, whose own trajectory the average never touches.
//! Written here because it is a dozen lines over slices (no crate keeps one over a caller's
//! parameter vector).

/// avg_t = sum_s d^(t-s) (1 - d) theta_s / (1 - d^t): every iterate so far with weight
/// decaying by `decay` a step (a time constant of 1 / (1 - decay) steps), normalised so that
/// the weights sum to one from the first update on.
#[derive(Clone, Debug)]
pub struct IterateAverage {
    decay: f64,
    sum: Vec<f64>,
    /// 1 - decay^t, the weights' total.
    weight: f64,
    free: Vec<bool>,
}

impl IterateAverage {
    /// An average over coordinates `free`; the others are never averaged (they do not move).
    pub fn new(decay: f64, free: &[bool]) -> Self {
        assert!((0.0..1.0).contains(&decay), "an iterate average's decay lies in [0, 1), got {decay}");
        IterateAverage { decay, sum: vec![0.0; free.len()], weight: 0.0, free: free.to_vec() }
    }

    pub fn decay(&self) -> f64 {
        self.decay
    }

    /// Take in the iterate `theta`.
    pub fn update(&mut self, theta: &[f64]) {
        let (d, e) = (self.decay, 1.0 - self.decay);
        self.sum.iter_mut().zip(theta).for_each(|(s, t)| *s = d * *s + e * t);
        self.weight = d * self.weight + e;
    }

    /// The average, with the coordinates that are not free (and all of them before the first
    /// update) taken from `theta`, the current iterate.
    pub fn average(&self, theta: &[f64]) -> Vec<f64> {
        if self.weight == 0.0 {
            return theta.to_vec();
        }
        self.sum.iter().zip(theta).zip(&self.free).map(|((s, t), &f)| if f { s / self.weight } else { *t }).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_average_is_the_normalised_geometric_weighting_of_the_iterates() {
        let decay = 0.9;
        let iterates: Vec<[f64; 3]> = (0..25).map(|t| [t as f64, (t as f64).sin(), 7.0]).collect();
        let mut avg = IterateAverage::new(decay, &[true, true, false]);
        for it in &iterates {
            avg.update(it);
        }
        let last = iterates.len() - 1;
        // Brute force: weights d^(T - s) over the iterates, normalised.
        let w: Vec<f64> = (0..=last).map(|s| decay.powi((last - s) as i32)).collect();
        let total: f64 = w.iter().sum();
        let got = avg.average(&[100.0, 100.0, 7.5]);
        for j in 0..2 {
            let want = iterates.iter().zip(&w).map(|(it, w)| w * it[j]).sum::<f64>() / total;
            assert!((got[j] - want).abs() < 1e-12 * (1.0 + want.abs()), "coordinate {j}: {} against {want}", got[j]);
        }
        assert_eq!(got[2], 7.5, "a coordinate that is not free is the current iterate's");
    }

    #[test]
    fn a_constant_iterate_averages_to_itself_and_decay_zero_is_the_last_iterate() {
        let mut avg = IterateAverage::new(0.999, &[true]);
        assert_eq!(avg.average(&[3.0]), vec![3.0], "before any update: the current iterate");
        for _ in 0..1000 {
            avg.update(&[0.3]);
        }
        assert!((avg.average(&[0.0])[0] - 0.3).abs() < 1e-14, "debiased from the first step on");
        let mut last = IterateAverage::new(0.0, &[true]);
        last.update(&[1.0]);
        last.update(&[-2.5]);
        assert_eq!(last.average(&[0.0]), vec![-2.5]);
    }
}
