//! The embedded backend: a redb database file in `--data-dir`. Each `apply` is one durable
//! write transaction, so what the API acknowledged survives `kill -9`.

use super::{Change, Guarded, Listing, Record, Revision, StateBackend, StoreError};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use std::path::{Path, PathBuf};

const OBJECTS: TableDefinition<&str, &[u8]> = TableDefinition::new("objects");
/// Each record's mod revision (absent: written before revisions were kept, revision 0).
const REVISIONS: TableDefinition<&str, i64> = TableDefinition::new("revisions");
/// The store revision: one more per committed guarded transaction.
const META: TableDefinition<&str, i64> = TableDefinition::new("meta");
const REVISION_KEY: &str = "revision";

fn txn_err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Transaction(e.to_string())
}

/// The embedded transactional store.
pub struct EmbeddedStore {
    db: Database,
    path: PathBuf,
}

impl EmbeddedStore {
    /// Open (or create) the store in `data_dir` (created if missing).
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        let dir = data_dir.display().to_string();
        std::fs::create_dir_all(data_dir).map_err(|source| StoreError::DataDir {
            path: dir.clone(),
            source,
        })?;
        // Probe writability with a real file: a read-only directory must fail here, clearly.
        let probe = data_dir.join(".flowmesh-write-test");
        std::fs::write(&probe, b"ok").map_err(|source| StoreError::DataDir {
            path: dir.clone(),
            source,
        })?;
        let _ = std::fs::remove_file(&probe);
        let path = data_dir.join("flowmesh.redb");
        let db = Database::create(&path).map_err(|e| StoreError::Open {
            path: path.display().to_string(),
            detail: format!("{e} (is another flowmesh-controller using this --data-dir?)"),
        })?;
        let txn = db
            .begin_write()
            .map_err(|e| StoreError::Transaction(e.to_string()))?;
        txn.open_table(OBJECTS)
            .map_err(|e| StoreError::Transaction(e.to_string()))?;
        txn.commit()
            .map_err(|e| StoreError::Transaction(e.to_string()))?;
        Ok(EmbeddedStore { db, path })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl StateBackend for EmbeddedStore {
    fn name(&self) -> &'static str {
        "embedded"
    }

    fn load(&self) -> Result<Vec<Record>, StoreError> {
        let txn = self
            .db
            .begin_read()
            .map_err(|e| StoreError::Transaction(e.to_string()))?;
        let table = txn
            .open_table(OBJECTS)
            .map_err(|e| StoreError::Transaction(e.to_string()))?;
        let mut out = Vec::new();
        for item in table
            .iter()
            .map_err(|e| StoreError::Transaction(e.to_string()))?
        {
            let (k, v) = item.map_err(|e| StoreError::Transaction(e.to_string()))?;
            let rec: Record =
                serde_json::from_slice(v.value()).map_err(|e| StoreError::Corrupt {
                    key: k.value().to_string(),
                    detail: e.to_string(),
                })?;
            out.push(rec);
        }
        Ok(out)
    }

    fn list(&self) -> Result<Listing, StoreError> {
        let records = self.load()?;
        let txn = self.db.begin_read().map_err(txn_err)?;
        let (revision, revs) = match (txn.open_table(META), txn.open_table(REVISIONS)) {
            (Ok(meta), Ok(revs)) => (
                meta.get(REVISION_KEY)
                    .map_err(txn_err)?
                    .map(|v| v.value())
                    .unwrap_or(0),
                Some(revs),
            ),
            // A database written before revisions were kept.
            _ => (0, None),
        };
        let mut out = Vec::with_capacity(records.len());
        for r in records {
            let rev = match &revs {
                Some(t) => t
                    .get(r.key().as_string().as_str())
                    .map_err(txn_err)?
                    .map(|v| v.value())
                    .unwrap_or(0),
                None => 0,
            };
            out.push((r, rev));
        }
        Ok(Listing {
            revision,
            records: out,
        })
    }

    fn apply_guarded(&self, changes: &[Guarded]) -> Result<Revision, StoreError> {
        let txn = self.db.begin_write().map_err(txn_err)?;
        let revision;
        {
            let mut table = txn.open_table(OBJECTS).map_err(txn_err)?;
            let mut revs = txn.open_table(REVISIONS).map_err(txn_err)?;
            let mut meta = txn.open_table(META).map_err(txn_err)?;
            revision = meta
                .get(REVISION_KEY)
                .map_err(txn_err)?
                .map(|v| v.value())
                .unwrap_or(0)
                + 1;
            for (key, g) in super::coalesce(changes) {
                let k = key.as_string();
                let found = revs.get(k.as_str()).map_err(txn_err)?.map(|v| v.value());
                let exists = table.get(k.as_str()).map_err(txn_err)?.is_some();
                let found = match (exists, found) {
                    (false, _) => 0,
                    (true, r) => r.unwrap_or(0),
                };
                if found != g.expected {
                    // Dropping the transaction without commit aborts it.
                    return Err(StoreError::Conflict {
                        key: k,
                        expected: g.expected,
                        found,
                    });
                }
                match &g.change {
                    Change::Put(rec) => {
                        let bytes = serde_json::to_vec(rec).map_err(txn_err)?;
                        table
                            .insert(k.as_str(), bytes.as_slice())
                            .map_err(txn_err)?;
                        revs.insert(k.as_str(), revision).map_err(txn_err)?;
                    }
                    Change::Delete(_) => {
                        table.remove(k.as_str()).map_err(txn_err)?;
                        revs.remove(k.as_str()).map_err(txn_err)?;
                    }
                }
            }
            meta.insert(REVISION_KEY, revision).map_err(txn_err)?;
        }
        txn.commit().map_err(txn_err)?;
        Ok(revision)
    }

    fn apply(&self, changes: &[Change]) -> Result<(), StoreError> {
        let txn = self
            .db
            .begin_write()
            .map_err(|e| StoreError::Transaction(e.to_string()))?;
        {
            let mut table = txn
                .open_table(OBJECTS)
                .map_err(|e| StoreError::Transaction(e.to_string()))?;
            for c in changes {
                match c {
                    Change::Put(rec) => {
                        let bytes = serde_json::to_vec(rec)
                            .map_err(|e| StoreError::Transaction(e.to_string()))?;
                        table
                            .insert(rec.key().as_string().as_str(), bytes.as_slice())
                            .map_err(|e| StoreError::Transaction(e.to_string()))?;
                    }
                    Change::Delete(key) => {
                        table
                            .remove(key.as_string().as_str())
                            .map_err(|e| StoreError::Transaction(e.to_string()))?;
                    }
                }
            }
        }
        txn.commit()
            .map_err(|e| StoreError::Transaction(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::RecordKey;
    use topology::model::NamespaceInfo;

    fn ns(name: &str, netid: u32) -> Record {
        Record::Namespace(NamespaceInfo {
            name: name.into(),
            netid,
            labels: Default::default(),
            multicast: false,
            acl_logging: None,
        })
    }

    #[test]
    fn records_survive_reopen_and_deletes_apply() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let s = EmbeddedStore::open(dir.path()).expect("open");
            s.apply(&[
                Change::Put(ns("a", 10)),
                Change::Put(ns("b", 11)),
                Change::Put(ns("c", 12)),
            ])
            .expect("apply");
            s.apply(&[Change::Delete(RecordKey::Namespace("a".into()))])
                .expect("delete");
        }
        let s = EmbeddedStore::open(dir.path()).expect("reopen");
        let recs = s.load().expect("load");
        assert_eq!(recs, vec![ns("b", 11), ns("c", 12)]);
    }

    #[test]
    fn guarded_writes_compare_mod_revisions() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = EmbeddedStore::open(dir.path()).expect("open");
        let put = |r: Record, expected| Guarded {
            change: Change::Put(r),
            expected,
        };
        let r1 = s
            .apply_guarded(&[put(ns("a", 10), 0), put(ns("b", 11), 0)])
            .expect("create");
        assert_eq!(r1, 1);
        // A stale expectation writes nothing.
        let err = s
            .apply_guarded(&[put(ns("c", 12), 0), put(ns("a", 20), 0)])
            .expect_err("stale");
        assert!(
            matches!(&err, StoreError::Conflict { key, expected: 0, found: 1 } if key == "namespace/a"),
            "{err}"
        );
        assert!(err.to_string().contains("conflict"), "{err}");
        let r2 = s
            .apply_guarded(&[put(ns("a", 20), r1)])
            .expect("current expectation");
        assert_eq!(r2, 2);
        let l = s.list().expect("list");
        assert_eq!(l.revision, 2);
        assert_eq!(l.records, vec![(ns("a", 20), 2), (ns("b", 11), 1)]);
        // Deleting needs the current revision too; then the key is free again.
        assert!(s
            .apply_guarded(&[Guarded {
                change: Change::Delete(RecordKey::Namespace("b".into())),
                expected: 0,
            }])
            .is_err());
        s.apply_guarded(&[Guarded {
            change: Change::Delete(RecordKey::Namespace("b".into())),
            expected: 1,
        }])
        .expect("delete");
        s.apply_guarded(&[put(ns("b", 13), 0)]).expect("recreate");
    }

    #[test]
    fn unwritable_data_dir_is_a_clear_error() {
        let err = match EmbeddedStore::open(Path::new("/proc/flowmesh-cannot-exist")) {
            Err(e) => e.to_string(),
            Ok(_) => String::from("opened"),
        };
        assert!(
            err.contains("data directory /proc/flowmesh-cannot-exist"),
            "{err}"
        );
    }
}
