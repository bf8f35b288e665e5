//! The SVG plots of `krait bench`: stacked bars (Cobra Fig. 7), grouped bars (Fig. 8, Fig. 13) and lines
//! (Fig. 5, Fig. 10, Fig. 12). Every plot is an 800×500 canvas with a caption, axis descriptions and a
//! legend; the canvas, the bar charts' axes and the legend are drawn in one place each.

use std::path::Path;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

/// A plot's caption and axis descriptions.
pub(super) struct Axes<'a> {
    pub(super) caption: &'a str,
    pub(super) x_desc: &'a str,
    pub(super) y_desc: &'a str,
    /// A log₁₀ y axis, for values spread over orders of magnitude (bars then start at the axis's floor).
    pub(super) log_y: bool,
}

/// The canvas every plot draws on.
type Canvas<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// A chart on a [`Canvas`], with axes of coordinate types `X` and `Y`.
type Chart<'a, 'b, X, Y> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<X, Y>>;

fn plot_error(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

/// A blank white 800×500 SVG canvas that will be written to `path`.
fn canvas(path: &Path) -> anyhow::Result<Canvas<'_>> {
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error)?;
    Ok(root)
}

/// A chart with the caption and the room for axis labels every plot has.
fn captioned<'a, 'b, X, Y>(
    root: &'a Canvas<'b>,
    caption: &str,
    x_axis: X,
    y_axis: Y,
) -> anyhow::Result<Chart<'a, 'b, X::CoordDescType, Y::CoordDescType>>
where
    X: AsRangedCoord,
    Y: AsRangedCoord,
{
    ChartBuilder::on(root)
        .caption(caption, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(x_axis, y_axis)
        .map_err(plot_error)
}

/// A bar chart: one category per label, at x = 0, 1, …, named under its bars; `y_axis` up.
fn bar_chart<'a, 'b, Y>(
    root: &'a Canvas<'b>,
    labels: &[String],
    axes: &Axes<'_>,
    y_axis: Y,
) -> anyhow::Result<Chart<'a, 'b, RangedCoordf64, Y::CoordDescType>>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let n = labels.len().max(1) as f64;
    let mut chart = captioned(root, axes.caption, -0.5..n - 0.5, y_axis)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(labels.len().max(1))
        .x_desc(axes.x_desc)
        .y_desc(axes.y_desc)
        .x_label_formatter(&|x| bar_label(labels, *x))
        .draw()
        .map_err(plot_error)?;
    Ok(chart)
}

/// The legend entry of a bar series: a filled square of its colour.
fn bar_legend(color: RGBAColor) -> impl Fn((i32, i32)) -> Rectangle<(i32, i32)> {
    move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], color.filled())
}

/// Draws the legend of the chart's labelled series at `position`, and writes the file.
fn finish<'a, 'b: 'a, CT: CoordTranslate>(
    mut chart: ChartContext<'a, SVGBackend<'b>, CT>,
    root: &Canvas<'b>,
    position: SeriesLabelPosition,
) -> anyhow::Result<()> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(plot_error)?;
    root.present().map_err(plot_error)
}

/// Stacked bars: one bar per label, one segment per series (seconds).
pub(super) fn plot_stacked(
    bars: &[(String, Vec<f64>)],
    series: &[&str],
    caption: &str,
    path: &Path,
) -> anyhow::Result<()> {
    let y_max = bars.iter().map(|(_, v)| v.iter().sum::<f64>()).fold(0.0, f64::max).max(1e-3) * 1.15;
    let root = canvas(path)?;
    let labels: Vec<String> = bars.iter().map(|(l, _)| l.clone()).collect();
    let axes = Axes { caption, x_desc: "workload", y_desc: "time (s)", log_y: false };
    let mut chart = bar_chart(&root, &labels, &axes, 0.0..y_max)?;
    for (s, name) in series.iter().enumerate() {
        let color = Palette99::pick(s).to_rgba();
        let rects = bars.iter().enumerate().map(|(i, (_, v))| {
            let base: f64 = v.iter().take(s).sum();
            let top = base + v.get(s).copied().unwrap_or(0.0);
            let x = i as f64;
            Rectangle::new([(x - 0.3, base), (x + 0.3, top)], color.filled())
        });
        chart.draw_series(rects).map_err(plot_error)?.label(*name).legend(bar_legend(color));
    }
    finish(chart, &root, SeriesLabelPosition::UpperRight)
}

/// Grouped bars: one group per label, one bar per series (`None` draws no bar).
pub(super) fn plot_grouped(
    groups: &[(String, Vec<Option<f64>>)],
    series: &[&str],
    axes: &Axes<'_>,
    path: &Path,
) -> anyhow::Result<()> {
    let values = || groups.iter().flat_map(|(_, v)| v.iter().flatten().copied());
    let y_max = values().fold(0.0_f64, f64::max).max(1e-3);
    if axes.log_y {
        // Bars start a little below the smallest value, so that every bar shows.
        let y_min = values().filter(|&v| v > 0.0).fold(y_max, f64::min);
        let floor = 10f64.powf((y_min / 2.0).log10().floor());
        draw_grouped(groups, series, axes, path, (floor..y_max * 2.0).log_scale(), floor)
    } else {
        draw_grouped(groups, series, axes, path, 0.0..y_max * 1.15, 0.0)
    }
}

/// [`plot_grouped`] on a given y axis; bars rise from `y_base`.
fn draw_grouped<Y>(
    groups: &[(String, Vec<Option<f64>>)],
    series: &[&str],
    axes: &Axes<'_>,
    path: &Path,
    y_axis: Y,
    y_base: f64,
) -> anyhow::Result<()>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let root = canvas(path)?;
    let labels: Vec<String> = groups.iter().map(|(l, _)| l.clone()).collect();
    let mut chart = bar_chart(&root, &labels, axes, y_axis)?;
    let width = 0.8 / series.len().max(1) as f64;
    for (s, name) in series.iter().enumerate() {
        let color = Palette99::pick(s).to_rgba();
        let rects = groups.iter().enumerate().filter_map(|(i, (_, v))| {
            let y = v.get(s).copied().flatten()?;
            let x0 = i as f64 - 0.4 + s as f64 * width;
            Some(Rectangle::new([(x0, y_base), (x0 + width * 0.9, y)], color.filled()))
        });
        chart.draw_series(rects).map_err(plot_error)?.label(*name).legend(bar_legend(color));
    }
    finish(chart, &root, SeriesLabelPosition::UpperRight)
}

/// The category label at bar position `x` (bars sit at whole numbers), or nothing between bars.
fn bar_label(labels: &[String], x: f64) -> String {
    let i = x.round();
    if (x - i).abs() > 1e-6 || i < 0.0 {
        return String::new();
    }
    labels.get(i as usize).cloned().unwrap_or_default()
}

/// Lines with dots: one line per named series of (x, y) points; empty series are left out.
pub(super) fn plot_lines(
    lines: &[(String, Vec<(f64, f64)>)],
    axes: &Axes<'_>,
    path: &Path,
) -> anyhow::Result<()> {
    anyhow::ensure!(!axes.log_y, "line plots have a linear y axis only");
    let points = || lines.iter().flat_map(|(_, l)| l.iter());
    let x_max = points().map(|p| p.0).fold(0.0, f64::max).max(1e-3) * 1.05;
    let y_max = points().map(|p| p.1).fold(0.0, f64::max).max(1e-3) * 1.1;
    let root = canvas(path)?;
    let mut chart = captioned(&root, axes.caption, 0.0..x_max, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc(axes.x_desc)
        .y_desc(axes.y_desc)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()
        .map_err(plot_error)?;
    for (i, (name, series)) in lines.iter().enumerate() {
        if series.is_empty() {
            continue;
        }
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(series.clone(), color.stroke_width(2)))
            .map_err(plot_error)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart
            .draw_series(series.iter().map(|&(x, y)| Circle::new((x, y), 3, color.filled())))
            .map_err(plot_error)?;
    }
    finish(chart, &root, SeriesLabelPosition::UpperLeft)
}
