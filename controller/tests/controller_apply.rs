//! `Apply` (flowmeshctl apply -f) against the real controller: every object in one transaction,
//! idempotent on a second run, and all-or-nothing when one object is refused.

mod support;

use proto::admin::{self as pa};
use support::Controller;

const MANIFEST: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: v1
kind: Node
metadata:
  name: node-1
  annotations: {flowmesh.io/datapath-id: "0x1"}
status:
  addresses: [{type: InternalIP, address: 192.0.2.1}]
---
apiVersion: v1
kind: Pod
metadata:
  namespace: shop
  name: web
  annotations: {flowmesh.io/ovs-port: node-1-p1, flowmesh.io/ofport: "3"}
spec: {nodeName: node-1}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_is_one_transaction_and_idempotent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ctl = Controller::start(&dir.path().join("data"), &[]);
    let mut admin = ctl.admin().await;

    let r = admin
        .apply(pa::ApplyRequest {
            yaml: MANIFEST.into(),
        })
        .await
        .expect("apply")
        .into_inner();
    assert_eq!(
        r.results,
        [
            "namespace/shop created",
            "node/node-1 created",
            "pod/shop/web created"
        ]
    );
    let pods = admin
        .list_pods(pa::Empty {})
        .await
        .expect("pods")
        .into_inner()
        .items;
    assert_eq!(pods.len(), 1, "{pods:?}");
    assert_eq!((pods[0].node.as_str(), pods[0].ofport), ("node-1", 3));

    let again = admin
        .apply(pa::ApplyRequest {
            yaml: MANIFEST.into(),
        })
        .await
        .expect("apply again")
        .into_inner();
    assert_eq!(
        again.results,
        [
            "namespace/shop unchanged",
            "node/node-1 unchanged",
            "pod/shop/web unchanged"
        ]
    );

    // A refused object (a pod in a namespace that does not exist) applies nothing of the file.
    let bad = "apiVersion: v1\nkind: Namespace\nmetadata: {name: extra}\n---\n\
               apiVersion: v1\nkind: Pod\nmetadata:\n  namespace: nowhere\n  name: p\n  \
               annotations: {flowmesh.io/ovs-port: x, flowmesh.io/ofport: \"4\"}\nspec: {nodeName: node-1}\n";
    let err = admin
        .apply(pa::ApplyRequest { yaml: bad.into() })
        .await
        .expect_err("refused");
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
    assert!(err.message().contains("pod/nowhere/p"), "{}", err.message());
    let names: Vec<String> = admin
        .list_net_namespaces(pa::Empty {})
        .await
        .expect("list")
        .into_inner()
        .items
        .into_iter()
        .map(|n| n.name)
        .collect();
    assert!(!names.contains(&"extra".to_string()), "{names:?}");
}
