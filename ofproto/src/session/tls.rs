//! TLS for switch connections, as Open vSwitch's `ssl:` controller targets expect: the
//! controller presents a certificate signed by the CA the switch trusts (`ovs-vsctl set-ssl
//! KEY CERT CACERT`), and requires the switch's certificate to be signed by its own CA
//! (mutual authentication).

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig};

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

/// Decides whether a client certificate that the CA signed may connect at all (its DER
/// end-entity certificate; `Err` says why not). The controller requires one that names a node.
pub type ClientCheck = Arc<dyn Fn(&[u8]) -> Result<(), String> + Send + Sync>;

/// The WebPKI verifier, then a [`ClientCheck`]: a certificate the check refuses ends the
/// handshake (alert `certificate_unknown`), before any OpenFlow byte is read.
struct CheckedClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    check: ClientCheck,
}

impl std::fmt::Debug for CheckedClientVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckedClientVerifier")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

/// Why the check refused a certificate (shown in the handshake's error).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Refused(String);

impl ClientCertVerifier for CheckedClientVerifier {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        (self.check)(end_entity.as_ref()).map_err(|why| {
            rustls::Error::InvalidCertificate(rustls::CertificateError::Other(rustls::OtherError(
                Arc::new(Refused(why)),
            )))
        })?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A rustls server configuration that requires and verifies client certificates.
pub fn server_config(pem: &TlsPem) -> Result<Arc<ServerConfig>, TlsError> {
    server_config_checked(pem, None)
}

/// [`server_config`], with `check` deciding whether a certificate of the CA may connect at
/// all (refused at the handshake otherwise).
pub fn server_config_checked(
    pem: &TlsPem,
    check: Option<ClientCheck>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for ca in certs("CA certificate", &pem.client_ca)? {
        roots.add(ca).map_err(|source| TlsError::Rustls {
            what: "CA certificate",
            source,
        })?;
    }
    let mut verifier =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| TlsError::Verifier(e.to_string()))?;
    if let Some(check) = check {
        verifier = Arc::new(CheckedClientVerifier {
            inner: verifier,
            check,
        });
    }
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
