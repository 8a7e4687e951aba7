//! The OpenFlow side: accepting switch connections and handing ready sessions to the core.

use crate::core::CoreHandle;
use std::time::Duration;

/// Accept switch connections on `listener` (wired to the ofproto session in a later step).
pub async fn serve_openflow(core: CoreHandle, listener: tokio::net::TcpListener, echo: Duration) {
    let _ = (core, echo);
    loop {
        match listener.accept().await {
            Ok((_sock, peer)) => tracing::warn!(%peer, "OpenFlow sessions are not wired yet"),
            Err(e) => tracing::error!(error = %e, "accept failed"),
        }
    }
}
