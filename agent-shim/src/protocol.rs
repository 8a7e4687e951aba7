//! The plugin ↔ shim protocol on the CNI unix socket.
//!
//! One request per connection: the plugin connects, writes one JSON [`ShimRequest`], shuts
//! down its write half (EOF ends the request), and reads one JSON [`ShimResponse`] until the
//! shim closes the connection. Each message is at most [`MAX_MESSAGE`] bytes. The socket's
//! directory is mode 0700 and owned by root, so only root can connect.
//!
//! ```text
//! → {"command":"ADD","containerId":"c1","netns":"/var/run/netns/p","ifname":"eth0",
//!    "args":{"K8S_POD_NAMESPACE":"ns","K8S_POD_NAME":"web"},"config":{...stdin...}}
//! ← {"status":"ok","result":{...CNI result...}}      (result is null for DEL/CHECK/STATUS/GC)
//! ← {"status":"error","code":11,"msg":"...","details":"..."}
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cni::{CniError, Command};

/// Default path of the shim's CNI socket.
pub const DEFAULT_SOCKET: &str = "/var/run/flowmesh/cni.sock";
/// Environment variable overriding the socket path for the plugin.
pub const SOCKET_ENV: &str = "FLOWMESH_CNI_SOCKET";
/// Largest request or response accepted.
pub const MAX_MESSAGE: u64 = 1 << 20;

/// One CNI invocation forwarded to the shim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShimRequest {
    /// CNI_COMMAND (never VERSION: the plugin answers that itself).
    pub command: Command,
    /// CNI_CONTAINERID.
    #[serde(default)]
    pub container_id: String,
    /// CNI_NETNS.
    #[serde(default)]
    pub netns: String,
    /// CNI_IFNAME.
    #[serde(default)]
    pub ifname: String,
    /// CNI_ARGS.
    #[serde(default)]
    pub args: BTreeMap<String, String>,
    /// The network configuration from stdin.
    pub config: Value,
}

/// The shim's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum ShimResponse {
    /// Success; `result` is the CNI result JSON for ADD, null otherwise.
    Ok {
        /// What the plugin prints on stdout.
        result: Option<Value>,
    },
    /// Failure, as a CNI error.
    Error(CniError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_round_trip_in_the_documented_shape() {
        let req = ShimRequest {
            command: Command::Add,
            container_id: "c1".into(),
            netns: "/var/run/netns/p".into(),
            ifname: "eth0".into(),
            args: [("K8S_POD_NAME".to_owned(), "web".to_owned())].into(),
            config: json!({"cniVersion":"1.0.0"}),
        };
        let text = serde_json::to_value(&req).expect("encode");
        assert_eq!(text["command"], "ADD");
        assert_eq!(text["containerId"], "c1");
        let back: ShimRequest = serde_json::from_value(text).expect("decode");
        assert_eq!(back, req);
        let err = ShimResponse::Error(CniError::new(11, "m", "d"));
        assert_eq!(
            serde_json::to_value(&err).expect("encode"),
            json!({"status":"error","code":11,"msg":"m","details":"d"})
        );
        let ok: ShimResponse =
            serde_json::from_value(json!({"status":"ok","result":null})).expect("decode");
        assert_eq!(ok, ShimResponse::Ok { result: None });
    }
}
