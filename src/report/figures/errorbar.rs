//! Errorbar figures: mean ± standard error (or a 95% interval) of a metric per dataset or grid value, one series per method (and metric).
use super::super::format::{setting_value, setting_without};
use super::*;
use crate::spec::Interval;

type XValues = Vec<(f64, Vec<f64>)>;

struct Series {
    label: String,
    colour: RGBColor,
    shape: usize,
    /// (x, aggregate over splits), x in data units.
    points: Vec<(f64, Aggregate)>,
}

/// Half-width of an error bar: the standard error, or the 95% Student-t interval of the mean.
pub(super) fn half_width(a: &Aggregate, interval: Interval) -> f64 {
    match interval {
        Interval::Se => a.se,
        Interval::Ci95 if a.n < 2 => f64::NAN,
        Interval::Ci95 => {
            let t = statrs::distribution::StudentsT::new(0.0, 1.0, (a.n - 1) as f64).map(|d| {
                use statrs::distribution::ContinuousCDF;
                d.inverse_cdf(0.975)
            });
            t.map_or(f64::NAN, |t| t * a.se)
        }
    }
}

pub(super) fn errorbar(spec: &FigureSpec, input: &ReportInput, notes: &mut Vec<String>) -> Result<Plot, String> {
    let metrics: Vec<&str> = match spec.metric.as_deref() {
        Some(m) => vec![m],
        None => spec.metrics.iter().map(String::as_str).collect(),
    };
    if metrics.is_empty() {
        return Ok(Plot::NoData("the figure names no metric".into()));
    }
    let several = metrics.len() > 1;
    let sel = Selection::new(spec, input);
    let x_key = spec.x.as_deref().unwrap_or("dataset");
    let categorical = x_key == "dataset";
    let log_x = spec.log_x && !categorical;

    // ((series label, method, metric index), [(x, values over splits)])
    let mut raw: Vec<((String, String, usize), XValues)> = Vec::new();
    let (mut no_key, mut non_positive) = (0, 0);
    for (mi, cell) in metrics.iter().enumerate().flat_map(|(mi, _)| sel.ok().map(move |c| (mi, c))) {
        let metric = metrics[mi];
        let Some(v) = cell_value(cell, metric) else { continue };
        let (x, suffix) = if categorical {
            let Some(d) = sel.datasets.iter().position(|d| *d == cell.dataset) else {
                continue;
            };
            (d as f64, cell.setting.clone())
        } else {
            let Some(x) = setting_value(&cell.setting, x_key).and_then(|s| s.parse::<f64>().ok()) else {
                no_key += 1;
                continue;
            };
            if log_x && x <= 0.0 {
                non_positive += 1;
                continue;
            }
            let rest = setting_without(&cell.setting, x_key);
            let suffix = match (sel.datasets.len() > 1, rest.is_empty()) {
                (true, true) => cell.dataset.clone(),
                (true, false) => format!("{}, {rest}", cell.dataset),
                (false, _) => rest,
            };
            (x, suffix)
        };
        let label = method_label(&cell.method, &suffix);
        let label = if several { format!("{}: {label}", metric_label(metric)) } else { label };
        let key = (label, cell.method.clone(), mi);
        let series = match raw.iter().position(|(k, _)| *k == key) {
            Some(i) => &mut raw[i].1,
            None => {
                raw.push((key, Vec::new()));
                let last = raw.len() - 1;
                &mut raw[last].1
            }
        };
        match series.iter().position(|(sx, _)| *sx == x) {
            Some(i) => series[i].1.push(v),
            None => series.push((x, vec![v])),
        }
    }
    if no_key > 0 {
        notes.push(format!("{no_key} cells have no numeric `{x_key}` in their setting and are left out."));
    }
    if non_positive > 0 {
        notes.push(format!("{non_positive} cells with {x_key} ≤ 0 cannot be shown on the log axis."));
    }
    raw.sort_by(|a, b| {
        a.0 .2.cmp(&b.0 .2).then(sel.method_index(&a.0 .1).cmp(&sel.method_index(&b.0 .1))).then_with(|| a.0 .0.cmp(&b.0 .0))
    });

    let mut series: Vec<Series> = Vec::new();
    for ((label, method, mi), xs) in raw {
        // With several metrics the colour tells the metric apart, the marker shape the method.
        let colour = if several { PALETTE[mi % PALETTE.len()] } else { method_colour(input, &sel, &method) };
        let shape = series.iter().filter(|s| s.colour == colour).count();
        let mut points: Vec<(f64, Aggregate)> = xs.iter().filter_map(|(x, vs)| Aggregate::of(vs).map(|a| (*x, a))).collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        if !points.is_empty() {
            series.push(Series { label, colour, shape, points });
        }
    }
    let metric = metrics.join(", ");
    let metric = metric.as_str();
    if series.is_empty() {
        return Ok(Plot::NoData(format!("no finished cell has `{metric}`")));
    }

    // Categorical x: series side by side around each dataset so their bars do not overlap.
    let n = series.len() as f64;
    let dodge = (0.7 / n).min(0.15);
    let px = |si: usize, x: f64| {
        if categorical {
            x + (si as f64 - (n - 1.0) / 2.0) * dodge
        } else if log_x {
            x.log10()
        } else {
            x
        }
    };
    let x_axis = if categorical {
        let names = sel.datasets.iter().enumerate().map(|(i, d)| (i as f64, d.to_string())).collect();
        Axis::categorical(names, (-0.5, sel.datasets.len() as f64 - 0.5), "dataset")
    } else {
        let range = padded(series.iter().enumerate().flat_map(|(si, s)| s.points.iter().map(move |p| (si, p.0))).map(|(si, x)| px(si, x)))
            .ok_or("no finite x")?;
        if log_x {
            Axis::log10(range, format!("{x_key} (log scale)"))
        } else {
            Axis::linear(range, x_key)
        }
    };
    let hw = |a: &Aggregate| {
        let h = half_width(a, spec.interval);
        if h.is_finite() {
            h
        } else {
            0.0
        }
    };
    let (bar_name, bar_note) = match spec.interval {
        Interval::Se => ("mean ± SE", "Mean ± standard error over splits"),
        Interval::Ci95 => ("mean, 95% CI", "Mean over splits with the 95% confidence interval of the mean (Student t, n − 1 d.o.f.)"),
    };
    let y_name = if several { "value".to_string() } else { metric_label(metric) };
    let y_range = padded(series.iter().flat_map(|s| s.points.iter().flat_map(|(_, a)| [a.mean - hw(a), a.mean + hw(a)])))
        .ok_or("no finite values")?;
    let y_axis = Axis::linear(legend_room(y_range, series.len()), format!("{y_name} ({bar_name})"));
    let cap = 0.01 * (x_axis.hi - x_axis.lo);

    let svg = render(SIZE, |root| {
        let mut chart = chart(root, &spec.title, &x_axis, &y_axis, false)?;
        for (si, s) in series.iter().enumerate() {
            if !categorical && s.points.len() > 1 {
                let line = s.points.iter().map(|(x, a)| (px(si, *x), a.mean));
                chart.draw_series(LineSeries::new(line, s.colour.stroke_width(2))).map_err(err)?;
            }
            for (x, a) in &s.points {
                let x = px(si, *x);
                let (lo, hi) = (a.mean - hw(a), a.mean + hw(a));
                let bars = [vec![(x, lo), (x, hi)], vec![(x - cap, lo), (x + cap, lo)], vec![(x - cap, hi), (x + cap, hi)]];
                chart.draw_series(bars.into_iter().map(|b| PathElement::new(b, s.colour.stroke_width(2)))).map_err(err)?;
                let mark = EmptyElement::at((x, a.mean)) + Polygon::new(marker_points(s.shape, 4), s.colour.filled());
                chart.draw_series(std::iter::once(mark)).map_err(err)?;
            }
            legend_entry(&mut chart, &s.label, s.colour, Some(s.shape), !categorical)?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)
    })?;
    let names: Vec<String> = metrics.iter().map(|m| metric_label(m)).collect();
    notes.insert(0, format!("{bar_note} of {}.", names.join(", ")));
    Ok(Plot::Svg(svg))
}

// ---------------------------------------------------------------------------------------
// Violins: distribution over splits per (dataset, method)
