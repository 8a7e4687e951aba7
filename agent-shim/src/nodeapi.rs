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
///
/// With several controller replicas every call goes to one of them, the same one as long as it
/// answers (the first listed, then whichever answered last): never spread over the replicas.
/// On the Kubernetes datastore every replica stores what it is asked to in the API server,
/// which has no transactions; two replicas attaching pods on one node at once both plan from
/// the node's pod-IP cursor, one of them loses with a conflict, and under a burst of pod
/// creations (the NetworkPolicy e2e suite starts nine pods at once, several times over) most
/// attaches failed and kubelet backed off for minutes. One writer at a time has no conflicts;
/// a replica that cannot be reached is skipped, as before.
#[derive(Debug, Clone)]
pub struct NodeApi {
    endpoints: std::sync::Arc<[Endpoint]>,
    clients: std::sync::Arc<[NodeApiClient<Channel>]>,
    preferred: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    url: String,
}

/// How long a TCP connect to a replica may take. The kernel answers a connect whatever the
/// controller is doing, so a second is generous; a connect made while this node's link was down
/// is then tried again within about a second of the link coming back, not after the SYN's own
/// back-off (a retransmission 3 s after the first).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// HTTP/2 PINGs on every channel, answered or the connection is dropped: a connection that died
/// silently (this node's link went down, a middlebox forgot it) is found within
/// `KEEPALIVE_INTERVAL + KEEPALIVE_TIMEOUT`, and the next call connects afresh instead of
/// waiting behind TCP's retransmission back-off on the dead one. The same figures as the
/// controller's server side.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(2);

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

/// Run a call on the replicas' clients, starting with the preferred one: the next one (and
/// round again, up to a few times) while a call fails before reaching a controller, or a
/// standby refused it (a call only the leader serves: the standby did nothing). The replica
/// that answered becomes the preferred one.
async fn unsent_retry<T, F, Fut>(
    clients: &[NodeApiClient<Channel>],
    preferred: &std::sync::atomic::AtomicUsize,
    mut f: F,
) -> Result<T, tonic::Status>
where
    F: FnMut(NodeApiClient<Channel>) -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    use std::sync::atomic::Ordering;
    let n = clients.len().max(1);
    let start = preferred.load(Ordering::Relaxed) % n;
    let mut attempt = 0u64;
    loop {
        let i = (start + attempt as usize) % n;
        let Some(c) = clients.get(i) else {
            return Err(tonic::Status::invalid_argument("no controller URL"));
        };
        match f(c.clone()).await {
            Err(s)
                if (never_sent(&s) || proto::standby::is_refusal(&s)) && attempt < 8 * n as u64 =>
            {
                attempt += 1;
                // A pause only after every replica was tried once more.
                if attempt.is_multiple_of(n as u64) {
                    tokio::time::sleep(Duration::from_millis(5 * attempt)).await;
                }
            }
            r => {
                if r.is_ok() {
                    preferred.store(i, Ordering::Relaxed);
                }
                return r;
            }
        }
    }
}

/// One lazily connected channel per replica (each reconnects by itself).
fn lazy_clients(endpoints: &[Endpoint]) -> std::sync::Arc<[NodeApiClient<Channel>]> {
    endpoints
        .iter()
        .map(|ep| NodeApiClient::new(ep.connect_lazy()))
        .collect()
}

impl NodeApi {
    /// A client for `url` (`http://IP:PORT`, or `https://` with `tls`; several controller
    /// replicas' URLs comma-separated: each call goes to a live one, the same while it answers); `timeout` bounds each
    /// call.
    pub fn new(
        url: &str,
        timeout: Duration,
        tls: Option<tonic::transport::ClientTlsConfig>,
    ) -> Result<Self, tonic::transport::Error> {
        let mut endpoints = Vec::new();
        for u in url.split(',').map(str::trim).filter(|u| !u.is_empty()) {
            let mut ep = Endpoint::from_shared(u.to_owned())?
                .connect_timeout(CONNECT_TIMEOUT)
                .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
                .keep_alive_timeout(KEEPALIVE_TIMEOUT)
                .keep_alive_while_idle(true)
                .timeout(timeout);
            if let Some(t) = &tls {
                ep = ep.tls_config(t.clone())?;
            }
            endpoints.push(ep);
        }
        if endpoints.is_empty() {
            endpoints.push(Endpoint::from_shared(url.to_owned())?);
        }
        let endpoints: std::sync::Arc<[Endpoint]> = endpoints.into();
        Ok(NodeApi {
            clients: lazy_clients(&endpoints),
            endpoints,
            preferred: Default::default(),
            url: url.to_owned(),
        })
    }

    /// The same replicas on new connections (the preferred replica shared with `self`). A
    /// stream that broke or went silent is opened again on these: its old connection may have
    /// died with this node's link, and a call on it would wait for TCP to give up.
    pub fn fresh_connections(&self) -> NodeApi {
        NodeApi {
            clients: lazy_clients(&self.endpoints),
            endpoints: self.endpoints.clone(),
            preferred: self.preferred.clone(),
            url: self.url.clone(),
        }
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
        unsent_retry(&self.clients, &self.preferred, |mut c| {
            let r = req.clone();
            async move { c.register_node(r).await }
        })
        .await
        .map(tonic::Response::into_inner)
        .map_err(self.err("RegisterNode"))
    }

    /// AttachPod.
    pub async fn attach(&self, req: AttachPodRequest) -> Result<PodNetwork, NodeApiError> {
        unsent_retry(&self.clients, &self.preferred, |mut c| {
            let r = req.clone();
            async move { c.attach_pod(r).await }
        })
        .await
        .map(tonic::Response::into_inner)
        .map_err(self.err("AttachPod"))
    }

    /// DetachPod; returns whether the pod existed.
    pub async fn detach(&self, req: DetachPodRequest) -> Result<bool, NodeApiError> {
        unsent_retry(&self.clients, &self.preferred, |mut c| {
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
        unsent_retry(&self.clients, &self.preferred, |mut c| {
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
        unsent_retry(&self.clients, &self.preferred, |mut c| {
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
        unsent_retry(&self.clients, &self.preferred, |mut c| {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proto::node::node_api_server::{NodeApi as NodeApiService, NodeApiServer};
    use proto::node::DetachPodReply;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use tonic::{Request, Response, Status};

    /// A replica that counts the AttachPod calls it answered (the first field) and the
    /// WatchEgress streams it opened (the third); a standby (the second field) refuses
    /// WatchEgress as the controller's standbys do, a leader serves it: a list at once, then one
    /// every 200 ms with a 500 ms keepalive, for as long as the stream is open.
    #[derive(Clone, Default)]
    pub(crate) struct Replica(
        pub(crate) Arc<AtomicUsize>,
        pub(crate) bool,
        pub(crate) Arc<AtomicUsize>,
    );

    #[tonic::async_trait]
    impl NodeApiService for Replica {
        async fn register_node(
            &self,
            _: Request<RegisterNodeRequest>,
        ) -> Result<Response<NodeConfig>, Status> {
            Err(Status::unimplemented("not in this test"))
        }
        async fn attach_pod(
            &self,
            _: Request<AttachPodRequest>,
        ) -> Result<Response<PodNetwork>, Status> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(Response::new(PodNetwork::default()))
        }
        async fn detach_pod(
            &self,
            _: Request<DetachPodRequest>,
        ) -> Result<Response<DetachPodReply>, Status> {
            Err(Status::unimplemented("not in this test"))
        }
        type WatchEgressStream = tonic::codegen::BoxStream<EgressAssignments>;
        async fn watch_egress(
            &self,
            _: Request<WatchEgressRequest>,
        ) -> Result<Response<Self::WatchEgressStream>, Status> {
            if self.1 {
                return Err(proto::standby::refusal("r1", "a standby".into()));
            }
            self.2.fetch_add(1, Ordering::SeqCst);
            let lists = futures::stream::unfold(true, |first| async move {
                if !first {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                let list = EgressAssignments {
                    keepalive_ms: 500,
                    ..Default::default()
                };
                Some((Ok(list), false))
            });
            Ok(Response::new(Box::pin(lists)))
        }
        type WatchAuditStream = tonic::codegen::BoxStream<proto::node::AuditSettings>;
        async fn watch_audit(
            &self,
            _: Request<proto::node::WatchAuditRequest>,
        ) -> Result<Response<Self::WatchAuditStream>, Status> {
            Err(Status::unimplemented("not in this test"))
        }
        async fn lookup_pods(
            &self,
            _: Request<proto::node::LookupPodsRequest>,
        ) -> Result<Response<proto::node::LookupPodsReply>, Status> {
            Err(Status::unimplemented("not in this test"))
        }
    }

    /// Serves a replica on a loopback port until `stop` fires.
    pub(crate) async fn serve(r: Replica) -> (String, tokio::sync::oneshot::Sender<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let incoming = tonic::transport::server::TcpIncoming::from(listener);
            let _ = tonic::transport::Server::builder()
                .add_service(NodeApiServer::new(r))
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = rx.await;
                })
                .await;
        });
        (url, tx)
    }

    /// A TCP relay whose connections can be made to die silently, as when this node's link
    /// goes down: after [`Relay::freeze`] every connection open at that moment still takes
    /// bytes but forwards none, either way, and closes nothing; new connections work.
    pub(crate) struct Relay {
        pub(crate) url: String,
        conns: Arc<std::sync::Mutex<Vec<Arc<std::sync::atomic::AtomicBool>>>>,
    }

    impl Relay {
        pub(crate) async fn start(upstream: &str) -> Relay {
            let upstream: std::net::SocketAddr = upstream
                .trim_start_matches("http://")
                .parse()
                .expect("upstream address");
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let url = format!("http://{}", listener.local_addr().expect("address"));
            let conns: Arc<std::sync::Mutex<Vec<Arc<std::sync::atomic::AtomicBool>>>> =
                Arc::default();
            let list = conns.clone();
            tokio::spawn(async move {
                while let Ok((down, _)) = listener.accept().await {
                    let Ok(up) = tokio::net::TcpStream::connect(upstream).await else {
                        continue;
                    };
                    let dead = Arc::new(std::sync::atomic::AtomicBool::new(false));
                    list.lock().expect("relay list").push(dead.clone());
                    let (dr, dw) = down.into_split();
                    let (ur, uw) = up.into_split();
                    tokio::spawn(Relay::pipe(dr, uw, dead.clone()));
                    tokio::spawn(Relay::pipe(ur, dw, dead));
                }
            });
            Relay { url, conns }
        }

        async fn pipe(
            mut from: tokio::net::tcp::OwnedReadHalf,
            mut to: tokio::net::tcp::OwnedWriteHalf,
            dead: Arc<std::sync::atomic::AtomicBool>,
        ) {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = match from.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                if !dead.load(Ordering::SeqCst) && to.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }

        /// Every connection open now dies silently.
        pub(crate) fn freeze(&self) {
            for c in self.conns.lock().expect("relay list").iter() {
                c.store(true, Ordering::SeqCst);
            }
        }
    }

    #[tokio::test]
    async fn calls_stay_on_one_live_replica_and_move_on_when_it_is_gone() {
        let (a, b) = (Replica::default(), Replica::default());
        let (url_a, stop_a) = serve(a.clone()).await;
        let (url_b, _stop_b) = serve(b.clone()).await;
        let api = NodeApi::new(&format!("{url_a},{url_b}"), Duration::from_secs(5), None)
            .expect("client");
        for _ in 0..20 {
            api.attach(AttachPodRequest::default())
                .await
                .expect("attach");
        }
        // Not spread over the replicas: all on the first listed.
        assert_eq!(
            (a.0.load(Ordering::SeqCst), b.0.load(Ordering::SeqCst)),
            (20, 0)
        );

        // The first replica goes away: calls move to the second, and stay there.
        let _ = stop_a.send(());
        let moved = async {
            loop {
                if api.attach(AttachPodRequest::default()).await.is_ok()
                    && b.0.load(Ordering::SeqCst) > 0
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), moved)
            .await
            .expect("calls reach the second replica");
        let before = b.0.load(Ordering::SeqCst);
        for _ in 0..5 {
            api.attach(AttachPodRequest::default())
                .await
                .expect("attach");
        }
        assert_eq!(b.0.load(Ordering::SeqCst), before + 5);
    }

    #[tokio::test]
    async fn a_standby_s_refusal_sends_the_call_to_the_leader() {
        // The preferred replica (first listed) is a standby: WatchEgress reaches the leader,
        // which then stays the preferred replica for every call.
        let standby = Replica(Arc::default(), true, Arc::default());
        let leader = Replica::default();
        let (url_s, _stop_s) = serve(standby.clone()).await;
        let (url_l, _stop_l) = serve(leader.clone()).await;
        let api = NodeApi::new(&format!("{url_s},{url_l}"), Duration::from_secs(5), None)
            .expect("client");
        let mut stream = api
            .watch_egress("node1")
            .await
            .expect("the leader serves WatchEgress");
        assert!(stream.message().await.expect("message").is_some());
        api.attach(AttachPodRequest::default())
            .await
            .expect("attach");
        assert_eq!(
            (
                standby.0.load(Ordering::SeqCst),
                leader.0.load(Ordering::SeqCst)
            ),
            (0, 1)
        );
        // Any other UNAVAILABLE (the call may have been acted on) is not sent elsewhere.
        assert!(!proto::standby::is_refusal(&Status::unavailable("busy")));
    }
}
