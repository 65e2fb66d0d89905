//! Per-window rows (`--timeseries FILE.csv`): request index, H_p, H_n, S_target, S_cur, the
//! hit ratio of every tier over the window and, with more than paper 000's two classes, each
//! class's top-tier hit ratio and blocks. An empty cell means "no accesses in the window".

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
    /// Per class of the run's class list (empty with two classes): the top tier's hit ratio
    /// over the window and the class's blocks there at its end.
    pub classes: Vec<(Option<f64>, u64)>,
}

fn cell<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

/// Writes the header `request,h_p,h_n,s_target,s_cur,hit_<tier>...[,h_<class>,blocks_<class>...]`
/// and one line per row.
pub fn write_csv(
    out: &mut impl Write,
    tier_names: &[String],
    class_names: &[String],
    rows: &[WindowRow],
) -> io::Result<()> {
    write!(out, "request,h_p,h_n,s_target,s_cur")?;
    for n in tier_names {
        write!(out, ",hit_{n}")?;
    }
    for n in class_names {
        write!(out, ",h_{n},blocks_{n}")?;
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
        for (h, b) in &r.classes {
            write!(out, ",{},{b}", cell(*h))?;
        }
        writeln!(out)?;
    }
    Ok(())
}
