//! Heatmaps: the mean over splits of a metric at every point of a two-key grid.
use super::super::format::setting_value;
use super::*;

/// A sequential colour map (viridis, 5 anchors, linear in between) for t in [0, 1].
fn viridis(t: f64) -> RGBColor {
    const ANCHORS: [(f64, f64, f64); 5] =
        [(68.0, 1.0, 84.0), (59.0, 82.0, 139.0), (33.0, 145.0, 140.0), (94.0, 201.0, 98.0), (253.0, 231.0, 37.0)];
    let t = if t.is_finite() { t.clamp(0.0, 1.0) } else { 0.0 };
    let pos = t * (ANCHORS.len() - 1) as f64;
    let i = (pos.floor() as usize).min(ANCHORS.len() - 2);
    let f = pos - i as f64;
    let (a, b) = (ANCHORS[i], ANCHORS[i + 1]);
    let mix = |u: f64, v: f64| (u + f * (v - u)).round() as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// One heatmap panel: the distinct x and y grid values and the mean at each (x, y).
struct Panel {
    title: String,
    xs: Vec<f64>,
    ys: Vec<f64>,
    means: Vec<(usize, usize, f64)>,
}

pub(super) fn heatmap(spec: &FigureSpec, input: &ReportInput, notes: &mut Vec<String>) -> Result<Plot, String> {
    let (Some(metric), Some(xk), Some(yk)) = (spec.metric.as_deref(), spec.x.as_deref(), spec.y.as_deref()) else {
        return Ok(Plot::NoData("a heatmap needs `metric`, `x` and `y`".into()));
    };
    let sel = Selection::new(spec, input);
    let mut panels: Vec<Panel> = Vec::new();
    for dataset in &sel.datasets {
        for method in &sel.methods {
            let mut values: Vec<((f64, f64), Vec<f64>)> = Vec::new();
            for c in sel.ok().filter(|c| c.dataset == *dataset && c.method == *method) {
                let num = |k: &str| setting_value(&c.setting, k).and_then(|s| s.parse::<f64>().ok());
                let (Some(x), Some(y), Some(v)) = (num(xk), num(yk), cell_value(c, metric)) else { continue };
                match values.iter_mut().find(|(p, _)| *p == (x, y)) {
                    Some((_, vs)) => vs.push(v),
                    None => values.push(((x, y), vec![v])),
                }
            }
            if values.is_empty() {
                continue;
            }
            let mut xs: Vec<f64> = values.iter().map(|((x, _), _)| *x).collect();
            let mut ys: Vec<f64> = values.iter().map(|((_, y), _)| *y).collect();
            for v in [&mut xs, &mut ys] {
                v.sort_by(f64::total_cmp);
                v.dedup();
            }
            let means = values
                .iter()
                .filter_map(|((x, y), vs)| {
                    let a = Aggregate::of(vs)?;
                    Some((xs.iter().position(|v| v == x)?, ys.iter().position(|v| v == y)?, a.mean))
                })
                .collect();
            let title = if sel.datasets.len() > 1 { format!("{method} — {dataset}") } else { method.to_string() };
            panels.push(Panel { title, xs, ys, means });
        }
    }
    if panels.is_empty() {
        return Ok(Plot::NoData(format!("no finished cell has `{metric}` with numeric `{xk}` and `{yk}` settings")));
    }
    // One colour scale for every panel, so panels compare at a glance.
    let (lo, hi) =
        panels.iter().flat_map(|p| p.means.iter().map(|m| m.2)).fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
    let scale = |v: f64| if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };

    let cols = panels.len().min(3);
    let rows = panels.len().div_ceil(cols);
    let (pw, ph) = (420u32, 380u32);
    let title_px = 40u32;
    let svg = render((pw * cols as u32, ph * rows as u32 + title_px), |root| {
        let (top, body) = root.split_vertically(title_px);
        top.draw(&Text::new(spec.title.clone(), ((pw * cols as u32 / 2) as i32, 14), centred(19))).map_err(err)?;
        // A colour bar from the lowest to the highest mean.
        let (bar_x, bar_w, bar_y) = (((pw * cols as u32) / 2) as i32 - 120, 240, 30);
        for k in 0..bar_w {
            let c = viridis(k as f64 / (bar_w - 1) as f64);
            top.draw(&Rectangle::new([(bar_x + k, bar_y - 4), (bar_x + k + 1, bar_y + 4)], c.filled())).map_err(err)?;
        }
        let small = TextStyle::from((FONT, 12).into_font()).pos(Pos::new(HPos::Right, VPos::Center));
        top.draw(&Text::new(format!("{} ", sig3(lo)), (bar_x - 2, bar_y), small.clone())).map_err(err)?;
        let small_left = TextStyle::from((FONT, 12).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
        top.draw(&Text::new(format!(" {}", sig3(hi)), (bar_x + bar_w + 2, bar_y), small_left)).map_err(err)?;
        let areas = body.split_evenly((rows, cols));
        for (panel, area) in panels.iter().zip(areas.iter()) {
            // Cells are drawn at grid indices, labelled with their values (log or not, the grid is what was run).
            // Label at most ~7 ticks per axis so the labels never collide.
            let names = |vals: &[f64]| -> Vec<(f64, String)> {
                let every = vals.len().div_ceil(7).max(1);
                vals.iter().enumerate().filter(|(i, _)| i % every == 0).map(|(i, v)| (i as f64, sig3(*v))).collect()
            };
            let (x_names, y_names) = (names(&panel.xs), names(&panel.ys));
            let x_axis = Axis::categorical(x_names, (-0.5, panel.xs.len() as f64 - 0.5), xk);
            let y_axis = Axis::categorical(y_names, (-0.5, panel.ys.len() as f64 - 0.5), yk);
            let mut ch = chart(area, &panel.title, &x_axis, &y_axis, true)?;
            // Values are written in the cells while they fit; larger grids rely on the colour scale.
            let write_values = panel.xs.len() <= 8 && panel.ys.len() <= 12;
            for &(i, j, m) in &panel.means {
                let (x, y) = (i as f64, j as f64);
                let colour = viridis(scale(m));
                ch.draw_series(std::iter::once(Rectangle::new([(x - 0.5, y - 0.5), (x + 0.5, y + 0.5)], colour.filled()))).map_err(err)?;
                if write_values {
                    let ink = if scale(m) > 0.6 { BLACK } else { WHITE };
                    let style = TextStyle::from((FONT, 11).into_font()).pos(Pos::new(HPos::Center, VPos::Center)).color(&ink);
                    ch.draw_series(std::iter::once(Text::new(sig3(m), (x, y), style))).map_err(err)?;
                }
            }
        }
        Ok(())
    })?;
    notes.insert(
        0,
        format!(
            "Mean over splits of {} at each ({xk}, {yk}) grid point; one colour scale for all panels, from {} (dark) to {} (yellow).",
            metric_label(metric),
            tick(lo),
            tick(hi)
        ),
    );
    Ok(Plot::Svg(svg))
}
