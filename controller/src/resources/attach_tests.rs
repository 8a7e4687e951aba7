//! The core's contract for a change that needs a switch, through the pod attach operation: a call that fails leaves nothing
//! behind (neither in the model nor in the store), and a call that does not need the switch
//! succeeds once stored, its flows waiting for the switch.

use crate::core::*;
use crate::error::ApiError;
use crate::observe::Metrics;
use crate::resources::nodes::{self as ops, PodRequest};
use crate::state::default_config;
use crate::state::{EmbeddedStore, StateBackend};
use crate::switches::link::{LinkError, LinkFuture, SwitchChange, SwitchLink, SwitchState};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

/// A connected switch that holds nothing and refuses every change.
struct RefusingSwitch;

impl SwitchLink for RefusingSwitch {
    fn peer(&self) -> String {
        "refusing".into()
    }
    fn read_state(&self) -> LinkFuture<'_, Result<SwitchState, LinkError>> {
        Box::pin(async { Ok((Vec::new(), Vec::new(), Vec::new())) })
    }
    fn apply(&self, _: Vec<SwitchChange>) -> LinkFuture<'_, Result<(), LinkError>> {
        Box::pin(async {
            Err(LinkError::Refused {
                index: 0,
                change: "flow add".into(),
                error: "OFPET_FLOW_MOD_FAILED/OFPFMFC_TABLE_FULL".into(),
            })
        })
    }
    fn ports(&self) -> LinkFuture<'_, Result<Vec<(String, u32)>, LinkError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// A core on an embedded store with node-1 (datapath 0xa1) and namespace foo.
async fn core_with_node(dir: &std::path::Path) -> (CoreHandle, Arc<EmbeddedStore>) {
    let store = Arc::new(EmbeddedStore::open(dir).expect("open store"));
    let l = load_model(store.as_ref(), Some(&default_config())).expect("load the empty store");
    let (model, changes) = (l.model, l.changes);
    store.apply(&changes).expect("initial records");
    let core = Core::spawn(
        model,
        store.clone(),
        CoreConfig::default(),
        Arc::new(Metrics::default()),
    )
    .expect("core");
    ops::add_node(&core, "node-1".into(), Ipv4Addr::new(192, 168, 1, 11), 0xa1)
        .await
        .expect("add node");
    ops::create_namespace(&core, "foo".into())
        .await
        .expect("create namespace");
    (core, store)
}

fn pod_b() -> PodRequest {
    PodRequest {
        node: "node-1".into(),
        namespace: "foo".into(),
        name: "b".into(),
        port_name: "veth-b".into(),
        ofport: 6,
    }
}

/// Pods in the core's model and in the store.
async fn pods(core: &CoreHandle, store: &EmbeddedStore) -> (usize, usize) {
    let in_model = core.read(|c| c.model.pod_count()).await.expect("read");
    let stored = load_model(store, None)
        .expect("reload the store")
        .model
        .pod_count();
    (in_model, stored)
}

#[tokio::test]
async fn an_attach_refused_for_a_disconnected_switch_stores_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (core, store) = core_with_node(dir.path()).await;
    for attempt in 0..2 {
        let e = ops::attach_pod(&core, pod_b())
            .await
            .expect_err("the switch is not connected");
        assert_eq!(
            e,
            ApiError::Unavailable(
                "the switch of node node-1 is not connected, so nothing was stored".into()
            ),
            "attempt {attempt}"
        );
        assert_eq!(pods(&core, &store).await, (0, 0), "attempt {attempt}");
    }
    // The address was not kept either: the next pod gets the first one.
    let other = ops::attach_pod(
        &core,
        PodRequest {
            node: "node-9".into(),
            ..pod_b()
        },
    )
    .await
    .expect_err("unknown node");
    assert!(matches!(other, ApiError::NotFound(_)), "{other:?}");
}

#[tokio::test]
async fn an_attach_its_switch_refuses_is_undone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (core, store) = core_with_node(dir.path()).await;
    core.switch_up(1, 0xa1, Arc::new(RefusingSwitch));
    let e = ops::attach_pod(&core, pod_b())
        .await
        .expect_err("the switch refuses the flows");
    let text = e.to_string();
    assert!(matches!(e, ApiError::Unavailable(_)), "{e:?}");
    assert!(text.contains("TABLE_FULL"), "{text}");
    assert!(text.ends_with("; the change was undone"), "{text}");
    assert_eq!(pods(&core, &store).await, (0, 0));
}

#[tokio::test]
async fn a_change_not_needing_the_switch_succeeds_and_says_its_flows_wait() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (core, store) = core_with_node(dir.path()).await;
    let mut events = core.subscribe();
    core.switch_up(1, 0xa1, Arc::new(RefusingSwitch));
    // A second node changes node-1's flows (its tunnel to node-2).
    ops::add_node(&core, "node-2".into(), Ipv4Addr::new(192, 168, 1, 12), 0xb2)
        .await
        .expect("stored: the call succeeds");
    let stored = load_model(store.as_ref(), None).expect("reload").model;
    assert!(stored.node("node-2").is_some());
    let pending = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let e = events.recv().await.expect("event");
            if e.kind == "FlowsPending" {
                break e;
            }
        }
    })
    .await
    .expect("a FlowsPending event");
    assert_eq!(pending.object, "node/node-1");
    assert!(
        pending
            .message
            .starts_with("the change is stored; the flows of node node-1 wait for its switch"),
        "{}",
        pending.message
    );
}
