//! Where `flowmeshctl` connects and with which credentials: flags, then a kubeconfig-style
//! config file (docs/cli.md), then the default (plaintext loopback).
//!
//! ```yaml
//! apiVersion: flowmesh.io/v1
//! kind: Config
//! current-context: lab
//! clusters:
//!   - name: lab
//!     cluster:
//!       server: https://10.0.0.1:9650
//!       certificate-authority: ca.pem      # relative to this file's directory
//! users:
//!   - name: alice
//!     user:
//!       client-certificate: admin-alice.pem
//!       client-key: admin-alice-key.pem
//! contexts:
//!   - name: lab
//!     context:
//!       cluster: lab
//!       user: alice
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::args::DEFAULT_SERVER;
use super::errors::CliError;

/// Client TLS material (paths of PEM files).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientTls {
    /// CA that signed the controller's certificate.
    pub ca: PathBuf,
    /// Client certificate.
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
}

/// Where and how to connect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The server URL.
    pub server: String,
    /// TLS, when the server URL is https.
    pub tls: Option<ClientTls>,
}

/// A flowmeshctl config file.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ConfigFile {
    /// `flowmesh.io/v1`.
    #[serde(default, rename = "apiVersion")]
    pub api_version: Option<String>,
    /// `Config`.
    #[serde(default)]
    pub kind: Option<String>,
    /// The context used without `--context`.
    #[serde(default)]
    pub current_context: Option<String>,
    /// Named controllers.
    #[serde(default)]
    pub clusters: Vec<Named<ClusterEntry>>,
    /// Named credentials.
    #[serde(default)]
    pub users: Vec<Named<UserEntry>>,
    /// Named (cluster, user) pairs.
    #[serde(default)]
    pub contexts: Vec<Named<ContextEntry>>,
}

/// A named entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Named<T> {
    /// Its name.
    pub name: String,
    /// The entry (`cluster`, `user` or `context`).
    #[serde(alias = "cluster", alias = "user", alias = "context")]
    pub value: T,
}

/// A controller.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ClusterEntry {
    /// Admin API URL.
    pub server: String,
    /// CA of the controller's certificate.
    #[serde(default)]
    pub certificate_authority: Option<PathBuf>,
}

/// Credentials.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct UserEntry {
    /// Client certificate.
    #[serde(default)]
    pub client_certificate: Option<PathBuf>,
    /// Its key.
    #[serde(default)]
    pub client_key: Option<PathBuf>,
}

/// A context.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextEntry {
    /// Cluster name.
    pub cluster: String,
    /// User name.
    #[serde(default)]
    pub user: Option<String>,
}

/// What the flags say (all optional).
#[derive(Clone, Debug, Default)]
pub struct Flags {
    /// `--server`.
    pub server: Option<String>,
    /// `--ca`.
    pub ca: Option<PathBuf>,
    /// `--cert`.
    pub cert: Option<PathBuf>,
    /// `--key`.
    pub key: Option<PathBuf>,
    /// `--flowmeshconfig`.
    pub config: Option<PathBuf>,
    /// `--context`.
    pub context: Option<String>,
}

fn bad(path: &Path, detail: String) -> CliError {
    CliError::Usage(format!("config file {}: {detail}", path.display()))
}

fn resolve_rel(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

/// Parses a config file's text; paths in it are relative to `base`.
pub fn parse(path: &Path, text: &str, context: Option<&str>) -> Result<Flags, CliError> {
    let f: ConfigFile = serde_yaml::from_str(text).map_err(|e| bad(path, e.to_string()))?;
    if let Some(k) = &f.kind {
        if k != "Config" {
            return Err(bad(path, format!("kind {k:?}: expected Config")));
        }
    }
    let base = path.parent().unwrap_or(Path::new("."));
    let ctx_name = match context.map(str::to_string).or(f.current_context.clone()) {
        Some(c) => c,
        None if f.contexts.len() == 1 => f.contexts[0].name.clone(),
        None => {
            return Err(bad(
                path,
                "no current-context (set it, or give --context)".into(),
            ))
        }
    };
    let ctx = f
        .contexts
        .iter()
        .find(|c| c.name == ctx_name)
        .ok_or_else(|| bad(path, format!("no context named {ctx_name:?}")))?;
    let cluster = f
        .clusters
        .iter()
        .find(|c| c.name == ctx.value.cluster)
        .ok_or_else(|| {
            bad(
                path,
                format!(
                    "context {ctx_name:?}: no cluster named {:?}",
                    ctx.value.cluster
                ),
            )
        })?;
    let user = match &ctx.value.user {
        None => None,
        Some(u) => Some(
            f.users
                .iter()
                .find(|x| &x.name == u)
                .ok_or_else(|| bad(path, format!("context {ctx_name:?}: no user named {u:?}")))?,
        ),
    };
    Ok(Flags {
        server: Some(cluster.value.server.clone()),
        ca: cluster
            .value
            .certificate_authority
            .as_deref()
            .map(|p| resolve_rel(base, p)),
        cert: user
            .and_then(|u| u.value.client_certificate.as_deref())
            .map(|p| resolve_rel(base, p)),
        key: user
            .and_then(|u| u.value.client_key.as_deref())
            .map(|p| resolve_rel(base, p)),
        config: None,
        context: None,
    })
}

/// The default config file: `$HOME/.flowmesh/config`, when it exists.
fn default_config() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    let p = PathBuf::from(home).join(".flowmesh").join("config");
    p.is_file().then_some(p)
}

/// Flags over the config file over the default.
pub fn resolve(flags: &Flags) -> Result<Target, CliError> {
    let file = match flags.config.clone().or_else(default_config) {
        Some(p) => {
            let text = std::fs::read_to_string(&p).map_err(|e| {
                CliError::Usage(format!("cannot read config file {}: {e}", p.display()))
            })?;
            parse(&p, &text, flags.context.as_deref())?
        }
        None => {
            if let Some(c) = &flags.context {
                return Err(CliError::Usage(format!(
                    "--context {c:?} needs a config file (--flowmeshconfig or ~/.flowmesh/config)"
                )));
            }
            Flags::default()
        }
    };
    let server = flags
        .server
        .clone()
        .or(file.server)
        .unwrap_or_else(|| DEFAULT_SERVER.to_string());
    let server = super::args::server_url(&server).map_err(CliError::Usage)?;
    let ca = flags.ca.clone().or(file.ca);
    let cert = flags.cert.clone().or(file.cert);
    let key = flags.key.clone().or(file.key);
    let https = server.starts_with("https://");
    let tls = match (ca, cert, key) {
        (None, None, None) if !https => None,
        (Some(ca), Some(cert), Some(key)) => Some(ClientTls { ca, cert, key }),
        (ca, cert, key) => {
            let missing: Vec<&str> = [
                ("--ca", ca.is_none()),
                ("--cert", cert.is_none()),
                ("--key", key.is_none()),
            ]
            .iter()
            .filter(|(_, m)| *m)
            .map(|(f, _)| *f)
            .collect();
            return Err(CliError::Usage(format!(
                "TLS needs --ca, --cert and --key together (missing {}); the controller accepts only client certificates of its CA",
                missing.join(", ")
            )));
        }
    };
    // Credentials over plaintext would be pointless: TLS means https.
    let server = match (&tls, https) {
        (Some(_), false) => server.replacen("http://", "https://", 1),
        _ => server,
    };
    Ok(Target { server, tls })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "apiVersion: flowmesh.io/v1\nkind: Config\ncurrent-context: lab\n\
        clusters:\n  - name: lab\n    cluster:\n      server: https://10.0.0.1:9650\n      certificate-authority: ca.pem\n\
        users:\n  - name: alice\n    user:\n      client-certificate: /abs/alice.pem\n      client-key: alice-key.pem\n\
        contexts:\n  - name: lab\n    context:\n      cluster: lab\n      user: alice\n  - name: ro\n    context:\n      cluster: lab\n";

    #[test]
    fn config_file_contexts_and_relative_paths() {
        let f = parse(Path::new("/etc/fm/config"), FILE, None).expect("parse");
        assert_eq!(f.server.as_deref(), Some("https://10.0.0.1:9650"));
        assert_eq!(f.ca, Some(PathBuf::from("/etc/fm/ca.pem")));
        assert_eq!(f.cert, Some(PathBuf::from("/abs/alice.pem")));
        assert_eq!(f.key, Some(PathBuf::from("/etc/fm/alice-key.pem")));
        let ro = parse(Path::new("/etc/fm/config"), FILE, Some("ro")).expect("ro");
        assert_eq!(ro.cert, None);
        assert!(parse(Path::new("c"), FILE, Some("nope")).is_err());
        assert!(parse(Path::new("c"), "kind: Pod\n", None).is_err());
        assert!(parse(Path::new("c"), "bogus: 1\n", None).is_err());
    }

    #[test]
    fn flags_win_and_tls_needs_all_three() {
        let t = resolve(&Flags::default()).expect("default");
        assert_eq!(t.server, DEFAULT_SERVER);
        assert_eq!(t.tls, None);
        let t = resolve(&Flags {
            server: Some("10.0.0.1:9650".into()),
            ca: Some("ca".into()),
            cert: Some("c".into()),
            key: Some("k".into()),
            ..Flags::default()
        })
        .expect("tls");
        assert_eq!(t.server, "https://10.0.0.1:9650");
        assert!(t.tls.is_some());
        assert!(resolve(&Flags {
            ca: Some("ca".into()),
            ..Flags::default()
        })
        .is_err());
        assert!(resolve(&Flags {
            server: Some("https://x:1".into()),
            ..Flags::default()
        })
        .is_err());
    }
}
