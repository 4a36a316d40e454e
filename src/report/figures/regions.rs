//! Decision regions of 2-D classifiers (Villacampa-Calvo & Hernandez-Lobato's Fig. 3): one
//! panel per (method, value of a grid key), the most probable class over the recorded grid as
//! tinted regions with black boundaries, and the learned inducing inputs on top.
use super::super::format::{setting_cmp, setting_value};
use super::*;
use crate::results::DecisionGrid;

/// Class tints: the palette's colours, light enough for the boundaries and points to show.
fn tint(class: usize) -> RGBColor {
    let RGBColor(r, g, b) = PALETTE[class % PALETTE.len()];
    let light = |v: u8| (v as f64 + 0.72 * (255.0 - v as f64)).round() as u8;
    RGBColor(light(r), light(g), light(b))
}

/// Horizontal runs of one class in grid row j: (first i, last i, class). Drawing runs instead
/// of points keeps a 100 x 100 grid at a few hundred rectangles per panel.
fn runs(grid: &DecisionGrid, j: usize) -> Vec<(usize, usize, usize)> {
    let mut out: Vec<(usize, usize, usize)> = Vec::new();
    for i in 0..grid.n {
        let Some(c) = grid.class_at(i, j) else { continue };
        match out.last_mut() {
            Some(last) if last.2 == c && last.1 + 1 == i => last.1 = i,
            _ => out.push((i, i, c)),
        }
    }
    out
}

/// Boundary segments between neighbouring grid points of different classes, on the midlines
/// between them, in data coordinates.
fn boundaries(grid: &DecisionGrid) -> Vec<[(f64, f64); 2]> {
    let (n, step_x, step_y) = (grid.n, (grid.x[1] - grid.x[0]) / (grid.n - 1) as f64, (grid.y[1] - grid.y[0]) / (grid.n - 1) as f64);
    let at = |i: usize, j: usize| (DecisionGrid::coordinate(grid.x, n, i), DecisionGrid::coordinate(grid.y, n, j));
    let mut out = Vec::new();
    for j in 0..n {
        for i in 0..n {
            let here = grid.class_at(i, j);
            let (x, y) = at(i, j);
            if i + 1 < n && grid.class_at(i + 1, j) != here {
                out.push([(x + step_x / 2.0, y - step_y / 2.0), (x + step_x / 2.0, y + step_y / 2.0)]);
            }
            if j + 1 < n && grid.class_at(i, j + 1) != here {
                out.push([(x - step_x / 2.0, y + step_y / 2.0), (x + step_x / 2.0, y + step_y / 2.0)]);
            }
        }
    }
    out
}

pub(super) fn decision_regions(spec: &FigureSpec, input: &ReportInput, notes: &mut Vec<String>) -> Result<Plot, String> {
    let sel = Selection::new(spec, input);
    let Some(dataset) = sel.datasets.first().copied() else { return Ok(Plot::NoData("no dataset".into())) };
    // Rows: methods; columns: the values of `x` (a grid key) or the settings run; each panel
    // the lowest split with a recorded grid.
    let with_grid: Vec<&CellRecord> = sel.ok().filter(|c| c.dataset == dataset && c.decision_grid.is_some()).collect();
    if with_grid.is_empty() {
        return Ok(Plot::NoData(format!("no finished cell of {dataset} recorded a decision grid (decision_grid: in the method entry)")));
    }
    let column_of = |c: &CellRecord| match spec.x.as_deref() {
        Some(key) => setting_value(&c.setting, key).unwrap_or("").to_string(),
        None => c.setting.clone(),
    };
    let mut columns: Vec<String> = with_grid.iter().map(|c| column_of(c)).collect();
    columns.sort_by(|a, b| match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => x.total_cmp(&y),
        _ => setting_cmp(a, b),
    });
    columns.dedup();
    let rows: Vec<&str> = sel.methods.iter().copied().filter(|m| with_grid.iter().any(|c| c.method == *m)).collect();
    let panel = |method: &str, column: &str| {
        with_grid.iter().copied().filter(|c| c.method == method && column_of(c) == column).min_by_key(|c| c.split)
    };

    let (pw, ph, title_px) = (200u32, 210u32, 40u32);
    // At least wide enough for the title; the panels keep their size, left-aligned.
    let panels_w = pw * columns.len() as u32;
    let (w, h) = (panels_w.max(8 * spec.title.len() as u32 + 40), ph * rows.len() as u32 + title_px);
    let key_label = spec.x.as_deref().map(|k| k.rsplit('.').next().unwrap_or(k)).unwrap_or("setting");
    let svg = render((w, h), |root| {
        let (top, body) = root.split_vertically(title_px);
        top.draw(&Text::new(spec.title.clone(), ((w / 2) as i32, 16), centred(16))).map_err(err)?;
        let (body, _) = body.split_horizontally(panels_w);
        let areas = body.split_evenly((rows.len(), columns.len()));
        for (r, method) in rows.iter().enumerate() {
            for (k, column) in columns.iter().enumerate() {
                let area = &areas[r * columns.len() + k];
                let Some(cell) = panel(method, column) else { continue };
                let grid = cell.decision_grid.as_ref().expect("selected for its grid");
                let caption = if spec.x.is_some() { format!("{method}, {key_label} = {column}") } else { method.to_string() };
                let x_axis = Axis::linear((grid.x[0], grid.x[1]), "");
                let y_axis = Axis::linear((grid.y[0], grid.y[1]), "");
                let mut ch = ChartBuilder::on(area)
                    .margin(4)
                    .caption(caption, (FONT, 12))
                    .build_cartesian_2d(
                        Ticked { lo: x_axis.lo, hi: x_axis.hi, ticks: Vec::new() },
                        Ticked { lo: y_axis.lo, hi: y_axis.hi, ticks: Vec::new() },
                    )
                    .map_err(err)?;
                let n = grid.n;
                let (sx, sy) = ((grid.x[1] - grid.x[0]) / (n - 1) as f64 / 2.0, (grid.y[1] - grid.y[0]) / (n - 1) as f64 / 2.0);
                let clip = |v: f64, range: [f64; 2]| v.clamp(range[0], range[1]);
                for j in 0..n {
                    let y = DecisionGrid::coordinate(grid.y, n, j);
                    for (i0, i1, c) in runs(grid, j) {
                        let (x0, x1) = (DecisionGrid::coordinate(grid.x, n, i0) - sx, DecisionGrid::coordinate(grid.x, n, i1) + sx);
                        let corners = [(clip(x0, grid.x), clip(y - sy, grid.y)), (clip(x1, grid.x), clip(y + sy, grid.y))];
                        ch.draw_series(std::iter::once(Rectangle::new(corners, tint(c).filled()))).map_err(err)?;
                    }
                }
                ch.draw_series(boundaries(grid).into_iter().map(|seg| PathElement::new(seg.to_vec(), BLACK.stroke_width(1))))
                    .map_err(err)?;
                // One set per class: filled with the class's colour; one shared set: white.
                let per_class = grid.inducing.len() > 1;
                for (class, z) in grid.inducing.iter().enumerate() {
                    let fill = if per_class { PALETTE[class % PALETTE.len()] } else { WHITE };
                    ch.draw_series(z.iter().map(|p| Circle::new((p[0], p[1]), 3, fill.filled()))).map_err(err)?;
                    ch.draw_series(z.iter().map(|p| Circle::new((p[0], p[1]), 3, BLACK.stroke_width(1)))).map_err(err)?;
                }
                area.draw(&Rectangle::new([(0, 0), (pw as i32 - 1, ph as i32 - 1)], BLACK.mix(0.25))).map_err(err)?;
            }
        }
        Ok(())
    })?;
    let splits: Vec<usize> = {
        let mut s: Vec<usize> = rows.iter().flat_map(|m| columns.iter().filter_map(|c| panel(m, c).map(|cell| cell.split))).collect();
        s.sort_unstable();
        s.dedup();
        s
    };
    notes.push(format!(
        "{dataset}, split {}: the most probable class over a {n} x {n} grid (tints), the decision boundaries (black) and the \
         learned inducing inputs (circles; coloured by class where each class has its own set).",
        splits.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", "),
        n = with_grid[0].decision_grid.as_ref().map_or(0, |g| g.n)
    ));
    Ok(Plot::Svg(svg))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(labels: &str, n: usize) -> DecisionGrid {
        DecisionGrid { x: [0.0, 1.0], y: [0.0, 2.0], n, labels: labels.into(), inducing: Vec::new() }
    }

    #[test]
    fn runs_and_boundaries_follow_the_labels() {
        // 3 x 3, row by row from y = 0: class 0 left, 1 right, and the top row all 2.
        let g = grid("001011222", 3);
        assert_eq!(g.class_at(2, 0), Some(1));
        assert_eq!(runs(&g, 0), vec![(0, 1, 0), (2, 2, 1)]);
        assert_eq!(runs(&g, 2), vec![(0, 2, 2)]);
        // Row 0: one change (between i = 1 and 2); row 1: one (i = 0 and 1); row 2: none.
        // Columns: 0->0->2 one, 0->1->2 two, 1->1->2 one.
        let b = boundaries(&g);
        assert_eq!(b.len(), 6);
        // The vertical segment between (0.5, 0) and (1, 0) sits at x = 0.75, y in [-0.5, 0.5].
        assert!(b.contains(&[(0.75, -0.5), (0.75, 0.5)]), "{b:?}");
        assert_eq!(boundaries(&grid("000000000", 3)), Vec::<[(f64, f64); 2]>::new());
    }
}
