//! Flows and groups as the controller thinks of them, and the FLOW_MOD / GROUP_MOD bodies that
//! carry them (OpenFlow 1.3.5 §7.3.4.1 `ofp_flow_mod`, §7.3.4.2 `ofp_group_mod`).

use crate::action::{port, Action};
use crate::instruction::Instruction;
use crate::oxm::Match;

/// A flow entry: where it lives, what it matches, what it does.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Flow {
    /// Table id.
    pub table: u8,
    /// Priority.
    pub priority: u16,
    /// Opaque cookie (flowmesh encodes provenance in it).
    pub cookie: u64,
    /// Idle timeout in seconds (0 = none).
    pub idle_timeout: u16,
    /// Hard timeout in seconds (0 = none).
    pub hard_timeout: u16,
    /// OFPFF_* flags.
    pub flags: u16,
    /// The match.
    pub matches: Match,
    /// The instructions.
    pub instructions: Vec<Instruction>,
}

impl Flow {
    /// A permanent flow with cookie 0 and no instructions (i.e. drop).
    pub fn new(table: u8, priority: u16, matches: Match) -> Self {
        Flow {
            table,
            priority,
            cookie: 0,
            idle_timeout: 0,
            hard_timeout: 0,
            flags: 0,
            matches,
            instructions: Vec::new(),
        }
    }

    /// Set the cookie.
    pub fn cookie(mut self, cookie: u64) -> Self {
        self.cookie = cookie;
        self
    }

    /// Append an apply-actions instruction (merged into an existing one).
    pub fn apply(mut self, actions: Vec<Action>) -> Self {
        if let Some(Instruction::ApplyActions(a)) = self
            .instructions
            .iter_mut()
            .find(|i| matches!(i, Instruction::ApplyActions(_)))
        {
            a.extend(actions);
        } else {
            self.instructions.push(Instruction::ApplyActions(actions));
        }
        self
    }

    /// Append a goto-table instruction.
    pub fn goto(mut self, table: u8) -> Self {
        self.instructions.push(Instruction::GotoTable(table));
        self
    }
}

/// OFPFC_* flow-mod commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FlowModCommand {
    /// New flow.
    Add,
    /// Modify all matching flows.
    Modify,
    /// Modify entry strictly matching wildcards and priority.
    ModifyStrict,
    /// Delete all matching flows.
    Delete,
    /// Delete entry strictly matching wildcards and priority.
    DeleteStrict,
    /// An unknown command value, kept.
    Unknown(u8),
}

/// OFPFF_* flow-mod flags.
pub mod flow_flags {
    /// Send flow removed message when flow expires or is deleted.
    pub const SEND_FLOW_REM: u16 = 1 << 0;
    /// Check for overlapping entries first.
    pub const CHECK_OVERLAP: u16 = 1 << 1;
    /// Reset flow packet and byte counts.
    pub const RESET_COUNTS: u16 = 1 << 2;
    /// Don't keep track of packet count.
    pub const NO_PKT_COUNTS: u16 = 1 << 3;
    /// Don't keep track of byte count.
    pub const NO_BYT_COUNTS: u16 = 1 << 4;
}

/// The body of an OFPT_FLOW_MOD.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FlowMod {
    /// The command.
    pub command: FlowModCommand,
    /// The flow (for deletes: table/priority/cookie/match select what to delete).
    pub flow: Flow,
    /// Cookie mask (deletes and modifies select by `cookie & mask`).
    pub cookie_mask: u64,
    /// Buffered packet to apply to, or OFP_NO_BUFFER (0xffffffff).
    pub buffer_id: u32,
    /// For deletes: require an output action to this port (ANY = no restriction).
    pub out_port: u32,
    /// For deletes: require a group action to this group (ANY = no restriction).
    pub out_group: u32,
}

/// OFP_NO_BUFFER.
pub const NO_BUFFER: u32 = 0xffff_ffff;
/// OFPG_ANY: wildcard group.
pub const GROUP_ANY: u32 = 0xffff_ffff;
/// OFPG_ALL: all groups (group delete).
pub const GROUP_ALL: u32 = 0xffff_fffc;
/// OFPTT_ALL: all tables (flow delete, stats).
pub const TABLE_ALL: u8 = 0xff;

impl FlowMod {
    /// OFPFC_ADD of a flow.
    pub fn add(flow: Flow) -> Self {
        Self::with_command(FlowModCommand::Add, flow)
    }
    /// OFPFC_MODIFY_STRICT of a flow (replace its instructions and cookie).
    pub fn modify_strict(flow: Flow) -> Self {
        Self::with_command(FlowModCommand::ModifyStrict, flow)
    }
    /// OFPFC_DELETE_STRICT of exactly this flow (table, priority, match).
    pub fn delete_strict(flow: Flow) -> Self {
        Self::with_command(FlowModCommand::DeleteStrict, flow)
    }
    fn with_command(command: FlowModCommand, flow: Flow) -> Self {
        FlowMod {
            command,
            flow,
            cookie_mask: 0,
            buffer_id: NO_BUFFER,
            out_port: port::ANY,
            out_group: GROUP_ANY,
        }
    }
}

/// OFPGT_* group types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GroupType {
    /// All (multicast/broadcast) group.
    All,
    /// Select group.
    Select,
    /// Indirect group.
    Indirect,
    /// Fast failover group.
    FastFailover,
    /// Unknown type value, kept.
    Unknown(u8),
}

/// One bucket of a group (`ofp_bucket`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bucket {
    /// Relative weight (select groups).
    pub weight: u16,
    /// Port whose liveness controls the bucket (fast failover), or ANY.
    pub watch_port: u32,
    /// Group whose liveness controls the bucket (fast failover), or ANY.
    pub watch_group: u32,
    /// The bucket's actions.
    pub actions: Vec<Action>,
}

impl Bucket {
    /// A bucket with the given actions, weight 0 and no watch.
    pub fn new(actions: Vec<Action>) -> Self {
        Bucket {
            weight: 0,
            watch_port: port::ANY,
            watch_group: GROUP_ANY,
            actions,
        }
    }
}

/// A group: what the pipeline wants installed.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Group {
    /// Group id.
    pub group_id: u32,
    /// Group type.
    pub group_type: GroupType,
    /// Buckets.
    pub buckets: Vec<Bucket>,
}

/// OFPGC_* group-mod commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupModCommand {
    /// New group.
    Add,
    /// Modify all matching groups.
    Modify,
    /// Delete all matching groups.
    Delete,
    /// Unknown command value, kept.
    Unknown(u16),
}

/// The body of an OFPT_GROUP_MOD.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GroupMod {
    /// The command.
    pub command: GroupModCommand,
    /// The group.
    pub group: Group,
}
