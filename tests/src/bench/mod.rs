//! flowmesh-bench subcommands, one module each; `flowmesh-bench SUBCOMMAND [ARGS]`.

pub mod attach;
pub mod compute;
pub mod egressfw;
pub mod egressip;
pub mod flows;
pub mod netpol;
pub mod push;
pub mod takeover;

/// Value of `--name N` in `args`, parsed, or `default`.
pub fn arg_value<T: std::str::FromStr>(
    args: &[String],
    name: &str,
    default: T,
) -> Result<T, String> {
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => {
            let v = args
                .get(i + 1)
                .ok_or_else(|| format!("{name} needs a value"))?;
            v.parse().map_err(|_| format!("{name}: cannot parse {v:?}"))
        }
    }
}

/// Median of a non-empty list (the mean of the middle two for an even count).
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Peak resident memory of this process in MiB (VmHWM), if readable.
pub fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}
