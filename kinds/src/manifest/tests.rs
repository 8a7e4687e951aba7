//! Tests of manifest parsing: every kind, every refusal and its message.

use super::*;

fn one(text: &str) -> ManifestObject {
    let mut objs = parse(text).expect("manifest parses");
    assert_eq!(objs.len(), 1, "{objs:?}");
    objs.remove(0)
}

fn problem(text: &str) -> ManifestError {
    parse(text).expect_err("manifest must be refused")
}

#[test]
fn namespace() {
    let o = one("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ns1\n");
    assert_eq!(
        o,
        ManifestObject::Namespace(NamespaceSpec {
            name: "ns1".into(),
            netid: None,
            labels: Some(Labels::new()),
            egress_ips: None,
            multicast: None,
        })
    );
    assert_eq!(o.describe(), "namespace/ns1");
}

#[test]
fn multicast_annotation_on_namespace_and_netnamespace() {
    let k = topology::model::multicast::MULTICAST_ANNOTATION;
    let o = one(&format!(
            "apiVersion: network.openshift.io/v1\nkind: NetNamespace\nmetadata:\n  name: a\n  annotations: {{{k}: 'true'}}\nnetname: a\n"
        ));
    assert!(matches!(
        o,
        ManifestObject::Namespace(NamespaceSpec {
            multicast: Some(true),
            ..
        })
    ));
    let o = one(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n  annotations:\n    {k}: \"false\"\n"
        ));
    assert!(matches!(
        o,
        ManifestObject::Namespace(NamespaceSpec {
            multicast: Some(false),
            ..
        })
    ));
    let e = problem(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n  annotations:\n    {k}: \"on\"\n"
    ));
    assert_eq!(
            e.to_string(),
            format!("document 1 (Namespace \"a\"): metadata.annotations[{k}]: invalid value \"on\": must be \"true\" or \"false\"")
        );
}

#[test]
fn netnamespace_with_and_without_netid() {
    let o = one(
            "apiVersion: network.openshift.io/v1\nkind: NetNamespace\nmetadata: {name: ns2}\nnetname: ns2\nnetid: 4242\n",
        );
    assert_eq!(
        o,
        ManifestObject::Namespace(NamespaceSpec {
            name: "ns2".into(),
            netid: Some(4242),
            labels: None,
            egress_ips: Some(vec![]),
            multicast: None,
        })
    );
    let o = one("apiVersion: network.openshift.io/v1\nkind: NetNamespace\nnetname: ns3\n");
    assert_eq!(
        o,
        ManifestObject::Namespace(NamespaceSpec {
            name: "ns3".into(),
            netid: None,
            labels: None,
            egress_ips: Some(vec![]),
            multicast: None,
        })
    );
}

#[test]
fn netnamespace_name_mismatch() {
    let e = problem(
            "apiVersion: network.openshift.io/v1\nkind: NetNamespace\nmetadata: {name: a}\nnetname: b\n",
        );
    assert!(matches!(*e.problem, Problem::Invalid { ref field, .. } if field == "netname"));
    assert_eq!(
            e.to_string(),
            "document 1 (NetNamespace \"a\"): netname: invalid value \"b\": must equal metadata.name \"a\""
        );
}

#[test]
fn netnamespace_netid_type_and_range() {
    let e = problem(
        "apiVersion: network.openshift.io/v1\nkind: NetNamespace\nnetname: a\nnetid: abc\n",
    );
    assert_eq!(
        *e.problem,
        Problem::Field {
            field: "netid".into(),
            reason: "invalid type: string \"abc\", expected u32".into()
        }
    );
    for bad in ["99999999999", "-1"] {
        let e = problem(&format!(
            "apiVersion: network.openshift.io/v1\nkind: NetNamespace\nnetname: a\nnetid: {bad}\n"
        ));
        assert!(
            matches!(*e.problem, Problem::Field { ref field, .. } if field == "netid"),
            "{e}"
        );
    }
}

#[test]
fn node_from_v1_node() {
    let o = one(r#"apiVersion: v1
kind: Node
metadata:
  name: node-1
  annotations:
    flowmesh.io/datapath-id: "0x00000000000000a1"
status:
  addresses:
  - {type: Hostname, address: node-1}
  - {type: InternalIP, address: 192.168.1.11}
"#);
    assert_eq!(
        o,
        ManifestObject::Node(NodeSpec {
            name: "node-1".into(),
            node_ip: Ipv4Addr::new(192, 168, 1, 11),
            dpid: 0xa1,
            subnet: None,
            egress: None,
        })
    );
}

#[test]
fn node_unquoted_dpid_is_refused_as_kubernetes_does() {
    let e = problem(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: n\n  annotations:\n    flowmesh.io/datapath-id: 161\nstatus:\n  addresses: [{type: InternalIP, address: 10.0.0.1}]\n",
        );
    assert_eq!(
            e.to_string(),
            "document 1 (Node \"n\"): metadata.annotations[flowmesh.io/datapath-id]: invalid type: integer `161`, expected a string (values are strings: quote numbers and booleans)"
        );
}

#[test]
fn node_errors() {
    let e = problem(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: n\n  annotations: {flowmesh.io/datapath-id: '1'}\n",
        );
    assert_eq!(e.kind.as_deref(), Some("Node"));
    assert_eq!(e.name.as_deref(), Some("n"));
    assert!(
        matches!(*e.problem, Problem::Missing { ref field, .. } if field == "status.addresses[type=InternalIP]")
    );
    let e = problem(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: n\n  annotations: {flowmesh.io/datapath-id: '1'}\nstatus:\n  addresses: [{type: InternalIP, address: 10.0.0.300}]\n",
        );
    assert!(matches!(*e.problem, Problem::Invalid { ref value, .. } if value == "10.0.0.300"));
    let e = problem(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: n\nstatus:\n  addresses: [{type: InternalIP, address: 10.0.0.3}]\n",
        );
    assert!(e.to_string().contains("flowmesh.io/datapath-id"), "{e}");
    assert!(matches!(*e.problem, Problem::Missing { .. }));
    let e = problem(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: n\n  annotations: {flowmesh.io/datapath-id: 0xZZ}\nstatus:\n  addresses: [{type: InternalIP, address: 10.0.0.3}]\n",
        );
    assert!(matches!(*e.problem, Problem::Invalid { ref value, .. } if value == "0xZZ"));
}

#[test]
fn hostsubnet() {
    let o = one(r#"apiVersion: network.openshift.io/v1
kind: HostSubnet
metadata:
  name: node-2
  annotations:
    flowmesh.io/datapath-id: "0x2"
host: node-2
hostIP: 192.168.1.12
subnet: 10.128.2.0/23
"#);
    assert_eq!(
        o,
        ManifestObject::Node(NodeSpec {
            name: "node-2".into(),
            node_ip: Ipv4Addr::new(192, 168, 1, 12),
            dpid: 2,
            subnet: Some("10.128.2.0/23".into()),
            egress: Some((vec![], vec![])),
        })
    );
}

#[test]
fn hostsubnet_errors() {
    let e = problem(
            "apiVersion: network.openshift.io/v1\nkind: HostSubnet\nhost: n\nmetadata: {annotations: {flowmesh.io/datapath-id: '1'}}\n",
        );
    assert!(matches!(*e.problem, Problem::Missing { ref field, .. } if field == "hostIP"));
    let e = problem(
            "apiVersion: network.openshift.io/v1\nkind: HostSubnet\nmetadata: {name: a}\nhost: b\nhostIP: 1.1.1.1\n",
        );
    assert!(matches!(*e.problem, Problem::Invalid { ref field, .. } if field == "host"));
    let e = problem(
            "apiVersion: network.openshift.io/v1\nkind: HostSubnet\nhostIP: 1.1.1.1\nmetadata: {annotations: {flowmesh.io/datapath-id: '1'}}\n",
        );
    assert!(matches!(*e.problem, Problem::Missing { ref field, .. } if field == "host"));
}

#[test]
fn pod() {
    let o = one(r#"apiVersion: v1
kind: Pod
metadata:
  namespace: ns1
  name: web
  annotations:
    flowmesh.io/ovs-port: veth-web
    flowmesh.io/ofport: "7"
spec:
  nodeName: node-1
  containers: [{name: c, image: busybox}]
"#);
    assert_eq!(
        o,
        ManifestObject::Pod(PodSpec {
            namespace: "ns1".into(),
            name: "web".into(),
            node: "node-1".into(),
            port_name: "veth-web".into(),
            ofport: Some(7),
            labels: Labels::new(),
            ports: vec![],
        })
    );
    assert_eq!(o.describe(), "pod/ns1/web");
}

#[test]
fn labels_and_named_ports() {
    let o = one(r#"apiVersion: v1
kind: Namespace
metadata:
  name: ns1
  labels: {team: a, example.com/env: prod}
"#);
    let ManifestObject::Namespace(ns) = o else {
        panic!("not a namespace: {o:?}");
    };
    assert_eq!(
        ns.labels.map(|l| l.into_iter().collect::<Vec<_>>()),
        Some(vec![
            ("example.com/env".to_string(), "prod".to_string()),
            ("team".to_string(), "a".to_string())
        ])
    );
    let o = one(r#"apiVersion: v1
kind: Pod
metadata:
  namespace: ns1
  name: web
  labels: {app: web}
  annotations: {flowmesh.io/ovs-port: veth-web}
spec:
  nodeName: node-1
  containers:
  - name: c
    ports:
    - {name: http, containerPort: 8080}
    - {containerPort: 9090}
  - name: d
    ports: [{name: dns, containerPort: 53, protocol: UDP}]
"#);
    let ManifestObject::Pod(p) = o else {
        panic!("not a pod: {o:?}");
    };
    assert_eq!(p.labels.get("app").map(String::as_str), Some("web"));
    assert_eq!(
        p.ports,
        vec![
            ContainerPort {
                name: "http".into(),
                protocol: topology::model::Protocol::Tcp,
                port: 8080
            },
            ContainerPort {
                name: "dns".into(),
                protocol: topology::model::Protocol::Udp,
                port: 53
            },
        ]
    );
    let base = "apiVersion: v1\nkind: Pod\nmetadata:\n  namespace: ns1\n  name: web\n  annotations: {flowmesh.io/ovs-port: p}\n";
    let e = problem(&format!(
        "{base}  labels: {{'bad key': x}}\nspec: {{nodeName: n}}\n"
    ));
    assert!(e.to_string().contains("metadata.labels"), "{e}");
    let e = problem(&format!(
            "{base}spec:\n  nodeName: n\n  containers: [{{name: c, ports: [{{name: HTTP, containerPort: 80}}]}}]\n"
        ));
    assert!(
        e.to_string().contains("spec.containers[0].ports[0].name"),
        "{e}"
    );
    let e = problem(&format!(
            "{base}spec:\n  nodeName: n\n  containers: [{{name: c, ports: [{{name: h, containerPort: 80, protocol: ICMP}}]}}]\n"
        ));
    assert!(
        e.to_string()
            .contains("spec.containers[0].ports[0].protocol"),
        "{e}"
    );
}

#[test]
fn network_policy_document() {
    let text = r#"apiVersion: v1
kind: Namespace
metadata: {name: ns}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: ok, namespace: ns}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress: [{from: [{podSelector: {}}], ports: [{port: 80}]}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web, namespace: ns}
spec:
  ingress:
  - from:
    - podSelector: {}
    - ipBlock: {cidr: 10.0.0.0/8, except: ["10.0.0.0/33"]}
"#;
    let e = problem(text);
    assert_eq!(e.index, 3);
    assert!(
        e.to_string().starts_with(
            "document 3 (NetworkPolicy \"ns/web\"): spec.ingress[0].from[1].ipBlock.except[0]: "
        ),
        "{e}"
    );
    let ok = parse(
        text.split("---\n")
            .take(2)
            .collect::<Vec<_>>()
            .join("---\n")
            .as_str(),
    )
    .expect("valid");
    assert_eq!(ok[1].describe(), "networkpolicy/ns/ok");
    let e = problem("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: a, namespace: ns}\nspec: {podSelector: 7}\n");
    assert!(e.to_string().contains("not a NetworkPolicy"), "{e}");
}

#[test]
fn pod_errors() {
    let base = "apiVersion: v1\nkind: Pod\nmetadata:\n  namespace: ns1\n  name: web\n";
    let e = problem(&format!(
        "{base}  annotations: {{flowmesh.io/ovs-port: p}}\n"
    ));
    assert_eq!(e.name.as_deref(), Some("ns1/web"));
    assert!(matches!(*e.problem, Problem::Missing { ref field, .. } if field == "spec.nodeName"));
    let e = problem(&format!("{base}spec: {{nodeName: n}}\n"));
    assert!(e.to_string().contains("flowmesh.io/ovs-port"), "{e}");
    let e = problem(&format!(
            "{base}  annotations: {{flowmesh.io/ovs-port: p, flowmesh.io/ofport: '0'}}\nspec: {{nodeName: n}}\n"
        ));
    assert!(matches!(*e.problem, Problem::Invalid { ref value, .. } if value == "0"));
    let e = problem("apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {nodeName: n}\n");
    assert!(
        matches!(*e.problem, Problem::Missing { ref field, .. } if field == "metadata.namespace")
    );
    let e = problem("apiVersion: v1\nkind: Pod\nmetadata: {namespace: a, name: 'x/y'}\n");
    assert!(matches!(*e.problem, Problem::Invalid { ref field, .. } if field == "metadata.name"));
}

#[test]
fn cluster_network_openshift_shape() {
    let o = one(r#"apiVersion: network.openshift.io/v1
kind: ClusterNetwork
metadata: {name: default}
clusterNetworks:
- CIDR: 10.128.0.0/14
  hostSubnetLength: 9
- cidr: 10.132.0.0/14
  hostPrefix: 24
serviceNetwork: 172.30.0.0/16
pluginName: redhat/openshift-ovs-multitenant
vxlanPort: 4789
mtu: 1450
"#);
    assert_eq!(
        o,
        ManifestObject::ClusterNetwork(ClusterNetworkSpec {
            name: "default".into(),
            cluster_networks: vec![
                ClusterNetworkRange {
                    cidr: "10.128.0.0/14".into(),
                    host_prefix: 23
                },
                ClusterNetworkRange {
                    cidr: "10.132.0.0/14".into(),
                    host_prefix: 24
                },
            ],
            service_network: Some("172.30.0.0/16".into()),
            mode: Some(NetworkMode::Multitenant),
            vxlan_port: Some(4789),
            mtu: Some(1450),
        })
    );
}

#[test]
fn cluster_network_legacy_fields_and_mode() {
    let o = one(
            "apiVersion: network.openshift.io/v1\nkind: ClusterNetwork\nnetwork: 10.128.0.0/14\nhostsubnetlength: 8\nmode: networkpolicy\n",
        );
    let ManifestObject::ClusterNetwork(c) = o else {
        panic!("not a cluster network: {o:?}");
    };
    assert_eq!(c.name, "default");
    assert_eq!(c.cluster_networks[0].host_prefix, 24);
    assert_eq!(c.mode, Some(NetworkMode::NetworkPolicy));
    assert_eq!(c.vxlan_port, None);
}

#[test]
fn cluster_network_errors() {
    let head =
        "apiVersion: network.openshift.io/v1\nkind: ClusterNetwork\nmetadata: {name: default}\n";
    let e = problem(head);
    assert!(matches!(*e.problem, Problem::Missing { ref field, .. } if field == "clusterNetworks"));
    let e = problem(&format!("{head}clusterNetworks: [{{CIDR: 10.0.0.0/8}}]\n"));
    assert!(
        matches!(*e.problem, Problem::Missing { ref field, .. } if field == "clusterNetworks[0].hostSubnetLength")
    );
    let e = problem(&format!(
        "{head}clusterNetworks: [{{CIDR: 10.0.0.0/8, hostSubnetLength: 9, hostPrefix: 24}}]\n"
    ));
    assert!(
        matches!(*e.problem, Problem::Invalid { ref field, .. } if field == "clusterNetworks[0].hostPrefix")
    );
    let e = problem(&format!(
        "{head}clusterNetworks: [{{CIDR: 10.0.0.0/8, hostSubnetLength: 40}}]\n"
    ));
    assert!(matches!(*e.problem, Problem::Invalid { .. }));
    let e = problem(&format!(
            "{head}clusterNetworks: [{{CIDR: 10.0.0.0/8, hostSubnetLength: 9}}]\npluginName: redhat/openshift-ovs-flat\n"
        ));
    assert!(matches!(*e.problem, Problem::Invalid { ref field, .. } if field == "pluginName"));
    let e = problem(&format!(
            "{head}clusterNetworks: [{{CIDR: 10.0.0.0/8, hostSubnetLength: 9}}]\npluginName: redhat/openshift-ovs-subnet\nmode: multitenant\n"
        ));
    assert!(matches!(*e.problem, Problem::Invalid { ref field, .. } if field == "mode"));
    let e = problem(&format!(
        "{head}clusterNetworks: [{{CIDR: 10.0.0.0/8, hostSubnetLength: 9}}]\nvxlanPort: 70000\n"
    ));
    assert!(matches!(*e.problem, Problem::Invalid { ref field, .. } if field == "vxlanPort"));
    let e = problem(&format!("{head}clusterNetworks: 10.0.0.0/8\n"));
    assert!(
        matches!(*e.problem, Problem::Field { ref field, .. } if field == "clusterNetworks"),
        "{e}"
    );
}

#[test]
fn multi_document_in_order_with_empty_documents() {
    let text = r#"
---
apiVersion: v1
kind: Namespace
metadata: {name: ns1}
---
---
# only a comment
---
apiVersion: network.openshift.io/v1
kind: NetNamespace
netname: ns2
netid: 7
---
apiVersion: v1
kind: Pod
metadata:
  namespace: ns1
  name: a
  annotations: {flowmesh.io/ovs-port: veth-a}
spec: {nodeName: node-1}
"#;
    let docs = parse_documents(text).expect("parses");
    let got: Vec<(usize, String)> = docs
        .iter()
        .map(|d| (d.index, d.object.describe()))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, "namespace/ns1".to_string()),
            (4, "namespace/ns2".to_string()),
            (5, "pod/ns1/a".to_string()),
        ]
    );
    assert_eq!(parse("").expect("empty is fine"), vec![]);
    assert_eq!(parse("---\n---\n").expect("only separators"), vec![]);
}

#[test]
fn error_names_the_document_index() {
    let text = "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {}\n";
    let e = problem(text);
    assert_eq!(e.index, 2);
    assert_eq!(
        e.to_string(),
        "document 2 (Namespace): metadata.name is required (the namespace name)"
    );
}

#[test]
fn unknown_kind_and_api_version() {
    let e = problem("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n");
    assert_eq!(
        *e.problem,
        Problem::UnknownKind {
            api_version: "apps/v1".into(),
            kind: "Deployment".into()
        }
    );
    assert!(e
        .to_string()
        .starts_with("document 1 (Deployment \"web\"): unsupported kind"));
    // Right kind, wrong group.
    let e = problem("apiVersion: v1\nkind: HostSubnet\nhost: a\n");
    assert!(matches!(*e.problem, Problem::UnknownKind { .. }));
}

#[test]
fn shape_errors() {
    assert_eq!(*problem("- a\n- b\n").problem, Problem::NotAnObject);
    assert_eq!(
        *problem("kind: Namespace\n").problem,
        Problem::MissingTypeInfo("apiVersion")
    );
    assert_eq!(
        *problem("apiVersion: v1\n").problem,
        Problem::MissingTypeInfo("kind")
    );
    let e = problem("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\nkey: [unclosed\n");
    assert_eq!(e.index, 2);
    assert!(matches!(*e.problem, Problem::Yaml(_)));
    let e = problem("apiVersion: v1\nkind: Namespace\nmetadata: {name: [a]}\n");
    assert!(matches!(*e.problem, Problem::WrongType { ref field, .. } if field == "metadata.name"));
}

#[test]
fn dpid_forms() {
    assert_eq!(parse_dpid("42"), Ok(42));
    assert_eq!(parse_dpid("0x2a"), Ok(42));
    assert_eq!(parse_dpid("0X000000000000002A"), Ok(42));
    assert_eq!(parse_dpid("0xffffffffffffffff"), Ok(u64::MAX));
    assert!(parse_dpid("0x1ffffffffffffffff").is_err());
    assert!(parse_dpid("0x").is_err());
    assert!(parse_dpid("2a").is_err());
    assert!(parse_dpid("-1").is_err());
    assert!(parse_dpid("").is_err());
}

#[test]
fn mode_names() {
    for m in [
        NetworkMode::Subnet,
        NetworkMode::Multitenant,
        NetworkMode::NetworkPolicy,
    ] {
        assert_eq!(NetworkMode::parse(m.as_str()), Some(m));
        assert_eq!(
            NetworkMode::parse(&format!("redhat/openshift-ovs-{}", m.as_str())),
            Some(m)
        );
    }
    assert_eq!(NetworkMode::parse("flat"), None);
}
