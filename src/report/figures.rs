//! Figures, drawn with plotters' SVG backend.
//!
//! Text needs no font library: without plotters' `ttf`/`ab_glyph` features its font-free
//! layout estimates text sizes and the SVG backend writes `<text>` elements that the
//! browser renders. Every axis is a `Ticked` f64 axis with explicit ticks, so all charts
//! share one type and categorical and logarithmic axes are ordinary f64 axes with their
//! own tick labels.
use super::format::{method_label, metric_label, setting_cmp, setting_value, setting_without, sig3, tick};
use super::ReportInput;
use crate::results::{Aggregate, CellRecord, Status};
use crate::spec::{FigureKind, FigureSpec, Interval};
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

mod curves;

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
    let v = cell.metrics.get(metric).or_else(|| metric.strip_prefix("hp_").and_then(|hp| cell.hyperparameters.get(hp))).copied()?;
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
type XValues = Vec<(f64, Vec<f64>)>;

struct Series {
    label: String,
    colour: RGBColor,
    shape: usize,
    /// (x, aggregate over splits), x in data units.
    points: Vec<(f64, Aggregate)>,
}

/// Half-width of an error bar: the standard error, or the 95% Student-t interval of the mean.
fn half_width(a: &Aggregate, interval: Interval) -> f64 {
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

fn errorbar(spec: &FigureSpec, input: &ReportInput, notes: &mut Vec<String>) -> Result<Plot, String> {
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

/// Linear-interpolated quantile of sorted values.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (i, frac) = (pos.floor() as usize, pos.fract());
    let next = sorted.get(i + 1).copied().unwrap_or(sorted[i]);
    sorted[i] + frac * (next - sorted[i])
}

/// Gaussian kernel density with Silverman's bandwidth 0.9·min(sd, IQR/1.34)·n^(−1/5),
/// evaluated from 2 bandwidths below the smallest value to 2 above the largest.
/// `None` for fewer than 3 values or no spread.
fn kde(values: &[f64]) -> Option<Vec<(f64, f64)>> {
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

fn violin(spec: &FigureSpec, input: &ReportInput, notes: &mut Vec<String>) -> Result<Plot, String> {
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
            chart.draw_series(values.iter().map(|y| Circle::new((*x, *y), 2.5, colour.mix(0.8).filled()))).map_err(err)?;
            if let Some(a) = Aggregate::of(values) {
                let bar = vec![(x - 0.22, a.mean), (x + 0.22, a.mean)];
                chart.draw_series(std::iter::once(PathElement::new(bar, BLACK.stroke_width(2)))).map_err(err)?;
            }
        }
        for (v, (method, setting)) in variants.iter().enumerate() {
            legend_entry(&mut chart, &method_label(method, setting), colours[v], Some(0), false)?;
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

fn histogram(spec: &FigureSpec, input: &ReportInput, notes: &mut Vec<String>) -> Result<Plot, String> {
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

fn scatter(spec: &FigureSpec, input: &ReportInput, notes: &mut Vec<String>) -> Result<Plot, String> {
    let Some(metric) = spec.metric.as_deref() else {
        return Ok(Plot::NoData("the figure names no metric".into()));
    };
    let sel = Selection::new(spec, input);
    let (Some(mx), Some(my)) = (sel.methods.first().copied(), sel.methods.get(1).copied()) else {
        return Ok(Plot::NoData("a scatter figure needs two methods".into()));
    };
    // Pair cells of the same dataset and split; grid settings pair when equal or when one side has none.
    let mut points: Vec<(usize, f64, f64)> = Vec::new();
    for a in sel.ok().filter(|c| c.method == mx) {
        for b in sel.ok().filter(|c| c.method == my && c.dataset == a.dataset && c.split == a.split) {
            if !(a.setting == b.setting || a.setting.is_empty() || b.setting.is_empty()) {
                continue;
            }
            if let (Some(x), Some(y), Some(d)) =
                (cell_value(a, metric), cell_value(b, metric), sel.datasets.iter().position(|d| *d == a.dataset))
            {
                points.push((d, x, y));
            }
        }
    }
    if points.is_empty() {
        return Ok(Plot::NoData(format!("no (dataset, split) where both {mx} and {my} have `{metric}`")));
    }
    let range = padded(points.iter().flat_map(|p| [p.1, p.2])).ok_or("no finite values")?;
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
            let mine: Vec<(f64, f64)> = points.iter().filter(|p| p.0 == d).map(|p| (p.1, p.2)).collect();
            if mine.is_empty() {
                continue;
            }
            let marks = mine.iter().map(|p| EmptyElement::at(*p) + Polygon::new(marker_points(d, 4), colour.filled()));
            chart.draw_series(marks).map_err(err)?;
            legend_entry(&mut chart, dataset, colour, Some(d), false)?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)
    })?;
    notes.insert(0, format!("One point per (dataset, split); points above the line have higher {label} for {my}."));
    Ok(Plot::Svg(svg))
}

// ---------------------------------------------------------------------------------------
// Traces: one line per cell against iteration or time

fn trace(spec: &FigureSpec, input: &ReportInput, notes: &mut Vec<String>) -> Result<Plot, String> {
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

fn heatmap(spec: &FigureSpec, input: &ReportInput, notes: &mut Vec<String>) -> Result<Plot, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
