//! The core's contest for a datapath id (`core/sessions.rs`) and its unknown datapaths, with
//! scripted links: a second connection is refused while the connected switch answers its echo
//! and replaces it when it does not; a datapath no node claims gets its drop without a read or
//! a turn.

use crate::core::*;
use crate::observe::Metrics;
use crate::resources::nodes as ops;
use crate::state::{default_config, EmbeddedStore, StateBackend};
use crate::switches::link::SwitchLink;
use crate::switches::link::{LinkError, LinkFuture, SwitchChange, SwitchState};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

/// A link whose probe answers `alive`, and which records what is done to it.
#[derive(Default)]
struct Scripted {
    name: &'static str,
    alive: bool,
    closed: AtomicBool,
    reads: AtomicUsize,
    turns: AtomicUsize,
    applied: Mutex<Vec<Vec<SwitchChange>>>,
}

impl Scripted {
    fn new(name: &'static str, alive: bool) -> Arc<Self> {
        Arc::new(Scripted {
            name,
            alive,
            ..Default::default()
        })
    }
}

impl SwitchLink for Scripted {
    fn peer(&self) -> String {
        self.name.into()
    }
    fn turn(&self) -> LinkFuture<'_, Option<crate::switches::link::SyncTurn>> {
        self.turns.fetch_add(1, Ordering::Relaxed);
        Box::pin(async { None })
    }
    fn read_state(&self) -> LinkFuture<'_, Result<SwitchState, LinkError>> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        Box::pin(async { Ok((Vec::new(), Vec::new(), Vec::new())) })
    }
    fn apply(&self, changes: Vec<SwitchChange>) -> LinkFuture<'_, Result<(), LinkError>> {
        if let Ok(mut a) = self.applied.lock() {
            a.push(changes);
        }
        Box::pin(async { Ok(()) })
    }
    fn ports(&self) -> LinkFuture<'_, Result<Vec<(String, u32)>, LinkError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    fn probe(&self, _within: Duration) -> LinkFuture<'_, bool> {
        let alive = self.alive && !self.closed.load(Ordering::Relaxed);
        Box::pin(async move { alive })
    }
    fn close(&self) -> LinkFuture<'_, ()> {
        self.closed.store(true, Ordering::Relaxed);
        Box::pin(async {})
    }
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }
}

async fn core_with_node(dir: &std::path::Path) -> CoreHandle {
    let store = Arc::new(EmbeddedStore::open(dir).expect("open store"));
    let l = load_model(store.as_ref(), Some(&default_config())).expect("load");
    store.apply(&l.changes).expect("initial records");
    let core = Core::spawn(
        l.model,
        store,
        CoreConfig::default(),
        Arc::new(Metrics::default()),
    )
    .expect("core");
    ops::add_node(
        &core,
        "node-1".into(),
        std::net::Ipv4Addr::new(192, 168, 1, 11),
        0xa1,
    )
    .await
    .expect("add node");
    core
}

async fn holder(core: &CoreHandle, dpid: u64) -> Option<String> {
    core.read(move |c| c.datapath_link(dpid).map(|l| l.peer()))
        .await
        .expect("read")
}

async fn wait(what: &str, mut f: impl AsyncFnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !f().await {
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_second_connection_is_refused_while_the_connected_switch_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let core = core_with_node(dir.path()).await;
    let real = Scripted::new("real", true);
    let spoof = Scripted::new("spoof", true);
    core.switch_up(1, 0xa1, real.clone());
    wait("real connected", async || {
        holder(&core, 0xa1).await.as_deref() == Some("real")
    })
    .await;
    core.switch_up(2, 0xa1, spoof.clone());
    wait("spoofer closed", async || spoof.is_closed()).await;
    assert_eq!(holder(&core, 0xa1).await.as_deref(), Some("real"));
    assert!(!real.is_closed());
    // Its end is no news: the real switch stays connected.
    core.switch_down(2, 0xa1);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(holder(&core, 0xa1).await.as_deref(), Some("real"));
}

#[tokio::test]
async fn a_connection_whose_switch_does_not_answer_is_replaced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let core = core_with_node(dir.path()).await;
    let dead = Scripted::new("dead", false);
    let restarted = Scripted::new("restarted", true);
    core.switch_up(1, 0xa1, dead.clone());
    wait("dead connected", async || {
        holder(&core, 0xa1).await.as_deref() == Some("dead")
    })
    .await;
    core.switch_up(2, 0xa1, restarted.clone());
    wait("replaced", async || {
        holder(&core, 0xa1).await.as_deref() == Some("restarted")
    })
    .await;
    assert!(dead.is_closed(), "the old connection is closed");
    assert!(!restarted.is_closed());
    // The old session's end does not disconnect the new one.
    core.switch_down(1, 0xa1);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(holder(&core, 0xa1).await.as_deref(), Some("restarted"));
}

#[tokio::test]
async fn an_unknown_datapath_gets_its_drop_without_a_read_or_a_turn() {
    let dir = tempfile::tempdir().expect("tempdir");
    let core = core_with_node(dir.path()).await;
    let stranger = Scripted::new("stranger", true);
    core.switch_up(7, 0xdead, stranger.clone());
    wait("the reset bundle", async || {
        stranger
            .applied
            .lock()
            .map(|a| !a.is_empty())
            .unwrap_or(false)
    })
    .await;
    let applied = stranger.applied.lock().expect("lock")[0].clone();
    let text: Vec<String> = applied.iter().map(|c| c.to_string()).collect();
    assert_eq!(applied.len(), 3, "{text:?}");
    assert!(
        matches!(&applied[0], SwitchChange::Flow(fm) if fm.command == ofproto::FlowModCommand::Delete && fm.flow.table == ofproto::flow::TABLE_ALL),
        "{text:?}"
    );
    assert!(
        matches!(&applied[1], SwitchChange::Group(gm) if gm.command == ofproto::GroupModCommand::Delete && gm.group.group_id == ofproto::flow::GROUP_ALL),
        "{text:?}"
    );
    assert!(
        matches!(&applied[2], SwitchChange::Flow(fm) if fm.command == ofproto::FlowModCommand::Add && fm.flow.priority == 0),
        "{text:?}"
    );
    assert_eq!(stranger.reads.load(Ordering::Relaxed), 0, "no read");
    assert_eq!(stranger.turns.load(Ordering::Relaxed), 0, "no turn");
}
