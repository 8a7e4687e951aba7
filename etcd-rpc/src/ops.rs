//! Request builders: key ranges, options, and transactions (compare, then one of two op lists).

use crate::pb;

/// The end of the range that holds every key starting with `prefix` (etcd's convention: the
/// prefix with its last byte below 0xff incremented; `[0]` for the empty prefix, meaning all).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// How to read.
#[derive(Clone, Debug, Default)]
pub struct GetOptions {
    prefix: bool,
}

impl GetOptions {
    /// Read one key.
    pub fn new() -> Self {
        Self::default()
    }

    /// Read every key that starts with the given one.
    pub fn with_prefix(mut self) -> Self {
        self.prefix = true;
        self
    }

    pub(crate) fn request(&self, key: Vec<u8>) -> pb::RangeRequest {
        let range_end = if self.prefix {
            prefix_end(&key)
        } else {
            Vec::new()
        };
        pb::RangeRequest {
            key,
            range_end,
            ..Default::default()
        }
    }
}

/// How to write.
#[derive(Clone, Debug, Default)]
pub struct PutOptions {
    lease: i64,
}

impl PutOptions {
    /// A plain put.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bind the key to a lease: it goes when the lease ends.
    pub fn with_lease(mut self, lease: i64) -> Self {
        self.lease = lease;
        self
    }

    pub(crate) fn lease(&self) -> i64 {
        self.lease
    }
}

/// What to watch and from when.
#[derive(Clone, Debug, Default)]
pub struct WatchOptions {
    prefix: bool,
    start_revision: i64,
    progress_notify: bool,
}

impl WatchOptions {
    /// One key, from now.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every key that starts with the given one.
    pub fn with_prefix(mut self) -> Self {
        self.prefix = true;
        self
    }

    /// From this revision on (etcd answers `compact_revision` if it is gone).
    pub fn with_start_revision(mut self, revision: i64) -> Self {
        self.start_revision = revision;
        self
    }

    /// Ask etcd for empty responses carrying the current revision while nothing changes.
    pub fn with_progress_notify(mut self) -> Self {
        self.progress_notify = true;
        self
    }

    pub(crate) fn request(&self, key: Vec<u8>) -> pb::WatchRequest {
        let range_end = if self.prefix {
            prefix_end(&key)
        } else {
            Vec::new()
        };
        pb::WatchRequest {
            request_union: Some(pb::watch_request::RequestUnion::CreateRequest(
                pb::WatchCreateRequest {
                    key,
                    range_end,
                    start_revision: self.start_revision,
                    progress_notify: self.progress_notify,
                },
            )),
        }
    }
}

/// How a comparison compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompareOp {
    /// The key's value equals the operand.
    Equal,
    /// Greater than the operand.
    Greater,
    /// Less than the operand.
    Less,
    /// Anything but the operand.
    NotEqual,
}

impl CompareOp {
    fn result(self) -> pb::compare::CompareResult {
        use pb::compare::CompareResult as R;
        match self {
            CompareOp::Equal => R::Equal,
            CompareOp::Greater => R::Greater,
            CompareOp::Less => R::Less,
            CompareOp::NotEqual => R::NotEqual,
        }
    }
}

/// One condition of a transaction.
#[derive(Clone, Debug)]
pub struct Compare(pb::Compare);

impl Compare {
    fn revision(
        key: impl Into<Vec<u8>>,
        op: CompareOp,
        target: pb::compare::CompareTarget,
        union: pb::compare::TargetUnion,
    ) -> Self {
        Compare(pb::Compare {
            result: op.result() as i32,
            target: target as i32,
            key: key.into(),
            target_union: Some(union),
        })
    }

    /// The revision that created the key (0: the key does not exist).
    pub fn create_revision(key: impl Into<Vec<u8>>, op: CompareOp, revision: i64) -> Self {
        Self::revision(
            key,
            op,
            pb::compare::CompareTarget::Create,
            pb::compare::TargetUnion::CreateRevision(revision),
        )
    }

    /// The revision of the key's last change (0: the key does not exist).
    pub fn mod_revision(key: impl Into<Vec<u8>>, op: CompareOp, revision: i64) -> Self {
        Self::revision(
            key,
            op,
            pb::compare::CompareTarget::Mod,
            pb::compare::TargetUnion::ModRevision(revision),
        )
    }
}

/// One operation of a transaction.
#[derive(Clone, Debug)]
pub struct TxnOp(pb::RequestOp);

impl TxnOp {
    /// Write a key.
    pub fn put(
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        opts: Option<PutOptions>,
    ) -> Self {
        TxnOp(pb::RequestOp {
            request: Some(pb::request_op::Request::RequestPut(pb::PutRequest {
                key: key.into(),
                value: value.into(),
                lease: opts.unwrap_or_default().lease,
            })),
        })
    }

    /// Read a key (or a prefix).
    pub fn get(key: impl Into<Vec<u8>>, opts: Option<GetOptions>) -> Self {
        TxnOp(pb::RequestOp {
            request: Some(pb::request_op::Request::RequestRange(
                opts.unwrap_or_default().request(key.into()),
            )),
        })
    }

    /// Delete a key.
    pub fn delete(key: impl Into<Vec<u8>>) -> Self {
        TxnOp(pb::RequestOp {
            request: Some(pb::request_op::Request::RequestDeleteRange(
                pb::DeleteRangeRequest {
                    key: key.into(),
                    range_end: Vec::new(),
                },
            )),
        })
    }
}

/// A transaction: if every comparison holds, the `and_then` operations, else the `or_else` ones.
#[derive(Clone, Debug, Default)]
pub struct Txn(pub(crate) pb::TxnRequest);

impl Txn {
    /// An empty transaction.
    pub fn new() -> Self {
        Self::default()
    }

    /// The comparisons that must all hold.
    pub fn when(mut self, compares: impl IntoIterator<Item = Compare>) -> Self {
        self.0.compare.extend(compares.into_iter().map(|c| c.0));
        self
    }

    /// What to do when they hold.
    pub fn and_then(mut self, ops: impl IntoIterator<Item = TxnOp>) -> Self {
        self.0.success.extend(ops.into_iter().map(|o| o.0));
        self
    }

    /// What to do otherwise.
    pub fn or_else(mut self, ops: impl IntoIterator<Item = TxnOp>) -> Self {
        self.0.failure.extend(ops.into_iter().map(|o| o.0));
        self
    }
}

/// The answer to one operation of a transaction.
#[derive(Clone, Debug)]
pub enum TxnOpResponse {
    /// A read.
    Get(pb::RangeResponse),
    /// A write.
    Put(pb::PutResponse),
    /// A deletion.
    Delete(pb::DeleteRangeResponse),
}

impl pb::TxnResponse {
    /// The answers of the operations that ran, in order.
    pub fn op_responses(&self) -> Vec<TxnOpResponse> {
        use pb::response_op::Response;
        self.responses
            .iter()
            .filter_map(|r| match r.response.clone()? {
                Response::ResponseRange(g) => Some(TxnOpResponse::Get(g)),
                Response::ResponsePut(p) => Some(TxnOpResponse::Put(p)),
                Response::ResponseDeleteRange(d) => Some(TxnOpResponse::Delete(d)),
            })
            .collect()
    }

    /// The store's revision after the transaction (0 if etcd sent no header).
    pub fn revision(&self) -> i64 {
        self.header.as_ref().map(|h| h.revision).unwrap_or(0)
    }
}

impl pb::RangeResponse {
    /// The store's revision of the read (0 if etcd sent no header).
    pub fn revision(&self) -> i64 {
        self.header.as_ref().map(|h| h.revision).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_after_its_last_byte_below_0xff() {
        assert_eq!(prefix_end(b"/flowmesh/"), b"/flowmesh0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
        assert_eq!(prefix_end(b""), vec![0]);
    }

    #[test]
    fn a_transaction_keeps_its_three_lists() {
        let t = Txn::new()
            .when([Compare::create_revision("k", CompareOp::Equal, 0)])
            .and_then([TxnOp::put("k", "v", Some(PutOptions::new().with_lease(7)))])
            .or_else([TxnOp::get("k", None), TxnOp::delete("j")]);
        assert_eq!(t.0.compare.len(), 1);
        assert_eq!(
            t.0.compare[0].target_union,
            Some(pb::compare::TargetUnion::CreateRevision(0))
        );
        assert_eq!(
            t.0.compare[0].target,
            pb::compare::CompareTarget::Create as i32
        );
        match &t.0.success[0].request {
            Some(pb::request_op::Request::RequestPut(p)) => assert_eq!(p.lease, 7),
            other => panic!("{other:?}"),
        }
        assert_eq!(t.0.failure.len(), 2);
    }
}
