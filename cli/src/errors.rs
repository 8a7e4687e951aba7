//! `flowmeshctl` errors: gRPC statuses turned into messages that name the object and what to do.

use std::fmt;
use std::time::Duration;

use tonic::{Code, Status};

/// What a command acts on; decides the wording and the hint of an error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A node (HostSubnet).
    Node(String),
    /// A namespace (NetNamespace).
    Namespace(String),
    /// Several namespaces (`adm pod-network ...`).
    Namespaces(Vec<String>),
    /// A pod, with the node it is attached on when known.
    Pod {
        /// Namespace.
        namespace: String,
        /// Pod name.
        name: String,
        /// Node, for attach.
        node: Option<String>,
    },
    /// A listing (`get KIND`).
    List(&'static str),
    /// The flows of a node's switch.
    Flows(String),
    /// A trace between two endpoints.
    Trace,
    /// A manifest file.
    Manifest(String),
    /// The event stream.
    Events,
    /// The cluster network config.
    ClusterNetwork,
    /// Any other object: its kind (`networkpolicy`, `pod`), name, and the `flowmeshctl`
    /// command that acts on it (for `--help` hints).
    Object {
        /// Kind, as `flowmeshctl` spells it.
        kind: &'static str,
        /// Name (`NS/NAME` for namespaced objects).
        name: String,
        /// The subcommand, e.g. `label pod`.
        command: &'static str,
    },
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Node(n) => write!(f, "node {n:?}"),
            Target::Namespace(n) => write!(f, "namespace {n:?}"),
            Target::Namespaces(ns) => write!(f, "namespaces {}", ns.join(", ")),
            Target::Pod {
                namespace, name, ..
            } => write!(f, "pod \"{namespace}/{name}\""),
            Target::List(kind) => write!(f, "{kind}"),
            Target::Flows(n) => write!(f, "flows of node {n:?}"),
            Target::Trace => write!(f, "packet"),
            Target::Manifest(file) => write!(f, "{file}"),
            Target::Events => write!(f, "events"),
            Target::ClusterNetwork => write!(f, "cluster network"),
            Target::Object { kind, name, .. } => write!(f, "{kind} {name:?}"),
        }
    }
}

/// One operation: a verb and its target (`create namespace "foo"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    /// What was attempted (`create`, `delete`, `attach`, `list`, ...).
    pub verb: &'static str,
    /// What it was attempted on.
    pub target: Target,
}

impl Operation {
    /// An operation on a target.
    pub fn new(verb: &'static str, target: Target) -> Self {
        Operation { verb, target }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb, self.target)
    }
}

/// Why `flowmeshctl` failed. Every variant exits with status 1.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// No connection to the controller.
    #[error("cannot reach flowmesh-controller at {server}: {detail} (is it running? set --server or FLOWMESH_SERVER)")]
    Unreachable {
        /// The server URL.
        server: String,
        /// The transport error chain.
        detail: String,
    },
    /// The controller answered with an error status.
    #[error("{op}: {message}{}", hint.as_ref().map(|h| format!(" ({h})")).unwrap_or_default())]
    Api {
        /// The operation (boxed to keep `Result`s small).
        op: Box<Operation>,
        /// The gRPC status code.
        code: Code,
        /// The server's message (or a synthesized one when it sent none).
        message: String,
        /// What to do about it.
        hint: Option<String>,
    },
    /// No answer within `--timeout`.
    #[error("{op}: no answer from the controller within {after:?} (it may be waiting for switches to acknowledge; see: flowmeshctl get switches, or raise --timeout)")]
    Timeout {
        /// The operation (boxed to keep `Result`s small).
        op: Box<Operation>,
        /// The timeout.
        after: Duration,
    },
    /// A local input problem (unreadable file, invalid manifest).
    #[error("{op}: {detail}")]
    Input {
        /// The operation (boxed to keep `Result`s small).
        op: Box<Operation>,
        /// What is wrong.
        detail: String,
    },
    /// Output could not be rendered or written.
    #[error("writing output: {0}")]
    Output(String),
    /// Bytes given to `ofp-print` that do not decode.
    #[error("{0}")]
    Decode(String),
    /// Standard output was closed by the reader (e.g. `| head`): stop quietly.
    #[error("standard output closed")]
    StdoutClosed,
    /// Bad flags, config file or credentials (found before any call).
    #[error("{0}")]
    Usage(String),
}

impl CliError {
    /// The process exit status for this error: 1 (clap's usage errors exit with 2); 0 for a
    /// closed standard output, which is how `| head` ends a listing.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::StdoutClosed => 0,
            _ => 1,
        }
    }

    /// Turn a status from the controller (or from the client transport) into an error.
    pub fn from_status(op: Operation, server: &str, status: &Status) -> CliError {
        // Statuses the client transport made up carry their cause; server statuses do not.
        if status.code() == Code::Unavailable && std::error::Error::source(status).is_some() {
            return CliError::Unreachable {
                server: server.to_string(),
                detail: error_chain(status),
            };
        }
        let message = if status.message().trim().is_empty() {
            default_message(status.code(), &op.target)
        } else {
            status.message().trim().to_string()
        };
        let hint = hint(status.code(), &op, &message);
        CliError::Api {
            op: Box::new(op),
            code: status.code(),
            message,
            hint,
        }
    }
}

/// An error and its causes, `a: b: c`, without repeats.
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur: Option<&dyn std::error::Error> = Some(err);
    while let Some(e) = cur {
        let text = e.to_string();
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cur = e.source();
    }
    parts.join(": ")
}

fn default_message(code: Code, target: &Target) -> String {
    match code {
        Code::NotFound => format!("{target} not found"),
        Code::AlreadyExists => format!("{target} already exists"),
        other => other.description().to_string(),
    }
}

/// The one of `names` that the message names: quoted (`"foo"`) first, else as a whole word.
fn mentioned<'a>(message: &str, names: &'a [String]) -> Option<&'a String> {
    let quoted = names.iter().find(|n| message.contains(&format!("\"{n}\"")));
    quoted.or_else(|| {
        let words: Vec<&str> = message
            .split(|c: char| c.is_whitespace() || matches!(c, ',' | ':' | ';' | '(' | ')' | '\''))
            .collect();
        names.iter().find(|n| words.contains(&n.as_str()))
    })
}

/// The name in quotes right after `prefix` (`namespace "blue" not found` -> `blue`).
fn quoted_after(message: &str, prefix: &str) -> Option<String> {
    let rest = &message[message.find(prefix)? + prefix.len()..];
    let name = &rest[..rest.find('"')?];
    (!name.is_empty()).then(|| name.to_string())
}

fn hint(code: Code, op: &Operation, message: &str) -> Option<String> {
    let lower = message.to_ascii_lowercase();
    let node_add = |n: &str| format!("add it with: flowmeshctl node add {n} --ip IPV4 --dpid DPID");
    let ns_create = |n: &str| format!("create it with: flowmeshctl namespace create {n}");
    let h = match (code, &op.target) {
        (Code::NotFound, Target::Namespace(n)) if op.verb == "delete" => {
            format!("nothing to delete; {n:?} is not a namespace; list them with: flowmeshctl get netnamespaces")
        }
        (Code::NotFound, Target::Namespace(n)) => ns_create(n),
        (Code::NotFound, Target::Node(n)) if op.verb == "delete" => {
            format!("nothing to delete; {n:?} is not a node; list them with: flowmeshctl get hostsubnets")
        }
        (Code::NotFound, Target::Node(n)) | (Code::NotFound, Target::Flows(n)) => {
            format!("{}; list nodes with: flowmeshctl get hostsubnets", node_add(n))
        }
        (
            Code::NotFound,
            Target::Pod {
                namespace,
                node: Some(node),
                ..
            },
        ) => {
            if lower.starts_with("namespace") {
                ns_create(namespace)
            } else if lower.starts_with("node") {
                node_add(node)
            } else if lower.contains("port") {
                format!("check the port is on the bridge of {node} (ovs-vsctl list-ports br0) or pass --ofport")
            } else if lower.contains("namespace") {
                ns_create(namespace)
            } else if lower.contains("node") {
                node_add(node)
            } else {
                "check with: flowmeshctl get netnamespaces, flowmeshctl get hostsubnets".into()
            }
        }
        (Code::NotFound, Target::Pod { namespace, .. }) => {
            format!("nothing to detach; list pods with: flowmeshctl get pods -n {namespace}")
        }
        (Code::NotFound, Target::Namespaces(names)) => match mentioned(message, names) {
            Some(n) => ns_create(n),
            None => "list namespaces with: flowmeshctl get netnamespaces".into(),
        },
        (Code::NotFound, Target::Trace) => "list pods with: flowmeshctl get pods".into(),
        (Code::NotFound, Target::Manifest(_)) => {
            if let Some(n) = quoted_after(message, "namespace \"") {
                format!("{}, or add a Namespace document to the file", ns_create(&n))
            } else if let Some(n) = quoted_after(message, "node \"") {
                format!("{}, or add a Node document to the file", node_add(&n))
            } else if lower.contains("port") {
                "check the port is on the node's bridge (ovs-vsctl list-ports br0) or set the flowmesh.io/ofport annotation".into()
            } else {
                "fix the manifest and apply it again".into()
            }
        }
        // The controller's message may say what to do already.
        (Code::NotFound, Target::Object { .. }) if message.contains("flowmeshctl") => {
            return None
        }
        (Code::NotFound, Target::Object { kind, .. }) => match kind.strip_suffix('y') {
            Some(stem) => format!("list them with: flowmeshctl get {stem}ies"),
            None => format!("list them with: flowmeshctl get {kind}s"),
        },
        (Code::AlreadyExists, Target::Namespace(n)) => {
            format!("it exists already; see it with: flowmeshctl get netnamespaces {n}")
        }
        (Code::AlreadyExists, Target::Node(n)) => {
            // The IP or datapath id is held by another node, which the message names.
            let holder = message
                .rsplit_once(" by node ")
                .map(|(_, h)| h.trim().trim_matches('"').to_string())
                .filter(|h| !h.is_empty() && !h.contains(char::is_whitespace));
            match holder {
                Some(h) => format!(
                    "it belongs to node {h}; see it with: flowmeshctl get hostsubnets {h}; choose another for {n}, or delete {h} first with: flowmeshctl node delete {h}"
                ),
                None => format!("see the nodes with: flowmeshctl get hostsubnets {n}"),
            }
        }
        (
            Code::AlreadyExists,
            Target::Pod {
                namespace, name, ..
            },
        ) => format!(
            "detach it first with: flowmeshctl pod detach --namespace {namespace} --name {name}"
        ),
        (Code::InvalidArgument, Target::Manifest(_)) => "fix the manifest and apply it again".into(),
        (Code::InvalidArgument, _) => format!(
            "check the arguments; see: flowmeshctl {} --help",
            command_of(op)
        ),
        (Code::Unavailable, Target::Pod { node: Some(node), .. }) if lower.contains("not connected") => {
            if lower.contains("look up") {
                format!("connect the bridge of {node} to the controller (ovs-vsctl set-controller br0 tcp:CONTROLLER:6653) and retry, or pass --ofport; see: flowmeshctl get switches")
            } else {
                format!("a pod's flows must reach its switch: is flowmesh-shim running on {node}, its bridge connected to the controller? see: flowmeshctl get switches")
            }
        }
        (Code::FailedPrecondition, Target::Flows(n)) | (Code::Unavailable, Target::Flows(n)) => {
            format!("the switch of node {n:?} may be disconnected or not synced yet; see: flowmeshctl get switches")
        }
        (Code::FailedPrecondition, _) => {
            "the current state does not allow this; resolve what the message names and retry".into()
        }
        (Code::ResourceExhausted, _) => {
            "no free subnet or address left; enlarge clusterNetworks (flowmeshctl apply -f) or free some".into()
        }
        (Code::DeadlineExceeded, _) => {
            "the controller gave up waiting, likely for a switch; see: flowmeshctl get switches, or raise --timeout".into()
        }
        (Code::Unavailable, _) if lower.contains("out of space") => {
            "etcd refuses writes until its space is freed and its NOSPACE alarm disarmed (docs/operations.md, \"etcd out of space\"); retry then".into()
        }
        (Code::Unavailable, _) => {
            "the controller is not ready; retry shortly (see: flowmeshctl get switches)".into()
        }
        (Code::Aborted, _) => "a concurrent change conflicted; retry".into(),
        (Code::Unimplemented, _) => {
            "this flowmesh-controller does not support it; is it older than flowmeshctl?".into()
        }
        (Code::Unauthenticated, _) | (Code::PermissionDenied, _) => {
            "check your access to the controller's admin API".into()
        }
        (Code::Internal, _) | (Code::Unknown, _) | (Code::DataLoss, _) => {
            "controller internal error; check the flowmesh-controller logs".into()
        }
        _ => return None,
    };
    Some(h)
}

/// The `flowmeshctl` subcommand that performs an operation, for `--help` hints.
fn command_of(op: &Operation) -> &'static str {
    match (&op.target, op.verb) {
        (Target::Node(_), "add") => "node add",
        (Target::Node(_), _) => "node delete",
        (Target::Namespace(_), "create") => "namespace create",
        (Target::Namespace(_), _) => "namespace delete",
        (Target::Namespaces(_), _) => "adm pod-network",
        (Target::Pod { .. }, "attach") => "pod attach",
        (Target::Pod { .. }, _) => "pod detach",
        (Target::List(_), _) | (Target::ClusterNetwork, _) | (Target::Events, _) => "get",
        (Target::Flows(_), _) => "dump-flows",
        (Target::Trace, _) => "trace",
        (Target::Manifest(_), _) => "apply",
        (Target::Object { command, .. }, _) => command,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(op: Operation, status: Status) -> String {
        CliError::from_status(op, "http://x:1", &status).to_string()
    }

    #[test]
    fn not_found_namespace_says_how_to_create_it() {
        let op = Operation::new("join", Target::Namespaces(vec!["a".into(), "foo".into()]));
        assert_eq!(
            api(op, Status::not_found("namespace \"foo\" not found")),
            "join namespaces a, foo: namespace \"foo\" not found (create it with: flowmeshctl namespace create foo)"
        );
    }

    #[test]
    fn etcd_out_of_space_says_what_frees_it_not_that_the_controller_is_not_ready() {
        let op = Operation::new("create", Target::Namespace("a".into()));
        let text = api(
            op,
            Status::unavailable("the store did not confirm the change: etcd x: etcdserver: mvcc: database space exceeded (ResourceExhausted): etcd is out of space (its NOSPACE alarm is raised)"),
        );
        assert!(text.contains("NOSPACE alarm disarmed"), "{text}");
        assert!(!text.contains("not ready"), "{text}");
    }

    #[test]
    fn empty_server_message_is_synthesized() {
        let op = Operation::new("delete", Target::Node("n1".into()));
        let text = api(op, Status::not_found(""));
        assert!(
            text.starts_with("delete node \"n1\": node \"n1\" not found (nothing to delete;"),
            "{text}"
        );
    }

    #[test]
    fn already_exists_pod_says_detach_first() {
        let op = Operation::new(
            "attach",
            Target::Pod {
                namespace: "ns".into(),
                name: "p".into(),
                node: Some("n".into()),
            },
        );
        assert_eq!(
            api(op, Status::already_exists("pod ns/p is attached on n")),
            "attach pod \"ns/p\": pod ns/p is attached on n (detach it first with: flowmeshctl pod detach --namespace ns --name p)"
        );
    }

    #[test]
    fn attach_not_found_names_the_missing_object() {
        let op = |_: ()| {
            Operation::new(
                "attach",
                Target::Pod {
                    namespace: "ns".into(),
                    name: "p".into(),
                    node: Some("n1".into()),
                },
            )
        };
        assert!(api(op(()), Status::not_found("namespace \"ns\" not found"))
            .ends_with("(create it with: flowmeshctl namespace create ns)"));
        assert!(api(op(()), Status::not_found("node \"n1\" not found"))
            .ends_with("(add it with: flowmeshctl node add n1 --ip IPV4 --dpid DPID)"));
        assert!(
            api(op(()), Status::not_found("port veth0 not found on node n1")).contains("--ofport")
        );
    }

    #[test]
    fn invalid_argument_points_to_help() {
        let op = Operation::new("add", Target::Node("n".into()));
        assert_eq!(
            api(op, Status::invalid_argument("dpid 0 is reserved")),
            "add node \"n\": dpid 0 is reserved (check the arguments; see: flowmeshctl node add --help)"
        );
    }

    #[test]
    fn server_unavailable_is_not_unreachable() {
        let op = Operation::new("dump", Target::Flows("n".into()));
        let e = CliError::from_status(
            op,
            "http://x:1",
            &Status::unavailable("switch not connected"),
        );
        assert!(
            matches!(
                e,
                CliError::Api {
                    code: Code::Unavailable,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("flowmeshctl get switches"));
    }

    #[test]
    fn mentioned_prefers_quoted_and_whole_words() {
        let names = vec!["red".to_string(), "redis".to_string()];
        assert_eq!(
            mentioned("namespace \"redis\" not found", &names).map(String::as_str),
            Some("redis")
        );
        assert_eq!(
            mentioned("no namespace redis", &names).map(String::as_str),
            Some("redis")
        );
        assert_eq!(mentioned("namespace reddish not found", &names), None);
    }

    #[test]
    fn error_chain_dedupes() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl fmt::Display for Outer {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "transport error")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = Outer(std::io::Error::other("connection refused"));
        assert_eq!(error_chain(&e), "transport error: connection refused");
    }
}
