//! Distributions over splits: violins (kernel density estimates) and histograms.
use super::*;

/// Linear-interpolated quantile of sorted values.
pub(super) fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (i, frac) = (pos.floor() as usize, pos.fract());
    let next = sorted.get(i + 1).copied().unwrap_or(sorted[i]);
    sorted[i] + frac * (next - sorted[i])
}

/// Gaussian kernel density with Silverman's bandwidth 0.9·min(sd, IQR/1.34)·n^(−1/5),
/// evaluated from 2 bandwidths below the smallest value to 2 above the largest.
/// `None` for fewer than 3 values or no spread.
pub(super) fn kde(values: &[f64]) -> Option<Vec<(f64, f64)>> {
    if values.len() < 3 {
        return None;
    }
    let sd = Aggregate::of(values)?.sd;
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let iqr = quantile(&sorted, 0.75) - quantile(&sorted, 0.25);
    let spread = if iqr > 0.0 { sd.min(iqr / 1.34) } else { sd };
    if spread.is_nan() || spread <= 0.0 {
        return None;
    }
    let n = values.len() as f64;
    let h = 0.9 * spread * n.powf(-0.2);
    let (lo, hi) = (sorted[0] - 2.0 * h, sorted[sorted.len() - 1] + 2.0 * h);
    let norm = 1.0 / (n * h * (2.0 * std::f64::consts::PI).sqrt());
    let steps = 80;
    Some(
        (0..=steps)
            .map(|i| {
                let y = lo + (hi - lo) * i as f64 / steps as f64;
                let d: f64 = values.iter().map(|v| (-0.5 * ((y - v) / h).powi(2)).exp()).sum();
                (y, d * norm)
            })
            .collect(),
    )
}

pub(super) fn violin(spec: &FigureSpec, input: &ReportInput, notes: &mut Vec<String>) -> Result<Plot, String> {
    let Some(metric) = spec.metric.as_deref() else {
        return Ok(Plot::NoData("the figure names no metric".into()));
    };
    let sel = Selection::new(spec, input);
    let variants = sel.variants(metric);
    let k = variants.len();
    // Slot of (dataset d, variant v): k slots per dataset and one empty slot between datasets.
    let mut groups = Vec::new();
    for (d, dataset) in sel.datasets.iter().enumerate() {
        for (v, (method, setting)) in variants.iter().enumerate() {
            let values: Vec<f64> = sel
                .ok()
                .filter(|c| c.dataset == *dataset && c.method == *method && c.setting == *setting)
                .filter_map(|c| cell_value(c, metric))
                .collect();
            if !values.is_empty() {
                let density = kde(&values);
                groups.push(((d * (k + 1) + v) as f64, v, values, density));
            }
        }
    }
    if groups.is_empty() {
        return Ok(Plot::NoData(format!("no finished cell has `{metric}`")));
    }
    let names =
        sel.datasets.iter().enumerate().map(|(d, name)| ((d * (k + 1)) as f64 + (k as f64 - 1.0) / 2.0, name.to_string())).collect();
    let last = ((sel.datasets.len() - 1) * (k + 1) + k - 1) as f64;
    let x_axis = Axis::categorical(names, (-0.6, last + 0.6), "dataset");
    let all_y = groups
        .iter()
        .flat_map(|(_, _, values, density)| values.iter().copied().chain(density.iter().flat_map(|d| [d[0].0, d[d.len() - 1].0])));
    let y_range = padded(all_y).ok_or("no finite values")?;
    let y_axis = Axis::linear(legend_room(y_range, variants.len()), metric_label(metric));
    let colours: Vec<RGBColor> = variants.iter().map(|(m, _)| method_colour(input, &sel, m)).collect();
    // A method's grid settings share its colour: the dots' marker tells them apart (the
    // first setting keeps the round dot).
    let shapes: Vec<usize> = variants.iter().enumerate().map(|(v, (m, _))| variants[..v].iter().filter(|(o, _)| o == m).count()).collect();

    let svg = render(SIZE, |root| {
        let mut chart = chart(root, &spec.title, &x_axis, &y_axis, false)?;
        for (x, v, values, density) in &groups {
            let colour = colours[*v];
            if let Some(density) = density {
                let peak = density.iter().map(|p| p.1).fold(0.0, f64::max);
                let half = |d: f64| 0.42 * d / peak;
                let mut outline: Vec<(f64, f64)> = density.iter().map(|(y, d)| (x - half(*d), *y)).collect();
                outline.extend(density.iter().rev().map(|(y, d)| (x + half(*d), *y)));
                chart.draw_series(std::iter::once(Polygon::new(outline.clone(), colour.mix(0.3).filled()))).map_err(err)?;
                outline.push(outline[0]);
                chart.draw_series(std::iter::once(PathElement::new(outline, colour.stroke_width(1)))).map_err(err)?;
            }
            match shapes[*v] {
                0 => chart.draw_series(values.iter().map(|y| Circle::new((*x, *y), 2.5, colour.mix(0.8).filled()))).map_err(err)?,
                shape => chart
                    .draw_series(
                        values.iter().map(|y| EmptyElement::at((*x, *y)) + Polygon::new(marker_points(shape, 3), colour.mix(0.8).filled())),
                    )
                    .map_err(err)?,
            };
            if let Some(a) = Aggregate::of(values) {
                let bar = vec![(x - 0.22, a.mean), (x + 0.22, a.mean)];
                chart.draw_series(std::iter::once(PathElement::new(bar, BLACK.stroke_width(2)))).map_err(err)?;
            }
        }
        for (v, (method, setting)) in variants.iter().enumerate() {
            legend_entry(&mut chart, &method_label(method, setting), colours[v], Some(shapes[v]), false)?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)
    })?;
    notes.insert(
        0,
        "Gaussian kernel density (Silverman bandwidth) of the splits' values; dots are splits, the black bar the mean; \
         groups with fewer than 3 values (or no spread) show the dots only."
            .into(),
    );
    Ok(Plot::Svg(svg))
}

// ---------------------------------------------------------------------------------------
// Histograms: one panel per (method, dataset)

pub(super) fn histogram(spec: &FigureSpec, input: &ReportInput, notes: &mut Vec<String>) -> Result<Plot, String> {
    let Some(metric) = spec.metric.as_deref() else {
        return Ok(Plot::NoData("the figure names no metric".into()));
    };
    let sel = Selection::new(spec, input);
    let variants = sel.variants(metric);
    let values = |dataset: &str, (method, setting): (&str, &str)| -> Vec<f64> {
        sel.ok()
            .filter(|c| c.dataset == dataset && c.method == method && c.setting == setting)
            .filter_map(|c| cell_value(c, metric))
            .collect()
    };
    // Columns: datasets with data; each column shares its bins so the methods compare directly.
    let mut columns = Vec::new();
    for dataset in &sel.datasets {
        let per_variant: Vec<Vec<f64>> = variants.iter().map(|v| values(dataset, *v)).collect();
        let n_max = per_variant.iter().map(Vec::len).max().unwrap_or(0);
        if n_max == 0 {
            continue;
        }
        // Bins span the data; the axis adds a margin so the outer bars do not touch it.
        let all = per_variant.iter().flatten().copied();
        let (min, max) = all.clone().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
        let (lo, hi) = if max > min { (min, max) } else { padded([min]).ok_or("no finite values")? };
        let axis = padded([lo, hi]).ok_or("no finite values")?;
        // Sturges' rule on the largest panel.
        let bins = ((n_max as f64).log2().ceil() as usize + 1).clamp(3, 30);
        let width = (hi - lo) / bins as f64;
        let counts: Vec<Vec<usize>> = per_variant
            .iter()
            .map(|vs| {
                let mut c = vec![0; bins];
                for v in vs {
                    c[(((v - lo) / width).floor() as usize).min(bins - 1)] += 1;
                }
                c
            })
            .collect();
        columns.push((dataset.to_string(), axis, lo, width, counts));
    }
    if columns.is_empty() {
        return Ok(Plot::NoData(format!("no finished cell has `{metric}`")));
    }
    let max_count = columns.iter().flat_map(|c| c.4.iter().flatten()).copied().max().unwrap_or(1).max(1);
    let (rows, cols) = (variants.len(), columns.len());
    let size = ((300 * cols as u32).max(SIZE.0), 50 + 210 * rows as u32);
    let y_ticks: Vec<f64> = nice_ticks(0.0, max_count as f64, 4).into_iter().filter(|t| t.fract() == 0.0).collect();

    let svg = render(size, |root| {
        let body = root.titled(&spec.title, (FONT, 21)).map_err(err)?;
        let panels = body.split_evenly((rows, cols));
        for (r, variant) in variants.iter().enumerate() {
            let colour = method_colour(input, &sel, variant.0);
            for (c, (dataset, axis, lo, width, counts)) in columns.iter().enumerate() {
                let Some(panel) = panels.get(r * cols + c) else {
                    continue;
                };
                let x_axis = Axis::linear(*axis, metric_label(metric));
                let y_axis =
                    Axis { lo: 0.0, hi: max_count as f64 * 1.1, ticks: y_ticks.clone(), labels: Box::new(tick), desc: "splits".into() };
                let caption = format!("{dataset} · {}", method_label(variant.0, variant.1));
                let mut chart = chart(panel, &caption, &x_axis, &y_axis, true)?;
                let bars = counts[r].iter().enumerate().filter(|(_, n)| **n > 0).map(|(i, n)| {
                    let x0 = lo + width * i as f64;
                    [(x0, 0.0), (x0 + width, *n as f64)]
                });
                chart.draw_series(bars.clone().map(|b| Rectangle::new(b, colour.mix(0.55).filled()))).map_err(err)?;
                chart.draw_series(bars.map(|b| Rectangle::new(b, colour.stroke_width(1)))).map_err(err)?;
                if counts[r].iter().all(|n| *n == 0) {
                    let mid = ((axis.0 + axis.1) / 2.0, max_count as f64 * 0.55);
                    chart.draw_series(std::iter::once(Text::new("no data", mid, centred(13).color(&BLACK.mix(0.5))))).map_err(err)?;
                }
            }
        }
        Ok(())
    })?;
    notes.insert(0, "Counts of splits; the panels of a dataset share their bins (Sturges' rule).".into());
    Ok(Plot::Svg(svg))
}

// ---------------------------------------------------------------------------------------
// Paired scatter: methods[0] against methods[1] per (dataset, split)
