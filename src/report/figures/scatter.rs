//! Paired scatter over splits: one method's metric against another's, y = x drawn.
use super::*;

pub(super) fn scatter(spec: &FigureSpec, input: &ReportInput, notes: &mut Vec<String>) -> Result<Plot, String> {
    let Some(metric) = spec.metric.as_deref() else {
        return Ok(Plot::NoData("the figure names no metric".into()));
    };
    let sel = Selection::new(spec, input);
    let (Some(mx), Some(my)) = (sel.methods.first().copied(), sel.methods.get(1).copied()) else {
        return Ok(Plot::NoData("a scatter figure needs two methods".into()));
    };
    // Pair cells of the same dataset and split; grid settings pair when equal or when one side
    // has none. Each grid setting is a series of its own (a marker shape per setting, a colour
    // per dataset), so that a split run at three settings is not read as three splits.
    let mut points: Vec<(usize, &str, f64, f64)> = Vec::new();
    for a in sel.ok().filter(|c| c.method == mx) {
        for b in sel.ok().filter(|c| c.method == my && c.dataset == a.dataset && c.split == a.split) {
            if !(a.setting == b.setting || a.setting.is_empty() || b.setting.is_empty()) {
                continue;
            }
            if let (Some(x), Some(y), Some(d)) =
                (cell_value(a, metric), cell_value(b, metric), sel.datasets.iter().position(|d| *d == a.dataset))
            {
                let setting = if a.setting.is_empty() { b.setting.as_str() } else { a.setting.as_str() };
                points.push((d, setting, x, y));
            }
        }
    }
    if points.is_empty() {
        return Ok(Plot::NoData(format!("no (dataset, split) where both {mx} and {my} have `{metric}`")));
    }
    // The settings in grid order.
    let mut settings: Vec<&str> = points.iter().map(|p| p.1).collect();
    settings.sort_by(|a, b| setting_cmp(a, b).then_with(|| a.cmp(b)));
    settings.dedup();
    let gridded = settings.iter().any(|s| !s.is_empty());
    let range = padded(points.iter().flat_map(|p| [p.2, p.3])).ok_or("no finite values")?;
    let label = metric_label(metric);
    let x_axis = Axis::linear(range, format!("{mx}: {label}"));
    let y_axis = Axis::linear(range, format!("{my}: {label}"));

    let svg = render((600, 540), |root| {
        let mut chart = chart(root, &spec.title, &x_axis, &y_axis, false)?;
        chart
            .draw_series(LineSeries::new([(range.0, range.0), (range.1, range.1)], BLACK.mix(0.45).stroke_width(1)))
            .map_err(err)?
            .label(legend_text("y = x"))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK.mix(0.45).stroke_width(1)));
        for (d, dataset) in sel.datasets.iter().enumerate() {
            let colour = PALETTE[d % PALETTE.len()];
            for (k, setting) in settings.iter().enumerate() {
                let mine: Vec<(f64, f64)> = points.iter().filter(|p| p.0 == d && p.1 == *setting).map(|p| (p.2, p.3)).collect();
                if mine.is_empty() {
                    continue;
                }
                // Without a grid the marker tells the datasets apart, as before; with one, the setting.
                let shape = if gridded { k } else { d };
                let marks = mine.iter().map(|p| EmptyElement::at(*p) + Polygon::new(marker_points(shape, 4), colour.filled()));
                chart.draw_series(marks).map_err(err)?;
                let label = if setting.is_empty() { dataset.to_string() } else { format!("{dataset} [{setting}]") };
                legend_entry(&mut chart, &label, colour, Some(shape), false)?;
            }
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)
    })?;
    let per = if gridded { "(dataset, split, grid setting): a marker shape per setting" } else { "(dataset, split)" };
    notes.insert(0, format!("One point per {per}; points above the line have higher {label} for {my}."));
    Ok(Plot::Svg(svg))
}

// ---------------------------------------------------------------------------------------
// Traces: one line per cell against iteration or time
