//! `deploy/`: the CRDs there are exactly what `kinds::openshift` generates (regenerate with
//! `FLOWMESH_BLESS=1 cargo test -p controller --test deploy`, or
//! `flowmesh-controller --print-crds > deploy/crds.yaml`), and every YAML document in `deploy/`
//! parses as its typed Kubernetes object with no unknown field. The OpenShift types read what
//! OpenShift writes and write what it reads.

use std::path::{Path, PathBuf};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kinds::openshift::{self, HostSubnet, NetNamespace};
use serde::Deserialize;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

#[test]
fn checked_in_crds_equal_the_generated_ones() {
    let want = openshift::crds_yaml().expect("CRDs serialize");
    let path = deploy_dir().join("crds.yaml");
    if std::env::var_os("FLOWMESH_BLESS").is_some() {
        std::fs::write(&path, &want).expect("write deploy/crds.yaml");
    }
    let have = std::fs::read_to_string(&path).expect("read deploy/crds.yaml");
    assert!(
        have == want,
        "deploy/crds.yaml differs from what the types generate; regenerate it with \
         FLOWMESH_BLESS=1 cargo test -p controller --test deploy"
    );
    let crds = openshift::crds();
    let names: Vec<_> = crds
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    assert_eq!(
        names,
        [
            "clusternetworks.network.openshift.io",
            "hostsubnets.network.openshift.io",
            "netnamespaces.network.openshift.io",
            "egressnetworkpolicies.network.openshift.io",
        ]
    );
    let hs = &crds[1].spec.versions[0];
    let props = hs
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .and_then(|s| s.properties.as_ref())
        .expect("HostSubnet schema properties");
    for f in [
        "host",
        "hostIP",
        "subnet",
        "egressIPs",
        "egressCIDRs",
        "metadata",
    ] {
        assert!(
            props.contains_key(f),
            "HostSubnet schema lacks {f}: {props:?}"
        );
    }
    assert_eq!(crds[3].spec.scope, "Namespaced");
    assert_eq!(crds[0].spec.scope, "Cluster");
}

#[test]
fn checked_in_flowmesh_crds_equal_the_generated_ones() {
    let want = kinds::flowmesh::crds_yaml().expect("CRDs serialize");
    let path = deploy_dir().join("kubernetes/05-crds.yaml");
    if std::env::var_os("FLOWMESH_BLESS").is_some() {
        std::fs::write(&path, &want).expect("write deploy/kubernetes/05-crds.yaml");
    }
    let have = std::fs::read_to_string(&path).expect("read deploy/kubernetes/05-crds.yaml");
    assert!(
        have == want,
        "deploy/kubernetes/05-crds.yaml differs from what the types generate; regenerate it with \
         FLOWMESH_BLESS=1 cargo test -p controller --test deploy"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_flowmesh-controller"))
        .arg("--print-flowmesh-crds")
        .output()
        .expect("run flowmesh-controller --print-flowmesh-crds");
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);
}

/// Deserializes `doc` as `T`, failing on any field `T` does not know.
fn strict<T: serde::de::DeserializeOwned>(doc: serde_yaml::Value) -> Result<T, String> {
    let mut unknown = Vec::new();
    let v = serde_ignored::deserialize(doc, |p| unknown.push(p.to_string()))
        .map_err(|e| e.to_string())?;
    if unknown.is_empty() {
        Ok(v)
    } else {
        Err(format!("unknown fields {unknown:?}"))
    }
}

/// Every `.yaml` file under `dir`, recursively, sorted.
fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("read deploy dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(yaml_files(&p));
        } else if p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
            out.push(p);
        }
    }
    out.sort();
    out
}

#[test]
fn every_deploy_yaml_parses_as_its_typed_object() {
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    for f in yaml_files(&deploy_dir()) {
        let text = std::fs::read_to_string(&f).expect("read");
        for (i, de) in serde_yaml::Deserializer::from_str(&text).enumerate() {
            let what = format!("{} document {}", f.display(), i + 1);
            let doc = serde_yaml::Value::deserialize(de).unwrap_or_else(|e| panic!("{what}: {e}"));
            let kind = doc
                .get("kind")
                .and_then(|k| k.as_str())
                .unwrap_or_default()
                .to_owned();
            let r = match kind.as_str() {
                "CustomResourceDefinition" => strict::<CustomResourceDefinition>(doc).map(drop),
                "Namespace" => strict::<Namespace>(doc).map(drop),
                "ServiceAccount" => strict::<ServiceAccount>(doc).map(drop),
                "ClusterRole" => strict::<ClusterRole>(doc).map(drop),
                "ClusterRoleBinding" => strict::<ClusterRoleBinding>(doc).map(drop),
                "Role" => strict::<Role>(doc).map(drop),
                "RoleBinding" => strict::<RoleBinding>(doc).map(drop),
                "Deployment" => strict::<Deployment>(doc).map(drop),
                "DaemonSet" => strict::<DaemonSet>(doc).map(drop),
                "ConfigMap" => strict::<ConfigMap>(doc).and_then(|cm| {
                    // The cluster network and policyAuditConfig it carries are what --config
                    // reads, read as the controller reads them.
                    let text = cm
                        .data
                        .as_ref()
                        .and_then(|d| d.get("cluster-network.yaml"))
                        .ok_or("no data.cluster-network.yaml")?;
                    let (_, audit) = controller::resources::audit::parse_config_file(text)?;
                    match audit {
                        Some(a) if a == Default::default() => Ok(()),
                        Some(a) => Err(format!(
                            "policyAuditConfig shows other values than the defaults: {a:?}"
                        )),
                        None => Err("no policyAuditConfig".into()),
                    }
                }),
                other => Err(format!("no typed check for kind {other:?}")),
            };
            if let Err(e) = r {
                panic!("{what}: {e}");
            }
            *kinds.entry(kind).or_default() += 1;
        }
    }
    for k in [
        "CustomResourceDefinition",
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Deployment",
        "DaemonSet",
    ] {
        assert!(kinds.contains_key(k), "deploy/ has no {k}: {kinds:?}");
    }
    // network.openshift.io's four (deploy/crds.yaml) and flowmesh.io's PodAttachment.
    assert_eq!(kinds["CustomResourceDefinition"], 5, "{kinds:?}");
}

/// The shipped workloads run the binaries with flags they accept, and mount what they name.
#[test]
fn deploy_workloads_run_real_flags() {
    const AUDIT_LOG: &str = "/var/log/flowmesh/acl-audit-log.log";
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
    let read =
        |f: &str| std::fs::read_to_string(deploy_dir().join("kubernetes").join(f)).expect("read");
    let d: Deployment = serde_yaml::from_str(&read("30-controller.yaml")).expect("Deployment");
    let ds: DaemonSet = serde_yaml::from_str(&read("40-node.yaml")).expect("DaemonSet");
    let ctl_pod = d.spec.template.spec.clone().expect("pod spec");
    let shim_pod = ds.spec.template.spec.clone().expect("pod spec");
    let (ctl, shim) = (&ctl_pod.containers[0], &shim_pod.containers[0]);
    // The mount that holds `path`, and the volume behind it.
    let mount_of = |pod: &k8s_openapi::api::core::v1::PodSpec, path: &str| {
        let m = pod.containers[0]
            .volume_mounts
            .iter()
            .flatten()
            .filter(|m| path.starts_with(&format!("{}/", m.mount_path.trim_end_matches('/'))))
            .max_by_key(|m| m.mount_path.len())
            .unwrap_or_else(|| panic!("nothing mounted at {path}"))
            .clone();
        let v = pod
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == m.name)
            .unwrap_or_else(|| panic!("no volume {}", m.name))
            .clone();
        (m, v)
    };
    // The controller re-reads --config while running (policyAuditConfig): the ConfigMap is
    // mounted as a directory, which the kubelet updates in place (a subPath mount never is).
    let config = ctl
        .args
        .iter()
        .flatten()
        .find_map(|a| a.strip_prefix("--config="))
        .expect("controller --config");
    let (m, v) = mount_of(&ctl_pod, config);
    assert!(m.sub_path.is_none(), "{m:?}");
    assert_eq!(
        v.config_map.map(|c| c.name).as_deref(),
        Some("flowmesh-config")
    );
    // The shim's audit log (its default path, checked against its --help below) is on the
    // host.
    let (_, v) = mount_of(&shim_pod, AUDIT_LOG);
    assert!(v.host_path.is_some(), "{v:?}");
    for (bin, c) in [("flowmesh-controller", ctl), ("flowmesh-shim", shim)] {
        // Flag names only: values are the pod's ($(VAR) expansions, mounted files).
        let exe = match bin {
            "flowmesh-shim" => {
                flowmesh_tests::cni::shim_bins()
                    .expect("shim binaries")
                    .shim
            }
            _ => PathBuf::from(env!("CARGO_BIN_EXE_flowmesh-controller")),
        };
        let help = std::process::Command::new(exe)
            .arg("--help")
            .output()
            .unwrap_or_else(|e| panic!("run {bin} --help: {e}"));
        let help = String::from_utf8_lossy(&help.stdout).into_owned();
        if bin == "flowmesh-shim" {
            assert!(
                help.contains(&format!("[default: {AUDIT_LOG}]")),
                "the shim's audit log is {AUDIT_LOG} by default:\n{help}"
            );
        }
        for a in c.args.iter().flatten() {
            let flag = a.split('=').next().unwrap_or_default();
            assert!(
                help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n")),
                "{bin} has no flag {flag} (deploy/kubernetes args {a:?})"
            );
        }
    }
}

/// The controller's probes reach its loopback health listener (host network: the kubelet
/// probes from the host), and its metrics, on a non-loopback address, need client
/// certificates from the mounted TLS Secret.
#[test]
fn probes_use_the_health_listener_and_metrics_need_client_certificates() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use std::net::SocketAddr;
    let text = std::fs::read_to_string(deploy_dir().join("kubernetes/30-controller.yaml"))
        .expect("read 30-controller.yaml");
    let d: Deployment = serde_yaml::from_str(&text).expect("Deployment");
    let spec = d.spec.template.spec.expect("pod spec");
    assert_eq!(spec.host_network, Some(true));
    let c = &spec.containers[0];
    let args = c.args.clone().unwrap_or_default();
    let flag = |name: &str| {
        args.iter()
            .find_map(|a| a.strip_prefix(&format!("{name}=")).map(str::to_string))
    };
    let health: SocketAddr = flag("--health-listen")
        .expect("--health-listen")
        .parse()
        .expect("health address");
    assert!(health.ip().is_loopback(), "{health}");
    for (probe, path) in [
        (c.liveness_probe.as_ref(), "/healthz"),
        (c.readiness_probe.as_ref(), "/readyz"),
    ] {
        let get = probe
            .and_then(|p| p.http_get.as_ref())
            .unwrap_or_else(|| panic!("no httpGet probe for {path}"));
        assert_eq!(get.host.as_deref(), Some("127.0.0.1"), "{path}");
        assert_eq!(get.path.as_deref(), Some(path));
        assert_eq!(
            get.port,
            IntOrString::Int(i32::from(health.port())),
            "{path}"
        );
    }
    let metrics: SocketAddr = flag("--metrics-listen")
        .expect("--metrics-listen")
        .parse()
        .expect("metrics address");
    assert_ne!(metrics.port(), health.port());
    if !metrics.ip().is_loopback() {
        let mounts: Vec<String> = c
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| m.mount_path.clone())
            .collect();
        for f in [
            "--metrics-tls-cert",
            "--metrics-tls-key",
            "--metrics-client-ca",
        ] {
            let path = flag(f).unwrap_or_else(|| panic!("metrics off loopback without {f}"));
            assert!(
                mounts.iter().any(|m| path.starts_with(&format!("{m}/"))),
                "{f}={path} is in no mounted volume ({mounts:?})"
            );
        }
    }
}

#[test]
fn openshift_objects_read_and_write_their_api_shape() {
    // What `oc get hostsubnet node1 -o yaml` prints (trimmed).
    let hs: HostSubnet = serde_yaml::from_str(
        "apiVersion: network.openshift.io/v1\nkind: HostSubnet\nmetadata:\n  name: node1\n  \
         resourceVersion: \"42\"\n  uid: 7d1c\nhost: node1\nhostIP: 10.0.0.1\n\
         subnet: 10.128.0.0/23\negressIPs: [10.0.0.50]\negressCIDRs: [10.0.0.0/24]\n",
    )
    .expect("HostSubnet parses");
    assert_eq!(hs.host_ip, "10.0.0.1");
    assert_eq!(hs.metadata.resource_version.as_deref(), Some("42"));
    assert_eq!(hs.egress_cidrs, Some(vec!["10.0.0.0/24".to_string()]));
    let back = serde_json::to_value(&hs).expect("serialize");
    assert_eq!(back["apiVersion"], "network.openshift.io/v1");
    assert_eq!(back["kind"], "HostSubnet");
    assert_eq!(back["hostIP"], "10.0.0.1");
    assert_eq!(back["egressIPs"][0], "10.0.0.50");

    // Without apiVersion/kind (as kube hands a typed list item), they are filled in.
    let ns: NetNamespace = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "shop"}, "netname": "shop", "netid": 4242
    }))
    .expect("NetNamespace parses");
    let v = serde_json::to_value(&ns).expect("serialize");
    assert_eq!(v["kind"], "NetNamespace");
    assert_eq!(v["netid"], 4242);
    assert!(v.get("egressIPs").is_none(), "{v}");
    use kube::Resource;
    assert_eq!(HostSubnet::plural(&()), "hostsubnets");
    assert_eq!(NetNamespace::api_version(&()), "network.openshift.io/v1");
}
