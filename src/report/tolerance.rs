//! Does this run's mean match a published one?
use crate::results::Aggregate;
use crate::spec::{PaperValue, ToleranceRule};

/// Returns (matched?, the tolerance used, a short text naming the rule).
///
/// The boundary counts as a match (`|run − paper| ≤ tol`), with a relative slack of
/// 1e-12 so that decimal inputs such as 0.33 vs 0.3 ± 10% are not lost to rounding.
/// A non-finite run mean never matches, and neither does a mean over some splits only
/// (`n_nonfinite` > 0: splits that failed, gave a non-finite value, in a mean row lack a
/// data set, or in a paired table lack the base's split): the splits left out are likely the worst, so the mean flatters the run.
pub fn within_tolerance(rule: &ToleranceRule, paper: &PaperValue, run: &Aggregate) -> (bool, f64, String) {
    let (tol, label) = match *rule {
        ToleranceRule::StandardError { k, rel, rounding } => match paper.sd.filter(|sd| sd.is_finite() && *sd >= 0.0) {
            Some(sd_paper) => {
                // The paper's own n when given, else assume it used as many splits as this run.
                let n_run = run.n.max(1) as f64;
                let n_paper = paper.n.filter(|&n| n > 0).map_or(n_run, |n| n as f64);
                // One split has no spread of its own: take the paper's (a zero would treat the
                // single split as exact).
                let sd_run = if run.n > 1 { run.sd } else { sd_paper };
                let se = (sd_paper * sd_paper / n_paper + sd_run * sd_run / n_run).sqrt();
                if rounding > 0.0 {
                    (k * se + rounding, format!("{}·SE + {} (rounding)", short(k), short(rounding)))
                } else {
                    (k * se, format!("{}·SE", short(k)))
                }
            }
            None => (rel * paper.mean.abs(), format!("±{}% (paper gives no sd)", short(rel * 100.0))),
        },
        ToleranceRule::Spread { k, floor } => match paper.sd.filter(|sd| sd.is_finite() && *sd >= 0.0) {
            Some(sd) if k * sd > floor => (k * sd, format!("{}·sd", short(k))),
            _ => (floor, format!("±{}", short(floor))),
        },
        ToleranceRule::Relative { rel } => (rel * paper.mean.abs(), format!("±{}%", short(rel * 100.0))),
        ToleranceRule::Absolute { abs } => (abs, format!("±{}", short(abs))),
    };
    let diff = (run.mean - paper.mean).abs();
    let slack = 1e-12 * tol.abs().max(paper.mean.abs());
    if run.n_nonfinite > 0 {
        let label = format!("{label}; not matched: {} split(s) failed, not finite or unpaired", run.n_nonfinite);
        return (false, tol, label);
    }
    (diff <= tol + slack, tol, label)
}

/// Describes a table's rule in a sentence, for the text under the table.
pub fn describe(rule: &ToleranceRule) -> String {
    match *rule {
        ToleranceRule::StandardError { k, rel, rounding } => format!(
            "{k}·SE: |run − paper| ≤ {k}·√(sd_paper²/n_paper + sd_run²/n_run){}, with n_paper = the run's n \
             when the paper does not give it and sd_run = sd_paper when the run has one split; ±{}% of the \
             paper's mean where the paper gives no sd.",
            if rounding > 0.0 {
                format!(" + {} (half the paper's last printed digit: a rounded value stands for an interval)", short(rounding))
            } else {
                String::new()
            },
            short(rel * 100.0),
            k = short(k)
        ),
        ToleranceRule::Spread { k, floor } => format!(
            "{k}·sd: |run − paper| ≤ max({k}·sd_paper, {f}), the paper's spread over its splits (±{f} where it gives none).",
            k = short(k),
            f = short(floor)
        ),
        ToleranceRule::Relative { rel } => format!("±{}%: |run − paper| ≤ {}·|paper|.", short(rel * 100.0), short(rel)),
        ToleranceRule::Absolute { abs } => format!("±{a}: |run − paper| ≤ {a}.", a = short(abs)),
    }
}

/// A rule parameter as written in a spec: 3, 2.5, 10.
fn short(x: f64) -> String {
    format!("{}", (x * 1e9).round() / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paper(mean: f64, sd: Option<f64>, n: Option<usize>) -> PaperValue {
        PaperValue {
            dataset: "d".into(),
            method: "m".into(),
            metric: "error_pct".into(),
            setting: None,
            mean,
            sd,
            n,
            also: Vec::new(),
            scored: true,
            miss: None,
        }
    }

    fn run(mean: f64, sd: f64, n: usize) -> Aggregate {
        Aggregate { mean, sd, se: sd / (n as f64).sqrt(), n, n_nonfinite: 0 }
    }

    const SE3: ToleranceRule = ToleranceRule::StandardError { k: 3.0, rel: 0.1, rounding: 0.0 };

    #[test]
    fn standard_error_uses_both_sds() {
        // paper sd 4 over 16 splits, run sd 3 over 9 splits: sqrt(16/16 + 9/9) = sqrt(2); 3·sqrt(2) = 4.2426.
        let p = paper(10.0, Some(4.0), Some(16));
        let (ok, tol, label) = within_tolerance(&SE3, &p, &run(14.2, 3.0, 9));
        assert!((tol - 3.0 * 2f64.sqrt()).abs() < 1e-12);
        assert!(ok);
        assert_eq!(label, "3·SE");
        let (ok, _, _) = within_tolerance(&SE3, &p, &run(14.25, 3.0, 9));
        assert!(!ok, "4.25 > 4.2426");
        // Symmetric below the paper's mean.
        assert!(within_tolerance(&SE3, &p, &run(5.8, 3.0, 9)).0);
        assert!(!within_tolerance(&SE3, &p, &run(5.75, 3.0, 9)).0);
    }

    #[test]
    fn standard_error_assumes_run_n_when_paper_n_missing() {
        // paper sd 3, run sd 4, both over n = 25: sqrt(9/25 + 16/25) = 1; k = 2 gives tol 2.
        let rule = ToleranceRule::StandardError { k: 2.0, rel: 0.1, rounding: 0.0 };
        let p = paper(50.0, Some(3.0), None);
        let (ok, tol, label) = within_tolerance(&rule, &p, &run(52.0, 4.0, 25));
        assert_eq!(tol, 2.0);
        assert!(ok, "exactly on the boundary counts as a match");
        assert_eq!(label, "2·SE");
        assert!(!within_tolerance(&rule, &p, &run(52.001, 4.0, 25)).0);
        // A paper n of 0 is meaningless and treated as absent.
        let p0 = paper(50.0, Some(3.0), Some(0));
        assert_eq!(within_tolerance(&rule, &p0, &run(52.0, 4.0, 25)).1, 2.0);
    }

    #[test]
    fn one_split_takes_the_papers_spread_as_its_own() {
        // Paper sd 2 over 4 splits, a run of one split: sqrt(4/4 + 4/1) = sqrt(5); 3·sqrt(5) = 6.708
        // (with the single split's sd of 0 it was 3·1 = 3).
        let p = paper(10.0, Some(2.0), Some(4));
        let (ok, tol, _) = within_tolerance(&SE3, &p, &run(16.7, 0.0, 1));
        assert!((tol - 3.0 * 5f64.sqrt()).abs() < 1e-12, "{tol}");
        assert!(ok);
        assert!(!within_tolerance(&SE3, &p, &run(16.71, 0.0, 1)).0);
        // Two splits have a spread of their own, even a zero one.
        assert_eq!(within_tolerance(&SE3, &p, &run(10.0, 0.0, 2)).1, 3.0);
    }

    #[test]
    fn standard_error_falls_back_to_relative_without_paper_sd() {
        // No sd: ±10% of 20 = 2, whatever the run's spread.
        let p = paper(20.0, None, Some(10));
        let (ok, tol, label) = within_tolerance(&SE3, &p, &run(22.0, 100.0, 10));
        assert_eq!(tol, 2.0);
        assert!(ok);
        assert_eq!(label, "±10% (paper gives no sd)");
        assert!(!within_tolerance(&SE3, &p, &run(17.9, 0.0, 10)).0);
        // Negative means (log likelihoods) use |paper|.
        let neg = paper(-200.0, None, None);
        let (ok, tol, _) = within_tolerance(&SE3, &neg, &run(-219.0, 1.0, 10));
        assert_eq!(tol, 20.0);
        assert!(ok);
        assert!(!within_tolerance(&SE3, &neg, &run(-221.0, 1.0, 10)).0);
    }

    #[test]
    fn rounding_adds_half_the_last_printed_digit_to_the_standard_errors() {
        // "0.33 +- 0.00" over 20 splits stands for a mean in [0.325, 0.335): a run without
        // spread matches anywhere in it, and nowhere outside.
        let rule = ToleranceRule::StandardError { k: 3.0, rel: 0.1, rounding: 0.005 };
        let p = paper(0.33, Some(0.0), Some(20));
        let (ok, tol, label) = within_tolerance(&rule, &p, &run(0.334, 0.0, 20));
        assert!(ok);
        assert_eq!(tol, 0.005);
        assert_eq!(label, "3·SE + 0.005 (rounding)");
        assert!(!within_tolerance(&rule, &p, &run(0.336, 0.0, 20)).0);
        // With spread, the run may sit 3 SE beyond the interval's end: a run sd of 0.0447 over
        // 20 splits is an SE of 0.01, so 0.33 + 0.005 + 0.03 = 0.365 is the last match.
        let spread = 0.01 * 20f64.sqrt();
        let (ok, tol, _) = within_tolerance(&rule, &p, &run(0.3649, spread, 20));
        assert!(ok && (tol - 0.035).abs() < 1e-12, "{tol}");
        assert!(!within_tolerance(&rule, &p, &run(0.3651, spread, 20)).0);
        // Without rounding the same run is judged by 3 SE alone.
        assert!(!within_tolerance(&SE3, &p, &run(0.3649, spread, 20)).0);
    }

    #[test]
    fn the_spread_rule_takes_k_paper_sds_or_its_floor_whichever_is_wider() {
        // Galy-Fajou et al.'s criterion on error: max(2 sd, 0.02); Vehicle's SC-MGPC 0.27 +- 0.07.
        let rule = ToleranceRule::Spread { k: 2.0, floor: 0.02 };
        let p = paper(0.27, Some(0.07), Some(10));
        let (ok, tol, label) = within_tolerance(&rule, &p, &run(0.40, 0.01, 10));
        assert!(ok && (tol - 0.14).abs() < 1e-15 && label == "2·sd", "{tol} {label}");
        assert!(!within_tolerance(&rule, &p, &run(0.42, 0.0, 10)).0);
        // The run's own spread and n do not widen it (it is not a standard-error rule).
        assert!(!within_tolerance(&rule, &p, &run(0.42, 5.0, 2)).0);
        // sd 0.00 printed: the floor decides.
        let tight = paper(0.03, Some(0.0), Some(10));
        assert_eq!(within_tolerance(&rule, &tight, &run(0.049, 0.0, 10)).1, 0.02);
        assert!(!within_tolerance(&rule, &tight, &run(0.051, 0.0, 10)).0);
        assert!(within_tolerance(&rule, &paper(0.03, None, None), &run(0.05, 0.0, 10)).0);
    }

    #[test]
    fn zero_spread_needs_equality() {
        let p = paper(3.0, Some(0.0), Some(10));
        assert!(within_tolerance(&SE3, &p, &run(3.0, 0.0, 10)).0);
        assert!(!within_tolerance(&SE3, &p, &run(3.01, 0.0, 10)).0);
    }

    #[test]
    fn relative_rule_boundary_survives_decimal_rounding() {
        let rule = ToleranceRule::Relative { rel: 0.1 };
        let p = paper(0.3, Some(5.0), Some(10));
        // 0.33 - 0.3 = 0.030000000000000027 > 0.1 * 0.3 = 0.030000000000000002 in binary.
        let (ok, tol, label) = within_tolerance(&rule, &p, &run(0.33, 1.0, 10));
        assert!(ok);
        assert!((tol - 0.03).abs() < 1e-15);
        assert_eq!(label, "±10%");
        assert!(!within_tolerance(&rule, &p, &run(0.3301, 1.0, 10)).0);
        assert!(within_tolerance(&rule, &p, &run(0.27, 1.0, 10)).0);
    }

    #[test]
    fn absolute_rule() {
        let rule = ToleranceRule::Absolute { abs: 0.5 };
        let p = paper(-1.0, Some(10.0), None);
        let (ok, tol, label) = within_tolerance(&rule, &p, &run(-1.5, 0.0, 3));
        assert!(ok);
        assert_eq!(tol, 0.5);
        assert_eq!(label, "±0.5");
        assert!(!within_tolerance(&rule, &p, &run(-0.49, 0.0, 3)).0);
    }

    #[test]
    fn non_finite_run_never_matches() {
        let p = paper(1.0, None, None);
        assert!(!within_tolerance(&ToleranceRule::Absolute { abs: 1e9 }, &p, &run(f64::NAN, 0.0, 3)).0);
        // A finite mean over the finite splits only is inside any tolerance yet not a match.
        let partial = Aggregate { n_nonfinite: 1, ..run(1.0, 0.0, 3) };
        assert!(within_tolerance(&ToleranceRule::Absolute { abs: 1e9 }, &p, &run(1.0, 0.0, 3)).0);
        let (ok, _, label) = within_tolerance(&ToleranceRule::Absolute { abs: 1e9 }, &p, &partial);
        assert!(!ok);
        assert!(label.ends_with("not matched: 1 split(s) failed, not finite or unpaired"), "{label}");
    }
}
