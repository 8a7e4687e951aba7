//! The metrics endpoint is not open to the network: off loopback it needs TLS with client
//! certificates (`--metrics-tls-*`; certificates from the real `flowmeshctl certs lab`), where
//! only admin and read-only certificates read; no certificate, a foreign CA's certificate
//! and plaintext are refused; plaintext metrics on a non-loopback address are refused at
//! start; and the kubelet's probes have a health listener of their own (`--health-listen`)
//! that serves `/healthz` and `/readyz` only.

mod support;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use support::{http_get, Controller};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn pem_certs(path: &Path) -> Vec<CertificateDer<'static>> {
    let pem = std::fs::read(path).expect("read certificate");
    rustls_pemfile::certs(&mut &pem[..])
        .collect::<Result<Vec<_>, _>>()
        .expect("certificates")
}

/// `GET path` over TLS to `addr`, trusting `pki`'s CA and presenting `client` (`pki`, stem)
/// if given; the status line and body, or why it failed.
async fn https_get(
    addr: SocketAddr,
    ca: &Path,
    client: Option<(&Path, &str)>,
    path: &str,
) -> Result<String, String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in pem_certs(&ca.join("ca.pem")) {
        roots.add(c).expect("CA");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    let cfg = match client {
        Some((pki, stem)) => {
            let key_pem = std::fs::read(pki.join(format!("{stem}-key.pem"))).expect("key");
            let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut &key_pem[..])
                .expect("key pem")
                .expect("a key");
            builder
                .with_client_auth_cert(pem_certs(&pki.join(format!("{stem}.pem"))), key)
                .expect("client certificate")
        }
        None => builder.with_no_client_auth(),
    };
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let name = ServerName::try_from("127.0.0.1").expect("server name");
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    tls.write_all(req.as_bytes())
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut out = Vec::new();
    tls.read_to_end(&mut out)
        .await
        .map_err(|e| format!("read: {e}"))?;
    if out.is_empty() {
        return Err("no answer".into());
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_a_reader_certificate_and_health_has_its_own_listener() {
    let dir = tempfile::tempdir().expect("tmp");
    let pki = support::lab_pki(&dir.path().join("pki"), &["node-a"]);
    let foreign = support::lab_pki(&dir.path().join("foreign"), &[]);
    let f = |n: &str| pki.join(n).display().to_string();
    let (cert, key, ca) = (f("controller.pem"), f("controller-key.pem"), f("ca.pem"));
    let c = Controller::start(
        &dir.path().join("data"),
        &[
            "--metrics-tls-cert",
            &cert,
            "--metrics-tls-key",
            &key,
            "--metrics-client-ca",
            &ca,
            "--health-listen",
            "127.0.0.1:0",
        ],
    );
    assert!(
        support::started_lines(&c.log_text()).any(|l| l.contains("metrics on https://")),
        "{}",
        c.log_text()
    );
    // Readers: a read-only and an admin certificate.
    for stem in ["read-only-viewer", "admin-admin"] {
        let r = https_get(c.metrics, &pki, Some((&pki, stem)), "/metrics")
            .await
            .unwrap_or_else(|e| panic!("{stem}: {e}"));
        assert!(r.starts_with("HTTP/1.1 200"), "{stem}: {r}");
        assert!(r.contains("flowmesh_flow_mods_sent_total"), "{stem}: {r}");
        let r = https_get(c.metrics, &pki, Some((&pki, stem)), "/readyz")
            .await
            .expect("readyz");
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    }
    // A node's certificate of the same CA: authenticated, but no reader.
    let r = https_get(c.metrics, &pki, Some((&pki, "node-node-a")), "/metrics")
        .await
        .expect("node certificate answered");
    assert!(r.starts_with("HTTP/1.1 403"), "{r}");
    assert!(r.contains("O=flowmesh:read-only"), "{r}");
    assert!(!r.contains("flowmesh_flow_mods_sent_total"), "{r}");
    // No certificate, another CA's certificate: the handshake fails, nothing is served.
    let none = https_get(c.metrics, &pki, None, "/metrics").await;
    assert!(none.is_err(), "served without a certificate: {none:?}");
    let other = https_get(c.metrics, &pki, Some((&foreign, "admin-admin")), "/metrics").await;
    assert!(
        other.is_err(),
        "served to a foreign CA's certificate: {other:?}"
    );
    // Plaintext on the TLS port: nothing.
    let plain = http_get(c.metrics, "/metrics").await;
    assert!(!plain.contains("flowmesh_"), "{plain}");
    // The kubelet's listener: health only, in plaintext.
    let health = c.health.expect("health listener announced");
    let r = http_get(health, "/healthz").await;
    assert!(r.starts_with("HTTP/1.1 200") && r.ends_with("ok\n"), "{r}");
    let r = http_get(health, "/readyz").await;
    assert!(
        r.starts_with("HTTP/1.1 200") && r.ends_with("ready\n"),
        "{r}"
    );
    let r = http_get(health, "/metrics").await;
    assert!(r.starts_with("HTTP/1.1 404"), "{r}");
    // The listener still serves after the refusals.
    let r = https_get(
        c.metrics,
        &pki,
        Some((&pki, "read-only-viewer")),
        "/healthz",
    )
    .await
    .expect("healthz");
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
}

#[test]
fn plaintext_metrics_off_loopback_are_refused_at_start() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_flowmesh-controller"))
        .arg("--data-dir")
        .arg(dir.path())
        .args([
            "--grpc-listen",
            "127.0.0.1:0",
            "--openflow-listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "0.0.0.0:0",
        ])
        .output()
        .expect("run flowmesh-controller");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing to serve the metrics in plaintext on 0.0.0.0:0"),
        "{err}"
    );
    assert!(err.contains("--metrics-tls-cert"), "{err}");
}
