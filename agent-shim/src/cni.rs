//! The CNI specification's data: commands, environment, network configuration, results and
//! errors (CNI spec 1.0.0, plus STATUS and GC from 1.1.0). Pure: no I/O.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// Versions whose configurations and results this plugin understands, oldest first.
pub const SUPPORTED_VERSIONS: &[&str] = &["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];
/// The newest supported version (used when the configuration does not say).
pub const LATEST_VERSION: &str = "1.1.0";

/// Well-known CNI error codes (spec "Error" section) and flowmesh's own (100+).
pub mod code {
    /// Incompatible CNI version.
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    /// Unsupported field in the network configuration.
    pub const UNSUPPORTED_FIELD: u32 = 2;
    /// Container unknown or does not exist (no cleanup needed).
    pub const UNKNOWN_CONTAINER: u32 = 3;
    /// Invalid necessary environment variables.
    pub const INVALID_ENV: u32 = 4;
    /// I/O failure.
    pub const IO_FAILURE: u32 = 5;
    /// Failed to decode content.
    pub const DECODE: u32 = 6;
    /// Invalid network configuration.
    pub const INVALID_CONFIG: u32 = 7;
    /// Try again later (transient: the shim or the controller is unreachable).
    pub const TRY_AGAIN: u32 = 11;
    /// STATUS: the plugin is not available (cannot serve ADD now).
    pub const NOT_AVAILABLE: u32 = 50;
    /// flowmesh: internal error in the shim.
    pub const INTERNAL: u32 = 100;
    /// flowmesh: Open vSwitch (ovs-vsctl) failed.
    pub const OVS: u32 = 101;
    /// flowmesh: netlink (interface, address or route) failed.
    pub const NETLINK: u32 = 102;
    /// flowmesh: the controller's node API refused the request.
    pub const NODE_API: u32 = 103;
    /// flowmesh: CHECK found the attachment not as it should be.
    pub const CHECK_FAILED: u32 = 104;
    /// flowmesh: the shim's socket protocol was violated.
    pub const PROTOCOL: u32 = 105;
}

/// A CNI error as the spec prints it on stdout (`cniVersion` is added when printing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("CNI error {code}: {msg}{}", if details.is_empty() { String::new() } else { format!(" ({details})") })]
pub struct CniError {
    /// Error code (see [`code`]).
    pub code: u32,
    /// Short message.
    pub msg: String,
    /// Longer explanation (may be empty).
    #[serde(default)]
    pub details: String,
}

impl CniError {
    /// An error with a code, a message and details.
    pub fn new(code: u32, msg: impl Into<String>, details: impl Into<String>) -> Self {
        CniError {
            code,
            msg: msg.into(),
            details: details.into(),
        }
    }

    /// The spec's error JSON: `{cniVersion, code, msg, details}`.
    pub fn to_json(&self, cni_version: &str) -> Value {
        json!({
            "cniVersion": cni_version,
            "code": self.code,
            "msg": self.msg,
            "details": self.details,
        })
    }
}

/// `CNI_COMMAND`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Command {
    /// Attach a container.
    Add,
    /// Detach a container (idempotent).
    Del,
    /// Verify an attachment.
    Check,
    /// Report supported versions.
    Version,
    /// Is the plugin ready to serve ADD (1.1.0).
    Status,
    /// Remove every attachment not in the valid list (1.1.0).
    Gc,
}

impl FromStr for Command {
    type Err = CniError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "VERSION" => Command::Version,
            "STATUS" => Command::Status,
            "GC" => Command::Gc,
            other => {
                return Err(CniError::new(
                    code::INVALID_ENV,
                    format!("unknown CNI_COMMAND {other:?}"),
                    "expected ADD, DEL, CHECK, VERSION, STATUS or GC",
                ))
            }
        })
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Version => "VERSION",
            Command::Status => "STATUS",
            Command::Gc => "GC",
        })
    }
}

/// The CNI_* environment of one invocation, validated for its command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniEnv {
    /// `CNI_COMMAND`.
    pub command: Command,
    /// `CNI_CONTAINERID` (empty for VERSION, STATUS, GC).
    pub container_id: String,
    /// `CNI_NETNS` (may be empty for DEL).
    pub netns: String,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// `CNI_PATH` (where delegated plugins would be found; flowmesh delegates nothing).
    pub path: String,
    /// `CNI_ARGS` as key/value pairs.
    pub args: BTreeMap<String, String>,
}

fn invalid_env(var: &str, why: impl Into<String>) -> CniError {
    CniError::new(code::INVALID_ENV, format!("invalid {var}"), why)
}

impl CniEnv {
    /// Reads and validates the environment through `get` (e.g. `std::env::var`).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, CniError> {
        let command: Command = get("CNI_COMMAND")
            .ok_or_else(|| invalid_env("CNI_COMMAND", "CNI_COMMAND is not set"))?
            .parse()?;
        let needs_container = matches!(command, Command::Add | Command::Del | Command::Check);
        let needs_netns = matches!(command, Command::Add | Command::Check);
        let need = |var: &str, needed: bool| -> Result<String, CniError> {
            match get(var).filter(|v| !v.is_empty()) {
                Some(v) => Ok(v),
                None if needed => Err(invalid_env(var, format!("{var} is required for {command}"))),
                None => Ok(String::new()),
            }
        };
        let container_id = need("CNI_CONTAINERID", needs_container)?;
        if !container_id.is_empty() && !valid_container_id(&container_id) {
            return Err(invalid_env(
                "CNI_CONTAINERID",
                format!("{container_id:?}: must start with a letter or digit, then letters, digits, '_', '.' or '-'"),
            ));
        }
        let netns = need("CNI_NETNS", needs_netns)?;
        let ifname = need("CNI_IFNAME", needs_container)?;
        if !ifname.is_empty() && !valid_ifname(&ifname) {
            return Err(invalid_env(
                "CNI_IFNAME",
                format!("{ifname:?}: 1..=15 bytes, no '/', ':' or whitespace"),
            ));
        }
        let path = need("CNI_PATH", command != Command::Version)?;
        let args = parse_cni_args(&get("CNI_ARGS").unwrap_or_default())?;
        Ok(CniEnv {
            command,
            container_id,
            netns,
            ifname,
            path,
            args,
        })
    }
}

/// Container ids: an alphanumeric first character, then alphanumerics, `_`, `.` or `-`.
pub fn valid_container_id(id: &str) -> bool {
    let mut chars = id.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// Linux interface names: 1..=15 bytes, not `.`/`..`, no `/`, `:` or whitespace.
pub fn valid_ifname(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 15
        && name != "."
        && name != ".."
        && !name.contains(|c: char| c == '/' || c == ':' || c.is_whitespace())
}

/// Parses `CNI_ARGS` (`K=V;K2=V2`).
pub fn parse_cni_args(s: &str) -> Result<BTreeMap<String, String>, CniError> {
    let mut out = BTreeMap::new();
    for pair in s.split(';').filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| invalid_env("CNI_ARGS", format!("{pair:?} is not KEY=VALUE")))?;
        out.insert(k.to_owned(), v.to_owned());
    }
    Ok(out)
}

/// Parses `a.b.c` into a comparable triple.
pub fn version_triple(v: &str) -> Option<(u32, u32, u32)> {
    let mut it = v.split('.').map(|p| p.parse::<u32>().ok());
    let t = (it.next()??, it.next()??, it.next()??);
    it.next().is_none().then_some(t)
}

/// One entry of GC's `cni.dev/valid-attachments`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    /// Container id.
    #[serde(rename = "containerID")]
    pub container_id: String,
    /// Interface name inside the container.
    pub ifname: String,
}

/// The network configuration from stdin: the keys flowmesh reads, and the raw document.
#[derive(Debug, Clone, PartialEq)]
pub struct NetConf {
    /// `cniVersion`.
    pub cni_version: String,
    /// `name`.
    pub name: String,
    /// `type`.
    pub plugin_type: String,
    /// `socket`: path of the shim's CNI socket (flowmesh key).
    pub socket: Option<String>,
    /// `prevResult` (CHECK, DEL).
    pub prev_result: Option<Value>,
    /// `cni.dev/valid-attachments` (GC).
    pub valid_attachments: Option<Vec<Attachment>>,
    /// The whole document.
    pub raw: Value,
}

impl NetConf {
    /// Parses and validates a network configuration.
    pub fn parse(bytes: &[u8]) -> Result<Self, CniError> {
        let raw: Value = serde_json::from_slice(bytes).map_err(|e| {
            CniError::new(
                code::DECODE,
                "failed to decode the network configuration",
                e.to_string(),
            )
        })?;
        Self::from_value(raw)
    }

    /// Validates an already decoded network configuration.
    pub fn from_value(raw: Value) -> Result<Self, CniError> {
        let obj = raw.as_object().ok_or_else(|| {
            CniError::new(
                code::INVALID_CONFIG,
                "invalid network configuration",
                "the network configuration must be a JSON object",
            )
        })?;
        let string = |key: &str, required: bool| -> Result<Option<String>, CniError> {
            match obj.get(key) {
                None | Some(Value::Null) if !required => Ok(None),
                Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
                _ => Err(CniError::new(
                    code::INVALID_CONFIG,
                    "invalid network configuration",
                    format!("{key:?} must be a non-empty string"),
                )),
            }
        };
        let cni_version = string("cniVersion", true)?.unwrap_or_default();
        if !SUPPORTED_VERSIONS.contains(&cni_version.as_str()) {
            return Err(CniError::new(
                code::INCOMPATIBLE_VERSION,
                format!("incompatible CNI version {cni_version:?}"),
                format!("supported versions: {}", SUPPORTED_VERSIONS.join(", ")),
            ));
        }
        let name = string("name", true)?.unwrap_or_default();
        let plugin_type = string("type", true)?.unwrap_or_default();
        let socket = string("socket", false)?;
        if let Some(ipam) = obj.get("ipam").and_then(|i| i.get("type")) {
            return Err(CniError::new(
                code::UNSUPPORTED_FIELD,
                format!("unsupported field ipam.type={ipam}"),
                "flowmesh allocates pod addresses in the controller; remove \"ipam\"",
            ));
        }
        let prev_result = obj.get("prevResult").filter(|v| !v.is_null()).cloned();
        let valid_attachments = match obj.get("cni.dev/valid-attachments") {
            None | Some(Value::Null) => None,
            Some(v) => Some(serde_json::from_value(v.clone()).map_err(|e| {
                CniError::new(
                    code::INVALID_CONFIG,
                    "invalid cni.dev/valid-attachments",
                    e.to_string(),
                )
            })?),
        };
        Ok(NetConf {
            cni_version,
            name,
            plugin_type,
            socket,
            prev_result,
            valid_attachments,
            raw,
        })
    }

    /// Refuses commands the configuration's version does not have (CHECK needs 0.4.0,
    /// STATUS and GC need 1.1.0).
    pub fn check_command(&self, command: Command) -> Result<(), CniError> {
        let need = match command {
            Command::Check => "0.4.0",
            Command::Status | Command::Gc => "1.1.0",
            _ => return Ok(()),
        };
        if version_triple(&self.cni_version) < version_triple(need) {
            return Err(CniError::new(
                code::INCOMPATIBLE_VERSION,
                format!("{command} needs cniVersion {need} or newer"),
                format!("the configuration says {}", self.cni_version),
            ));
        }
        Ok(())
    }
}

/// The VERSION answer.
pub fn version_json(cni_version: &str) -> Value {
    json!({ "cniVersion": cni_version, "supportedVersions": SUPPORTED_VERSIONS })
}

/// An interface of a result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interface {
    /// Interface name.
    pub name: String,
    /// MAC address.
    pub mac: String,
    /// The netns path for a container interface; absent for the host end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
}

/// An address of a result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpConfig {
    /// Index into `interfaces`.
    pub interface: usize,
    /// CIDR address (`10.128.2.5/23`).
    pub address: String,
    /// Default gateway.
    pub gateway: String,
}

/// A route of a result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteConfig {
    /// Destination prefix.
    pub dst: String,
    /// Next hop; absent for an on-link route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<String>,
}

/// An ADD result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniResult {
    /// Host end first, then the container interface.
    pub interfaces: Vec<Interface>,
    /// Addresses.
    pub ips: Vec<IpConfig>,
    /// Routes inside the container.
    pub routes: Vec<RouteConfig>,
}

impl CniResult {
    /// The result JSON in the format of `cni_version` (0.3.x/0.4.0 add `"version": "4"` to
    /// each address).
    pub fn to_json(&self, cni_version: &str) -> Value {
        let legacy = version_triple(cni_version) < Some((1, 0, 0));
        let ips: Vec<Value> = self
            .ips
            .iter()
            .map(|ip| {
                let mut v = json!({
                    "interface": ip.interface,
                    "address": ip.address,
                    "gateway": ip.gateway,
                });
                if legacy {
                    if let Some(o) = v.as_object_mut() {
                        o.insert("version".into(), json!("4"));
                    }
                }
                v
            })
            .collect();
        json!({
            "cniVersion": cni_version,
            "interfaces": self.interfaces,
            "ips": ips,
            "routes": self.routes,
            "dns": {},
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn add_env_is_validated() {
        let ok = [
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "abc123"),
            ("CNI_NETNS", "/var/run/netns/x"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/opt/cni/bin"),
            (
                "CNI_ARGS",
                "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=web-0",
            ),
        ];
        let e = CniEnv::from_lookup(env(&ok)).expect("valid");
        assert_eq!(e.command, Command::Add);
        assert_eq!(
            e.args.get("K8S_POD_NAME").map(String::as_str),
            Some("web-0")
        );
        let missing: Vec<_> = ok
            .iter()
            .filter(|(k, _)| *k != "CNI_NETNS")
            .copied()
            .collect();
        let err = CniEnv::from_lookup(env(&missing)).expect_err("netns required");
        assert_eq!(err.code, code::INVALID_ENV);
        let mut bad = ok;
        bad[1] = ("CNI_CONTAINERID", "-bad");
        assert_eq!(
            CniEnv::from_lookup(env(&bad)).map_err(|e| e.code),
            Err(code::INVALID_ENV)
        );
        bad = ok;
        bad[5] = ("CNI_ARGS", "novalue");
        assert_eq!(
            CniEnv::from_lookup(env(&bad)).map_err(|e| e.code),
            Err(code::INVALID_ENV)
        );
        bad = ok;
        bad[0] = ("CNI_COMMAND", "FROB");
        assert_eq!(
            CniEnv::from_lookup(env(&bad)).map_err(|e| e.code),
            Err(code::INVALID_ENV)
        );
    }

    #[test]
    fn del_does_not_need_netns_and_version_needs_nothing() {
        let del = [
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "abc"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/x"),
        ];
        assert!(CniEnv::from_lookup(env(&del)).is_ok());
        assert!(CniEnv::from_lookup(env(&[("CNI_COMMAND", "VERSION")])).is_ok());
        let gc = [("CNI_COMMAND", "GC"), ("CNI_PATH", "/x")];
        assert!(CniEnv::from_lookup(env(&gc)).is_ok());
    }

    #[test]
    fn netconf_errors_use_spec_codes() {
        assert_eq!(
            NetConf::parse(b"{not json").map_err(|e| e.code),
            Err(code::DECODE)
        );
        assert_eq!(
            NetConf::parse(b"[]").map_err(|e| e.code),
            Err(code::INVALID_CONFIG)
        );
        let no_name = br#"{"cniVersion":"1.0.0","type":"flowmesh-cni"}"#;
        assert_eq!(
            NetConf::parse(no_name).map_err(|e| e.code),
            Err(code::INVALID_CONFIG)
        );
        let old = br#"{"cniVersion":"0.2.0","name":"n","type":"flowmesh-cni"}"#;
        assert_eq!(
            NetConf::parse(old).map_err(|e| e.code),
            Err(code::INCOMPATIBLE_VERSION)
        );
        let ipam = br#"{"cniVersion":"1.0.0","name":"n","type":"t","ipam":{"type":"host-local"}}"#;
        assert_eq!(
            NetConf::parse(ipam).map_err(|e| e.code),
            Err(code::UNSUPPORTED_FIELD)
        );
        let ok = br#"{"cniVersion":"1.0.0","name":"n","type":"t","socket":"/tmp/s",
            "cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"}]}"#;
        let c = NetConf::parse(ok).expect("valid");
        assert_eq!(c.socket.as_deref(), Some("/tmp/s"));
        assert_eq!(c.valid_attachments.map(|v| v.len()), Some(1));
        assert_eq!(c.cni_version, "1.0.0");
    }

    #[test]
    fn commands_need_their_versions() {
        let c = NetConf::parse(br#"{"cniVersion":"0.3.1","name":"n","type":"t"}"#).expect("ok");
        assert!(c.check_command(Command::Add).is_ok());
        assert_eq!(c.check_command(Command::Check).map_err(|e| e.code), Err(1));
        let c = NetConf::parse(br#"{"cniVersion":"1.0.0","name":"n","type":"t"}"#).expect("ok");
        assert!(c.check_command(Command::Check).is_ok());
        assert_eq!(c.check_command(Command::Gc).map_err(|e| e.code), Err(1));
    }

    #[test]
    fn results_follow_the_requested_version() {
        let r = CniResult {
            interfaces: vec![
                Interface {
                    name: "vethx".into(),
                    mac: "aa:bb:cc:dd:ee:ff".into(),
                    sandbox: None,
                },
                Interface {
                    name: "eth0".into(),
                    mac: "0a:58:0a:80:02:05".into(),
                    sandbox: Some("/var/run/netns/p".into()),
                },
            ],
            ips: vec![IpConfig {
                interface: 1,
                address: "10.128.2.5/23".into(),
                gateway: "10.128.2.1".into(),
            }],
            routes: vec![RouteConfig {
                dst: "0.0.0.0/0".into(),
                gw: Some("10.128.2.1".into()),
            }],
        };
        let v = r.to_json("1.0.0");
        assert_eq!(v["ips"][0]["interface"], 1);
        assert!(v["ips"][0].get("version").is_none());
        assert!(v["interfaces"][0].get("sandbox").is_none());
        assert_eq!(v["interfaces"][1]["sandbox"], "/var/run/netns/p");
        assert_eq!(r.to_json("0.4.0")["ips"][0]["version"], "4");
        let e = CniError::new(code::TRY_AGAIN, "m", "d").to_json("1.0.0");
        assert_eq!(
            e,
            json!({"cniVersion":"1.0.0","code":11,"msg":"m","details":"d"})
        );
    }
}
