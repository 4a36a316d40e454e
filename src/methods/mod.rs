//! Approximate-inference methods behind one contract (see [`contract`]).
//!
//! A method value is checked configuration (`<Name>`, built from serde `<Name>Params`) and
//! is shared by many cells; `fit` returns a new fitted model (`<Name>Model`). All randomness
//! comes from `FitContext::rng`, so a cell's seed fixes its result bit for bit.
mod context;
mod contract;
pub mod ep;
pub mod gfitc;
pub mod gibbs_mnp;
pub mod importance;
pub mod ivm;
pub mod ivm_multiway;
pub mod klmnl;
pub mod klmnl_sparse;
pub mod laplace;
pub mod msvm;
pub mod optimize;
pub mod scmgpc;
pub mod select;
pub mod svgp;
pub mod vbmnp;
pub mod vbmnp_sparse;

pub use context::{Budget, CheckpointGrid, Checkpoints, FitContext, ScoreSnapshot, TrainingClock};
pub use contract::{
    floored_ln, AlsoPredict, Diagnostics, Evidence, FitError, Fitted, HyperPolicy, Method, Prediction, Problem, ProblemShape, Progress,
    StopReason,
};

use crate::kernels::{KernelSet, SqExp};

/// The kernel of methods whose mathematics is written for one squared-exponential kernel
/// shared by all classes; `supports` and `fit` of those methods use it.
pub(crate) fn shared_sqexp<'k>(kernels: &'k KernelSet, method: &str) -> Result<&'k SqExp, String> {
    kernels
        .shared_kernel()
        .and_then(|k| k.as_sqexp())
        .ok_or_else(|| format!("{method} needs one squared-exponential kernel shared by all classes (no per_class, type se)"))
}

/// Methods known to the harness: (YAML name, one-line description).
pub const METHODS: &[(&str, &str)] = &[(
    "klmnl",
    "KL-MNL: variational multinomial-logit GP (Chai 2012), non-sparse; evidence = the bound log Z_h (eq. 21), hyper-parameters by L-BFGS on it",
), (
    "klmnl_sparse",
    "Sparse KL-MNL (Chai 2012 §4, §6.1): the bound over inducing sites (datum, class) grown from a random start by active (d2 / d3 scores, App. D) or random expansion; evidence = the sparse bound log Z~_h (eq. 32), hyper-parameters by L-BFGS (App. C.4), one line search per expansion",
), (
    "mc_mnl",
    "MC-MNL: importance-sampled logit marginal likelihood and predictive (Chai 2012 App. F; t4 proposal at the KL-MNL mean; evidence = 99.9% upper bound)",
), (
    "mc_mnp",
    "MC-MNP: importance-sampled multinomial-probit marginal likelihood and predictive (Chai 2012 App. F; t4 proposal at the KL-MNL mean)",
), (
    "laplace",
    "Laplace approximation for the multinomial-logit GP (Rasmussen & Williams 2006, Alg. 3.3/3.4) or, with likelihood: probit, the binary-probit GP (Alg. 3.1/3.2); evidence by Laplace, hyper-parameters by L-BFGS",
), (
    "vbmnp",
    "Variational Bayes multinomial-probit GP (Girolami & Rogers 2006; lower bound, importance-sampled RBF precisions); binary_model: probit is the one-GP binary VB of eq. 4.9",
), (
    "vbmnp_sparse",
    "Sparse VB multinomial-probit GP by ADF with random or informative point inclusion (Girolami & Rogers 2006 §5; fixed kernel, no evidence)",
), (
    "gibbs_mnp",
    "Gibbs sampler for the multinomial-probit GP (Girolami & Rogers 2006, App. D; exact cone draws, fixed hyper-parameters; evidence = prior-sampling estimate)",
), (
    "svgp",
    "SVI-MGPC: sparse variational multi-class GP on minibatches (Hensman, Matthews & Ghahramani 2015), robust-max or softmax likelihood, natural gradients for q(u) and Adam for kernel and inducing inputs; evidence = full-data ELBO",
), (
    "scmgpc",
    "SC-MGPC: augmented logistic-softmax sparse GP classifier (Galy-Fajou et al. 2018) with closed-form CAVI/SVI updates (corrected Poisson rate by default), class-weighted k-means inducing sets per class, Adam on the kernels; evidence = full-data ELBO",
 ), (
    "ep",
    "EP for the arg-max multi-class GP with inducing values kept (Villacampa-Calvo & Hernandez-Lobato 2017): rank-one sites per pairwise factor, batch (damped, adaptive rates) or minibatch (Adam); evidence = log Z_q",
), (
    "sep",
    "Stochastic EP (Villacampa-Calvo & Hernandez-Lobato 2017): the EP above with each class's sites tied, memory C M^2 independent of N",
), (
    "gfitc",
    "Generalised FITC (Kim & Ghahramani 2006 likelihood, FITC prior): EP on the exact pairwise step factors to convergence, L-BFGS on log Z_EP over kernels and inducing inputs (Villacampa-Calvo & Hernandez-Lobato 2017's baseline)",
), (
    "ivm",
    "Informative vector machine (Seeger, Lawrence & Herbrich): binary probit GP with ADF sites on d points chosen by greedy (or randomized greedy) information-gain selection; two classes; kernel and intercept fixed or learned by major/minor steps on eq. 11; evidence = eq. 11's approximation log Q(D)",
), (
    "ivm_multiway",
    "Factorised multi-way IVM (Seeger, Lawrence & Herbrich §4): one IVM per class with its own active set, joint greedy selection of (point, class) pairs by the lowest Delta, factorised ADF sites (eq. 7); softmax by the Gauss-Hermite product rule or multivariate probit by App. D's 1-D rule; fixed kernels and intercepts, no evidence",
), (
    "msvm",
    "Single-machine multi-class SVMs as in MSVMpack: Weston-Watkins, Crammer-Singer, Lee-Lin-Wahba, MSVM2 (formulation: ww | cs | llw | msvm2), with biases; fixed kernel; labels only (no probabilities), no evidence",
)];

/// The numerics version of a method as it enters cell keys: its own `NUMERICS_VERSION` and
/// those of the methods it runs inside (the importance samplers fit KL-MNL first). `None` for
/// an unknown name. `MCGP_TEST_BUMP_NUMERICS=<method>` (tests only) marks one method's version
/// as bumped, to check that exactly its cells and their dependants are recomputed.
pub fn numerics_version(method: &str) -> Option<String> {
    let v = match method {
        "laplace" => format!("laplace={}", laplace::NUMERICS_VERSION),
        "klmnl" => format!("klmnl={}", klmnl::NUMERICS_VERSION),
        // `klmnl=` names the version of the KL-MNL pieces the sparse method runs, not the whole
        // dense method's (its V-step and hyper-parameter search are not used here).
        "klmnl_sparse" => format!("klmnl_sparse={},klmnl={}", klmnl_sparse::NUMERICS_VERSION, klmnl::SHARED_NUMERICS_VERSION),
        "mc_mnl" | "mc_mnp" => format!("importance={},klmnl={}", importance::NUMERICS_VERSION, klmnl::NUMERICS_VERSION),
        "vbmnp" => format!("vbmnp={}", vbmnp::NUMERICS_VERSION),
        "vbmnp_sparse" => format!("vbmnp_sparse={}", vbmnp_sparse::NUMERICS_VERSION),
        "gibbs_mnp" => format!("gibbs_mnp={}", gibbs_mnp::NUMERICS_VERSION),
        "svgp" => format!("svgp={}", svgp::NUMERICS_VERSION),
        "scmgpc" => format!("scmgpc={}", scmgpc::NUMERICS_VERSION),
        "ep" | "sep" => format!("ep={}", ep::NUMERICS_VERSION),
        "gfitc" => format!("gfitc={}", gfitc::NUMERICS_VERSION),
        "ivm" => format!("ivm={}", ivm::NUMERICS_VERSION),
        "ivm_multiway" => format!("ivm_multiway={}", ivm_multiway::NUMERICS_VERSION),
        "msvm" => format!("msvm={}", msvm::NUMERICS_VERSION),
        _ => return None,
    };
    let bumped =
        std::env::var("MCGP_TEST_BUMP_NUMERICS").is_ok_and(|m| v.split(',').any(|part| part.split('=').next() == Some(m.as_str())));
    Some(if bumped { format!("{v}+test-bump") } else { v })
}

/// `numerics_version` of a method entry: the method's version, and where the entry's settings
/// select a code path with its own version (GFITC's Anderson-accelerated inner loop, the
/// multi-way IVM's multi-probit), that
/// path's too, so that a change of that path re-keys only the cells that run it.
pub fn entry_numerics_version(method: &str, settings: &serde_json::Value) -> Option<String> {
    let base = numerics_version(method)?;
    let extra = match method {
        "gfitc" => gfitc::entry_numerics(settings),
        "ivm_multiway" => ivm_multiway::entry_numerics(settings),
        _ => None,
    };
    Some(match extra {
        Some(e) => format!("{base},{e}"),
        None => base,
    })
}

/// Build a checked method from its YAML name and settings. The error names the bad setting.
/// Settings with a `select` entry build the method wrapped in cross-validated grid selection
/// (`select.rs`).
pub fn build(name: &str, settings: &serde_json::Value) -> Result<Box<dyn Method>, String> {
    if let Some(select) = settings.get("select") {
        return Ok(Box::new(select::build_select(name, settings, select)?));
    }
    match name {
        "laplace" => Ok(Box::new(laplace::LaplaceParams::from_settings(settings)?.check()?)),
        "klmnl" => Ok(Box::new(klmnl::KlmnlParams::from_settings(settings)?.check()?)),
        "klmnl_sparse" => Ok(Box::new(klmnl_sparse::KlmnlSparseParams::from_settings(settings)?.check()?)),
        "mc_mnl" => Ok(Box::new(importance::ImportanceParams::from_settings(settings)?.check(importance::Lik::Logit)?)),
        "mc_mnp" => Ok(Box::new(importance::ImportanceParams::from_settings(settings)?.check(importance::Lik::Probit)?)),
        "vbmnp_sparse" => Ok(Box::new(vbmnp_sparse::VbmnpSparseParams::from_settings(settings)?.check()?)),
        "vbmnp" => Ok(Box::new(vbmnp::VbmnpParams::from_settings(settings)?.check()?)),
        "gibbs_mnp" => Ok(Box::new(gibbs_mnp::GibbsMnpParams::from_settings(settings)?.check()?)),
        "svgp" => Ok(Box::new(svgp::SvgpParams::from_settings(settings)?.check()?)),
        "scmgpc" => Ok(Box::new(scmgpc::ScmgpcParams::from_settings(settings)?.check()?)),
        "ep" => Ok(Box::new(ep::EpParams::from_settings(settings)?.check(false)?)),
        "sep" => Ok(Box::new(ep::EpParams::from_settings(settings)?.check(true)?)),
        "gfitc" => Ok(Box::new(gfitc::GfitcParams::from_settings(settings)?.check()?)),
        "ivm" => Ok(Box::new(ivm::IvmParams::from_settings(settings)?.check()?)),
        "ivm_multiway" => Ok(Box::new(ivm_multiway::IvmMultiwayParams::from_settings(settings)?.check()?)),
        "msvm" => Ok(Box::new(msvm::MsvmParams::from_settings(settings)?.check()?)),
        other => Err(format!("unknown method \"{other}\"")),
    }
}

/// Every setting of a method at its default, as the parsed settings struct serialises it.
/// Cell keys hold the settings as a spec writes them, so a changed default changes the numbers
/// of every cell that leaves it out without changing its key: tests/numerics_versions.rs pins
/// these, so that such a change comes with a numerics bump. `None` for an unknown name.
pub fn default_settings(name: &str) -> Option<serde_json::Value> {
    fn of<T: serde::de::DeserializeOwned + serde::Serialize>() -> Option<serde_json::Value> {
        serde_json::to_value(parse_settings::<T>(&serde_json::Value::Null).ok()?).ok()
    }
    match name {
        "laplace" => of::<laplace::LaplaceParams>(),
        "klmnl" => of::<klmnl::KlmnlParams>(),
        "klmnl_sparse" => of::<klmnl_sparse::KlmnlSparseParams>(),
        "mc_mnl" | "mc_mnp" => of::<importance::ImportanceParams>(),
        "vbmnp_sparse" => of::<vbmnp_sparse::VbmnpSparseParams>(),
        "vbmnp" => of::<vbmnp::VbmnpParams>(),
        "gibbs_mnp" => of::<gibbs_mnp::GibbsMnpParams>(),
        "svgp" => of::<svgp::SvgpParams>(),
        "scmgpc" => of::<scmgpc::ScmgpcParams>(),
        "ep" | "sep" => of::<ep::EpParams>(),
        "gfitc" => of::<gfitc::GfitcParams>(),
        "ivm" => of::<ivm::IvmParams>(),
        "ivm_multiway" => of::<ivm_multiway::IvmMultiwayParams>(),
        "msvm" => of::<msvm::MsvmParams>(),
        _ => None,
    }
}

/// `<Name>Params::from_settings(&value)` for every method's settings struct: one parser for all.
pub trait FromSettings: Sized {
    fn from_settings(settings: &serde_json::Value) -> Result<Self, String>;
}

impl<T: serde::de::DeserializeOwned> FromSettings for T {
    fn from_settings(settings: &serde_json::Value) -> Result<Self, String> {
        parse_settings(settings)
    }
}

/// Deserialize a method's settings into a message that names the field (`settings.max_iters:
/// invalid type ...`; serde alone names only the type) and, for an unknown field, the closest
/// known one.
pub(crate) fn parse_settings<T: serde::de::DeserializeOwned>(settings: &serde_json::Value) -> Result<T, String> {
    let value = if settings.is_null() { serde_json::Value::Object(Default::default()) } else { settings.clone() };
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        let at = if path == "." { "settings".to_string() } else { format!("settings.{path}") };
        format!("{at}: {message}{}", unknown_field_hint(&message))
    })
}

/// " (did you mean `x`?)" for serde's "unknown field `y`, expected one of `x`, ..." when a
/// known field is close to the unknown one.
fn unknown_field_hint(message: &str) -> String {
    let Some(rest) = message.strip_prefix("unknown field ") else { return String::new() };
    let quoted: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
    match quoted.split_first() {
        Some((unknown, known)) => {
            crate::suggest::closest(unknown, known.iter().copied()).map(|k| format!(" (did you mean `{k}`?)")).unwrap_or_default()
        }
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync + ?Sized>() {}

    #[test]
    fn methods_and_models_are_send_and_sync() {
        assert_send_sync::<dyn Method>();
        assert_send_sync::<dyn Fitted>();
        assert_send_sync::<laplace::Laplace>();
        assert_send_sync::<laplace::LaplaceModel>();
        assert_send_sync::<laplace::LaplaceProbitModel>();
        assert_send_sync::<vbmnp::VbmnpBinaryModel>();
        assert_send_sync::<klmnl_sparse::KlmnlSparse>();
        assert_send_sync::<klmnl_sparse::KlmnlSparseModel>();
    }

    #[test]
    fn every_registered_method_builds_with_default_settings() {
        for (name, _) in METHODS {
            assert_eq!(build(name, &serde_json::Value::Null).unwrap().name(), *name);
            assert!(numerics_version(name).is_some(), "{name} has no numerics version");
        }
        assert!(build("lapalce", &serde_json::Value::Null).is_err());
    }

    #[test]
    fn only_the_accelerated_gfitc_loop_carries_its_own_numerics_version() {
        let plain = numerics_version("gfitc").unwrap();
        for settings in [serde_json::Value::Null, serde_json::json!({"inner_anderson": 0}), serde_json::json!({"max_iters": 5})] {
            assert_eq!(entry_numerics_version("gfitc", &settings).unwrap(), plain, "{settings}");
        }
        let accelerated = entry_numerics_version("gfitc", &serde_json::json!({"inner_anderson": 3})).unwrap();
        assert_eq!(accelerated, format!("{plain},gfitc_anderson={}", gfitc::ANDERSON_NUMERICS_VERSION));
        // Other methods ignore the setting.
        assert_eq!(entry_numerics_version("ep", &serde_json::json!({"inner_anderson": 3})), numerics_version("ep"));
    }

    #[test]
    fn only_the_multi_probit_multiway_ivm_carries_its_own_numerics_version() {
        let plain = numerics_version("ivm_multiway").unwrap();
        for settings in [serde_json::Value::Null, serde_json::json!({"likelihood": "softmax", "quadrature_points": 5})] {
            assert_eq!(entry_numerics_version("ivm_multiway", &settings).unwrap(), plain, "{settings}");
        }
        let probit = entry_numerics_version("ivm_multiway", &serde_json::json!({"likelihood": "multi_probit"})).unwrap();
        assert_eq!(probit, format!("{plain},ivm_multiway_probit={}", ivm_multiway::MULTI_PROBIT_NUMERICS_VERSION));
        assert_eq!(entry_numerics_version("ivm", &serde_json::json!({"likelihood": "multi_probit"})), numerics_version("ivm"));
    }
}
