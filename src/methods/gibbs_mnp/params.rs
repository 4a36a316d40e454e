//! Settings of `method: gibbs_mnp` and their checks.
use super::*;

/// Settings as written in a spec (`method: gibbs_mnp`, `settings: {...}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GibbsMnpParams {
    /// Sweeps discarded before keeping samples (paper §6.2: 2000).
    #[serde(default = "default_burn_in")]
    pub burn_in: usize,
    /// Samples kept after burn-in (paper §6.2: 1000).
    #[serde(default = "default_samples")]
    pub samples: usize,
    /// Sweeps between kept samples (1 = keep every sweep after burn-in, as in the paper).
    #[serde(default = "one")]
    pub thin: usize,
    /// GP-prior draws for the marginal-likelihood estimate (paper §6.2: 1000); 0 = none.
    #[serde(default = "default_evidence_samples")]
    pub evidence_samples: usize,
    /// Record the trace `log_lik` = sum_n log P(t_n | m_n) of the current draw every this many
    /// sweeps (0 = never). (Its integrated autocorrelation time over every 10th kept draw is
    /// always computed and goes into the diagnostics as `log_lik_autocorr_time_x10`.)
    #[serde(default = "default_trace_every")]
    pub trace_every: usize,
    /// Use every this many kept draws for the predictive probabilities (1 = all, as the paper).
    #[serde(default = "one")]
    pub predict_thin: usize,
    /// Two classes: `probit` (one GP, P(t=1|m) = Phi(m), the paper's binary model) or
    /// `multinomial` (two GPs, the K = 2 multinomial probit).
    #[serde(default)]
    pub binary_model: BinaryModel,
}

pub(super) fn default_burn_in() -> usize {
    2000
}
pub(super) fn default_samples() -> usize {
    1000
}
pub(super) fn one() -> usize {
    1
}
pub(super) fn default_evidence_samples() -> usize {
    1000
}
pub(super) fn default_trace_every() -> usize {
    100
}

impl Default for GibbsMnpParams {
    fn default() -> Self {
        parse_settings(&serde_json::Value::Null).expect("defaults parse")
    }
}

impl GibbsMnpParams {
    /// Check every rule; the error names the setting.
    pub fn check(self) -> Result<GibbsMnp, String> {
        if self.samples == 0 {
            return Err("settings.samples must be at least 1".into());
        }
        if self.thin == 0 {
            return Err("settings.thin must be at least 1".into());
        }
        if self.predict_thin == 0 || self.predict_thin > self.samples {
            return Err(format!("settings.predict_thin must be in 1..=samples ({}), got {}", self.samples, self.predict_thin));
        }
        if self.evidence_samples == 1 {
            return Err("settings.evidence_samples must be 0 (no estimate) or at least 2".into());
        }
        Ok(GibbsMnp { params: self })
    }
}

/// The checked method.
#[derive(Clone, Debug)]
pub struct GibbsMnp {
    pub(super) params: GibbsMnpParams,
}
