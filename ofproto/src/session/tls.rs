//! TLS for switch connections, as Open vSwitch's `ssl:` controller targets expect: the
//! controller presents a certificate signed by the CA the switch trusts (`ovs-vsctl set-ssl
//! KEY CERT CACERT`), and requires the switch's certificate to be signed by its own CA
//! (mutual authentication).

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read.
    #[error("reading {what} from {path}: {source}")]
    Read {
        /// What the file should hold.
        what: &'static str,
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// A PEM file holds no usable item.
    #[error("{what}: no {item} found in the PEM data")]
    Empty {
        /// What the file should hold.
        what: &'static str,
        /// The PEM item looked for.
        item: &'static str,
    },
    /// rustls refused the material.
    #[error("{what}: {source}")]
    Rustls {
        /// What was being configured.
        what: &'static str,
        /// The error.
        source: rustls::Error,
    },
    /// The client verifier could not be built.
    #[error("client certificate verifier: {0}")]
    Verifier(String),
}

/// PEM material of a TLS listener: the controller's certificate chain and key, and the CA
/// whose signature a switch certificate must carry.
#[derive(Clone, Debug)]
pub struct TlsPem {
    /// Controller certificate chain (PEM).
    pub cert_chain: Vec<u8>,
    /// Controller private key (PEM, PKCS#8, PKCS#1 or SEC1).
    pub key: Vec<u8>,
    /// CA certificate(s) that sign switch certificates (PEM).
    pub client_ca: Vec<u8>,
}

impl TlsPem {
    /// Reads the three PEM files.
    pub fn from_files(cert: &Path, key: &Path, ca: &Path) -> Result<Self, TlsError> {
        let read = |what, p: &Path| {
            std::fs::read(p).map_err(|source| TlsError::Read {
                what,
                path: p.display().to_string(),
                source,
            })
        };
        Ok(TlsPem {
            cert_chain: read("certificate", cert)?,
            key: read("private key", key)?,
            client_ca: read("CA certificate", ca)?,
        })
    }
}

fn certs(what: &'static str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let mut rd = pem;
    let certs: Vec<_> = rustls_pemfile::certs(&mut rd)
        .collect::<Result<_, _>>()
        .map_err(|source| TlsError::Read {
            what,
            path: "<pem>".into(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            what,
            item: "CERTIFICATE",
        });
    }
    Ok(certs)
}

/// A rustls server configuration that requires and verifies client certificates.
pub fn server_config(pem: &TlsPem) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for ca in certs("CA certificate", &pem.client_ca)? {
        roots.add(ca).map_err(|source| TlsError::Rustls {
            what: "CA certificate",
            source,
        })?;
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| TlsError::Verifier(e.to_string()))?;
    let chain = certs("certificate", &pem.cert_chain)?;
    let mut rd = &pem.key[..];
    let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut rd)
        .map_err(|source| TlsError::Read {
            what: "private key",
            path: "<pem>".into(),
            source,
        })?
        .ok_or(TlsError::Empty {
            what: "private key",
            item: "PRIVATE KEY",
        })?;
    let cfg = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Rustls {
            what: "protocol versions",
            source,
        })?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|source| TlsError::Rustls {
            what: "certificate and key",
            source,
        })?;
    Ok(Arc::new(cfg))
}
