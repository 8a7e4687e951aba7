//! OFPT_ERROR (OpenFlow 1.3.5 §7.4.4): every OpenFlow 1.3 error type and code, experimenter
//! errors (ONF bundle errors as Open vSwitch sends them, Nicira errors), and the data field.
//!
//! ```text
//! struct ofp_error_msg { struct ofp_header header; uint16_t type; uint16_t code; uint8_t data[0]; };
//! struct ofp_error_experimenter_msg { struct ofp_header header;
//!     uint16_t type; /* OFPET_EXPERIMENTER */ uint16_t exp_type; uint32_t experimenter;
//!     uint8_t data[0]; };
//! ```
//! Text names are Open vSwitch's (`OFPBRC_BAD_STAT` for OFPBRC_BAD_MULTIPART, and so on), so
//! that errors print as `ovs-ofctl ofp-print` prints them.

use super::{NX_EXPERIMENTER_ID, ONF_EXPERIMENTER_ID};
use crate::error::DecodeError;
use crate::wire::{Reader, Writer};

macro_rules! error_codes {
    ($(#[$m:meta])* $name:ident { $($var:ident = $val:literal => $text:literal,)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $(#[doc = $text] $var,)*
            /// A code this type does not define, kept.
            Unknown(u16),
        }
        impl $name {
            /// From the wire value.
            pub fn from_u16(v: u16) -> Self {
                match v { $($val => Self::$var,)* other => Self::Unknown(other) }
            }
            /// The wire value.
            pub fn to_u16(self) -> u16 {
                match self { $(Self::$var => $val,)* Self::Unknown(v) => v }
            }
            /// Open vSwitch's name for the code (None for an unknown code).
            pub fn name(self) -> Option<&'static str> {
                match self { $(Self::$var => Some($text),)* Self::Unknown(_) => None }
            }
        }
    };
}

error_codes!(
    /// OFPET_HELLO_FAILED codes.
    HelloFailedCode {
        Incompatible = 0 => "OFPHFC_INCOMPATIBLE",
        Eperm = 1 => "OFPHFC_EPERM",
    }
);
error_codes!(
    /// OFPET_BAD_REQUEST codes.
    BadRequestCode {
        BadVersion = 0 => "OFPBRC_BAD_VERSION",
        BadType = 1 => "OFPBRC_BAD_TYPE",
        BadMultipart = 2 => "OFPBRC_BAD_STAT",
        BadExperimenter = 3 => "OFPBRC_BAD_VENDOR",
        BadExpType = 4 => "OFPBRC_BAD_SUBTYPE",
        Eperm = 5 => "OFPBRC_EPERM",
        BadLen = 6 => "OFPBRC_BAD_LEN",
        BufferEmpty = 7 => "OFPBRC_BUFFER_EMPTY",
        BufferUnknown = 8 => "OFPBRC_BUFFER_UNKNOWN",
        BadTableId = 9 => "OFPBRC_BAD_TABLE_ID",
        IsSlave = 10 => "OFPBRC_IS_SECONDARY",
        BadPort = 11 => "OFPBRC_BAD_PORT",
        BadPacket = 12 => "OFPBRC_BAD_PACKET",
        MultipartBufferOverflow = 13 => "OFPBRC_MULTIPART_BUFFER_OVERFLOW",
    }
);
error_codes!(
    /// OFPET_BAD_ACTION codes.
    BadActionCode {
        BadType = 0 => "OFPBAC_BAD_TYPE",
        BadLen = 1 => "OFPBAC_BAD_LEN",
        BadExperimenter = 2 => "OFPBAC_BAD_VENDOR",
        BadExpType = 3 => "OFPBAC_BAD_VENDOR_TYPE",
        BadOutPort = 4 => "OFPBAC_BAD_OUT_PORT",
        BadArgument = 5 => "OFPBAC_BAD_ARGUMENT",
        Eperm = 6 => "OFPBAC_EPERM",
        TooMany = 7 => "OFPBAC_TOO_MANY",
        BadQueue = 8 => "OFPBAC_BAD_QUEUE",
        BadOutGroup = 9 => "OFPBAC_BAD_OUT_GROUP",
        MatchInconsistent = 10 => "OFPBAC_MATCH_INCONSISTENT",
        UnsupportedOrder = 11 => "OFPBAC_UNSUPPORTED_ORDER",
        BadTag = 12 => "OFPBAC_BAD_TAG",
        BadSetType = 13 => "OFPBAC_BAD_SET_TYPE",
        BadSetLen = 14 => "OFPBAC_BAD_SET_LEN",
        BadSetArgument = 15 => "OFPBAC_BAD_SET_ARGUMENT",
    }
);
error_codes!(
    /// OFPET_BAD_INSTRUCTION codes.
    BadInstructionCode {
        UnknownInst = 0 => "OFPBIC_UNKNOWN_INST",
        UnsupInst = 1 => "OFPBIC_UNSUP_INST",
        BadTableId = 2 => "OFPBIC_BAD_TABLE_ID",
        UnsupMetadata = 3 => "OFPBIC_UNSUP_METADATA",
        UnsupMetadataMask = 4 => "OFPBIC_UNSUP_METADATA_MASK",
        BadExperimenter = 5 => "OFPBIC_BAD_EXPERIMENTER",
        BadExpType = 6 => "OFPBIC_BAD_EXP_TYPE",
        BadLen = 7 => "OFPBIC_BAD_LEN",
        Eperm = 8 => "OFPBIC_EPERM",
    }
);
error_codes!(
    /// OFPET_BAD_MATCH codes.
    BadMatchCode {
        BadType = 0 => "OFPBMC_BAD_TYPE",
        BadLen = 1 => "OFPBMC_BAD_LEN",
        BadTag = 2 => "OFPBMC_BAD_TAG",
        BadDlAddrMask = 3 => "OFPBMC_BAD_DL_ADDR_MASK",
        BadNwAddrMask = 4 => "OFPBMC_BAD_NW_ADDR_MASK",
        BadWildcards = 5 => "OFPBMC_BAD_WILDCARDS",
        BadField = 6 => "OFPBMC_BAD_FIELD",
        BadValue = 7 => "OFPBMC_BAD_VALUE",
        BadMask = 8 => "OFPBMC_BAD_MASK",
        BadPrereq = 9 => "OFPBMC_BAD_PREREQ",
        DupField = 10 => "OFPBMC_DUP_FIELD",
        Eperm = 11 => "OFPBMC_EPERM",
    }
);
error_codes!(
    /// OFPET_FLOW_MOD_FAILED codes.
    FlowModFailedCode {
        Unknown0 = 0 => "OFPFMFC_UNKNOWN",
        TableFull = 1 => "OFPFMFC_TABLE_FULL",
        BadTableId = 2 => "OFPFMFC_BAD_TABLE_ID",
        Overlap = 3 => "OFPFMFC_OVERLAP",
        Eperm = 4 => "OFPFMFC_EPERM",
        BadTimeout = 5 => "OFPFMFC_BAD_TIMEOUT",
        BadCommand = 6 => "OFPFMFC_BAD_COMMAND",
        BadFlags = 7 => "OFPFMFC_BAD_FLAGS",
    }
);
error_codes!(
    /// OFPET_GROUP_MOD_FAILED codes.
    GroupModFailedCode {
        GroupExists = 0 => "OFPGMFC_GROUP_EXISTS",
        InvalidGroup = 1 => "OFPGMFC_INVALID_GROUP",
        WeightUnsupported = 2 => "OFPGMFC_WEIGHT_UNSUPPORTED",
        OutOfGroups = 3 => "OFPGMFC_OUT_OF_GROUPS",
        OutOfBuckets = 4 => "OFPGMFC_OUT_OF_BUCKETS",
        ChainingUnsupported = 5 => "OFPGMFC_CHAINING_UNSUPPORTED",
        WatchUnsupported = 6 => "OFPGMFC_WATCH_UNSUPPORTED",
        Loop = 7 => "OFPGMFC_LOOP",
        UnknownGroup = 8 => "OFPGMFC_UNKNOWN_GROUP",
        ChainedGroup = 9 => "OFPGMFC_CHAINED_GROUP",
        BadType = 10 => "OFPGMFC_BAD_TYPE",
        BadCommand = 11 => "OFPGMFC_BAD_COMMAND",
        BadBucket = 12 => "OFPGMFC_BAD_BUCKET",
        BadWatch = 13 => "OFPGMFC_BAD_WATCH",
        Eperm = 14 => "OFPGMFC_EPERM",
    }
);
error_codes!(
    /// OFPET_PORT_MOD_FAILED codes.
    PortModFailedCode {
        BadPort = 0 => "OFPPMFC_BAD_PORT",
        BadHwAddr = 1 => "OFPPMFC_BAD_HW_ADDR",
        BadConfig = 2 => "OFPPMFC_BAD_CONFIG",
        BadAdvertise = 3 => "OFPPMFC_BAD_ADVERTISE",
        Eperm = 4 => "OFPPMFC_EPERM",
    }
);
error_codes!(
    /// OFPET_TABLE_MOD_FAILED codes.
    TableModFailedCode {
        BadTable = 0 => "OFPTMFC_BAD_TABLE",
        BadConfig = 1 => "OFPTMFC_BAD_CONFIG",
        Eperm = 2 => "OFPTMFC_EPERM",
    }
);
error_codes!(
    /// OFPET_QUEUE_OP_FAILED codes.
    QueueOpFailedCode {
        BadPort = 0 => "OFPQOFC_BAD_PORT",
        BadQueue = 1 => "OFPQOFC_BAD_QUEUE",
        Eperm = 2 => "OFPQOFC_EPERM",
    }
);
error_codes!(
    /// OFPET_SWITCH_CONFIG_FAILED codes.
    SwitchConfigFailedCode {
        BadFlags = 0 => "OFPSCFC_BAD_FLAGS",
        BadLen = 1 => "OFPSCFC_BAD_LEN",
        Eperm = 2 => "OFPSCFC_EPERM",
    }
);
error_codes!(
    /// OFPET_ROLE_REQUEST_FAILED codes.
    RoleRequestFailedCode {
        Stale = 0 => "OFPRRFC_STALE",
        Unsup = 1 => "OFPRRFC_UNSUP",
        BadRole = 2 => "OFPRRFC_BAD_ROLE",
    }
);
error_codes!(
    /// OFPET_METER_MOD_FAILED codes.
    MeterModFailedCode {
        Unknown0 = 0 => "OFPMMFC_UNKNOWN",
        MeterExists = 1 => "OFPMMFC_METER_EXISTS",
        InvalidMeter = 2 => "OFPMMFC_INVALID_METER",
        UnknownMeter = 3 => "OFPMMFC_UNKNOWN_METER",
        BadCommand = 4 => "OFPMMFC_BAD_COMMAND",
        BadFlags = 5 => "OFPMMFC_BAD_FLAGS",
        BadRate = 6 => "OFPMMFC_BAD_RATE",
        BadBurst = 7 => "OFPMMFC_BAD_BURST",
        BadBand = 8 => "OFPMMFC_BAD_BAND",
        BadBandValue = 9 => "OFPMMFC_BAD_BAND_VALUE",
        OutOfMeters = 10 => "OFPMMFC_OUT_OF_METERS",
        OutOfBands = 11 => "OFPMMFC_OUT_OF_BANDS",
    }
);
error_codes!(
    /// OFPET_TABLE_FEATURES_FAILED codes (Open vSwitch names codes 2–4 after its property
    /// errors).
    TableFeaturesFailedCode {
        BadTable = 0 => "OFPTFFC_BAD_TABLE",
        BadMetadata = 1 => "OFPTFFC_BAD_METADATA",
        BadType = 2 => "OFPBPC_BAD_TYPE",
        BadLen = 3 => "OFPBPC_BAD_LEN",
        BadArgument = 4 => "OFPBPC_BAD_VALUE",
        Eperm = 5 => "OFPTFFC_EPERM",
    }
);
error_codes!(
    /// ONF bundle errors (OFPET14_BUNDLE_FAILED codes), which Open vSwitch sends in OpenFlow 1.3
    /// as experimenter errors with experimenter ONF and exp_type 2300 + code.
    BundleFailedCode {
        Unknown0 = 0 => "OFPBFC_UNKNOWN",
        Eperm = 1 => "OFPBFC_EPERM",
        BadId = 2 => "OFPBFC_BAD_ID",
        BundleExist = 3 => "OFPBFC_BUNDLE_EXIST",
        BundleClosed = 4 => "OFPBFC_BUNDLE_CLOSED",
        OutOfBundles = 5 => "OFPBFC_OUT_OF_BUNDLES",
        BadType = 6 => "OFPBFC_BAD_TYPE",
        BadFlags = 7 => "OFPBFC_BAD_FLAGS",
        MsgBadLen = 8 => "OFPBFC_MSG_BAD_LEN",
        MsgBadXid = 9 => "OFPBFC_MSG_BAD_XID",
        MsgUnsup = 10 => "OFPBFC_MSG_UNSUP",
        MsgConflict = 11 => "OFPBFC_MSG_CONFLICT",
        MsgTooMany = 12 => "OFPBFC_MSG_TOO_MANY",
        MsgFailed = 13 => "OFPBFC_MSG_FAILED",
        Timeout = 14 => "OFPBFC_TIMEOUT",
        BundleInProgress = 15 => "OFPBFC_BUNDLE_IN_PROGRESS",
    }
);

/// The exp_type of the first ONF bundle error (OFPBFC_UNKNOWN) in OpenFlow 1.3.
pub const ONF_BUNDLE_ERROR_BASE: u16 = 2300;

/// Other experimenter errors Open vSwitch 3.1 sends in OpenFlow 1.3: (experimenter, exp_type,
/// name). Taken from `ovs-ofctl print-error NAME` for every error name OVS knows.
static EXPERIMENTER_ERRORS: &[(u32, u16, &str)] = &[
    (NX_EXPERIMENTER_ID, 2, "NXBRC_NXM_INVALID"),
    (NX_EXPERIMENTER_ID, 3, "NXBRC_NXM_BAD_TYPE"),
    (NX_EXPERIMENTER_ID, 4, "NXBRC_MUST_BE_ZERO"),
    (NX_EXPERIMENTER_ID, 5, "NXBRC_BAD_REASON"),
    (NX_EXPERIMENTER_ID, 6, "OFPMOFC_MONITOR_EXISTS"),
    (NX_EXPERIMENTER_ID, 7, "OFPMOFC_BAD_FLAGS"),
    (NX_EXPERIMENTER_ID, 8, "OFPMOFC_UNKNOWN_MONITOR"),
    (NX_EXPERIMENTER_ID, 9, "NXBRC_FM_BAD_EVENT"),
    (NX_EXPERIMENTER_ID, 10, "NXBRC_UNENCODABLE_ERROR"),
    (NX_EXPERIMENTER_ID, 11, "NXBAC_MUST_BE_ZERO"),
    (NX_EXPERIMENTER_ID, 12, "NXFMFC_HARDWARE"),
    (NX_EXPERIMENTER_ID, 13, "NXFMFC_BAD_TABLE_ID"),
    (NX_EXPERIMENTER_ID, 15, "NXBAC_BAD_CONJUNCTION"),
    (NX_EXPERIMENTER_ID, 16, "NXTTMFC_BAD_COMMAND"),
    (NX_EXPERIMENTER_ID, 17, "NXTTMFC_BAD_OPT_LEN"),
    (NX_EXPERIMENTER_ID, 18, "NXTTMFC_BAD_FIELD_IDX"),
    (NX_EXPERIMENTER_ID, 19, "NXTTMFC_TABLE_FULL"),
    (NX_EXPERIMENTER_ID, 20, "NXTTMFC_ALREADY_MAPPED"),
    (NX_EXPERIMENTER_ID, 21, "NXTTMFC_DUP_ENTRY"),
    (NX_EXPERIMENTER_ID, 34, "NXR_NOT_SUPPORTED"),
    (NX_EXPERIMENTER_ID, 35, "NXR_STALE"),
    (NX_EXPERIMENTER_ID, 36, "NXST_NOT_CONFIGURED"),
    (NX_EXPERIMENTER_ID, 37, "NXFMFC_INVALID_TLV_FIELD"),
    (NX_EXPERIMENTER_ID, 38, "NXTTMFC_INVALID_TLV_DEL"),
    (NX_EXPERIMENTER_ID, 39, "NXBAC_BAD_HEADER_TYPE"),
    (NX_EXPERIMENTER_ID, 40, "NXBAC_UNKNOWN_ED_PROP"),
    (NX_EXPERIMENTER_ID, 41, "NXBAC_BAD_ED_PROP"),
    (NX_EXPERIMENTER_ID, 42, "NXBAC_CT_DATAPATH_SUPPORT"),
    (NX_EXPERIMENTER_ID, 43, "NXBMC_CT_DATAPATH_SUPPORT"),
    (NX_EXPERIMENTER_ID, 44, "NXTFFC_DUP_TABLE"),
    (ONF_EXPERIMENTER_ID, 2360, "OFPFMFC_BAD_PRIORITY"),
    (ONF_EXPERIMENTER_ID, 2370, "OFPACFC_INVALID"),
    (ONF_EXPERIMENTER_ID, 2371, "OFPACFC_UNSUPPORTED"),
    (ONF_EXPERIMENTER_ID, 2372, "OFPACFC_EPERM"),
    (ONF_EXPERIMENTER_ID, 2600, "OFPBIC_DUP_INST"),
    (
        ONF_EXPERIMENTER_ID,
        2640,
        "OFPBRC_MULTIPART_REQUEST_TIMEOUT",
    ),
    (ONF_EXPERIMENTER_ID, 2641, "OFPBRC_MULTIPART_REPLY_TIMEOUT"),
    (ONF_EXPERIMENTER_ID, 4250, "OFPBAC_BAD_SET_MASK"),
    (ONF_EXPERIMENTER_ID, 4443, "OFPBPC_TOO_MANY"),
    (ONF_EXPERIMENTER_ID, 4444, "OFPBPC_DUP_TYPE"),
    (ONF_EXPERIMENTER_ID, 4445, "OFPBPC_BAD_EXPERIMENTER"),
    (ONF_EXPERIMENTER_ID, 4446, "OFPBPC_BAD_EXP_TYPE"),
    (ONF_EXPERIMENTER_ID, 4447, "OFPBPC_BAD_EXP_VALUE"),
    (ONF_EXPERIMENTER_ID, 4448, "OFPBPC_EPERM"),
];

/// OFPET_EXPERIMENTER.
pub const ERROR_TYPE_EXPERIMENTER: u16 = 0xffff;

/// What went wrong: an error type with its code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// OFPET_HELLO_FAILED (0).
    HelloFailed(HelloFailedCode),
    /// OFPET_BAD_REQUEST (1).
    BadRequest(BadRequestCode),
    /// OFPET_BAD_ACTION (2).
    BadAction(BadActionCode),
    /// OFPET_BAD_INSTRUCTION (3).
    BadInstruction(BadInstructionCode),
    /// OFPET_BAD_MATCH (4).
    BadMatch(BadMatchCode),
    /// OFPET_FLOW_MOD_FAILED (5).
    FlowModFailed(FlowModFailedCode),
    /// OFPET_GROUP_MOD_FAILED (6).
    GroupModFailed(GroupModFailedCode),
    /// OFPET_PORT_MOD_FAILED (7).
    PortModFailed(PortModFailedCode),
    /// OFPET_TABLE_MOD_FAILED (8).
    TableModFailed(TableModFailedCode),
    /// OFPET_QUEUE_OP_FAILED (9).
    QueueOpFailed(QueueOpFailedCode),
    /// OFPET_SWITCH_CONFIG_FAILED (10).
    SwitchConfigFailed(SwitchConfigFailedCode),
    /// OFPET_ROLE_REQUEST_FAILED (11).
    RoleRequestFailed(RoleRequestFailedCode),
    /// OFPET_METER_MOD_FAILED (12).
    MeterModFailed(MeterModFailedCode),
    /// OFPET_TABLE_FEATURES_FAILED (13).
    TableFeaturesFailed(TableFeaturesFailedCode),
    /// ONF bundle error (experimenter ONF, exp_type 2300..=2315).
    BundleFailed(BundleFailedCode),
    /// Any other experimenter error (Nicira, other ONF codes, unknown experimenters).
    Experimenter {
        /// Experimenter id.
        experimenter: u32,
        /// Experimenter-defined type.
        exp_type: u16,
    },
    /// An error type OpenFlow 1.3 does not define.
    Unknown {
        /// Error type.
        error_type: u16,
        /// Error code.
        code: u16,
    },
}

impl ErrorKind {
    /// From the wire type and code (for experimenter errors, the code is the exp_type and the
    /// experimenter id is given).
    pub fn from_wire(error_type: u16, code: u16, experimenter: u32) -> ErrorKind {
        match error_type {
            0 => ErrorKind::HelloFailed(HelloFailedCode::from_u16(code)),
            1 => ErrorKind::BadRequest(BadRequestCode::from_u16(code)),
            2 => ErrorKind::BadAction(BadActionCode::from_u16(code)),
            3 => ErrorKind::BadInstruction(BadInstructionCode::from_u16(code)),
            4 => ErrorKind::BadMatch(BadMatchCode::from_u16(code)),
            5 => ErrorKind::FlowModFailed(FlowModFailedCode::from_u16(code)),
            6 => ErrorKind::GroupModFailed(GroupModFailedCode::from_u16(code)),
            7 => ErrorKind::PortModFailed(PortModFailedCode::from_u16(code)),
            8 => ErrorKind::TableModFailed(TableModFailedCode::from_u16(code)),
            9 => ErrorKind::QueueOpFailed(QueueOpFailedCode::from_u16(code)),
            10 => ErrorKind::SwitchConfigFailed(SwitchConfigFailedCode::from_u16(code)),
            11 => ErrorKind::RoleRequestFailed(RoleRequestFailedCode::from_u16(code)),
            12 => ErrorKind::MeterModFailed(MeterModFailedCode::from_u16(code)),
            13 => ErrorKind::TableFeaturesFailed(TableFeaturesFailedCode::from_u16(code)),
            ERROR_TYPE_EXPERIMENTER
                if experimenter == ONF_EXPERIMENTER_ID
                    && (ONF_BUNDLE_ERROR_BASE..=ONF_BUNDLE_ERROR_BASE + 15).contains(&code) =>
            {
                ErrorKind::BundleFailed(BundleFailedCode::from_u16(code - ONF_BUNDLE_ERROR_BASE))
            }
            ERROR_TYPE_EXPERIMENTER => ErrorKind::Experimenter {
                experimenter,
                exp_type: code,
            },
            _ => ErrorKind::Unknown { error_type, code },
        }
    }

    /// The wire (type, code, experimenter id if any).
    pub fn to_wire(self) -> (u16, u16, Option<u32>) {
        match self {
            ErrorKind::HelloFailed(c) => (0, c.to_u16(), None),
            ErrorKind::BadRequest(c) => (1, c.to_u16(), None),
            ErrorKind::BadAction(c) => (2, c.to_u16(), None),
            ErrorKind::BadInstruction(c) => (3, c.to_u16(), None),
            ErrorKind::BadMatch(c) => (4, c.to_u16(), None),
            ErrorKind::FlowModFailed(c) => (5, c.to_u16(), None),
            ErrorKind::GroupModFailed(c) => (6, c.to_u16(), None),
            ErrorKind::PortModFailed(c) => (7, c.to_u16(), None),
            ErrorKind::TableModFailed(c) => (8, c.to_u16(), None),
            ErrorKind::QueueOpFailed(c) => (9, c.to_u16(), None),
            ErrorKind::SwitchConfigFailed(c) => (10, c.to_u16(), None),
            ErrorKind::RoleRequestFailed(c) => (11, c.to_u16(), None),
            ErrorKind::MeterModFailed(c) => (12, c.to_u16(), None),
            ErrorKind::TableFeaturesFailed(c) => (13, c.to_u16(), None),
            ErrorKind::BundleFailed(c) => (
                ERROR_TYPE_EXPERIMENTER,
                ONF_BUNDLE_ERROR_BASE.wrapping_add(c.to_u16()),
                Some(ONF_EXPERIMENTER_ID),
            ),
            ErrorKind::Experimenter {
                experimenter,
                exp_type,
            } => (ERROR_TYPE_EXPERIMENTER, exp_type, Some(experimenter)),
            ErrorKind::Unknown { error_type, code } => (error_type, code, None),
        }
    }

    /// Open vSwitch's name for this error (`OFPFMFC_BAD_TABLE_ID`), if it has one.
    pub fn name(self) -> Option<&'static str> {
        match self {
            ErrorKind::HelloFailed(c) => c.name(),
            ErrorKind::BadRequest(c) => c.name(),
            ErrorKind::BadAction(c) => c.name(),
            ErrorKind::BadInstruction(c) => c.name(),
            ErrorKind::BadMatch(c) => c.name(),
            ErrorKind::FlowModFailed(c) => c.name(),
            ErrorKind::GroupModFailed(c) => c.name(),
            ErrorKind::PortModFailed(c) => c.name(),
            ErrorKind::TableModFailed(c) => c.name(),
            ErrorKind::QueueOpFailed(c) => c.name(),
            ErrorKind::SwitchConfigFailed(c) => c.name(),
            ErrorKind::RoleRequestFailed(c) => c.name(),
            ErrorKind::MeterModFailed(c) => c.name(),
            ErrorKind::TableFeaturesFailed(c) => c.name(),
            ErrorKind::BundleFailed(c) => c.name(),
            ErrorKind::Experimenter {
                experimenter,
                exp_type,
            } => EXPERIMENTER_ERRORS
                .iter()
                .find(|(e, t, _)| *e == experimenter && *t == exp_type)
                .map(|(_, _, n)| *n),
            ErrorKind::Unknown { .. } => None,
        }
    }

    /// The error a peer should receive for bytes that could not be decoded.
    pub fn for_decode_error(e: &DecodeError) -> ErrorKind {
        let (t, c) = e.ofp_error();
        ErrorKind::from_wire(t, c, 0)
    }
}

/// An OFPT_ERROR message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorMsg {
    /// Type and code.
    pub kind: ErrorKind,
    /// The data: for most errors, (the start of) the offending request; for HELLO_FAILED an
    /// ASCII explanation.
    pub data: Vec<u8>,
}

impl ErrorMsg {
    /// An error answering the request `offending` (whose first 64 bytes are kept as data, as
    /// the spec asks).
    pub fn for_request(kind: ErrorKind, offending: &[u8]) -> Self {
        ErrorMsg {
            kind,
            data: offending
                .get(..offending.len().min(64))
                .unwrap_or_default()
                .to_vec(),
        }
    }

    /// The offending request's header, when the data holds one.
    pub fn request_header(&self) -> Option<super::MessageHeader> {
        super::MessageHeader::parse(&self.data).ok()
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<ErrorMsg, DecodeError> {
        let error_type = r.u16("ofp_error_msg.type")?;
        let code = r.u16("ofp_error_msg.code")?;
        let experimenter = if error_type == ERROR_TYPE_EXPERIMENTER {
            r.u32("ofp_error_experimenter_msg.experimenter")?
        } else {
            0
        };
        Ok(ErrorMsg {
            kind: ErrorKind::from_wire(error_type, code, experimenter),
            data: r.rest().to_vec(),
        })
    }

    pub(crate) fn encode(&self, w: &mut Vec<u8>) {
        let (t, c, exp) = self.kind.to_wire();
        w.put_u16(t);
        w.put_u16(c);
        if let Some(e) = exp {
            w.put_u32(e);
        }
        w.put_slice(&self.data);
    }
}

#[cfg(test)]
mod tests {
    use super::super::{decode_message, Message};
    use super::*;

    #[test]
    fn every_standard_code_round_trips_through_the_wire() {
        for t in 0u16..=13 {
            for c in 0u16..=16 {
                let k = ErrorKind::from_wire(t, c, 0);
                assert_eq!(k.to_wire(), (t, c, None));
            }
        }
    }

    #[test]
    fn ovs_bundle_error_decodes_as_bundle_failed() {
        // Captured from OVS 3.1: OFPBFC_BAD_ID answering a COMMIT of an unknown bundle.
        let hex = "0401002800000083ffff08fe4f4e460004040018000000834f4e4600000008fc00000063000403";
        let raw: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(0))
            .collect();
        let (m, _) = decode_message(&raw).expect("error");
        let Message::Error(e) = &m else { panic!() };
        assert_eq!(e.kind, ErrorKind::BundleFailed(BundleFailedCode::BadId));
        assert_eq!(e.kind.name(), Some("OFPBFC_BAD_ID"));
        assert_eq!(e.request_header().map(|h| h.xid), Some(0x83));
        assert_eq!(m.encode(0x83), raw);
    }

    #[test]
    fn nicira_and_unknown_errors_are_kept() {
        let k = ErrorKind::from_wire(0xffff, 35, NX_EXPERIMENTER_ID);
        assert_eq!(k.name(), Some("NXR_STALE"));
        let k = ErrorKind::from_wire(0xffff, 9, 0x1234_5678);
        assert_eq!(k.name(), None);
        assert_eq!(k.to_wire(), (0xffff, 9, Some(0x1234_5678)));
        let k = ErrorKind::from_wire(77, 3, 0);
        assert_eq!(
            k,
            ErrorKind::Unknown {
                error_type: 77,
                code: 3
            }
        );
    }
}
