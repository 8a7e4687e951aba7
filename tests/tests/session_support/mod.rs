//! Shared helpers of the session tests: a runtime, event waiting, the listener.

#![allow(dead_code)]

use std::time::Duration;

use ofproto::session::{
    EventStream, Listener, SessionConfig, SessionEvent, SwitchHandle, SwitchInfo,
};

/// A two-worker runtime: sessions keep running while the test thread drives OVS.
pub fn runtime() -> tokio::runtime::Runtime {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A TCP listener on 127.0.0.1 with `cfg`.
pub fn listen(rt: &tokio::runtime::Runtime, cfg: SessionConfig) -> (Listener, EventStream) {
    rt.block_on(Listener::bind(
        "127.0.0.1:0".parse().expect("addr"),
        None,
        cfg,
    ))
    .expect("bind listener")
}

/// Waits for the next event that `pick` maps to Some, up to `timeout`.
pub fn wait_for<T>(
    rt: &tokio::runtime::Runtime,
    events: &mut EventStream,
    timeout: Duration,
    mut pick: impl FnMut(SessionEvent) -> Option<T>,
) -> Option<T> {
    rt.block_on(async {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, events.next()).await {
                Ok(Some(ev)) => {
                    if let Some(t) = pick(ev) {
                        return Some(t);
                    }
                }
                Ok(None) | Err(_) => return None,
            }
        }
    })
}

/// Waits for a Ready event; returns its handle and info.
pub fn wait_ready(
    rt: &tokio::runtime::Runtime,
    events: &mut EventStream,
    timeout: Duration,
) -> (SwitchHandle, SwitchInfo) {
    wait_for(rt, events, timeout, |ev| match ev {
        SessionEvent::Ready { handle, info, .. } => Some((handle, info)),
        _ => None,
    })
    .expect("a switch became ready in time")
}
