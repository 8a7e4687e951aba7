//! The embedded backend: a redb database file in `--data-dir`. Each `apply` is one durable
//! write transaction, so what the API acknowledged survives `kill -9`.

use super::{Change, Record, StateBackend, StoreError};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use std::path::{Path, PathBuf};

const OBJECTS: TableDefinition<&str, &[u8]> = TableDefinition::new("objects");

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
