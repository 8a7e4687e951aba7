//! Network policy audit logging on the node: the shim holds a second OpenFlow connection to
//! its own bridge (the management socket `<rundir>/<bridge>.mgmt`) under the logging flows'
//! controller id, so the packet-ins of `controller(id=..,userdata=..)` come here and to no
//! other controller; each becomes at most one line (see [`event`]) in the log file and the
//! configured destination (see [`sink`]). The settings (`policyAuditConfig`) come from the
//! controller's `WatchAudit` stream and apply as they change; the pod names from `LookupPods`.
//!
//! Events the bridge's meter dropped (its band's packet count, read every second over the
//! same connection) and events over the shim's own limit are reported as `suppressed=N` in the
//! next line written.

pub mod event;
pub mod sink;

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use ofproto::message::nicira::{self, PacketIn2};
use ofproto::session::{Backoff, Connector, SessionConfig, SessionEvent, SwitchHandle, Target};
use proto::node::AuditSettings;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::nodeapi::NodeApi;
use event::{Decision, Ends, Event, Flow5, Gate, Tag};
use sink::{Destination, SinkSettings, Sinks};

/// The logging flows' controller id and meter (the pipeline's `AUDIT_CONTROLLER_ID` and
/// `AUDIT_METER_ID`), used until the controller's settings say otherwise.
pub const DEFAULT_CONTROLLER_ID: u16 = 0xa0d1;
/// See [`DEFAULT_CONTROLLER_ID`].
pub const DEFAULT_METER_ID: u32 = 1;

/// Where the node's audit log lives by default.
pub const DEFAULT_LOG_FILE: &str = "/var/log/flowmesh/acl-audit-log.log";

/// How long a pod name looked up stays in the cache.
const NAME_TTL: Duration = Duration::from_secs(30);
/// The longest a line waits for the pod names of its addresses.
const LOOKUP_DEADLINE: Duration = Duration::from_secs(1);

/// What the audit logger needs from the shim.
#[derive(Clone, Debug)]
pub struct AuditOptions {
    /// Node name.
    pub node: String,
    /// The bridge's OpenFlow management socket.
    pub mgmt_socket: PathBuf,
    /// The log file.
    pub log_file: PathBuf,
    /// The syslog socket of the `libc` destination.
    pub syslog_socket: PathBuf,
    /// Host name in syslog messages.
    pub hostname: String,
}

/// The settings in effect before the controller sent any: OpenShift's defaults.
fn default_settings(node: &str) -> AuditSettings {
    AuditSettings {
        node: node.to_owned(),
        rate_limit: 20,
        max_file_size_mb: 50,
        max_log_files: 5,
        destination: "null".into(),
        syslog_facility: "local0".into(),
        syslog_facility_code: 16,
        controller_id: u32::from(DEFAULT_CONTROLLER_ID),
        meter_id: DEFAULT_METER_ID,
        keepalive_ms: 0,
    }
}

fn sink_settings(opts: &AuditOptions, s: &AuditSettings) -> SinkSettings {
    let destination = match s.destination.parse::<Destination>() {
        Ok(d) => d,
        Err(e) => {
            warn!(error = %e, "audit destination refused; writing the log file only");
            Destination::Null
        }
    };
    SinkSettings {
        file: opts.log_file.clone(),
        max_file_bytes: u64::from(s.max_file_size_mb.max(1)) * 1_000_000,
        max_log_files: s.max_log_files,
        destination,
        facility: u8::try_from(s.syslog_facility_code.min(23)).unwrap_or(16),
        syslog_socket: opts.syslog_socket.clone(),
        hostname: opts.hostname.clone(),
    }
}

/// Follows `WatchAudit`, publishing each settings message; reconnects (on new connections)
/// when the stream ends or stays silent for three keepalives.
async fn follow_settings(mut api: NodeApi, node: String, tx: watch::Sender<Option<AuditSettings>>) {
    let mut delay = Duration::from_millis(200);
    loop {
        match api.watch_audit(&node).await {
            Ok(mut stream) => loop {
                let keepalive = tx
                    .borrow()
                    .as_ref()
                    .map(|s| Duration::from_millis(u64::from(s.keepalive_ms)))
                    .filter(|d| !d.is_zero())
                    .unwrap_or(Duration::from_secs(10));
                match tokio::time::timeout(keepalive * 3, stream.message()).await {
                    Ok(Ok(Some(s))) => {
                        delay = Duration::from_millis(200);
                        if tx.borrow().as_ref() != Some(&s) {
                            let _ = tx.send(Some(s));
                        }
                    }
                    Ok(Ok(None)) => break,
                    Ok(Err(e)) => {
                        debug!(error = %e, "audit settings stream ended");
                        break;
                    }
                    Err(_) => {
                        warn!("no audit settings from the controller for three keepalives; reconnecting");
                        break;
                    }
                }
            },
            Err(e) => debug!(error = %e, "WatchAudit not answered yet"),
        }
        api = api.fresh_connections();
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(10));
    }
}

/// What the logger counted, for its periodic log message and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packet-ins received.
    pub packet_ins: u64,
    /// Lines written.
    pub lines: u64,
    /// Packet-ins that were not audit events (other userdata, unparsable packets).
    pub ignored: u64,
}

/// The logger's state (owned by its task).
struct Logger {
    opts: AuditOptions,
    api: NodeApi,
    settings: AuditSettings,
    gate: Gate,
    sinks: Sinks,
    names: HashMap<Ipv4Addr, (Option<String>, Instant)>,
    counters: Counters,
    /// The meter band's drop count as last read on this connection.
    meter_drops: MeterReading,
}

/// The audit meter's band drops as last read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MeterReading {
    /// Not read on this connection yet: the first reading is the baseline.
    Unread,
    /// The bridge had no audit meter: one that appears starts from zero.
    Absent,
    /// This many.
    Count(u64),
}

impl Logger {
    fn apply(&mut self, s: AuditSettings) {
        if s == self.settings {
            return;
        }
        info!(
            rate_limit = s.rate_limit,
            destination = %s.destination,
            max_file_size_mb = s.max_file_size_mb,
            "audit settings"
        );
        self.gate.set_rate(s.rate_limit);
        self.sinks.reconfigure(sink_settings(&self.opts, &s));
        self.settings = s;
    }

    /// The pod names of both ends, from the cache or the controller (bounded wait).
    async fn ends(&mut self, f: &Flow5) -> Ends {
        let now = Instant::now();
        let fresh = |e: &(Option<String>, Instant)| now.duration_since(e.1) < NAME_TTL;
        let missing: Vec<Ipv4Addr> = [f.src, f.dst]
            .into_iter()
            .filter(|ip| !self.names.get(ip).is_some_and(fresh))
            .collect();
        if !missing.is_empty() {
            let ips = missing.iter().map(Ipv4Addr::to_string).collect();
            match tokio::time::timeout(LOOKUP_DEADLINE, self.api.lookup_pods(&self.opts.node, ips))
                .await
            {
                Ok(Ok(found)) => {
                    if self.names.len() > 65_536 {
                        self.names.retain(|_, e| now.duration_since(e.1) < NAME_TTL);
                    }
                    for ip in &missing {
                        let name = found
                            .iter()
                            .find(|p| p.ip.parse() == Ok(*ip))
                            .map(|p| format!("{}/{}", p.namespace, p.name));
                        self.names.insert(*ip, (name, now));
                    }
                }
                Ok(Err(e)) => debug!(error = %e, "LookupPods failed; the line names no pods"),
                Err(_) => debug!("LookupPods timed out; the line names no pods"),
            }
        }
        let name = |ip: &Ipv4Addr| self.names.get(ip).and_then(|e| e.0.clone());
        Ends {
            src_pod: name(&f.src),
            dst_pod: name(&f.dst),
        }
    }

    async fn packet_in(&mut self, p: PacketIn2) {
        self.counters.packet_ins += 1;
        let (Some(tag), Some(flow)) = (Tag::parse(&p.userdata), Flow5::parse(&p.packet)) else {
            self.counters.ignored += 1;
            return;
        };
        let e = Event { tag, flow };
        // The line's time is when it was admitted (the rate limit's clock), not when the pod
        // names came back.
        let (now, wall) = (Instant::now(), SystemTime::now());
        if let Decision::Write { suppressed } = self.gate.admit(&e, now) {
            let ends = self.ends(&e.flow).await;
            let text = event::line(wall, &self.opts.node, &e, &ends, suppressed);
            self.sinks.write(&text, e.tag.syslog_severity(), wall);
            self.counters.lines += 1;
        }
    }

    /// Reads the meter's band drops; what grew since the last read was suppressed.
    async fn read_meter(&mut self, h: &SwitchHandle) {
        let stats = match h.meter_stats().await {
            Ok(s) => s,
            Err(e) => {
                debug!(error = %e, "reading the audit meter's statistics failed");
                return;
            }
        };
        let drops = stats
            .iter()
            .find(|m| m.meter_id == self.settings.meter_id)
            .and_then(|m| m.band_stats.first())
            .map(|b| b.0);
        let before = match self.meter_drops {
            MeterReading::Unread => drops,
            MeterReading::Absent => Some(0),
            MeterReading::Count(n) => Some(n),
        };
        if let (Some(now), Some(before)) = (drops, before) {
            // A smaller count: the meter was made again (counting from zero).
            self.gate
                .add_suppressed(if now >= before { now - before } else { now });
        }
        self.meter_drops = match drops {
            Some(n) => MeterReading::Count(n),
            None => MeterReading::Absent,
        };
    }
}

/// Runs the audit logger until the process ends.
pub async fn run(api: NodeApi, opts: AuditOptions) {
    let (tx, mut settings_rx) = watch::channel(None);
    tokio::spawn(follow_settings(api.clone(), opts.node.clone(), tx));
    let settings = default_settings(&opts.node);
    let mut logger = Logger {
        sinks: Sinks::new(sink_settings(&opts, &settings)),
        gate: Gate::new(settings.rate_limit),
        settings,
        opts: opts.clone(),
        api,
        names: HashMap::new(),
        counters: Counters::default(),
        meter_drops: MeterReading::Unread,
    };
    let (_connector, mut events) = Connector::start(
        Target::Unix(opts.mgmt_socket.clone()),
        SessionConfig::default(),
        Backoff {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(5),
        },
    );
    let mut handle: Option<SwitchHandle> = None;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reported = Instant::now();
    let mut last_reported = Counters::default();
    loop {
        tokio::select! {
            ev = events.next() => {
                let Some(ev) = ev else { return };
                match ev {
                    SessionEvent::Ready { handle: h, .. } => {
                        let id = u16::try_from(logger.settings.controller_id)
                            .unwrap_or(DEFAULT_CONTROLLER_ID);
                        match h
                            .send_batch(vec![
                                nicira::set_controller_id(id),
                                nicira::set_packet_in_format_nxt2(),
                            ])
                            .await
                        {
                            Ok(()) => {
                                info!(socket = %opts.mgmt_socket.display(), controller_id = id, "audit connection to the bridge up");
                                // The baseline, before any packet-in of this connection.
                                logger.meter_drops = MeterReading::Unread;
                                logger.read_meter(&h).await;
                                handle = Some(h);
                            }
                            Err(e) => {
                                warn!(error = %e, "the bridge refused the audit connection's set-up; reconnecting");
                                h.close().await;
                            }
                        }
                    }
                    SessionEvent::Message { message, .. } => {
                        if let Some(p) = PacketIn2::from_message(&message) {
                            match p {
                                Ok(p) => logger.packet_in(p).await,
                                Err(e) => {
                                    logger.counters.ignored += 1;
                                    debug!(error = %e, "undecodable NXT_PACKET_IN2");
                                }
                            }
                        }
                    }
                    SessionEvent::Disconnected { cause, .. } if handle.is_some() => {
                        handle = None;
                        warn!(%cause, "audit connection to the bridge lost; reconnecting");
                    }
                    SessionEvent::ConnectFailed { error, retry_in, .. } => {
                        debug!(%error, ?retry_in, "bridge management socket not reachable yet");
                    }
                    _ => {}
                }
            }
            changed = settings_rx.changed() => {
                if changed.is_err() {
                    continue;
                }
                let s = settings_rx.borrow_and_update().clone();
                if let Some(s) = s {
                    let id_changed = s.controller_id != logger.settings.controller_id;
                    logger.apply(s);
                    if id_changed {
                        if let Some(h) = handle.take() {
                            h.close().await; // the new id is set on the next connection
                        }
                    }
                }
            }
            _ = tick.tick() => {
                if let Some(h) = handle.clone() {
                    logger.read_meter(&h).await;
                }
                if reported.elapsed() >= Duration::from_secs(60) && logger.counters != last_reported {
                    info!(
                        packet_ins = logger.counters.packet_ins,
                        lines = logger.counters.lines,
                        repeats = logger.gate.repeats(),
                        ignored = logger.counters.ignored,
                        write_errors = logger.sinks.errors,
                        "audit logging"
                    );
                    reported = Instant::now();
                    last_reported = logger.counters;
                }
            }
        }
    }
}
