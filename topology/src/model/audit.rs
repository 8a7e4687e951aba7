//! Network policy audit logging, as OVN-Kubernetes offers it: the per-namespace annotation
//! `k8s.ovn.org/acl-logging: {"deny": "alert", "allow": "notice"}` turns it on for the
//! namespace's NetworkPolicy verdicts, and the cluster-wide [`AuditConfig`] (OpenShift's
//! `policyAuditConfig`) says how fast and where the node shims write the lines.

use super::{Affected, ClusterModel, ModelError};
use serde::{Deserialize, Serialize};

/// The namespace annotation that turns audit logging on (OVN-Kubernetes' name).
pub const ACL_LOGGING_ANNOTATION: &str = "k8s.ovn.org/acl-logging";

/// A syslog severity an audit line is written with (the five OVN-Kubernetes accepts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// `alert`.
    Alert,
    /// `warning`.
    Warning,
    /// `notice`.
    Notice,
    /// `info`.
    Info,
    /// `debug`.
    Debug,
}

impl Severity {
    /// Every severity, most severe first.
    pub const ALL: [Severity; 5] = [
        Severity::Alert,
        Severity::Warning,
        Severity::Notice,
        Severity::Info,
        Severity::Debug,
    ];

    /// The annotation's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Alert => "alert",
            Severity::Warning => "warning",
            Severity::Notice => "notice",
            Severity::Info => "info",
            Severity::Debug => "debug",
        }
    }

    /// From the annotation's word.
    pub fn parse(s: &str) -> Option<Severity> {
        Severity::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

/// What a namespace logs: the severity of denied and of allowed connections (None: that
/// verdict is not logged).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AclLogging {
    /// Severity of denied connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny: Option<Severity>,
    /// Severity of allowed connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Severity>,
}

impl AclLogging {
    /// Whether anything is logged.
    pub fn any(&self) -> bool {
        self.deny.is_some() || self.allow.is_some()
    }

    /// The annotation's value, as OVN-Kubernetes writes it (`{"deny":"alert","allow":"notice"}`).
    pub fn to_annotation(&self) -> String {
        let mut parts = Vec::new();
        if let Some(d) = self.deny {
            parts.push(format!("\"deny\":\"{}\"", d.as_str()));
        }
        if let Some(a) = self.allow {
            parts.push(format!("\"allow\":\"{}\"", a.as_str()));
        }
        format!("{{{}}}", parts.join(","))
    }
}

/// Why an annotation value was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("annotation {ACL_LOGGING_ANNOTATION}={value:?}: {reason} (expected JSON such as {{\"deny\": \"alert\", \"allow\": \"notice\"}}; severities: alert, warning, notice, info, debug)")]
pub struct AclLoggingError {
    /// The value given.
    pub value: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Parse the annotation's value strictly: a JSON object whose only keys are `deny` and
/// `allow`, each a severity (or an empty string: not logged).
pub fn parse_acl_logging(value: &str) -> Result<AclLogging, AclLoggingError> {
    let err = |reason: String| AclLoggingError {
        value: value.to_string(),
        reason,
    };
    let parsed: std::collections::BTreeMap<String, String> = serde_json_lite::object(value)
        .map_err(|e| err(format!("not a JSON object of strings: {e}")))?;
    let mut out = AclLogging::default();
    for (k, v) in parsed {
        let sev = if v.is_empty() {
            None
        } else {
            Some(Severity::parse(&v).ok_or_else(|| err(format!("{k}: unknown severity {v:?}")))?)
        };
        match k.as_str() {
            "deny" => out.deny = sev,
            "allow" => out.allow = sev,
            other => return Err(err(format!("unknown key {other:?}"))),
        }
    }
    Ok(out)
}

/// Parse the annotation as OVN-Kubernetes reads a Namespace's: what is valid is used, a
/// severity it does not know turns that verdict's logging off. None: no logging at all (the
/// value is not a JSON object). The second value says what was ignored, if anything.
pub fn parse_acl_logging_lenient(value: &str) -> (Option<AclLogging>, Option<String>) {
    match parse_acl_logging(value) {
        Ok(a) => (a.any().then_some(a), None),
        Err(strict) => match serde_json_lite::object(value) {
            Err(_) => (None, Some(strict.to_string())),
            Ok(m) => {
                let a = AclLogging {
                    deny: m.get("deny").and_then(|v| Severity::parse(v)),
                    allow: m.get("allow").and_then(|v| Severity::parse(v)),
                };
                (a.any().then_some(a), Some(strict.to_string()))
            }
        },
    }
}

/// A minimal reader of a flat JSON object of strings (the annotation's shape), so that the
/// model needs no JSON library: `{"k": "v", ...}` with the usual string escapes.
mod serde_json_lite {
    use std::collections::BTreeMap;

    pub fn object(s: &str) -> Result<BTreeMap<String, String>, String> {
        let mut p = Parser {
            b: s.as_bytes(),
            i: 0,
        };
        p.ws();
        p.expect(b'{')?;
        let mut out = BTreeMap::new();
        p.ws();
        if p.peek() == Some(b'}') {
            p.i += 1;
        } else {
            loop {
                p.ws();
                let k = p.string()?;
                p.ws();
                p.expect(b':')?;
                p.ws();
                let v = p.string()?;
                if out.insert(k.clone(), v).is_some() {
                    return Err(format!("key {k:?} given twice"));
                }
                p.ws();
                match p.next() {
                    Some(b',') => continue,
                    Some(b'}') => break,
                    _ => return Err(format!("expected , or }} at byte {}", p.i)),
                }
            }
        }
        p.ws();
        if p.i != p.b.len() {
            return Err(format!("trailing characters at byte {}", p.i));
        }
        Ok(out)
    }

    struct Parser<'a> {
        b: &'a [u8],
        i: usize,
    }

    impl Parser<'_> {
        fn peek(&self) -> Option<u8> {
            self.b.get(self.i).copied()
        }
        fn next(&mut self) -> Option<u8> {
            let c = self.peek();
            self.i += 1;
            c
        }
        fn ws(&mut self) {
            while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
                self.i += 1;
            }
        }
        fn expect(&mut self, c: u8) -> Result<(), String> {
            match self.next() {
                Some(x) if x == c => Ok(()),
                _ => Err(format!("expected {:?} at byte {}", c as char, self.i - 1)),
            }
        }
        fn string(&mut self) -> Result<String, String> {
            self.expect(b'"')?;
            let mut out = Vec::new();
            loop {
                match self.next() {
                    None => return Err("unterminated string".into()),
                    Some(b'"') => break,
                    Some(b'\\') => match self.next() {
                        Some(c @ (b'"' | b'\\' | b'/')) => out.push(c),
                        Some(b'n') => out.push(b'\n'),
                        Some(b't') => out.push(b'\t'),
                        Some(b'r') => out.push(b'\r'),
                        Some(b'b') => out.push(8),
                        Some(b'f') => out.push(12),
                        Some(b'u') => {
                            let hex = self
                                .b
                                .get(self.i..self.i + 4)
                                .and_then(|h| std::str::from_utf8(h).ok())
                                .and_then(|h| u32::from_str_radix(h, 16).ok())
                                .and_then(char::from_u32)
                                .ok_or("bad \\u escape")?;
                            self.i += 4;
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(hex.encode_utf8(&mut buf).as_bytes());
                        }
                        _ => return Err("bad escape".into()),
                    },
                    Some(c) if c < 0x20 => return Err("control character in string".into()),
                    Some(c) => out.push(c),
                }
            }
            String::from_utf8(out).map_err(|_| "string is not UTF-8".into())
        }
    }
}

/// Where the node shims send audit lines besides their file (`destination`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum AuditDestination {
    /// `null`: the file only.
    Null,
    /// `libc`: the node's syslog (`/dev/log`), as libc's `syslog()` writes it.
    Libc,
    /// `udp:HOST:PORT`: a syslog server.
    Udp(std::net::SocketAddr),
    /// `unix:PATH`: a Unix datagram socket.
    Unix(String),
}

impl std::fmt::Display for AuditDestination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AuditDestination::Null => f.write_str("null"),
            AuditDestination::Libc => f.write_str("libc"),
            AuditDestination::Udp(a) => write!(f, "udp:{a}"),
            AuditDestination::Unix(p) => write!(f, "unix:{p}"),
        }
    }
}

impl std::str::FromStr for AuditDestination {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "null" => return Ok(AuditDestination::Null),
            "libc" => return Ok(AuditDestination::Libc),
            _ => {}
        }
        if let Some(rest) = s.strip_prefix("udp:") {
            return rest.parse().map(AuditDestination::Udp).map_err(|_| {
                format!("destination {s:?}: udp:HOST:PORT needs an IP address and a port, e.g. udp:192.0.2.1:514 or udp:[2001:db8::1]:514")
            });
        }
        if let Some(path) = s.strip_prefix("unix:") {
            if !path.starts_with('/') || path.ends_with('/') || path.contains('\0') {
                return Err(format!(
                    "destination {s:?}: unix:PATH needs an absolute path to a socket file"
                ));
            }
            return Ok(AuditDestination::Unix(path.to_string()));
        }
        Err(format!(
            "destination {s:?}: must be libc, null, udp:HOST:PORT or unix:PATH"
        ))
    }
}

/// The syslog facilities of RFC 5424, by their usual names; the value is the facility code.
pub const SYSLOG_FACILITIES: [(&str, u8); 24] = [
    ("kern", 0),
    ("user", 1),
    ("mail", 2),
    ("daemon", 3),
    ("auth", 4),
    ("syslog", 5),
    ("lpr", 6),
    ("news", 7),
    ("uucp", 8),
    ("clock", 9),
    ("authpriv", 10),
    ("ftp", 11),
    ("ntp", 12),
    ("audit", 13),
    ("alert", 14),
    ("cron", 15),
    ("local0", 16),
    ("local1", 17),
    ("local2", 18),
    ("local3", 19),
    ("local4", 20),
    ("local5", 21),
    ("local6", 22),
    ("local7", 23),
];

/// OpenShift's `policyAuditConfig`, with its defaults, as flowmesh's configuration file and
/// ConfigMap carry it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuditConfig {
    /// Lines per second per node, at most (default 20).
    #[serde(default = "default_rate_limit")]
    pub rate_limit: u32,
    /// Size of the log file in MB at which it is rotated (default 50).
    #[serde(default = "default_max_file_size")]
    pub max_file_size: u32,
    /// Rotated files kept beside the current one (default 5).
    #[serde(default = "default_max_log_files")]
    pub max_log_files: u32,
    /// `libc`, `udp:HOST:PORT`, `unix:PATH` or `null` (default).
    #[serde(default = "default_destination")]
    pub destination: String,
    /// The syslog facility of `libc`, `udp:` and `unix:` lines (default `local0`).
    #[serde(default = "default_facility")]
    pub syslog_facility: String,
}

fn default_rate_limit() -> u32 {
    20
}
fn default_max_file_size() -> u32 {
    50
}
fn default_max_log_files() -> u32 {
    5
}
fn default_destination() -> String {
    "null".into()
}
fn default_facility() -> String {
    "local0".into()
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            rate_limit: default_rate_limit(),
            max_file_size: default_max_file_size(),
            max_log_files: default_max_log_files(),
            destination: default_destination(),
            syslog_facility: default_facility(),
        }
    }
}

/// The highest rate a meter band gets (OpenFlow: 32 bits; more than any log pipeline takes).
pub const MAX_RATE_LIMIT: u32 = 1_000_000;

impl AuditConfig {
    /// Check every field; the error names the field and what is allowed.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=MAX_RATE_LIMIT).contains(&self.rate_limit) {
            return Err(format!(
                "policyAuditConfig.rateLimit {}: must be between 1 and {MAX_RATE_LIMIT} lines per second",
                self.rate_limit
            ));
        }
        if !(1..=1_000_000).contains(&self.max_file_size) {
            return Err(format!(
                "policyAuditConfig.maxFileSize {}: must be between 1 and 1000000 (MB)",
                self.max_file_size
            ));
        }
        if !(1..=1000).contains(&self.max_log_files) {
            return Err(format!(
                "policyAuditConfig.maxLogFiles {}: must be between 1 and 1000",
                self.max_log_files
            ));
        }
        self.destination()
            .map_err(|e| format!("policyAuditConfig.{e}"))?;
        self.facility_code()?;
        Ok(())
    }

    /// The parsed destination.
    pub fn destination(&self) -> Result<AuditDestination, String> {
        self.destination.parse()
    }

    /// The syslog facility's code.
    pub fn facility_code(&self) -> Result<u8, String> {
        SYSLOG_FACILITIES
            .iter()
            .find(|(n, _)| *n == self.syslog_facility)
            .map(|(_, c)| *c)
            .ok_or_else(|| {
                let names: Vec<&str> = SYSLOG_FACILITIES.iter().map(|(n, _)| *n).collect();
                format!(
                    "policyAuditConfig.syslogFacility {:?}: must be one of {}",
                    self.syslog_facility,
                    names.join(", ")
                )
            })
    }
}

impl ClusterModel {
    /// What namespace `name` logs (None: nothing, or no such namespace).
    pub fn acl_logging(&self, name: &str) -> Option<AclLogging> {
        self.namespaces.get(name).and_then(|e| e.acl_logging)
    }

    /// Set what namespace `name` logs (None or nothing: off). Affects the nodes with its pods
    /// (its logging flows) in networkpolicy mode, and those holding its egress firewall.
    pub fn set_acl_logging(
        &mut self,
        name: &str,
        logging: Option<AclLogging>,
    ) -> Result<Affected, ModelError> {
        let logging = logging.filter(AclLogging::any);
        let e = self
            .namespaces
            .get_mut(name)
            .ok_or_else(|| ModelError::UnknownNamespace(name.to_string()))?;
        if e.acl_logging == logging {
            return Ok(Affected::none());
        }
        match (e.acl_logging.is_some(), logging.is_some()) {
            (false, true) => self.logged_namespaces += 1,
            (true, false) => self.logged_namespaces -= 1,
            _ => {}
        }
        e.acl_logging = logging;
        self.audit_epoch += 1;
        if !self.is_policy_mode() {
            return Ok(Affected::none());
        }
        let mut a = self.nodes_of_namespace(name);
        if self.egress_firewall(name).is_some() {
            // Its table-100 twins, also on the egress nodes of its egress IPs.
            a.merge(self.nodes_of_netid(self.effective_netid(name)));
        }
        Ok(a)
    }

    /// Whether any namespace logs.
    pub fn any_acl_logging(&self) -> bool {
        self.logged_namespaces > 0
    }

    /// The audit settings (rate, destination).
    pub fn audit_config(&self) -> &AuditConfig {
        &self.audit
    }

    /// Replace the audit settings (validated); affects every node when the rate changed and
    /// some namespace logs (each node's meter), none otherwise (the destination is the shims'
    /// business).
    pub fn set_audit_config(&mut self, cfg: AuditConfig) -> Result<Affected, ModelError> {
        cfg.validate().map_err(ModelError::AuditConfig)?;
        if cfg == self.audit {
            return Ok(Affected::none());
        }
        let rate_changed = cfg.rate_limit != self.audit.rate_limit;
        self.audit = cfg;
        self.audit_epoch += 1;
        if rate_changed && self.any_acl_logging() {
            Ok(Affected::all())
        } else {
            Ok(Affected::none())
        }
    }

    /// Bumped by every change of what is logged or of the audit settings.
    pub fn audit_epoch(&self) -> u64 {
        self.audit_epoch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_annotation_parses_as_ovn_kubernetes_writes_it() {
        let a = parse_acl_logging(r#"{"deny": "alert", "allow": "notice"}"#).expect("valid");
        assert_eq!(
            (a.deny, a.allow),
            (Some(Severity::Alert), Some(Severity::Notice))
        );
        assert_eq!(a.to_annotation(), r#"{"deny":"alert","allow":"notice"}"#);
        assert_eq!(parse_acl_logging(&a.to_annotation()), Ok(a));
        let d = parse_acl_logging(r#"{"deny":"info"}"#).expect("deny only");
        assert_eq!((d.deny, d.allow), (Some(Severity::Info), None));
        assert_eq!(
            parse_acl_logging(r#"{"deny":"","allow":""}"#),
            Ok(AclLogging::default())
        );
        assert_eq!(parse_acl_logging("{}"), Ok(AclLogging::default()));
        assert!(!AclLogging::default().any());
    }

    #[test]
    fn bad_annotations_are_refused_with_the_reason() {
        for (v, why) in [
            (r#"{"deny":"critical"}"#, "unknown severity \"critical\""),
            (r#"{"drop":"alert"}"#, "unknown key \"drop\""),
            (r#"{"deny":"alert","deny":"info"}"#, "given twice"),
            (r#"{"deny":1}"#, "not a JSON object of strings"),
            (r#"deny=alert"#, "not a JSON object of strings"),
            (r#"{"deny":"alert"} x"#, "trailing"),
            ("", "not a JSON object"),
        ] {
            let e = parse_acl_logging(v).expect_err(v).to_string();
            assert!(e.contains(why), "{v}: {e}");
            assert!(e.contains("k8s.ovn.org/acl-logging"), "{e}");
        }
    }

    #[test]
    fn a_namespace_annotation_is_read_leniently() {
        let (a, warn) = parse_acl_logging_lenient(r#"{"deny":"alert","allow":"loud"}"#);
        assert_eq!(
            a,
            Some(AclLogging {
                deny: Some(Severity::Alert),
                allow: None
            })
        );
        assert!(warn.is_some_and(|w| w.contains("loud")));
        assert_eq!(parse_acl_logging_lenient("nonsense").0, None);
        assert_eq!(parse_acl_logging_lenient(r#"{"allow":"debug"}"#).1, None);
    }

    #[test]
    fn policy_audit_config_has_openshifts_defaults_and_validation() {
        let d = AuditConfig::default();
        assert_eq!(
            (
                d.rate_limit,
                d.max_file_size,
                d.destination.as_str(),
                d.syslog_facility.as_str()
            ),
            (20, 50, "null", "local0")
        );
        assert_eq!(d.validate(), Ok(()));
        for (dest, ok) in [
            ("libc", true),
            ("null", true),
            ("udp:192.0.2.1:514", true),
            ("udp:[2001:db8::1]:514", true),
            ("unix:/run/audit.sock", true),
            ("udp:syslog.example:514", false),
            ("udp:192.0.2.1", false),
            ("unix:relative", false),
            ("unix:/dir/", false),
            ("file:/x", false),
        ] {
            let c = AuditConfig {
                destination: dest.into(),
                ..AuditConfig::default()
            };
            assert_eq!(c.validate().is_ok(), ok, "{dest}: {:?}", c.validate());
        }
        let zero = AuditConfig {
            rate_limit: 0,
            ..AuditConfig::default()
        };
        assert!(zero.validate().is_err_and(|e| e.contains("rateLimit")));
        let fac = AuditConfig {
            syslog_facility: "local9".into(),
            ..AuditConfig::default()
        };
        assert!(fac.validate().is_err_and(|e| e.contains("local7")));
        assert_eq!(
            AuditConfig {
                syslog_facility: "local0".into(),
                ..AuditConfig::default()
            }
            .facility_code(),
            Ok(16)
        );
    }
}
