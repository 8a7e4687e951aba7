//! Lab certificates (`flowmeshctl certs`): a self-signed CA and the controller, node, admin
//! and read-only certificates the gRPC APIs and OpenFlow TLS expect (docs/security.md).
//! Every private key file is written with mode 0600.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};

use proto::identity::{ADMIN_GROUP, NODES_GROUP, NODE_CN_PREFIX, READ_ONLY_GROUP};

/// Why a certificate could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// A file could not be read or written.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// rcgen refused.
    #[error("{what}: {source}")]
    Rcgen {
        /// What was being made.
        what: String,
        /// The error.
        source: rcgen::Error,
    },
    /// A bad argument.
    #[error("{0}")]
    Invalid(String),
}

/// The kind of a leaf certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The controller's server certificate, for these DNS names and IP addresses.
    Controller {
        /// Subject alternative names (IPs or DNS names).
        sans: Vec<String>,
    },
    /// A node (its shim, and its switch for OpenFlow TLS): `CN=system:node:NAME,
    /// O=system:nodes`.
    Node(String),
    /// An administrator: `CN=NAME, O=flowmesh:admin`.
    Admin(String),
    /// A read-only administrator: `CN=NAME, O=flowmesh:read-only`.
    ReadOnly(String),
}

impl Kind {
    /// The file stem (`controller`, `node-NAME`, `admin-NAME`, `read-only-NAME`).
    pub fn stem(&self) -> String {
        match self {
            Kind::Controller { .. } => "controller".into(),
            Kind::Node(n) => format!("node-{n}"),
            Kind::Admin(n) => format!("admin-{n}"),
            Kind::ReadOnly(n) => format!("read-only-{n}"),
        }
    }
}

/// A CA that signs.
pub struct Ca {
    cert: Certificate,
    key: KeyPair,
}

fn rc(what: impl Into<String>) -> impl FnOnce(rcgen::Error) -> CertError {
    let what = what.into();
    move |source| CertError::Rcgen { what, source }
}

fn validity(p: &mut CertificateParams, days: u32) -> Result<(), CertError> {
    if days == 0 || days > 3650 {
        return Err(CertError::Invalid(format!(
            "--days {days}: give 1 to 3650 days"
        )));
    }
    let now = time::OffsetDateTime::now_utc();
    p.not_before = now - time::Duration::minutes(5);
    p.not_after = now + time::Duration::days(days.into());
    Ok(())
}

fn check_name(what: &str, name: &str) -> Result<(), CertError> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '@'));
    if ok {
        Ok(())
    } else {
        Err(CertError::Invalid(format!(
            "{what} name {name:?}: use letters, digits, '-', '.', '_' or '@' (at most 253)"
        )))
    }
}

impl Ca {
    /// A new self-signed CA named `name`, valid for `days`.
    pub fn generate(name: &str, days: u32) -> Result<Ca, CertError> {
        let mut p = CertificateParams::new(Vec::<String>::new()).map_err(rc("CA"))?;
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        validity(&mut p, days)?;
        let key = KeyPair::generate().map_err(rc("CA key"))?;
        let cert = p.self_signed(&key).map_err(rc("CA certificate"))?;
        Ok(Ca { cert, key })
    }

    /// The CA of `dir` (`ca.pem`, `ca-key.pem`).
    pub fn load(dir: &Path) -> Result<Ca, CertError> {
        let cert_pem = read(&dir.join("ca.pem"))?;
        let key_pem = read(&dir.join("ca-key.pem"))?;
        let key = KeyPair::from_pem(&key_pem)
            .map_err(rc(format!("CA key {}", dir.join("ca-key.pem").display())))?;
        let params = CertificateParams::from_ca_cert_pem(&cert_pem).map_err(rc(format!(
            "CA certificate {}",
            dir.join("ca.pem").display()
        )))?;
        // The same subject and key: what signing needs.
        let cert = params.self_signed(&key).map_err(rc("CA certificate"))?;
        Ok(Ca { cert, key })
    }

    /// Writes `ca.pem` and `ca-key.pem` into `dir`.
    pub fn save(&self, dir: &Path) -> Result<Vec<PathBuf>, CertError> {
        let c = dir.join("ca.pem");
        let k = dir.join("ca-key.pem");
        write(&c, &self.cert.pem(), false)?;
        write(&k, &self.key.serialize_pem(), true)?;
        Ok(vec![c, k])
    }

    /// The CA certificate, PEM.
    pub fn pem(&self) -> String {
        self.cert.pem()
    }

    /// Issues a leaf of `kind` valid for `days`: (certificate PEM, key PEM).
    pub fn issue(&self, kind: &Kind, days: u32) -> Result<(String, String), CertError> {
        let (cn, org, sans, server) = match kind {
            Kind::Controller { sans } => {
                if sans.is_empty() {
                    return Err(CertError::Invalid(
                        "the controller certificate needs at least one --san (the address clients dial)".into(),
                    ));
                }
                ("flowmesh-controller".to_string(), None, sans.clone(), true)
            }
            Kind::Node(n) => {
                check_name("node", n)?;
                (
                    format!("{NODE_CN_PREFIX}{n}"),
                    Some(NODES_GROUP),
                    vec![],
                    false,
                )
            }
            Kind::Admin(n) => {
                check_name("admin", n)?;
                (n.clone(), Some(ADMIN_GROUP), vec![], false)
            }
            Kind::ReadOnly(n) => {
                check_name("read-only admin", n)?;
                (n.clone(), Some(READ_ONLY_GROUP), vec![], false)
            }
        };
        let mut p = CertificateParams::new(Vec::<String>::new()).map_err(rc(cn.clone()))?;
        for s in &sans {
            p.subject_alt_names.push(match s.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName(s.clone().try_into().map_err(|_| {
                    CertError::Invalid(format!("--san {s:?}: not an IP address or DNS name"))
                })?),
            });
        }
        p.distinguished_name.push(DnType::CommonName, cn.clone());
        if let Some(o) = org {
            p.distinguished_name.push(DnType::OrganizationName, o);
        }
        p.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        p.extended_key_usages = if server {
            vec![ExtendedKeyUsagePurpose::ServerAuth]
        } else {
            vec![ExtendedKeyUsagePurpose::ClientAuth]
        };
        validity(&mut p, days)?;
        let key = KeyPair::generate().map_err(rc(format!("{cn} key")))?;
        let cert = p
            .signed_by(&key, &self.cert, &self.key)
            .map_err(rc(format!("{cn} certificate")))?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// Issues a leaf and writes `STEM.pem` and `STEM-key.pem` into `dir`.
    pub fn issue_to(&self, dir: &Path, kind: &Kind, days: u32) -> Result<Vec<PathBuf>, CertError> {
        let (cert, key) = self.issue(kind, days)?;
        let c = dir.join(format!("{}.pem", kind.stem()));
        let k = dir.join(format!("{}-key.pem", kind.stem()));
        write(&c, &cert, false)?;
        write(&k, &key, true)?;
        Ok(vec![c, k])
    }
}

fn read(p: &Path) -> Result<String, CertError> {
    std::fs::read_to_string(p).map_err(|source| CertError::Io {
        op: "reading",
        path: p.to_path_buf(),
        source,
    })
}

/// Writes `text` to `path`; a secret gets mode 0600 from the start.
pub fn write(path: &Path, text: &str, secret: bool) -> Result<(), CertError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| CertError::Io {
        op: "writing",
        path: path.to_path_buf(),
        source,
    };
    if let Some(d) = path.parent() {
        if !d.as_os_str().is_empty() {
            std::fs::create_dir_all(d).map_err(io)?;
        }
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(path)
        .map_err(io)?;
    if secret {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(io)?;
    }
    f.write_all(text.as_bytes()).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use controller::identity::{identity_of, Identity};

    fn der(pem: &str) -> Vec<u8> {
        let mut rd = pem.as_bytes();
        let mut it = rustls_pemfile_certs(&mut rd);
        it.remove(0)
    }

    fn rustls_pemfile_certs(rd: &mut &[u8]) -> Vec<Vec<u8>> {
        let (_, p) = x509_parser::pem::parse_x509_pem(rd).expect("pem");
        vec![p.contents]
    }

    #[test]
    fn issued_certificates_carry_the_identities() {
        let ca = Ca::generate("test CA", 1).expect("ca");
        let (c, _) = ca.issue(&Kind::Node("n1".into()), 1).expect("node");
        assert_eq!(identity_of(&der(&c)), Ok(Identity::Node("n1".into())));
        let (c, _) = ca.issue(&Kind::Admin("alice".into()), 1).expect("admin");
        assert_eq!(identity_of(&der(&c)), Ok(Identity::Admin("alice".into())));
        let (c, _) = ca.issue(&Kind::ReadOnly("bob".into()), 1).expect("ro");
        assert_eq!(identity_of(&der(&c)), Ok(Identity::ReadOnly("bob".into())));
        assert!(ca.issue(&Kind::Node("a b".into()), 1).is_err());
        assert!(ca.issue(&Kind::Controller { sans: vec![] }, 1).is_err());
        assert!(ca.issue(&Kind::Admin("x".into()), 0).is_err());
    }

    #[test]
    fn ca_round_trips_through_files() {
        let dir = tempfile::tempdir().expect("tmp");
        let ca = Ca::generate("test CA", 1).expect("ca");
        ca.save(dir.path()).expect("save");
        let loaded = Ca::load(dir.path()).expect("load");
        let files = loaded
            .issue_to(dir.path(), &Kind::Node("n2".into()), 1)
            .expect("issue");
        let key_mode = std::fs::metadata(&files[1]).expect("meta");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(key_mode.permissions().mode() & 0o777, 0o600);
        let ca_key = std::fs::metadata(dir.path().join("ca-key.pem")).expect("meta");
        assert_eq!(ca_key.permissions().mode() & 0o777, 0o600);
    }
}
