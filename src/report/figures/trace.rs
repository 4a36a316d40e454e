//! Per-iteration traces against iteration or wall time, one line per cell.
use super::*;

pub(super) fn trace(spec: &FigureSpec, input: &ReportInput, notes: &mut Vec<String>) -> Result<Plot, String> {
    let sel = Selection::new(spec, input);
    let name = match spec.trace.as_deref() {
        Some(name) => name.to_string(),
        None => match sel.all.iter().flat_map(|c| c.trace.iter()).next() {
            Some(p) => {
                notes.push(format!("The figure names no trace; showing `{}`.", p.name));
                p.name.clone()
            }
            None => return Ok(Plot::NoData("no cell has trace points".into())),
        },
    };
    let by_time = spec.trace_x.as_deref() == Some("time");
    let mut dropped = 0;
    let mut lines: Vec<(&str, Vec<(f64, f64)>)> = Vec::new();
    let mut failed = 0;
    for cell in &sel.all {
        let mut pts: Vec<(f64, f64)> = cell
            .trace
            .iter()
            .filter(|p| p.name == name)
            .map(|p| (if by_time { p.time } else { p.iter as f64 }, p.value))
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        if spec.log_x {
            let before = pts.len();
            pts.retain(|(x, _)| *x > 0.0);
            dropped += before - pts.len();
            pts.iter_mut().for_each(|p| p.0 = p.0.log10());
        }
        if pts.is_empty() {
            continue;
        }
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        failed += usize::from(cell.status == Status::Failed);
        lines.push((cell.method.as_str(), pts));
    }
    if lines.is_empty() {
        return Ok(Plot::NoData(format!("no cell has trace points named `{name}`")));
    }
    if dropped > 0 {
        notes.push(format!("{dropped} trace points at x ≤ 0 cannot be shown on the log axis."));
    }
    if failed > 0 {
        notes.push(format!("Includes the traces of {failed} failed cell{}.", if failed == 1 { "" } else { "s" }));
    }
    let x_range = padded(lines.iter().flat_map(|l| l.1.iter().map(|p| p.0))).ok_or("no finite x")?;
    let y_range = padded(lines.iter().flat_map(|l| l.1.iter().map(|p| p.1))).ok_or("no finite values")?;
    let x_desc = if by_time { "time (s)" } else { "iteration" };
    let x_axis = if spec.log_x { Axis::log10(x_range, format!("{x_desc} (log scale)")) } else { Axis::linear(x_range, x_desc) };
    let n_methods = sel.methods.iter().filter(|m| lines.iter().any(|l| l.0 == **m)).count();
    let y_axis = Axis::linear(legend_room(y_range, n_methods), metric_label(&name));

    let svg = render(SIZE, |root| {
        let mut chart = chart(root, &spec.title, &x_axis, &y_axis, false)?;
        for (method, pts) in &lines {
            let colour = method_colour(input, &sel, method);
            if pts.len() == 1 {
                chart.draw_series(pts.iter().map(|p| Circle::new(*p, 3, colour.filled()))).map_err(err)?;
            } else {
                chart.draw_series(LineSeries::new(pts.iter().copied(), colour.mix(0.7).stroke_width(1))).map_err(err)?;
            }
        }
        let mut shown: Vec<&str> = Vec::new();
        for (method, _) in &lines {
            if !shown.contains(method) {
                shown.push(method);
            }
        }
        shown.sort_by_key(|m| sel.method_index(m));
        for method in shown {
            legend_entry(&mut chart, method, method_colour(input, &sel, method), None, true)?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)
    })?;
    notes.insert(0, format!("`{name}` per cell (one line per dataset, split and setting), coloured by method."));
    Ok(Plot::Svg(svg))
}

// ---------------------------------------------------------------------------------------
// Heatmaps: mean over splits of a metric on a two-dimensional grid of settings
