//! Text for humans: numbers, metric names, durations and grid settings.
use std::cmp::Ordering;

/// A table number: 2 decimals from 1 up, 3 significant digits below, scientific at the extremes.
pub fn num(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "∞".into() } else { "−∞".into() };
    }
    let a = x.abs();
    let text = if a == 0.0 {
        "0".into()
    } else if !(1e-3..1e6).contains(&a) {
        format!("{x:.2e}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        // 3 significant digits: 0.123, 0.0123.
        let decimals = (2 - a.log10().floor() as i32).max(0) as usize;
        format!("{x:.decimals$}")
    };
    // A proper minus sign reads better next to ± in HTML.
    text.replacen('-', "−", 1).replace("e−", "e-")
}

/// "mean ± sd".
pub fn mean_sd(mean: f64, sd: Option<f64>) -> String {
    match sd {
        Some(sd) => format!("{} ± {}", num(mean), num(sd)),
        None => num(mean),
    }
}

/// An axis tick: the shortest text that shows the (rounded) value.
pub fn tick(v: f64) -> String {
    let a = v.abs();
    if a < 1e-12 {
        "0".into()
    } else if !(1e-3..1e5).contains(&a) {
        format!("{v:.1e}").replace(".0e", "e")
    } else {
        // Round away binary noise (0.30000000000000004) before the shortest-form Display.
        let scale = 10f64.powi(6 - a.log10().floor() as i32);
        format!("{}", (v * scale).round() / scale)
    }
}

/// A value to 3 significant digits (grid coordinates such as e^-1.5 = 0.223).
pub fn sig3(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return tick(v);
    }
    let scale = 10f64.powi(2 - v.abs().log10().floor() as i32);
    tick((v * scale).round() / scale)
}

/// A signed number, e.g. "+0.850" or "−1.00".
pub fn signed(x: f64) -> String {
    format!("{}{}", if x >= 0.0 { "+" } else { "" }, num(x))
}

/// Human-readable metric name; unknown names are shown as they are.
pub fn metric_label(metric: &str) -> String {
    let known = match metric {
        "error_pct" => "Predictive error (%)",
        "error_rate" => "Predictive error rate",
        "error_count" => "Predictive errors (count)",
        "log_pred_sum" => "Predictive likelihood (sum of log p)",
        "log_pred_mean" => "Predictive likelihood (mean log p)",
        "log_pred_all_sum" => "Predictive likelihood over all classes (sum of log p, an empty class's mass kept)",
        "log_evidence" => "Log marginal likelihood",
        "mse" => "Test mean squared error",
        "time_train" => "Training time (s)",
        "n_train" => "Training points",
        "n_test" => "Test points",
        _ => "",
    };
    if !known.is_empty() {
        known.into()
    } else if let Some((base, rule)) =
        ["error_pct", "log_pred_mean", "log_pred_sum"].iter().find_map(|b| Some((*b, metric.strip_prefix(b)?.strip_prefix('_')?)))
    {
        // An alternative predictive rule of the same fit (`Prediction::alternatives`).
        format!("{}, {rule} rule", metric_label(base))
    } else if let Some(hp) = metric.strip_prefix("hp_") {
        format!("Hyper-parameter {hp}")
    } else {
        metric.into()
    }
}

/// Seconds as "850 ms", "12.3 s" or "1h 2m 3s".
pub fn duration(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "unknown".into();
    }
    if seconds < 1.0 {
        format!("{:.0} ms", seconds * 1e3)
    } else if seconds < 60.0 {
        format!("{seconds:.1} s")
    } else {
        humantime::format_duration(std::time::Duration::from_secs(seconds.round() as u64)).to_string()
    }
}

/// A grid setting `k=v,...` as (key, value) pairs.
pub fn parse_setting(setting: &str) -> Vec<(&str, &str)> {
    setting
        .split(',')
        .filter(|part| !part.trim().is_empty())
        .map(|part| match part.split_once('=') {
            Some((k, v)) => (k.trim(), v.trim()),
            None => (part.trim(), ""),
        })
        .collect()
}

/// The value of `key` in a setting.
pub fn setting_value<'s>(setting: &'s str, key: &str) -> Option<&'s str> {
    parse_setting(setting).into_iter().find(|(k, _)| *k == key).map(|(_, v)| v)
}

/// The setting without `key`, e.g. the rest of a grid point once one key is on the x axis.
pub fn setting_without(setting: &str, key: &str) -> String {
    parse_setting(setting).into_iter().filter(|(k, _)| *k != key).map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

fn value_cmp(a: &str, b: &str) -> Ordering {
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => x.total_cmp(&y),
        _ => a.cmp(b),
    }
}

/// Order grid settings by their values, numerically where they are numbers (so 2 < 10).
pub fn setting_cmp(a: &str, b: &str) -> Ordering {
    let (pa, pb) = (parse_setting(a), parse_setting(b));
    for ((ka, va), (kb, vb)) in pa.iter().zip(pb.iter()) {
        let o = ka.cmp(kb).then_with(|| value_cmp(va, vb));
        if o != Ordering::Equal {
            return o;
        }
    }
    pa.len().cmp(&pb.len())
}

/// Whether two settings name the same grid point ("x=1" and "x=1.0" do), whatever the key order.
pub fn settings_equal(a: &str, b: &str) -> bool {
    let mut pa = parse_setting(a);
    let mut pb = parse_setting(b);
    pa.sort();
    pb.sort();
    pa.len() == pb.len() && pa.iter().zip(pb.iter()).all(|((ka, va), (kb, vb))| ka == kb && value_cmp(va, vb) == Ordering::Equal)
}

/// Each method entry once per setting that `settings_of` gives it (told apart by
/// `settings_equal`), in setting order; an entry with none gets one column without a setting.
pub fn entry_columns<'m, 'a, I>(methods: &'m [String], settings_of: impl Fn(&'m String) -> I) -> Vec<(String, String)>
where
    I: Iterator<Item = &'a str>,
{
    let mut out = Vec::new();
    for method in methods {
        let mut settings: Vec<String> = Vec::new();
        for s in settings_of(method) {
            if !settings.iter().any(|known| settings_equal(known, s)) {
                settings.push(s.to_string());
            }
        }
        settings.sort_by(|a, b| setting_cmp(a, b));
        if settings.is_empty() {
            settings.push(String::new());
        }
        out.extend(settings.into_iter().map(|s| (method.clone(), s)));
    }
    out
}

/// Column / series label "method [setting]".
pub fn method_label(method: &str, setting: &str) -> String {
    if setting.is_empty() {
        method.into()
    } else {
        format!("{method} [{setting}]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_formatted_for_reading() {
        assert_eq!(sig3(0.0580429), "0.058");
        assert_eq!(sig3(148.413), "148");
        assert_eq!(sig3(-50.94018), "-50.9");
        assert_eq!(num(12.345), "12.35");
        assert_eq!(num(-1234.5), "−1234.50");
        assert_eq!(num(0.12345), "0.123");
        assert_eq!(num(0.012345), "0.0123");
        assert_eq!(num(0.00012345), "1.23e-4");
        assert_eq!(num(0.0), "0");
        assert_eq!(tick(0.30000000000000004), "0.3");
        assert_eq!(tick(100000.0), "1e5");
    }

    #[test]
    fn an_alternative_rules_metric_names_its_rule() {
        assert_eq!(metric_label("error_pct_monte_carlo"), "Predictive error (%), monte_carlo rule");
        assert_eq!(metric_label("log_pred_mean_taylor"), "Predictive likelihood (mean log p), taylor rule");
        assert_eq!(metric_label("log_pred_all_sum"), "Predictive likelihood over all classes (sum of log p, an empty class's mass kept)");
        assert_eq!(metric_label("error_pctx"), "error_pctx");
    }

    #[test]
    fn settings_compare_numerically() {
        assert!(setting_cmp("v=2", "v=10") == Ordering::Less);
        assert!(settings_equal("a=1,b=2", "b=2.0,a=1"));
        assert!(!settings_equal("a=1", "a=1,b=2"));
        assert_eq!(setting_value("a=1,kernel.variance=3", "kernel.variance"), Some("3"));
        assert_eq!(setting_without("a=1,b=2", "a"), "b=2");
    }
}
