//! EgressNetworkPolicy operations: apply, delete, and the resolver's addresses, on the model
//! and the store. The outside shapes and their conversions are `kinds::egress_firewall`.

pub mod dns;
pub mod schedule;

use crate::core::changes::{dropped_dns_changes, resolved_names};
use crate::core::{CoreHandle, Effects, Event};
use crate::error::ApiError;
use crate::resources::network_policy::Applied;
use crate::resources::nodes as ops;
use crate::state::{Change, DnsRecord, Record, RecordKey};
use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use topology::model::EgressFirewall;
use topology::ClusterModel;

/// The model side of applying a firewall (inside `apply -f`'s transaction or alone).
pub fn apply_in(m: &mut ClusterModel, f: EgressFirewall) -> Result<(Applied, Effects), ApiError> {
    ops::check_name("namespace", &f.namespace)?;
    ops::check_name("egressnetworkpolicy", &f.name)?;
    let verdict = match m.egress_firewall(&f.namespace) {
        Some(old) if *old == f => return Ok((Applied::Unchanged, Effects::default())),
        Some(old) if old.name == f.name => Applied::Configured,
        _ => Applied::Created,
    };
    let before = resolved_names(m);
    let affected = m.apply_egress_firewall(f.clone())?;
    let mut changes = vec![Change::Put(Record::EgressNetworkPolicy(f.clone()))];
    changes.extend(dropped_dns_changes(m, &before));
    let ev = Event::now(
        "EgressNetworkPolicyApplied",
        format!("egressnetworkpolicy/{}/{}", f.namespace, f.name),
        format!(
            "egressnetworkpolicy {}/{} {} ({} rules)",
            f.namespace,
            f.name,
            verdict.as_str(),
            f.rules.len()
        ),
    );
    Ok((
        verdict,
        Effects {
            affected,
            changes,
            require_connected: None,
            undo: None,
            events: vec![ev],
        },
    ))
}

/// Create or replace a firewall.
pub async fn apply(core: &CoreHandle, f: EgressFirewall) -> Result<Applied, ApiError> {
    core.mutate(move |m| apply_in(m, f)).await
}

/// Delete a firewall (an unknown one is NotFound).
pub async fn delete(core: &CoreHandle, namespace: String, name: String) -> Result<(), ApiError> {
    core.mutate(move |m| {
        let before = resolved_names(m);
        let affected = m.delete_egress_firewall(&namespace, &name)?;
        let mut changes = vec![Change::Delete(RecordKey::EgressNetworkPolicy(
            namespace.clone(),
        ))];
        changes.extend(dropped_dns_changes(m, &before));
        let ev = Event::now(
            "EgressNetworkPolicyDeleted",
            format!("egressnetworkpolicy/{namespace}/{name}"),
            format!("egressnetworkpolicy {namespace}/{name} deleted"),
        );
        Ok((
            (),
            Effects {
                affected,
                changes,
                require_connected: None,
                undo: None,
                events: vec![ev],
            },
        ))
    })
    .await
}

/// Record the addresses a name resolved to (from the resolver); stored and pushed to the
/// switches of the NETIDs that use it. Returns whether anything changed.
pub async fn set_addresses(
    core: &CoreHandle,
    name: String,
    addrs: BTreeSet<Ipv4Addr>,
) -> Result<bool, ApiError> {
    core.mutate(move |m| {
        if m.egress_dns_addresses(&name) == Some(&addrs) {
            return Ok((false, Effects::default()));
        }
        let affected = m.set_egress_dns_addresses(&name, addrs.clone());
        if m.egress_dns_addresses(&name) != Some(&addrs) {
            return Ok((false, Effects::default())); // no firewall uses it (any more)
        }
        let ev = Event::now(
            "EgressDnsChanged",
            format!("dnsname/{name}"),
            format!(
                "{name} resolves to {}",
                addrs
                    .iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
        Ok((
            true,
            Effects {
                affected,
                changes: vec![Change::Put(Record::EgressDns(DnsRecord {
                    name: name.clone(),
                    addresses: addrs.iter().copied().collect(),
                }))],
                require_connected: None,
                undo: None,
                events: vec![ev],
            },
        ))
    })
    .await
}
