//! The fitted IVM: prediction from the active set alone (Seeger, Lawrence & Herbrich §3.1;
//! notes §2.2): k_* = K(X_I, x_*) (d kernel evaluations), m_* = L^{-1} Pi^{1/2} k_*,
//! mu_* = beta^T m_*, sigma_*^2 = K(x_*, x_*) - ||m_*||^2; the probit predictive is
//! Q(y_* = +1) = Phi((mu_* + bias) / sqrt(1 + sigma_*^2)) (App. B.1).
use super::state::IvmState;
use super::SiteLik;
use crate::kernels::{Kernel, KernelSet};
use crate::linalg::Chol;
use crate::linalg::{argmax, softmax_in_place};
use crate::methods::{Diagnostics, Evidence, FitError, Fitted, Prediction, StopReason};
use crate::results::EvidenceKind;
use crate::special::{log_normal_cdf, normal_cdf};
use faer::Mat;
use ndarray::{Array2, Axis};
use rand_pcg::Pcg64;
use std::collections::BTreeMap;

/// What prediction of the latent u needs of one IVM: the active rows and the factors of B
/// (shared with the factorised multi-way IVM, one per class).
#[derive(Clone, Debug)]
pub(crate) struct ActiveSetPredictor {
    pub kernel: Box<dyn Kernel>,
    /// Training rows of the active set, in inclusion order.
    pub x_active: Array2<f64>,
    pub sqrt_pi: Vec<f64>,
    pub chol: Chol,
    pub beta: Vec<f64>,
}

impl ActiveSetPredictor {
    pub fn from_state(kernel: &dyn Kernel, x: &Array2<f64>, state: &IvmState) -> Self {
        ActiveSetPredictor {
            kernel: kernel.clone_box(),
            x_active: x.select(Axis(0), &state.active_rows()),
            sqrt_pi: state.pi.iter().map(|p| p.sqrt()).collect(),
            chol: state.chol.clone(),
            beta: state.beta.clone(),
        }
    }

    /// Predictive means and variances of the latent u at the rows of `x`, [m] each.
    pub fn latent_predictive(&self, x: &Array2<f64>) -> (Vec<f64>, Vec<f64>) {
        let (d, m) = (self.x_active.nrows(), x.nrows());
        let kss = self.kernel.diag(x);
        if d == 0 {
            return (vec![0.0; m], kss);
        }
        let ks = self.kernel.cross(&self.x_active, x);
        let v = self.chol.solve_l(Mat::from_fn(d, m, |k, j| self.sqrt_pi[k] * ks[(k, j)]).as_ref());
        let mean = (0..m).map(|j| (0..d).map(|k| self.beta[k] * v[(k, j)]).sum()).collect();
        let var = crate::linalg::reduced_variances(&kss, v.as_ref());
        (mean, var)
    }
}

pub struct IvmModel {
    pub(super) latent: ActiveSetPredictor,
    pub(super) lik: SiteLik,
    /// log Q(D) of eq. 11 (an approximation; `None` in checkpoint snapshots).
    pub(super) log_evidence: Option<f64>,
    pub(super) diagnostics: Diagnostics,
}

impl IvmModel {
    /// Predictive means and variances of the latent u at the rows of `x`, [m] each.
    pub fn latent_predictive(&self, x: &Array2<f64>) -> (Vec<f64>, Vec<f64>) {
        self.latent.latent_predictive(x)
    }

    /// Number of active points.
    pub fn active_size(&self) -> usize {
        self.latent.x_active.nrows()
    }
}

impl Fitted for IvmModel {
    /// Binary probit: class 1 is y = +1. Each class from its own tail, Phi(-z) and Phi(z), so
    /// neither probability is 1 - (nearly 1).
    fn predict(&self, x: &Array2<f64>, _rng: &mut Pcg64) -> Result<Prediction, FitError> {
        let SiteLik::Probit { bias } = self.lik else {
            return Err(FitError::Unsupported("ivm: class probabilities need the probit likelihood".into()));
        };
        let (mean, var) = self.latent_predictive(x);
        let mut probs = Array2::zeros((x.nrows(), 2));
        for (j, (m, v)) in mean.iter().zip(&var).enumerate() {
            let z = (m + bias) / (1.0 + v).sqrt();
            if !z.is_finite() {
                return Err(FitError::Numerical(format!("ivm: non-finite predictive at test row {j} (mean {m}, variance {v})")));
            }
            probs[(j, 0)] = normal_cdf(-z);
            probs[(j, 1)] = normal_cdf(z);
        }
        Ok(Prediction::new(probs))
    }

    fn evidence(&self) -> Option<Evidence> {
        self.log_evidence.map(|v| Evidence::new(v, EvidenceKind::Approximation))
    }

    fn kernels(&self) -> KernelSet {
        KernelSet::shared(self.latent.kernel.clone_box())
    }

    fn diagnostics(&self) -> Diagnostics {
        self.diagnostics.clone()
    }

    fn inducing_inputs(&self) -> Vec<Array2<f64>> {
        vec![self.latent.x_active.clone()]
    }
}

/// c against the rest (§4.1): C binary IVMs, task c with class c as y = +1. A test point's class
/// is the vote of the paper's Table 4, argmax_c log Q_c(y = +1 | x); the probabilities reported
/// are those values normalised over the classes, softmax_c log Q_c(y = +1 | x) (a combination
/// of C separate models, not one model's predictive, so the log predictive score is a
/// heuristic one; the diagnostics say so). No evidence: the C tasks' eq. 11 values are of
/// binary problems (each task's is a diagnostic).
/// The names of the tasks' log Q_c(y = +1 | x) and log Q_c(y = -1 | x) in a prediction's
/// `log_class_values` ([m, C], column c for task c).
pub(super) const TASK_LOG_Q: &str = "task_log_q";
pub(super) const TASK_LOG_Q_REST: &str = "task_log_q_rest";
/// The tasks' discriminants, latent predictive mean plus intercept (not a log-value: read only
/// by `test_metrics` for the vote by discriminants).
pub(super) const TASK_DISCRIMINANT: &str = "task_discriminant";

pub struct OneVsRestModel {
    tasks: Vec<IvmModel>,
    diagnostics: Diagnostics,
}

impl OneVsRestModel {
    pub fn new(tasks: Vec<IvmModel>) -> Self {
        let mut diagnostics = Diagnostics::default();
        let mut iterations = 0;
        for (c, task) in tasks.iter().enumerate() {
            let d = &task.diagnostics;
            iterations += d.iterations.unwrap_or(0);
            diagnostics.jitter = Some(diagnostics.jitter.unwrap_or(0.0).max(d.jitter.unwrap_or(0.0)));
            for (name, value) in &d.numbers {
                diagnostics.number(&format!("c{c}_{name}"), *value);
            }
            if let Some(ev) = task.log_evidence {
                diagnostics.number(&format!("c{c}_log_q"), ev);
            }
            for (name, text) in &d.notes {
                if name != "model" {
                    diagnostics.note(&format!("c{c}_{name}"), text.clone());
                }
            }
        }
        diagnostics.iterations = Some(iterations);
        // The whole fit's stop: a budget that ended any task, else the first task's that is not
        // convergence, else convergence (each task's iterations count towards the budget alone).
        let stops: Vec<StopReason> = tasks.iter().filter_map(|t| t.diagnostics.stop_reason).collect();
        diagnostics.stop_reason = stops
            .iter()
            .find(|s| matches!(s, StopReason::BudgetIterations | StopReason::BudgetSeconds))
            .or_else(|| stops.iter().find(|s| **s != StopReason::Converged))
            .or(stops.first())
            .copied();
        diagnostics.number("active_size", tasks.iter().map(|t| t.active_size() as f64).sum());
        let model = tasks.first().and_then(|t| t.diagnostics.notes.get("model")).cloned().unwrap_or_default();
        diagnostics.note(
            "model",
            format!(
                "c against the rest: {} binary IVMs, task c with class c as y = +1 (each: {model}); class = argmax_c log Q_c(y = +1 | x), probabilities = softmax_c of those values (a vote of separate models, not one predictive)",
                tasks.len()
            ),
        );
        OneVsRestModel { tasks, diagnostics }
    }
}

impl Fitted for OneVsRestModel {
    fn predict(&self, x: &Array2<f64>, _rng: &mut Pcg64) -> Result<Prediction, FitError> {
        let c = self.tasks.len();
        let mut log_q = Array2::zeros((x.nrows(), c));
        // log Q_c(y = -1 | x) from its own tail (not log(1 - Q_c(+1))), for the tasks' scores.
        let mut log_q_rest = Array2::zeros((x.nrows(), c));
        let mut discriminant = Array2::zeros((x.nrows(), c));
        for (k, task) in self.tasks.iter().enumerate() {
            let SiteLik::Probit { bias } = task.lik else {
                return Err(FitError::Unsupported("ivm: class probabilities need the probit likelihood".into()));
            };
            let (mean, var) = task.latent_predictive(x);
            for (j, (m, v)) in mean.iter().zip(&var).enumerate() {
                let z = (m + bias) / (1.0 + v).sqrt();
                if !z.is_finite() {
                    return Err(FitError::Numerical(format!(
                        "ivm: task {k}: non-finite predictive at test row {j} (mean {m}, variance {v})"
                    )));
                }
                log_q[(j, k)] = log_normal_cdf(z);
                log_q_rest[(j, k)] = log_normal_cdf(-z);
                discriminant[(j, k)] = m + bias;
            }
        }
        let mut probs = log_q.clone();
        for mut row in probs.rows_mut() {
            softmax_in_place(row.as_slice_mut().expect("a standard-layout row"));
        }
        let mut prediction = Prediction::new(probs);
        prediction.log_class_values.insert(TASK_LOG_Q.into(), log_q);
        prediction.log_class_values.insert(TASK_LOG_Q_REST.into(), log_q_rest);
        prediction.log_class_values.insert(TASK_DISCRIMINANT.into(), discriminant);
        Ok(prediction)
    }

    /// Each binary task scored on its own problem (class c against the rest), as Tables 1 and 4
    /// report them: `task<c>_error_pct` (Q_c(y = +1 | x) > 1/2 read as class c) and
    /// `task<c>_log_pred_mean`, the mean over test rows of log Q_c(y_c | x), y_c = +1 for class
    /// c and -1 otherwise. Also `error_pct_discriminant`: the C-class error of the other reading
    /// of Table 4's "voting with these discriminants", argmax_c (mu_c(x) + bias_c), which ranks
    /// like the main vote argmax_c log Q_c(+1 | x) only where the tasks' predictive variances
    /// agree (Q_c = Phi((mu_c + bias_c) / sqrt(1 + var_c))).
    fn test_metrics(&self, prediction: &Prediction, y_test: &[usize]) -> BTreeMap<String, f64> {
        let (pos, rest) = (&prediction.log_class_values[TASK_LOG_Q], &prediction.log_class_values[TASK_LOG_Q_REST]);
        let m = y_test.len().max(1) as f64;
        let mut out = BTreeMap::new();
        let discriminant = &prediction.log_class_values[TASK_DISCRIMINANT];
        let vote_errors = discriminant.rows().into_iter().zip(y_test).filter(|(row, &t)| argmax(&row.to_vec()) != t).count();
        out.insert("error_pct_discriminant".into(), 100.0 * vote_errors as f64 / m);
        for c in 0..self.tasks.len() {
            let errors = y_test.iter().enumerate().filter(|&(j, &t)| (pos[(j, c)] > rest[(j, c)]) != (t == c)).count();
            let log_pred: f64 = y_test.iter().enumerate().map(|(j, &t)| if t == c { pos[(j, c)] } else { rest[(j, c)] }).sum();
            out.insert(format!("task{c}_error_pct"), 100.0 * errors as f64 / m);
            out.insert(format!("task{c}_log_pred_mean"), log_pred / m);
        }
        out
    }

    fn evidence(&self) -> Option<Evidence> {
        None
    }

    fn kernels(&self) -> KernelSet {
        KernelSet::per_class(self.tasks.iter().map(|t| t.latent.kernel.clone_box()).collect())
    }

    fn diagnostics(&self) -> Diagnostics {
        self.diagnostics.clone()
    }

    fn inducing_inputs(&self) -> Vec<Array2<f64>> {
        self.tasks.iter().map(|t| t.latent.x_active.clone()).collect()
    }
}
