//! `--plot FILE.png`: hit ratios and pool sizes over time, like paper 000's Fig. 5.
//! Top panel: H_p, H_n and each tier's hit ratio per window; bottom: S_target and S_cur.
//! The font is DejaVu Sans, embedded, so plots render the same on machines without fonts.

use crate::timeseries::WindowRow;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use std::path::Path;
use std::sync::Once;

static FONT: Once = Once::new();

fn ensure_font() {
    FONT.call_once(|| {
        // An embedded, known-good font: registration cannot fail in practice, and if it did the
        // plot would only lose its labels.
        let _ = register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular());
    });
}

/// Draws `rows` to a PNG at `path`. `title` names the run.
pub fn plot_png(
    path: &Path,
    title: &str,
    tier_names: &[String],
    rows: &[WindowRow],
) -> Result<(), String> {
    ensure_font();
    let err = |e: &dyn std::fmt::Display| format!("{}: plot failed: {e}", path.display());
    if rows.is_empty() {
        return Err(format!(
            "{}: nothing to plot (fewer requests than one window)",
            path.display()
        ));
    }
    let root = BitMapBackend::new(path, (1100, 800)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root
        .titled(title, ("sans-serif", 22))
        .map_err(|e| err(&e))?;
    let (upper, lower) = root.split_vertically(440);
    let x_max = rows.last().map_or(1, |r| r.request).max(1);

    let mut c = ChartBuilder::on(&upper)
        .margin(12)
        .margin_right(40)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .caption("hit ratio per window", ("sans-serif", 16))
        .build_cartesian_2d(0u64..x_max, 0f64..1.02f64)
        .map_err(|e| err(&e))?;
    c.configure_mesh()
        .x_desc("requests")
        .y_desc("hit ratio")
        .draw()
        .map_err(|e| err(&e))?;
    let mut series: Vec<(String, Vec<(u64, f64)>)> = vec![
        (
            "H_p (priority, top tier)".into(),
            rows.iter()
                .filter_map(|r| r.h_p.map(|h| (r.request, h)))
                .collect(),
        ),
        (
            "H_n (normal, top tier)".into(),
            rows.iter()
                .filter_map(|r| r.h_n.map(|h| (r.request, h)))
                .collect(),
        ),
    ];
    for (i, n) in tier_names.iter().enumerate() {
        let pts = rows
            .iter()
            .filter_map(|r| {
                r.tier_hit_ratio
                    .get(i)
                    .copied()
                    .flatten()
                    .map(|h| (r.request, h))
            })
            .collect();
        series.push((format!("tier {n}"), pts));
    }
    for (i, (name, pts)) in series.into_iter().enumerate() {
        if pts.is_empty() {
            continue;
        }
        let color = Palette99::pick(i).to_rgba();
        c.draw_series(LineSeries::new(pts, color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| err(&e))?;

    let y_max = rows
        .iter()
        .map(|r| r.s_target.unwrap_or(0).max(r.s_cur))
        .max()
        .unwrap_or(1)
        .max(1);
    let mut c = ChartBuilder::on(&lower)
        .margin(12)
        .margin_right(40)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .caption("protected pool (top tier)", ("sans-serif", 16))
        .build_cartesian_2d(0u64..x_max, 0u64..y_max + y_max / 20 + 1)
        .map_err(|e| err(&e))?;
    c.configure_mesh()
        .x_desc("requests")
        .y_desc("blocks")
        .draw()
        .map_err(|e| err(&e))?;
    let target: Vec<(u64, u64)> = rows
        .iter()
        .filter_map(|r| r.s_target.map(|t| (r.request, t)))
        .collect();
    if !target.is_empty() {
        c.draw_series(LineSeries::new(target, RED.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label("S_target")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], RED.stroke_width(2)));
    }
    c.draw_series(LineSeries::new(
        rows.iter().map(|r| (r.request, r.s_cur)),
        BLUE.stroke_width(2),
    ))
    .map_err(|e| err(&e))?
    .label("S_cur")
    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLUE.stroke_width(2)));
    c.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
