//! The embedded backend: a redb database file in `--data-dir`. Each `apply` is one durable
//! write transaction, so what the API acknowledged survives `kill -9`. An I/O error (a full
//! disk) fails the transaction it hit and nothing of it is stored; redb then refuses every
//! later transaction of that handle, so the database is closed and opened again on the next
//! call (redb recovers it to its last commit), which works once the disk has room again.

use super::{Change, Guarded, Listing, Record, Revision, StateBackend, StoreError};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use std::path::{Path, PathBuf};
use std::sync::{PoisonError, RwLock};

const OBJECTS: TableDefinition<&str, &[u8]> = TableDefinition::new("objects");
/// Each record's mod revision (absent: written before revisions were kept, revision 0).
const REVISIONS: TableDefinition<&str, i64> = TableDefinition::new("revisions");
/// The store revision: one more per committed guarded transaction.
const META: TableDefinition<&str, i64> = TableDefinition::new("meta");
const REVISION_KEY: &str = "revision";

fn txn_err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Transaction(e.to_string())
}

/// A redb error, as a store error that says when the disk failed (and then that the handle
/// must be opened again).
fn redb_err(path: &Path, e: impl Into<redb::Error>) -> (StoreError, bool) {
    let e: redb::Error = e.into();
    let io = matches!(e, redb::Error::Io(_) | redb::Error::PreviousIo);
    if !io {
        return (StoreError::Transaction(e.to_string()), false);
    }
    let full = match &e {
        redb::Error::Io(io) => io.raw_os_error() == Some(28), // ENOSPC
        _ => false,
    };
    let why = if full {
        "the disk of the data directory is full: free space there"
    } else {
        "the disk of the data directory failed"
    };
    (
        StoreError::Transaction(format!(
            "{}: {e}: {why}; nothing of this change was stored, and writes are accepted again once the database can be written (switches keep their flows)",
            path.display()
        )),
        true,
    )
}

/// The embedded transactional store.
pub struct EmbeddedStore {
    /// None after an I/O error: opened again by the next call.
    db: RwLock<Option<Database>>,
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
        let db = Self::open_db(&path)?;
        let txn = db.begin_write().map_err(|e| redb_err(&path, e).0)?;
        txn.open_table(OBJECTS).map_err(|e| redb_err(&path, e).0)?;
        txn.commit().map_err(|e| redb_err(&path, e).0)?;
        Ok(EmbeddedStore {
            db: RwLock::new(Some(db)),
            path,
        })
    }

    fn open_db(path: &Path) -> Result<Database, StoreError> {
        Database::create(path).map_err(|e| StoreError::Open {
            path: path.display().to_string(),
            detail: format!(
                "{e} (is another flowmesh-controller using this --data-dir? is its disk full?)"
            ),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` on the open database (opening it again first if an I/O error closed it);
    /// an I/O error closes it.
    fn with_db<T>(
        &self,
        f: impl FnOnce(&Database) -> Result<T, (StoreError, bool)>,
    ) -> Result<T, StoreError> {
        {
            let guard = self.db.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(db) = guard.as_ref() {
                return match f(db) {
                    Ok(v) => Ok(v),
                    Err((e, io)) => {
                        drop(guard);
                        if io {
                            self.close();
                        }
                        Err(e)
                    }
                };
            }
        }
        let mut guard = self.db.write().unwrap_or_else(PoisonError::into_inner);
        if guard.is_none() {
            let db = Self::open_db(&self.path).map_err(|e| {
                StoreError::Transaction(format!(
                    "{e}; the database was closed after an I/O error and cannot be opened again yet; nothing of this change was stored (switches keep their flows)"
                ))
            })?;
            tracing::info!(path = %self.path.display(), "embedded database opened again after an I/O error");
            *guard = Some(db);
        }
        let Some(db) = guard.as_ref() else {
            return Err(StoreError::Transaction("embedded database not open".into()));
        };
        match f(db) {
            Ok(v) => Ok(v),
            Err((e, io)) => {
                if io {
                    // Closed now: the next call opens it again.
                    *guard = None;
                    tracing::warn!(path = %self.path.display(), error = %e, "embedded database closed after an I/O error");
                }
                Err(e)
            }
        }
    }

    fn close(&self) {
        let mut guard = self.db.write().unwrap_or_else(PoisonError::into_inner);
        if guard.take().is_some() {
            tracing::warn!(path = %self.path.display(), "embedded database closed after an I/O error; it is opened again on the next call");
        }
    }
}

impl StateBackend for EmbeddedStore {
    fn name(&self) -> &'static str {
        "embedded"
    }

    fn load(&self) -> Result<Vec<Record>, StoreError> {
        self.list()
            .map(|l| l.records.into_iter().map(|(r, _)| r).collect())
    }

    fn list(&self) -> Result<Listing, StoreError> {
        let path = self.path.clone();
        let e = |e: redb::Error| redb_err(&path, e);
        self.with_db(|db| {
            let txn = db.begin_read().map_err(|x| e(x.into()))?;
            let table = txn.open_table(OBJECTS).map_err(|x| e(x.into()))?;
            let (revision, revs) = match (txn.open_table(META), txn.open_table(REVISIONS)) {
                (Ok(meta), Ok(revs)) => (
                    meta.get(REVISION_KEY)
                        .map_err(|x| e(x.into()))?
                        .map(|v| v.value())
                        .unwrap_or(0),
                    Some(revs),
                ),
                // A database written before revisions were kept.
                _ => (0, None),
            };
            let mut out = Vec::new();
            for item in table.iter().map_err(|x| e(x.into()))? {
                let (k, v) = item.map_err(|x| e(x.into()))?;
                let key = k.value().to_string();
                let rec: Record = serde_json::from_slice(v.value()).map_err(|x| {
                    (
                        StoreError::Corrupt {
                            key: key.clone(),
                            detail: x.to_string(),
                        },
                        false,
                    )
                })?;
                let rev = match &revs {
                    Some(t) => t
                        .get(key.as_str())
                        .map_err(|x| e(x.into()))?
                        .map(|v| v.value())
                        .unwrap_or(0),
                    None => 0,
                };
                out.push((rec, rev));
            }
            Ok(Listing {
                revision,
                records: out,
            })
        })
    }

    fn apply_guarded(&self, changes: &[Guarded]) -> Result<Revision, StoreError> {
        let path = self.path.clone();
        let e = |e: redb::Error| redb_err(&path, e);
        self.with_db(|db| {
            let txn = db.begin_write().map_err(|x| e(x.into()))?;
            let revision;
            {
                let mut table = txn.open_table(OBJECTS).map_err(|x| e(x.into()))?;
                let mut revs = txn.open_table(REVISIONS).map_err(|x| e(x.into()))?;
                let mut meta = txn.open_table(META).map_err(|x| e(x.into()))?;
                revision = meta
                    .get(REVISION_KEY)
                    .map_err(|x| e(x.into()))?
                    .map(|v| v.value())
                    .unwrap_or(0)
                    + 1;
                for (key, g) in super::coalesce(changes) {
                    let k = key.as_string();
                    let found = revs
                        .get(k.as_str())
                        .map_err(|x| e(x.into()))?
                        .map(|v| v.value());
                    let exists = table.get(k.as_str()).map_err(|x| e(x.into()))?.is_some();
                    let found = match (exists, found) {
                        (false, _) => 0,
                        (true, r) => r.unwrap_or(0),
                    };
                    if found != g.expected {
                        // Dropping the transaction without commit aborts it.
                        return Err((
                            StoreError::Conflict {
                                key: k,
                                expected: g.expected,
                                found,
                            },
                            false,
                        ));
                    }
                    match &g.change {
                        Change::Put(rec) => {
                            let bytes = serde_json::to_vec(rec).map_err(|x| (txn_err(x), false))?;
                            table
                                .insert(k.as_str(), bytes.as_slice())
                                .map_err(|x| e(x.into()))?;
                            revs.insert(k.as_str(), revision).map_err(|x| e(x.into()))?;
                        }
                        Change::Delete(_) => {
                            table.remove(k.as_str()).map_err(|x| e(x.into()))?;
                            revs.remove(k.as_str()).map_err(|x| e(x.into()))?;
                        }
                    }
                }
                meta.insert(REVISION_KEY, revision)
                    .map_err(|x| e(x.into()))?;
            }
            txn.commit().map_err(|x| e(x.into()))?;
            Ok(revision)
        })
    }

    fn apply(&self, changes: &[Change]) -> Result<(), StoreError> {
        let path = self.path.clone();
        let e = |e: redb::Error| redb_err(&path, e);
        self.with_db(|db| {
            let txn = db.begin_write().map_err(|x| e(x.into()))?;
            {
                let mut table = txn.open_table(OBJECTS).map_err(|x| e(x.into()))?;
                for c in changes {
                    match c {
                        Change::Put(rec) => {
                            let bytes = serde_json::to_vec(rec).map_err(|x| (txn_err(x), false))?;
                            table
                                .insert(rec.key().as_string().as_str(), bytes.as_slice())
                                .map_err(|x| e(x.into()))?;
                        }
                        Change::Delete(key) => {
                            table
                                .remove(key.as_string().as_str())
                                .map_err(|x| e(x.into()))?;
                        }
                    }
                }
            }
            txn.commit().map_err(|x| e(x.into()))
        })
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

    /// A tmpfs of `mib` MiB on `dir`, unmounted on drop (needs root, as the lab tests).
    struct Tmpfs(PathBuf);

    impl Tmpfs {
        fn mount(dir: &Path, mib: u64) -> Tmpfs {
            let st = std::process::Command::new("mount")
                .args([
                    "-t",
                    "tmpfs",
                    "-o",
                    &format!("size={mib}m"),
                    "flowmesh-test",
                ])
                .arg(dir)
                .status()
                .expect("run mount");
            assert!(st.success(), "mount a tmpfs on {} (root?)", dir.display());
            Tmpfs(dir.to_path_buf())
        }
    }

    impl Drop for Tmpfs {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .status();
        }
    }

    /// Fills the filesystem of `dir` with one file, as another process on the same disk would.
    fn fill(dir: &Path) -> PathBuf {
        use std::io::Write;
        let path = dir.join("filler");
        let mut f = std::fs::File::create(&path).expect("filler");
        let chunk = vec![0u8; 64 << 10];
        while f.write_all(&chunk).is_ok() {}
        let _ = f.sync_all();
        path
    }

    fn big_ns(name: &str, netid: u32) -> Record {
        let mut r = ns(name, netid);
        if let Record::Namespace(n) = &mut r {
            n.labels.insert("pad".into(), "x".repeat(16 << 10));
        }
        r
    }

    #[test]
    fn a_full_disk_refuses_writes_clearly_loses_nothing_and_writes_work_again_once_freed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let _fs = Tmpfs::mount(dir.path(), 8);
        let data = dir.path().join("data");
        let s = EmbeddedStore::open(&data).expect("open");
        let put = |r: Record, expected| Guarded {
            change: Change::Put(r),
            expected,
        };
        s.apply_guarded(&[put(ns("before", 10), 0)])
            .expect("write with room");
        let filler = fill(dir.path());
        // Writes go on while the database file has room of its own; then they are refused.
        let mut acked = vec![ns("before", 10)];
        let mut refused = None;
        for i in 0..400u32 {
            let r = big_ns(&format!("full-{i}"), 100 + i);
            match s.apply_guarded(&[put(r.clone(), 0)]) {
                Ok(_) => acked.push(r),
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        let e = refused
            .expect("no write was refused on a full disk")
            .to_string();
        assert!(
            e.contains("the disk of the data directory is full")
                && e.contains("nothing of this change was stored"),
            "{e}"
        );
        // Refused again while full, with the reason (not only redb's "previous I/O error").
        let again = s
            .apply_guarded(&[put(ns("while-full", 9), 0)])
            .expect_err("still full")
            .to_string();
        assert!(
            again.contains("full") || again.contains("cannot be opened again"),
            "{again}"
        );
        // Room again: writes are accepted by the same store, and nothing acknowledged is lost.
        std::fs::remove_file(&filler).expect("free");
        s.apply_guarded(&[put(ns("after", 11), 0)])
            .expect("a write once the disk has room");
        acked.push(ns("after", 11));
        let key = |r: &Record| r.key().as_string();
        let mut want: Vec<String> = acked.iter().map(key).collect();
        want.sort();
        let got = |s: &EmbeddedStore| -> Vec<String> {
            let mut v: Vec<String> = s.load().expect("load").iter().map(key).collect();
            v.sort();
            v
        };
        assert_eq!(got(&s), want);
        drop(s);
        let s = EmbeddedStore::open(&data).expect("reopen");
        assert_eq!(got(&s), want);
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
