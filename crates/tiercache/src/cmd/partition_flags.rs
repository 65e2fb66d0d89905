//! The partitioner flags `mount` and `sim` share: `--partition`, `--omega`, `--t-protected`,
//! `--t-normal`, `--b-pmin`, `--b-nmin`.

use clap::Args;
use tiercache_core::partition::{Amount, DirprioParams, PartitionConfig, PartitionKind};

#[derive(Args, Debug, Clone, Default)]
pub struct PartitionFlags {
    /// Pool partitioner: none|basic|dirprio|static|mrc [default: dirprio for mount, none for
    /// sim]. `mrc` sizes the protected pool from each class's miss-ratio curve (SHARDS
    /// sampling) to meet T_p and T_n with the fewest blocks.
    #[arg(long, value_name = "KIND")]
    pub partition: Option<PartitionKind>,
    /// dirprio/mrc window ω in block accesses [default: the tier's capacity B].
    #[arg(long, value_name = "N")]
    pub omega: Option<u64>,
    /// dirprio/mrc T_p, a fraction [default: 1.0; mrc: 1.0 is never reachable, give e.g. 0.95].
    #[arg(long, value_name = "F")]
    pub t_protected: Option<f64>,
    /// dirprio/mrc T_n, a fraction [default: 0.65].
    #[arg(long, value_name = "F")]
    pub t_normal: Option<f64>,
    /// dirprio/mrc B_pmin (static: the protected size), blocks or a percentage of B
    /// [default: 75%].
    #[arg(long, value_name = "N|P%")]
    pub b_pmin: Option<Amount>,
    /// dirprio/mrc B_nmin in blocks [default: 32].
    #[arg(long, value_name = "N")]
    pub b_nmin: Option<u64>,
}

impl PartitionFlags {
    /// These flags over `base` (values from a config file), then paper 000's §3.4 guidance;
    /// checked against a tier of `capacity` blocks. Errors name the flag.
    pub fn resolve(
        &self,
        base: &PartitionFlags,
        default_kind: PartitionKind,
        capacity: u64,
    ) -> Result<PartitionConfig, String> {
        let g = DirprioParams::guidance(capacity, false);
        let params = DirprioParams {
            omega: self.omega.or(base.omega),
            t_protected: self
                .t_protected
                .or(base.t_protected)
                .unwrap_or(g.t_protected),
            t_normal: self.t_normal.or(base.t_normal).unwrap_or(g.t_normal),
            b_pmin: self.b_pmin.or(base.b_pmin).unwrap_or(g.b_pmin),
            b_nmin: self.b_nmin.or(base.b_nmin).unwrap_or(g.b_nmin),
        };
        if params.omega == Some(0) {
            return Err("--omega: must be at least 1".into());
        }
        params.resolved(capacity).map_err(|e| format!("--{e}"))?;
        Ok(PartitionConfig {
            kind: self.partition.or(base.partition).unwrap_or(default_kind),
            params: params.into(),
        })
    }
}
