//! Learning curves: a traced quantity against training time on a log axis, the mean ± 1 sd
//! over splits of each method and grid setting at the iterations every split reached, one
//! panel per dataset, beside reference curves the spec gives.
use super::*;
use std::collections::BTreeMap;

/// One method at one grid setting: (log10 mean training seconds, mean, sd) per common
/// iteration, over the splits of `cells`.
struct Curve<'i> {
    method: &'i str,
    /// The legend's and the notes' name: the method, with its setting where it has one.
    label: String,
    /// The marker of the setting among the method's settings (none for a method with one).
    shape: Option<usize>,
    points: Vec<(f64, f64, f64)>,
    splits: usize,
    cells: Vec<&'i CellRecord>,
}

fn method_curve<'i>(cells: Vec<&'i CellRecord>, name: &str, shape: Option<usize>) -> Option<Curve<'i>> {
    let per_cell: Vec<BTreeMap<usize, (f64, f64)>> = cells
        .iter()
        .map(|c| {
            c.trace.iter().filter(|p| p.name == name && p.value.is_finite() && p.time > 0.0).map(|p| (p.iter, (p.time, p.value))).collect()
        })
        .filter(|m: &BTreeMap<usize, (f64, f64)>| !m.is_empty())
        .collect();
    let first = per_cell.first()?;
    let points: Vec<(f64, f64, f64)> = first
        .keys()
        .filter(|it| per_cell.iter().all(|m| m.contains_key(it)))
        .map(|it| {
            let n = per_cell.len() as f64;
            let t = per_cell.iter().map(|m| m[it].0).sum::<f64>() / n;
            let mean = per_cell.iter().map(|m| m[it].1).sum::<f64>() / n;
            let var = if per_cell.len() > 1 { per_cell.iter().map(|m| (m[it].1 - mean).powi(2)).sum::<f64>() / (n - 1.0) } else { 0.0 };
            (t.log10(), mean, var.sqrt())
        })
        .collect();
    let (method, setting) = (cells[0].method.as_str(), cells[0].setting.as_str());
    (!points.is_empty()).then(|| Curve { method, label: method_label(method, setting), shape, points, splits: per_cell.len(), cells })
}

/// Every (method, setting) curve of `dataset`: methods in the figure's order, each method's
/// settings in grid order (a grid's settings are separate runs, never pooled).
fn dataset_curves<'i>(sel: &Selection<'i>, dataset: &str, name: &str) -> Vec<Curve<'i>> {
    let mut curves = Vec::new();
    for &m in &sel.methods {
        let cells: Vec<&CellRecord> = sel.ok().filter(|c| c.dataset == dataset && c.method == m).collect();
        let mut settings: Vec<&str> = cells.iter().map(|c| c.setting.as_str()).collect();
        settings.sort_by(|a, b| setting_cmp(a, b));
        settings.dedup();
        let several = settings.len() > 1;
        for (k, setting) in settings.iter().enumerate() {
            let at: Vec<&CellRecord> = cells.iter().copied().filter(|c| c.setting == *setting).collect();
            curves.extend(method_curve(at, name, several.then_some(k)));
        }
    }
    curves
}

pub(super) fn curve(spec: &FigureSpec, input: &ReportInput, notes: &mut Vec<String>) -> Result<Plot, String> {
    let sel = Selection::new(spec, input);
    let name = spec.trace.as_deref().ok_or("a curve figure names its `trace`")?;
    let mut panels: Vec<(&str, Vec<Curve>, Vec<&crate::spec::ReferenceCurve>)> = Vec::new();
    for &dataset in &sel.datasets {
        let curves = dataset_curves(&sel, dataset, name);
        let refs: Vec<_> = spec.reference.iter().filter(|r| r.dataset.as_deref().is_none_or(|d| d == dataset)).collect();
        if !curves.is_empty() {
            panels.push((dataset, curves, refs));
        }
    }
    if panels.is_empty() {
        return Ok(Plot::NoData(format!("no finished cell has trace points named `{name}`")));
    }
    // On a log y axis every value is plotted as its log10; a band's lower edge stays above a
    // tenth of its mean.
    let log_y = spec.log_y;
    let ty = |v: f64| if log_y { v.log10() } else { v };
    let low = |m: f64, s: f64| if log_y { ty((m - s).max(0.1 * m)) } else { m - s };
    if log_y {
        for (_, curves, _) in panels.iter_mut() {
            curves.iter_mut().for_each(|c| c.points.retain(|p| p.1 > 0.0));
            curves.retain(|c| !c.points.is_empty());
        }
    }
    let xs = panels.iter().flat_map(|p| {
        p.1.iter().flat_map(|c| c.points.iter().map(|q| q.0)).chain(p.2.iter().flat_map(|r| r.points.iter().map(|q| q[0].log10())))
    });
    let x_range = padded(xs).ok_or("no finite times")?;
    let ys = panels.iter().flat_map(|p| {
        p.1.iter()
            .flat_map(|c| c.points.iter().flat_map(|q| [low(q.1, q.2), ty(q.1 + q.2)]))
            .chain(p.2.iter().flat_map(|r| r.points.iter().filter(|q| !log_y || q[1] > 0.0).map(|q| ty(q[1]))))
    });
    let y_range = padded(ys).ok_or("no finite values")?;
    let entries = panels.iter().map(|p| p.1.len() + p.2.len()).max().unwrap_or(1);
    let x_axis = Axis::log10(x_range, "training time (s, log scale)");
    let y_axis = if log_y {
        Axis::log10(legend_room(y_range, entries), format!("{} (log scale)", metric_label(name)))
    } else {
        Axis::linear(legend_room(y_range, entries), metric_label(name))
    };
    let size = (SIZE.0.max(480 * panels.len() as u32), SIZE.1);
    let svg = render(size, |root| {
        let (top, body) = root.split_vertically(34);
        top.draw(&Text::new(spec.title.clone(), (size.0 as i32 / 2, 17), centred(21))).map_err(err)?;
        let areas = body.split_evenly((1, panels.len()));
        for (area, (dataset, curves, refs)) in areas.iter().zip(&panels) {
            let mut chart = chart(area, dataset, &x_axis, &y_axis, panels.len() > 1)?;
            for c in curves {
                let colour = method_colour(input, &sel, c.method);
                if c.splits > 1 {
                    let band: Vec<(f64, f64)> =
                        c.points.iter().map(|p| (p.0, ty(p.1 + p.2))).chain(c.points.iter().rev().map(|p| (p.0, low(p.1, p.2)))).collect();
                    chart.draw_series(std::iter::once(Polygon::new(band, colour.mix(0.18).filled()))).map_err(err)?;
                }
                chart.draw_series(LineSeries::new(c.points.iter().map(|p| (p.0, ty(p.1))), colour.stroke_width(2))).map_err(err)?;
                if let Some(shape) = c.shape {
                    // A method's settings share its colour; markers (about a dozen a curve)
                    // tell them apart.
                    let every = c.points.len().div_ceil(12).max(1);
                    chart
                        .draw_series(
                            c.points
                                .iter()
                                .step_by(every)
                                .map(|p| EmptyElement::at((p.0, ty(p.1))) + Polygon::new(marker_points(shape, 4), colour.filled())),
                        )
                        .map_err(err)?;
                }
                legend_entry(&mut chart, &c.label, colour, c.shape, true)?;
            }
            for (k, r) in refs.iter().enumerate() {
                let colour = RGBColor(60, 60, 60);
                let pts: Vec<(f64, f64)> = r.points.iter().filter(|p| !log_y || p[1] > 0.0).map(|p| (p[0].log10(), ty(p[1]))).collect();
                chart.draw_series(LineSeries::new(pts.iter().copied(), colour.mix(0.5).stroke_width(1))).map_err(err)?;
                chart
                    .draw_series(pts.iter().map(|p| EmptyElement::at(*p) + Polygon::new(marker_points(k + 1, 4), colour.filled())))
                    .map_err(err)?;
                legend_entry(&mut chart, &r.label, colour, Some(k + 1), true)?;
            }
            legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        }
        Ok(())
    })?;
    let splits: Vec<usize> = panels.iter().flat_map(|p| p.1.iter().map(|c| c.splits)).collect();
    let (lo, hi) = (splits.iter().min().copied().unwrap_or(0), splits.iter().max().copied().unwrap_or(0));
    let over = if lo == hi { format!("{lo}") } else { format!("{lo} to {hi}") };
    notes.push(format!(
        "`{name}` against training time (checkpoint scoring excluded): mean over {over} split{} at the iterations every split reached{}; grey markers: reference curves from the spec.",
        if hi == 1 { "" } else { "s" },
        if hi > 1 { ", band ± 1 sd" } else { "" }
    ));
    for (dataset, curves, refs) in &panels {
        if let Some(note) = at_reference_times(name, dataset, curves, refs) {
            notes.push(note);
        }
        if let Some(target) = spec.target {
            notes.push(time_to_target(name, dataset, target, curves));
        }
        if let Some(within) = spec.settle_within {
            notes.push(time_to_settle(name, dataset, within, curves));
        }
    }
    if sel.ok().any(|c| c.metrics.contains_key("budget_seconds")) {
        notes.push("The runs stop at a time budget (wall clock or process CPU, as the spec says): the iterations they reach depend on the machine (see diag_iterations).".into());
    }
    Ok(Plot::Svg(svg))
}

/// A cell's trace of `name` as (training seconds, iteration, value), in time order.
fn timed(cell: &CellRecord, name: &str) -> Vec<(f64, usize, f64)> {
    let mut points: Vec<(f64, usize, f64)> =
        cell.trace.iter().filter(|p| p.name == name && p.value.is_finite() && p.time > 0.0).map(|p| (p.time, p.iter, p.value)).collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points
}

/// The runs beside each reference at the reference's own times: per split, the value of the
/// last checkpoint scored at or before that training time (the model a user stopping there
/// would have), averaged over the splits that had one.
fn at_reference_times(name: &str, dataset: &str, curves: &[Curve], refs: &[&crate::spec::ReferenceCurve]) -> Option<String> {
    let mut times: Vec<f64> = refs.iter().flat_map(|r| r.points.iter().map(|p| p[0])).collect();
    times.sort_by(f64::total_cmp);
    times.dedup();
    if times.is_empty() {
        return None;
    }
    let rows: Vec<String> = times
        .iter()
        .map(|&t| {
            let mut parts: Vec<String> = curves
                .iter()
                .map(|c| {
                    let values: Vec<f64> =
                        c.cells.iter().filter_map(|cell| timed(cell, name).iter().rev().find(|p| p.0 <= t).map(|p| p.2)).collect();
                    if values.is_empty() {
                        format!("{} not yet scored", c.label)
                    } else {
                        format!("{} {}", c.label, sig3(values.iter().sum::<f64>() / values.len() as f64))
                    }
                })
                .collect();
            parts.extend(refs.iter().filter_map(|r| r.points.iter().find(|p| p[0] == t).map(|p| format!("{} {}", r.label, sig3(p[1])))));
            format!("{} s: {}", sig3(t), parts.join(", "))
        })
        .collect();
    Some(format!(
        "{dataset}, `{name}` at the reference times (each split's last checkpoint at or before that training time): {}.",
        rows.join("; ")
    ))
}

/// When each method's trace first reached `target`, coming from the side it started on (down
/// for an error, up for a bound): per split, the training time and iteration of the first
/// checkpoint at or past it.
fn time_to_target(name: &str, dataset: &str, target: f64, curves: &[Curve]) -> String {
    let parts: Vec<String> = curves
        .iter()
        .map(|c| {
            let cells = &c.cells;
            let hits: Vec<(f64, usize)> = cells
                .iter()
                .filter_map(|cell| {
                    let points = timed(cell, name);
                    let falling = points.first()?.2 > target;
                    points.iter().find(|p| if falling { p.2 <= target } else { p.2 >= target }).map(|p| (p.0, p.1))
                })
                .collect();
            match hits.as_slice() {
                [] => format!("{} not reached", c.label),
                [(t, it)] if cells.len() == 1 => format!("{} at {} s (iteration {it})", c.label, sig3(*t)),
                _ => {
                    let lo = hits.iter().map(|h| h.0).fold(f64::INFINITY, f64::min);
                    let hi = hits.iter().map(|h| h.0).fold(0.0, f64::max);
                    format!("{} on {} of {} splits, at {}-{} s", c.label, hits.len(), cells.len(), sig3(lo), sig3(hi))
                }
            }
        })
        .collect();
    format!("{dataset}, `{name}` first at {} (training time of the first checkpoint there): {}.", sig3(target), parts.join(", "))
}

/// The training time from which a trace (time order) stays within `within` of its last value:
/// the time of the checkpoint after the last one outside that band (the first one when none
/// is outside).
fn settle_time(points: &[(f64, usize, f64)], within: f64) -> Option<f64> {
    let last = points.last()?.2;
    let outside = points.iter().rposition(|p| (p.2 - last).abs() > within);
    Some(points[outside.map_or(0, |k| k + 1)].0)
}

/// Per method: when each split's trace settled within `within` of its own final value
/// (`settle_time`), the median and range over the splits.
fn time_to_settle(name: &str, dataset: &str, within: f64, curves: &[Curve]) -> String {
    let parts: Vec<String> = curves
        .iter()
        .map(|c| {
            let mut times: Vec<f64> = c.cells.iter().filter_map(|cell| settle_time(&timed(cell, name), within)).collect();
            times.sort_by(f64::total_cmp);
            match times.as_slice() {
                [] => format!("{} no trace", c.label),
                [t] => format!("{} at {} s", c.label, sig3(*t)),
                _ => {
                    let k = times.len();
                    let median = if k % 2 == 1 { times[k / 2] } else { 0.5 * (times[k / 2 - 1] + times[k / 2]) };
                    format!("{} median {} s ({}-{} s, {k} splits)", c.label, sig3(median), sig3(times[0]), sig3(times[k - 1]))
                }
            }
        })
        .collect();
    format!("{dataset}, `{name}` settled within {} of each split's final value from: {}.", sig3(within), parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::settle_time;

    #[test]
    fn a_trace_settles_after_its_last_checkpoint_outside_the_band() {
        // Final value 3.0; band 0.5: 4.0 at t = 4 is the last point outside, so t = 8.
        let trace = [(1.0, 1, 10.0), (2.0, 2, 3.2), (4.0, 4, 4.0), (8.0, 8, 3.4), (16.0, 16, 3.0)];
        assert_eq!(settle_time(&trace, 0.5), Some(8.0));
        // Everything within the band: the first checkpoint.
        assert_eq!(settle_time(&trace[3..], 0.5), Some(8.0));
        assert_eq!(settle_time(&trace, 100.0), Some(1.0));
        // A zero band: only the final checkpoint and equal values before it.
        assert_eq!(settle_time(&trace, 0.0), Some(16.0));
        assert_eq!(settle_time(&[], 1.0), None);
    }
}
