//! The client: one lazily connected channel per member, requests to the pinned member, and
//! failover when a member is gone.

use crate::ops::{GetOptions, PutOptions, Txn, WatchOptions};
use crate::pb;
use crate::pb::kv_client::KvClient;
use crate::pb::lease_client::LeaseClient;
use crate::pb::watch_client::WatchClient;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// How to reach etcd.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// Deadline of one unary request (and of opening a stream), failovers included.
    pub request_timeout: Duration,
    /// Deadline of one TCP (and TLS) connection attempt.
    pub connect_timeout: Duration,
    /// HTTP/2 PING interval on a connection with open streams. etcd's server refuses pings
    /// more often than its `--grpc-keepalive-min-time` (default 5 s) by closing the connection.
    pub keep_alive_interval: Duration,
    /// How long a PING may stay unanswered before the connection is taken as dead.
    pub keep_alive_timeout: Duration,
    /// Ask members to refuse requests while they have no raft leader (`hasleader` metadata):
    /// a member cut off from the quorum answers at once instead of hanging.
    pub require_leader: bool,
    /// CA certificate (PEM) of the members' server certificates.
    pub ca_pem: Option<Vec<u8>>,
    /// Client certificate and key (PEM).
    pub identity_pem: Option<(Vec<u8>, Vec<u8>)>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(1),
            keep_alive_interval: Duration::from_secs(10),
            keep_alive_timeout: Duration::from_secs(3),
            require_leader: true,
            ca_pem: None,
            identity_pem: None,
        }
    }
}

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The endpoints or TLS settings are unusable.
    #[error("{0}")]
    Config(String),
    /// etcd (or the connection to it) answered with an error.
    #[error("etcd {member}: {message} ({code:?})")]
    Status {
        /// The member's URL.
        member: String,
        /// The gRPC code.
        code: tonic::Code,
        /// etcd's message, or the transport's.
        message: String,
    },
    /// No answer before the deadline: a write may still be applied later.
    #[error("etcd {member}: no answer within the deadline of {ms} ms")]
    Timeout {
        /// The member last tried.
        member: String,
        /// The deadline.
        ms: u128,
    },
    /// A stream ended.
    #[error("etcd stream closed: {0}")]
    Closed(String),
}

impl Error {
    /// Whether the request ran out of time (its outcome is unknown for a write).
    pub fn is_timeout(&self) -> bool {
        match self {
            Error::Timeout { .. } => true,
            Error::Status { code, .. } => *code == tonic::Code::DeadlineExceeded,
            _ => false,
        }
    }
}

/// What a failure proves about the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failure {
    /// It never reached a member, or the member refused it before handling it (no leader):
    /// sending it again to another member is safe for any request.
    NotApplied,
    /// The connection broke or the member is unavailable: it may have been applied.
    Broken,
    /// etcd's answer (a real error): final.
    Final,
}

fn classify(s: &tonic::Status) -> Failure {
    let mut text = s.message().to_lowercase();
    let mut source = std::error::Error::source(s);
    while let Some(e) = source {
        text.push(' ');
        text.push_str(&e.to_string().to_lowercase());
        source = e.source();
    }
    if text.contains("no leader")
        || text.contains("tcp connect error")
        || text.contains("error trying to connect")
        || text.contains("connection refused")
        || text.contains("client error (connect)")
    {
        return Failure::NotApplied;
    }
    match s.code() {
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled => Failure::Broken,
        tonic::Code::Internal if text.contains("h2") || text.contains("connection") => {
            Failure::Broken
        }
        _ => Failure::Final,
    }
}

/// Which failures a request may be sent again after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resend {
    /// Reads, stream openings, lease grants and revocations: also after a broken connection.
    Idempotent,
    /// Writes: only when the failure proves they were not applied.
    Write,
}

struct Member {
    url: String,
    channel: Channel,
}

struct Inner {
    members: Vec<Member>,
    /// The member requests go to.
    pinned: AtomicUsize,
    opts: ConnectOptions,
}

/// An etcd client (cheap to clone: clones share the connections and the pin).
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("members", &self.endpoints())
            .field("pinned", &self.inner.pinned.load(Ordering::Relaxed))
            .finish()
    }
}

impl Client {
    /// A client of these members (`http://` or `https://` URLs). Connects lazily: an
    /// unreachable cluster shows in the first request. Needs a Tokio runtime.
    pub fn connect(endpoints: &[String], opts: ConnectOptions) -> Result<Client, Error> {
        if endpoints.is_empty() {
            return Err(Error::Config("no etcd endpoint given".into()));
        }
        let tls = if opts.ca_pem.is_some() || opts.identity_pem.is_some() {
            let mut tls = ClientTlsConfig::new();
            if let Some(ca) = &opts.ca_pem {
                tls = tls.ca_certificate(Certificate::from_pem(ca));
            }
            if let Some((cert, key)) = &opts.identity_pem {
                tls = tls.identity(Identity::from_pem(cert, key));
            }
            Some(tls)
        } else {
            None
        };
        let mut members = Vec::with_capacity(endpoints.len());
        for url in endpoints {
            let mut ep = Endpoint::from_shared(url.clone())
                .map_err(|e| Error::Config(format!("etcd endpoint {url:?}: {e}")))?
                .connect_timeout(opts.connect_timeout)
                .http2_keep_alive_interval(opts.keep_alive_interval)
                .keep_alive_timeout(opts.keep_alive_timeout)
                .keep_alive_while_idle(false)
                .tcp_nodelay(true);
            if let Some(tls) = &tls {
                ep = ep
                    .tls_config(tls.clone())
                    .map_err(|e| Error::Config(format!("etcd endpoint {url}: TLS: {e}")))?;
            }
            members.push(Member {
                url: url.clone(),
                channel: ep.connect_lazy(),
            });
        }
        Ok(Client {
            inner: Arc::new(Inner {
                members,
                pinned: AtomicUsize::new(0),
                opts,
            }),
        })
    }

    /// The members' URLs.
    pub fn endpoints(&self) -> Vec<String> {
        self.inner.members.iter().map(|m| m.url.clone()).collect()
    }

    /// The URL of the member requests go to now.
    pub fn pinned(&self) -> String {
        let i = self.inner.pinned.load(Ordering::Relaxed);
        self.inner.members[i].url.clone()
    }

    /// Send the next requests to another member if `url` is the pinned one (a caller saw it
    /// stop answering, e.g. a stream that went silent).
    pub fn avoid(&self, url: &str) {
        let i = self.inner.pinned.load(Ordering::Relaxed);
        if self.inner.members[i].url == url {
            self.unpin(i);
        }
    }

    /// Move the pin off member `i` (if no one moved it meanwhile).
    fn unpin(&self, i: usize) {
        let n = self.inner.members.len();
        if n > 1
            && self
                .inner
                .pinned
                .compare_exchange(i, (i + 1) % n, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::debug!(from = %self.inner.members[i].url, to = %self.inner.members[(i + 1) % n].url, "etcd: moving to another member");
        }
    }

    fn request<T>(&self, msg: T, deadline: Instant) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        r.set_timeout(deadline.saturating_duration_since(Instant::now()));
        if self.inner.opts.require_leader {
            r.metadata_mut().insert(
                "hasleader",
                tonic::metadata::MetadataValue::from_static("true"),
            );
        }
        r
    }

    /// Send one request to the pinned member, and again to the next ones while the failure
    /// allows it, all within the request deadline.
    async fn call<T, F, Fut>(&self, resend: Resend, mut send: F) -> Result<T, Error>
    where
        F: FnMut(Channel, Instant) -> Fut,
        Fut: Future<Output = Result<T, tonic::Status>>,
    {
        let timeout = self.inner.opts.request_timeout;
        let deadline = Instant::now() + timeout;
        let n = self.inner.members.len();
        let mut attempt = 0u32;
        loop {
            let i = self.inner.pinned.load(Ordering::Relaxed);
            let member = &self.inner.members[i];
            let status =
                match tokio::time::timeout_at(deadline, send(member.channel.clone(), deadline))
                    .await
                {
                    Ok(Ok(v)) => return Ok(v),
                    Ok(Err(s)) => s,
                    Err(_) => {
                        // The member may be stopped or cut off: the next request tries another.
                        self.unpin(i);
                        return Err(Error::Timeout {
                            member: member.url.clone(),
                            ms: timeout.as_millis(),
                        });
                    }
                };
            let failure = classify(&status);
            let again = match failure {
                Failure::NotApplied => true,
                Failure::Broken => resend == Resend::Idempotent,
                Failure::Final => false,
            };
            if failure != Failure::Final {
                self.unpin(i);
            }
            attempt += 1;
            // Every member twice at most: a whole cluster down fails fast.
            if !again || attempt as usize >= 2 * n || Instant::now() >= deadline {
                if status.code() == tonic::Code::DeadlineExceeded {
                    return Err(Error::Timeout {
                        member: member.url.clone(),
                        ms: timeout.as_millis(),
                    });
                }
                return Err(Error::Status {
                    member: member.url.clone(),
                    code: status.code(),
                    message: status.message().to_string(),
                });
            }
            // Once round the members at once; then a short pause per attempt.
            if attempt as usize >= n {
                tokio::time::sleep(Duration::from_millis(20 * attempt as u64)).await;
            }
        }
    }

    /// Read a key, or every key under a prefix.
    pub async fn get(
        &self,
        key: impl Into<Vec<u8>>,
        opts: Option<GetOptions>,
    ) -> Result<pb::RangeResponse, Error> {
        let req = opts.unwrap_or_default().request(key.into());
        self.call(Resend::Idempotent, |ch, deadline| {
            let r = self.request(req.clone(), deadline);
            async move { KvClient::new(ch).range(r).await.map(|r| r.into_inner()) }
        })
        .await
    }

    /// Write a key.
    pub async fn put(
        &self,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        opts: Option<PutOptions>,
    ) -> Result<pb::PutResponse, Error> {
        let req = pb::PutRequest {
            key: key.into(),
            value: value.into(),
            lease: opts.unwrap_or_default().lease(),
        };
        self.call(Resend::Write, |ch, deadline| {
            let r = self.request(req.clone(), deadline);
            async move { KvClient::new(ch).put(r).await.map(|r| r.into_inner()) }
        })
        .await
    }

    /// Run a transaction.
    pub async fn txn(&self, txn: Txn) -> Result<pb::TxnResponse, Error> {
        let req = txn.0;
        self.call(Resend::Write, |ch, deadline| {
            let r = self.request(req.clone(), deadline);
            async move { KvClient::new(ch).txn(r).await.map(|r| r.into_inner()) }
        })
        .await
    }

    /// A lease of `ttl` seconds (etcd may raise it to its minimum: read the answer's TTL).
    pub async fn lease_grant(&self, ttl: i64) -> Result<pb::LeaseGrantResponse, Error> {
        let req = pb::LeaseGrantRequest { ttl, id: 0 };
        self.call(Resend::Idempotent, |ch, deadline| {
            let r = self.request(req, deadline);
            async move {
                LeaseClient::new(ch)
                    .lease_grant(r)
                    .await
                    .map(|r| r.into_inner())
            }
        })
        .await
    }

    /// End a lease now (its keys go with it).
    pub async fn lease_revoke(&self, id: i64) -> Result<pb::LeaseRevokeResponse, Error> {
        let req = pb::LeaseRevokeRequest { id };
        self.call(Resend::Idempotent, |ch, deadline| {
            let r = self.request(req, deadline);
            async move {
                LeaseClient::new(ch)
                    .lease_revoke(r)
                    .await
                    .map(|r| r.into_inner())
            }
        })
        .await
    }

    /// Open a keep-alive stream for a lease on the pinned member. The first renewal is sent
    /// with the opening (etcd answers the stream only once it has a request): its answer is
    /// the stream's first message.
    pub async fn lease_keep_alive(
        &self,
        id: i64,
    ) -> Result<(LeaseKeeper, LeaseKeepAliveStream), Error> {
        self.call(Resend::Idempotent, |ch, deadline| {
            let (tx, rx) = mpsc::channel(4);
            let first = tx.try_send(pb::LeaseKeepAliveRequest { id });
            let r = self.request(ReceiverStream::new(rx), deadline);
            async move {
                first.map_err(|e| tonic::Status::internal(e.to_string()))?;
                let stream = LeaseClient::new(ch).lease_keep_alive(r).await?.into_inner();
                Ok((
                    LeaseKeeper { tx, id },
                    LeaseKeepAliveStream { inner: stream },
                ))
            }
        })
        .await
    }

    /// Watch a key (or prefix) on the pinned member. The stream's first message says it was
    /// created (or cancelled).
    pub async fn watch(
        &self,
        key: impl Into<Vec<u8>>,
        opts: Option<WatchOptions>,
    ) -> Result<WatchStream, Error> {
        let create = opts.unwrap_or_default().request(key.into());
        self.call(Resend::Idempotent, |ch, deadline| {
            let (tx, rx) = mpsc::channel(1);
            let first = tx.try_send(create.clone());
            let r = self.request(ReceiverStream::new(rx), deadline);
            async move {
                first.map_err(|e| tonic::Status::internal(e.to_string()))?;
                let stream = WatchClient::new(ch).watch(r).await?.into_inner();
                Ok(WatchStream {
                    _requests: tx,
                    inner: stream,
                })
            }
        })
        .await
    }
}

/// Sends renewals of one lease on its keep-alive stream.
#[derive(Debug)]
pub struct LeaseKeeper {
    tx: mpsc::Sender<pb::LeaseKeepAliveRequest>,
    id: i64,
}

impl LeaseKeeper {
    /// Send one renewal (its answer arrives on the stream).
    pub async fn keep_alive(&mut self) -> Result<(), Error> {
        self.tx
            .send(pb::LeaseKeepAliveRequest { id: self.id })
            .await
            .map_err(|_| Error::Closed("lease keep-alive stream".into()))
    }
}

/// The answers to a lease's renewals.
#[derive(Debug)]
pub struct LeaseKeepAliveStream {
    inner: tonic::Streaming<pb::LeaseKeepAliveResponse>,
}

impl LeaseKeepAliveStream {
    /// The next answer; None when etcd closed the stream.
    pub async fn message(&mut self) -> Result<Option<pb::LeaseKeepAliveResponse>, Error> {
        self.inner.message().await.map_err(|s| Error::Status {
            member: String::new(),
            code: s.code(),
            message: s.message().to_string(),
        })
    }
}

/// A watch's responses.
#[derive(Debug)]
pub struct WatchStream {
    /// Held so the request side stays open (closing it ends the watch).
    _requests: mpsc::Sender<pb::WatchRequest>,
    inner: tonic::Streaming<pb::WatchResponse>,
}

impl WatchStream {
    /// The next response; None when etcd closed the stream.
    pub async fn message(&mut self) -> Result<Option<pb::WatchResponse>, Error> {
        self.inner.message().await.map_err(|s| Error::Status {
            member: String::new(),
            code: s.code(),
            message: s.message().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_that_prove_nothing_was_applied_allow_any_resend() {
        let refused =
            tonic::Status::unavailable("tcp connect error: Connection refused (os error 111)");
        assert_eq!(classify(&refused), Failure::NotApplied);
        let no_leader = tonic::Status::unavailable("etcdserver: no leader");
        assert_eq!(classify(&no_leader), Failure::NotApplied);
        let broken = tonic::Status::unavailable("error reading a body from connection");
        assert_eq!(classify(&broken), Failure::Broken);
        let conflict = tonic::Status::failed_precondition("etcdserver: requested lease not found");
        assert_eq!(classify(&conflict), Failure::Final);
    }

    #[tokio::test]
    async fn a_cluster_with_no_member_listening_fails_with_unavailable_after_trying_each_member() {
        // Port 9 (discard) on loopback: nothing listens there in a test sandbox, so every
        // connection is refused at once.
        let eps = vec![
            "http://127.0.0.1:9".to_string(),
            "http://127.0.0.2:9".to_string(),
        ];
        let c = Client::connect(&eps, ConnectOptions::default()).expect("client");
        let e = c.get("k", None).await.expect_err("no member");
        assert!(
            matches!(
                e,
                Error::Status {
                    code: tonic::Code::Unavailable,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(
            c.pinned(),
            eps[0],
            "two rounds over two members end where they began"
        );
    }

    #[test]
    fn endpoints_must_be_urls() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let _g = rt.enter();
        assert!(Client::connect(&[], ConnectOptions::default()).is_err());
        assert!(Client::connect(&["not a url".to_string()], ConnectOptions::default()).is_err());
    }
}
