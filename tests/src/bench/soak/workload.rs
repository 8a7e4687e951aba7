//! The soak's workload: a seeded sequence of writes through the admin API (any live replica,
//! so standbys serve too) and the CNI plugin — pods created and deleted, labels changed,
//! policies applied and deleted, namespaces relabelled, joined and isolated. Each write is
//! retried until it is acknowledged (every one of them is idempotent), so the state the soak
//! believes in is exact; each acknowledged state becomes a [`Version`] for the judge.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::cni::{add_pod_via_cni, invoke_cni, CniCall};
use crate::e2e::{TcpServer, UdpEcho};

use super::cluster::{lock, Cluster, NODES};
use super::history::History;
use super::judge::Version;
use super::truth::{IngressRule, Labels, Mode, Model, Peer, PodKey, PodObj, Policy, Proto};

/// TCP port every pod serves.
pub const TCP_PORT: u16 = 8080;
/// UDP port every pod echoes on.
pub const UDP_PORT: u16 = 8081;
/// Namespaces the workload churns.
pub const CHURN_NS: [&str; 3] = ["a", "b", "c"];
/// Namespaces with a fixed role: established streams, egress IP, egress firewall, multicast.
pub const FIXED_NS: [&str; 4] = ["steady", "egress", "fw", "mc"];
const APPS: [&str; 3] = ["web", "db", "api"];
const TEAMS: [&str; 3] = ["x", "y", "z"];
/// Pods the workload keeps in the churn namespaces (at least, at most).
const CHURN_PODS: (usize, usize) = (4, 9);
/// How long one write is retried before the run gives up on it.
const WRITE_DEADLINE: Duration = Duration::from_secs(120);

/// A pod's live parts: its namespace, the servers in it, the CNI call that made it.
pub struct PodRun {
    /// Network namespace.
    pub netns: String,
    /// Address.
    pub ip: Ipv4Addr,
    /// Node.
    pub node: usize,
    /// The ADD call (DEL is the same with another command).
    pub call: CniCall,
    _tcp: TcpServer,
    _udp: UdpEcho,
}

/// What the workload believes, and its history of acknowledged states.
pub struct World {
    /// The state after the last acknowledged write.
    pub current: Model,
    /// Every acknowledged state, oldest first.
    pub versions: Vec<Version>,
    /// Live pods.
    pub pods: BTreeMap<PodKey, Arc<PodRun>>,
    next_group: u32,
}

impl World {
    /// An empty world in `mode`.
    pub fn new(mode: Mode) -> Self {
        let m = Model::new(mode);
        World {
            versions: vec![Version {
                start_ms: 0,
                ack_ms: 0,
                model: Arc::new(m.clone()),
            }],
            current: m,
            pods: BTreeMap::new(),
            next_group: 100,
        }
    }

    fn commit(&mut self, model: Model, start_ms: u64, ack_ms: u64) {
        self.current = model.clone();
        self.versions.push(Version {
            start_ms,
            ack_ms,
            model: Arc::new(model),
        });
    }
}

/// Kinds of workload steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    AddPod,
    DeletePod,
    LabelPod,
    ApplyPolicy,
    DeletePolicy,
    LabelNamespace,
    NetId,
    JoinRefused,
}

/// The workload's thread state.
pub struct Workload<'a> {
    c: &'a Cluster,
    h: &'a History,
    world: &'a Mutex<World>,
    rng: StdRng,
    seq: u64,
    rr: usize,
    /// Steps done (acknowledged).
    pub steps: u64,
    /// Writes that needed more than one attempt.
    pub retried: u64,
}

impl<'a> Workload<'a> {
    /// A workload drawing from `seed`.
    pub fn new(c: &'a Cluster, h: &'a History, world: &'a Mutex<World>, seed: u64) -> Self {
        Workload {
            c,
            h,
            world,
            rng: StdRng::seed_from_u64(seed),
            seq: 0,
            rr: 0,
            steps: 0,
            retried: 0,
        }
    }

    /// Retries `args` against the live replicas (round robin) until one acknowledges it;
    /// `ok_err` says which error texts mean "already done". The error of the last attempt when
    /// the deadline passes.
    fn write(&mut self, args: &[&str], ok_err: &dyn Fn(&str) -> bool) -> Result<String, String> {
        let t0 = Instant::now();
        let mut attempts = 0u32;
        let mut logged = String::new();
        loop {
            self.rr += 1;
            let order = self.c.up_replicas(self.rr);
            let mut last = String::from("no replica up");
            for i in order {
                attempts += 1;
                match self.c.ctl_at(i, 10, args) {
                    Ok(out) => {
                        if attempts > 1 {
                            self.retried += 1;
                        }
                        return Ok(out);
                    }
                    Err(e) if ok_err(&e) => {
                        if attempts > 1 {
                            self.retried += 1;
                        }
                        return Ok(e);
                    }
                    Err(e) => {
                        // Each new refusal once in the history (etcd's NOSPACE alarm, no
                        // quorum, a standby's refusal): what the writer was told.
                        let e = format!("r{i}: {e}");
                        if e != logged {
                            self.h.log(
                                "write-refused",
                                serde_json::json!({"args": args, "error": e}),
                            );
                            logged = e.clone();
                        }
                        last = e;
                    }
                }
            }
            if t0.elapsed() > WRITE_DEADLINE {
                return Err(format!("flowmeshctl {}: {last}", args.join(" ")));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn no_err(_: &str) -> bool {
        false
    }

    /// Applies `yaml` (`apply -f` of a file in the lab's run directory).
    fn apply(&mut self, yaml: &str) -> Result<(), String> {
        self.seq += 1;
        let path = self.c.lab.run_dir().join(format!("soak-{}.yaml", self.seq));
        std::fs::write(&path, yaml).map_err(|e| format!("write {}: {e}", path.display()))?;
        let p = path.display().to_string();
        self.write(&["apply", "-f", &p], &Self::no_err).map(|_| ())
    }

    /// The initial objects: namespaces (labelled), the egress IP, the egress firewall,
    /// multicast, the fixed pods and a few churn pods.
    pub fn setup(&mut self) -> Result<(), String> {
        let t0 = self.h.ms();
        let mut m = lock(self.world).current.clone();
        let mut yaml = String::new();
        for (i, ns) in FIXED_NS.iter().chain(CHURN_NS.iter()).enumerate() {
            let team = TEAMS[i % TEAMS.len()];
            yaml.push_str(&format!(
                "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels:\n    team: \"{team}\"\n---\n"
            ));
            m.namespaces.insert(
                (*ns).to_owned(),
                Labels::from([("team".into(), team.into())]),
            );
        }
        self.apply(&yaml)?;
        let eip = self.c.egress_ip.to_string();
        let hs = format!("--egress-ips={eip}");
        let node = format!("node{}", super::cluster::EGRESS_NODE);
        self.write(&["patch", "hostsubnet", &node, &hs], &Self::no_err)?;
        self.write(&["patch", "netnamespace", "egress", &hs], &Self::no_err)?;
        let fw = format!(
            "apiVersion: network.openshift.io/v1\nkind: EgressNetworkPolicy\nmetadata:\n  namespace: fw\n  name: default\nspec:\n  egress:\n  - type: Deny\n    to:\n      cidrSelector: {}/32\n",
            self.c.outside_b
        );
        self.apply(&fw)?;
        self.write(
            &[
                "annotate",
                "netnamespace",
                "mc",
                "netnamespace.network.openshift.io/multicast-enabled=true",
                "--overwrite",
            ],
            &Self::no_err,
        )?;
        let t1 = self.h.ms();
        lock(self.world).commit(m, t0, t1);
        self.h.log(
            "setup",
            serde_json::json!({"what": "namespaces, egress IP, egress firewall, multicast"}),
        );
        for (ns, name, node) in [
            ("steady", "steady-1", 1),
            ("steady", "steady-2", 2),
            ("steady", "steady-3", 3),
            ("egress", "egress-1", 1),
            ("fw", "fw-2", 2),
            ("mc", "mc-1", 1),
            ("mc", "mc-3", 3),
        ] {
            self.add_pod(ns, name, node, None)?;
        }
        for i in 0..CHURN_PODS.0 {
            let ns = CHURN_NS[i % CHURN_NS.len()];
            let app = APPS[i % APPS.len()];
            self.seq += 1;
            let name = format!("p{}", self.seq);
            self.add_pod(ns, &name, i % NODES + 1, Some(app))?;
        }
        Ok(())
    }

    /// CNI ADD of `ns/name` on `node` (retried under new names until acknowledged; a failed
    /// attempt is deleted again), its servers, then its `app` label.
    fn add_pod(
        &mut self,
        ns: &str,
        name: &str,
        node: usize,
        app: Option<&str>,
    ) -> Result<(), String> {
        let t0 = Instant::now();
        let mut attempt = 0u32;
        let pod = loop {
            attempt += 1;
            let this = if attempt == 1 {
                name.to_owned()
            } else {
                format!("{name}-{attempt}")
            };
            let start = self.h.ms();
            let shim = self.c.shim(node);
            match add_pod_via_cni(&self.c.lab, node, &shim, ns, &this) {
                Ok(p) => break (this, p, start),
                Err(e) => {
                    self.retried += 1;
                    self.h.log("cni-add-failed", serde_json::json!({"pod": format!("{ns}/{this}"), "node": node, "error": format!("{e:?}")}));
                    // Whatever the failed ADD left is removed before the next try.
                    let call = CniCall::new(
                        "DEL",
                        &shim.socket,
                        &this,
                        &crate::cni::netns_path(&format!("{}-{this}", self.c.lab.id())),
                        ns,
                        &this,
                    );
                    self.cni_del(node, &call)?;
                }
            }
            if t0.elapsed() > WRITE_DEADLINE {
                return Err(format!(
                    "CNI ADD {ns}/{name} on node{node}: not acknowledged within {WRITE_DEADLINE:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(250));
        };
        let (pname, p, start) = pod;
        let ack = self.h.ms();
        let tcp = TcpServer::start(&p.ns, p.ip, TCP_PORT, &pname).map_err(|e| e.to_string())?;
        let udp = UdpEcho::start(&p.ns, p.ip, UDP_PORT, &pname).map_err(|e| e.to_string())?;
        let key: PodKey = (ns.to_owned(), pname.clone());
        {
            let mut w = lock(self.world);
            let mut m = w.current.clone();
            m.pods.insert(
                key.clone(),
                PodObj {
                    node,
                    ip: p.ip,
                    labels: Labels::new(),
                },
            );
            w.pods.insert(
                key.clone(),
                Arc::new(PodRun {
                    netns: p.ns.clone(),
                    ip: p.ip,
                    node,
                    call: p.call.clone(),
                    _tcp: tcp,
                    _udp: udp,
                }),
            );
            w.commit(m, start, ack);
        }
        self.h.log("pod-added", serde_json::json!({"pod": format!("{ns}/{pname}"), "node": node, "ip": p.ip.to_string(), "add_ms": ack - start}));
        if let Some(app) = app {
            self.label_pod(&key, app)?;
        }
        Ok(())
    }

    fn cni_del(&mut self, node: usize, call: &CniCall) -> Result<(), String> {
        let t0 = Instant::now();
        loop {
            let shim = self.c.shim(node);
            let mut del = call.with_command("DEL");
            del.config = crate::cni::netconf(&shim.socket);
            match invoke_cni(&self.c.lab, node, &del) {
                Ok(o) if o.exit_code == 0 => return Ok(()),
                Ok(o) => self.h.log("cni-del-failed", serde_json::json!({"container": call.container_id, "exit": o.exit_code, "stderr": o.stderr})),
                Err(e) => self.h.log("cni-del-failed", serde_json::json!({"container": call.container_id, "error": e.to_string()})),
            }
            if t0.elapsed() > WRITE_DEADLINE {
                return Err(format!(
                    "CNI DEL {}: not acknowledged within {WRITE_DEADLINE:?}",
                    call.container_id
                ));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn label_pod(&mut self, key: &PodKey, app: &str) -> Result<(), String> {
        let start = self.h.ms();
        let target = format!("{}/{}", key.0, key.1);
        let label = format!("app={app}");
        self.write(
            &["label", "pod", &target, &label, "--overwrite"],
            &Self::no_err,
        )?;
        let ack = self.h.ms();
        let mut w = lock(self.world);
        let mut m = w.current.clone();
        if let Some(p) = m.pods.get_mut(key) {
            p.labels.insert("app".into(), app.into());
        }
        w.commit(m, start, ack);
        Ok(())
    }

    /// One random step; what it did.
    pub fn step(&mut self) -> Result<serde_json::Value, String> {
        let churn: Vec<PodKey> = lock(self.world)
            .current
            .pods
            .keys()
            .filter(|k| CHURN_NS.contains(&k.0.as_str()))
            .cloned()
            .collect();
        let multitenant = self.c.mode == Mode::Multitenant;
        let roll = self.rng.random_range(0..100);
        // Each kind has a share of the rolls; a kind that does not fit now (too many or too
        // few pods) falls through to the next.
        let kind = match roll {
            0..=14 if churn.len() < CHURN_PODS.1 => Step::AddPod,
            0..=29 if churn.len() > CHURN_PODS.0 => Step::DeletePod,
            0..=44 if !churn.is_empty() => Step::LabelPod,
            0..=64 => Step::ApplyPolicy,
            65..=74 => Step::DeletePolicy,
            75..=84 => Step::LabelNamespace,
            _ if multitenant => Step::NetId,
            _ => Step::JoinRefused,
        };
        let v = match kind {
            Step::AddPod => {
                let ns = CHURN_NS[self.rng.random_range(0..CHURN_NS.len())];
                let node = self.rng.random_range(1..=NODES);
                let app = APPS[self.rng.random_range(0..APPS.len())];
                self.seq += 1;
                let name = format!("p{}", self.seq);
                self.add_pod(ns, &name, node, Some(app))?;
                serde_json::json!({"step": "pod-add", "pod": format!("{ns}/{name}"), "node": node, "app": app})
            }
            Step::DeletePod => {
                let key = churn[self.rng.random_range(0..churn.len())].clone();
                self.delete_pod(&key)?;
                serde_json::json!({"step": "pod-delete", "pod": format!("{}/{}", key.0, key.1)})
            }
            Step::LabelPod => {
                let key = churn[self.rng.random_range(0..churn.len())].clone();
                let app = APPS[self.rng.random_range(0..APPS.len())];
                self.label_pod(&key, app)?;
                serde_json::json!({"step": "pod-label", "pod": format!("{}/{}", key.0, key.1), "app": app})
            }
            Step::ApplyPolicy => {
                let ns = CHURN_NS[self.rng.random_range(0..CHURN_NS.len())];
                let name = format!("p{}", self.rng.random_range(0..2));
                let pol = self.random_policy();
                let start = self.h.ms();
                self.apply(&pol.to_yaml(ns, &name))?;
                let ack = self.h.ms();
                let mut w = lock(self.world);
                let mut m = w.current.clone();
                m.policies.insert((ns.into(), name.clone()), pol.clone());
                w.commit(m, start, ack);
                serde_json::json!({"step": "policy-apply", "policy": format!("{ns}/{name}"), "spec": format!("{pol:?}")})
            }
            Step::DeletePolicy => {
                let existing: Vec<(String, String)> =
                    lock(self.world).current.policies.keys().cloned().collect();
                if existing.is_empty() {
                    return Ok(serde_json::json!({"step": "none"}));
                }
                let (ns, name) = existing[self.rng.random_range(0..existing.len())].clone();
                let start = self.h.ms();
                let target = format!("{ns}/{name}");
                self.write(&["delete", "networkpolicy", &target], &|e: &str| {
                    e.contains("not found")
                })?;
                let ack = self.h.ms();
                let mut w = lock(self.world);
                let mut m = w.current.clone();
                m.policies.remove(&(ns, name));
                w.commit(m, start, ack);
                serde_json::json!({"step": "policy-delete", "policy": target})
            }
            Step::LabelNamespace => {
                let ns = CHURN_NS[self.rng.random_range(0..CHURN_NS.len())];
                let team = TEAMS[self.rng.random_range(0..TEAMS.len())];
                let start = self.h.ms();
                let label = format!("team={team}");
                self.write(
                    &["label", "namespace", ns, &label, "--overwrite"],
                    &Self::no_err,
                )?;
                let ack = self.h.ms();
                let mut w = lock(self.world);
                let mut m = w.current.clone();
                m.namespaces
                    .entry(ns.into())
                    .or_default()
                    .insert("team".into(), team.into());
                w.commit(m, start, ack);
                serde_json::json!({"step": "namespace-label", "namespace": ns, "team": team})
            }
            Step::NetId => self.netid_step()?,
            Step::JoinRefused => {
                // networkpolicy mode refuses join/isolate; the refusal must be clear and change
                // nothing (the final read-back checks the latter).
                let args = ["adm", "pod-network", "join-projects", "--to=a", "b"];
                let i = self
                    .c
                    .up_replicas(self.rng.random_range(0..3))
                    .first()
                    .copied();
                let refused = match i.map(|i| self.c.ctl_at(i, 10, &args)) {
                    Some(Err(e)) => e,
                    Some(Ok(out)) => {
                        return Err(format!(
                            "join-projects in networkpolicy mode was accepted: {out}"
                        ))
                    }
                    None => String::from("no replica up"),
                };
                serde_json::json!({"step": "join-refused", "error": refused})
            }
        };
        self.steps += 1;
        Ok(v)
    }

    fn netid_step(&mut self) -> Result<serde_json::Value, String> {
        let a = CHURN_NS[self.rng.random_range(0..CHURN_NS.len())];
        let b = CHURN_NS[self.rng.random_range(0..CHURN_NS.len())];
        let roll = self.rng.random_range(0..10);
        let start = self.h.ms();
        let (args, what): (Vec<String>, &str) = if roll < 5 && a != b {
            (
                vec![
                    "adm".into(),
                    "pod-network".into(),
                    "join-projects".into(),
                    format!("--to={a}"),
                    b.into(),
                ],
                "join",
            )
        } else if roll < 9 {
            (
                vec![
                    "adm".into(),
                    "pod-network".into(),
                    "isolate-projects".into(),
                    a.into(),
                ],
                "isolate",
            )
        } else {
            (
                vec![
                    "adm".into(),
                    "pod-network".into(),
                    "make-projects-global".into(),
                    a.into(),
                ],
                "global",
            )
        };
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        self.write(&refs, &Self::no_err)?;
        let ack = self.h.ms();
        let mut w = lock(self.world);
        let mut m = w.current.clone();
        match what {
            "join" => {
                let g = match m.groups.get(a) {
                    Some(g) => *g,
                    None => {
                        w.next_group += 1;
                        m.groups.insert(a.into(), w.next_group);
                        w.next_group
                    }
                };
                m.groups.insert(b.into(), g);
            }
            "isolate" => {
                w.next_group += 1;
                m.groups.insert(a.into(), w.next_group);
            }
            _ => {
                m.groups.insert(a.into(), 0);
            }
        }
        w.commit(m, start, ack);
        Ok(serde_json::json!({"step": format!("netid-{what}"), "a": a, "b": b}))
    }

    fn delete_pod(&mut self, key: &PodKey) -> Result<(), String> {
        let Some(run) = lock(self.world).pods.get(key).cloned() else {
            return Ok(());
        };
        let start = self.h.ms();
        self.cni_del(run.node, &run.call)?;
        let ack = self.h.ms();
        let mut w = lock(self.world);
        let mut m = w.current.clone();
        m.pods.remove(key);
        w.pods.remove(key);
        w.commit(m, start, ack);
        Ok(())
    }

    fn random_policy(&mut self) -> Policy {
        let r = &mut self.rng;
        let sel = |r: &mut StdRng, key: &str, vals: &[&str]| -> Labels {
            Labels::from([(
                key.to_owned(),
                vals[r.random_range(0..vals.len())].to_owned(),
            )])
        };
        let selector = if r.random_bool(0.5) {
            Labels::new()
        } else {
            sel(r, "app", &APPS)
        };
        let n_rules = match r.random_range(0..100) {
            0..15 => 0,
            15..75 => 1,
            _ => 2,
        };
        let mut ingress = Vec::new();
        for _ in 0..n_rules {
            let n_from = r.random_range(0..=2);
            let mut from = Vec::new();
            for _ in 0..n_from {
                from.push(match r.random_range(0..3) {
                    0 => Peer {
                        pods: Some(sel(r, "app", &APPS)),
                        namespaces: None,
                    },
                    1 => Peer {
                        pods: None,
                        namespaces: Some(sel(r, "team", &TEAMS)),
                    },
                    _ => Peer {
                        pods: Some(sel(r, "app", &APPS)),
                        namespaces: Some(sel(r, "team", &TEAMS)),
                    },
                });
            }
            let ports = match r.random_range(0..10) {
                0..4 => vec![],
                4..7 => vec![(Proto::Tcp, TCP_PORT)],
                _ => vec![(Proto::Udp, UDP_PORT)],
            };
            ingress.push(IngressRule { from, ports });
        }
        Policy { selector, ingress }
    }
}

/// Runs steps every 2-5 s (drawn from the seed) until `stop`; the error that ended it, if any.
pub fn run(mut w: Workload<'_>, stop: &AtomicBool) -> (u64, u64, Option<String>) {
    while !stop.load(Ordering::Relaxed) {
        let pause = Duration::from_millis(w.rng.random_range(2_000..5_000));
        let until = Instant::now() + pause;
        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let start = w.h.ms();
        match w.step() {
            Ok(v) => {
                let mut v = v;
                if let Some(o) = v.as_object_mut() {
                    o.insert("start_ms".into(), start.into());
                }
                w.h.log("step", v);
            }
            Err(e) => {
                w.h.log("step-failed", serde_json::json!({"error": e}));
                return (w.steps, w.retried, Some(e));
            }
        }
    }
    (w.steps, w.retried, None)
}
