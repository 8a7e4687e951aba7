//! Leadership among the replicas of a shared datastore, behind one interface: the
//! [`Standing`] of this replica and its [`Leadership`] (followed by the core and every
//! reconciler), and the [`ReplicaRegistry`] where replicas register. Two elections implement
//! it: [`etcd`] (a lease and a leader key) and [`lease`] (a Kubernetes Lease).

pub mod etcd;
pub mod lease;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::watch;

/// What this replica is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// The only controller (embedded datastore, or etcd without election): it programs the
    /// switches and requests no OpenFlow role.
    Alone,
    /// The elected leader: OpenFlow master with this generation id.
    Leader {
        /// The generation (the etcd revision of the election).
        generation: u64,
    },
    /// A standby: OpenFlow slave; `generation` is the current leader's (0: none known).
    Standby {
        /// The leader's generation.
        generation: u64,
        /// The leader's replica id, if one is known.
        leader: Option<String>,
    },
}

impl Standing {
    /// The OpenFlow role to hold on every switch (None: request none).
    pub fn role(&self) -> Option<(ofproto::message::Role, u64)> {
        use ofproto::message::Role;
        match self {
            Standing::Alone => None,
            Standing::Leader { generation } => Some((Role::Master, *generation)),
            // Until a leader's generation is known a slave request could be refused as stale:
            // request none (a standby never writes either way).
            Standing::Standby { generation: 0, .. } => None,
            Standing::Standby { generation, .. } => Some((Role::Slave, *generation)),
        }
    }

    /// The leader's generation as this replica knows it (0: none known, or alone).
    pub fn generation(&self) -> u64 {
        match self {
            Standing::Leader { generation } | Standing::Standby { generation, .. } => *generation,
            Standing::Alone => 0,
        }
    }

    /// The role's name for status output.
    pub fn role_name(&self) -> &'static str {
        match self {
            Standing::Alone => "equal",
            Standing::Leader { .. } => "master",
            Standing::Standby { .. } => "slave",
        }
    }
}

/// This replica's standing, shared by the election, the core and the reconcilers.
pub struct Leadership {
    standing: watch::Sender<Standing>,
    /// Until when the leader's lease is surely held (a local clock; None: not leading).
    valid_until: Mutex<Option<Instant>>,
    /// The role this replica holds on each switch, by node (or datapath id) — for
    /// `get controllers`; `roles_version` counts changes.
    roles: Mutex<BTreeMap<String, String>>,
    roles_version: AtomicU64,
    /// Where replicas register, for `get controllers`.
    registry: std::sync::OnceLock<Arc<dyn ReplicaRegistry>>,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Leadership({:?})", *self.standing.borrow())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Leadership {
    /// A controller with no other replica.
    pub fn alone() -> Arc<Self> {
        Self::with(Standing::Alone)
    }

    /// A replica that starts as a standby and waits for the election.
    pub fn standby() -> Arc<Self> {
        Self::with(Standing::Standby {
            generation: 0,
            leader: None,
        })
    }

    fn with(s: Standing) -> Arc<Self> {
        let (standing, _) = watch::channel(s);
        Arc::new(Leadership {
            standing,
            valid_until: Mutex::new(None),
            roles: Mutex::new(BTreeMap::new()),
            roles_version: AtomicU64::new(0),
            registry: std::sync::OnceLock::new(),
        })
    }

    /// The current standing.
    pub fn standing(&self) -> Standing {
        self.standing.borrow().clone()
    }

    /// Follow the standing.
    pub fn subscribe(&self) -> watch::Receiver<Standing> {
        self.standing.subscribe()
    }

    /// Whether this replica does the leader's work (alone, or leader).
    pub fn leads(&self) -> bool {
        !matches!(*self.standing.borrow(), Standing::Standby { .. })
    }

    /// Whether this replica may write to switches now: alone, or leader with a lease that is
    /// surely still held.
    pub fn may_program(&self) -> bool {
        match *self.standing.borrow() {
            Standing::Alone => true,
            Standing::Leader { .. } => lock(&self.valid_until).is_some_and(|t| Instant::now() < t),
            Standing::Standby { .. } => false,
        }
    }

    pub(crate) fn set(&self, s: Standing, valid_until: Option<Instant>) {
        *lock(&self.valid_until) = valid_until;
        self.standing.send_if_modified(|cur| {
            if *cur == s {
                false
            } else {
                *cur = s;
                true
            }
        });
    }

    pub(crate) fn extend(&self, until: Instant) {
        let lapsed = {
            let mut v = lock(&self.valid_until);
            let lapsed = v.is_none_or(|t| t <= Instant::now());
            *v = Some(until);
            lapsed
        };
        if lapsed && matches!(*self.standing.borrow(), Standing::Leader { .. }) {
            // Reconcilers that held back while the lease was uncertain sync now.
            self.standing.send_modify(|_| {});
        }
    }

    /// Where replicas register (set once, by the server).
    pub fn set_registry(&self, registry: Arc<dyn ReplicaRegistry>) {
        let _ = self.registry.set(registry);
    }

    /// This replica's id (None: it has no registry).
    pub fn id(&self) -> Option<String> {
        self.registry.get().map(|r| r.id())
    }

    /// Every registered replica and the leader (None: no other replicas are possible); an
    /// error says why the datastore could not be read.
    pub async fn view(&self) -> Option<Result<ReplicaView, String>> {
        let registry = self.registry.get()?.clone();
        Some(registry.view().await)
    }

    /// Version counter of [`Leadership::switch_roles`] (bumped on every change).
    pub fn roles_version(&self) -> u64 {
        self.roles_version.load(Ordering::Relaxed)
    }

    /// Record the role this replica holds on a switch ("" removes it).
    pub fn set_switch_role(&self, switch: &str, role: &str) {
        let mut r = lock(&self.roles);
        let changed = if role.is_empty() {
            r.remove(switch).is_some()
        } else {
            r.insert(switch.to_string(), role.to_string()).as_deref() != Some(role)
        };
        if changed {
            self.roles_version.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The roles this replica holds, by switch.
    pub fn switch_roles(&self) -> BTreeMap<String, String> {
        lock(&self.roles).clone()
    }
}

/// Where the replicas of a shared datastore register and elect their leader: etcd keys
/// ([`etcd::EtcdRegistry`]) or Leases in the controller's namespace ([`lease::KubeRegistry`]).
pub trait ReplicaRegistry: Send + Sync {
    /// This replica's id.
    fn id(&self) -> String;
    /// Read every replica and the leader; the error names the datastore.
    fn view(&self) -> BoxFuture<'static, Result<ReplicaView, String>>;
}

/// One replica as registered in the datastore.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ReplicaInfo {
    /// The replica id (`--replica-id`, default the host name and the gRPC port).
    pub id: String,
    /// Its gRPC address.
    pub grpc: String,
    /// Its OpenFlow address.
    pub openflow: String,
    /// When it started (seconds since the epoch).
    pub started: u64,
    /// "leader" or "standby".
    #[serde(default)]
    pub state: String,
    /// The leader's generation as this replica knows it.
    #[serde(default)]
    pub generation: u64,
    /// The OpenFlow role it holds, by switch (node name, or datapath id for an unknown one).
    #[serde(default)]
    pub switches: BTreeMap<String, String>,
}

/// What `get controllers` shows.
#[derive(Clone, Debug, Default)]
pub struct ReplicaView {
    /// Every registered replica, by id.
    pub replicas: Vec<ReplicaInfo>,
    /// The leader's id (empty: none).
    pub leader: String,
    /// The leader's generation.
    pub generation: u64,
}
