//! Value parsers for `flowmeshctl` arguments (clap `value_parser` functions; pure, unit-tested).

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;
use std::time::Duration;

/// The controller's default admin API address.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:9650";

/// A datapath id in decimal or `0x` hex.
pub fn dpid(text: &str) -> Result<u64, String> {
    kinds::manifest::parse_dpid(text)
}

/// A duration: `500ms`, `10s`, `2m`, or a bare number of seconds.
pub fn duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (num, scale_ms) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1000.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60_000.0)
    } else {
        (t, 1000.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v * scale_ms <= 86_400_000.0 => {
            Ok(Duration::from_secs_f64(v * scale_ms / 1000.0))
        }
        _ => Err(format!(
            "{text:?} is not a duration (write e.g. 500ms, 10s or 2m, more than zero and at most 24h)"
        )),
    }
}

/// The admin API URL; `host:port` without a scheme gets `http://`.
pub fn server_url(text: &str) -> Result<String, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("the server address is empty (e.g. http://127.0.0.1:9650)".into());
    }
    let url = if t.contains("://") {
        t.to_string()
    } else {
        format!("http://{t}")
    };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(format!(
            "{text:?}: only http:// and https:// server addresses are supported"
        ));
    }
    tonic::transport::Endpoint::from_shared(url.clone())
        .map_err(|_| format!("{text:?} is not a server address (e.g. http://127.0.0.1:9650)"))?;
    Ok(url)
}

/// `NAMESPACE/POD`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodName {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
}

impl FromStr for PodName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                Ok(PodName {
                    namespace: ns.to_string(),
                    name: name.to_string(),
                })
            }
            _ => Err(format!(
                "{s:?} is not NAMESPACE/POD (e.g. ns1/web; list pods with: flowmeshctl get pods)"
            )),
        }
    }
}

impl fmt::Display for PodName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Where a traced packet goes: a pod or an IPv4 address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TraceDestination {
    /// `NAMESPACE/POD`.
    Pod(PodName),
    /// Any IPv4 address (service, node, external).
    Ip(Ipv4Addr),
}

impl FromStr for TraceDestination {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Ok(ip) = s.parse::<Ipv4Addr>() {
            return Ok(TraceDestination::Ip(ip));
        }
        s.parse::<PodName>().map(TraceDestination::Pod).map_err(|_| {
            format!("{s:?} is neither NAMESPACE/POD nor an IPv4 address (e.g. ns2/db or 172.30.0.10)")
        })
    }
}

impl fmt::Display for TraceDestination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceDestination::Pod(p) => p.fmt(f),
            TraceDestination::Ip(ip) => ip.fmt(f),
        }
    }
}

/// An OpenFlow port number for `--ofport` (1 to 0xffffff00).
pub fn ofport(text: &str) -> Result<u32, String> {
    match text.trim().parse::<u32>() {
        Ok(n) if (1..=0xffff_ff00).contains(&n) => Ok(n),
        _ => Err(format!(
            "{text:?} is not an OpenFlow port (1 to 4294967040; omit --ofport to look it up by name)"
        )),
    }
}

/// An L4 port for `--tcp`/`--udp` (1 to 65535).
pub fn l4_port(text: &str) -> Result<u16, String> {
    match text.trim().parse::<u16>() {
        Ok(n) if n != 0 => Ok(n),
        _ => Err(format!("{text:?} is not a port (1 to 65535)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(duration("1.5s"), Ok(Duration::from_millis(1500)));
        for bad in ["", "0", "-1s", "abc", "10h", "nan", "100000m"] {
            assert!(duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn server_urls() {
        assert_eq!(
            server_url("127.0.0.1:9650"),
            Ok("http://127.0.0.1:9650".to_string())
        );
        assert_eq!(
            server_url("https://ctl.example:443"),
            Ok("https://ctl.example:443".to_string())
        );
        assert!(server_url("").is_err());
        assert!(server_url("ftp://x").is_err());
        assert!(server_url("http://bad host").is_err());
    }

    #[test]
    fn pod_names() {
        assert_eq!(
            "ns1/web".parse::<PodName>(),
            Ok(PodName {
                namespace: "ns1".into(),
                name: "web".into()
            })
        );
        for bad in ["web", "/web", "ns/", "a/b/c", ""] {
            assert!(bad.parse::<PodName>().is_err(), "{bad}");
        }
    }

    #[test]
    fn trace_destinations() {
        assert_eq!(
            "10.1.2.3".parse::<TraceDestination>(),
            Ok(TraceDestination::Ip(Ipv4Addr::new(10, 1, 2, 3)))
        );
        assert!(matches!(
            "ns/db".parse::<TraceDestination>(),
            Ok(TraceDestination::Pod(_))
        ));
        assert!("10.1.2".parse::<TraceDestination>().is_err());
        assert_eq!(
            "ns/db".parse::<TraceDestination>().map(|d| d.to_string()),
            Ok("ns/db".to_string())
        );
    }

    #[test]
    fn ports() {
        assert_eq!(ofport("7"), Ok(7));
        assert!(ofport("0").is_err());
        assert!(ofport("4294967295").is_err());
        assert_eq!(l4_port("80"), Ok(80));
        assert!(l4_port("0").is_err());
        assert!(l4_port("65536").is_err());
        assert_eq!(dpid("0x10"), Ok(16));
    }
}
