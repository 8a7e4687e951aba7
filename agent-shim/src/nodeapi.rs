//! The controller's node API as the shim uses it: register the node, attach and detach pods.
//! Transport failures map to CNI "try again later"; refusals to flowmesh's node-API code.

use std::time::Duration;

use proto::node::node_api_client::NodeApiClient;
use proto::node::{
    AttachPodRequest, DetachPodRequest, EgressAssignments, NodeConfig, PodNetwork,
    RegisterNodeRequest, WatchEgressRequest,
};
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

use crate::cni::{code, CniError};

/// A node API client (cheap to clone; connects lazily and reconnects by itself).
#[derive(Debug, Clone)]
pub struct NodeApi {
    client: NodeApiClient<Channel>,
    url: String,
}

/// A failed node API call.
#[derive(Debug, Clone, thiserror::Error)]
#[error("node API {op} at {url}: {status}")]
pub struct NodeApiError {
    /// The RPC.
    pub op: &'static str,
    /// Controller URL.
    pub url: String,
    /// gRPC status.
    pub status: tonic::Status,
}

impl NodeApiError {
    /// Whether retrying later may succeed (the controller is unreachable or slow).
    pub fn is_transient(&self) -> bool {
        matches!(
            self.status.code(),
            Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Cancelled
                | Code::Unknown
                | Code::Aborted
        )
    }

    /// As a CNI error: 11 (try again later) when transient, 103 otherwise.
    pub fn to_cni(&self) -> CniError {
        let (c, msg) = if self.is_transient() {
            (
                code::TRY_AGAIN,
                format!("controller unreachable ({})", self.op),
            )
        } else {
            (code::NODE_API, format!("controller refused {}", self.op))
        };
        CniError::new(c, msg, self.to_string())
    }
}

/// Client TLS from PEM files: the CA of the controller's certificate, this node's certificate
/// and key (read now, so a bad path fails at start with its name).
pub fn client_tls(
    ca: &std::path::Path,
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<tonic::transport::ClientTlsConfig, String> {
    let read = |flag: &str, p: &std::path::Path| {
        std::fs::read(p).map_err(|e| format!("{flag} {}: {e}", p.display()))
    };
    Ok(tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(read("--ca", ca)?))
        .identity(tonic::transport::Identity::from_pem(
            read("--cert", cert)?,
            read("--key", key)?,
        )))
}

/// Whether a call failed before reaching any controller (a dead replica's endpoint refused
/// the connection): sending it again is safe and goes to another replica.
fn never_sent(s: &tonic::Status) -> bool {
    s.code() == Code::Unavailable
        && [
            "tcp connect error",
            "Connection refused",
            "error trying to connect",
        ]
        .iter()
        .any(|w| s.message().contains(w))
}

/// Run a call, again (up to a few times) while it fails before reaching a controller.
async fn unsent_retry<T, F, Fut>(mut f: F) -> Result<T, tonic::Status>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let mut attempt = 0u64;
    loop {
        match f().await {
            Err(s) if never_sent(&s) && attempt < 8 => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(5 * attempt)).await;
            }
            r => return r,
        }
    }
}

impl NodeApi {
    /// A client for `url` (`http://IP:PORT`, or `https://` with `tls`; several controller
    /// replicas' URLs comma-separated: each call goes to a live one); `timeout` bounds each
    /// call.
    pub fn new(
        url: &str,
        timeout: Duration,
        tls: Option<tonic::transport::ClientTlsConfig>,
    ) -> Result<Self, tonic::transport::Error> {
        let mut endpoints = Vec::new();
        for u in url.split(',').map(str::trim).filter(|u| !u.is_empty()) {
            let mut ep = Endpoint::from_shared(u.to_owned())?
                .connect_timeout(Duration::from_secs(3))
                .timeout(timeout);
            if let Some(t) = &tls {
                ep = ep.tls_config(t.clone())?;
            }
            endpoints.push(ep);
        }
        let channel = match endpoints.len() {
            // One controller: a plain channel (reconnects by itself).
            0 | 1 => match endpoints.pop() {
                Some(ep) => ep.connect_lazy(),
                None => Endpoint::from_shared(url.to_owned())?.connect_lazy(),
            },
            // Replicas: balanced over the live ones (a dead one is skipped once its
            // connection fails).
            _ => Channel::balance_list(endpoints.into_iter()),
        };
        Ok(NodeApi {
            client: NodeApiClient::new(channel),
            url: url.to_owned(),
        })
    }

    fn err(&self, op: &'static str) -> impl FnOnce(tonic::Status) -> NodeApiError + '_ {
        move |status| NodeApiError {
            op,
            url: self.url.clone(),
            status,
        }
    }

    /// RegisterNode.
    pub async fn register(&self, req: RegisterNodeRequest) -> Result<NodeConfig, NodeApiError> {
        unsent_retry(|| {
            let mut c = self.client.clone();
            let r = req.clone();
            async move { c.register_node(r).await }
        })
        .await
        .map(tonic::Response::into_inner)
        .map_err(self.err("RegisterNode"))
    }

    /// AttachPod.
    pub async fn attach(&self, req: AttachPodRequest) -> Result<PodNetwork, NodeApiError> {
        unsent_retry(|| {
            let mut c = self.client.clone();
            let r = req.clone();
            async move { c.attach_pod(r).await }
        })
        .await
        .map(tonic::Response::into_inner)
        .map_err(self.err("AttachPod"))
    }

    /// DetachPod; returns whether the pod existed.
    pub async fn detach(&self, req: DetachPodRequest) -> Result<bool, NodeApiError> {
        unsent_retry(|| {
            let mut c = self.client.clone();
            let r = req.clone();
            async move { c.detach_pod(r).await }
        })
        .await
        .map(|r| r.into_inner().existed)
        .map_err(self.err("DetachPod"))
    }

    /// WatchEgress: the stream of this node's egress IPs (see [`crate::egress`]).
    pub async fn watch_egress(
        &self,
        node: &str,
    ) -> Result<tonic::Streaming<EgressAssignments>, NodeApiError> {
        unsent_retry(|| {
            let mut c = self.client.clone();
            let r = WatchEgressRequest {
                node: node.to_owned(),
            };
            async move { c.watch_egress(r).await }
        })
        .await
        .map(tonic::Response::into_inner)
        .map_err(self.err("WatchEgress"))
    }

    /// WatchAudit: the stream of this node's audit-logging settings (see [`crate::audit`]).
    pub async fn watch_audit(
        &self,
        node: &str,
    ) -> Result<tonic::Streaming<proto::node::AuditSettings>, NodeApiError> {
        unsent_retry(|| {
            let mut c = self.client.clone();
            let r = proto::node::WatchAuditRequest {
                node: node.to_owned(),
            };
            async move { c.watch_audit(r).await }
        })
        .await
        .map(tonic::Response::into_inner)
        .map_err(self.err("WatchAudit"))
    }

    /// LookupPods: the pods behind `ips`.
    pub async fn lookup_pods(
        &self,
        node: &str,
        ips: Vec<String>,
    ) -> Result<Vec<proto::node::PodAddress>, NodeApiError> {
        unsent_retry(|| {
            let mut c = self.client.clone();
            let r = proto::node::LookupPodsRequest {
                node: node.to_owned(),
                ips: ips.clone(),
            };
            async move { c.lookup_pods(r).await }
        })
        .await
        .map(|r| r.into_inner().pods)
        .map_err(self.err("LookupPods"))
    }
}
