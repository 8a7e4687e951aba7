//! `flowmeshctl certs ...`: lab certificates (see [`crate::certs`] and docs/security.md).

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};

use super::errors::CliError;
use crate::certs::{self, Ca, Kind};

/// Where the files go and how long they last.
#[derive(Debug, Args)]
pub struct CertDir {
    /// Directory of the CA (`ca.pem`, `ca-key.pem`) and of the files written.
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// Days the certificate is valid.
    #[arg(long, default_value_t = 365)]
    pub days: u32,
}

/// `certs ...`
#[derive(Debug, Subcommand)]
pub enum CertsCommand {
    /// A new self-signed CA: DIR/ca.pem and DIR/ca-key.pem (refuses to overwrite one).
    Ca {
        #[command(flatten)]
        dir: CertDir,
        /// The CA's common name.
        #[arg(long, default_value = "flowmesh lab CA")]
        name: String,
    },
    /// The controller's certificate (gRPC and OpenFlow TLS): DIR/controller.pem and key.
    Controller {
        #[command(flatten)]
        dir: CertDir,
        /// An address or DNS name clients dial (repeatable; at least one).
        #[arg(long = "san", required = true)]
        sans: Vec<String>,
    },
    /// A node's certificate (CN=system:node:NAME, O=system:nodes), for its flowmesh-shim
    /// and its switch: DIR/node-NAME.pem and key.
    Node {
        /// The node name.
        name: String,
        #[command(flatten)]
        dir: CertDir,
    },
    /// An administrator's certificate (O=flowmesh:admin, or O=flowmesh:read-only with
    /// --read-only): DIR/admin-NAME.pem or DIR/read-only-NAME.pem and key.
    Admin {
        /// The user name (the certificate's CN).
        name: String,
        /// Only Get/List/Dump/Trace/Watch calls.
        #[arg(long)]
        read_only: bool,
        #[command(flatten)]
        dir: CertDir,
    },
    /// Everything a lab needs at once: the CA (kept if DIR has one), the controller
    /// certificate, one per node, an admin and a read-only certificate, and flowmeshctl config
    /// files DIR/admin.conf and DIR/read-only.conf.
    Lab {
        #[command(flatten)]
        dir: CertDir,
        /// An address or DNS name clients dial (repeatable; at least one).
        #[arg(long = "san", required = true)]
        sans: Vec<String>,
        /// A node name (repeatable).
        #[arg(long = "node")]
        nodes: Vec<String>,
        /// The admin API URL written into the config files (default: https://FIRST-SAN:9650).
        #[arg(long)]
        server: Option<String>,
    },
}

fn fail(e: certs::CertError) -> CliError {
    CliError::Usage(format!("certs: {e}"))
}

fn print(files: &[PathBuf]) {
    for f in files {
        println!("{}", f.display());
    }
}

fn new_ca(dir: &Path, name: &str, days: u32) -> Result<Ca, CliError> {
    let ca = Ca::generate(name, days).map_err(fail)?;
    print(&ca.save(dir).map_err(fail)?);
    Ok(ca)
}

fn config_file(server: &str, user: &str, cert_stem: &str) -> String {
    format!(
        "# flowmeshctl config (docs/cli.md); paths are relative to this file.\n\
         apiVersion: flowmesh.io/v1\nkind: Config\ncurrent-context: lab\n\
         clusters:\n  - name: lab\n    cluster:\n      server: {server}\n      certificate-authority: ca.pem\n\
         users:\n  - name: {user}\n    user:\n      client-certificate: {cert_stem}.pem\n      client-key: {cert_stem}-key.pem\n\
         contexts:\n  - name: lab\n    context:\n      cluster: lab\n      user: {user}\n"
    )
}

/// Run a `certs` command (local only: no controller involved).
pub fn run(c: CertsCommand) -> Result<(), CliError> {
    match c {
        CertsCommand::Ca { dir, name } => {
            if dir.dir.join("ca-key.pem").exists() {
                return Err(CliError::Usage(format!(
                    "certs ca: {} already has a CA key; remove it first to make a new CA (every certificate it signed stops working)",
                    dir.dir.display()
                )));
            }
            new_ca(&dir.dir, &name, dir.days).map(|_| ())
        }
        CertsCommand::Controller { dir, sans } => {
            let ca = Ca::load(&dir.dir).map_err(fail)?;
            print(
                &ca.issue_to(&dir.dir, &Kind::Controller { sans }, dir.days)
                    .map_err(fail)?,
            );
            Ok(())
        }
        CertsCommand::Node { name, dir } => {
            let ca = Ca::load(&dir.dir).map_err(fail)?;
            print(
                &ca.issue_to(&dir.dir, &Kind::Node(name), dir.days)
                    .map_err(fail)?,
            );
            Ok(())
        }
        CertsCommand::Admin {
            name,
            read_only,
            dir,
        } => {
            let ca = Ca::load(&dir.dir).map_err(fail)?;
            let kind = if read_only {
                Kind::ReadOnly(name)
            } else {
                Kind::Admin(name)
            };
            print(&ca.issue_to(&dir.dir, &kind, dir.days).map_err(fail)?);
            Ok(())
        }
        CertsCommand::Lab {
            dir,
            sans,
            nodes,
            server,
        } => {
            let ca = if dir.dir.join("ca-key.pem").exists() {
                Ca::load(&dir.dir).map_err(fail)?
            } else {
                new_ca(&dir.dir, "flowmesh lab CA", dir.days)?
            };
            let mut files = ca
                .issue_to(&dir.dir, &Kind::Controller { sans: sans.clone() }, dir.days)
                .map_err(fail)?;
            for n in nodes {
                files.extend(
                    ca.issue_to(&dir.dir, &Kind::Node(n), dir.days)
                        .map_err(fail)?,
                );
            }
            files.extend(
                ca.issue_to(&dir.dir, &Kind::Admin("admin".into()), dir.days)
                    .map_err(fail)?,
            );
            files.extend(
                ca.issue_to(&dir.dir, &Kind::ReadOnly("viewer".into()), dir.days)
                    .map_err(fail)?,
            );
            let server = server.unwrap_or_else(|| {
                let host = &sans[0];
                if host.contains(':') {
                    format!("https://[{host}]:9650")
                } else {
                    format!("https://{host}:9650")
                }
            });
            for (file, user, stem) in [
                ("admin.conf", "admin", "admin-admin"),
                ("read-only.conf", "viewer", "read-only-viewer"),
            ] {
                let p = dir.dir.join(file);
                certs::write(&p, &config_file(&server, user, stem), true).map_err(fail)?;
                files.push(p);
            }
            print(&files);
            Ok(())
        }
    }
}
