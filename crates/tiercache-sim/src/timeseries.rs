//! Per-window rows (`--timeseries FILE.csv`): request index, H_p, H_n, S_target, S_cur and the
//! hit ratio of every tier over the window. An empty cell means "no accesses in the window".

use std::io::{self, Write};

/// One window's values. Ratios are over the window, for the top tier (H_p, H_n) or each tier.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowRow {
    /// Requests replayed at the end of the window.
    pub request: u64,
    pub h_p: Option<f64>,
    pub h_n: Option<f64>,
    pub s_target: Option<u64>,
    pub s_cur: u64,
    pub tier_hit_ratio: Vec<Option<f64>>,
}

fn cell<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

/// Writes the header `request,h_p,h_n,s_target,s_cur,hit_<tier>...` and one line per row.
pub fn write_csv(
    out: &mut impl Write,
    tier_names: &[String],
    rows: &[WindowRow],
) -> io::Result<()> {
    write!(out, "request,h_p,h_n,s_target,s_cur")?;
    for n in tier_names {
        write!(out, ",hit_{n}")?;
    }
    writeln!(out)?;
    for r in rows {
        write!(
            out,
            "{},{},{},{},{}",
            r.request,
            cell(r.h_p),
            cell(r.h_n),
            cell(r.s_target),
            r.s_cur
        )?;
        for h in &r.tier_hit_ratio {
            write!(out, ",{}", cell(*h))?;
        }
        writeln!(out)?;
    }
    Ok(())
}
