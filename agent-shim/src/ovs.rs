//! `ovs-vsctl` as a typed client: reads records as OVSDB JSON, runs one transaction per
//! change. It inherits `OVS_RUNDIR` (which ovsdb-server to talk to) from the shim.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::process::Command;

/// Failures of `ovs-vsctl`.
#[derive(Debug, thiserror::Error)]
pub enum OvsError {
    /// The program could not be started.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// Program name.
        program: String,
        /// Cause.
        source: std::io::Error,
    },
    /// It ran and failed.
    #[error("ovs-vsctl {args} failed ({status}): {stderr}")]
    Failed {
        /// Arguments, space-joined.
        args: String,
        /// Exit status.
        status: String,
        /// Its stderr.
        stderr: String,
    },
    /// Its output was not what was asked for.
    #[error("unexpected ovs-vsctl output for {what}: {detail}")]
    Parse {
        /// What was being read.
        what: String,
        /// What was wrong.
        detail: String,
    },
    /// An interface did not get a usable OpenFlow port.
    #[error("interface {iface}: {detail}")]
    Interface {
        /// Interface name.
        iface: String,
        /// What happened.
        detail: String,
    },
}

/// A record read with `find`: column name → OVSDB JSON value.
pub type Record = BTreeMap<String, Value>;

/// One Controller row of the bridge.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControllerRow {
    /// Its OVSDB `_uuid`.
    pub uuid: String,
    /// `target` (`ssl:IP:PORT`, ...).
    pub target: String,
    /// `max_backoff` (None: Open vSwitch's default, 8 s).
    pub max_backoff: Option<i64>,
}

/// External-id keys on a pod's Interface record.
pub mod ext {
    /// The container runtime's sandbox (container) id.
    pub const SANDBOX: &str = "flowmesh-sandbox";
    /// Kubernetes namespace of the pod.
    pub const POD_NAMESPACE: &str = "flowmesh-pod-namespace";
    /// Kubernetes name of the pod.
    pub const POD_NAME: &str = "flowmesh-pod-name";
    /// CNI_IFNAME inside the pod.
    pub const IFNAME: &str = "flowmesh-ifname";
}

/// A pod port found on the bridge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodPort {
    /// Interface (= port) name, the host end of the veth.
    pub name: String,
    /// Its external_ids.
    pub external_ids: BTreeMap<String, String>,
    /// Its OpenFlow port number, once OVS assigned one.
    pub ofport: Option<u32>,
}

/// Runs `ovs-vsctl`.
#[derive(Debug, Clone)]
pub struct Vsctl {
    program: String,
    timeout_secs: u32,
}

impl Default for Vsctl {
    fn default() -> Self {
        Vsctl {
            program: "ovs-vsctl".into(),
            timeout_secs: 10,
        }
    }
}

/// Quotes a string as an OVSDB string atom for ovs-vsctl (`"..."` with C escapes).
pub fn quote(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

impl Vsctl {
    /// Runs `ovs-vsctl --timeout=T ARGS` and returns stdout.
    pub async fn run<S: AsRef<str>>(&self, args: &[S]) -> Result<String, OvsError> {
        let mut cmd = Command::new(&self.program);
        cmd.arg(format!("--timeout={}", self.timeout_secs));
        cmd.args(args.iter().map(AsRef::as_ref));
        let out = cmd.output().await.map_err(|source| OvsError::Spawn {
            program: self.program.clone(),
            source,
        })?;
        if !out.status.success() {
            return Err(OvsError::Failed {
                args: args.iter().map(AsRef::as_ref).collect::<Vec<_>>().join(" "),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Reads the row of `table` whose name is `name` (None when there is none).
    pub async fn find(
        &self,
        table: &str,
        name: &str,
        columns: &[&str],
    ) -> Result<Option<Record>, OvsError> {
        let cols = format!("--columns={}", columns.join(","));
        let cond = format!("name={}", quote(name));
        let out = self
            .run(&["--format=json", "--data=json", &cols, "find", table, &cond])
            .await?;
        let mut rows = parse_table(&out, &format!("{table} {name}"))?;
        Ok(if rows.is_empty() {
            None
        } else {
            Some(rows.swap_remove(0))
        })
    }

    /// Names of the ports of `bridge` (empty when the bridge does not exist).
    pub async fn list_ports(&self, bridge: &str) -> Result<Vec<String>, OvsError> {
        if !self.bridge_exists(bridge).await? {
            return Ok(Vec::new());
        }
        let out = self.run(&["list-ports", bridge]).await?;
        Ok(out.lines().map(str::to_owned).collect())
    }

    /// Whether `bridge` exists.
    pub async fn bridge_exists(&self, bridge: &str) -> Result<bool, OvsError> {
        Ok(self.find("Bridge", bridge, &["name"]).await?.is_some())
    }

    /// The Controller rows of `bridge` (none when it has none or does not exist).
    pub async fn controllers(&self, bridge: &str) -> Result<Vec<ControllerRow>, OvsError> {
        let Some(br) = self.find("Bridge", bridge, &["controller"]).await? else {
            return Ok(Vec::new());
        };
        let mine = br.get("controller").map(ovs_uuids).unwrap_or_default();
        if mine.is_empty() {
            return Ok(Vec::new());
        }
        let out = self
            .run(&[
                "--format=json",
                "--data=json",
                "--columns=_uuid,target,max_backoff",
                "list",
                "Controller",
            ])
            .await?;
        let rows = parse_table(&out, "Controller")?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let uuid = r.get("_uuid").map(ovs_uuids)?.pop()?;
                mine.contains(&uuid).then(|| ControllerRow {
                    uuid,
                    target: r
                        .get("target")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    max_backoff: r.get("max_backoff").and_then(opt_int),
                })
            })
            .collect())
    }

    /// The interface's `ofport` (None while OVS has not assigned one).
    pub async fn ofport(&self, iface: &str) -> Result<Option<i64>, OvsError> {
        let rec = self.find("Interface", iface, &["ofport"]).await?;
        Ok(rec.as_ref().and_then(|r| r.get("ofport")).and_then(opt_int))
    }

    /// Waits until OVS assigned `iface` an OpenFlow port; errors if OVS reports -1 (it could
    /// not open the device) or on timeout.
    pub async fn wait_ofport(&self, iface: &str, timeout: Duration) -> Result<u32, OvsError> {
        let t0 = Instant::now();
        loop {
            match self.ofport(iface).await? {
                Some(p) if p > 0 => {
                    return u32::try_from(p).map_err(|_| OvsError::Interface {
                        iface: iface.to_owned(),
                        detail: format!("ofport {p} out of range"),
                    })
                }
                Some(-1) => {
                    let rec = self.find("Interface", iface, &["error"]).await?;
                    let why = rec
                        .and_then(|r| r.get("error").cloned())
                        .map(|v| v.to_string())
                        .unwrap_or_default();
                    return Err(OvsError::Interface {
                        iface: iface.to_owned(),
                        detail: format!("OVS could not open it (ofport -1): {why}"),
                    });
                }
                _ if t0.elapsed() > timeout => {
                    return Err(OvsError::Interface {
                        iface: iface.to_owned(),
                        detail: format!("no ofport after {timeout:?}"),
                    })
                }
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }

    /// Adds `port` to `bridge` with the given external_ids (one transaction).
    pub async fn add_port_with_ids(
        &self,
        bridge: &str,
        port: &str,
        external_ids: &[(&str, &str)],
        ofport_request: Option<u32>,
    ) -> Result<(), OvsError> {
        let mut args: Vec<String> = vec![
            "--may-exist".into(),
            "add-port".into(),
            bridge.into(),
            port.into(),
        ];
        if !external_ids.is_empty() || ofport_request.is_some() {
            args.extend(["--", "set", "Interface", port].map(String::from));
            args.extend(
                external_ids
                    .iter()
                    .map(|(k, v)| format!("external_ids:{}={}", quote(k), quote(v))),
            );
            args.extend(ofport_request.map(|p| format!("ofport_request={p}")));
        }
        self.run(&args).await.map(|_| ())
    }

    /// Removes `port` from `bridge` if it is there.
    pub async fn del_port(&self, bridge: &str, port: &str) -> Result<(), OvsError> {
        self.run(&["--if-exists", "del-port", bridge, port])
            .await
            .map(|_| ())
    }

    /// Every Interface that carries a flowmesh sandbox external id.
    pub async fn pod_ports(&self) -> Result<Vec<PodPort>, OvsError> {
        let out = self
            .run(&[
                "--format=json",
                "--data=json",
                "--columns=name,external_ids,ofport",
                "list",
                "Interface",
            ])
            .await?;
        let rows = parse_table(&out, "Interface list")?;
        Ok(rows
            .into_iter()
            .filter_map(|r| {
                let name = r.get("name")?.as_str()?.to_owned();
                let external_ids = r.get("external_ids").map(ovs_map).unwrap_or_default();
                let ofport = r
                    .get("ofport")
                    .and_then(opt_int)
                    .and_then(|p| u32::try_from(p).ok())
                    .filter(|p| *p > 0);
                external_ids.contains_key(ext::SANDBOX).then_some(PodPort {
                    name,
                    external_ids,
                    ofport,
                })
            })
            .collect())
    }
}

/// Parses `--format=json` table output into records.
pub fn parse_table(text: &str, what: &str) -> Result<Vec<Record>, OvsError> {
    let bad = |detail: String| OvsError::Parse {
        what: what.to_owned(),
        detail,
    };
    let v: Value = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    let headings: Vec<String> = v
        .get("headings")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no headings".into()))?
        .iter()
        .filter_map(|h| h.as_str().map(str::to_owned))
        .collect();
    let data = v
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no data".into()))?;
    Ok(data
        .iter()
        .filter_map(Value::as_array)
        .map(|row| headings.iter().cloned().zip(row.iter().cloned()).collect())
        .collect())
}

/// An OVSDB map (`["map", [[k, v], ...]]`) of strings (other atoms as JSON text).
pub fn ovs_map(v: &Value) -> BTreeMap<String, String> {
    let atom = |a: &Value| a.as_str().map_or_else(|| a.to_string(), str::to_owned);
    match v.as_array().map(Vec::as_slice) {
        Some([tag, Value::Array(pairs)]) if tag == "map" => pairs
            .iter()
            .filter_map(|p| match p.as_array().map(Vec::as_slice) {
                Some([k, v]) => Some((atom(k), atom(v))),
                _ => None,
            })
            .collect(),
        _ => BTreeMap::new(),
    }
}

/// The UUIDs of an OVSDB reference or set of references (`["uuid", U]`,
/// `["set", [["uuid", U], ...]]`).
pub fn ovs_uuids(v: &Value) -> Vec<String> {
    let one = |a: &Value| match a.as_array().map(Vec::as_slice) {
        Some([tag, Value::String(u)]) if tag == "uuid" => Some(u.clone()),
        _ => None,
    };
    match v.as_array().map(Vec::as_slice) {
        Some([tag, Value::Array(items)]) if tag == "set" => items.iter().filter_map(one).collect(),
        _ => one(v).into_iter().collect(),
    }
}

/// An OVSDB set of strings (a bare atom is a one-element set).
pub fn ovs_strings(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => match a.as_slice() {
            [tag, Value::Array(items)] if tag == "set" => items
                .iter()
                .filter_map(|i| i.as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// An optional OVSDB integer (`["set", []]` is none).
pub fn opt_int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::Array(a) => match a.as_slice() {
            [tag, Value::Array(items)] if tag == "set" => items.first().and_then(Value::as_i64),
            _ => None,
        },
        _ => None,
    }
}

/// Tables whose deleted rows mean something of the node set-up vanished behind the shim's
/// back (br0 itself, vxlan0, tun0, a pod's port).
pub const WATCHED_TABLES: [&str; 2] = ["Bridge", "Port"];

/// Follows OVSDB (`ovsdb-client monitor`, on the same server `ovs-vsctl` uses) and wakes
/// `changed` whenever a row of `table` is deleted, so the node set-up is repaired at once
/// instead of at the next periodic check. A monitor that ends (ovsdb-server restarted, the
/// tool missing) is started again after a pause; runs until the process ends.
pub async fn watch_deletions(table: &'static str, changed: std::sync::Arc<tokio::sync::Notify>) {
    use tokio::io::AsyncBufReadExt;
    loop {
        let child = Command::new("ovsdb-client")
            .args([
                "monitor",
                "Open_vSwitch",
                table,
                "name,!initial,!insert,!modify",
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn();
        match child {
            Ok(mut child) => {
                if let Some(out) = child.stdout.take() {
                    let mut lines = tokio::io::BufReader::new(out).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        // Rows come as "<uuid> delete <name>"; the headings are not news.
                        if line.split_whitespace().nth(1) == Some("delete") {
                            changed.notify_one();
                        }
                    }
                }
                let _ = child.kill().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, table, "cannot run ovsdb-client monitor; the node set-up is checked at its interval only");
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ovsdb_json_values_decode() {
        let text = r#"{"data":[["br0",["map",[["datapath-id","0000000000000001"]]],["set",["OpenFlow13"]],["set",[]],"secure"]],"headings":["name","other_config","protocols","datapath_type","fail_mode"]}"#;
        let rows = parse_table(text, "t").expect("parses");
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!(
            ovs_map(&r["other_config"])
                .get("datapath-id")
                .map(String::as_str),
            Some("0000000000000001")
        );
        assert_eq!(ovs_strings(&r["protocols"]), vec!["OpenFlow13".to_owned()]);
        assert_eq!(ovs_strings(&r["fail_mode"]), vec!["secure".to_owned()]);
        assert!(ovs_strings(&r["datapath_type"]).is_empty());
        assert_eq!(opt_int(&json!(["set", []])), None);
        assert_eq!(opt_int(&json!(7)), Some(7));
        assert!(parse_table("{}", "t").is_err());
        assert_eq!(quote("a\"b"), r#""a\"b""#);
    }
}
