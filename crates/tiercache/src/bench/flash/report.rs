//! `bench flash` output: the table and per-workload details on stdout, and `--plot FILE.png`:
//! seconds as grouped bars, one group per workload, one bar per configuration, on a log scale
//! (the workloads span four orders of magnitude). The font is DejaVu Sans, embedded, as in
//! `sim --plot`.

use super::{FlashBench, CONFIGS, WORKLOADS};
use crate::bench::BenchError;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use std::path::Path;

/// Configuration names and their bar colours, in the order of the values.
const SERIES: [(&str, RGBColor); 4] = [
    ("idle (SSD tier, idle cleaner)", RGBColor(0x1f, 0x77, 0xb4)),
    (
        "eager (SSD tier, eager cleaner)",
        RGBColor(0xd6, 0x27, 0x28),
    ),
    (
        "none (memory + BACKING on the HDD model)",
        RGBColor(0x7f, 0x7f, 0x7f),
    ),
    (
        "raw (the cache's own device, no tiercache)",
        RGBColor(0x2c, 0xa0, 0x2c),
    ),
];

/// Draws `rows` (workload, seconds per configuration) to a PNG at `path`.
pub(super) fn bars(path: &Path, title: &str, rows: &[(&str, [f64; 4])]) -> Result<(), BenchError> {
    // An embedded font: registration cannot fail in practice; if it did only labels are lost.
    let _ = register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular());
    let err = |e: &dyn std::fmt::Display| {
        BenchError::scenario(format!("{}: plot failed: {e}", path.display()))
    };
    let values = rows.iter().flat_map(|r| r.1).filter(|v| *v > 0.0);
    let lo = values.clone().fold(f64::INFINITY, f64::min);
    let hi = values.fold(0.0f64, f64::max);
    if !lo.is_finite() || hi <= 0.0 {
        return Err(BenchError::scenario(format!(
            "{}: nothing to plot",
            path.display()
        )));
    }
    let y0 = 10f64.powf((lo / 2.0).log10().floor());
    // A decade of headroom above the tallest bar for the legend.
    let y1 = 10f64.powf(hi.log10().ceil() + 1.0);
    let n = rows.len() as f64;
    let root = BitMapBackend::new(path, (1100, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let names: Vec<String> = rows.iter().map(|r| r.0.to_string()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(16)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..n, (y0..y1).log_scale())
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(2 * rows.len() + 1)
        .x_label_formatter(&|x| {
            let i = x.floor();
            if (x - i - 0.5).abs() < 1e-6 && i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("seconds (log scale; lower is better)")
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(|e| err(&e))?;
    let width = 0.8 / SERIES.len() as f64;
    for (j, (name, color)) in SERIES.iter().enumerate() {
        let color = *color;
        let bars = rows.iter().enumerate().map(move |(i, r)| {
            let x0 = i as f64 + 0.1 + j as f64 * width;
            Rectangle::new(
                [(x0, y0), (x0 + width * 0.9, r.1[j].max(y0))],
                color.filled(),
            )
        });
        chart
            .draw_series(bars)
            .map_err(|e| err(&e))?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
        let labels = rows.iter().enumerate().map(move |(i, r)| {
            let x = i as f64 + 0.1 + (j as f64 + 0.1) * width;
            Text::new(
                format!("{:.3}", r.1[j]),
                (x, r.1[j].max(y0) * 1.08),
                ("sans-serif", 11).into_font(),
            )
        });
        chart.draw_series(labels).map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

impl FlashBench {
    pub(super) fn rows(&self) -> Vec<(&'static str, [f64; 4])> {
        let t = [
            &self.seq_write,
            &self.rand_write,
            &self.seq_read,
            &self.rand_read,
        ];
        WORKLOADS
            .iter()
            .zip(t)
            .map(|(w, t)| (*w, CONFIGS.map(|c| t.get(c))))
            .collect()
    }

    pub(super) fn title(&self) -> String {
        format!(
            "bench flash (paper 001): {} MiB SSD tier, {} MiB written, BACKING on the HDD MODEL",
            self.cache_bytes >> 20,
            self.seq_bytes >> 20
        )
    }

    pub(super) fn print(&self) {
        println!(
            "BACKING behind the HDD device MODEL (modelled 8 ms seek + 4 ms rotation, 150 MB/s; \
             not a disk)"
        );
        println!(
            "SSD tier: {} MiB cache file on this machine's disk (I/O {}), {} sets of 1 MiB, free \
             floor {}; memory tier {} KiB; sequential {} MiB; {} random writes, {} random reads \
             (4 KiB)",
            self.cache_bytes >> 20,
            self.flash_io_mode,
            self.sets,
            self.free_floor,
            self.memory_bytes >> 10,
            self.seq_bytes >> 20,
            self.rand_writes,
            self.rand_reads
        );
        println!(
            "{:<12} {:>9} {:>9} {:>9} {:>9}   {:>10}  target (001)",
            "seconds", "idle", "eager", "none", "raw", "idle/eager"
        );
        for (w, t) in WORKLOADS.iter().zip([
            &self.seq_write,
            &self.rand_write,
            &self.seq_read,
            &self.rand_read,
        ]) {
            let ratio = t.idle / t.eager.max(1e-9);
            let target = match (t.target_idle_over_eager, t.target_met) {
                (Some(x), Some(met)) => {
                    format!("≤ {x} {}", if met { "met" } else { "NOT met" })
                }
                _ => String::new(),
            };
            println!(
                "{w:<12} {:>9.3} {:>9.3} {:>9.3} {:>9.3}   {ratio:>10.3}  {target}",
                t.idle, t.eager, t.none, t.raw
            );
        }
        for (c, per) in &self.details {
            for (w, d) in WORKLOADS.iter().filter_map(|w| per.get(*w).map(|d| (w, d))) {
                println!(
                    "  {c:<5} {w:<10} BACKING w {:>4} MiB r {:>4} MiB in {:>5} requests \
                     ({:>5} seeks); cleaned {:>4} MiB, bypassed {:>3}, flash hits {:>6}, \
                     free sets {:>4} -> {:>4}, records {:>5}, syncs {:>4}, page cache {:>4} MiB \
                     (after a {:.1} s gap)",
                    d.backing_bytes_written >> 20,
                    d.backing_bytes_read >> 20,
                    d.backing_requests,
                    d.backing_seeks,
                    d.bytes_cleaned >> 20,
                    d.bypassed,
                    d.flash_hits,
                    d.free_sets_before,
                    d.free_sets_after,
                    d.record_writes,
                    d.device_syncs,
                    d.page_cache_bytes >> 20,
                    d.gap_before_secs,
                );
            }
        }
    }
}
