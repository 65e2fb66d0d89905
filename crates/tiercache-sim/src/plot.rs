//! `--plot FILE.png`: hit ratios and pool sizes over time, like paper 000's Fig. 5.
//! Top panel: H_p, H_n (with more than two classes: each class's hit ratio) and each tier's hit
//! ratio per window; bottom: S_target and S_cur of the top tier's protected pool (with more
//! classes: each class's blocks), omitted (and the omission said in the caption) when the top
//! tier is not partitioned. Legends sit beside the panels, never over a line; a window without
//! accesses of a series is a gap in its line, not a ramp. The font is DejaVu Sans, embedded, so
//! plots render the same on machines without fonts.

use crate::curves::ClassCurves;
use crate::timeseries::WindowRow;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use std::path::{Path, PathBuf};
use std::sync::Once;

/// Why a plot was not written; `Display` starts with the PNG's path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlotError {
    #[error("{}: nothing to plot (fewer requests than one window)", path.display())]
    Empty { path: PathBuf },
    /// Drawing or writing the PNG failed (plotters' error, as text: its type is generic over
    /// the backend).
    #[error("{}: plot failed: {why}", path.display())]
    Draw { path: PathBuf, why: String },
}

/// A drawing step that failed, before the path is known to the error.
#[derive(Debug)]
struct DrawFailed(String);

impl std::fmt::Display for DrawFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn failed(e: impl std::fmt::Display) -> DrawFailed {
    DrawFailed(e.to_string())
}

static FONT: Once = Once::new();

/// One value per window (`None`: no accesses in that window).
type Points = Vec<(u64, Option<f64>)>;

/// Width of the legend column to the right of each panel.
const LEGEND_WIDTH: u32 = 250;

fn ensure_font() {
    FONT.call_once(|| {
        // An embedded, known-good font: registration cannot fail in practice, and if it did the
        // plot would only lose its labels.
        let _ = register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular());
    });
}

/// The runs of consecutive windows in which a series has a value: each is drawn as its own line.
pub fn segments<T: Copy>(points: &[(u64, Option<T>)]) -> Vec<Vec<(u64, T)>> {
    let mut out: Vec<Vec<(u64, T)>> = Vec::new();
    let mut current = Vec::new();
    for &(x, y) in points {
        match y {
            Some(y) => current.push((x, y)),
            None if !current.is_empty() => out.push(std::mem::take(&mut current)),
            None => {}
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// Draws a legend (line sample and name per entry) in `area`, beside the panel.
fn legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[(String, RGBAColor)],
) -> Result<(), DrawFailed> {
    for (i, (name, color)) in entries.iter().enumerate() {
        let y = 60 + 26 * i as i32;
        area.draw(&PathElement::new(
            vec![(8, y), (34, y)],
            color.stroke_width(3),
        ))
        .map_err(failed)?;
        area.draw(&Text::new(
            name.clone(),
            (42, y - 8),
            ("sans-serif", 15).into_font(),
        ))
        .map_err(failed)?;
    }
    Ok(())
}

/// Draws `points` (gaps where `None`) as line segments in `color`; a lone point as a dot.
fn draw_gapped<DB: DrawingBackend, Y>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<plotters::coord::types::RangedCoordu64, Y>>,
    points: &[(u64, Option<Y::ValueType>)],
    color: RGBAColor,
) -> Result<(), DrawFailed>
where
    Y: plotters::coord::ranged1d::Ranged,
    Y::ValueType: Copy + 'static,
{
    for seg in segments(points) {
        if seg.len() == 1 {
            chart
                .draw_series(seg.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(failed)?;
        } else {
            chart
                .draw_series(LineSeries::new(seg, color.stroke_width(2)))
                .map_err(failed)?;
        }
    }
    Ok(())
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// A drawing error at `path`, as a [`PlotError`].
fn draw_err(path: &Path) -> impl Fn(&dyn std::fmt::Display) -> PlotError + '_ {
    move |e| PlotError::Draw {
        path: path.to_path_buf(),
        why: e.to_string(),
    }
}

/// Draws `rows` to a PNG at `path`. `title` names the run.
pub fn plot_png(
    path: &Path,
    title: &str,
    tier_names: &[String],
    class_names: &[String],
    rows: &[WindowRow],
) -> Result<(), PlotError> {
    ensure_font();
    let err = draw_err(path);
    if rows.is_empty() {
        return Err(PlotError::Empty {
            path: path.to_path_buf(),
        });
    }
    // A partitioned top tier has a target in every window; an unpartitioned one (`none`) has
    // no protected pool to show.
    let partitioned = rows.iter().any(|r| r.s_target.is_some()) || !class_names.is_empty();
    let height = if partitioned { 800 } else { 480 };
    let root = BitMapBackend::new(path, (1100 + LEGEND_WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root
        .titled(title, ("sans-serif", 22))
        .map_err(|e| err(&e))?;
    let (upper, lower) = if partitioned {
        let (u, l) = root.split_vertically(440);
        (u, Some(l))
    } else {
        (root.clone(), None)
    };
    hit_ratio_panel(&upper, rows, tier_names, class_names, partitioned, &err)?;
    if let Some(lower) = lower {
        if class_names.is_empty() {
            pool_panel(&lower, rows, &err)?;
        } else {
            class_blocks_panel(&lower, rows, class_names, &err)?;
        }
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// The upper panel: each class's and each tier's hit ratio per window.
fn hit_ratio_panel(
    area: &Area<'_>,
    rows: &[WindowRow],
    tier_names: &[String],
    class_names: &[String],
    partitioned: bool,
    err: &dyn Fn(&dyn std::fmt::Display) -> PlotError,
) -> Result<(), PlotError> {
    let x_max = rows.last().map_or(1, |r| r.request).max(1);
    let (upper, upper_legend) = area.split_horizontally(1100);
    let caption = if partitioned {
        "hit ratio per window (gaps: no accesses)".to_string()
    } else {
        "hit ratio per window (gaps: no accesses); no protected-pool panel: the top tier is not \
         partitioned"
            .to_string()
    };
    let mut c = ChartBuilder::on(&upper)
        .margin(12)
        .margin_right(24)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .caption(caption, ("sans-serif", 16))
        .build_cartesian_2d(0u64..x_max, 0f64..1.02f64)
        .map_err(|e| err(&e))?;
    c.configure_mesh()
        .x_desc("requests")
        .y_desc("hit ratio")
        .draw()
        .map_err(|e| err(&e))?;
    let mut series: Vec<(String, Points)> = if class_names.is_empty() {
        vec![
            (
                "H_p (priority, top tier)".into(),
                rows.iter().map(|r| (r.request, r.h_p)).collect(),
            ),
            (
                "H_n (normal, top tier)".into(),
                rows.iter().map(|r| (r.request, r.h_n)).collect(),
            ),
        ]
    } else {
        // One line per class (Fig. 5 with N classes).
        class_names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let pts = rows
                    .iter()
                    .map(|r| (r.request, r.classes.get(i).and_then(|c| c.0)))
                    .collect();
                (format!("{n} (top tier)"), pts)
            })
            .collect()
    };
    for (i, n) in tier_names.iter().enumerate() {
        let pts = rows
            .iter()
            .map(|r| (r.request, r.tier_hit_ratio.get(i).copied().flatten()))
            .collect();
        series.push((format!("tier {n}"), pts));
    }
    let mut entries = Vec::new();
    for (i, (name, pts)) in series.into_iter().enumerate() {
        if pts.iter().all(|(_, y)| y.is_none()) {
            continue;
        }
        let color = Palette99::pick(i).to_rgba();
        draw_gapped(&mut c, &pts, color).map_err(|e| err(&e))?;
        entries.push((name, color));
    }
    legend(&upper_legend, &entries).map_err(|e| err(&e))
}

/// One line of a blocks panel: its legend, its points (gaps where `None`) and its colour.
type BlocksLine = (String, Vec<(u64, Option<u64>)>, RGBAColor);

/// The lower panel: the protected pool's target and current size per window.
fn pool_panel(
    area: &Area<'_>,
    rows: &[WindowRow],
    err: &dyn Fn(&dyn std::fmt::Display) -> PlotError,
) -> Result<(), PlotError> {
    let lines = vec![
        (
            "S_target".to_string(),
            rows.iter().map(|r| (r.request, r.s_target)).collect(),
            RED.to_rgba(),
        ),
        (
            "S_cur".to_string(),
            rows.iter().map(|r| (r.request, Some(r.s_cur))).collect(),
            BLUE.to_rgba(),
        ),
    ];
    blocks_panel(area, "protected pool (top tier)", rows, lines, err)
}

/// The lower panel with N classes: each class's blocks in the top tier per window.
fn class_blocks_panel(
    area: &Area<'_>,
    rows: &[WindowRow],
    class_names: &[String],
    err: &dyn Fn(&dyn std::fmt::Display) -> PlotError,
) -> Result<(), PlotError> {
    let lines = class_names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let pts = rows
                .iter()
                .map(|r| (r.request, r.classes.get(i).map(|c| c.1)))
                .collect();
            (n.clone(), pts, Palette99::pick(i).to_rgba())
        })
        .collect();
    blocks_panel(area, "blocks per class (top tier)", rows, lines, err)
}

/// A panel of block counts per window, one line per entry of `lines`, legend beside it.
fn blocks_panel(
    area: &Area<'_>,
    caption: &str,
    rows: &[WindowRow],
    lines: Vec<BlocksLine>,
    err: &dyn Fn(&dyn std::fmt::Display) -> PlotError,
) -> Result<(), PlotError> {
    let x_max = rows.last().map_or(1, |r| r.request).max(1);
    let (lower, lower_legend) = area.split_horizontally(1100);
    let y_max = lines
        .iter()
        .flat_map(|(_, pts, _)| pts.iter().filter_map(|p| p.1))
        .max()
        .unwrap_or(1)
        .max(1);
    let mut c = ChartBuilder::on(&lower)
        .margin(12)
        .margin_right(24)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .caption(caption, ("sans-serif", 16))
        .build_cartesian_2d(0u64..x_max, 0u64..y_max + y_max / 20 + 1)
        .map_err(|e| err(&e))?;
    c.configure_mesh()
        .x_desc("requests")
        .y_desc("blocks")
        .draw()
        .map_err(|e| err(&e))?;
    let mut entries = Vec::new();
    for (name, pts, color) in lines {
        draw_gapped(&mut c, &pts, color).map_err(|e| err(&e))?;
        entries.push((name, color));
    }
    legend(&lower_legend, &entries).map_err(|e| err(&e))
}

/// `--curves FILE.png`: each class's LRU miss-ratio curve up to `max_blocks`, exact (thick) and
/// SHARDS' estimate (thin, the same colour), classes named by `name`.
pub fn plot_curves(
    path: &Path,
    curves: &[ClassCurves],
    max_blocks: u64,
    name: &dyn Fn(tiercache_core::Class) -> String,
) -> Result<(), PlotError> {
    ensure_font();
    let err = draw_err(path);
    if curves.is_empty() {
        return Err(PlotError::Empty {
            path: path.to_path_buf(),
        });
    }
    let root = BitMapBackend::new(path, (1100 + LEGEND_WIDTH, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (area, legend_area) = root.split_horizontally(1100);
    let mut c = ChartBuilder::on(&area)
        .margin(12)
        .margin_right(24)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .caption(
            "LRU miss-ratio curve per class: exact (thick) and SHARDS' estimate (thin)",
            ("sans-serif", 16),
        )
        .build_cartesian_2d(0u64..max_blocks.max(1), 0f64..1.02f64)
        .map_err(|e| err(&e))?;
    c.configure_mesh()
        .x_desc("blocks")
        .y_desc("miss ratio")
        .draw()
        .map_err(|e| err(&e))?;
    let mut entries = Vec::new();
    for (i, cv) in curves.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let exact = cv.exact.points(max_blocks);
        let est: Vec<(u64, f64)> = exact
            .iter()
            .map(|&(b, _)| (b, cv.estimate.miss_ratio(b)))
            .collect();
        c.draw_series(LineSeries::new(exact, color.stroke_width(3)))
            .map_err(|e| err(&e))?;
        c.draw_series(LineSeries::new(est, color.stroke_width(1)))
            .map_err(|e| err(&e))?;
        entries.push((name(cv.class), color));
    }
    legend(&legend_area, &entries).map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

#[cfg(test)]
mod tests {
    use super::segments;

    #[test]
    fn windows_without_accesses_split_the_line() {
        let pts = [
            (1, Some(0.5)),
            (2, Some(0.6)),
            (3, None),
            (4, None),
            (5, Some(0.9)),
            (6, None),
        ];
        assert_eq!(
            segments(&pts),
            vec![vec![(1, 0.5), (2, 0.6)], vec![(5, 0.9)]]
        );
        assert!(segments::<f64>(&[(1, None)]).is_empty());
    }
}
