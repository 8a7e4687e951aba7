//! Which connection drives a datapath. A switch that connects is handed to its node's
//! reconciler (or, claimed by no node, to an unknown-datapath one). A second connection for a
//! datapath id that is already connected does not simply win: the connected switch is sent an
//! echo, and the newcomer replaces it only if no reply comes within [`CONTEST_ECHO`]. A
//! restarted Open vSwitch whose old connection is dead gets in at once (its old session has
//! ended, or cannot answer); a peer claiming the datapath id of a switch that answers is
//! refused, closed and logged.

use super::*;

/// How long the connected switch has to answer the echo sent when another connection claims
/// its datapath id.
pub const CONTEST_ECHO: Duration = Duration::from_secs(1);

impl Core {
    /// A switch completed its handshake on connection `conn_id`.
    pub(super) fn switch_up(&mut self, conn_id: u64, dpid: u64, link: Arc<dyn SwitchLink>) {
        // A switch whose certificate names another node than the one owning `dpid` never
        // takes the real switch's place in the connection table (it gets the default drop).
        let forged = self
            .model
            .node_by_dpid(dpid)
            .is_some_and(|n| !link.may_serve(&n.name));
        if !forged {
            if let Some((old_conn, old_link)) = self
                .connected
                .get(&dpid)
                .filter(|(c, _)| *c != conn_id)
                .cloned()
            {
                self.contest(conn_id, dpid, link, old_conn, old_link);
                return;
            }
        }
        self.admit_switch(conn_id, dpid, link, forged);
    }

    /// Asks the switch on `old_conn` for an echo; the answer decides in
    /// [`Core::contest_over`] whether `link` may take its place.
    fn contest(
        &mut self,
        conn_id: u64,
        dpid: u64,
        link: Arc<dyn SwitchLink>,
        old_conn: u64,
        old_link: Arc<dyn SwitchLink>,
    ) {
        let Some(me) = self.me.upgrade() else {
            return;
        };
        self.contested.insert(conn_id);
        tracing::info!(
            dpid = format!("{dpid:#018x}"),
            new_peer = %link.peer(),
            connected_peer = %old_link.peer(),
            "a second connection claims a connected datapath id; asking the connected switch for an echo"
        );
        tokio::spawn(async move {
            let alive = old_link.probe(CONTEST_ECHO).await;
            let _ = me.send(CoreCmd::Read(Box::new(move |c: &mut Core| {
                c.contest_over(conn_id, dpid, link, old_conn, old_link, alive)
            })));
        });
    }

    /// The connected switch answered the echo (`alive`) or not: refuse the newcomer, or close
    /// the old connection and admit it.
    fn contest_over(
        &mut self,
        conn_id: u64,
        dpid: u64,
        link: Arc<dyn SwitchLink>,
        old_conn: u64,
        old_link: Arc<dyn SwitchLink>,
        alive: bool,
    ) {
        if link.is_closed() || !self.contested.contains(&conn_id) {
            // The newcomer went away meanwhile.
            self.contested.remove(&conn_id);
            return;
        }
        match self.connected.get(&dpid).cloned() {
            Some((c, _)) if c == old_conn && alive => {
                let (peer, holder) = (link.peer(), old_link.peer());
                tracing::warn!(
                    dpid = format!("{dpid:#018x}"),
                    %peer,
                    connected_peer = %holder,
                    "refusing a second connection for datapath {dpid:#018x} from {peer}: the switch connected from {holder} answers (a spoofed datapath id, or a second bridge with the same id)"
                );
                self.publish(Event::now(
                    "SwitchRefused",
                    format!("switch/{dpid:#018x}"),
                    format!(
                        "a connection from {peer} claimed datapath {dpid:#018x}, which the switch connected from {holder} holds and answers for; refused"
                    ),
                ));
                // Stays in `contested` until its session ends, so that its end is no news.
                tokio::spawn(async move { link.close().await });
            }
            Some((c, _)) if c == old_conn => {
                tracing::warn!(
                    dpid = format!("{dpid:#018x}"),
                    peer = %link.peer(),
                    old_peer = %old_link.peer(),
                    "the connected switch did not answer an echo within {CONTEST_ECHO:?}: the new connection replaces it"
                );
                self.contested.remove(&conn_id);
                tokio::spawn(async move { old_link.close().await });
                self.admit_switch(conn_id, dpid, link, false);
            }
            Some((c, l)) => {
                // Another connection took the datapath meanwhile: it must answer in turn.
                self.contested.remove(&conn_id);
                self.contest(conn_id, dpid, link, c, l);
            }
            None => {
                // The old connection ended meanwhile.
                self.contested.remove(&conn_id);
                self.admit_switch(conn_id, dpid, link, false);
            }
        }
    }

    /// Hands the connection to the reconciler of the node claiming `dpid` (unless `forged`),
    /// or to an unknown-datapath reconciler.
    fn admit_switch(&mut self, conn_id: u64, dpid: u64, link: Arc<dyn SwitchLink>, forged: bool) {
        let peer = link.peer();
        if !forged {
            self.connected.insert(dpid, (conn_id, link.clone()));
        }
        match self
            .model
            .node_by_dpid(dpid)
            .map(|n| n.name.clone())
            .filter(|n| link.may_serve(n))
        {
            Some(node) => {
                let h = self.reconciler_for(&node);
                let _ = h.tx.send(ReconcileCmd::Connected {
                    conn_id,
                    dpid,
                    link,
                });
                if !self.shims.get(&node).is_some_and(|w| w.lost)
                    && !self.unreachable.contains(&node)
                {
                    self.node_liveness(&node, true);
                }
                self.publish(Event::now(
                    "SwitchConnected",
                    format!("node/{node}"),
                    format!("switch {dpid:#018x} of node {node} connected from {peer}"),
                ));
            }
            None => {
                let old = self.unknown.remove(&dpid);
                self.start_unknown(old, conn_id, dpid, link);
            }
        }
    }

    /// The session of connection `conn_id` ended.
    pub(super) fn switch_down(&mut self, conn_id: u64, dpid: u64) {
        if self.contested.remove(&conn_id) {
            // Held back or refused: it never drove the switch.
            return;
        }
        if self
            .connected
            .get(&dpid)
            .is_some_and(|(c, _)| *c == conn_id)
        {
            self.connected.remove(&dpid);
        }
        for h in self.reconcilers.values().chain(self.unknown.values()) {
            let _ = h.tx.send(ReconcileCmd::Disconnected { conn_id });
        }
        if let Some(h) = self.unknown.get(&dpid) {
            if !self.connected.contains_key(&dpid) {
                let (tx, _rx) = oneshot::channel();
                let _ = h.tx.send(ReconcileCmd::Stop { reply: tx });
                self.unknown.remove(&dpid);
            }
        }
        if !self.connected.contains_key(&dpid) {
            if let Some(node) = self.model.node_by_dpid(dpid).map(|n| n.name.clone()) {
                self.node_liveness(&node, false);
            }
        }
        self.publish(Event::now(
            "SwitchDisconnected",
            format!("switch/{dpid:#018x}"),
            format!("switch {dpid:#018x} disconnected"),
        ));
    }
}
