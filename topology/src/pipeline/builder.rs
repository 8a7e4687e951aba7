//! The flow builder: every flow is checked against its table's declaration (match fields,
//! written fields, goto targets) and OVS's prerequisites, and its match is normalized.

use super::priority::Band;
use super::tables::TableId;
use ofproto::oxm::{OXM_CLASS_NXM1, OXM_CLASS_OPENFLOW_BASIC};
use ofproto::{Action, Field, Flow, Instruction, Match, OxmHeader};
use std::sync::OnceLock;

/// `Field::from_header` through a direct table for the OpenFlow basic and NXM1 classes (the
/// builder resolves every field of every flow; a linear scan showed up in profiles).
fn field_of(h: OxmHeader) -> Option<Field> {
    static TABLE: OnceLock<Vec<Option<Field>>> = OnceLock::new();
    let slot = |h: OxmHeader| match (h.class, h.experimenter) {
        (OXM_CLASS_OPENFLOW_BASIC, None) => Some(h.field as usize & 0x7f),
        (OXM_CLASS_NXM1, None) => Some(128 + (h.field as usize & 0x7f)),
        _ => None,
    };
    let t = TABLE.get_or_init(|| {
        let mut t = vec![None; 256];
        for f in ofproto::oxm::FIELDS {
            if let Some(i) = slot(f.header) {
                t[i] = Some(f.field);
            }
        }
        t
    });
    match slot(h) {
        Some(i) => t
            .get(i)
            .copied()
            .flatten()
            .or_else(|| Field::from_header(h)),
        None => Field::from_header(h),
    }
}

/// A flow the pipeline refused to build: a bug in the pipeline, reported with context.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PipelineError {
    /// A match field the table does not declare.
    #[error("table {table:?} does not declare match field {field}")]
    MatchNotAllowed {
        /// The table.
        table: TableId,
        /// The field name.
        field: &'static str,
    },
    /// A written field the table does not declare.
    #[error("table {table:?} does not declare writes to {field}")]
    SetNotAllowed {
        /// The table.
        table: TableId,
        /// The field name.
        field: &'static str,
    },
    /// A jump the table does not declare.
    #[error("table {table:?} may not jump to table {to}")]
    GotoNotAllowed {
        /// The table.
        table: TableId,
        /// Target table number.
        to: u8,
    },
    /// A field unknown to flowmesh.
    #[error("table {table:?}: unknown field in match or action")]
    UnknownField {
        /// The table.
        table: TableId,
    },
    /// The same field twice in a match.
    #[error("table {table:?}: field {field} appears twice in a match")]
    DuplicateField {
        /// The table.
        table: TableId,
        /// The field name.
        field: &'static str,
    },
    /// A field whose prerequisite (eth_type / ip_proto) is missing.
    #[error("table {table:?}: field {field} needs {needs}")]
    MissingPrerequisite {
        /// The table.
        table: TableId,
        /// The field name.
        field: &'static str,
        /// What is missing.
        needs: &'static str,
    },
    /// The node is not in the model.
    #[error("unknown node {0:?}")]
    UnknownNode(String),
}

/// Builds one flow for one table.
#[derive(Clone, Debug)]
pub struct FlowBuilder {
    table: TableId,
    priority: u16,
    cookie: u64,
    matches: Match,
    actions: Vec<Action>,
    goto: Option<TableId>,
}

impl FlowBuilder {
    /// A flow in `table` at `band` with `cookie`; without actions or goto it drops.
    pub fn new(table: TableId, band: Band, cookie: u64) -> Self {
        FlowBuilder {
            table,
            priority: band.value(),
            cookie,
            matches: Match::new(),
            actions: Vec::new(),
            goto: None,
        }
    }

    /// Raise the priority above the band by `by` (rules ordered inside one band, such as the
    /// egress firewall's prefix lengths).
    pub fn raise(mut self, by: u16) -> Self {
        self.priority = self.priority.saturating_add(by);
        self
    }

    /// Set the match (built with `ofproto::Match`'s typed builders).
    pub fn matching(mut self, m: Match) -> Self {
        self.matches = m;
        self
    }

    /// Append apply-actions.
    pub fn actions(mut self, a: impl IntoIterator<Item = Action>) -> Self {
        // Room for exactly these: a growing vector starts at 4 actions, and `build` would
        // copy the flow's one or two into an exact allocation (a malloc and a free per flow).
        let a = a.into_iter();
        self.actions.reserve_exact(a.size_hint().0);
        self.actions.extend(a);
        self
    }

    /// Append one apply-action.
    pub fn action(mut self, a: Action) -> Self {
        // As in `actions`: a flow's only action gets no spare room for `build` to copy away.
        if self.actions.is_empty() {
            self.actions.reserve_exact(1);
        }
        self.actions.push(a);
        self
    }

    /// Continue in another table.
    pub fn goto(mut self, t: TableId) -> Self {
        self.goto = Some(t);
        self
    }

    /// Check everything and produce the flow (match normalized).
    pub fn build(self) -> Result<Flow, PipelineError> {
        let table = self.table;
        let spec = table.spec();
        // Checked in place, without a list of the fields seen: flows are built by the million.
        let fields = &self.matches.fields;
        for (i, mf) in fields.iter().enumerate() {
            let f = field_of(mf.header).ok_or(PipelineError::UnknownField { table })?;
            if !spec.matches.contains(&f) {
                return Err(PipelineError::MatchNotAllowed {
                    table,
                    field: f.name(),
                });
            }
            if fields[..i].iter().any(|e| field_of(e.header) == Some(f)) {
                return Err(PipelineError::DuplicateField {
                    table,
                    field: f.name(),
                });
            }
        }
        check_prerequisites(table, &self.matches)?;
        for a in &self.actions {
            check_action(table, a)?;
        }
        if let Some(g) = self.goto {
            if !spec.gotos.contains(&g) {
                return Err(PipelineError::GotoNotAllowed {
                    table,
                    to: g.number(),
                });
            }
        }
        // Flows are held by the million: no spare capacity in what they keep.
        let mut instructions = Vec::with_capacity(
            usize::from(!self.actions.is_empty()) + usize::from(self.goto.is_some()),
        );
        if !self.actions.is_empty() {
            instructions.push(Instruction::ApplyActions(exact(self.actions)));
        }
        if let Some(g) = self.goto {
            instructions.push(Instruction::GotoTable(g.number()));
        }
        let mut matches = self.matches;
        matches.fields.sort();
        matches.fields = exact(matches.fields);
        Ok(Flow {
            table: table.number(),
            priority: self.priority,
            cookie: self.cookie,
            idle_timeout: 0,
            hard_timeout: 0,
            flags: 0,
            matches,
            instructions,
        })
    }
}

/// `v` in an allocation of exactly its length: a fresh one (the larger one is freed whole, so
/// the next builder's growth reuses it) rather than a shrink in place (which leaves fragments).
fn exact<T>(v: Vec<T>) -> Vec<T> {
    if v.capacity() == v.len() {
        return v;
    }
    let mut out = Vec::with_capacity(v.len());
    out.extend(v);
    out
}

/// Every field of `m` (all known: checked before) has the fields it needs (IP fields an IP
/// eth_type, ports their protocol).
fn check_prerequisites(table: TableId, m: &Match) -> Result<(), PipelineError> {
    let get = |want: Field| {
        m.fields
            .iter()
            .find(|f| field_of(f.header) == Some(want))
            .map(|f| f.value_u64())
    };
    let eth = get(Field::EthType).map(|v| v as u16);
    let proto = get(Field::IpProto).map(|v| v as u8);
    for f in m.fields.iter().filter_map(|mf| field_of(mf.header)) {
        let need: Option<(bool, &'static str)> = match f {
            Field::Ipv4Src | Field::Ipv4Dst | Field::IpProto => {
                Some((eth == Some(0x0800), "eth_type=0x0800 (ip)"))
            }
            Field::ArpOp | Field::ArpSpa | Field::ArpTpa | Field::ArpSha | Field::ArpTha => {
                Some((eth == Some(0x0806), "eth_type=0x0806 (arp)"))
            }
            Field::TcpSrc | Field::TcpDst => Some((proto == Some(6), "ip_proto=6 (tcp)")),
            Field::UdpSrc | Field::UdpDst => Some((proto == Some(17), "ip_proto=17 (udp)")),
            Field::SctpSrc | Field::SctpDst => Some((proto == Some(132), "ip_proto=132 (sctp)")),
            _ => None,
        };
        if let Some((false, needs)) = need {
            return Err(PipelineError::MissingPrerequisite {
                table,
                field: f.name(),
                needs,
            });
        }
    }
    Ok(())
}

fn check_set(table: TableId, header: ofproto::OxmHeader) -> Result<(), PipelineError> {
    let f = field_of(header).ok_or(PipelineError::UnknownField { table })?;
    if table.spec().sets.contains(&f) {
        Ok(())
    } else {
        Err(PipelineError::SetNotAllowed {
            table,
            field: f.name(),
        })
    }
}

fn check_action(table: TableId, a: &Action) -> Result<(), PipelineError> {
    let check_jump = |t: u8| {
        if TableId::from_number(t).is_some_and(|t| table.spec().gotos.contains(&t)) {
            Ok(())
        } else {
            Err(PipelineError::GotoNotAllowed { table, to: t })
        }
    };
    match a {
        Action::SetField(mf) => check_set(table, mf.header),
        Action::Move { dst, .. } | Action::Load { dst, .. } => check_set(table, dst.header),
        Action::Ct(c) => {
            // What runs inside `ct(...)` (`exec(set_field:..->ct_mark)`) writes like any
            // action; recirculating to the table itself needs no declaration.
            c.actions.iter().try_for_each(|a| check_action(table, a))?;
            match c.recirc_table {
                Some(t) if t != table.number() => check_jump(t),
                _ => Ok(()),
            }
        }
        Action::Resubmit { table: Some(t), .. } => check_jump(*t),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::regs;
    use std::net::Ipv4Addr;

    #[test]
    fn refuses_undeclared() {
        let b = FlowBuilder::new(TableId::VxlanIn, Band::PerObject, 0);
        assert!(matches!(
            b.clone().matching(Match::new().in_port(3)).build(),
            Err(PipelineError::MatchNotAllowed {
                field: "in_port_oxm",
                ..
            })
        ));
        assert!(matches!(
            b.clone().action(regs::set_dst_netid(5)).build(),
            Err(PipelineError::SetNotAllowed { field: "reg1", .. })
        ));
        assert!(matches!(
            b.clone().goto(TableId::LocalPod).build(),
            Err(PipelineError::GotoNotAllowed { to: 70, .. })
        ));
        assert!(matches!(
            b.clone().action(Action::resubmit_table(70)).build(),
            Err(PipelineError::GotoNotAllowed { to: 70, .. })
        ));
        let r = FlowBuilder::new(TableId::Routing, Band::General, 0);
        assert!(matches!(
            r.clone()
                .matching(Match::new().ipv4_dst(Ipv4Addr::new(10, 0, 0, 0), 8))
                .build(),
            Err(PipelineError::MissingPrerequisite { .. })
        ));
        assert!(matches!(
            r.matching(Match::new().eth_type(0x800).eth_type(0x800))
                .build(),
            Err(PipelineError::DuplicateField { .. })
        ));
        let ok = FlowBuilder::new(TableId::PodIn, Band::Override, 7)
            .matching(Match::new().udp_dst(4789).ip_proto(17).eth_type(0x0800))
            .build()
            .expect("valid");
        assert_eq!(ok.matches, ok.matches.normalized());
        assert!(ok.instructions.is_empty());
        assert_eq!((ok.table, ok.priority, ok.cookie), (20, 300, 7));
    }
}
