//! The admin API connection: connect, per-call deadline, status → [`CliError`].

use std::future::Future;
use std::time::Duration;

use proto::admin::admin_client::AdminClient;
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

use super::config::ClientTls;
use super::errors::{error_chain, CliError, Operation};

/// tonic's client TLS from the PEM files (read now, so a bad path fails with its name).
pub fn client_tls(t: &ClientTls) -> Result<tonic::transport::ClientTlsConfig, CliError> {
    let read = |flag: &str, p: &std::path::Path| {
        std::fs::read(p).map_err(|e| CliError::Usage(format!("{flag} {}: {e}", p.display())))
    };
    let ca = read("--ca", &t.ca)?;
    let cert = read("--cert", &t.cert)?;
    let key = read("--key", &t.key)?;
    Ok(tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(ca))
        .identity(tonic::transport::Identity::from_pem(cert, key)))
}

/// A connected admin API client with the deadline every unary call gets.
pub struct Conn {
    /// The generated client.
    pub client: AdminClient<Channel>,
    /// Server URL, for messages.
    pub server: String,
    /// Deadline of unary calls (and of connecting).
    pub timeout: Duration,
}

impl Conn {
    /// Connect to the controller (fails fast with [`CliError::Unreachable`]).
    pub async fn connect(
        server: &str,
        timeout: Duration,
        tls: Option<&ClientTls>,
    ) -> Result<Conn, CliError> {
        let unreachable = |detail: String| CliError::Unreachable {
            server: server.to_string(),
            detail,
        };
        let mut endpoint = Endpoint::from_shared(server.to_string())
            .map_err(|e| unreachable(error_chain(&e)))?
            .connect_timeout(timeout);
        if let Some(t) = tls {
            endpoint = endpoint
                .tls_config(client_tls(t)?)
                .map_err(|e| CliError::Usage(format!("TLS: {}", error_chain(&e))))?;
        }
        let channel = match tokio::time::timeout(timeout, endpoint.connect()).await {
            Ok(Ok(ch)) => ch,
            Ok(Err(e)) => return Err(unreachable(error_chain(&e))),
            Err(_) => return Err(unreachable(format!("no connection within {timeout:?}"))),
        };
        Ok(Conn {
            client: AdminClient::new(channel),
            server: server.to_string(),
            timeout,
        })
    }

    /// A request carrying the deadline (`grpc-timeout`) so the server knows it too.
    pub fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(message);
        r.set_timeout(self.timeout);
        r
    }

    /// Await one call under the deadline, mapping failures to errors naming `op`.
    pub async fn call<T, F>(&self, op: Operation, fut: F) -> Result<T, CliError>
    where
        F: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(Ok(resp)) => Ok(resp.into_inner()),
            // The server enforces the same deadline (grpc-timeout) and may report it first;
            // tonic's server says `Cancelled: Timeout expired`.
            Ok(Err(status)) if is_deadline(&status) => Err(CliError::Timeout {
                op: Box::new(op),
                after: self.timeout,
            }),
            Ok(Err(status)) => Err(CliError::from_status(op, &self.server, &status)),
            Err(_) => Err(CliError::Timeout {
                op: Box::new(op),
                after: self.timeout,
            }),
        }
    }
}

/// A status that only says the call's deadline passed (no message of the server's own).
fn is_deadline(status: &tonic::Status) -> bool {
    let m = status.message().trim();
    matches!(status.code(), Code::Cancelled | Code::DeadlineExceeded)
        && (m.is_empty() || m.eq_ignore_ascii_case("timeout expired"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_statuses() {
        assert!(is_deadline(&tonic::Status::cancelled("Timeout expired")));
        assert!(is_deadline(&tonic::Status::deadline_exceeded("")));
        assert!(!is_deadline(&tonic::Status::deadline_exceeded(
            "node-2 did not acknowledge within 5s"
        )));
        assert!(!is_deadline(&tonic::Status::cancelled("shutting down")));
    }
}
