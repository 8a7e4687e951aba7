//! Egress liveness of nodes: a node is offline for egress IPs when its switch is disconnected,
//! its shim stopped watching (after a grace) or its underlay address stopped answering the
//! egress probe; a new leader judges it from its own view.

use super::*;

impl Core {
    /// When this replica is a standby, the leader it knows (`"unknown"` when none): a node's
    /// shim watches its egress IPs at the leader only, which alone judges shim liveness.
    pub fn standby_of(&self) -> Option<String> {
        match self.cfg.leadership.standing() {
            crate::ha::Standing::Standby { leader, .. } => {
                Some(leader.unwrap_or_else(|| "unknown".into()))
            }
            _ => None,
        }
    }

    /// A node's shim opened (`open`) or closed a `WatchEgress` stream. When its last stream
    /// closes, returns the epoch to hand to [`Core::shim_grace_over`] after the shim grace.
    pub fn shim_stream(&mut self, node: &str, open: bool) -> Option<(u64, Duration)> {
        let w = self.shims.entry(node.to_owned()).or_default();
        w.epoch += 1;
        if open {
            w.streams += 1;
            if std::mem::take(&mut w.lost) {
                let switch_up = self
                    .model
                    .node(node)
                    .is_some_and(|n| self.connected.contains_key(&n.dpid));
                self.publish(Event::now(
                    "ShimWatching",
                    format!("node/{node}"),
                    format!("node {node}'s shim watches its egress IPs again"),
                ));
                if switch_up && !self.unreachable.contains(node) {
                    self.node_liveness(node, true);
                }
            }
            None
        } else {
            w.streams = w.streams.saturating_sub(1);
            (w.streams == 0).then_some((w.epoch, self.cfg.shim_grace))
        }
    }

    /// The shim grace after `node`'s last egress watch closed at `epoch` is over: unless a
    /// stream came back meanwhile, the node is offline for egress IPs (its IPs move or drop
    /// out as for a lost switch), until its shim watches again.
    pub fn shim_grace_over(&mut self, node: &str, epoch: u64) {
        let Some(w) = self.shims.get_mut(node) else {
            return;
        };
        if w.epoch != epoch || w.streams > 0 || w.lost {
            return;
        }
        w.lost = true;
        tracing::warn!(%node, "the node's shim stopped watching its egress IPs");
        self.publish(Event::now(
            "ShimLost",
            format!("node/{node}"),
            format!("node {node}'s shim stopped watching its egress IPs: they move or drop out"),
        ));
        self.node_liveness(node, false);
    }

    /// The nodes the egress probe watches: every node that may host egress IPs, by its
    /// underlay address.
    pub fn egress_probe_targets(&self) -> Vec<(String, std::net::Ipv4Addr)> {
        self.model
            .egress_snapshot()
            .nodes
            .keys()
            .filter_map(|n| self.model.node(n).map(|info| (n.clone(), info.ip)))
            .collect()
    }

    /// The egress probe found `node`'s underlay address unreachable (or answering again):
    /// an unreachable node is offline for egress IPs at once, whatever its switch session
    /// (whose echo timeout is generous, so as not to drop busy switches) still believes; a
    /// reachable one is online again once its switch is connected and its shim watching.
    pub fn node_reachable(&mut self, node: &str, reachable: bool) {
        let changed = if reachable {
            self.unreachable.remove(node)
        } else {
            self.unreachable.insert(node.to_owned())
        };
        if !changed {
            return;
        }
        if reachable {
            tracing::info!(%node, "the node answers the egress probe again");
            self.publish(Event::now(
                "NodeReachable",
                format!("node/{node}"),
                format!("node {node} answers the egress probe again"),
            ));
            let switch_up = self
                .model
                .node(node)
                .is_some_and(|n| self.connected.contains_key(&n.dpid));
            if switch_up && !self.shims.get(node).is_some_and(|w| w.lost) {
                self.node_liveness(node, true);
            }
        } else {
            tracing::warn!(%node, "the node does not answer the egress probe");
            self.publish(Event::now(
                "NodeUnreachable",
                format!("node/{node}"),
                format!("node {node} does not answer the egress probe over the underlay: its egress IPs move or drop out"),
            ));
            self.node_liveness(node, false);
        }
    }

    /// Egress IPs follow switch liveness: a node whose switch is disconnected is offline (its
    /// automatic egress IPs move to other nodes, its manual ones drop out of the groups) and
    /// online again once its switch is back. Affected switches are reprogrammed at once.
    pub(super) fn node_liveness(&mut self, node: &str, online: bool) {
        let node = node.to_string();
        self.mutate_or_refuse(Box::new(move |m: &mut ClusterModel| {
            let affected = m.set_node_online(&node, online);
            if affected.is_empty() {
                return None;
            }
            let ev = Event::now(
                if online {
                    "EgressNodeOnline"
                } else {
                    "EgressNodeOffline"
                },
                format!("node/{node}"),
                if online {
                    format!("node {node} is back: its egress IPs are usable again")
                } else {
                    format!("node {node}'s switch is gone: its egress IPs moved or dropped out")
                },
            );
            tracing::info!(%node, online, "egress IPs follow node liveness");
            let finish: Finish = Box::new(move |r: Result<(), ApiError>| {
                if let Err(e) = r {
                    tracing::warn!(error = %e, "egress failover not acknowledged by every switch");
                }
            });
            Some((
                Effects {
                    affected,
                    changes: vec![egress_change(m)],
                    require_connected: None,
                    undo: None,
                    events: vec![ev],
                },
                finish,
            ))
        }), None);
    }

    /// This replica became leader or standby. A new leader takes over the controller's own
    /// decisions from its view: egress liveness follows the switches connected to it (and
    /// the shims watching it).
    pub(super) fn standing_changed(&mut self, s: crate::ha::Standing) {
        let (kind, msg) = match &s {
            crate::ha::Standing::Leader { generation } => (
                "LeaderElected",
                format!("this replica leads (generation {generation}): it is OpenFlow master on every switch"),
            ),
            crate::ha::Standing::Standby { generation, leader } => (
                "Standby",
                format!(
                    "this replica is a standby (leader {}, generation {generation}): OpenFlow slave",
                    leader.as_deref().unwrap_or("unknown")
                ),
            ),
            crate::ha::Standing::Alone => return,
        };
        self.publish(Event::now(kind, "controller", msg));
        if matches!(s, crate::ha::Standing::Leader { .. }) {
            self.restart_shim_graces();
            self.persist_egress_placements();
        } else {
            self.forget_liveness_decisions();
        }
        if !matches!(s, crate::ha::Standing::Leader { .. })
            || self.started.elapsed() < self.cfg.liveness_grace
        {
            // Within the start-up grace, switches are still connecting: the grace's own
            // check runs when it ends.
            return;
        }
        self.rejudge_liveness();
    }

    /// Egress IPs configured in the store by another writer (`egressCIDRs` on a HostSubnet and
    /// `egressIPs` on a NetNamespace written with `oc`/`kubectl`) are placed by the model when
    /// the change is applied; the leader writes those placements back (the HostSubnets'
    /// `egressIPs`, as OpenShift's master does), so every replica and `oc get hostsubnets` see
    /// the one placement. Only the placements are written: requests that differ between the
    /// model and the store (one the model refused) are never rewritten from here.
    pub(super) fn persist_egress_placements(&mut self) {
        let Some(stored) = self.stored_egress.clone() else {
            return;
        };
        let now = self.model.egress_snapshot();
        if !placements_to_write(now, &stored) || !self.cfg.leadership.leads() {
            return;
        }
        tracing::info!(
            placements = now.automatic.len(),
            "egress IPs placed on a stored change: writing the placements back"
        );
        self.mutate_or_refuse(
            Box::new(move |m: &mut ClusterModel| {
                if !placements_to_write(m.egress_snapshot(), &stored) {
                    return None;
                }
                let finish: Finish = Box::new(|r: Result<(), ApiError>| {
                    if let Err(e) = r {
                        tracing::warn!(error = %e, "writing egress IP placements back failed");
                    }
                });
                Some((
                    Effects {
                        affected: Affected::none(),
                        changes: vec![egress_change(m)],
                        require_connected: None,
                        undo: None,
                        events: Vec::new(),
                    },
                    finish,
                ))
            }),
            None,
        );
    }

    /// A standby holds no egress liveness decision of its own: the nodes this replica took
    /// offline while it led are online again in its model. That a node is offline is not
    /// stored (only the placements it caused are, and the leader's reach every replica through
    /// the store), and a standby's own liveness changes are refused, so a deposed leader kept
    /// its last view for as long as it stayed a standby: its flows differed from the leader's,
    /// and every write made through it (a shim's AttachPod, an admin change) waited its 20 s
    /// for switches that never held them, and an attach was taken back (the chaos soak's
    /// seed 23: a CNI ADD retried for two minutes). Local only: nothing is stored or sent.
    fn forget_liveness_decisions(&mut self) {
        let offline: Vec<String> = self
            .model
            .nodes()
            .filter(|n| !self.model.node_online(&n.name))
            .map(|n| n.name.clone())
            .collect();
        if offline.is_empty() {
            return;
        }
        tracing::info!(
            nodes = ?offline,
            "a standby takes the leader's egress placements: nodes this replica took offline count as online here"
        );
        if self.resyncing {
            // The relist under way recomputes every node's flows from the model when it ends.
            for n in &offline {
                self.model.set_node_online(n, true);
            }
            return;
        }
        let f: MutateFn = Box::new(move |m: &mut ClusterModel| {
            let mut affected = Affected::none();
            for n in &offline {
                affected.merge(m.set_node_online(n, true));
            }
            if affected.is_empty() {
                return None;
            }
            let finish: Finish = Box::new(|_| {});
            Some((
                Effects {
                    affected,
                    changes: Vec::new(),
                    require_connected: None,
                    undo: None,
                    events: Vec::new(),
                },
                finish,
            ))
        });
        self.mutate(f, false);
    }

    /// A new leader forgets what it saw of shims' streams before it led (a shim that once
    /// watched here and then moved to the leader of the time is not lost): every node without
    /// a stream here gets a fresh grace to find this replica, and is lost only after it.
    fn restart_shim_graces(&mut self) {
        let grace = self.cfg.shim_grace;
        let handle = self.handle();
        for (node, w) in &mut self.shims {
            if w.streams > 0 {
                continue;
            }
            w.lost = false;
            w.epoch += 1;
            let (node, epoch) = (node.clone(), w.epoch);
            if let Some(h) = handle.clone() {
                tokio::spawn(async move {
                    tokio::time::sleep(grace).await;
                    let _ = h.read(move |c| c.shim_grace_over(&node, epoch)).await;
                });
            }
        }
    }

    /// Every node's egress liveness from this replica's own view: online when its switch is
    /// connected here and its shim has not stopped watching (a new leader's decisions).
    pub(super) fn rejudge_liveness(&mut self) {
        let nodes: Vec<(String, u64)> = self
            .model
            .nodes()
            .map(|n| (n.name.clone(), n.dpid))
            .collect();
        for (name, dpid) in nodes {
            let online = self.connected.contains_key(&dpid)
                && !self.shims.get(&name).is_some_and(|w| w.lost)
                && !self.unreachable.contains(&name);
            self.node_liveness(&name, online);
        }
    }

    /// At the end of the start-up grace: nodes whose switch never connected are offline. A
    /// replica that became leader during the grace also brings back online the nodes its
    /// predecessor marked offline that are connected here.
    pub(super) fn mark_unconnected_offline(&mut self) {
        if matches!(
            self.cfg.leadership.standing(),
            crate::ha::Standing::Leader { .. }
        ) {
            self.rejudge_liveness();
            return;
        }
        let connected: std::collections::BTreeSet<u64> = self.connected.keys().copied().collect();
        let down: Vec<String> = self
            .model
            .nodes()
            .filter(|n| !connected.contains(&n.dpid))
            .map(|n| n.name.clone())
            .collect();
        for n in down {
            self.node_liveness(&n, false);
        }
    }
}

/// Whether the model's egress snapshot `now` differs from the stored one only in its
/// placements: the requests (nodes' egress CIDRs and IPs, namespaces' egress IPs) are the same
/// and the placements are not. Only then does the leader write the placements back.
fn placements_to_write(
    now: &topology::model::EgressSnapshot,
    stored: &topology::model::EgressSnapshot,
) -> bool {
    now.automatic != stored.automatic
        && now.nodes == stored.nodes
        && now.namespaces == stored.namespaces
}
