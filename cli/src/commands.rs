//! Running `flowmeshctl` commands against the admin API.

use std::io::{Read, Write};
use std::time::Duration;

use proto::admin;
use tonic::Code;

use super::args::TraceDestination;
use super::client::Conn;
use super::errors::{CliError, Operation, Target};
use super::output::{
    self, ClusterNetworkView, ControllerView, EventView, HostSubnetView, NetNamespaceView,
    NetworkPolicyView, OutputError, OutputFormat, PodView, SwitchView, TraceView,
};
use super::{
    AdmCommand, AnnotateCommand, ApplyArgs, Cli, Command, DeleteArgs, DeleteKind, DumpFlowsArgs,
    GetArgs, LabelCommand, NamespaceCommand, NodeCommand, PodCommand, PodNetworkCommand, Resource,
    TraceArgs,
};
use kinds::manifest;

/// How long `get events` (without `--watch`) waits for one more event before it stops.
pub const EVENTS_IDLE: Duration = Duration::from_secs(1);

/// Where to connect; commands connect only when they need the server.
struct Session {
    flags: super::config::Flags,
    timeout: Duration,
}

impl Session {
    async fn conn(&self) -> Result<Conn, CliError> {
        let t = super::config::resolve(&self.flags)?;
        Conn::connect(&t.server, self.timeout, t.tls.as_ref()).await
    }
}

/// Run one command.
pub async fn run(cli: Cli) -> Result<(), CliError> {
    let s = Session {
        flags: super::config::Flags {
            server: cli.server,
            ca: cli.ca,
            cert: cli.cert,
            key: cli.key,
            config: cli.flowmeshconfig,
            context: cli.context,
        },
        timeout: cli.timeout,
    };
    match cli.command {
        Command::Certs(c) => super::certs_command::run(c),
        Command::Node(c) => node(&s, c).await,
        Command::Namespace(c) => namespace(&s, c).await,
        Command::Pod(c) => pod(&s, c).await,
        Command::Get(g) => get(&s, g).await,
        Command::Adm(AdmCommand::PodNetwork(c)) => pod_network(&s, c).await,
        Command::Apply(a) => apply(&s, a).await,
        Command::DumpFlows(d) => dump_flows(&s, d).await,
        Command::Trace(t) => trace(&s, t).await,
        Command::Events(e) => events(&s, e.watch, e.output).await,
        Command::OfpPrint { hex } => ofp_print(hex),
        Command::Label(c) => label(&s, c).await,
        Command::Annotate(c) => annotate(&s, c).await,
        Command::Delete(d) => delete(&s, d).await,
        Command::Patch(c) => print(&super::egress::patch(s.conn().await?, c).await?),
    }
}

/// `KEY=VALUE` and `KEY-` arguments as a label request's `set` and `remove`.
pub fn label_edits(
    args: &[String],
) -> Result<(std::collections::HashMap<String, String>, Vec<String>), String> {
    let mut set = std::collections::HashMap::new();
    let mut remove = Vec::new();
    for a in args {
        if let Some((k, v)) = a.split_once('=') {
            if k.is_empty() {
                return Err(format!("{a:?}: the label key is empty (write KEY=VALUE)"));
            }
            if set.insert(k.to_string(), v.to_string()).is_some() {
                return Err(format!("label {k:?} is given twice"));
            }
        } else if let Some(k) = a.strip_suffix('-') {
            if k.is_empty() {
                return Err(format!("{a:?}: the label key is empty (write KEY-)"));
            }
            remove.push(k.to_string());
        } else {
            return Err(format!(
                "{a:?} is neither KEY=VALUE (set a label) nor KEY- (remove it)"
            ));
        }
    }
    Ok((set, remove))
}

async fn label(s: &Session, c: LabelCommand) -> Result<(), CliError> {
    let (is_pod, namespace, name, labels, overwrite, shown) = match c {
        LabelCommand::Pod {
            pod,
            labels,
            overwrite,
        } => {
            let shown = format!("pod/{pod}");
            (true, pod.namespace, pod.name, labels, overwrite, shown)
        }
        LabelCommand::Namespace {
            name,
            labels,
            overwrite,
        } => {
            let shown = format!("namespace/{name}");
            (false, String::new(), name, labels, overwrite, shown)
        }
    };
    let target = Target::Object {
        kind: if is_pod { "pod" } else { "namespace" },
        name: if is_pod {
            format!("{namespace}/{name}")
        } else {
            name.clone()
        },
        command: if is_pod {
            "label pod"
        } else {
            "label namespace"
        },
    };
    let op = || Operation::new("label", target.clone());
    let (set, remove) = label_edits(&labels).map_err(|detail| CliError::Input {
        op: Box::new(op()),
        detail,
    })?;
    let conn = s.conn().await?;
    let req = conn.request(admin::LabelRequest {
        namespace,
        name,
        set,
        remove,
        overwrite,
    });
    let reply = if is_pod {
        conn.call(op(), conn.client.clone().label_pod(req)).await?
    } else {
        conn.call(op(), conn.client.clone().label_namespace(req))
            .await?
    };
    if reply.changed {
        print(&format!("{shown} labeled\n"))
    } else {
        print(&format!("{shown} not labeled\n"))
    }
}

/// The NetNamespace annotation `annotate namespace` passes on to the NetNamespace.
const MULTICAST_ANNOTATION: &str = "netnamespace.network.openshift.io/multicast-enabled";

async fn annotate(s: &Session, c: AnnotateCommand) -> Result<(), CliError> {
    let (kind, name, annotations, overwrite) = match c {
        AnnotateCommand::Netnamespace {
            name,
            annotations,
            overwrite,
        } => ("netnamespace", name, annotations, overwrite),
        AnnotateCommand::Namespace {
            name,
            annotations,
            overwrite,
        } => ("namespace", name, annotations, overwrite),
    };
    let target = Target::Object {
        kind,
        name: name.clone(),
        command: if kind == "namespace" {
            "annotate namespace"
        } else {
            "annotate netnamespace"
        },
    };
    let op = || Operation::new("annotate", target.clone());
    let (set, remove) = label_edits(&annotations).map_err(|detail| CliError::Input {
        op: Box::new(op()),
        detail: detail.replace("label", "annotation"),
    })?;
    // `annotate namespace` sends the NetNamespace's own annotation there, the rest to the
    // Namespace.
    let mut calls: Vec<(&str, std::collections::HashMap<String, String>, Vec<String>)> = Vec::new();
    if kind == "namespace" {
        let (mc_set, ns_set): (std::collections::HashMap<_, _>, _) = set
            .into_iter()
            .partition(|(k, _)| k == MULTICAST_ANNOTATION);
        let (mc_rm, ns_rm): (Vec<_>, Vec<_>) =
            remove.into_iter().partition(|k| k == MULTICAST_ANNOTATION);
        if !mc_set.is_empty() || !mc_rm.is_empty() {
            calls.push(("netnamespace", mc_set, mc_rm));
        }
        if !ns_set.is_empty() || !ns_rm.is_empty() {
            calls.push(("namespace", ns_set, ns_rm));
        }
    } else {
        calls.push(("netnamespace", set, remove));
    }
    let conn = s.conn().await?;
    let mut changed = false;
    for (to, set, remove) in calls {
        let req = conn.request(admin::AnnotateRequest {
            name: name.clone(),
            set,
            remove,
            overwrite,
        });
        let reply = if to == "namespace" {
            conn.call(op(), conn.client.clone().annotate_namespace(req))
                .await?
        } else {
            conn.call(op(), conn.client.clone().annotate_net_namespace(req))
                .await?
        };
        changed |= reply.changed;
    }
    if changed {
        print(&format!("{kind}/{name} annotated\n"))
    } else {
        print(&format!("{kind}/{name} not annotated\n"))
    }
}

async fn delete(s: &Session, d: DeleteArgs) -> Result<(), CliError> {
    match d.kind {
        DeleteKind::Networkpolicy => {
            let conn = s.conn().await?;
            let op = Operation::new(
                "delete",
                Target::Object {
                    kind: "networkpolicy",
                    name: d.name.to_string(),
                    command: "delete networkpolicy",
                },
            );
            let req = conn.request(admin::PolicyRef {
                namespace: d.name.namespace.clone(),
                name: d.name.name.clone(),
            });
            conn.call(op, conn.client.clone().delete_network_policy(req))
                .await?;
            print(&format!("networkpolicy/{} deleted\n", d.name))
        }
        DeleteKind::Egressnetworkpolicy => {
            let conn = s.conn().await?;
            let op = Operation::new(
                "delete",
                Target::Object {
                    kind: "egressnetworkpolicy",
                    name: d.name.to_string(),
                    command: "delete egressnetworkpolicy",
                },
            );
            let req = conn.request(admin::PolicyRef {
                namespace: d.name.namespace.clone(),
                name: d.name.name.clone(),
            });
            conn.call(op, conn.client.clone().delete_egress_network_policy(req))
                .await?;
            print(&format!("egressnetworkpolicy/{} deleted\n", d.name))
        }
    }
}

/// `ofp-print HEX`: decode locally with the codec, print like `ovs-ofctl ofp-print`.
fn ofp_print(hex: Vec<String>) -> Result<(), CliError> {
    let text = if hex.is_empty() {
        let mut buf = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut buf)
            .map_err(|e| CliError::Decode(format!("reading hex from standard input: {e}")))?;
        buf
    } else {
        hex.join(" ")
    };
    let bytes =
        ofproto::parse_hex(&text).map_err(|e| CliError::Decode(format!("ofp-print: {e}")))?;
    if bytes.is_empty() {
        return Err(CliError::Decode("ofp-print: no bytes given".into()));
    }
    let out = ofproto::ofp_print(&bytes)
        .map_err(|e| CliError::Decode(format!("ofp-print: cannot decode the message: {e}")))?;
    let out = if out.ends_with('\n') {
        out
    } else {
        format!("{out}\n")
    };
    print(&out)
}

/// Write to stdout; a closed pipe ends the command quietly.
fn print(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(CliError::StdoutClosed),
        Err(e) => Err(CliError::Output(e.to_string())),
    }
}

fn rendered(r: Result<String, OutputError>) -> Result<String, CliError> {
    r.map_err(|e| CliError::Output(e.to_string()))
}

async fn node(s: &Session, c: NodeCommand) -> Result<(), CliError> {
    match c {
        NodeCommand::Add {
            name,
            ip,
            dpid,
            output,
        } => {
            let conn = s.conn().await?;
            let req = conn.request(admin::AddNodeRequest {
                name: name.clone(),
                node_ip: ip.to_string(),
                dpid,
            });
            let op = Operation::new("add", Target::Node(name.clone()));
            let hs = conn.call(op, conn.client.clone().add_node(req)).await?;
            let view = HostSubnetView::from(&hs);
            match output {
                None => print(&format!(
                    "node/{} added: subnet {}, gateway {}, dpid {}\n",
                    view.node, view.subnet, view.gateway, view.dpid
                )),
                Some(f) => print(&rendered(output::render_one(&view, f))?),
            }
        }
        NodeCommand::Delete { name } => {
            let conn = s.conn().await?;
            let req = conn.request(admin::NameRequest { name: name.clone() });
            let op = Operation::new("delete", Target::Node(name.clone()));
            conn.call(op, conn.client.clone().delete_node(req)).await?;
            print(&format!("node/{name} deleted\n"))
        }
    }
}

async fn namespace(s: &Session, c: NamespaceCommand) -> Result<(), CliError> {
    match c {
        NamespaceCommand::Create { name, output } => {
            let conn = s.conn().await?;
            let req = conn.request(admin::NameRequest { name: name.clone() });
            let op = Operation::new("create", Target::Namespace(name.clone()));
            let ns = conn
                .call(op, conn.client.clone().create_namespace(req))
                .await?;
            match output {
                None => print(&format!(
                    "namespace/{} created: netid {}\n",
                    ns.name, ns.netid
                )),
                Some(f) => print(&rendered(output::render_one(
                    &NetNamespaceView::from(&ns),
                    f,
                ))?),
            }
        }
        NamespaceCommand::Delete { name } => {
            let conn = s.conn().await?;
            let req = conn.request(admin::NameRequest { name: name.clone() });
            let op = Operation::new("delete", Target::Namespace(name.clone()));
            conn.call(op, conn.client.clone().delete_namespace(req))
                .await?;
            print(&format!("namespace/{name} deleted\n"))
        }
    }
}

async fn pod(s: &Session, c: PodCommand) -> Result<(), CliError> {
    match c {
        PodCommand::Attach {
            node,
            namespace,
            name,
            port,
            ofport,
            output,
        } => {
            let conn = s.conn().await?;
            let req = conn.request(admin::AttachPodRequest {
                node: node.clone(),
                namespace: namespace.clone(),
                name: name.clone(),
                port_name: port,
                ofport: ofport.unwrap_or(0),
                ..Default::default()
            });
            let op = Operation::new(
                "attach",
                Target::Pod {
                    namespace,
                    name,
                    node: Some(node),
                },
            );
            let pod = conn.call(op, conn.client.clone().attach_pod(req)).await?;
            match output {
                None => print(&format!("{}\n", pod.ip)),
                Some(f) => print(&rendered(output::render_one(&PodView::from(&pod), f))?),
            }
        }
        PodCommand::Detach { namespace, name } => {
            let conn = s.conn().await?;
            let req = conn.request(admin::PodRef {
                namespace: namespace.clone(),
                name: name.clone(),
            });
            let op = Operation::new(
                "detach",
                Target::Pod {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    node: None,
                },
            );
            conn.call(op, conn.client.clone().detach_pod(req)).await?;
            print(&format!("pod/{namespace}/{name} detached\n"))
        }
    }
}

/// Keep only the named objects (all when `names` is empty); a name without object is an error.
fn select<T>(
    items: Vec<T>,
    names: &[String],
    key: impl Fn(&T) -> &str,
    kind: &'static str,
) -> Result<Vec<T>, CliError> {
    if names.is_empty() {
        return Ok(items);
    }
    if let Some(missing) = names
        .iter()
        .find(|n| !items.iter().any(|i| key(i) == n.as_str()))
    {
        return Err(CliError::Api {
            op: Box::new(Operation::new("get", Target::List(kind))),
            code: Code::NotFound,
            message: format!("{} {missing:?} not found", kind.trim_end_matches('s')),
            hint: Some(format!("list them with: flowmeshctl get {kind}")),
        });
    }
    Ok(items
        .into_iter()
        .filter(|i| names.iter().any(|n| n == key(i)))
        .collect())
}

/// Print a list, or say that it is empty (on stderr, like `oc`).
fn print_list<T: serde::Serialize + output::Tabular>(
    items: &[T],
    format: OutputFormat,
) -> Result<(), CliError> {
    if items.is_empty() && matches!(format, OutputFormat::Table | OutputFormat::Wide) {
        eprintln!("No resources found.");
        return Ok(());
    }
    print(&rendered(output::render_list(items, format))?)
}

async fn get(s: &Session, g: GetArgs) -> Result<(), CliError> {
    let f = g.output;
    let list = |kind| Operation::new("list", Target::List(kind));
    match g.resource {
        Resource::Events => {
            if !g.names.is_empty() {
                return Err(CliError::Input {
                    op: Box::new(list("events")),
                    detail: "events take no names".into(),
                });
            }
            events(s, g.watch, f).await
        }
        Resource::Hostsubnets => {
            let conn = s.conn().await?;
            let req = conn.request(admin::Empty {});
            let reply = conn
                .call(
                    list("hostsubnets"),
                    conn.client.clone().list_host_subnets(req),
                )
                .await?;
            let mut v: Vec<HostSubnetView> = reply.items.iter().map(HostSubnetView::from).collect();
            v.sort_by(|a, b| a.node.cmp(&b.node));
            print_list(&select(v, &g.names, |h| &h.node, "hostsubnets")?, f)
        }
        Resource::Netnamespaces => {
            let conn = s.conn().await?;
            let req = conn.request(admin::Empty {});
            let reply = conn
                .call(
                    list("netnamespaces"),
                    conn.client.clone().list_net_namespaces(req),
                )
                .await?;
            let mut v: Vec<NetNamespaceView> =
                reply.items.iter().map(NetNamespaceView::from).collect();
            v.sort_by(|a, b| a.name.cmp(&b.name));
            print_list(&select(v, &g.names, |n| &n.name, "netnamespaces")?, f)
        }
        Resource::Pods => {
            let conn = s.conn().await?;
            let req = conn.request(admin::Empty {});
            let reply = conn
                .call(list("pods"), conn.client.clone().list_pods(req))
                .await?;
            let mut v: Vec<PodView> = reply
                .items
                .iter()
                .filter(|p| g.namespace.as_ref().is_none_or(|ns| &p.namespace == ns))
                .map(PodView::from)
                .collect();
            v.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
            print_list(&select(v, &g.names, |p| &p.name, "pods")?, f)
        }
        Resource::Switches => {
            let conn = s.conn().await?;
            let req = conn.request(admin::Empty {});
            let reply = conn
                .call(list("switches"), conn.client.clone().list_switches(req))
                .await?;
            let mut v: Vec<SwitchView> = reply.items.iter().map(SwitchView::from).collect();
            v.sort_by(|a, b| (a.unknown, &a.node, &a.dpid).cmp(&(b.unknown, &b.node, &b.dpid)));
            print_list(&select(v, &g.names, |sw| &sw.node, "switches")?, f)
        }
        Resource::Controllers => {
            let conn = s.conn().await?;
            let req = conn.request(admin::Empty {});
            let reply = conn
                .call(
                    list("controllers"),
                    conn.client.clone().get_controllers(req),
                )
                .await?;
            let v = ControllerView::all(&reply);
            print_list(&select(v, &g.names, |c| &c.id, "controllers")?, f)
        }
        Resource::Networkpolicies => {
            let conn = s.conn().await?;
            let req = conn.request(admin::ListNetworkPoliciesRequest {
                namespace: g.namespace.clone().unwrap_or_default(),
            });
            let reply = conn
                .call(
                    list("networkpolicies"),
                    conn.client.clone().list_network_policies(req),
                )
                .await?;
            let v: Vec<NetworkPolicyView> =
                reply.items.iter().map(NetworkPolicyView::from).collect();
            let v = select(
                v,
                &g.names,
                |p| p.0.metadata.name.as_deref().unwrap_or_default(),
                "networkpolicies",
            )?;
            print_list(&v, f)
        }
        Resource::Egressnetworkpolicies => {
            let conn = s.conn().await?;
            let req = conn.request(admin::ListNetworkPoliciesRequest {
                namespace: g.namespace.clone().unwrap_or_default(),
            });
            let reply = conn
                .call(
                    list("egressnetworkpolicies"),
                    conn.client.clone().list_egress_network_policies(req),
                )
                .await?;
            let v: Vec<crate::output::EgressNetworkPolicyView> = reply
                .items
                .iter()
                .map(crate::output::EgressNetworkPolicyView::from)
                .collect();
            let v = select(
                v,
                &g.names,
                |p| p.0.metadata.name.as_deref().unwrap_or_default(),
                "egressnetworkpolicies",
            )?;
            print_list(&v, f)
        }
        Resource::Clusternetwork => {
            let conn = s.conn().await?;
            let req = conn.request(admin::Empty {});
            let op = Operation::new("get", Target::ClusterNetwork);
            let cn = conn
                .call(op, conn.client.clone().get_cluster_network(req))
                .await?;
            print(&rendered(output::render_one(
                &ClusterNetworkView::from(&cn),
                f,
            ))?)
        }
    }
}

async fn pod_network(s: &Session, c: PodNetworkCommand) -> Result<(), CliError> {
    let conn = s.conn().await?;
    let (reply, f) = match c {
        PodNetworkCommand::JoinProjects {
            to,
            projects,
            selector,
            output,
        } => {
            let mut all = vec![to.clone()];
            all.extend(projects.iter().cloned());
            all.extend(selector.iter().map(|s| format!("-l {s}")));
            let req = conn.request(admin::JoinProjectsRequest {
                to,
                namespaces: projects,
                selector: selector.unwrap_or_default(),
            });
            let op = Operation::new("join", Target::Namespaces(all));
            (
                conn.call(op, conn.client.clone().join_projects(req))
                    .await?,
                output,
            )
        }
        PodNetworkCommand::IsolateProjects {
            projects,
            selector,
            output,
        } => {
            let req = conn.request(admin::ProjectsRequest {
                namespaces: projects.clone(),
                selector: selector.clone().unwrap_or_default(),
            });
            let op = Operation::new(
                "isolate",
                Target::Namespaces(with_selector(projects, selector)),
            );
            (
                conn.call(op, conn.client.clone().isolate_projects(req))
                    .await?,
                output,
            )
        }
        PodNetworkCommand::MakeProjectsGlobal {
            projects,
            selector,
            output,
        } => {
            let req = conn.request(admin::ProjectsRequest {
                namespaces: projects.clone(),
                selector: selector.clone().unwrap_or_default(),
            });
            let op = Operation::new(
                "make global",
                Target::Namespaces(with_selector(projects, selector)),
            );
            (
                conn.call(op, conn.client.clone().make_projects_global(req))
                    .await?,
                output,
            )
        }
    };
    let v: Vec<NetNamespaceView> = reply.items.iter().map(NetNamespaceView::from).collect();
    print_list(&v, f)
}

/// The names for an error message: the projects, or `-l SELECTOR`.
fn with_selector(mut projects: Vec<String>, selector: Option<String>) -> Vec<String> {
    projects.extend(selector.map(|s| format!("-l {s}")));
    projects
}

async fn apply(s: &Session, a: ApplyArgs) -> Result<(), CliError> {
    let shown = if a.file.as_os_str() == "-" {
        "<stdin>".to_string()
    } else {
        a.file.display().to_string()
    };
    let op = || Operation::new("apply", Target::Manifest(shown.clone()));
    let mut text = String::new();
    let read = if a.file.as_os_str() == "-" {
        std::io::stdin().read_to_string(&mut text).map(|_| ())
    } else {
        std::fs::read_to_string(&a.file).map(|t| text = t)
    };
    read.map_err(|e| CliError::Input {
        op: Box::new(op()),
        detail: format!("cannot read the file: {e}"),
    })?;
    // Check locally first: the same parser runs on the server, and this needs no connection.
    let objects = manifest::parse(&text).map_err(|e| CliError::Input {
        op: Box::new(op()),
        detail: e.to_string(),
    })?;
    if objects.is_empty() {
        eprintln!("warning: {shown} has no objects; nothing to apply");
        return Ok(());
    }
    if a.dry_run {
        let lines: String = objects
            .iter()
            .map(|o| format!("{} (dry run)\n", o.describe()))
            .collect();
        return print(&lines);
    }
    let conn = s.conn().await?;
    let req = conn.request(admin::ApplyRequest { yaml: text });
    let reply = conn.call(op(), conn.client.clone().apply(req)).await?;
    let lines: String = reply.results.iter().map(|r| format!("{r}\n")).collect();
    print(&lines)
}

async fn dump_flows(s: &Session, d: DumpFlowsArgs) -> Result<(), CliError> {
    let view = if d.diff {
        admin::FlowView::Diff
    } else if d.installed {
        admin::FlowView::Installed
    } else {
        admin::FlowView::Desired
    };
    let conn = s.conn().await?;
    let req = conn.request(admin::DumpFlowsRequest {
        node: d.node.clone(),
        view: view as i32,
    });
    let op = Operation::new("dump", Target::Flows(d.node));
    let reply = conn.call(op, conn.client.clone().dump_flows(req)).await?;
    let lines: String = reply.lines.iter().map(|l| format!("{l}\n")).collect();
    print(&lines)
}

async fn trace(s: &Session, t: TraceArgs) -> Result<(), CliError> {
    let (protocol, dst_port) = match (t.tcp, t.udp) {
        (Some(p), _) => ("tcp", p),
        (None, Some(p)) => ("udp", p),
        (None, None) => ("icmp", 0),
    };
    let to = match &t.to {
        TraceDestination::Pod(p) => p.to_string(),
        TraceDestination::Ip(ip) => ip.to_string(),
    };
    let conn = s.conn().await?;
    let req = conn.request(admin::TraceRequest {
        from: t.from.to_string(),
        to,
        protocol: protocol.to_string(),
        dst_port: u32::from(dst_port),
    });
    let reply = conn
        .call(
            Operation::new("trace", Target::Trace),
            conn.client.clone().trace(req),
        )
        .await?;
    print(&rendered(output::render_trace(
        &TraceView::from(&reply),
        t.output,
    ))?)
}

async fn events(s: &Session, watch: bool, f: OutputFormat) -> Result<(), CliError> {
    let conn = s.conn().await?;
    let op = || Operation::new("watch", Target::Events);
    // No grpc-timeout on a stream: it would end the watch.
    let req = tonic::Request::new(admin::Empty {});
    let mut stream = conn
        .call(op(), conn.client.clone().watch_events(req))
        .await?;
    loop {
        let next = if watch {
            stream.message().await
        } else {
            match tokio::time::timeout(EVENTS_IDLE, stream.message()).await {
                Ok(r) => r,
                Err(_) => return Ok(()),
            }
        };
        match next {
            Ok(Some(e)) => print(&rendered(output::render_event(&EventView::from(&e), f))?)?,
            Ok(None) => return Ok(()),
            Err(status) => return Err(CliError::from_status(op(), &conn.server, &status)),
        }
    }
}
