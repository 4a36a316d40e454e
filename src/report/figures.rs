//! Figures, drawn with plotters' SVG backend.
//!
//! Text needs no font library: without plotters' `ttf`/`ab_glyph` features its font-free
//! layout estimates text sizes and the SVG backend writes `<text>` elements that the
//! browser renders. Every axis is a `Ticked` f64 axis with explicit ticks, so all charts
//! share one type and categorical and logarithmic axes are ordinary f64 axes with their
//! own tick labels.
use super::format::{method_label, metric_label, setting_cmp, sig3, tick};
use super::ReportInput;
use crate::results::{Aggregate, CellRecord, Status};
use crate::spec::{FigureKind, FigureSpec};
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

mod curves;
mod distributions;
mod errorbar;
mod heatmap;
mod regions;
mod scatter;
mod trace;

use distributions::{histogram, violin};
use errorbar::errorbar;
use heatmap::heatmap;
use scatter::scatter;
use trace::trace;

const SIZE: (u32, u32) = (760, 460);
const FONT: &str = "sans-serif";

/// Tableau-10: distinguishable, and readable on white.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];
const GRID: RGBColor = RGBColor(228, 228, 228);

/// A drawn figure and the remarks that belong in its caption.
pub struct Drawn {
    pub svg: String,
    pub notes: Vec<String>,
}

type Area<'b> = DrawingArea<SVGBackend<'b>, Shift>;
type Coords = Cartesian2d<Ticked, Ticked>;
type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Coords>;

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Draw one figure; a figure without data becomes an SVG saying so.
pub fn draw(spec: &FigureSpec, input: &ReportInput) -> Result<Drawn, String> {
    let mut notes = Vec::new();
    let plot = match spec.kind {
        FigureKind::Errorbar => errorbar(spec, input, &mut notes)?,
        FigureKind::Violin => violin(spec, input, &mut notes)?,
        FigureKind::Histogram => histogram(spec, input, &mut notes)?,
        FigureKind::Scatter => scatter(spec, input, &mut notes)?,
        FigureKind::Trace => trace(spec, input, &mut notes)?,
        FigureKind::Curve => curves::curve(spec, input, &mut notes)?,
        FigureKind::Heatmap => heatmap(spec, input, &mut notes)?,
        FigureKind::DecisionRegions => regions::decision_regions(spec, input, &mut notes)?,
    };
    let svg = match plot {
        Plot::Svg(svg) => svg,
        Plot::NoData(reason) => {
            notes.push(format!("No data: {reason}."));
            no_data(&spec.title, &reason)?
        }
    };
    Ok(Drawn { svg, notes })
}

enum Plot {
    Svg(String),
    NoData(String),
}

// ---------------------------------------------------------------------------------------
// Data selection

/// The datasets, methods and cells a figure draws from (spec order).
struct Selection<'i> {
    datasets: Vec<&'i str>,
    methods: Vec<&'i str>,
    /// Selected cells of any status (traces of failed cells are still informative).
    all: Vec<&'i CellRecord>,
}

impl<'i> Selection<'i> {
    fn new(spec: &'i FigureSpec, input: &'i ReportInput) -> Self {
        let datasets: Vec<&str> = if spec.datasets.is_empty() {
            input.datasets.iter().map(String::as_str).collect()
        } else {
            spec.datasets.iter().map(String::as_str).collect()
        };
        let methods: Vec<&str> = if spec.methods.is_empty() {
            input.methods.iter().map(String::as_str).collect()
        } else {
            spec.methods.iter().map(String::as_str).collect()
        };
        let all = input.cells.iter().filter(|c| datasets.contains(&c.dataset.as_str()) && methods.contains(&c.method.as_str())).collect();
        Selection { datasets, methods, all }
    }

    fn ok(&self) -> impl Iterator<Item = &'i CellRecord> + '_ {
        self.all.iter().copied().filter(|c| c.status == Status::Ok)
    }

    fn method_index(&self, method: &str) -> usize {
        self.methods.iter().position(|m| *m == method).unwrap_or(0)
    }

    /// (method, setting) pairs with finished cells that have `metric`, in method then setting order.
    fn variants(&self, metric: &str) -> Vec<(&'i str, &'i str)> {
        let mut out: Vec<(&str, &str)> = Vec::new();
        for c in self.ok().filter(|c| cell_value(c, metric).is_some()) {
            if !out.contains(&(c.method.as_str(), c.setting.as_str())) {
                out.push((c.method.as_str(), c.setting.as_str()));
            }
        }
        out.sort_by(|a, b| self.method_index(a.0).cmp(&self.method_index(b.0)).then_with(|| setting_cmp(a.1, b.1)));
        out
    }
}

/// A cell's value of `metric`; `hp_<name>` reads a hyper-parameter when no metric has that name.
fn cell_value(cell: &CellRecord, metric: &str) -> Option<f64> {
    let v = cell.value(metric)?;
    v.is_finite().then_some(v)
}

/// Method colours follow the spec's method order, so a method keeps its colour across figures.
fn method_colour(input: &ReportInput, sel: &Selection, method: &str) -> RGBColor {
    let i = input.methods.iter().position(|m| m == method).unwrap_or_else(|| sel.method_index(method));
    PALETTE[i % PALETTE.len()]
}

// ---------------------------------------------------------------------------------------
// Axes, charts, markers

struct Axis {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
    labels: Box<dyn Fn(f64) -> String>,
    desc: String,
}

impl Axis {
    fn linear((lo, hi): (f64, f64), desc: impl Into<String>) -> Axis {
        Axis { lo, hi, ticks: nice_ticks(lo, hi, 6), labels: Box::new(tick), desc: desc.into() }
    }

    /// `lo`/`hi` are log10 of the data range; values are plotted as log10(x).
    fn log10((lo, hi): (f64, f64), desc: impl Into<String>) -> Axis {
        let ticks = if (1.0..3.0).contains(&(hi - lo)) {
            // A few decades: 1, 2, 5 × 10^k.
            let mut t = Vec::new();
            for decade in lo.floor() as i32..=hi.ceil() as i32 {
                for m in [1.0, 2.0, 5.0] {
                    let v = (m * 10f64.powi(decade)).log10();
                    if (lo..=hi).contains(&v) {
                        t.push(v);
                    }
                }
            }
            t
        } else if hi - lo >= 3.0 {
            let step = ((hi - lo) / 7.0).ceil().max(1.0);
            let mut t = Vec::new();
            let mut d = (lo / step).ceil() * step;
            while d <= hi + 1e-9 {
                t.push(d);
                d += step;
            }
            t
        } else {
            // Less than a decade: nice linear ticks, placed on the log axis.
            nice_ticks(10f64.powf(lo), 10f64.powf(hi), 5).into_iter().filter(|v| *v > 0.0).map(f64::log10).collect()
        };
        Axis { lo, hi, ticks, labels: Box::new(|v| tick(10f64.powf(v))), desc: desc.into() }
    }

    /// Named positions on an f64 axis.
    fn categorical(names: Vec<(f64, String)>, (lo, hi): (f64, f64), desc: impl Into<String>) -> Axis {
        let ticks = names.iter().map(|(x, _)| *x).collect();
        let labels = Box::new(move |v: f64| names.iter().find(|(x, _)| (x - v).abs() < 1e-6).map(|(_, n)| n.clone()).unwrap_or_default());
        Axis { lo, hi, ticks, labels, desc: desc.into() }
    }
}

/// Ticks at 1, 2 or 5 × 10^k inside [lo, hi].
fn nice_ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    let span = hi - lo;
    if !(span > 0.0 && span.is_finite()) {
        return vec![lo];
    }
    let raw = span / target.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = mag
        * match raw / mag {
            r if r < 1.5 => 1.0,
            r if r < 3.0 => 2.0,
            r if r < 7.0 => 5.0,
            _ => 10.0,
        };
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

/// A data range padded by 5% on each side; a single value gets a range around it.
fn padded(values: impl IntoIterator<Item = f64>) -> Option<(f64, f64)> {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.into_iter().filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo > hi {
        return None;
    }
    let pad = if hi > lo {
        0.05 * (hi - lo)
    } else if lo != 0.0 {
        0.1 * lo.abs()
    } else {
        1.0
    };
    Some((lo - pad, hi + pad))
}

/// A linear f64 axis with the ticks we choose. (plotters' own f64 axis wrapped in
/// `with_key_points` loses its label formatter, hence this small type.)
struct Ticked {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
}

impl Ranged for Ticked {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        if self.hi == self.lo {
            return (limit.0 + limit.1) / 2;
        }
        let fraction = (v - self.lo) / (self.hi - self.lo);
        limit.0 + ((limit.1 - limit.0) as f64 * fraction + 1e-3).floor() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        // Bold grid lines at the ticks, no light ones.
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

fn chart<'a, 'b>(area: &'a Area<'b>, caption: &str, x: &Axis, y: &Axis, small: bool) -> Result<Chart<'a, 'b>, String> {
    let mut builder = ChartBuilder::on(area);
    builder
        .margin(if small { 8 } else { 14 })
        .x_label_area_size(if small { 36 } else { 46 })
        .y_label_area_size(if small { 58 } else { 74 })
        .caption(caption, (FONT, if small { 16 } else { 21 }));
    let mut chart = builder
        .build_cartesian_2d(Ticked { lo: x.lo, hi: x.hi, ticks: x.ticks.clone() }, Ticked { lo: y.lo, hi: y.hi, ticks: y.ticks.clone() })
        .map_err(err)?;
    let x_fmt = |v: &f64| (x.labels)(*v);
    let y_fmt = |v: &f64| (y.labels)(*v);
    chart
        .configure_mesh()
        .bold_line_style(GRID)
        .axis_style(BLACK.mix(0.6))
        .x_desc(x.desc.as_str())
        .y_desc(y.desc.as_str())
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 15))
        .draw()
        .map_err(err)?;
    Ok(chart)
}

fn legend<'a, 'b: 'a>(chart: &mut Chart<'a, 'b>, position: SeriesLabelPosition) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .label_font((FONT, 14))
        .draw()
        .map_err(err)
}

/// Legend text, padded: plotters sizes the legend box from a rough width estimate that
/// is too small for real sans-serif fonts (SVG ignores the trailing spaces).
fn legend_text(label: &str) -> String {
    format!("{label}{}", " ".repeat(label.chars().count() / 3 + 1))
}

/// Raise the top of a y range so an upper-right legend of `entries` rows has empty space
/// to sit in instead of covering data.
fn legend_room((lo, hi): (f64, f64), entries: usize) -> (f64, f64) {
    let plot_px = 340.0;
    let legend_px = 18.0 + 19.0 * entries as f64;
    let f = (legend_px / plot_px).min(0.6);
    (lo, hi + (hi - lo) * f / (1.0 - f))
}

/// Marker outlines (pixel offsets) that tell apart series of the same colour.
fn marker_points(shape: usize, r: i32) -> Vec<(i32, i32)> {
    match shape % 5 {
        0 => (0..12)
            .map(|i| {
                let a = i as f64 * std::f64::consts::PI / 6.0;
                ((r as f64 * a.cos()).round() as i32, (r as f64 * a.sin()).round() as i32)
            })
            .collect(),
        1 => vec![(0, -r - 1), (r + 1, r), (-r - 1, r)],
        2 => vec![(-r, -r), (r, -r), (r, r), (-r, r)],
        3 => vec![(0, -r - 2), (r + 1, 0), (0, r + 2), (-r - 1, 0)],
        _ => vec![(0, r + 1), (r + 1, -r), (-r - 1, -r)],
    }
}

/// A legend entry with a line and/or a marker; drawn from an empty series so the legend
/// can describe elements drawn piecewise.
fn legend_entry<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    label: &str,
    colour: RGBColor,
    shape: Option<usize>,
    line: bool,
) -> Result<(), String> {
    chart.draw_series(std::iter::empty::<Circle<(f64, f64), i32>>()).map_err(err)?.label(legend_text(label)).legend(move |(x, y)| {
        let line_style = if line { colour.stroke_width(2) } else { TRANSPARENT.stroke_width(0) };
        let points = shape.map_or_else(Vec::new, |s| marker_points(s, 4));
        EmptyElement::at((x + 9, y)) + PathElement::new(vec![(-9, 0), (9, 0)], line_style) + Polygon::new(points, colour.filled())
    });
    Ok(())
}

fn render(size: (u32, u32), f: impl FnOnce(&Area<'_>) -> Result<(), String>) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        f(&root)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

fn centred(size: i32) -> TextStyle<'static> {
    TextStyle::from((FONT, size).into_font()).pos(Pos::new(HPos::Center, VPos::Center))
}

fn no_data(title: &str, reason: &str) -> Result<String, String> {
    let (w, h) = (SIZE.0, 220);
    render((w, h), |root| {
        let mid = w as i32 / 2;
        root.draw(&Rectangle::new([(1, 1), (w as i32 - 2, h as i32 - 2)], BLACK.mix(0.3).stroke_width(1))).map_err(err)?;
        root.draw(&Text::new(title.to_string(), (mid, 40), centred(18))).map_err(err)?;
        root.draw(&Text::new("no data", (mid, 110), centred(28).color(&BLACK.mix(0.5)))).map_err(err)?;
        root.draw(&Text::new(reason.to_string(), (mid, 160), centred(13).color(&BLACK.mix(0.6)))).map_err(err)?;
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------
// Error bars: mean ± SE against datasets or a numeric grid key

/// Values over splits at each x of one series.
#[cfg(test)]
mod tests {
    use super::distributions::kde;
    use super::errorbar::half_width;
    use super::*;
    use crate::spec::Interval;

    #[test]
    fn ci95_bars_use_the_student_t_quantile() {
        // t_{0.975} with 49 and 4 degrees of freedom (standard tables): 2.009575, 2.776445.
        let a = |n| Aggregate { mean: 0.0, sd: 1.0, se: 0.5, n, n_nonfinite: 0 };
        assert!((half_width(&a(50), Interval::Ci95) - 0.5 * 2.009575).abs() < 1e-6);
        assert!((half_width(&a(5), Interval::Ci95) - 0.5 * 2.776445).abs() < 1e-6);
        assert_eq!(half_width(&a(5), Interval::Se), 0.5);
        assert!(half_width(&a(1), Interval::Ci95).is_nan());
    }

    #[test]
    fn ticks_are_round_numbers_inside_the_range() {
        assert_eq!(nice_ticks(0.0, 10.0, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        let t = nice_ticks(-0.37, 0.52, 6);
        assert!(t.iter().all(|v| (-0.37..=0.52).contains(v)));
        assert!(t.len() >= 4);
    }

    #[test]
    fn kde_integrates_to_one_and_needs_three_values() {
        assert!(kde(&[1.0, 2.0]).is_none());
        assert!(kde(&[1.0, 1.0, 1.0]).is_none());
        let d = kde(&[1.0, 2.0, 2.5, 4.0, 7.0]).unwrap();
        let step = d[1].0 - d[0].0;
        let mass: f64 = d.iter().map(|p| p.1).sum::<f64>() * step;
        // ±2 bandwidths beyond the data hold ~95% or more of each kernel's mass.
        assert!(mass > 0.9 && mass < 1.01, "{mass}");
    }
}
