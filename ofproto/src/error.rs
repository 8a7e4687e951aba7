//! Typed codec errors. Each decode error knows the OFPT_ERROR type/code a peer should receive
//! (OpenFlow 1.3.5 §7.4.4).

/// OFPET_* error types used when answering malformed input.
pub mod ofp_error_type {
    /// Hello protocol failed.
    pub const HELLO_FAILED: u16 = 0;
    /// Request was not understood.
    pub const BAD_REQUEST: u16 = 1;
    /// Error in action description.
    pub const BAD_ACTION: u16 = 2;
    /// Error in instruction list.
    pub const BAD_INSTRUCTION: u16 = 3;
    /// Error in match.
    pub const BAD_MATCH: u16 = 4;
    /// Problem modifying flow entry.
    pub const FLOW_MOD_FAILED: u16 = 5;
    /// Problem modifying group entry.
    pub const GROUP_MOD_FAILED: u16 = 6;
}

/// Why bytes could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The input ended before a structure did.
    #[error("{context}: truncated (need {need} bytes, have {have})")]
    Truncated {
        context: &'static str,
        need: usize,
        have: usize,
    },
    /// A length field is impossible (too short, not a multiple of 8, beyond its container).
    #[error("{context}: bad length {len}")]
    BadLength { context: &'static str, len: usize },
    /// The OpenFlow version is not 1.3 (0x04).
    #[error("unsupported OpenFlow version {0:#04x} (only OpenFlow 1.3 is spoken)")]
    BadVersion(u8),
    /// An unknown or unsupported message type.
    #[error("unknown message type {0}")]
    BadType(u8),
    /// An unknown multipart type.
    #[error("unknown multipart type {0}")]
    BadMultipart(u16),
    /// An experimenter message or action from an unknown experimenter.
    #[error("{context}: unknown experimenter {experimenter:#010x}")]
    BadExperimenter {
        context: &'static str,
        experimenter: u32,
    },
    /// A malformed match field.
    #[error("match: {0}")]
    BadMatch(String),
    /// A malformed action.
    #[error("action: {0}")]
    BadAction(String),
    /// A malformed instruction.
    #[error("instruction: {0}")]
    BadInstruction(String),
    /// A value outside its allowed range.
    #[error("{context}: {detail}")]
    BadValue {
        context: &'static str,
        detail: String,
    },
    /// Malformed input rejected with the exact OFPT_ERROR type/code Open vSwitch answers
    /// (e.g. OFPBMC_BAD_WILDCARDS for value bits outside a mask, OFPBAC_BAD_LEN).
    #[error("{context}: {detail}")]
    Rejected {
        context: &'static str,
        err_type: u16,
        code: u16,
        detail: String,
    },
}

impl DecodeError {
    /// The (OFPET_*, code) a peer should receive for this error.
    pub fn ofp_error(&self) -> (u16, u16) {
        use ofp_error_type::*;
        match self {
            // OFPBRC_BAD_LEN = 6
            DecodeError::Truncated { .. } | DecodeError::BadLength { .. } => (BAD_REQUEST, 6),
            // OFPBRC_BAD_VERSION = 0
            DecodeError::BadVersion(_) => (BAD_REQUEST, 0),
            // OFPBRC_BAD_TYPE = 1
            DecodeError::BadType(_) => (BAD_REQUEST, 1),
            // OFPBRC_BAD_MULTIPART = 2
            DecodeError::BadMultipart(_) => (BAD_REQUEST, 2),
            // OFPBRC_BAD_EXPERIMENTER = 3
            DecodeError::BadExperimenter { .. } => (BAD_REQUEST, 3),
            // OFPBMC_BAD_FIELD = 6
            DecodeError::BadMatch(_) => (BAD_MATCH, 6),
            // OFPBAC_BAD_TYPE = 0
            DecodeError::BadAction(_) => (BAD_ACTION, 0),
            // OFPBIC_UNKNOWN_INST = 0
            DecodeError::BadInstruction(_) => (BAD_INSTRUCTION, 0),
            // OFPBRC_EPERM would not fit; a bad value in a request is BAD_REQUEST/BAD_LEN-like.
            DecodeError::BadValue { .. } => (BAD_REQUEST, 6),
            DecodeError::Rejected { err_type, code, .. } => (*err_type, *code),
        }
    }
}
